#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# The Debian packages (issue 21): sluiced, libsluice0, libsluice-dev, python3-sluice, built with
# dpkg-buildpackage from a clean copy of the checkout's files (git ls-files: no build dir goes
# in), into OUT (default build-deb/).
# Usage: tools/package.sh [OUT]
set -euo pipefail
cd "$(dirname "$0")/.."
out=$(mkdir -p "${1:-build-deb}" && cd "${1:-build-deb}" && pwd)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
mkdir "$work/sluice"
git ls-files -z | tar --null -T - -cf - | tar -xf - -C "$work/sluice"
(cd "$work/sluice" && dpkg-buildpackage -b -us -uc >"$work/build.log" 2>&1) || {
	tail -n 60 "$work/build.log"
	echo "package: dpkg-buildpackage failed (the log's end above)" >&2
	exit 1
}
rm -f "$out"/*.deb
mv "$work"/*.deb "$out"/
ls "$out"
