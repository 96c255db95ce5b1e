#!/usr/bin/python3
# SPDX-License-Identifier: Apache-2.0
"""What building the record index costs, against one epoch's read of the same files (issue 36).

    /usr/bin/python3 tools/bench/index_cost.py --build build [--data DIR] [--repeat 3]
        [--image-records 32000] [--ctr-records 600000] [--gzip-records 200000]

Datasets (`sluicectl gen`, 8 files each, cached in DIR, default ~/.cache/sluice/bench-index):
image (SequenceExamples of 2-30 KiB random bytes: 16 KiB a record on average), ctr (~800
bytes a record) and ctr gzip-compressed. The page cache is warmed first (every file read
once). Then, per dataset, --repeat rounds, each timing in turn (wall clock, each a new
process but the read loop):

    index        sluicectl index DIR (interleaved header hops; writes DIR/.sluice-index)
    index_serial sluicectl index --serial DIR (one cursor per file)
    read         a plain read() loop over the files into a 1 MiB buffer (no CRC, no framing)
    validate     sluicectl validate DIR --threads 1 --no-pool (read + frame + CRC + decode)
    epoch        sluicectl run SPEC: one unshuffled epoch of the pipeline, batches of 1024

and prints per dataset the medians and the ratios of index to each baseline:

    bench=index_cost data=D files=8 records=N bytes=B index_s=... index_serial_s=...
        read_s=... validate_s=... epoch_s=... index_vs_read=... index_vs_validate=...
        index_vs_epoch=...
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

FEATURES = {
    "image": ["image", "label"],
    "ctr": ["dense0", "sparse0", "label"],
    "ctr_gzip": ["dense0", "sparse0", "label"],
}


def gen(ctl, data, name, records):
    d = os.path.join(data, "%s-%d" % (name, records))
    if os.path.isfile(os.path.join(d, "__manifest__.json")):
        return d
    kind = "image" if name == "image" else "ctr"
    extra = ["--compression", "gzip"] if name.endswith("gzip") else []
    subprocess.run([ctl, "gen", kind, d, "--files", "8", "--records", str(records)] + extra,
                   check=True, stdout=subprocess.DEVNULL)
    return d


def data_files(d):
    return sorted(os.path.join(d, f) for f in os.listdir(d)
                  if not f.startswith(".") and f != "__manifest__.json")


def read_loop(files):
    buf = bytearray(1 << 20)
    total = 0
    for p in files:
        with open(p, "rb", buffering=0) as f:
            while True:
                n = f.readinto(buf)
                if not n:
                    break
                total += n
    return total


def timed(fn):
    t = time.perf_counter()
    fn()
    return time.perf_counter() - t


def run_quiet(args):
    subprocess.run(args, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--build", default="build")
    ap.add_argument("--data", default=os.path.expanduser("~/.cache/sluice/bench-index"))
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--image-records", type=int, default=32000)
    ap.add_argument("--ctr-records", type=int, default=600000)
    ap.add_argument("--gzip-records", type=int, default=200000)
    a = ap.parse_args()
    ctl = os.path.join(a.build, "tools", "sluicectl")
    if not os.access(ctl, os.X_OK):
        sys.exit("index_cost.py: no %s (build first)" % ctl)
    os.makedirs(a.data, exist_ok=True)
    sets = [("image", a.image_records), ("ctr", a.ctr_records), ("ctr_gzip", a.gzip_records)]
    tmp = tempfile.mkdtemp(prefix="sluice-index-cost-")
    for name, records in sets:
        d = gen(ctl, a.data, name, records)
        files = data_files(d)
        size = read_loop(files)  # warm the page cache
        spec = os.path.join(tmp, name + ".json")
        with open(spec, "w") as f:
            json.dump({"type": "independent", "args": {
                "dataset": {"type": "dir", "args": {"data_dir": d}},
                "target_batch_size": 1024, "drop_remainder": False, "epochs": 1,
                "num_parallel_reads": 2, "num_read_buffer_bytes": 1 << 20, "num_prefetch": 4,
                "shuffle": False,
                "primary_features": [{"from_name": x, "to_name": x} for x in FEATURES[name]]}},
                f)
        run_quiet([ctl, "index", d])  # the first write of the index is not timed
        cases = {
            "index": lambda: run_quiet([ctl, "index", d]),
            "index_serial": lambda: run_quiet([ctl, "index", "--serial", d]),
            "read": lambda: read_loop(files),
            "validate": lambda: run_quiet([ctl, "validate", d, "--threads", "1", "--no-pool"]),
            "epoch": lambda: run_quiet([ctl, "run", spec]),
        }
        times = {k: [] for k in cases}
        for _ in range(a.repeat):
            for k, fn in cases.items():
                times[k].append(timed(fn))
        med = {k: statistics.median(v) for k, v in times.items()}
        print("bench=index_cost data=%s files=%d records=%d bytes=%d %s index_vs_read=%.3f "
              "index_vs_validate=%.3f index_vs_epoch=%.3f runs=%d" % (
                  name, len(files), records, size,
                  " ".join("%s_s=%.4f" % (k, med[k]) for k in cases),
                  med["index"] / med["read"], med["index"] / med["validate"],
                  med["index"] / med["epoch"], a.repeat), flush=True)
    for f in os.listdir(tmp):
        os.unlink(os.path.join(tmp, f))
    os.rmdir(tmp)


if __name__ == "__main__":
    main()
