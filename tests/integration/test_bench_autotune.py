# SPDX-License-Identifier: Apache-2.0
"""`sluice-bench autotune` runs (issue 20): on a small endless CTR pipeline it prints a
bench=autotune-grid line for each of the 15 fixed settings and one bench=autotune line whose
figures agree with them; --pair prints one line with a paced reader that kept to its pace; a bad
spec, a spec the daemon refuses and a sluiced that does not start end it with status 1 and a
message. A smoke test of the tool, not a timing: the tuner's figures are in docs/BENCHMARKS.md.
Output: TAP, for meson."""

import json
import os
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import test_daemon as td  # noqa: E402
from test_daemon import check  # noqa: E402


def kv(line):
    return dict(x.split("=", 1) for x in line.split())


def write_spec(path, data, batch, **args):
    spec = {"type": "independent", "args": {
        "dataset": {"type": "dir", "args": {"data_dir": data}},
        "target_batch_size": batch, "drop_remainder": True, "epochs": None,
        "num_read_buffer_bytes": 65536, "num_prefetch": 2, "shuffle": True, "seed": 1,
        "num_shuffle_buffer_elements": 500, "num_filenames_shuffle_buffer": 2,
        "num_mix_files": 2,
        "primary_features": [{"from_name": "label", "to_name": "label"},
                             {"from_name": "dense0", "to_name": "dense0"}]}}
    spec["args"].update(args)
    with open(path, "w") as f:
        json.dump(spec, f)
    return path


def main():
    bench = os.path.join(os.environ.get("SLUICE_BUILD_DIR", ""), "tools", "sluice-bench")
    if not os.environ.get("SLUICECTL") or not os.access(bench, os.X_OK):
        td.common.skip("[bench] sluice-bench is not built (-Dbench=false)")

    def run(*args, timeout=150):
        return subprocess.run([bench, "autotune"] + list(args), capture_output=True, text=True,
                              timeout=timeout)

    with tempfile.TemporaryDirectory(prefix="sluice-autotune-") as tmp:
        data = os.path.join(tmp, "ctr")
        subprocess.run([os.environ["SLUICECTL"], "gen", "ctr", data, "--files", "2",
                        "--records", "4000", "--seed", "1"], check=True,
                       stdout=subprocess.DEVNULL)
        spec = write_spec(os.path.join(tmp, "ctr.json"), data, 64)

        r = run("--seconds", "0.5", "--tune-seconds", "2", "ctr=" + spec)
        grid = [kv(x) for x in r.stdout.splitlines() if x.startswith("bench=autotune-grid ")]
        main_ = [kv(x) for x in r.stdout.splitlines() if x.startswith("bench=autotune ")]
        ok = r.returncode == 0 and len(grid) == 15 and len(main_) == 1
        check(ok, "15 grid lines and one bench=autotune line (%s %s)" % (
            r.stdout.strip()[-300:], r.stderr.strip()[-300:]))
        if ok:
            m = main_[0]
            points = {(g["prefetch"], g["read_buffer_bytes"]) for g in grid}
            check(points == {(p, b) for p in ("1", "2", "4", "8", "16")
                             for b in ("65536", "1048576", "4194304")},
                  "every prefetch x read buffer point once: %s" % sorted(points))
            check(all(float(g["per_s"]) > 0 and g["spec"] == "ctr" for g in grid),
                  "every grid point read batches")
            best = max(grid, key=lambda g: float(g["per_s"]))
            check(abs(float(m["grid_best_per_s"]) - float(best["per_s"])) < 0.11 and
                  m["grid_best"] == "pf:%s,rb:%s" % (best["prefetch"], best["read_buffer_bytes"]),
                  "grid_best is the best grid line: %s" % m)
            tuned, fixed = float(m["tuned_per_s"]), float(m["best_fixed_per_s"])
            check(tuned > 0 and fixed > 0 and abs(float(m["ratio"]) - tuned / fixed) < 0.002
                  and abs(float(m["ratio_of_medians"]) - tuned / fixed) < 0.002,
                  "ratio (of one pair) = tuned / the best point measured again: %s" % m)
            check(abs(float(m["ratio_grid"]) - tuned / float(m["grid_best_per_s"])) < 0.002,
                  "ratio_grid = tuned / grid best: %s" % m)
            runs = [kv(x) for x in r.stdout.splitlines() if x.startswith("bench=autotune-run ")]
            check(len(runs) == 1 and float(runs[0]["best_fixed_per_s"]) == fixed and
                  float(runs[0]["tuned_per_s"]) == tuned,
                  "one run line, its figures the medians of one: %s" % runs)
            s90 = float(m["seconds_to_90"])
            check(s90 == -1 or 1 <= s90 <= 2, "seconds_to_90 -1 or within the run: %s" % s90)
            # the tuner's counters at the end of the tuned run (this sluiced gives them: -1, "not
            # given", is a failure): each knob within its range (pipeline.h: 1 .. 32 jobs in
            # flight, 64 KiB .. 4 MiB reads, stepped by 4), off its start (1 job, 64 KiB) only by
            # a move; the one pipeline the pool's whole weight (PL_TUNE_WEIGHT); and the same
            # figures as the run's own line
            pf, rb, moves, wt = (int(m[k]) for k in ("tune_prefetch", "tune_read_buffer_bytes",
                                                      "tune_moves", "tune_weight"))
            check(1 <= pf <= 32 and rb in (65536, 262144, 1048576, 4194304) and moves >= 0 and
                  (moves >= 1 or (pf, rb) == (1, 65536)) and wt == 64 and len(runs) == 1 and
                  (int(runs[0]["tune_prefetch"]), int(runs[0]["tune_read_buffer_bytes"]),
                   int(runs[0]["tune_moves"])) == (pf, rb, moves),
                  "the tuner's counters: knobs in range, moved only by moves, weight 64: %s" % m)

        # two pipelines that differ (batch size): a paced A at 50 a second, a greedy B
        spec_b = write_spec(os.path.join(tmp, "ctr-b.json"), data, 32)
        r = run("--pair", "--demand-a", "50", "--tune-seconds", "2", "a=" + spec,
                "b=" + spec_b)
        lines = [kv(x) for x in r.stdout.splitlines() if x.startswith("bench=autotune ")]
        ok = r.returncode == 0 and len(lines) == 1 and lines[0].get("spec") == "pair"
        check(ok, "one bench=autotune spec=pair line (%s %s)" % (r.stdout.strip(),
                                                                r.stderr.strip()[-300:]))
        if ok:
            p = lines[0]
            a = float(p["a_per_s"])
            check(float(p["a_demand_per_s"]) == 50 and 0 < a <= 50 * 1.5,
                  "the paced reader keeps to its 50 a second: %s" % p)
            check(float(p["b_per_s"]) > 0 and float(p["b_solo_per_s"]) > 0 and
                  float(p["a_solo_per_s"]) > 0, "the greedy and solo readers read: %s" % p)
            check(abs(float(p["a_ratio"]) - a / 50) < 0.002 and abs(
                float(p["b_share"]) - float(p["b_per_s"]) / float(p["b_solo_per_s"])) < 0.002,
                "a_ratio and b_share: %s" % p)
            check(0 < float(p["untuned_a_per_s"]) <= 50 * 1.5 and
                  float(p["untuned_b_per_s"]) > 0 and
                  abs(float(p["untuned_a_ratio"]) - float(p["untuned_a_per_s"]) / 50) < 0.002,
                  "the pair with the tuner off: %s" % p)
            check(float(p["b_demand_per_s"]) == 0 and float(p["b_ratio"]) == 0,
                  "a greedy B has no demand: %s" % p)

        # both paced (--demand-b): B keeps to its 40 a second too
        r = run("--pair", "--demand-a", "50", "--demand-b", "40", "--tune-seconds", "2",
                "a=" + spec, "b=" + spec_b)
        lines = [kv(x) for x in r.stdout.splitlines() if x.startswith("bench=autotune ")]
        ok = r.returncode == 0 and len(lines) == 1
        check(ok, "one pair line with --demand-b (%s %s)" % (r.stdout.strip(),
                                                            r.stderr.strip()[-300:]))
        if ok:
            p = lines[0]
            b = float(p["b_per_s"])
            check(float(p["b_demand_per_s"]) == 40 and 0 < b <= 40 * 1.5 and
                  abs(float(p["b_ratio"]) - b / 40) < 0.002 and
                  0 < float(p["untuned_b_per_s"]) <= 40 * 1.5,
                  "the paced B keeps to its 40 a second, tuned or not: %s" % p)

        # failures: said, exit 1, nothing measured
        bad = write_spec(os.path.join(tmp, "bad.json"), data, 64, shuffel=True)
        r = run("--seconds", "0.5", "--tune-seconds", "2", "x=" + bad, timeout=60)
        check(r.returncode == 1 and "args.shuffel: unknown key" in r.stderr and
              "bench=" not in r.stdout, "a bad spec is named, exit 1 (%s)" % r.stderr.strip())
        gone = write_spec(os.path.join(tmp, "gone.json"), os.path.join(tmp, "nope"), 64)
        r = run("--seconds", "0.5", "--tune-seconds", "2", "x=" + gone, timeout=60)
        check(r.returncode == 1 and "cannot read pipeline" in r.stderr and "nope" in r.stderr,
              "a spec the daemon refuses: its log says why, exit 1 (%s)" % r.stderr.strip())
        r = run("--sluiced", os.path.join(tmp, "no-sluiced"), "--seconds", "0.5", "x=" + spec,
                timeout=60)
        check(r.returncode == 1 and "exited at start" in r.stderr,
              "a sluiced that does not start: said, exit 1 (%s)" % r.stderr.strip())
    td.common.finish()


if __name__ == "__main__":
    sys.exit(main())
