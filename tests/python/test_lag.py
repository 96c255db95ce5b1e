# SPDX-License-Identifier: Apache-2.0
"""The broadcast lag policy (DESIGN.md §5, docs/DECISIONS.md "Readers that cannot hold
others"): with the default policy a reader that stopped (SIGSTOP, a pause) is moved off the
shared stream, by its time bound or by max_lag, so that the others go on past what the ring
holds; after it goes on it gets every batch, once, the same as the shared stream, and once it
has caught up on its private pipeline it is moved back onto the shared ring. An explicit
lag="hold" still holds the others back. A real sluiced, real reader processes."""

import json
import os
import queue
import signal
import subprocess
import sys
import threading

import pytest

import sluice
import test_daemon
from conftest import ctl, image_spec, shuffled, wait_for
from lag_reader import digest  # the reader processes' digest: both sides compare the same

HERE = os.path.dirname(os.path.abspath(__file__))
EPOCHS = 40  # 8 batches an epoch (60 records of 8): 320 batches, five times the ring's 64
BATCHES = 8 * EPOCHS
MOVED_LAG, MOVED_TIME = 2, 3  # stats reader.<id>.moved: ipc_ring_reader_moved_why


@pytest.fixture
def roomy(tmp_path, data):
    """A daemon of its own whose ring holds 64 of the image batches (--pipeline-memory 16M, as
    test_sluice.py's roomy_daemon): a reader can get 63 batches ahead of a stopped one."""
    conf = str(tmp_path / "conf")
    os.makedirs(conf)
    d = test_daemon.Daemon(str(tmp_path), conf, ["--pipeline-memory", "16M"])
    assert d.ready, "sluiced did not say READY=1"
    d.data = data
    yield d
    d.stop()


class Proc:
    """A reader process; its stdout lines (JSON, or sluicectl's) in a queue."""

    def __init__(self, argv, stdin=None):
        self.p = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                  stdin=stdin, text=True)
        self.lines, self.errs = queue.Queue(), queue.Queue()
        for f, q in ((self.p.stdout, self.lines), (self.p.stderr, self.errs)):
            threading.Thread(target=self._pump, args=(f, q), daemon=True).start()

    @staticmethod
    def _pump(f, q):
        for line in f:
            q.put(line)
        q.put(None)

    def next_line(self, q=None, timeout=60):
        line = (q or self.lines).get(timeout=timeout)
        assert line is not None, "the reader process ended: rc %s" % self.p.wait()
        return line

    def expect(self, key, timeout=60):
        """Its JSON lines up to the first with key (that line's value); the seqs before it."""
        seqs = []
        while True:
            o = json.loads(self.next_line(timeout=timeout))
            if key in o:
                return o[key], seqs
            seqs.append((o["seq"], o.get("digest")))

    def stopped(self):
        with open("/proc/%d/stat" % self.p.pid) as f:
            return f.read().rsplit(")", 1)[1].split()[0] == "T"

    def close(self):
        if self.p.poll() is None:
            os.kill(self.p.pid, signal.SIGCONT)
            self.p.kill()
        self.p.wait()


def lag_reader(d, name, *args):
    return Proc([sys.executable, os.path.join(HERE, "lag_reader.py"), d.sock, name] +
                [str(a) for a in args], stdin=subprocess.PIPE)


def go(proc):
    proc.p.stdin.write("\n")
    proc.p.stdin.flush()


def reader_ids(st):
    return sorted({int(k.split(".")[1]) for k in st if k.startswith("reader.")})


def read_all(r, seen):
    for b in r:
        with b:
            seen[b.seq] = digest(b)


def check_moved_reader_gets_everything(st_child_seqs, seen):
    """The stopped reader's batches, before and after it went on: every seq once, in order,
    each the shared stream's batch."""
    seqs = [s for s, _ in st_child_seqs]
    assert seqs == list(range(BATCHES)), "no batch lost or repeated for the stopped reader"
    assert all(seen[s] == dg for s, dg in st_child_seqs), "the shared stream's batches"


def run_stopped(d, name, args, why):
    """A lag_reader that stops after 3 batches with args; the test's reader goes on far past
    the ring's size; the stopped one was moved for why; after SIGCONT it reads everything."""
    child = lag_reader(d, name, "--stop-after", 3, *args)
    try:
        child.expect("attached")
        fast = sluice.attach(name, socket=d.sock)  # attached second: the larger reader id
        go(child)
        stop_seq, before = child.expect("stopped")
        assert stop_seq == 2
        wait_for("the reader to stop", child.stopped, timeout=30)
        slots = sluice.stats(name, socket=d.sock)["ring_slots"]
        seen = {}
        for _ in range(2 * slots):  # without the move the ring (64) would stall this
            with fast.next(timeout=60) as b:
                seen[b.seq] = digest(b)
        st = sluice.stats(name, socket=d.sock)
        cid, fid = reader_ids(st)
        assert st["reader.%d.moved" % cid] == why, st
        assert st["reader.%d.moved" % fid] == 0
        assert child.stopped(), "moved off while it was stopped"
        os.kill(child.p.pid, signal.SIGCONT)
        read_all(fast, seen)
        assert sorted(seen) == list(range(BATCHES))
        n, after = child.expect("end", timeout=120)
        assert n == BATCHES
        check_moved_reader_gets_everything(before + after, seen)
        assert child.p.wait(timeout=60) == 0
        fast.close()
    finally:
        child.close()


def test_stopped_reader_moved_off_by_its_time_bound(roomy):
    """SIGSTOPped with the default policy and a time bound of 1 s (max_lag out of reach: 63 of
    64 slots): once it has held the other reader back for a second it is moved off."""
    name = sluice.register(image_spec(roomy.data, name="lag-time", epochs=EPOCHS,
                                      **shuffled(5)), socket=roomy.sock)
    run_stopped(roomy, name, ["--max-lag", 63, "--lag-timeout", 1], MOVED_TIME)


def test_sluiceds_lag_timeout_is_the_default_time_bound(tmp_path, data):
    """sluiced --lag-timeout 1: a reader that gives no time bound (max_lag out of reach) is
    moved off by time once it has held the other back for a second."""
    conf = str(tmp_path / "conf")
    os.makedirs(conf)
    d = test_daemon.Daemon(str(tmp_path), conf, ["--pipeline-memory", "16M", "--lag-timeout", "1"])
    assert d.ready, "sluiced did not say READY=1"
    try:
        name = sluice.register(image_spec(data, name="lag-opt", epochs=EPOCHS, **shuffled(7)),
                               socket=d.sock)
        run_stopped(d, name, ["--max-lag", 63], MOVED_TIME)
    finally:
        assert d.stop() == 0


def test_stopped_reader_moved_off_by_max_lag(roomy):
    """SIGSTOPped with the default policy, max_lag 4 and the default time bound (300 s): it is
    moved off once the other reader is 5 batches ahead of it."""
    name = sluice.register(image_spec(roomy.data, name="lag-max", epochs=EPOCHS,
                                      **shuffled(6)), socket=roomy.sock)
    run_stopped(roomy, name, ["--max-lag", 4], MOVED_LAG)


def test_zeroed_c_options_get_the_default_policy(roomy):
    """sluicectl drain attaches with sluice_attach_opts_init's zeroed options (no lag flag):
    paused mid-stream, it is moved off at the default max_lag (half the ring, 32) while the
    other reader goes on past the ring's size; then it reads every batch once."""
    name = sluice.register(image_spec(roomy.data, name="lag-c", epochs=EPOCHS,
                                      **shuffled(7)), socket=roomy.sock)
    drain = Proc([os.environ["SLUICECTL"], "--socket", roomy.sock, "drain", "--json",
                  "--pause-after", "3", name], stdin=subprocess.PIPE)
    try:
        assert drain.next_line(drain.errs).startswith("paused: batches=3")
        fast = sluice.attach(name, socket=roomy.sock)
        seen = {}
        for _ in range(2 * 64):
            with fast.next(timeout=60) as b:
                seen[b.seq] = digest(b)
        st = sluice.stats(name, socket=roomy.sock)
        cid, fid = reader_ids(st)
        assert st["reader.%d.moved" % cid] == MOVED_LAG, st
        go(drain)
        read_all(fast, seen)
        assert drain.p.wait(timeout=120) == 0
        seqs = []
        while True:
            line = drain.lines.get(timeout=10)
            if line is None:
                break
            seqs.append(json.loads(line)["seq"])
        assert seqs == list(range(BATCHES)), "no batch lost or repeated"
        fast.close()
    finally:
        drain.close()


def test_explicit_hold_still_holds(roomy):
    """lag="hold": the stopped reader holds the other back (the daemon's holding_ns for it
    grows while the other has taken all there is), is never moved, even past the default
    max_lag that a default reader would be moved at; after SIGCONT both read everything."""
    name = sluice.register(image_spec(roomy.data, name="lag-hold", epochs=EPOCHS,
                                      **shuffled(8)), socket=roomy.sock)
    child = lag_reader(roomy, name, "--lag", "hold", "--stop-after", 3)
    try:
        child.expect("attached")
        fast = sluice.attach(name, socket=roomy.sock)
        go(child)
        _, before = child.expect("stopped")
        wait_for("the reader to stop", child.stopped, timeout=30)
        seen = {}

        def held():  # the writer waits on the stopped one, and fast has all there is
            while True:
                try:
                    b = fast.next(timeout=0)
                except TimeoutError:
                    break
                with b:
                    seen[b.seq] = digest(b)
            st = sluice.stats(name, socket=roomy.sock)
            cid, _ = reader_ids(st)
            return (st["reader.%d.holding_ns" % cid] >= 1e9 and
                    len(seen) == st["batches_published"]) and st
        st = wait_for("the stopped reader to hold the other back", held, timeout=60)
        cid, fid = reader_ids(st)
        assert st["reader.%d.moved" % cid] == 0, st
        assert 32 < len(seen) <= st["ring_slots"] + 3, "held at the ring's size"
        assert st["reader.%d.holding_ns" % fid] == 0
        os.kill(child.p.pid, signal.SIGCONT)
        read_all(fast, seen)
        n, after = child.expect("end", timeout=120)
        assert n == BATCHES and sorted(seen) == list(range(BATCHES))
        check_moved_reader_gets_everything(before + after, seen)
        fast.close()
    finally:
        child.close()


def test_lag_arguments_are_checked(roomy):
    name = sluice.register(image_spec(roomy.data, name="lag-args"), socket=roomy.sock)
    with pytest.raises(ValueError):
        sluice.attach(name, socket=roomy.sock, lag="hold", lag_timeout=1)
    with pytest.raises(ValueError):
        sluice.attach(name, socket=roomy.sock, lag="hold", max_lag=3)
    with pytest.raises(ValueError):
        sluice.attach(name, socket=roomy.sock, mode="split", lag_timeout=1)
    with pytest.raises(ValueError):
        sluice.attach(name, socket=roomy.sock, lag="sometimes")
    sluice.attach(name, socket=roomy.sock, mode="split", lag="hold").close()


def test_late_reader_moved_before_its_first_epoch_gets_whole_epochs(roomy):
    """Regression: a reader that joins mid-epoch starts at the next whole epoch (it skips the
    tail of the current one); moved off by the lag policy before it took anything, its private
    pipeline starts in that tail, and libsluice forgot the epoch to start at: it got the tail."""
    name = sluice.register(image_spec(roomy.data, name="lag-late", epochs=EPOCHS),
                           socket=roomy.sock)
    first = sluice.attach(name, socket=roomy.sock)
    for s in range(70):  # past what the ring (64) holds: its oldest batches were reclaimed
        with first.next(timeout=60) as b:
            assert b.seq == s
    late = sluice.attach(name, socket=roomy.sock, max_lag=1)
    for _ in range(20):  # 20 batches ahead of late, which took nothing: late is moved off
        first.next(timeout=60).release()

    def moved():
        st = sluice.stats(name, socket=roomy.sock)
        return st["reader.%d.moved" % reader_ids(st)[1]] == MOVED_LAG
    wait_for("the late reader to be moved off", moved, timeout=60)
    with late.next(timeout=60) as b:
        assert b.epoch >= 1 and b.seq == 8 * b.epoch, "a whole epoch, from its start"
    late.close()
    first.close()


def listed(d):
    r = ctl("--socket", d.sock, "list", "--json")
    assert r.returncode == 0, r.stderr
    return [p["name"] for p in json.loads(r.stdout)["pipelines"]]


def log_text(tmp_path):
    with open(os.path.join(str(tmp_path), "sluiced.log")) as f:
        return f.read()


def test_moved_reader_rejoins_the_shared_stream_once_caught_up(roomy, tmp_path):
    """SIGSTOPped, moved off by a time bound of 1 s, SIGCONTed: the reader (paced at 2 ms a
    batch) catches up on its private pipeline while the other reader (lag="hold") waits at
    128, so that the shared ring holds [128, 192); once the shared ring holds its next batch
    it is moved back (the same MOVED handshake): the shared pipeline's stats say it rejoined
    (rejoins, reader.<id>.rejoined), its private pipeline is dropped, gone from sluicectl
    list, and it got every batch once, in order, each the shared stream's."""
    name = sluice.register(image_spec(roomy.data, name="lag-rejoin", epochs=EPOCHS,
                                      **shuffled(9)), socket=roomy.sock)
    child = lag_reader(roomy, name, "--stop-after", 3, "--max-lag", 63, "--lag-timeout", 1,
                       "--pace-ms", 2)
    try:
        child.expect("attached")
        fast = sluice.attach(name, socket=roomy.sock, lag="hold")
        go(child)
        _, before = child.expect("stopped")
        wait_for("the reader to stop", child.stopped, timeout=30)
        slots = sluice.stats(name, socket=roomy.sock)["ring_slots"]
        seen = {}
        for _ in range(2 * slots):  # past the ring: the stopped reader was moved off
            with fast.next(timeout=60) as b:
                seen[b.seq] = digest(b)
        st = sluice.stats(name, socket=roomy.sock)
        cid, _ = reader_ids(st)
        assert st["reader.%d.moved" % cid] == MOVED_TIME, st
        assert st["rejoins"] == 0
        os.kill(child.p.pid, signal.SIGCONT)

        def back():  # a reader of the shared ring again, at its saved position
            st = sluice.stats(name, socket=roomy.sock)
            ids = [i for i in reader_ids(st) if st.get("reader.%d.rejoined" % i) == 1]
            return st["rejoins"] == 1 and ids and st
        st = wait_for("the moved reader to be moved back", back, timeout=120)
        log = log_text(tmp_path)
        assert "moved back to the shared stream" in log, log
        private = name + "@1"
        assert "attached to %s" % private in log, "it read a private pipeline meanwhile"
        wait_for("its private pipeline to be dropped", lambda: private not in listed(roomy),
                 timeout=60)
        assert listed(roomy) == [name]
        read_all(fast, seen)
        assert sorted(seen) == list(range(BATCHES))
        n, after = child.expect("end", timeout=120)
        assert n == BATCHES
        check_moved_reader_gets_everything(before + after, seen)
        assert child.p.wait(timeout=60) == 0
        st = sluice.stats(name, socket=roomy.sock)
        assert st["rejoins"] == 1, "moved back once, never off again"
        fast.close()
    finally:
        child.close()


def test_restarted_reader_a_little_behind_shares_again(roomy):
    """A reader that resumes from a saved state that the running shared pipeline's ring still
    holds joins that ring at exactly its next batch (no private pipeline: sluicectl list shows
    one; stats rejoins, reader.<id>.rejoined), and reads on the same batches as the stream."""
    name = sluice.register(image_spec(roomy.data, name="lag-resume", epochs=4,
                                      **shuffled(10)), socket=roomy.sock)
    first = sluice.attach(name, socket=roomy.sock)
    seen = {}
    for _ in range(20):
        with first.next(timeout=60) as b:
            seen[b.seq] = digest(b)
    r = sluice.attach(name, socket=roomy.sock)
    for s in range(12):
        with r.next(timeout=60) as b:
            assert b.seq == s
    state = r.state()
    r.close()
    again = sluice.attach(name, socket=roomy.sock, state=state)
    st = sluice.stats(name, socket=roomy.sock)
    assert st["rejoins"] == 1, st
    assert [i for i in reader_ids(st) if st["reader.%d.rejoined" % i] == 1]
    assert listed(roomy) == [name], "no private pipeline"
    got = []
    for b in again:
        with b:
            got.append((b.seq, digest(b)))
    read_all(first, seen)
    assert [s for s, _ in got] == list(range(12, 32)), "from its next batch, each once"
    assert all(seen[s] == dg for s, dg in got), "the shared stream's batches"
    again.close()
    first.close()
