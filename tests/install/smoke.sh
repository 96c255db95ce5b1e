#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# An installed sluice, from its installed files only (issue 21): the daemon from PREFIX/sbin, a
# dataset and a spec made with PREFIX/bin/sluicectl, a reader from Python (`import sluice`: no
# SLUICE_LIBRARY, no LD_LIBRARY_PATH, not from the source tree) and one in C compiled with
# `pkg-config --cflags --libs sluice`, each counting every row of the pipeline; the units
# verified where systemd-analyze exists.
# Usage: tests/install/smoke.sh PREFIX     (/usr: the Debian packages)     Exit 0 pass, 1 fail.
set -euo pipefail
prefix=$(cd "$1" && pwd)
src=$(cd "$(dirname "$0")/../.." && pwd)
work=$(mktemp -d)
daemon=
cleanup() {
	[ -n "$daemon" ] && kill "$daemon" 2>/dev/null && wait "$daemon" 2>/dev/null
	rm -rf "$work"
}
trap cleanup EXIT
# shellcheck source=tests/install/lib.sh
. "$src/tests/install/lib.sh"
unset SLUICE_LIBRARY SLUICE_BUILD_DIR LD_LIBRARY_PATH SLUICE_SOCKET || true

for f in sbin/sluiced bin/sluicectl include/sluice/sluice.h; do
	[ -e "$prefix/$f" ] || fail "$prefix/$f is not installed"
done
pc=$(find "$prefix/lib" "$prefix/share" -name sluice.pc 2>/dev/null | head -1)
[ -n "$pc" ] || fail "no sluice.pc under $prefix"
lib=$(find "$prefix/lib" -name 'libsluice.so.0' | head -1)
[ -n "$lib" ] || fail "no libsluice.so.0 under $prefix"
pkg=$(find "$prefix/lib" -path '*-packages/sluice/_installed.py' | head -1)
[ -n "$pkg" ] || fail "the Python package is not installed under $prefix"
ok "programs, header, library, sluice.pc, the Python package are installed"

serve_smoke "$prefix/sbin/sluiced" "$prefix/bin/sluicectl" 3000
listed=$("$prefix/bin/sluicectl" --socket "$sock" list)
case "$listed" in *smoke*) ;; *) fail "sluiced does not serve smoke: $listed $(cat "$work/sluiced.log")" ;; esac
ok "the installed sluiced serves a config-dir pipeline"
# its config file: SYSCONFDIR/sluice/sluiced.conf (/etc for prefix /usr), every key commented
# out, read by the installed sluiced at its start
conf="$prefix/etc/sluice/sluiced.conf"
[ "$prefix" = /usr ] && conf=/etc/sluice/sluiced.conf
[ -f "$conf" ] || fail "$conf is not installed"
grep -q "^#memory = " "$conf" || fail "$conf: no commented-out memory key"
grep -q "settings: $conf," "$work/sluiced.log" || fail "sluiced did not read $conf: $(cat "$work/sluiced.log")"
ok "the installed sluiced.conf is read at start"

# Python: from anywhere but the source tree; the package's directory on the path only when
# the prefix is not one /usr/bin/python3 reads by itself
pydir=$(dirname "$(dirname "$pkg")")
out=$(cd / && PYTHONPATH="$pydir" /usr/bin/python3 - "$sock" <<'PY'
import sys
import sluice
assert "/libclient/python/" not in sluice.__file__, sluice.__file__
rows = 0
with sluice.attach("smoke", socket=sys.argv[1]) as r:
    while True:
        b = r.next(timeout=60)
        if b is None:
            break
        rows += len(b["label"])
        b.release()
print("rows", rows, sluice.__file__)
PY
) || fail "python: $out"
case "$out" in "rows 3000 $prefix"*) ;; *) fail "python read: $out" ;; esac
ok "import sluice (no environment variable) reads every row: $out"

export PKG_CONFIG_PATH
PKG_CONFIG_PATH=$(dirname "$pc")
libdir=$(pkg-config --variable=libdir sluice)
# shellcheck disable=SC2046
cc -std=c11 -Wall -Werror -o "$work/read_rows" "$src/examples/read_rows.c" \
	$(pkg-config --cflags --libs sluice) -Wl,-rpath,"$libdir" || fail "cc with pkg-config"
out=$("$work/read_rows" smoke "$sock") || fail "the C reader: $out"
[ "$out" = "rows 3000 batches 30" ] || fail "the C reader read: $out"
ok "a C reader built with pkg-config reads every row: $out"

unit=$(find "$prefix" /lib/systemd/system -name sluiced.service 2>/dev/null | head -1)
[ -n "$unit" ] || fail "no sluiced.service under $prefix"
grep "^ExecStart=$prefix/sbin/sluiced " "$unit" >/dev/null || fail "$unit: ExecStart is not the installed sluiced"
if command -v systemd-analyze >/dev/null 2>&1; then # it needs no running systemd
	systemd-analyze verify "$unit" || fail "systemd-analyze verify $unit"
	ok "systemd-analyze verify passes on the unit"
else
	echo "SKIP systemd-analyze verify: no systemd-analyze here"
fi
echo "install smoke test passed"
