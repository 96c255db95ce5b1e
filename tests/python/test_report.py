# SPDX-License-Identifier: Apache-2.0
"""Where a pipeline's time goes (issue 20): `sluicectl stats NAME` and `sluicectl top` with the
resource model, against a real sluiced and real readers.

A reader that takes a batch every 20 ms asks for at most 50 batches a second: the pipeline could
go much faster, waits for room in its ring, and the model must say the consumer limits it, and
that the reader's demand is what it took while it did not wait. A reader as fast as it can be
makes the pipeline itself the limit: a stage's CPU, the cores or the driver, never the consumer;
and the rate the model predicts is at least what the pipeline delivers. The rates are checked as
the counts they are over the model's window (batches made, batches taken), and by the states the
model gives, not against a clock: a loaded host changes the rates, not these.
"""

import json
import os
import threading
import time

import pytest

import sluice
from conftest import ctl, image_spec, shuffled, wait_for

PERIOD_S = 0.02  # the slow reader's pace: 50 batches a second at most


def top_json(sock, iterations=2, interval=1.0):
    r = ctl("--socket", sock, "top", "--json", "--iterations", iterations, "--interval",
            interval, timeout=60)
    assert r.returncode == 0, r.stderr
    return [json.loads(x) for x in r.stdout.splitlines() if x.strip()]


def model_of(refresh, name):
    for p in refresh["pipelines"]:
        if p["name"] == name:
            return p["model"]
    raise AssertionError("%s not in top: %s" % (name, refresh))


def counts(m):
    """The model's window as counts: (batches made, its one reader's id, batches it took)."""
    w = m["window_s"]
    assert w > 0 and len(m["readers"]) == 1, m
    ((rid, rd),) = m["readers"].items()
    return round(m["batches_per_s"] * w), rid, round(rd["taken_per_s"] * w)


def ring_of(sock, name):
    """`sluicectl stats NAME --json`: the pipeline's counters now."""
    r = ctl("--socket", sock, "stats", name, "--json")
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout)


def reader_loop(sock, name, stop, taken, pace):
    with sluice.attach(name, socket=sock) as r:
        while not stop.is_set():
            b = r.next(timeout=30)
            if b is None:
                break
            b.release()
            taken.append(1)
            if pace:
                time.sleep(pace)  # the workload: a training step of 20 ms


def start_reader(env, name, pace):
    stop, taken = threading.Event(), []
    t = threading.Thread(target=reader_loop, args=(env.sock, name, stop, taken, pace))
    t.start()
    try:
        wait_for("the reader to take 20 batches", lambda: len(taken) >= 20, timeout=30)
    except AssertionError:
        stop.set()
        t.join(30)
        raise
    return stop, t


def register(env, name, seed, batch=8):
    """An endless shuffled pipeline over the image dataset, registered as name."""
    p = os.path.join(env.tmp, name + ".json")
    with open(p, "w") as f:
        json.dump(image_spec(env.data, name=name, epochs=None, batch=batch, **shuffled(seed)), f)
    r = ctl("--socket", env.sock, "register", p)
    assert r.returncode == 0, r.stderr


def test_slow_reader_is_the_limit(fresh_daemon):
    env = fresh_daemon
    register(env, "slow", 2)
    stop, t = start_reader(env, "slow", PERIOD_S)
    try:
        refreshes = top_json(env.sock)
        st = ring_of(env.sock, "slow")
        r = ctl("--socket", env.sock, "stats", "slow")
    finally:
        stop.set()
        t.join(30)
    m = model_of(refreshes[-1], "slow")  # the last second only
    assert m["limit"] == "consumer", m
    made, rid, took = counts(m)
    # one batch a step of PERIOD_S at most (a sleep never ends early; a loaded host makes
    # the steps longer, not fewer batches a step), and some in the window
    assert 1 <= took <= m["window_s"] / PERIOD_S + 1, m
    # the pipeline made what its reader took, to within what it refills in a run (a quarter
    # of the ring) and its batch jobs in flight: it went no faster than its consumer
    assert abs(made - took) <= st["ring_slots"] // 4 + st["tune_prefetch"], (m, st)
    # the reader does not wait for the pipeline: the ring held batches for it, and the model
    # gives it a demand (one that waits nearly always has none: it takes what it gets), the
    # batches it took over the time it did not wait
    assert st["reader.%s.lag" % rid] > 0, st
    assert m["demand_per_s"] > 0, m
    waiting = m["readers"][rid]["waiting"]
    assert m["demand_per_s"] * m["window_s"] * (1 - waiting) == pytest.approx(took, abs=0.5), m
    assert m["predicted_per_s"] > 2 * m["demand_per_s"], m  # it could go much faster
    # the human view says as much
    assert r.returncode == 0 and "limit: consumer" in r.stdout, r.stdout[-600:]
    assert "predicted at most" in r.stdout and "<- bottleneck" not in r.stdout


def test_fast_reader_the_pipeline_is_the_limit(fresh_daemon):
    env = fresh_daemon
    # batches of 64 records: the pipeline's work a batch is many times the reader's (a next
    # and a release), so that the ring does not fill while a loaded host keeps the reader off
    # its core (with batches of 8 it did, now and then, and the pipeline waited for room)
    register(env, "fast", 3, batch=64)
    stop, t = start_reader(env, "fast", 0)
    try:
        refreshes = top_json(env.sock)
        r = ctl("--socket", env.sock, "stats", "fast", "--json")
    finally:
        stop.set()
        t.join(30)
    m = model_of(refreshes[-1], "fast")
    assert r.returncode == 0, r.stderr
    st = json.loads(r.stdout)
    made, _, took = counts(m)
    # with the pread fallback the reads are system calls on threads of their own, and on a
    # loaded host the driver can wait half the window for them: the model says "disk" then
    # (a bound of the pipeline all the same, never the consumer's)
    pread = st.get("stats", st).get("io_uring") == 0
    assert m["limit"] in ("stage_cpu", "cores", "sequential") + (("disk",) if pread else ()), m
    assert m["bottleneck"] in ("read", "frame", "interleave", "shuffle", "parse", "deliver"), m
    # counts over the window: the pipeline made batches, and its reader took them as they
    # came (never a ring's worth behind)
    assert made >= 1 and abs(made - took) <= st["ring_slots"], (m, st["ring_slots"])
    # a prediction is a bound on what the pipeline can deliver at its allocation: the
    # pipeline never delivers much more than that
    assert m["predicted_per_s"] >= 0.7 * m["batches_per_s"], m
    assert m["predicted_all_per_s"] >= m["predicted_per_s"] * 0.999, m
    assert abs(sum(s["share"] for s in m["stages"].values()) - 1) < 1e-6, m
    assert st["model"]["window_s"] > 0 and st["model"]["workers"] >= 1, st["model"]
    assert st["model"]["cpus"] > 0 and st["model"]["host_cpus"] >= 1, st["model"]
