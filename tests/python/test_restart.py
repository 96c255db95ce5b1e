# SPDX-License-Identifier: Apache-2.0
"""Readers of the Python package across a kill -9 of sluiced (issue 19 item 6).

The reader is mid-stream by construction: it has taken N batches in this process when the
daemon is killed, and the ring (8 slots) holds less than the rest, so it must re-attach.
"""

import errno
import os
import signal
import socket
import time

import pytest

from conftest import ctl, image_spec, run_reference, shuffled, test_daemon

import sluice

OPTS = ["--ring-slots", "8"]


def _spec(data, **kw):
    return image_spec(data, epochs=2, batch=2, **shuffled(9), **kw)  # 60 batches


def _read(r, n=None, out=None):
    out = [] if out is None else out
    while n is None or len(out) < n:
        b = r.next(timeout=60)
        if b is None:
            break
        out.append((b.seq, b["label"].reshape(-1).tolist(), b.redelivered))
        b.release()
    return out


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
        d.stop(signal.SIGKILL)
        d2 = test_daemon.Daemon(tmp, conf, OPTS + ["--state-dir", sd])
        f_all = _read(fast, out=f_head)
        s_all = _read(slow, out=s_head)
        fast.close()
        slow.close()
    finally:
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
        time.sleep(0.02)
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
        name = sluice.register(_spec(data, name="lagged"), socket=d.sock)
        fast = sluice.attach(name, socket=d.sock)
        slow = sluice.attach(name, socket=d.sock, lag="catch_up", max_lag=2)
        b0 = slow.next(timeout=60)
        s_head = [(b0.seq, b0["label"].reshape(-1).tolist(), b0.redelivered)]
        f_head = _read(fast, 20)
        b0.release()
        _read(slow, 5, s_head)
        assert "lagged@" in ctl("--socket", d.sock, "list").stdout
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
            time.sleep(0.05)
        assert len(_records(sd)) == 1, _records(sd)
    finally:
        d.stop()
