# SPDX-License-Identifier: Apache-2.0
"""A pipeline whose engine never comes back (issue 37, "nothing a user can name blocks a thread
that others need"), against a real sluiced: its driver stalls for good opening a data file
(SLUICED_TEST_STALL_OPEN, the shape of a read from a dead NFS server). `stats`, `list` and
`rm` of it answer within a bound, the other pipelines and clients go on, the stuck one is
reported in the log, and SIGTERM stops sluiced within its bound, naming what it abandoned.

Each step waits on what it checks (a log line, a reply, the process's exit), never on a time.
"""

import os
import signal
import subprocess
import time

import pytest

from conftest import ctl, test_daemon

import sluice

STALL = "stall-me"


def _spec(data_dir, name, batch=4):
    return {"type": "independent", "name": name,
            "args": {"dataset": {"type": "dir", "args": {"data_dir": data_dir}},
                     "target_batch_size": batch, "drop_remainder": False, "epochs": 1,
                     "num_read_buffer_bytes": 65536, "num_prefetch": 2,
                     "num_parallel_reads": 1,
                     "primary_features": [{"from_name": "id", "to_name": "id"}]}}


def _gen(path, records):
    r = ctl("gen", "seq", path, "--records", records, "--files", 2, "--seed", 3)
    assert r.returncode == 0, r.stderr


def _log(d):
    with open(os.path.join(os.path.dirname(d.sock), "sluiced.log")) as f:
        return f.read()


def _wait_log(d, text, seconds):
    """The log once it holds text; fails after seconds (a bound, not a pace: it polls)."""
    end = time.monotonic() + seconds
    while text not in _log(d):
        assert d.p.poll() is None, "sluiced exited: " + _log(d)[-2000:]
        assert time.monotonic() < end, "no %r in the log: %s" % (text, _log(d)[-2000:])
        time.sleep(0.02)  # polls the log for the line


def _timed(fn):
    t = time.monotonic()
    out = fn()
    return out, time.monotonic() - t


@pytest.fixture
def stall_daemon(tmp_path):
    conf = tmp_path / "conf"
    os.makedirs(str(conf))
    d = test_daemon.Daemon(str(tmp_path), str(conf), [],
                           env={"SLUICED_TEST_STALL_OPEN": STALL})
    assert d.ready, "sluiced did not say READY=1"
    yield d
    if d.p.poll() is None:
        d.p.kill()
        d.p.wait()


def test_a_stuck_pipeline_blocks_no_one_and_sluiced_still_stops(stall_daemon, tmp_path):
    d = stall_daemon
    stuck_dir = str(tmp_path / STALL)
    _gen(stuck_dir, 400)
    stuck = sluice.register(_spec(stuck_dir, "stuck"), socket=d.sock)
    _wait_log(d, "the open of %s" % stuck_dir, 30)  # its driver is in the stall now
    st, took = _timed(lambda: sluice.stats(stuck, socket=d.sock))
    assert st["status"] == 0 and took < 5, (st, took)  # running, as far as it knows
    r, took = _timed(lambda: ctl("--socket", d.sock, "list", timeout=30))
    assert r.returncode == 0 and "stuck" in r.stdout and took < 5, (r.stdout, r.stderr, took)
    # rm answers within its bound: the driver's join goes to a thread of its own
    r, took = _timed(lambda: ctl("--socket", d.sock, "rm", "stuck", timeout=30))
    assert r.returncode == 0 and took < 5, (r.stdout, r.stderr, took)
    r = ctl("--socket", d.sock, "list", timeout=30)
    assert r.returncode == 0 and "stuck" not in r.stdout, r.stdout
    _wait_log(d, "pipeline stuck: its engine has not stopped", 30)
    # everyone else goes on: a new pipeline registers and is read to its end
    ok_dir = str(tmp_path / "ok")
    _gen(ok_dir, 40)
    n = 0
    with sluice.attach(sluice.register(_spec(ok_dir, "after"), socket=d.sock),
                       socket=d.sock) as rd:
        for b in iter(lambda: rd.next(60), None):
            n += 1
            b.release()
    assert n == 10, n
    # SIGTERM: sluiced stops within its bound (5 s for the stuck engine), says what it left
    t = time.monotonic()
    d.p.send_signal(signal.SIGTERM)
    try:
        rc = d.p.wait(30)
    except subprocess.TimeoutExpired:
        pytest.fail("sluiced did not stop on SIGTERM with a stuck pipeline: " + _log(d)[-2000:])
    took = time.monotonic() - t
    d.ns.close()
    log = _log(d)
    assert rc == 0 and took < 15, (rc, took)
    assert "pipeline stuck: its engine did not stop within 5000 ms of sluiced's stop" in log, log
    assert "stopped, leaving the stuck pipelines above" in log, log
