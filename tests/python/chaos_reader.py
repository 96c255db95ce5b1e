# SPDX-License-Identifier: Apache-2.0
"""A reader process for the chaos test (test_chaos.py): a training process that can be killed.

    chaos_reader.py SOCKET SPEC OUT MODE [--group G] [--index I --count N] [--pace-file F]
                    [--pace S] [--stop-file F] [--go-file F]

Attaches to the pipeline of SPEC (a path) and appends one JSON line per event to OUT, flushed
as it goes: {"ev": "attach", "pid", "from"} when it attached (from: the seq whose saved state it
resumed after, -1 for none), {"seq", "epoch", "ids", "re"} per batch (ids: the records' numbers,
re: marked re-delivered; a broadcast reader adds "st", its state after the batch in hex, or null
when sluiced was down), {"ev": "error", "errno", "msg"} and {"ev": "end"}.

A broadcast reader started again after a kill resumes from the state of the last batch line of
OUT that has one; a split or rank reader joins its group again. Across a restart of sluiced the
library re-attaches by itself (it gives up after a while: then the next call tries again). A
member removed for holding a batch past the lease (ETIME) says so and attaches again. While
--pace-file exists it sleeps --pace seconds per batch (a training step). With --stop-file, when
that file exists after it took a batch, it removes it, says {"ev": "stopping", "seq"} and
SIGSTOPs itself holding the batch (the test lets it go on with SIGCONT). With --go-file it
reads once that file exists (the test starts every reader of a group at the first batch).
"""

import argparse
import errno
import faulthandler
import json
import os
import signal
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "libclient", "python"))

import sluice  # noqa: E402

PATIENCE = 90  # seconds without sluiced before giving up


def cut_partial_line(path):
    """A line cut short by a kill is not a record: drop it."""
    if not os.path.exists(path):
        return
    with open(path, "rb+") as f:
        data = f.read()
        if data and not data.endswith(b"\n"):
            f.truncate(data.rfind(b"\n") + 1)


def last_state(path):
    """(seq, state) of the last batch line with a state, or (-1, None)."""
    seq, st = -1, None
    if os.path.exists(path):
        with open(path) as f:
            for line in f:
                x = json.loads(line)
                if x.get("st"):
                    seq, st = x["seq"], bytes.fromhex(x["st"])
    return seq, st


class Out:
    def __init__(self, path):
        self.f = open(path, "a")

    def __call__(self, obj):
        self.f.write(json.dumps(obj, separators=(",", ":")) + "\n")
        self.f.flush()


def attach(a, state):
    """Attach, retrying while sluiced is down (between a kill and its restart)."""
    kw = {"spec": a.spec, "socket": a.socket, "mode": a.mode}
    if a.group:
        kw["group"] = a.group
    if a.mode == "rank":
        kw.update(index=a.index, count=a.count)
    if state is not None:
        kw["state"] = state
    deadline = time.monotonic() + PATIENCE
    while True:
        try:
            return sluice.attach(**kw)
        except sluice.SluiceError as e:
            if e.errno not in (errno.ENOENT, errno.ECONNREFUSED, errno.ECONNRESET,
                               errno.EPIPE) or time.monotonic() > deadline:
                raise
        time.sleep(0.05)  # polls: sluiced is back once an attach succeeds


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("socket")
    ap.add_argument("spec")
    ap.add_argument("out")
    ap.add_argument("mode")
    ap.add_argument("--group")
    ap.add_argument("--index", type=int)
    ap.add_argument("--count", type=int)
    ap.add_argument("--pace-file")
    ap.add_argument("--pace", type=float, default=0.01)
    ap.add_argument("--stop-file")
    ap.add_argument("--go-file")
    a = ap.parse_args()
    faulthandler.register(signal.SIGUSR1)  # the test asks where it waits when it waited long
    cut_partial_line(a.out)
    out = Out(a.out)
    frm, state = last_state(a.out) if a.mode == "broadcast" else (-1, None)
    r = attach(a, state)
    out({"ev": "attach", "pid": os.getpid(), "from": frm})
    while a.go_file and not os.path.exists(a.go_file):  # the others attach too
        time.sleep(0.01)  # polls the go file
    lost_since = None
    while True:
        try:
            b = r.next(timeout=PATIENCE)
            lost_since = None
        except sluice.SluiceError as e:
            if e.errno == errno.ECONNRESET:  # the library gave up re-attaching: try again
                lost_since = lost_since or time.monotonic()
                if time.monotonic() - lost_since < PATIENCE:
                    continue
            out({"ev": "error", "errno": e.errno, "msg": e.strerror})
            if e.errno != errno.ETIME:
                sys.exit(1)
            r.close()  # removed for its lease: a member again
            r = attach(a, None)
            out({"ev": "attach", "pid": os.getpid(), "from": -1})
            continue
        if b is None:
            break
        ids = [int(s.split(b"-")[1]) for s in b["id"].to_list()]
        if a.stop_file and os.path.exists(a.stop_file):
            os.unlink(a.stop_file)
            out({"ev": "stopping", "seq": b.seq})
            os.kill(os.getpid(), signal.SIGSTOP)
        line = {"seq": b.seq, "epoch": b.epoch, "ids": ids, "re": b.redelivered,
                "t": round(time.monotonic(), 3)}
        if a.mode == "broadcast":
            try:
                line["st"] = r.state().hex()
            except sluice.SluiceError as e:
                if e.errno != errno.ECONNRESET:
                    raise
                line["st"] = None  # sluiced is down: this batch has no saved state
        out(line)
        b.release()
        if a.pace_file and os.path.exists(a.pace_file):
            time.sleep(a.pace)  # the workload: a training step's pace
    out({"ev": "end"})
    r.close()


if __name__ == "__main__":
    main()
