#!/usr/bin/python3
# SPDX-License-Identifier: Apache-2.0
"""What record-level shuffle costs the daemon: one CTR epoch into a Python loop, unshuffled and
through a shuffle buffer, each in a fresh sluiced (issue 17, "Known before the comparison").

    /usr/bin/python3 tools/bench/shuffle_cost.py --build build-rel [--baseline OTHER_BUILD]
        [--records 3000000] [--buffer 100000] [--repeat 3] [--data DIR]

The dataset: `sluicectl gen ctr DIR --files 8 --records N` (13 float + 26 int64 features and
a label, ~830 bytes a record), cached in DIR (default ~/.cache/sluice/bench-shuffle-N). The
spec: every feature, batches of 1024, 4 files read at once (unshuffled) or mixed (shuffled:
num_mix_files 4, the filename buffer 8), one epoch. A Python process attaches by name and takes
every tensor of every batch as numpy (tools/bench/pyharness.py). Runs alternate: per build,
unshuffled then shuffled, --repeat times. Prints per run

    bench=shuffle_cost build=B shuffle=0|N records=... daemon_cpu_s=... reader_cpu_s=...
        wall_s=...

and per build the medians:

    bench=shuffle_cost_summary build=B unshuffled_daemon_cpu_s=... shuffled_daemon_cpu_s=...
        extra_us_per_record=... ratio=...

--baseline runs a second build (for instance a checkout of the commit before a change) in the
same alternation, so that before and after are measured under the same load.
"""

import argparse
import os
import statistics
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from pyharness import run_sluice  # noqa: E402

FEATURES = ["dense%d" % i for i in range(13)] + ["sparse%d" % i for i in range(26)] + ["label"]


def spec(data, shuffle):
    a = {"dataset": {"type": "dir", "args": {"data_dir": data}},
         "target_batch_size": 1024, "drop_remainder": False, "epochs": 1,
         "num_parallel_reads": 4, "num_read_buffer_bytes": 1 << 20, "num_prefetch": 4,
         "primary_features": [{"from_name": f, "to_name": f} for f in FEATURES]}
    if shuffle:
        a.update(shuffle=True, num_shuffle_buffer_elements=shuffle, num_mix_files=4,
                 num_filenames_shuffle_buffer=8, seed=1)
    return {"name": "shuffle-cost", "type": "independent", "args": a}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--build", default="build-rel")
    ap.add_argument("--baseline", help="a second build measured in the same alternation")
    ap.add_argument("--records", type=int, default=3000000)
    ap.add_argument("--buffer", type=int, default=100000)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--data")
    args = ap.parse_args()
    builds = [os.path.abspath(args.build)] + (
        [os.path.abspath(args.baseline)] if args.baseline else [])
    data = args.data or os.path.join(os.environ.get("XDG_CACHE_HOME") or os.path.expanduser(
        "~/.cache"), "sluice", "bench-shuffle-%d" % args.records)
    if not os.path.exists(os.path.join(data, "__manifest__.json")):
        subprocess.run([os.path.join(builds[0], "tools", "sluicectl"), "gen", "ctr", data,
                        "--files", "8", "--records", str(args.records)], check=True)
    env = dict(os.environ)
    runs = {}
    with tempfile.TemporaryDirectory() as tmp:
        for _ in range(args.repeat):
            for b in builds:
                for sh in (0, args.buffer):
                    out = run_sluice(b, tmp, spec(data, sh), env, what="shuffle_cost")
                    if out["records"] != args.records:
                        raise SystemExit("shuffle_cost: %d records, expected %d" %
                                         (out["records"], args.records))
                    print("bench=shuffle_cost build=%s shuffle=%d records=%d daemon_cpu_s=%.3f "
                          "reader_cpu_s=%.3f wall_s=%.3f" %
                          (b, sh, out["records"], out["daemon_cpu_s"], out["reader_cpu_s"],
                           out["wall_s"]), flush=True)
                    runs.setdefault((b, sh), []).append(out["daemon_cpu_s"])
    for b in builds:
        u = statistics.median(runs[(b, 0)])
        s = statistics.median(runs[(b, args.buffer)])
        print("bench=shuffle_cost_summary build=%s unshuffled_daemon_cpu_s=%.3f "
              "shuffled_daemon_cpu_s=%.3f extra_us_per_record=%.3f ratio=%.2f range_unshuffled=%s "
              "range_shuffled=%s" % (b, u, s, (s - u) / args.records * 1e6, s / u,
                                     "%.2f-%.2f" % (min(runs[(b, 0)]), max(runs[(b, 0)])),
                                     "%.2f-%.2f" % (min(runs[(b, args.buffer)]),
                                                    max(runs[(b, args.buffer)]))))


if __name__ == "__main__":
    main()
