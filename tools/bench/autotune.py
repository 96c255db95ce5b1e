# SPDX-License-Identifier: Apache-2.0
"""sluiced's online autotuner against the best fixed knobs (issue 20's acceptance):
`sluice-bench autotune` on the CTR, image and sequence pipelines of predict.py.

    /usr/bin/python3 tools/bench/autotune.py [--build build-rel] [--seconds 4]
        [--tune-seconds 15] [--repeat 1] [--quick] [--only ctr|image|seq] [--pair]

Writes the datasets as predict.py does (kept in --data, default ~/.cache/sluice/predict) and
predict.py's endless shuffled spec of each, and runs `sluice-bench autotune` on them: for each,
the grid of fixed num_prefetch x num_read_buffer_bytes, then both "auto" under the tuner.
--pair then runs the two-pipeline case, A = image read at half its grid best (measured above
when image ran, else by sluice-bench first), B = sequence read greedily, on one sluiced --cpus 2.
Prints sluice-bench's `bench=autotune...` lines; `sluice-bench autotune --help` says what each
figure is.
"""

import argparse
import json
import os
import re
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import predict  # noqa: E402  (its datasets and specs are this benchmark's)

PAIR = ("image", "seq")  # A (paced), B (greedy)


def write_spec(ctl, a, name):
    kind, records = predict.PIPELINES[name][:2]
    data = predict.dataset(ctl, a.data, kind, records[1] if a.quick else records[0])
    path = os.path.join(a.data, "autotune-%s%s.json" % (name, "-quick" if a.quick else ""))
    with open(path, "w") as f:
        json.dump(predict.spec(name, data), f)
    return path


def bench(cmd):
    """Run sluice-bench, its lines passed on as they come; (exit status, {spec: grid best})."""
    best = {}
    with subprocess.Popen(cmd, stdout=subprocess.PIPE, text=True) as p:
        for line in p.stdout:
            sys.stdout.write(line)
            sys.stdout.flush()
            m = re.match(r"bench=autotune spec=(\S+) .*\bgrid_best_per_s=([0-9.]+)", line)
            if m:
                best[m.group(1)] = float(m.group(2))
    return p.returncode, best


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", default=os.path.join(predict.ROOT, "build-rel"))
    ap.add_argument("--data", default=os.path.expanduser("~/.cache/sluice/predict"))
    ap.add_argument("--seconds", default="4", help="each grid point's run")
    ap.add_argument("--tune-seconds", default="15", help="the tuned run")
    ap.add_argument("--repeat", default="1", help="runs per grid point (the median)")
    ap.add_argument("--quick", action="store_true", help="small datasets (a smoke run)")
    ap.add_argument("--only", action="append", choices=("ctr", "image", "seq"))
    ap.add_argument("--pair", action="store_true",
                    help="also image (paced) and sequence (greedy) on one sluiced --cpus 2")
    ap.add_argument("--over", type=float, metavar="F",
                    help="with --pair: both paced, each at F times its solo rate (measured "
                    "first, on --cpus 2; F = 0.75: together 1.5 times what the cores give)")
    a = ap.parse_args()
    ctl = os.path.join(a.build, "tools", "sluicectl")
    sb = os.path.join(a.build, "tools", "sluice-bench")
    os.makedirs(a.data, exist_ok=True)
    common = ["--seconds", a.seconds, "--tune-seconds", a.tune_seconds, "--repeat", a.repeat]
    names = a.only or ("ctr", "image", "seq")
    rc, best = 0, {}
    if not (a.pair and a.over):  # --over needs no grid: the pair's demands come from solos
        rc, best = bench([sb, "autotune"] + common +
                         ["%s=%s" % (n, write_spec(ctl, a, n)) for n in names])
    if a.pair and a.over:
        # each alone on a fresh sluiced --cpus 2, greedy: the solo runs of a first pair run
        specs = ["%s=%s" % (n, write_spec(ctl, a, n)) for n in PAIR]
        out = subprocess.run([sb, "autotune", "--pair", "--demand-a", "1e7"] + common + specs,
                             stdout=subprocess.PIPE, text=True, check=True).stdout
        solo = [float(re.search(r"\b%s_solo_per_s=([0-9.]+)" % x, out).group(1))
                for x in ("a", "b")]
        prc, _ = bench([sb, "autotune", "--pair"] + common +
                       ["--demand-a", "%.1f" % (a.over * solo[0]),
                        "--demand-b", "%.1f" % (a.over * solo[1])] + specs)
        rc = rc or prc
    elif a.pair:
        demand = ["--demand-a", "%.1f" % (best[PAIR[0]] / 2)] if best.get(PAIR[0]) else []
        prc, _ = bench([sb, "autotune", "--pair"] + common + demand +
                       ["%s=%s" % (n, write_spec(ctl, a, n)) for n in PAIR])
        rc = rc or prc
    return rc


if __name__ == "__main__":
    sys.exit(main())
