# SPDX-License-Identifier: Apache-2.0
"""A reader process for the consumer-group tests (test_groups.py): a real training process.

    group_reader.py SOCKET NAME MODE [--group G] [--index I --count N] [--hold-after K]

Attaches to pipeline NAME, prints {"attached": reader name} and waits for a line on stdin; then
prints one JSON line per batch ({"seq", "epoch", "labels", "redelivered"}) and {"end": true}.
With --hold-after K it takes K batches (releasing them), then takes one more, prints
{"holding": seq, "labels": [...]} and keeps it until it is killed or a line comes on stdin;
then it releases it, asks for the next batch and prints {"error": errno, "message": ...} (a
member removed for holding it past the daemon's lease) or carries on. Any other removal by
sluiced (its group ended) is printed the same way, and the process exits 0.
"""

import argparse
import json
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "libclient", "python"))

import sluice  # noqa: E402


def out(obj):
    sys.stdout.write(json.dumps(obj) + "\n")
    sys.stdout.flush()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("socket")
    ap.add_argument("name")
    ap.add_argument("mode")
    ap.add_argument("--group")
    ap.add_argument("--index", type=int)
    ap.add_argument("--count", type=int)
    ap.add_argument("--hold-after", type=int)
    a = ap.parse_args()
    r = sluice.attach(a.name, socket=a.socket, mode=a.mode, group=a.group, index=a.index,
                      count=a.count)
    out({"attached": a.name})
    sys.stdin.readline()
    taken = 0
    while True:
        try:
            b = r.next(60)
        except sluice.SluiceError as e:  # removed by sluiced: the test checks why
            out({"error": e.errno, "message": e.strerror})
            return
        if b is None:
            break
        labels = b["label"].reshape(-1).tolist()
        if a.hold_after is not None and taken == a.hold_after:
            out({"holding": b.seq, "labels": labels})
            sys.stdin.readline()  # killed here, holding b, or told to go on
            b.release()
            try:
                b = r.next(60)
            except sluice.SluiceError as e:
                out({"error": e.errno, "message": e.strerror})
                return
            if b is None:
                break
            labels = b["label"].reshape(-1).tolist()
        out({"seq": b.seq, "epoch": b.epoch, "labels": labels,
             "redelivered": b.redelivered})
        b.release()
        taken += 1
    out({"end": True})
    r.close()


if __name__ == "__main__":
    main()
