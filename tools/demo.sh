#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# The main job, for now: generate datasets, validate them, run pipeline specs in process, report rates.
set -euo pipefail
cd "$(dirname "$0")/.."
tools/setup.sh
if [ ! -f build/build.ninja ]; then
	meson setup build -Dbuildtype=release >/dev/null
fi
ninja -C build tools/sluicectl tools/sluice-bench daemon/sluiced >/dev/null
ctl=build/tools/sluicectl
out=${SLUICE_DEMO_DIR:-/tmp/sluice-demo}
rm -rf "$out"
mkdir -p "$out"

echo "== generating a CTR dataset (small records) and an image dataset (~16 KB records)"
$ctl gen ctr "$out/ctr" --files 4 --records 500000 --seed 1
$ctl gen image "$out/image" --files 4 --records 4000 --seed 1
echo
echo "== one record, as JSON"
$ctl inspect --json --limit 1 "$out/ctr/part-00000-of-00004.tfrecords"
echo
echo "== decoding and validating every record against the manifest, all cores"
$ctl validate "$out/ctr"
echo
$ctl validate "$out/image"
echo
echo "== a pipeline spec: shuffled batches of 1024 CTR records, two epochs"
cat > "$out/ctr.json" <<JSON
{"name": "ctr-train", "type": "independent",
 "args": {"dataset": {"type": "dir", "args": {"data_dir": "$out/ctr"}},
          "target_batch_size": 1024, "drop_remainder": true, "epochs": 2,
          "num_parallel_reads": 4, "num_parallel_parses": "auto", "num_read_buffer_bytes": 1048576,
          "num_prefetch": 4, "shuffle": true, "num_shuffle_buffer_elements": 10000,
          "num_filenames_shuffle_buffer": 4, "num_mix_files": 4, "seed": 7,
          "primary_features": [{"from_name": "dense0", "to_name": "dense0"},
                               {"from_name": "sparse0", "to_name": "sparse0"},
                               {"from_name": "label", "to_name": "label"}]}}
JSON
$ctl run "$out/ctr.json" --json --values label --batches 1 | cut -c1-300
$ctl run "$out/ctr.json" | tail -n 1
echo
echo "== the image spec: ragged boxes padded to the batch maximum with -1"
cat > "$out/image.json" <<JSON
{"type": "independent",
 "args": {"dataset": {"type": "dir", "args": {"data_dir": "$out/image"}},
          "target_batch_size": 64, "drop_remainder": false, "epochs": 1,
          "num_read_buffer_bytes": "auto", "num_filenames_shuffle_buffer": 4, "num_mix_files": 4, "num_prefetch": "auto", "num_parallel_parses": "auto",
          "primary_features": [{"from_name": "image", "to_name": "image"},
                               {"from_name": "label", "to_name": "label"},
                               {"from_name": "bbox", "to_name": "boxes"}],
          "padding": [{"tensor": "boxes", "value": -1}]}}
JSON
$ctl run "$out/image.json" | tail -n 2
echo
echo "== JPEGs decoded and augmented in the pipeline: ResNet-50's training recipe, in process"
$ctl gen jpeg "$out/jpeg" --files 4 --records 1000 --seed 1
cat > "$out/imagenet.json" <<JSON
{"type": "independent",
 "args": {"dataset": {"type": "dir", "args": {"data_dir": "$out/jpeg"}},
          "target_batch_size": 64, "drop_remainder": false, "epochs": 1, "shuffle": true,
          "seed": 1, "num_shuffle_buffer_elements": 256, "num_prefetch": 2,
          "num_read_buffer_bytes": "auto", "num_filenames_shuffle_buffer": 4, "num_mix_files": 4,
          "primary_features": [{"from_name": "image/encoded", "to_name": "image"},
                               {"from_name": "image/class/label", "to_name": "label"}],
          "processing_steps": [
            {"tensor": "image", "type": "decode_image", "args": {"channels": 3}},
            {"tensor": "image", "type": "random_resized_crop", "args": {"size": [224, 224]}},
            {"tensor": "image", "type": "random_flip", "args": {}},
            {"tensor": "image", "type": "normalize",
             "args": {"mean": [123.675, 116.28, 103.53], "std": [58.395, 57.12, 57.375]}}]}}
JSON
$ctl run "$out/imagenet.json" --json --batches 1 | cut -c1-240
$ctl run "$out/imagenet.json" | tail -n 1
echo
echo "== the service: sluiced serves the CTR spec; two jobs share it through shared memory"
mkdir -p "$out/pipelines.d"
cp "$out/ctr.json" "$out/pipelines.d/"
build/daemon/sluiced --socket "$out/sluice.sock" --config-dir "$out/pipelines.d" \
	2> "$out/sluiced.log" &
daemon=$!
trap 'kill $daemon 2>/dev/null || true' EXIT
for _ in $(seq 50); do [ -S "$out/sluice.sock" ] && break; sleep 0.1; done
$ctl --socket "$out/sluice.sock" list
$ctl --socket "$out/sluice.sock" drain ctr-train > /dev/null &
job2=$!
$ctl --socket "$out/sluice.sock" drain ctr-train
wait $job2
$ctl --socket "$out/sluice.sock" stats ctr-train | head -n 8
kill -TERM $daemon
wait $daemon || true
trap - EXIT
cat "$out/sluiced.log"
echo
echo "== decode throughput against memcpy and a plain read loop"
build/tools/sluice-bench read "$out/ctr"
echo
echo "== the pipeline engine in process: records and bytes per CPU-second against memcpy"
build/tools/sluice-bench pipeline --ctr "$out/ctr" --image "$out/image" --batches 400
