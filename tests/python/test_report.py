# SPDX-License-Identifier: Apache-2.0
"""Where a pipeline's time goes (issue 20): `sluicectl stats NAME` and `sluicectl top` with the
resource model, against a real sluiced and real readers.

A reader that takes a batch every 20 ms asks for at most 50 batches a second: the pipeline could
go much faster, waits for room in its ring, and the model must say the consumer limits it, and
that the reader's demand is about 50/s. A reader as fast as it can be makes the pipeline itself
the limit: a stage's CPU, the cores or the driver, never the consumer; and the rate the model
predicts is at least what the pipeline delivers.
"""

import json
import os
import threading
import time

import sluice
from conftest import ctl, image_spec, shuffled

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
    deadline = time.monotonic() + 30
    while len(taken) < 20 and time.monotonic() < deadline:  # waits for the condition
        time.sleep(0.01)
    assert len(taken) >= 20, "the reader got no batches"
    return stop, t


def register(env, name, seed):
    """An endless shuffled pipeline over the image dataset, registered as name."""
    p = os.path.join(env.tmp, name + ".json")
    with open(p, "w") as f:
        json.dump(image_spec(env.data, name=name, epochs=None, batch=8, **shuffled(seed)), f)
    r = ctl("--socket", env.sock, "register", p)
    assert r.returncode == 0, r.stderr


def test_slow_reader_is_the_limit(fresh_daemon):
    env = fresh_daemon
    register(env, "slow", 2)
    stop, t = start_reader(env, "slow", PERIOD_S)
    try:
        refreshes = top_json(env.sock)
    finally:
        stop.set()
        t.join(30)
    m = model_of(refreshes[-1], "slow")  # the last second only
    assert m["limit"] == "consumer", m
    assert 25 <= m["demand_per_s"] <= 60, m  # one batch per 20 ms and a little
    assert 25 <= m["batches_per_s"] <= 60, m
    assert m["predicted_per_s"] > 2 * m["batches_per_s"], m  # it could go much faster
    (rd,) = m["readers"].values()
    assert rd["waiting"] < 0.2, m  # the reader never waits for the pipeline
    # the human view says as much
    r = ctl("--socket", env.sock, "stats", "slow")
    assert r.returncode == 0 and "limit: consumer" in r.stdout, r.stdout[-600:]
    assert "predicted at most" in r.stdout and "<- bottleneck" not in r.stdout


def test_fast_reader_the_pipeline_is_the_limit(fresh_daemon):
    env = fresh_daemon
    register(env, "fast", 3)
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
    # with the pread fallback the reads are system calls on threads of their own, and on a
    # loaded host the driver can wait half the window for them: the model says "disk" then
    # (a bound of the pipeline all the same, never the consumer's)
    pread = st.get("stats", st).get("io_uring") == 0
    assert m["limit"] in ("stage_cpu", "cores", "sequential") + (("disk",) if pread else ()), m
    assert m["bottleneck"] in ("read", "frame", "interleave", "shuffle", "parse", "deliver"), m
    assert m["batches_per_s"] > 100, m
    # a prediction is a bound on what the pipeline can deliver at its allocation: the
    # pipeline never delivers much more than that
    assert m["predicted_per_s"] >= 0.7 * m["batches_per_s"], m
    assert m["predicted_all_per_s"] >= m["predicted_per_s"] * 0.999, m
    assert abs(sum(s["share"] for s in m["stages"].values()) - 1) < 1e-6, m
    assert st["model"]["window_s"] > 0 and st["model"]["workers"] >= 1, st["model"]
    assert st["model"]["cpus"] > 0 and st["model"]["host_cpus"] >= 1, st["model"]
