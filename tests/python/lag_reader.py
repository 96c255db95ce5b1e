# SPDX-License-Identifier: Apache-2.0
"""A broadcast reader process that stops itself, for the lag-policy tests (test_lag.py).

    lag_reader.py SOCKET NAME [--lag hold|catch_up] [--max-lag N] [--lag-timeout S]
                  [--pace-ms MS] --stop-after K

Attaches to pipeline NAME (lag None unless --lag: the daemon's default policy), prints
{"attached": true} and waits for a line on stdin; then takes batches, printing {"seq", "digest"} for each, until it has taken
K; it prints {"stopped": seq of the last one}, holding that batch, and stops itself with
SIGSTOP (as a job an operator or a debugger stopped). After SIGCONT it releases it and reads
on to the end of the stream, printing each batch, then {"end": n batches}; with --pace-ms
it takes one batch every MS ms after SIGCONT (a job paced by its training step).
"""

import argparse
import hashlib
import json
import os
import signal
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "libclient", "python"))

import sluice  # noqa: E402


def digest(b):
    h = hashlib.sha256()
    for name in sorted(b):
        v = b[name]
        parts = [v.values, v.row_splits] if isinstance(v, sluice.Ragged) else [v]
        for a in parts:
            for x in ([a.values, a.offsets] if isinstance(a, sluice.Strings) else [a]):
                h.update(x.tobytes())
    return h.hexdigest()


def out(obj):
    sys.stdout.write(json.dumps(obj) + "\n")
    sys.stdout.flush()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("socket")
    ap.add_argument("name")
    ap.add_argument("--lag")
    ap.add_argument("--max-lag", type=int)
    ap.add_argument("--lag-timeout", type=float)
    ap.add_argument("--pace-ms", type=float)
    ap.add_argument("--stop-after", type=int, required=True)
    a = ap.parse_args()
    r = sluice.attach(a.name, socket=a.socket, lag=a.lag, max_lag=a.max_lag,
                      lag_timeout=a.lag_timeout)
    out({"attached": True})
    sys.stdin.readline()
    n = 0
    while True:
        b = r.next(120)
        if b is None:
            break
        out({"seq": b.seq, "digest": digest(b)})
        n += 1
        if n == a.stop_after:
            out({"stopped": b.seq})
            os.kill(os.getpid(), signal.SIGSTOP)  # here until SIGCONT, holding b
        b.release()
        if a.pace_ms and n > a.stop_after:
            time.sleep(a.pace_ms / 1000)  # the pace of a training step: the workload
    out({"end": n})
    r.close()


if __name__ == "__main__":
    main()
