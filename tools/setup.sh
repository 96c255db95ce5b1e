#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Installs what sluice needs to build and test on Debian 12, only what is missing.
set -euo pipefail

pkgs=(meson ninja-build gcc clang clang-format pkg-config help2man debhelper libclang-rt-14-dev
      liburing-dev libnuma-dev libhwloc-dev zlib1g-dev libcmocka-dev libjansson-dev
      libjpeg62-turbo-dev libpng-dev
      python3 python3-protobuf protobuf-compiler python3-numpy python3-pytest
      python3-torch python3-pil python3-torchvision
      python3-venv python3-pip python3-setuptools python3-wheel)

missing=()
for p in "${pkgs[@]}"; do
	if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
		missing+=("$p")
	fi
done
[ ${#missing[@]} -eq 0 ] && exit 0

sudo=""
if [ "$(id -u)" -ne 0 ]; then
	command -v sudo >/dev/null || { echo "setup: need root (or sudo) to install: ${missing[*]}" >&2; exit 1; }
	sudo=sudo
fi
echo "setup: installing ${missing[*]}"
$sudo apt-get update -qq
DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
