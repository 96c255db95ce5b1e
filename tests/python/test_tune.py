# SPDX-License-Identifier: Apache-2.0
"""sluiced's tuner (issue 20): the knobs a spec leaves "auto" move while batches flow, and no
batch changes for it.

A pipeline whose spec says "auto" for num_prefetch and num_read_buffer_bytes starts at one batch
job in flight and 64 KiB reads, and a reader as fast as it can be makes the pipeline the limit:
the tuner must step a knob (the stats say so, and the log says why) by the third window in a
row in which it found the pipeline the limit (its policy's rule; tune_limited_run, the longest
such run with no knob moved, never reaches 3 before a move). The tests count the tuner's windows
(tune_windows), not seconds: a loaded host makes the windows in which the reader is the limit
more, not the rule different.
The batches it delivered meanwhile must be exactly those a sluiced with --autotune=false
delivers for the same spec (every tensor's bytes, in order). Knobs the spec fixes never move.
"""

import hashlib
import itertools
import json
import os
import re
import time

import pytest

from conftest import ctl, shuffled, test_daemon

import sluice

FEATURES = ["dense%d" % i for i in range(13)] + ["sparse%d" % i for i in range(26)] + ["label"]


def _ctr(tmp):
    d = os.path.join(str(tmp), "ctr")
    r = ctl("gen", "ctr", d, "--records", 40000, "--files", 4, "--seed", 3)
    assert r.returncode == 0, r.stderr
    return d


def _spec(data, **args):
    a = {"dataset": {"type": "dir", "args": {"data_dir": data}}, "target_batch_size": 128,
         "drop_remainder": True, "epochs": None, "num_parallel_reads": 4,
         "primary_features": [{"from_name": f, "to_name": f} for f in FEATURES]}
    if "cycle_length" not in args:
        a.update(shuffled(5))
    a.update(args)
    return {"name": "tuned", "type": "independent", "args": a}


def _digest(b):
    h = hashlib.sha1(str(b.seq).encode())
    for f in FEATURES:
        h.update(b[f].tobytes())
    return h.hexdigest()


def _start(tmp, sub, extra=()):
    d = os.path.join(str(tmp), sub)
    os.makedirs(os.path.join(d, "conf"))
    # no record cache: from the second epoch a cached pipeline outruns any reader, and the
    # tuner rightly moves nothing (the pipeline is not the limit); these cases need it to be
    return test_daemon.Daemon(d, os.path.join(d, "conf"),
                              ["--ring-slots", "16", "--cache-memory", "0"] + list(extra))


def _log(dm):
    with open(os.path.join(os.path.dirname(dm.sock), "sluiced.log")) as f:
        return f.read()


def _knobs(dm):
    """`sluicectl stats tuned --json`'s knobs (the model since the pipeline started)."""
    r = ctl("--socket", dm.sock, "stats", "tuned", "--json")
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout)["model"]["knobs"]


def _read(dm, spec, until=None, n=None, timeout=300):
    """Digests of the batches read until until(stats) holds (checked every 50 batches), or n.
    until decides on the tuner's counts of its windows; timeout only ends a run that never
    comes to that (a tuner that judges no window, or never one with the pipeline the limit)."""
    out = []
    deadline = time.monotonic() + timeout
    with sluice.attach(spec=json.dumps(spec), socket=dm.sock) as r:
        while n is None or len(out) < n:
            b = r.next(timeout=30)
            assert b is not None
            out.append(_digest(b))
            b.release()
            if until and len(out) % 50 == 0:
                st = sluice.stats("tuned", socket=dm.sock)
                if until(st):
                    return out, st
                assert time.monotonic() < deadline, "timed out (the tuner's counts: %s)" % {
                    k: v for k, v in st.items() if k.startswith("tune")}
        return out, sluice.stats("tuned", socket=dm.sock)


# shuffled, 4 files read at once; or in file order under a cycle of 4, with the reads in
# flight per file a knob too (num_parallel_reads "auto" is then not the cycle)
@pytest.mark.parametrize("reads", [{}, {"cycle_length": 4, "num_parallel_reads": "auto"}],
                         ids=["shuffled", "cycle_length"])
def test_tuned_knobs_move_and_change_no_batch(tmp_path, reads):
    data = _ctr(tmp_path)
    spec = _spec(data, num_prefetch="auto", num_read_buffer_bytes="auto", **reads)
    dm = _start(tmp_path, "tuned")
    try:
        moved_at = []

        def moved_then_more(st):
            # by the third of a run of windows in which the pipeline was the limit a knob
            # steps (the read size may: below its bound, never held before a first move)
            assert st["tune_moves"] >= 1 or st["tune_limited_run"] < 3, \
                "%d windows in a row with the pipeline the limit, and no knob moved (%s)" % (
                    st["tune_limited_run"], {k: v for k, v in st.items() if k.startswith("tune")})
            # a knob moved, and 2 more windows went by with the new value
            if st["tune_moves"] >= 1 and not moved_at:
                moved_at.append(st["tune_windows"])
            return bool(moved_at) and st["tune_windows"] >= moved_at[0] + 2

        got, st = _read(dm, spec, until=moved_then_more)
        log = _log(dm)
        knobs = _knobs(dm)
    finally:
        dm.stop()
    assert st["autotune"] == 1 and st["tune_limited_windows"] >= 1, st
    assert st["tune_prefetch_max"] > 1
    # each knob where the log's last move of it took it (a probing tuner may step back to where
    # it started: under a cycle of 4 the first move may be the reads in flight per file alone)
    moves = re.findall(r"tuned (batch jobs in flight|the read size|reads in flight per file) "
                       r"(\d+) -> (\d+)", log)
    assert moves, log
    last = {what: int(to) for what, _, to in moves}
    assert st["tune_prefetch"] == last.get("batch jobs in flight", 1), (st, moves)
    assert st["tune_read_buffer_bytes"] == last.get("the read size", 64) << 10, (st, moves)
    if "reads in flight per file" in last:
        assert reads and st["tune_read_depth"] == last["reads in flight per file"], (st, moves)
    assert knobs["prefetch_tuned"] and knobs["read_buffer_tuned"], knobs
    assert knobs["read_depth_tuned"] == bool(reads), knobs
    assert knobs["moves"] >= 1 and knobs["prefetch"] >= 1, knobs

    dm = _start(tmp_path, "fixed", ["--autotune=false"])
    try:
        want, st = _read(dm, spec, n=len(got))
    finally:
        dm.stop()
    assert st["autotune"] == 0 and st["tune_moves"] == 0
    assert st["tune_prefetch"] == st["tune_prefetch_max"] == 2  # "auto" fixed, as before
    assert got == want  # every batch, in order, with every tensor's bytes


def test_fixed_knobs_do_not_move(tmp_path):
    data = _ctr(tmp_path)
    spec = _spec(data, num_prefetch=1, num_read_buffer_bytes=65536)
    dm = _start(tmp_path, "tuned")
    try:
        # 4 of the tuner's windows, 3 of them with the pipeline the limit: windows in which
        # "auto" knobs step (at once where a wait says which)
        _, st = _read(dm, spec, until=lambda st: st["tune_windows"] >= 4 and
                      st["tune_limited_windows"] >= 3)
        log = _log(dm)
        knobs = _knobs(dm)
        human = ctl("--socket", dm.sock, "stats", "tuned").stdout
    finally:
        dm.stop()
    assert st["tune_moves"] == 0, st
    assert st["tune_prefetch"] == st["tune_prefetch_max"] == 1
    assert st["tune_read_buffer_bytes"] == 65536
    assert ": tuned " not in log
    assert not knobs["prefetch_tuned"] and not knobs["read_buffer_tuned"], knobs
    assert not knobs["read_depth_tuned"], knobs
    assert ("knobs: 1 batch jobs in flight (fixed), reads of 64 KiB (fixed), 4 in flight per "
            "file (fixed)") in human, human


def _read_depth_max(half, slots):
    """pipeline.c's bound on reads in flight per file within half the budget (at 64 KiB reads):
    the most, 1 .. 16, whose buffers (depth + 1 + 16 pinned chunks per slot) fit; else 1."""
    fits = [d for d in range(1, 17) if slots * (d + 1 + 16) * 65536 <= half]
    return max(fits) if fits else 1


def _read_buffer_max(half, slots, depth):
    """pipeline.c's bound on the read size: the largest power of two from 64 KiB to 4 MiB whose
    buffers fit half the budget at that depth; else 64 KiB, the least."""
    m = 65536
    while m * 2 <= 4 << 20 and slots * (depth + 1 + 16) * m * 2 <= half:
        m *= 2
    return m


# 4 MiB under a cycle of 1, reads in flight tuned too (15 of 64 KiB fill 2 MiB); 12 MiB
# shuffled over 2 files, 4 reads in flight each (fixed): 128 KiB reads
@pytest.mark.parametrize("budget,reads,slots", [
    (4 << 20, {"cycle_length": 1, "num_parallel_reads": "auto"}, 1),
    (12 << 20, {}, 2),
], ids=["4MiB-cycle_length", "12MiB-shuffled"])
def test_ram_budget_bounds_the_tuner(tmp_path, budget, reads, slots):
    data = _ctr(tmp_path)
    spec = _spec(data, num_prefetch="auto", num_read_buffer_bytes="auto", ram_budget=budget,
                 **reads)
    dm = _start(tmp_path, "tuned")
    seen = []  # the knobs and their bounds at each reading
    try:
        deadline = time.monotonic() + 300  # only for a tuner that never judges a window
        with sluice.attach(spec=json.dumps(spec), socket=dm.sock) as r:
            for i in itertools.count(1):
                b = r.next(timeout=30)
                assert b is not None
                if i == 1:
                    # pl_pipeline_batch_bytes: 4096 for the header and table, each tensor's
                    # rows and 4096 of alignment (every CTR feature has a fixed shape)
                    batch_bytes = 4096 + sum(b[f].nbytes + 4096 for f in FEATURES)
                b.release()
                if i % 50:
                    continue
                st = sluice.stats("tuned", socket=dm.sock)
                seen.append({k: v for k, v in st.items() if k.startswith("tune_")})
                # until the tuner has moved, or judged 4 windows
                if st["tune_moves"] >= 1 or st["tune_windows"] >= 4:
                    break
                assert time.monotonic() < deadline, seen[-1]
    finally:
        dm.stop()
    half = budget // 2
    assert st["autotune"] == 1 and st["tune_knobs"] == (7 if reads else 3), st
    want_pf = min(32, half // batch_bytes)
    assert st["tune_prefetch_max"] == want_pf, (st["tune_prefetch_max"], want_pf, batch_bytes)
    assert st["tune_prefetch_max"] * batch_bytes <= half
    depth_max = _read_depth_max(half, slots) if reads else 4
    assert st["tune_read_depth_max"] == depth_max, st
    assert st["tune_read_buffer_max"] == _read_buffer_max(half, slots, depth_max), st
    assert slots * (depth_max + 17) * st["tune_read_buffer_max"] <= half
    assert seen
    for k in seen:  # at every reading, the knobs within their bounds
        assert k["tune_prefetch"] <= k["tune_prefetch_max"] == want_pf, k
        assert k["tune_read_buffer_bytes"] <= k["tune_read_buffer_max"], k
        assert k["tune_read_depth"] <= k["tune_read_depth_max"], k
