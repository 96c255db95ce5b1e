#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# The peers and oracles that Debian lacks, in a virtual environment outside the repository:
#   tools/peers/venv.sh [--oracle]
# makes (or reuses) $SLUICE_PEERS_VENV (default ${XDG_CACHE_HOME:-~/.cache}/sluice/peers) with
# Debian's /usr/bin/python3 and installs from Python's package index: tensorflow-cpu (the oracle
# and the tf.data peer), and without --oracle also tfrecord (the PyTorch TFRecord reader) and
# nvidia-dali-cuda130 (DALI; its CPU pipelines run without a GPU). Prints the venv's python on
# stdout; progress on stderr. Exit 1 when it cannot be made (no network, no python3-venv): the
# tests that need it then skip. Nothing of the peers enters the repository; the project itself
# keeps working with Debian's packages alone.
set -euo pipefail

oracle=0
case "${1:-}" in
--oracle) oracle=1 ;;
"") ;;
*) echo "usage: tools/peers/venv.sh [--oracle]" >&2; exit 2 ;;
esac
venv=${SLUICE_PEERS_VENV:-${XDG_CACHE_HOME:-$HOME/.cache}/sluice/peers}
pkgs=(tensorflow-cpu)
if [ "$oracle" = 0 ]; then
	pkgs+=(tfrecord nvidia-dali-cuda130)
fi
stamp="$venv/.sluice-installed"
have() { # every package already installed by an earlier run
	[ -x "$venv/bin/python" ] && [ -f "$stamp" ] || return 1
	for p in "${pkgs[@]}"; do grep -qx "$p" "$stamp" || return 1; done
}
if ! have; then
	if [ ! -x "$venv/bin/python" ]; then
		mkdir -p "$(dirname "$venv")"
		/usr/bin/python3 -m venv "$venv" >&2 || { echo "venv.sh: python3 -m venv failed (apt-get install python3-venv)" >&2; exit 1; }
	fi
	echo "venv.sh: installing ${pkgs[*]} into $venv" >&2
	if ! "$venv/bin/pip" install --quiet --disable-pip-version-check "${pkgs[@]}" >&2; then
		echo "venv.sh: pip install ${pkgs[*]} failed" >&2
		exit 1
	fi
	{ printf '%s\n' "${pkgs[@]}"; cat "$stamp" 2>/dev/null || true; } | sort -u > "$stamp.new"
	mv "$stamp.new" "$stamp"
fi
if ! "$venv/bin/python" -c "import tensorflow" >/dev/null 2>&1; then
	echo "venv.sh: tensorflow does not import in $venv" >&2
	exit 1
fi
echo "$venv/bin/python"
