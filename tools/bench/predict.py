# SPDX-License-Identifier: Apache-2.0
"""The resource model's predictions checked (issue 20): `sluice-bench predict` on the CTR,
image, sequence and ImageNet-decode pipelines.

    /usr/bin/python3 tools/bench/predict.py [--build build-rel] [--seconds 4] [--quick]

Writes the datasets with `sluicectl gen` (kept in --data, default ~/.cache/sluice/predict),
endless shuffled specs of each, and runs `sluice-bench predict`: each pipeline runs on 1 pool
worker, the model fitted to its counters predicts the rate on 2, then it runs on 2 and the rate
is measured. Prints sluice-bench's `bench=predict ...` lines.
"""

import argparse
import json
import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
CTR = ["dense%d" % i for i in range(13)] + ["sparse%d" % i for i in range(26)] + ["label"]
# name: gen kind, records (full, quick), batch, shuffle buffer, features, steps
PIPELINES = {
    "ctr": ("ctr", (400000, 40000), 1024, 10000, CTR, None),
    "image": ("image", (20000, 4000), 64, 1000, ["image", "label", "bbox"], None),
    "seq": ("seq", (100000, 10000), 32, 1000, ["length", "id", "tokens", "weights"], None),
    "imagenet": ("jpeg", (2000, 500), 64, 500, ["image/encoded", "image/class/label"], [
        {"tensor": "image/encoded", "type": "decode_image", "args": {"channels": 3}},
        {"tensor": "image/encoded", "type": "random_resized_crop", "args": {"size": [224, 224]}},
        {"tensor": "image/encoded", "type": "random_flip", "args": {}},
        {"tensor": "image/encoded", "type": "normalize",
         "args": {"mean": [123.675, 116.28, 103.53], "std": [58.395, 57.12, 57.375]}}]),
}


def dataset(ctl, root, kind, records):
    d = os.path.join(root, "%s-%d" % (kind, records))
    if not os.path.exists(os.path.join(d, "__manifest__.json")):
        subprocess.run([ctl, "gen", kind, d, "--files", "8", "--records", str(records),
                        "--seed", "7"], check=True, stdout=subprocess.DEVNULL)
    return d


def spec(name, data):
    """The endless shuffled spec of PIPELINES[name] over the dataset data (a dict for json)."""
    _, _, batch, shuffle, feats, steps = PIPELINES[name]
    s = {"name": "predict-" + name, "type": "independent", "args": {
        "dataset": {"type": "dir", "args": {"data_dir": data}},
        "target_batch_size": batch, "drop_remainder": True, "epochs": None,
        "num_parallel_reads": 8, "num_read_buffer_bytes": 1 << 20, "num_prefetch": 4,
        "shuffle": True, "num_shuffle_buffer_elements": shuffle,
        "num_filenames_shuffle_buffer": 8, "num_mix_files": 8, "seed": 7,
        "primary_features": [{"from_name": f, "to_name": f} for f in feats]}}
    if steps:
        s["args"]["processing_steps"] = steps
    return s


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", default=os.path.join(ROOT, "build-rel"))
    ap.add_argument("--data", default=os.path.expanduser("~/.cache/sluice/predict"))
    ap.add_argument("--seconds", default="4")
    ap.add_argument("--repeat", default="3")
    ap.add_argument("--quick", action="store_true", help="small datasets (a smoke run)")
    ap.add_argument("--only", action="append", choices=sorted(PIPELINES))
    a = ap.parse_args()
    ctl = os.path.join(a.build, "tools", "sluicectl")
    bench = os.path.join(a.build, "tools", "sluice-bench")
    os.makedirs(a.data, exist_ok=True)
    args = []
    for name in a.only or ("ctr", "image", "seq", "imagenet"):
        kind, records = PIPELINES[name][:2]
        data = dataset(ctl, a.data, kind, records[1] if a.quick else records[0])
        path = os.path.join(a.data, "spec-%s.json" % name)
        with open(path, "w") as f:
            json.dump(spec(name, data), f)
        args.append("%s=%s" % (name, path))
    return subprocess.run([bench, "predict", "--seconds", a.seconds, "--repeat", a.repeat] +
                          args).returncode


if __name__ == "__main__":
    sys.exit(main())
