#!/usr/bin/python3
# SPDX-License-Identifier: Apache-2.0
"""Batch throughput of the Python reader (import sluice) against the C reader, same daemon.

    /usr/bin/python3 tools/bench/python_reader.py --build build [--data DIR] [--batches N]
        [--repeat R] [--batch-sizes 256,64]

Starts the build's sluiced on a generated CTR dataset (`sluicectl gen ctr DIR --files 4
--records 200000` unless --data is given) with one endless pipeline per batch size (the
dense0, dense1, sparse0, sparse1 and label features, no shuffle), then, per batch size,
alternates R times: the C loop (`sluice-bench reader`: sluice_next, every tensor's view,
release) and the same loop in Python (reader.next(), batch[name] for every tensor: numpy
arrays over the shared memory, release), each in its own process. Prints a
`bench=reader lang=c|python ...` line per run and a summary per batch size:

    bench=python_reader batch_size=B c_batches_per_s=... py_batches_per_s=... ratio=...
        c_cpu_us_per_batch=... py_cpu_us_per_batch=...

(medians over the runs; ratio = Python / C batches per second). The daemon produces on the
same machine, so the figures are those a training loop sees on this host, not the reader's
ceiling alone; cpu_us_per_batch is the reader process's own CPU time per batch.
"""

import argparse
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time

FEATURES = ["dense0", "dense1", "sparse0", "sparse1", "label"]


def child(args):
    """The Python side of one run (in its own process, as the C side is)."""
    sys.path.insert(0, os.path.join(args.root, "libclient", "python"))
    import sluice
    with sluice.attach(args.name, socket=args.socket) as r:
        def take(n):
            rows = nbytes = 0
            for _ in range(n):
                b = r.next()
                if b is None:
                    raise SystemExit("python_reader: the pipeline ended before N batches")
                with b:
                    for k in b:
                        v = b[k]
                        nbytes += v.nbytes if not isinstance(v, sluice.Ragged) else \
                            v.values.nbytes + v.row_splits.nbytes
                    rows += b.rows
            return rows, nbytes
        take(args.warmup)
        t0, c0 = time.perf_counter(), time.process_time()
        rows, nbytes = take(args.batches)
        wall, cpu = time.perf_counter() - t0, time.process_time() - c0
    print("bench=reader lang=python batches=%d rows=%d bytes=%d wall_s=%.4f batches_per_s=%.1f "
          "cpu_us_per_batch=%.2f" % (args.batches, rows, nbytes, wall, args.batches / wall,
                                     cpu * 1e6 / args.batches), flush=True)


def parse(line):
    return dict(kv.split("=", 1) for kv in line.split() if "=" in kv)


def run(cmd, env):
    p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
                       timeout=600)
    if p.returncode != 0:
        raise SystemExit("python_reader: %s failed (%d): %s" % (cmd[0], p.returncode,
                                                               p.stderr.strip()))
    line = [x for x in p.stdout.splitlines() if x.startswith("bench=reader")][-1]
    print(line, flush=True)
    return parse(line)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--build", default="build", help="meson build directory (default: build)")
    ap.add_argument("--data", help="a CTR dataset (default: generated in a temporary dir)")
    ap.add_argument("--batches", type=int, default=20000)
    ap.add_argument("--warmup", type=int, default=500)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--batch-sizes", default="256,64")
    ap.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--socket", help=argparse.SUPPRESS)
    ap.add_argument("--name", help=argparse.SUPPRESS)
    ap.add_argument("--root", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        return child(args)

    root = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
    build = os.path.abspath(args.build)
    sluiced = os.path.join(build, "daemon", "sluiced")
    ctl = os.path.join(build, "tools", "sluicectl")
    bench = os.path.join(build, "tools", "sluice-bench")
    for p in (sluiced, ctl, bench):
        if not os.access(p, os.X_OK):
            raise SystemExit("python_reader: %s is missing (build with meson first)" % p)
    env = dict(os.environ, SLUICE_LIBRARY=os.path.join(build, "libclient", "libsluice.so"))
    sizes = [int(x) for x in args.batch_sizes.split(",")]
    with tempfile.TemporaryDirectory(prefix="sluice-pyb-") as tmp:
        data = args.data
        if not data:
            data = os.path.join(tmp, "ctr")
            subprocess.run([ctl, "gen", "ctr", data, "--files", "4", "--records", "200000"],
                           check=True, stdout=subprocess.DEVNULL)
        conf = os.path.join(tmp, "conf")
        os.mkdir(conf)
        for bs in sizes:
            spec = {"name": "pyb%d" % bs, "type": "independent", "args": {
                "dataset": {"type": "dir", "args": {"data_dir": os.path.abspath(data)}},
                "target_batch_size": bs, "drop_remainder": True, "epochs": None,
                "num_prefetch": 8, "num_read_buffer_bytes": 1 << 20,
                "primary_features": [{"from_name": f, "to_name": f} for f in FEATURES]}}
            with open(os.path.join(conf, "pyb%d.json" % bs), "w") as f:
                json.dump(spec, f)
        sock = os.path.join(tmp, "s.sock")
        d = subprocess.Popen([sluiced, "--no-config", "--socket", sock, "--config-dir", conf],
                             stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        try:
            for _ in range(200):
                if os.path.exists(sock) or d.poll() is not None:
                    break
                time.sleep(0.05)
            if not os.path.exists(sock):
                raise SystemExit("python_reader: sluiced did not start: %s" % d.stderr.read())
            for bs in sizes:
                name = "pyb%d" % bs
                c_runs, py_runs = [], []
                for _ in range(args.repeat):
                    c_runs.append(run([bench, "reader", "--socket", sock, "--name", name,
                                       "--batches", str(args.batches),
                                       "--warmup", str(args.warmup)], env))
                    py_runs.append(run([sys.executable, os.path.abspath(__file__), "--child",
                                        "--socket", sock, "--name", name, "--root", root,
                                        "--batches", str(args.batches),
                                        "--warmup", str(args.warmup)], env))

                def med(runs, key):
                    return statistics.median(float(r[key]) for r in runs)
                c_bps, py_bps = med(c_runs, "batches_per_s"), med(py_runs, "batches_per_s")
                print("bench=python_reader batch_size=%d runs=%d c_batches_per_s=%.1f "
                      "py_batches_per_s=%.1f ratio=%.3f c_cpu_us_per_batch=%.2f "
                      "py_cpu_us_per_batch=%.2f" % (
                          bs, args.repeat, c_bps, py_bps, py_bps / c_bps,
                          med(c_runs, "cpu_us_per_batch"), med(py_runs, "cpu_us_per_batch")),
                      flush=True)
        finally:
            d.send_signal(signal.SIGTERM)
            try:
                d.wait(timeout=20)
            except subprocess.TimeoutExpired:
                d.kill()
                d.wait()


if __name__ == "__main__":
    main()
