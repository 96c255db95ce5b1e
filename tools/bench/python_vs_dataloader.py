#!/usr/bin/python3
# SPDX-License-Identifier: Apache-2.0
"""An epoch into a Python loop: sluice against a PyTorch DataLoader, same files, same machine.

    /usr/bin/python3 tools/bench/python_vs_dataloader.py --build build-rel [--repeat 3]
        [--workers 2] [--image-records 12000] [--ctr-records 200000] [--only image|ctr]
        [--daemon-arg=--direct-io ...]

Generates two datasets with `sluicectl gen` (image: ~16 KB bytes + label per record, batches of
64; CTR: 13 float + 26 int64 features + label, ~800 B, batches of 256), then per dataset
alternates --repeat times, each run in processes of its own:

- sluice: a fresh sluiced with the pipeline in its config dir (one epoch, no shuffle); a Python
  process attaches (`import sluice`) and reads the epoch, taking every tensor of every batch as
  numpy (strings as `Strings(values, offsets)`). CPU: the reader's and the daemon's (all of
  it, start-up included).
- DataLoader: `torch.utils.data.DataLoader(batch_size=B, num_workers=--workers)` over an
  IterableDataset that reads the same files with a plain Python TFRecord reader (each worker
  its share of the files) and parses each record with `google.protobuf` (Debian's
  python3-protobuf; the schema compiled with protoc), giving numpy arrays per feature that the
  default collate turns into tensors (bytes stay a list). CPU: the loop's process and its
  workers.

Prints `bench=py_vs_dataloader data=D system=S ...` per run and, per dataset, the medians:

    bench=py_vs_dataloader_summary data=D records_per_s_ratio=... cpu_per_record_ratio=...

(ratio = sluice / DataLoader records per second, and DataLoader / sluice CPU per record.)
"""

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile

from pyharness import (EVAL_STEPS, ROOT, child_wait_go, child_report, run_child, run_sluice,
                       torchvision_recipe, train_steps)

STEPS = {"jpeg": train_steps(), "jpeg-eval": EVAL_STEPS}


def child_dataloader(args):
    import numpy as np
    import torch
    sys.path.insert(0, os.path.join(ROOT, "tests", "crosscheck"))
    import common
    ex_pb2, _ = common.protos()
    files = sorted(os.path.join(args.data, f) for f in os.listdir(args.data)
                   if f.endswith(".tfrecords"))

    def records(path):
        with open(path, "rb") as f:
            while True:
                head = f.read(12)
                if len(head) < 12:
                    return
                n = int.from_bytes(head[:8], "little")
                data = f.read(n)
                f.read(4)
                yield data

    def parse_numeric(data):
        ex = ex_pb2.Example()
        ex.ParseFromString(data)
        out = {}
        for name, f in ex.features.feature.items():
            kind = f.WhichOneof("kind")
            if kind == "bytes_list":
                out[name] = f.bytes_list.value[0]
            elif kind == "float_list":
                out[name] = np.array(f.float_list.value, dtype=np.float32)
            else:
                out[name] = np.array(f.int64_list.value, dtype=np.int64)
        return out

    parse = parse_numeric
    if args.data_kind in ("jpeg", "jpeg-eval"):  # PIL decode, torchvision's transforms
        image = torchvision_recipe("train" if args.data_kind == "jpeg" else "eval")

        def parse(data):
            ex = ex_pb2.Example()
            ex.ParseFromString(data)
            f = ex.features.feature
            return {"image": image(f["image/encoded"].bytes_list.value[0]),
                    "label": f["image/class/label"].int64_list.value[0]}

    class Records(torch.utils.data.IterableDataset):
        def __iter__(self):
            info = torch.utils.data.get_worker_info()
            mine = files if info is None else files[info.id::info.num_workers]
            for path in mine:
                for data in records(path):
                    yield parse(data)

    t0, c0 = child_wait_go()
    n = 0
    dl = torch.utils.data.DataLoader(Records(), batch_size=args.batch, num_workers=args.workers)
    for b in dl:
        label = b["label"]
        n += len(label)
        if args.max_records and n >= args.max_records:
            break
    del dl  # its workers are joined: their CPU time is in RUSAGE_CHILDREN from here
    child_report(t0, c0, n)


def pvd_spec(data, features, batch, steps=None):
    spec = {"name": "pvd", "type": "independent", "args": {
        "dataset": {"type": "dir", "args": {"data_dir": data}},
        "target_batch_size": batch, "drop_remainder": False, "epochs": 1,
        "num_parallel_reads": 4, "num_read_buffer_bytes": 1 << 20, "num_prefetch": 8,
        "primary_features": [{"from_name": f, "to_name": t} for f, t in features]}}
    if steps:  # batches of 64 float images are 38.5 MB: 2 ahead fit the default 256 MiB ring
        spec["args"]["processing_steps"] = steps
        spec["args"]["num_prefetch"] = 2
    return spec


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--build", default="build", help="meson build directory (default: build)")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--workers", type=int, default=2, help="DataLoader workers (default 2)")
    ap.add_argument("--image-records", type=int, default=12000)
    ap.add_argument("--ctr-records", type=int, default=200000)
    ap.add_argument("--daemon-arg", action="append", default=[],
                    help="an option for sluiced (repeat it), e.g. --daemon-arg=--direct-io")
    ap.add_argument("--only", choices=("image", "ctr", "jpeg"), help="one dataset only")
    ap.add_argument("--jpeg-records", type=int, default=0,
                    help="also the ResNet-50 training and evaluation pipelines on so many "
                         "generated JPEGs (sluicectl gen jpeg): sluice's image steps against "
                         "PIL + torchvision")
    if "--child" in sys.argv:
        kind = sys.argv[2]
        cp = argparse.ArgumentParser()
        cp.add_argument("--child", action="store_true")
        cp.add_argument("kind")
        cp.add_argument("--socket")
        cp.add_argument("--name")
        cp.add_argument("--data")
        cp.add_argument("--batch", type=int)
        cp.add_argument("--workers", type=int)
        cp.add_argument("--data-kind", default="")
        cp.add_argument("--max-records", type=int, default=0)
        a = cp.parse_args()
        return child_dataloader(a)
    args = ap.parse_args()
    build = os.path.abspath(args.build)
    ctl = os.path.join(build, "tools", "sluicectl")
    if not os.access(ctl, os.X_OK) or not os.access(os.path.join(build, "daemon", "sluiced"),
                                                    os.X_OK):
        raise SystemExit("python_vs_dataloader: build %s first (meson, ninja)" % build)
    env = dict(os.environ, SLUICE_LIBRARY=os.path.join(build, "libclient", "libsluice.so"))
    tmp = tempfile.mkdtemp(prefix="sluice-pvd-")
    try:
        sets = []
        for kind, n, batch in (("image", args.image_records, 64), ("ctr", args.ctr_records, 256),
                               ("jpeg", args.jpeg_records, 64)):
            if (args.only and kind != args.only) or n <= 0:
                continue
            d = os.path.join(tmp, kind)
            subprocess.run([ctl, "gen", kind, d, "--files", "4", "--records", str(n)], check=True,
                           stdout=subprocess.DEVNULL)
            with open(os.path.join(d, "__manifest__.json")) as f:
                feats = [(x["name"], x["name"]) for x in json.load(f)["features"]]
            if kind == "image":
                feats = [("image", "image"), ("label", "label")]
            if kind == "jpeg":
                feats = [("image/encoded", "image"), ("image/class/label", "label")]
            sets.append((kind, d, feats, batch))
            if kind == "jpeg":  # the same images through the evaluation recipe
                sets.append(("jpeg-eval", d, feats, batch))
        for kind, d, feats, batch in sets:
            res = {"sluice": [], "dataloader": []}
            for _ in range(args.repeat):
                for system in ("sluice", "dataloader"):
                    if system == "sluice":
                        out = run_sluice(build, tmp, pvd_spec(d, feats, batch, STEPS.get(kind)),
                                         env, args.daemon_arg, what="python_vs_dataloader")
                    else:
                        out = run_child(["--child", "dataloader", "--data", d,
                                         "--batch", str(batch),
                                         "--workers", str(args.workers),
                                         "--data-kind", kind], env,
                                        script=os.path.abspath(__file__),
                                        what="python_vs_dataloader")
                    out["records_per_s"] = out["records"] / out["wall_s"]
                    out["cpu_us_per_record"] = out["cpu_s"] * 1e6 / out["records"]
                    res[system].append(out)
                    print("bench=py_vs_dataloader data=%s system=%s %s" % (kind, system, " ".join(
                        "%s=%.4g" % (k, v) for k, v in sorted(out.items())
                        if isinstance(v, (int, float)))), flush=True)
            med = {s: {k: statistics.median(r[k] for r in res[s])
                       for k in ("records_per_s", "cpu_us_per_record")} for s in res}
            print("bench=py_vs_dataloader_summary data=%s workers=%d sluice_records_per_s=%.0f "
                  "dataloader_records_per_s=%.0f records_per_s_ratio=%.1f "
                  "sluice_cpu_us_per_record=%.2f dataloader_cpu_us_per_record=%.2f "
                  "cpu_per_record_ratio=%.1f" % (
                      kind, args.workers, med["sluice"]["records_per_s"],
                      med["dataloader"]["records_per_s"],
                      med["sluice"]["records_per_s"] / med["dataloader"]["records_per_s"],
                      med["sluice"]["cpu_us_per_record"], med["dataloader"]["cpu_us_per_record"],
                      med["dataloader"]["cpu_us_per_record"] / med["sluice"]["cpu_us_per_record"]),
                  flush=True)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
