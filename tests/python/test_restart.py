# SPDX-License-Identifier: Apache-2.0
"""Readers of the Python package across a kill -9 of sluiced (issue 19 item 6).

The reader is mid-stream by construction: it has taken N batches in this process when the
daemon is killed, and the ring (8 slots) holds less than the rest, so it must re-attach.
"""

import errno
import json
import os
import signal
import socket
import threading
import time

import pytest

from conftest import ctl, image_spec, read_labels, run_reference, shuffled, test_daemon, wait_for

import sluice

OPTS = ["--ring-slots", "8"]


def _spec(data, **kw):
    return image_spec(data, epochs=2, batch=2, **shuffled(9), **kw)  # 60 batches


_read = read_labels


def _want(ref):
    return [(b["seq"], b["tensors"]["label"]["values"], False) for b in ref]


def test_reader_by_spec_resumes_exactly_after_kill(tmp_path, data):
    spec = _spec(data)
    want = _want(run_reference(tmp_path, spec, "label"))
    tmp, sd = str(tmp_path), str(tmp_path / "state")
    conf = str(tmp_path / "conf")
    os.makedirs(conf)
    d = test_daemon.Daemon(tmp, conf, OPTS + ["--state-dir", sd])
    d2 = None
    try:
        with sluice.attach(spec=spec, socket=d.sock) as r:
            head = _read(r, 20)
            d.stop(signal.SIGKILL)
            d2 = test_daemon.Daemon(tmp, conf, OPTS + ["--state-dir", sd])
            tail = _read(r)
    finally:
        rc = d2.stop() if d2 else None
    assert len(want) == 60 and head + tail == want
    assert rc == 0
    with open(os.path.join(tmp, "sluiced.log")) as f:
        assert "resumed from the position kept" in f.read()


def test_no_state_dir_is_estale_not_a_replay(tmp_path, data):
    spec = _spec(data)
    tmp, conf = str(tmp_path), str(tmp_path / "conf")
    os.makedirs(conf)
    d = test_daemon.Daemon(tmp, conf, OPTS)
    d2 = None
    try:
        with sluice.attach(spec=spec, socket=d.sock) as r:
            head = _read(r, 20)
            d.stop(signal.SIGKILL)
            d2 = test_daemon.Daemon(tmp, conf, OPTS)
            seen = []
            with pytest.raises(sluice.SluiceError) as ei:
                _read(r, out=seen)  # what the killed daemon's ring still held, then the error
            assert ei.value.errno == errno.ESTALE
            assert "cannot resume where it was" in ei.value.strerror
            with pytest.raises(sluice.SluiceError):  # sticky
                r.next(timeout=1)
    finally:
        if d2:
            d2.stop()
    seqs = [s for s, _, _ in head + seen]
    assert seqs == list(range(len(seqs))) and 20 <= len(seqs) < 60  # nothing read again


def _lag_moved(d, data):
    """A named pipeline read by a fast reader and a catch-up one (max_lag 2) that holds its
    first batch until the lag policy moves it off to a private pipeline; each has read a few
    batches. The readers and what each read so far."""
    name = sluice.register(_spec(data, name="lagged"), socket=d.sock)
    fast = sluice.attach(name, socket=d.sock)
    slow = sluice.attach(name, socket=d.sock, lag="catch_up", max_lag=2)
    b0 = slow.next(timeout=60)
    s_head = [(b0.seq, b0["label"].reshape(-1).tolist(), b0.redelivered)]
    # the ring holds 8: the fast reader gets this far only once the held one is moved off
    f_head = _read(fast, 20)
    b0.release()
    _read(slow, 5, s_head)  # the first of them from its own pipeline
    listed = ctl("--socket", d.sock, "list").stdout
    assert "lagged@" in listed, "a private pipeline serves the slow reader: " + listed
    return fast, slow, f_head, s_head


def test_reader_moved_by_lag_policy_resumes_after_kill(tmp_path, data):
    """A catch-up reader that the lag policy moved off to a private pipeline, then kill -9 of
    sluiced mid-stream: the fast reader resumes on the shared pipeline and the moved one on
    its private pipeline's record, each with every batch exactly once, in order."""
    want = _want(run_reference(tmp_path, _spec(data), "label"))
    tmp, sd, conf = str(tmp_path), str(tmp_path / "state"), str(tmp_path / "conf")
    os.makedirs(conf)
    d = test_daemon.Daemon(tmp, conf, OPTS + ["--state-dir", sd])
    d2 = None
    try:
        fast, slow, f_head, s_head = _lag_moved(d, data)
        d.stop(signal.SIGKILL)
        d2 = test_daemon.Daemon(tmp, conf, OPTS + ["--state-dir", sd])
        f_all = _read(fast, out=f_head)
        s_all = _read(slow, out=s_head)
        fast.close()
        slow.close()
    finally:
        if not d2:
            d.stop(signal.SIGKILL)  # failed before its kill: no daemon is left behind
        rc = d2.stop() if d2 else None
    assert len(want) == 60
    assert f_all == want, "the shared pipeline's reader: every batch once, in order"
    assert s_all == want, "the moved reader, on its private pipeline: every batch once"
    assert rc == 0


def _records(sd):
    return [f for f in os.listdir(sd) if f.endswith(".pos")]


def _wait_log(tmp, text, timeout=30):
    """Until sluiced's log has text (the condition itself, polled)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        with open(os.path.join(tmp, "sluiced.log")) as f:
            if text in f.read():
                return
        time.sleep(0.02)  # polls the log line itself
    raise AssertionError("sluiced never logged %r" % text)


def _sever(sock_path):
    """Shut down this process's connections to sluiced (the process and sluiced live on)."""
    n = 0
    for fd in map(int, os.listdir("/proc/self/fd")):
        try:
            if not os.readlink("/proc/self/fd/%d" % fd).startswith("socket:"):
                continue
            s = socket.fromfd(fd, socket.AF_UNIX, socket.SOCK_STREAM)
        except OSError:
            continue
        try:
            if s.getpeername() == sock_path:
                s.shutdown(socket.SHUT_RDWR)
                n += 1
        except OSError:
            pass
        finally:
            s.close()
    return n


def test_private_pipeline_resumes_after_its_connection_closes(tmp_path, data):
    """A reader on a private pipeline (moved off by the lag policy) whose connection closes
    while sluiced stays up: the pipeline goes with its last reader, but its position stays
    (for --linger), so the reader comes back with its token and reads on exactly; after the
    linger the record is gone from the state directory."""
    want = _want(run_reference(tmp_path, _spec(data), "label"))
    tmp, sd, conf = str(tmp_path), str(tmp_path / "state"), str(tmp_path / "conf")
    os.makedirs(conf)
    d = test_daemon.Daemon(tmp, conf, OPTS + ["--state-dir", sd, "--linger", "2"])
    try:
        fast, slow, f_head, s_head = _lag_moved(d, data)
        assert _sever(d.sock) >= 1
        _wait_log(tmp, "stopped: its reader")  # the private pipeline went
        f_all = _read(fast, out=f_head)
        s_all = _read(slow, out=s_head)
        fast.close()
        slow.close()
        assert f_all == want, "the shared pipeline's reader: every batch once, in order"
        assert s_all == want, "the private pipeline's reader came back: every batch once"
        # the private pipelines' records go (at the detach, or --linger after the close):
        # only the shared pipeline's stays
        deadline = time.monotonic() + 30
        while len(_records(sd)) != 1 and time.monotonic() < deadline:
            time.sleep(0.05)  # polls the condition itself
        assert len(_records(sd)) == 1, _records(sd)
    finally:
        d.stop()


def _rank_seq(sd, n):
    """Where the kept rank groups of n members start (the seq), or None."""
    for f in os.listdir(sd):
        if f.endswith(".pos"):
            try:
                with open(os.path.join(sd, f)) as fh:
                    rec = json.loads(fh.readline())  # the record; its MAC line follows
            except ValueError:  # being replaced
                continue
            for k in rec["rank"]:
                if k["n"] == n:
                    return k["seq"]
    return None


def _wait_rank_seq(sd, n, seq):
    """Until the kept rank groups of n members start at seq (the record is written at most
    once a second)."""
    deadline = time.monotonic() + 30
    while _rank_seq(sd, n) != seq and time.monotonic() < deadline:
        time.sleep(0.02)  # polls the condition itself
    assert _rank_seq(sd, n) == seq


def _read_all(rs, outs, timeout=20):
    """Each reader to its end in a thread of its own (rank members wait for each other): its
    batches into outs[i], then the error that ended it, if one did."""
    def run(r, out):
        try:
            _read(r, out=out, timeout=timeout)
        except sluice.SluiceError as e:
            out.append(e)
    ts = [threading.Thread(target=run, args=ro) for ro in zip(rs, outs)]
    for t in ts:
        t.start()
    for t in ts:
        t.join(120)


def _log(p):
    """The log of the daemons of the test (p: a _RankPair or a Daemon)."""
    tmp = p.tmp if hasattr(p, "tmp") else os.path.dirname(p.sock)
    with open(os.path.join(tmp, "sluiced.log")) as f:
        return f.read()


class _RankPair:
    """A daemon with a state dir and a rank group of 2 by spec (60 batches: 30 each)."""

    def __init__(self, tmp_path, data):
        self.spec = _spec(data)
        want = _want(run_reference(tmp_path, self.spec, "label"))
        self.want = [want[0::2], want[1::2]]
        self.tmp, self.sd = str(tmp_path), str(tmp_path / "state")
        self.conf = str(tmp_path / "conf")
        os.makedirs(self.conf)
        self.d = self.start()
        self.rs = [sluice.attach(spec=self.spec, socket=self.d.sock, mode="rank", group="g",
                                 index=i, count=2) for i in range(2)]

    def start(self):
        return test_daemon.Daemon(self.tmp, self.conf, OPTS + ["--state-dir", self.sd])

    def restart(self):
        self.d.stop(signal.SIGKILL)
        self.d = self.start()


def test_rank_member_resumes_when_the_others_released_past_its_next(tmp_path, data):
    """Rank 0 took batches 0..8, rank 1 took and released 1..11: the kept rank position is
    batch 10, past rank 0's next (9) but not past its next one of its own (10). After a kill -9
    both resume exactly (rank 0 used to get ESTALE: "the kept one is past the reader's")."""
    p = _RankPair(tmp_path, data)
    try:
        outs = [_read(p.rs[0], 5), _read(p.rs[1], 6)]
        _wait_rank_seq(p.sd, 2, 10)
        p.restart()
        _read_all(p.rs, outs)
    finally:
        for r in p.rs:
            r.close()
        p.d.stop()
    assert outs == p.want


def _kept_rank(sd, n):
    """The kept records of the state dir that have a rank position for n members: [(low_seq,
    rank seq)] (read after a kill: nothing replaces them then)."""
    got = []
    for f in _records(sd):
        with open(os.path.join(sd, f)) as fh:
            rec = json.loads(fh.readline())  # the record; its MAC line follows
        got += [(rec["low_seq"], k["seq"]) for k in rec["rank"] if k["n"] == n]
    return got


def test_rank_group_killed_before_its_kept_position_moved_resumes_exactly(tmp_path, data):
    """kill -9 of sluiced while the position it kept for a rank group is still the one written
    when the members attached (batch 0: the record is rewritten only once the oldest batch held
    moves, at most once a second), the members well past it: rank 0 took batch 0 and holds it
    (so the record cannot move, whatever the timing), rank 1 took and released 1, 3, 5 and 7.
    docs/DECISIONS.md "Restarts lose nothing": a deterministic rank group resumes exactly once
    per rank (not ESTALE: the kept state, at 0, is not past either member's next batch of its
    own), and nothing comes again from the start: the daemon restarts at batch 0 and each member
    gives back unread what it had."""
    p = _RankPair(tmp_path, data)
    try:
        b0 = p.rs[0].next(timeout=60)
        outs = [[(b0.seq, b0["label"].reshape(-1).tolist(), b0.redelivered)], _read(p.rs[1], 4)]
        assert [s for s, _, _ in outs[0] + outs[1]] == [0, 1, 3, 5, 7]
        p.d.stop(signal.SIGKILL)
        # what the killed daemon kept: the position of the attach, nothing later
        assert _kept_rank(p.sd, 2) == [(0, 0)], _kept_rank(p.sd, 2)
        b0.release()  # into the killed daemon's ring: taken, so it counts as read
        p.d = p.start()
        _read_all(p.rs, outs)
        log = _log(p)
    finally:
        for r in p.rs:
            r.close()
        p.d.stop()
    assert outs == p.want  # each rank its batches once, in order, none marked re-delivered
    resumed = [x for x in log.splitlines() if "rank reader resumed" in x]
    assert len(resumed) == 2 and all(x.endswith("exactly where it was") for x in resumed), log


def _reading(r, out, timeout=20):
    """A thread (started) reading r to its end into out, then the error that ended it."""
    def run():
        try:
            _read(r, out=out, timeout=timeout)
        except sluice.SluiceError as e:
            out.append(e)
    t = threading.Thread(target=run)
    t.start()
    return t


def _only_pipeline(sock):
    """The name of the one pipeline sluiced runs (by `sluicectl list --json`), or None."""
    r = ctl("--socket", sock, "list", "--json")
    pls = json.loads(r.stdout)["pipelines"] if r.returncode == 0 else []
    return pls[0]["name"] if len(pls) == 1 else None


def test_rank_members_with_tokens_of_two_runs_resume_together(tmp_path, data):
    """sluiced killed, rank 0 re-attaches to the new one and rank 1 does not, sluiced killed
    again: rank 0 comes back with the second run's token, and only once the pipeline it resumed
    has moved on (its ring reclaimed the first batch it started at) does rank 1 come back with
    the first run's token; they read on together, exactly, in one group.

    The chaos test found them resumed apart, each waiting for ever for the other's batches: a
    member joined its group only where it resumed from the same kept record (run and name), and
    a member with the other run's record fell back to the lookup by state, which shares a
    running pipeline only while its ring still holds the batch it started at; past that, the
    second member got a private pipeline of its own. (With two members the two records keep
    the same rank state: the run that one member missed cannot move past the batches held for
    it. What differs is the record itself and the pipeline having moved on.)"""
    p = _RankPair(tmp_path, data)
    threads = []
    try:
        outs = [_read(p.rs[0], 3), _read(p.rs[1], 3)]
        # The kept record (written at most once a second) must be at batch 6 before the kill:
        # kept at 0, the new run holds rank 1's batches from 1 while rank 0, which read on from
        # its old ring, resumes past 8 ring slots from there, and waits for rank 1 (the two
        # always go together within the ring; rank 1 comes back only after the next restart).
        _wait_rank_seq(p.sd, 2, 6)
        p.restart()
        for _ in range(12):  # until it re-attached (what the old ring handed it comes first)
            _read(p.rs[0], len(outs[0]) + 1, out=outs[0])
            if _log(p).count("rank reader resumed") == 1:
                break
        assert _log(p).count("rank reader resumed") == 1
        p.restart()
        threads.append(_reading(p.rs[0], outs[0]))  # rank 0 alone resumes the group
        name = wait_for("rank 0 resumed in the third run",
                        lambda: _log(p).count("rank reader resumed") == 2
                        and _only_pipeline(p.d.sock))
        # its ring (8 slots) published a 9th batch: the first one it started at is gone
        wait_for("the resumed pipeline past its first batch",
                 lambda: sluice.stats(name, socket=p.d.sock)["batches_published"] > 8)
        threads.append(_reading(p.rs[1], outs[1]))  # then rank 1, with the first run's token
    finally:
        for t in threads:  # (each read times out after 20 s: a hang ends as a failure)
            t.join(120)
        for r in p.rs:
            r.close()
        p.d.stop()
    assert not any(t.is_alive() for t in threads)
    assert outs == p.want
    resumed = [x for x in _log(p).splitlines() if "rank reader resumed" in x]
    runs = [x.split("(run ")[1][:16] for x in resumed]
    assert len(runs) == 3 and runs[0] == runs[2] != runs[1], resumed  # run 1's, 2's, 1's
    # rank 1 joined the group where rank 0 resumed it (not a private NAME@N of its own)
    assert all(x.startswith("sluiced: pipeline %s:" % name) for x in resumed[1:]), resumed


def test_split_member_with_an_older_token_marks_what_the_group_had_since(tmp_path, data):
    """Split members a and b; sluiced killed; a re-attaches and reads 40 batches alone (past
    what the first run had published), b does not; sluiced killed again; b comes back first,
    with the first run's token, then a: every batch the group had comes again marked
    re-delivered (those a read in the second run came again unmarked to b)."""
    spec = image_spec(data, epochs=3, batch=2, **shuffled(9))  # 90 batches
    ref = dict((s, lab) for s, lab, _ in _want(run_reference(tmp_path, spec, "label")))
    tmp, sd, conf = str(tmp_path), str(tmp_path / "state"), str(tmp_path / "conf")
    os.makedirs(conf)
    start = lambda: test_daemon.Daemon(tmp, conf, OPTS + ["--state-dir", sd])  # noqa: E731
    d = start()
    rs = [sluice.attach(spec=spec, socket=d.sock, mode="split", group="g") for _ in range(2)]
    outs = [[], []]
    try:
        for r, out in zip(rs, outs):
            _read(r, 3, out=out)
        d.stop(signal.SIGKILL)
        d = start()
        for _ in range(40):
            _read(rs[0], len(outs[0]) + 1, out=outs[0])
        assert "split reader resumed" in _log(d)
        d.stop(signal.SIGKILL)
        n = _log(d).count("split reader resumed")
        d = start()
        for _ in range(12):  # b resumes the group first (its old ring's batches come first)
            _read(rs[1], len(outs[1]) + 1, out=outs[1])
            if _log(d).count("split reader resumed") > n:
                break
        _read_all(rs, outs)
    finally:
        for r in rs:
            r.close()
        d.stop()
    got = [b for out in outs for b in out]
    assert not [b for b in got if isinstance(b, Exception)], got
    assert sorted(set(s for s, _, _ in got)) == sorted(ref)
    assert all(ref[s] == lab for s, lab, _ in got)
    unmarked = [s for s, _, re in got if not re]
    assert len(unmarked) == len(set(unmarked)), sorted(unmarked)


def test_split_member_without_a_token_joins_its_group_where_it_resumed(tmp_path, data):
    """After a kill -9 a broadcast reader resumes first (the computation's shared pipeline),
    then split member a resumes its group on a private one; member b, closed, comes back as a
    new reader without a token: it joins the group where it resumed, and what the group may
    have had before the restart comes to it marked (it used to start a new group on the shared
    pipeline and read the group's batches again, unmarked)."""
    spec = image_spec(data, epochs=3, batch=2, **shuffled(9))  # 90 batches
    ref = dict((s, lab) for s, lab, _ in _want(run_reference(tmp_path, spec, "label")))
    tmp, sd, conf = str(tmp_path), str(tmp_path / "state"), str(tmp_path / "conf")
    os.makedirs(conf)
    start = lambda: test_daemon.Daemon(tmp, conf, OPTS + ["--state-dir", sd])  # noqa: E731
    d = start()
    c = sluice.attach(spec=spec, socket=d.sock)
    a, b = [sluice.attach(spec=spec, socket=d.sock, mode="split", group="g") for _ in range(2)]
    got = []
    try:
        _read(c, 5)
        _read(a, 3, out=got)
        _read(b, 3, out=got)
        d.stop(signal.SIGKILL)
        d = start()
        seen = _read(c, 1)
        while "broadcast reader resumed" not in _log(d) and len(seen) < 12:
            _read(c, len(seen) + 1, out=seen)
        _read(c, len(seen) + 10, out=seen)  # the shared pipeline moves on
        n = len(got)
        while "split reader resumed" not in _log(d) and len(got) < n + 12:
            _read(a, len(got) + 1, out=got)
        b.close()
        b = sluice.attach(spec=spec, socket=d.sock, mode="split", group="g")
        outs = [[], []]
        _read_all([a, b], outs)
        log = _log(d)
    finally:
        for r in (a, b, c):
            r.close()
        d.stop()
    got += [x for out in outs for x in out]
    assert not [x for x in got if isinstance(x, Exception)], got
    assert 'a split reader of group "g" joins it on' in log and "private pipeline" in log, log
    assert sorted(set(s for s, _, _ in got)) == sorted(ref)
    assert all(ref[s] == lab for s, lab, _ in got)
    unmarked = [s for s, _, re in got if not re]
    assert len(unmarked) == len(set(unmarked)), sorted(unmarked)


def _restart_later(d, tmp, conf, sd, gap_s, box):
    """Kill sluiced now; start it again gap_s seconds later (the restart under test)."""
    d.stop(signal.SIGKILL)
    time.sleep(gap_s)  # workload: the restart's gap, what the reader must wait out
    box.append(test_daemon.Daemon(tmp, conf, OPTS + ["--state-dir", sd]))


def test_a_10_s_restart_is_waited_out(tmp_path, data):
    """Issue 37 item 7: a restart longer than the old 5 s window made every reader fail. The
    default window (60 s, SLUICE_REATTACH_S) waits out a 10 s gap: exactly the batches, in
    order, none twice."""
    spec = _spec(data)
    want = _want(run_reference(tmp_path, spec, "label"))
    tmp, sd, conf = str(tmp_path), str(tmp_path / "state"), str(tmp_path / "conf")
    os.makedirs(conf)
    d = test_daemon.Daemon(tmp, conf, OPTS + ["--state-dir", sd])
    box = []
    try:
        with sluice.attach(spec=spec, socket=d.sock) as r:
            head = _read(r, 20)
            t = threading.Thread(target=_restart_later, args=(d, tmp, conf, sd, 10, box))
            t.start()
            tail = _read(r, timeout=120)
            t.join()
    finally:
        rc = box[0].stop() if box else None
    assert head + tail == want and rc == 0


def test_reattach_window_is_a_setting(tmp_path, data):
    """attach(reattach_s=1): the reader gives up after its window (10 attempts 100 ms apart)
    when sluiced is not back, and says so; the next call tries again and resumes it."""
    spec = _spec(data)
    want = _want(run_reference(tmp_path, spec, "label"))
    tmp, sd, conf = str(tmp_path), str(tmp_path / "state"), str(tmp_path / "conf")
    os.makedirs(conf)
    d = test_daemon.Daemon(tmp, conf, OPTS + ["--state-dir", sd])
    d2 = None
    try:
        with sluice.attach(spec=spec, socket=d.sock, reattach_s=1) as r:
            head = _read(r, 20)
            d.stop(signal.SIGKILL)
            seen = []
            with pytest.raises(sluice.SluiceError) as ei:
                _read(r, out=seen)  # what the killed daemon's ring still held, then the error
            assert ei.value.errno == errno.ECONNRESET
            assert "10 attempts to re-attach failed" in ei.value.strerror, ei.value.strerror
            d2 = test_daemon.Daemon(tmp, conf, OPTS + ["--state-dir", sd])
            tail = _read(r)
    finally:
        rc = d2.stop() if d2 else None
    assert head + seen + tail == want and rc == 0
    with pytest.raises(ValueError):
        sluice.attach(spec=spec, socket=d.sock, reattach_s=-1)
