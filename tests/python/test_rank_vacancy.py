# SPDX-License-Identifier: Apache-2.0
"""A rank killed (issue 36): its group's other members get an error within the lease, not a hang.

Reader processes attach in rank mode (group "g", count 2) to a pipeline over `sluicectl gen seq`
served by a real sluiced with a short lease and a ring of 8 batches, print a line per batch,
and are killed with kill -9. A rank killed that does not come back: the ring fills with its
batches, and rank 0's next() fails (ENOLINK) within the lease and a bound, with a message that
names the pipeline, the group, the rank and the lease; a broadcast reader of the same pipeline
and another pipeline read on. A rank killed and started again within the lease: nobody gets an
error and the epoch is read whole. A rank that reads to the end and exits first: the other,
attached past the lease after it, finishes without an error.
"""

import errno
import json
import os
import queue
import signal
import subprocess
import sys
import threading
import time

import sluice
import test_daemon
from conftest import ctl

HERE = os.path.dirname(os.path.abspath(__file__))
RECORDS = 2000
SLOTS = 8  # the ring: it fills after a few batches of a vacant rank

READER = r'''
import argparse, json, sys, time
sys.path.insert(0, %(lib)r)
import sluice

ap = argparse.ArgumentParser()
ap.add_argument("socket")
ap.add_argument("name")
ap.add_argument("mode")
ap.add_argument("--index", type=int)
ap.add_argument("--count", type=int)
ap.add_argument("--pace", type=float, default=0)
ap.add_argument("--pause-after", type=int)
a = ap.parse_args()

def out(obj):
    sys.stdout.write(json.dumps(obj) + "\n")
    sys.stdout.flush()

kw = dict(socket=a.socket, mode=a.mode)
if a.mode == "rank":
    kw.update(group="g", index=a.index, count=a.count)
r = sluice.attach(a.name, **kw)
out({"attached": a.index})
sys.stdin.readline()  # go
taken = 0
while True:
    if a.pause_after is not None and taken == a.pause_after:
        out({"paused": taken})  # holding nothing, attached
        sys.stdin.readline()
    try:
        b = r.next(120)
    except sluice.SluiceError as e:
        out({"error": e.errno, "message": e.strerror})
        sys.exit(0)
    if b is None:
        break
    ids = [int(s.split(b"-")[1]) for s in b["id"].to_list()]
    out({"seq": b.seq, "ids": ids, "re": b.redelivered})
    b.release()
    taken += 1
    if a.pace:
        time.sleep(a.pace)  # pace: a training step
out({"end": True})
r.close()
'''


def scaled(seconds):
    return test_daemon.common.scaled(seconds)


class Proc:
    """The reader script in a process of its own; its JSON lines read by a thread, so that the
    test waits for each with a deadline (a reader that hangs fails the test, not blocks it)."""

    def __init__(self, script, sock, name, mode, *args):
        self.p = subprocess.Popen([sys.executable, script, sock, name, mode]
                                  + [str(a) for a in args],
                                  stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                  stderr=subprocess.PIPE, text=True)
        self.q = queue.Queue()
        self.lines = []
        threading.Thread(target=self._pump, daemon=True).start()

    def _pump(self):
        for line in self.p.stdout:
            self.q.put(json.loads(line))
        self.q.put(None)

    def get(self, seconds):
        """The next line; fails after seconds without one, or at the process's exit."""
        try:
            x = self.q.get(timeout=seconds)
        except queue.Empty:
            raise AssertionError("no line from the reader in %.1f s: it hangs" % seconds)
        assert x is not None, "the reader exited (%s): %s" % (self.p.poll(),
                                                              self.p.stderr.read()[-2000:])
        self.lines.append(x)
        return x

    def attached(self, seconds=60):
        assert "attached" in self.get(scaled(seconds))

    def go(self):
        self.p.stdin.write("go\n")
        self.p.stdin.flush()

    def batches(self, n, seconds=30):
        for _ in range(n):
            x = self.get(scaled(seconds))
            assert "seq" in x, x

    def to_end(self, seconds=60):
        """Lines until the end or an error (returned)."""
        while True:
            x = self.get(scaled(seconds))
            if "seq" not in x:
                return x

    def kill(self):
        self.p.send_signal(signal.SIGKILL)
        self.p.wait(30)

    def rest(self, seconds=30):
        """Every line it printed before it exited (killed), taken in."""
        while True:
            try:
                x = self.q.get(timeout=scaled(seconds))
            except queue.Empty:
                raise AssertionError("the reader's output did not end")
            if x is None:
                return
            self.lines.append(x)

    def ids(self):
        return [i for x in self.lines if "seq" in x for i in x["ids"]]

    def seqs(self):
        return [x["seq"] for x in self.lines if "seq" in x]


def start(tmp, lease):
    """sluiced with --lease (scaled seconds) and a ring of SLOTS batches; the dataset; the
    reader script."""
    conf = os.path.join(tmp, "conf")
    os.makedirs(conf)
    data = os.path.join(tmp, "seq")
    r = ctl("gen", "seq", data, "--records", RECORDS, "--files", 2)
    assert r.returncode == 0, r.stderr
    script = os.path.join(tmp, "reader.py")
    with open(script, "w") as f:
        f.write(READER % {"lib": os.path.join(HERE, "..", "..", "libclient", "python")})
    d = test_daemon.Daemon(tmp, conf, ["--ring-slots", str(SLOTS), "--lease", "%g" % lease])
    assert d.ready
    return d, data, script


def spec(data, name, epochs, batch):
    return {"type": "independent", "name": name, "args": {
        "dataset": {"type": "dir", "args": {"data_dir": data}}, "target_batch_size": batch,
        "drop_remainder": False, "epochs": epochs, "num_read_buffer_bytes": 65536,
        "num_prefetch": 2, "primary_features": [{"from_name": "id", "to_name": "id"}]}}


def log_of(tmp):
    with open(os.path.join(tmp, "sluiced.log")) as f:
        return f.read()


def ranks(script, d, name, *args, first=()):
    """Ranks 0 (with args + first) and 1 (args) of group "g", started at once (the first does
    not wait for the other past the lease), attached, then let go."""
    rs = [Proc(script, d.sock, name, "rank", "--index", k, "--count", 2, *args,
               *(first if k == 0 else ())) for k in range(2)]
    for r in rs:
        r.attached()
    for r in rs:
        r.go()
    return rs


def test_killed_rank_fails_the_others_within_the_lease(tmp_path):
    tmp = str(tmp_path)
    lease = scaled(3)
    d, data, script = start(tmp, lease)
    procs = []
    try:
        name = sluice.register(spec(data, "endless", None, 8), socket=d.sock)
        bc = Proc(script, d.sock, name, "broadcast")  # another job, reading everything
        procs.append(bc)
        bc.attached()
        rs = ranks(script, d, name)
        procs += rs
        bc.go()
        for p in rs + [bc]:
            p.batches(3)
        rs[1].kill()
        killed = time.monotonic()
        x = rs[0].to_end(4 * lease)  # fails if rank 0 hangs
        took = time.monotonic() - killed
        assert x.get("error") == errno.ENOLINK, x
        msg = x["message"]
        for want in ('pipeline "endless"', 'group "g"', "rank 1 of 2", "lease (%.1f s" % lease,
                     "restart the job"):
            assert want in msg, (want, msg)
        assert lease * 0.9 <= took < 4 * lease, (took, lease)  # not before the lease
        assert all(s % 2 == 0 for s in rs[0].seqs())
        assert rs[0].p.wait(30) == 0
        log = log_of(tmp)
        assert 'group "g": rank 1 of 2 has had no reader for' in log, log[-3000:]
        assert "its 1 member removed" in log, log[-3000:]
        # the pipeline did not fail: its broadcast reader reads on past the ring the vacant
        # rank held, once the empty group is closed (after its grace)
        last = max(bc.seqs())
        while max(bc.seqs()) <= last + 2 * SLOTS:
            assert "seq" in bc.get(scaled(30)), bc.lines[-1]
        st = sluice.stats(name, socket=d.sock)
        assert st["status"] == 0 and st["readers"] == 1, st
        # and sluiced serves another pipeline, and a new reader of this one
        other = sluice.register(spec(data, "other", 1, 50), socket=d.sock)
        with sluice.attach(other, socket=d.sock) as r:
            ids = [int(s.split(b"-")[1]) for b in r for s in b["id"].to_list()]
        assert sorted(ids) == list(range(RECORDS))
        again = Proc(script, d.sock, name, "rank", "--index", 0, "--count", 1)
        procs.append(again)
        again.attached()
        again.go()
        again.batches(3)
    finally:
        for p in procs:
            if p.p.poll() is None:
                p.kill()
        assert d.stop() == 0


def test_rank_back_within_the_lease(tmp_path):
    tmp = str(tmp_path)
    lease = scaled(3)
    d, data, script = start(tmp, lease)
    procs = []
    try:
        batch = 10
        n = RECORDS // batch  # one epoch: rank 0 the even seqs, rank 1 the odd ones
        # paced so that the epoch lasts past the lease after the restart
        pace = 2 * lease / (n // 2)
        name = sluice.register(spec(data, "epoch", 1, batch), socket=d.sock)
        rs = ranks(script, d, name, "--pace", pace)
        procs += rs
        for r in rs:
            r.batches(3)
        rs[1].kill()
        killed = time.monotonic()
        rs[1].rest()
        back = Proc(script, d.sock, name, "rank", "--index", 1, "--count", 2, "--pace", pace)
        procs.append(back)
        back.attached()
        back.go()
        assert time.monotonic() - killed < lease, "rank 1 came back after the lease"
        for p in (rs[0], back):
            x = p.to_end()
            assert x == {"end": True}, x
        assert time.monotonic() - killed > lease  # past it: a vacancy would have ended it
        assert all(s % 2 == 0 for s in rs[0].seqs())
        assert all(s % 2 == 1 for s in rs[1].seqs() + back.seqs())
        # nothing of the epoch lost: what rank 1 had not taken went to the rank started again
        assert set(rs[0].ids() + rs[1].ids() + back.ids()) == set(range(RECORDS))
        assert set(rs[0].seqs() + rs[1].seqs() + back.seqs()) == set(range(n))
        assert "has had no reader for" not in log_of(tmp)
        for p in (rs[0], back):
            assert p.p.wait(30) == 0
    finally:
        for p in procs:
            if p.p.poll() is None:
                p.kill()
        assert d.stop() == 0


def test_rank_that_ends_first_ends_nothing(tmp_path):
    tmp = str(tmp_path)
    lease = scaled(2)
    d, data, script = start(tmp, lease)
    procs = []
    try:
        batch = 20
        n = RECORDS // batch
        name = sluice.register(spec(data, "finite", 1, batch), socket=d.sock)
        # rank 0 takes all its batches, then stays attached (holding nothing) until told
        rs = ranks(script, d, name, first=("--pause-after", n // 2))
        procs += rs
        assert rs[1].to_end() == {"end": True}
        assert rs[1].p.wait(30) == 0  # it detached and exited: rank 1 is vacant
        while True:
            x = rs[0].get(scaled(30))
            if "paused" in x:
                break
            assert "seq" in x, x
        t0 = sluice.stats(name, socket=d.sock)["now_ns"]

        def later():
            s = sluice.stats(name, socket=d.sock)
            return s if s["now_ns"] - t0 > 2 * lease * 1e9 else None

        # poll: sluiced's clock (a stats field), until twice the lease passed with rank 1 gone
        st = test_daemon.poll_until(later, 60)
        assert st is not None and st["readers"] == 1, st  # rank 0 was not removed
        rs[0].go()
        assert rs[0].to_end() == {"end": True}, rs[0].lines[-1]
        assert rs[0].p.wait(30) == 0
        assert sorted(rs[0].ids() + rs[1].ids()) == list(range(RECORDS))
        assert "has had no reader for" not in log_of(tmp)
    finally:
        for p in procs:
            if p.p.poll() is None:
                p.kill()
        assert d.stop() == 0
