#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Soak: the chaos test (tests/python/test_chaos.py) on seeds drawn anew, N runs (default 10),
# over an existing build (tools/test.sh makes build/). The test suite runs it on a fixed seed,
# so that CI's result never depends on a draw; here each seed is printed before its run, and a
# failure replays with SLUICE_CHAOS_SEED=SEED meson test -C build py_chaos.
# Usage: tools/soak.sh [N] [BUILD_DIR]
set -euo pipefail
cd "$(dirname "$0")/.."
n=${1:-10}
dir=${2:-build}
[ -f "$dir/build.ninja" ] || { echo "soak: no build in $dir (run tools/test.sh --quick first)" >&2; exit 2; }
ninja -C "$dir" >/dev/null
failed=()
for i in $(seq 1 "$n"); do
	seed=$(( $(od -An -N4 -tu4 /dev/urandom) % 2147483647 ))
	echo "soak $i/$n: SLUICE_CHAOS_SEED=$seed"
	if ! SLUICE_CHAOS_SEED=$seed meson test -C "$dir" py_chaos --logbase "soak-$seed" >/dev/null; then
		echo "soak: seed $seed FAILED (log: $dir/meson-logs/soak-$seed.txt)"
		failed+=("$seed")
	fi
done
echo "soak: $((n - ${#failed[@]})) passed, ${#failed[@]} failed${failed:+ (seeds: ${failed[*]})}"
[ ${#failed[@]} -eq 0 ]
