#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# A wheel of the Python package that carries libsluice.so (issue 21), as DALI's and PyTorch's
# wheels carry their libraries: `pip install sluice-*.whl` then works in any venv of any
# Python >= 3.9 with numpy from PyPI, no variable to set. The library is built in BUILD
# (default build-wheel/: release, no tests); the wheel goes to OUT (default BUILD/dist).
# Usage: tools/wheel.sh [--build BUILD] [OUT]
set -euo pipefail
cd "$(dirname "$0")/.."
build=build-wheel
if [ "${1:-}" = --build ]; then
	build=$2
	shift 2
fi
out=$(mkdir -p "${1:-$build/dist}" && cd "${1:-$build/dist}" && pwd)
if [ ! -f "$build/build.ninja" ]; then
	meson setup "$build" -Dtests=false -Dbench=false -Dbuildtype=release >/dev/null
fi
ninja -C "$build" >/dev/null
stage=$(mktemp -d)
trap 'rm -rf "$stage"' EXIT
cp -r libclient/python/. "$stage/"
rm -rf "$stage/sluice/__pycache__" "$stage/meson.build" "$stage/sluice/_installed.py.in"
cp -L "$build/libclient/libsluice.so.0" "$stage/sluice/libsluice.so.0"
strip --strip-unneeded "$stage/sluice/libsluice.so.0"
rm -f "$out"/sluice-*.whl
/usr/bin/python3 -m pip wheel --quiet --no-deps --no-build-isolation -w "$out" "$stage" >&2
ls "$out"/sluice-*.whl
