"""`sluice-bench predict` runs (issue 20): on a small endless CTR pipeline it prints one
bench=predict line with a positive measured rate at both pool sizes, a positive prediction, a
limit and an error figure that agree with each other. A smoke test of the tool, not a timing:
the prediction's accuracy is measured in docs/BENCHMARKS.md. Output: TAP, for meson."""

import json
import os
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import test_daemon as td  # noqa: E402
from test_daemon import check  # noqa: E402


def main():
    bench = os.path.join(os.environ.get("SLUICE_BUILD_DIR", ""), "tools", "sluice-bench")
    if not os.environ.get("SLUICECTL") or not os.access(bench, os.X_OK):
        td.common.skip("[bench] sluice-bench is not built (-Dbench=false)")
    with tempfile.TemporaryDirectory(prefix="sluice-predict-") as tmp:
        data = os.path.join(tmp, "ctr")
        subprocess.run([os.environ["SLUICECTL"], "gen", "ctr", data, "--files", "2",
                        "--records", "4000", "--seed", "1"], check=True,
                       stdout=subprocess.DEVNULL)
        spec = os.path.join(tmp, "ctr.json")
        with open(spec, "w") as f:
            json.dump({"type": "independent", "args": {
                "dataset": {"type": "dir", "args": {"data_dir": data}},
                "target_batch_size": 64, "drop_remainder": True, "epochs": None,
                "num_read_buffer_bytes": 65536, "num_prefetch": 2, "shuffle": True, "seed": 1,
                "num_shuffle_buffer_elements": 500, "num_filenames_shuffle_buffer": 2,
                "num_mix_files": 2,
                "primary_features": [{"from_name": "label", "to_name": "label"},
                                     {"from_name": "dense0", "to_name": "dense0"}]}}, f)
        r = subprocess.run([bench, "predict", "--seconds", "0.3", "ctr=" + spec],
                           capture_output=True, text=True, timeout=120)
        lines = [x for x in r.stdout.splitlines() if x.startswith("bench=predict ")]
        kv = dict(x.split("=", 1) for x in lines[0].split()) if lines else {}
        ok = r.returncode == 0 and len(lines) == 1 and kv.get("spec") == "ctr"
        check(ok, "one bench=predict line (%s %s)" % (r.stdout.strip(), r.stderr.strip()[-200:]))
        if ok:
            pred, meas = float(kv["predicted_per_s"]), float(kv["measured_per_s"])
            check(float(kv["measured_from_per_s"]) > 0 and pred > 0 and meas > 0,
                  "rates measured at 1 and 2 workers and a prediction: %s" % lines[0])
            check(abs(float(kv["error"]) - abs(pred - meas) / meas) < 0.002,
                  "error is |predicted - measured| / measured: %s" % lines[0])
            check(kv["limit"] in ("consumer", "sequential", "stage_cpu", "cores", "disk"),
                  "a limit is named: %s" % kv["limit"])
        r = subprocess.run([bench, "predict", "--seconds", "0.3", "ctr=" + spec + ".nope"],
                           capture_output=True, text=True, timeout=60)
        check(r.returncode == 1 and ".nope" in r.stderr,
              "a spec that cannot be read is named (%s)" % r.stderr.strip()[-200:])
    td.common.finish()


if __name__ == "__main__":
    sys.exit(main())
