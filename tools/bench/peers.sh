#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# sluice against tf.data, DALI and the tfrecord reader (issue 17), one command:
#
#   tools/bench/peers.sh [--build DIR] [--quick] [--repeat N] [-- peers.py options]
#
# 1. makes or reuses the peers' venv outside the repository (tools/peers/venv.sh: tensorflow-cpu,
#    nvidia-dali-cuda130 for its CPU pipelines, tfrecord; ~/.cache/sluice/peers), and a directory
#    holding only the tfrecord package (and its crc32c) so that Debian's python and torch run the
#    tfrecord reader under their DataLoader (the venv has no torch; PyPI's pulls in gigabytes of
#    CUDA libraries, and the venv's numpy 2 would break Debian's torch 1.13);
# 2. checks the build (default build-rel: `meson setup build-rel -Dbuildtype=release && ninja
#    -C build-rel`; a debug build measures nothing useful);
# 3. runs tools/bench/peers.py with Debian's /usr/bin/python3, which generates the datasets with
#    `sluicectl gen` (ctr, image, seq, jpeg; cached in ~/.cache/sluice/bench-peers with
#    tfrecord2idx's index beside each), and runs every pipeline through sluice (a fresh sluiced,
#    a Python reader attached by name) and through each peer, in processes of their own,
#    alternating run by run.
#
# What it measures, per pipeline and peer: records per second delivered to the Python loop as
# numpy arrays (wall clock from the moment the imports are done: pipeline construction, daemon
# start-up and the whole epoch included), and CPU-seconds of every process involved per record
# (sluice: the reader and the daemon; tf.data and DALI: every thread of their process; the
# DataLoader: the loop and its workers), medians of alternated runs with their range. Output:
# `bench=peer_run ...` per run, `bench=peer pipeline=P peer=X sluice_per_s=... peer_per_s=...
# speedup=... sluice_cpu_us=... peer_cpu_us=... cpu_ratio=...` per pair, then a markdown table.
# --quick: small datasets and one run of each (a few minutes on 2 cores); the default is 3 runs
# on the full datasets. docs/BENCHMARKS.md, "sluice against tf.data, DALI and tfrecord".
set -euo pipefail
cd "$(dirname "$0")/../.."
build=build-rel
pass=()
while [ $# -gt 0 ]; do
	case "$1" in
	--build) build=$2; shift 2 ;;
	--build=*) build=${1#--build=}; shift ;;
	--quick) pass+=(--quick); shift ;;
	--repeat) pass+=(--repeat "$2"); shift 2 ;;
	--repeat=*) pass+=("$1"); shift ;;
	--) shift; pass+=("$@"); break ;;
	-h | --help) sed -n '3,28p' "$0"; exit 0 ;;
	*) echo "usage: tools/bench/peers.sh [--build DIR] [--quick] [--repeat N] [-- peers.py options]" >&2; exit 2 ;;
	esac
done
if [ ! -x "$build/daemon/sluiced" ] || [ ! -x "$build/tools/sluicectl" ]; then
	echo "peers.sh: no build in $build (meson setup $build -Dbuildtype=release && ninja -C $build)" >&2
	exit 1
fi
if ! /usr/bin/python3 -c 'import json,sys; o={x["name"]:x["value"] for x in json.load(open(sys.argv[1]))}; sys.exit(o["buildtype"]!="release")' "$build/meson-info/intro-buildoptions.json" 2>/dev/null; then
	echo "peers.sh: warning: $build is not a release build; the figures will not mean much" >&2
fi
py=$(tools/peers/venv.sh)
site=$("$py" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
tfr=$(dirname "$(dirname "$py")")/debian-path
mkdir -p "$tfr"
for x in "$site"/tfrecord "$site"/crc32c "$site"/crc32c-*.dist-info; do
	if [ -e "$x" ]; then ln -sfn "$x" "$tfr/"; fi
done
# venv.sh checks TensorFlow only: a peer that does not import is reported as unavailable in the
# table, and the others run
unavailable() { # peer, module, python, PYTHONPATH
	local err
	if ! err=$(PYTHONPATH=$4 "$3" -c "import $2" 2>&1 >/dev/null); then
		err=${err##*$'\n'}
		echo "peers.sh: $2 does not import with $3: $err" >&2
		pass+=(--unavailable "$1=$2 does not import: $err")
	fi
}
unavailable dali nvidia.dali "$py" ""
unavailable tfrecord tfrecord.torch /usr/bin/python3 "$tfr"
exec /usr/bin/python3 tools/bench/peers.py --build "$build" --venv-python "$py" \
	--tfrecord-path "$tfr" "${pass[@]}"
