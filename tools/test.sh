#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# The whole test suite: installs what is missing, builds, and runs every suite
#   1. a warnings-as-errors build, with io_uring (where the kernel allows it), every test; then
#      an installation into a prefix of its own, and a smoke test from the installed files;
#   2. the tests that read files through the io engine (suite files) with io_uring forced off
#      (the pread fallback);
#   3. an ASan+UBSan build: every test but the slow ones and the pytest files (a sanitizer's
#      libsluice.so cannot be loaded into python);
#   4. a ThreadSanitizer build of the concurrency tests, but the slow ones;
#   5. with --fuzz-seconds N: each libFuzzer target for N seconds (clang);
#   6. the Debian packages: built, installed, the smoke test from /usr, removed.
# Every test reports its cases to meson in TAP; at the end (or where a step fails)
# tools/test_summary.py prints what each run ran, every skip with its reason, and a last line
# "sluice: N passed, N failed, N skipped", and fails on a skip this machine should not need
# (its docstring says the rule; CI=true: the testdata must be there).
# Usage: tools/test.sh [--fuzz-seconds N] [--quick]   (--quick: step 1 only)
set -euo pipefail
cd "$(dirname "$0")/.."

fuzz=0
quick=0
while [ $# -gt 0 ]; do
	case "$1" in
	--fuzz-seconds) fuzz="$2"; shift 2 ;;
	--quick) quick=1; shift ;;
	*) echo "usage: tools/test.sh [--fuzz-seconds N] [--quick]" >&2; exit 2 ;;
	esac
done

tools/setup.sh
jobs=$(nproc)

step() { printf '\n==== %s\n' "$*"; }

configure() { # dir, options... (quiet unless it fails)
	local dir=$1; shift
	local log
	log=$(mktemp)
	if [ ! -f "$dir/build.ninja" ]; then
		meson setup "$dir" "$@" >"$log" 2>&1 || { cat "$log"; rm -f "$log"; return 1; }
	else
		meson configure "$dir" "$@" >"$log" 2>&1 || { cat "$log"; rm -f "$log"; return 1; }
	fi
	rm -f "$log"
}

runs=()        # LABEL=LOG[:TAGS] for tools/test_summary.py
peer_missing=0
summary() {
	local rc=$?
	trap - EXIT
	[ ${#runs[@]} -gt 0 ] || exit "$rc"
	local args=()
	[ "${CI:-}" = true ] && args+=(--ci)
	[ "$peer_missing" = 1 ] && args+=(--peer-missing)
	/usr/bin/python3 tools/test_summary.py "${args[@]}" "${runs[@]}" || { [ "$rc" = 0 ] && rc=1; }
	exit "$rc"
}
trap summary EXIT

run_tests() { # label, dir, skip tags this run may have ("" none), extra meson test args...
	local label=$1 dir=$2 tags=$3 log a setup=""; shift 3
	for a in "$@"; do [ "$setup" = next ] && setup=$a; [ "$a" = --setup ] && setup=next; done
	log="$dir/meson-logs/testlog-$label${setup:+-$setup}.json" # meson adds the setup's name
	runs+=("$label=$log${tags:+:$tags}")
	meson test -C "$dir" --print-errorlogs --num-processes "$jobs" --logbase "testlog-$label" "$@"
}

step "lint"
tools/lint.sh

step "TensorFlow for the oracle tests (a venv outside the repository)"
if tf_python=$(tools/peers/venv.sh --oracle); then
	export SLUICE_TF_PYTHON="$tf_python"
else
	echo "no TensorFlow venv: the oracle tests (tf_oracle) skip"
	peer_missing=1
fi

step "build (gcc, -Werror)"
configure build -Dwerror=true -Dbuildtype=debugoptimized
ninja -C build
step "tests (io engine: auto)"
run_tests main build ""
[ "$quick" = 1 ] && exit 0

step "install into a prefix of its own; the smoke test from the installed files only"
configure build-install --prefix="$PWD/build-install/prefix" -Dtests=false -Dbench=false \
	-Dbuildtype=release
ninja -C build-install
rm -rf build-install/prefix
meson install -C build-install --no-rebuild --quiet
tests/install/smoke.sh build-install/prefix

step "a wheel that carries libsluice.so, pip-installed into fresh venvs (numpy from PyPI)"
tools/wheel.sh --build build-install build-install/dist
wheel_rc=0
tests/install/wheel_smoke.sh build-install/dist/sluice-*.whl build-install/prefix/sbin/sluiced \
	build-install/prefix/bin/sluicectl || wheel_rc=$?
[ "$wheel_rc" = 0 ] || [ "$wheel_rc" = 77 ]

step "tests that read files through the io engine (suite files), pread fallback forced"
run_tests pread build "" --setup pread --suite files --no-suite slow

step "build and tests under ASan+UBSan"
configure build-asan -Dwerror=true -Db_sanitize=address,undefined -Db_lundef=false -Dbuildtype=debug
ninja -C build-asan
ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1 \
	run_tests asan build-asan sanitizer --timeout-multiplier 4 --no-suite slow --no-suite python

step "concurrency tests under ThreadSanitizer"
configure build-tsan -Dwerror=true -Db_sanitize=thread -Db_lundef=false -Dbuildtype=debug
ninja -C build-tsan
TSAN_OPTIONS=halt_on_error=1 run_tests tsan build-tsan sanitizer --suite concurrency --no-suite slow \
	--timeout-multiplier 4

if [ "$fuzz" -gt 0 ]; then
	step "fuzzing each target for ${fuzz}s (clang, libFuzzer)"
	if [ ! -f build-fuzz/build.ninja ]; then
		CC=clang meson setup build-fuzz -Dfuzz=true -Db_sanitize=address,undefined \
			-Db_lundef=false -Dbuildtype=debugoptimized
	fi
	ninja -C build-fuzz $(cd tests/fuzz && ls fuzz_*.c | sed 's|^|tests/fuzz/|; s|\.c$||')
	fuzz_one() { # name: one target for $fuzz seconds from a copy of its corpus
		local name=$1 work rc=0
		work=$(mktemp -d)
		cp -r "tests/fuzz/corpus/$name/." "$work/"
		build-fuzz/tests/fuzz/fuzz_"$name" -max_total_time="$fuzz" -max_len=65536 \
			-print_final_stats=0 -artifact_prefix=tests/fuzz/ "$work" \
			>"build-fuzz/fuzz-$name.log" 2>&1 || rc=$?
		rm -rf "$work"
		echo "fuzz $name: $(tail -n 1 "build-fuzz/fuzz-$name.log")"
		[ "$rc" = 0 ] || { tail -n 40 "build-fuzz/fuzz-$name.log"; echo "fuzz $name FAILED"; }
		return "$rc"
	}
	# one target a core at a time: the same seconds each, in a fraction of the time
	fuzz_failed=0 running=0
	for t in tests/fuzz/fuzz_*.c; do
		name=$(basename "$t" .c); name=${name#fuzz_}
		if [ "$running" -ge "$jobs" ]; then
			wait -n || fuzz_failed=1
			running=$((running - 1))
		fi
		fuzz_one "$name" &
		running=$((running + 1))
	done
	while [ "$running" -gt 0 ]; do
		wait -n || fuzz_failed=1
		running=$((running - 1))
	done
	[ "$fuzz_failed" = 0 ]
fi
step "Debian packages: built, installed, the smoke test from /usr, removed"
as_root() { if [ "$(id -u)" = 0 ]; then "$@"; else sudo "$@"; fi; }
tools/package.sh build-deb
as_root apt-get install -y ./build-deb/sluiced_*.deb ./build-deb/libsluice0_*.deb \
	./build-deb/libsluice-dev_*.deb ./build-deb/python3-sluice_*.deb >/dev/null
smoke_rc=0
tests/install/smoke.sh /usr || smoke_rc=$?
as_root apt-get purge -y sluiced libsluice0 libsluice-dev python3-sluice >/dev/null
[ "$smoke_rc" = 0 ]

step "all tests passed"
