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
