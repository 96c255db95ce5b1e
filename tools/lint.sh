#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Rejects what CONVENTIONS.md forbids in C sources: strcpy, sprintf, strtok, atoi (and their
# unbounded cousins), files that lack the SPDX line, and files that .clang-format would change
# (clang-format 14, Debian 12's; fix with: git ls-files '*.c' '*.h' | xargs clang-format -i).
set -euo pipefail
cd "$(dirname "$0")/.."
status=0
files=$(git ls-files '*.c' '*.h' '*.c.in')
if grep -nE '\b(strcpy|strcat|sprintf|vsprintf|strtok|atoi|atol|atoll|gets)\s*\(' $files; then
	echo "lint: forbidden function above (use snprintf, strtok_r, strtoull with checks)" >&2
	status=1
fi
for f in $files; do
	if ! head -n 1 "$f" | grep -q 'SPDX-License-Identifier'; then
		echo "lint: $f: first line is not an SPDX-License-Identifier" >&2
		status=1
	fi
done
# The engine's stages (docs/pipeline.md) know their neighbours only through the callbacks the
# driver gives them: a stage's file includes no other stage's header, and no file of
# daemon/pipeline/ includes another unit's *_internal.h (X.c and X_*.c may include X_internal.h).
stages="files read frame window interleave shuffle assemble decode deliver"
for st in $stages; do
	for f in $(git ls-files "daemon/pipeline/$st.c" "daemon/pipeline/${st}_*.c" "daemon/pipeline/$st.h"); do
		for other in $stages rowparse chain driver; do
			case "$other" in "$st") continue ;; esac
			[ "$st" = assemble ] && [ "$other" = rowparse ] && continue # parse = assemble + rowparse
			# the parse tasks run the decode stage's chain on each row, in place in the batch
			[ "$st" = assemble ] && [ "$other" = decode ] && continue
			if grep -qE "#include \"(daemon/pipeline/)?${other}(_internal)?\.h\"" "$f"; then
				echo "lint: $f: the $st stage includes $other's header (stages meet only in the driver)" >&2
				status=1
			fi
		done
	done
done
for f in $(git ls-files 'daemon/pipeline/*.c' 'daemon/pipeline/*.h'); do
	base=$(basename "$f"); base=${base%.[ch]}; base=${base%_internal}
	for inc in $(grep -oE '#include "[a-z_/]*_internal\.h"' "$f" | sed -E 's/.*"(.*)"/\1/'); do
		unit=$(basename "$inc" _internal.h)
		case "$base" in "$unit" | "$unit"_*) ;; *)
			echo "lint: $f includes $inc, the internals of another unit" >&2
			status=1 ;;
		esac
	done
done
# The tools use libsluice's public API only (include/sluice/sluice.h).
if grep -n 'libclient/client_internal\.h' $(git ls-files 'tools/*.c' 'tools/*.h'); then
	echo "lint: a tool includes libclient/client_internal.h (use include/sluice/sluice.h)" >&2
	status=1
fi
# Every pytest file is a meson test of its own (tests/python/meson.build): one left out would
# never run, and no count would show it.
for f in $(git ls-files 'tests/python/test_*.py'); do
	n=$(basename "$f" .py)
	if ! grep -qE "'$n(\.py)?'" tests/python/meson.build; then
		echo "lint: $f is not a test in tests/python/meson.build" >&2
		status=1
	fi
done
# A test waits on its condition, never on a sleep (docs/testing.md, "Waiting"): each sleep in
# tests/ says what it is, on its line or the one above: a poll of a condition, or the pace of
# a workload ("polls", "pace", "workload").
if ! git ls-files 'tests/*.c' 'tests/*.h' 'tests/*.py' | xargs awk '
	/(^|[^a-z_])(u?sleep|nanosleep|sleep_ms|time\.sleep)\(/ && !/(void|def) +sleep_ms/ &&
	    !/[Pp]oll|pace|workload/ && prev !~ /[Pp]oll|pace|workload/ {
		printf "%s:%d: %s\n", FILENAME, FNR, $0; bad = 1 }
	{ prev = $0 } END { exit bad }'; then
	echo "lint: a sleep in tests/ above says neither what it polls nor what it paces" >&2
	status=1
fi
if command -v clang-format >/dev/null; then
	for f in $(git ls-files '*.c' '*.h'); do
		if ! clang-format "$f" | cmp -s - "$f"; then
			echo "lint: $f: not formatted (clang-format -i $f)" >&2
			status=1
		fi
	done
else
	echo "lint: clang-format not found (tools/setup.sh installs it)" >&2
	status=1
fi
exit $status
