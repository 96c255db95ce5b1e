#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# The wheel that carries libsluice.so (tools/wheel.sh), in fresh virtual environments (no
# system site packages: numpy from Python's package index) of /usr/bin/python3 and, where pyenv
# has them, the oldest and newest Pythons >= 3.9: `pip install` it, then read every row of a
# pipeline of a real sluiced with no variable set. Exit 0 pass, 1 fail, 77 skip (no venv module
# or no package index).
# Usage: tests/install/wheel_smoke.sh WHEEL SLUICED SLUICECTL
set -euo pipefail
wheel=$(cd "$(dirname "$1")" && pwd)/$(basename "$1")
sluiced=$2
sluicectl=$3
work=$(mktemp -d)
daemon=
cleanup() {
	[ -n "$daemon" ] && kill "$daemon" 2>/dev/null && wait "$daemon" 2>/dev/null
	rm -rf "$work"
}
trap cleanup EXIT
# shellcheck source=tests/install/lib.sh
. "$(dirname "$0")/lib.sh"
unset SLUICE_LIBRARY SLUICE_BUILD_DIR LD_LIBRARY_PATH SLUICE_SOCKET PYTHONPATH || true

serve_smoke "$sluiced" "$sluicectl" 2000

pythons=(/usr/bin/python3)
if root=$(pyenv root 2>/dev/null); then
	# the oldest and the newest 3.x >= 3.9 that pyenv has
	mapfile -t found < <(ls -d "$root"/versions/3.* 2>/dev/null | sort -V |
		awk -F/ '{split($NF, v, "."); if (v[2] >= 9) print $0 "/bin/python3"}')
	if [ "${#found[@]}" -gt 0 ]; then
		pythons+=("${found[0]}")
		[ "${#found[@]}" -gt 1 ] && pythons+=("${found[-1]}")
	fi
fi
tested=0
for py in "${pythons[@]}"; do
	[ -x "$py" ] || continue
	venv="$work/venv-$tested"
	if ! "$py" -m venv "$venv" >/dev/null 2>&1; then
		echo "SKIP $py: no venv module (Debian: python3-venv)"
		continue
	fi
	if ! "$venv/bin/pip" install --quiet --disable-pip-version-check "$wheel" >"$work/pip.log" 2>&1; then
		if grep -qiE "could not find|connection|network|resolve|timed out" "$work/pip.log"; then
			echo "SKIP $py: numpy from the package index cannot be had: $(tail -1 "$work/pip.log")"
			continue
		fi
		cat "$work/pip.log"
		fail "pip install $wheel with $py"
	fi
	out=$(cd "$work" && "$venv/bin/python" - "$sock" <<'PY'
import sys
import sluice
rows = 0
with sluice.attach("smoke", socket=sys.argv[1]) as r:
    while True:
        b = r.next(timeout=60)
        if b is None:
            break
        rows += len(b["label"])
        b.release()
print("rows", rows, "python", sys.version.split()[0], "library", sluice._lib.path)
PY
) || fail "$py: $out"
	case "$out" in "rows 2000 python "*"library $venv/"*) ;; *) fail "$py read: $out" ;; esac
	echo "ok   $out"
	tested=$((tested + 1)) # (the next reader of the ended pipeline gets its whole epoch)
done
[ "$tested" -gt 0 ] || exit 77
echo "wheel smoke test passed ($tested Pythons)"
