# SPDX-License-Identifier: Apache-2.0
"""Consumer groups (DESIGN.md §5, issue 18) with real processes against a real sluiced.

One pipeline serves a job's rank readers and other jobs' broadcast readers from one
computation; a split member killed with kill -9 while holding a batch has it re-delivered,
marked, to another member; the torch adapter joins the job's rank group under torchrun.
"""

import errno
import json
import os
import signal
import subprocess
import sys
import threading

import pytest

import sluice
import test_daemon
from conftest import RECORDS, image_spec, run_reference, shuffled

try:
    import torch
except ImportError:
    torch = None

needs_torch = pytest.mark.skipif(torch is None, reason="[deps] torch is not installed (python3-torch)")

HERE = os.path.dirname(os.path.abspath(__file__))


class Proc:
    """group_reader.py in a process of its own: attached once started, reads after go()."""

    def __init__(self, sock, name, mode, *args):
        self.p = subprocess.Popen(
            [sys.executable, os.path.join(HERE, "group_reader.py"), sock, name, mode]
            + [str(a) for a in args],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        line = self.p.stdout.readline()
        assert line, "reader did not attach: %s" % self.p.stderr.read()
        assert json.loads(line) == {"attached": name}

    def go(self):
        self.p.stdin.write("go\n")
        self.p.stdin.flush()

    def line(self):
        line = self.p.stdout.readline()
        assert line, "reader ended early: %s" % self.p.stderr.read()
        return json.loads(line)

    def batches(self):
        """Every batch line until the end (the process exits 0)."""
        out = []
        while True:
            x = self.line()
            if x.get("end"):
                break
            out.append(x)
        assert self.p.wait(60) == 0, self.p.stderr.read()
        return out

    def kill(self):
        self.p.send_signal(signal.SIGKILL)
        self.p.wait(30)


def _labels(batches):
    return [b["labels"] for b in batches]


def test_ranks_of_a_job_and_broadcast_jobs_share_one_computation(fresh_daemon, tmp_path):
    """8 rank readers of one job and 2 broadcast jobs on one named pipeline: each rank gets
    exactly batches k mod 8, each job every batch, and the pipeline computed each batch once."""
    spec = image_spec(fresh_daemon.data, name="shared", batch=2, epochs=2)
    ref = _labels([{"labels": b["tensors"]["label"]["values"]}
                   for b in run_reference(tmp_path, spec, "label")])
    assert len(ref) == 2 * RECORDS // 2
    name = sluice.register(spec, socket=fresh_daemon.sock)
    ranks = [Proc(fresh_daemon.sock, name, "rank", "--group", "job-1", "--index", k,
                  "--count", 8) for k in range(8)]
    jobs = [Proc(fresh_daemon.sock, name, "broadcast") for _ in range(2)]
    for p in ranks + jobs:
        p.go()
    got_ranks = [p.batches() for p in ranks]
    got_jobs = [p.batches() for p in jobs]
    for got in got_jobs:
        assert _labels(got) == ref
    for k, got in enumerate(got_ranks):
        assert _labels(got) == ref[k::8], "rank %d" % k
        assert all(b["seq"] % 8 == k and not b["redelivered"] for b in got)
    st = sluice.stats(name, socket=fresh_daemon.sock)
    assert st["batches_published"] == len(ref)  # one computation for all ten readers


def test_member_past_its_lease_loses_its_batches(tmp_path, data):
    """sluiced --lease 1: a split member that keeps a batch (alive, not reading) is removed once
    it has held it past the lease; the batch goes to the group's other member, marked
    re-delivered, the group reads every record, the daemon logs why, and the slow member's next
    call says it was removed for its lease (ETIME), not that the daemon failed."""
    conf = str(tmp_path / "conf")
    os.makedirs(conf)
    d = test_daemon.Daemon(str(tmp_path), conf, ["--lease", "1"])
    assert d.ready
    try:
        spec = image_spec(data, name="leased", batch=4, epochs=1)
        ref = _labels([{"labels": b["tensors"]["label"]["values"]}
                       for b in run_reference(tmp_path, spec, "label")])
        name = sluice.register(spec, socket=d.sock)
        slow = Proc(d.sock, name, "split", "--group", "workers", "--hold-after", 2)
        other = Proc(d.sock, name, "split", "--group", "workers")
        slow.go()
        before = [slow.line() for _ in range(2)]
        held = slow.line()
        assert "holding" in held
        other.go()
        got = other.batches()  # ends once the held batch came back to the group
        redelivered = [b for b in got if b["redelivered"]]
        assert [b["seq"] for b in redelivered] == [held["holding"]]
        assert redelivered[0]["labels"] == held["labels"]
        assert sorted(b["seq"] for b in before + got) == list(range(len(ref)))
        with open(os.path.join(str(tmp_path), "sluiced.log")) as f:
            log = f.read()
        assert ("held batch %d for" % held["holding"]) in log and "lease of 1 s" in log, log
        slow.go()
        err = slow.line()
        assert err["error"] == errno.ETIME and "lease" in err["message"], err
        assert slow.p.wait(30) == 0
    finally:
        assert d.stop() == 0


def test_killed_split_member_batch_is_redelivered_marked(fresh_daemon, tmp_path):
    """kill -9 of a split member that holds a batch it took: another member of its group gets
    it, marked re-delivered; the group reads every record once otherwise; a broadcast reader and
    another group see every batch, unmarked."""
    spec = image_spec(fresh_daemon.data, name="redeliver", batch=4, epochs=1)
    ref = _labels([{"labels": b["tensors"]["label"]["values"]}
                   for b in run_reference(tmp_path, spec, "label")])
    name = sluice.register(spec, socket=fresh_daemon.sock)
    victim = Proc(fresh_daemon.sock, name, "split", "--group", "workers", "--hold-after", 2)
    members = [Proc(fresh_daemon.sock, name, "split", "--group", "workers") for _ in range(2)]
    other = Proc(fresh_daemon.sock, name, "split", "--group", "eval")
    bcast = Proc(fresh_daemon.sock, name, "broadcast")
    victim.go()
    before = [victim.line() for _ in range(2)]
    held = victim.line()
    assert "holding" in held
    victim.kill()
    for p in members + [other, bcast]:
        p.go()
    got = [b for p in members for b in p.batches()]
    redelivered = [b for b in got if b["redelivered"]]
    assert [b["seq"] for b in redelivered] == [held["holding"]]
    assert redelivered[0]["labels"] == held["labels"]
    seqs = sorted([b["seq"] for b in before] + [b["seq"] for b in got])
    assert seqs == list(range(len(ref)))  # each batch once in the group, the held one again
    assert sorted(r for b in before + got for r in b["labels"]) == sorted(r for b in ref
                                                                          for r in b)
    assert _labels(other.batches()) == ref
    bc = bcast.batches()
    assert _labels(bc) == ref and not any(b["redelivered"] for b in bc)


def test_group_refusals(fresh_daemon):
    spec = image_spec(fresh_daemon.data, name="refusals", epochs=None)
    name = sluice.register(spec, socket=fresh_daemon.sock)
    r = sluice.attach(name, socket=fresh_daemon.sock, mode="rank", index=0, count=2)
    try:
        # the default group reads in rank mode with count 2 now
        with pytest.raises(sluice.SluiceError) as e:
            sluice.attach(name, socket=fresh_daemon.sock, mode="rank", index=0, count=3)
        assert e.value.errno == errno.EBUSY
        assert "default group reads in rank mode with count 2" in str(e.value)
        with pytest.raises(sluice.SluiceError) as e:
            sluice.attach(name, socket=fresh_daemon.sock, mode="split")
        assert e.value.errno == errno.EBUSY and "rank mode" in str(e.value)
        with pytest.raises(sluice.SluiceError) as e:
            sluice.attach(name, socket=fresh_daemon.sock, mode="rank", index=0, count=2)
        assert e.value.errno == errno.EBUSY and "rank is taken" in str(e.value)
        # another group of the same pipeline may read in any mode
        with sluice.attach(name, socket=fresh_daemon.sock, mode="split", group="g2") as s:
            assert s.next(30) is not None
        with pytest.raises(ValueError, match="group of its own"):
            sluice.attach(name, socket=fresh_daemon.sock, group="g3")
        got = _read(r, 2)
    finally:
        r.close()
    # an empty group keeps its place (and its mode): a member that comes back goes on
    with pytest.raises(sluice.SluiceError) as e:
        sluice.attach(name, socket=fresh_daemon.sock, mode="split")
    assert e.value.errno == errno.EBUSY
    with sluice.attach(name, socket=fresh_daemon.sock, mode="rank", index=0, count=2) as r:
        again = _read(r, 2)
    assert [q for q, _ in got] == [0, 2] and [q for q, _ in again] == [4, 6]


def _torch_rank_batches(sock, name_or_spec, env, monkeypatch, workers=0, steps=None):
    steps = [] if steps is None else steps
    import sluice.torch as st
    for k, v in env.items():
        monkeypatch.setenv(k, str(v))
    ds = st.IterableDataset(name_or_spec, socket=sock)
    dl = torch.utils.data.DataLoader(ds, batch_size=None, num_workers=workers)
    bs = list(dl)
    ds.close()
    # every rank takes as many steps: the ranks one short repeat a batch, marked padded
    steps.append(len(bs))
    return [b["label"].reshape(-1).tolist() for b in bs if not b.padded]


@needs_torch
def test_torch_adapter_joins_the_jobs_rank_group(fresh_daemon, tmp_path, monkeypatch):
    """Under torchrun (LOCAL_RANK, LOCAL_WORLD_SIZE, TORCHELASTIC_RUN_ID) each process reads
    its share of one computation; on two hosts (NNODES 2) a spec gets this host's file shard,
    and a named pipeline without it is refused with what to do."""
    spec = image_spec(fresh_daemon.data, name="ddp", batch=4, epochs=1)
    ref = _labels([{"labels": b["tensors"]["label"]["values"]}
                   for b in run_reference(tmp_path, spec, "label")])
    name = sluice.register(spec, socket=fresh_daemon.sock)
    env = {"LOCAL_WORLD_SIZE": 2, "WORLD_SIZE": 2, "TORCHELASTIC_RUN_ID": "run-7"}
    steps = []
    got = [_torch_rank_batches(fresh_daemon.sock, name, dict(env, LOCAL_RANK=k), monkeypatch,
                               steps=steps) for k in range(2)]
    assert got[0] == ref[0::2] and got[1] == ref[1::2]
    assert len(ref) % 2 == 1 and steps == [(len(ref) + 1) // 2] * 2  # one rank padded
    # two hosts: by spec, host 1 reads the files of its shard (index 1 of 2)
    spec2 = image_spec(fresh_daemon.data, name="ddp2", batch=4, epochs=1)
    shard = dict(spec2, args=dict(spec2["args"], shard={"index": 1, "count": 2}))
    ref2 = _labels([{"labels": b["tensors"]["label"]["values"]}
                    for b in run_reference(tmp_path, shard, "label")])
    assert 0 < len(ref2) < len(ref)
    env2 = dict(env, NNODES=2, GROUP_RANK=1, WORLD_SIZE=4, TORCHELASTIC_RUN_ID="run-8")
    got2 = [_torch_rank_batches(fresh_daemon.sock, spec2, dict(env2, LOCAL_RANK=k),
                                monkeypatch) for k in range(2)]
    assert got2[0] == ref2[0::2] and got2[1] == ref2[1::2]
    with pytest.raises(ValueError, match="NNODES"):
        _torch_rank_batches(fresh_daemon.sock, name, dict(env2, LOCAL_RANK=0), monkeypatch)


def _read(r, n=None, timeout=30):
    out = []
    while n is None or len(out) < n:
        b = r.next(timeout)
        if b is None:
            break
        with b:
            out.append((b.seq, b["label"].reshape(-1).tolist()))
    return out


def _read_epochs(r, n, timeout=30):
    out = []
    while len(out) < n:
        b = r.next(timeout)
        assert b is not None
        with b:
            out.append((b.epoch, b["label"].reshape(-1).tolist()))
    return out


def test_pipeline_started_by_a_named_group(fresh_daemon, tmp_path):
    """A spec attached first by a split member of group "w": the ring's own group is "w" (no
    default group holds batches nobody takes); a broadcast reader of the same spec and the
    group's two members read 120 batches through a 64-slot ring."""
    spec = image_spec(fresh_daemon.data, batch=1, epochs=2)
    ref = [b["tensors"]["label"]["values"] for b in run_reference(tmp_path, spec, "label")]
    assert len(ref) == 2 * RECORDS
    a = sluice.attach(spec=spec, socket=fresh_daemon.sock, mode="split", group="w")
    b = sluice.attach(spec=spec, socket=fresh_daemon.sock, mode="split", group="w")
    c = sluice.attach(spec=spec, socket=fresh_daemon.sock)
    got = {}

    def run(k, r):
        got[k] = _read(r, timeout=60)
        r.close()

    # a thread each, as a job's processes would (a split member may wait for its end of
    # stream until the other member took what was handed to it)
    ts = [threading.Thread(target=run, args=kv) for kv in (("a", a), ("b", b), ("c", c))]
    for t in ts:
        t.start()
    for t in ts:
        t.join(120)
    assert [lab for _, lab in got["c"]] == ref
    split = sorted(got["a"] + got["b"])
    assert [s for s, _ in split] == list(range(len(ref)))
    assert [lab for _, lab in split] == ref


def test_abandoned_group_is_closed_after_its_grace(fresh_daemon):
    """A split group whose members all left holds its batches for a while (workers that come
    back between epochs find their place); once it holds a broadcast reader back for the
    grace period, the daemon closes it, says so in its log, and the reader goes on."""
    spec = image_spec(fresh_daemon.data, name="abandoned", epochs=None, batch=1)
    name = sluice.register(spec, socket=fresh_daemon.sock)
    s = sluice.attach(name, socket=fresh_daemon.sock, mode="split", group="gone")
    assert len(_read(s, 1)) == 1
    bc = sluice.attach(name, socket=fresh_daemon.sock)
    s.close()
    got = _read(bc, 300, timeout=60)  # more than the ring's 64 slots: the group had to go
    # whole epochs (of 60 batches): from seq 0, or from 60 when seq 0 was already reclaimed
    q0 = got[0][0]
    assert q0 in (0, RECORDS) and [q for q, _ in got] == list(range(q0, q0 + 300))
    with open(os.path.join(fresh_daemon.tmp, "sluiced.log")) as f:
        log = f.read()
    assert 'group "gone" (split) had no member' in log
    # the name is free again: a new group of that name starts where the stream is
    with sluice.attach(name, socket=fresh_daemon.sock, mode="rank", group="gone", index=0,
                       count=1) as r:
        assert len(_read(r, 2)) == 2
    bc.close()


@pytest.fixture
def small_ring(tmp_path, data):
    """A daemon whose rings hold 8 batches: an epoch of 60 batches leaves it early."""
    import test_daemon
    conf = tmp_path / "conf"
    conf.mkdir()
    d = test_daemon.Daemon(str(tmp_path), str(conf), ["--ring-slots", "8"])
    assert d.ready
    d.data, d.tmp = data, str(tmp_path)
    yield d
    d.stop()


def test_late_job_gets_the_dataset_once(small_ring, tmp_path):
    """A one-epoch pipeline read to its end by a job: a second job attaching by spec after it
    gets exactly the dataset once (from a private pipeline), not the batches left in the ring."""
    spec = image_spec(small_ring.data, batch=1, epochs=1)
    ref = [b["tensors"]["label"]["values"] for b in run_reference(tmp_path, spec, "label")]
    with sluice.attach(spec=spec, socket=small_ring.sock) as a:
        assert [lab for _, lab in _read(a)] == ref
    with sluice.attach(spec=spec, socket=small_ring.sock) as b:
        assert [lab for _, lab in _read(b)] == ref
    # a split group joining then: the same, and its second member follows it there
    m1 = sluice.attach(spec=spec, socket=small_ring.sock, mode="split", group="late")
    m2 = sluice.attach(spec=spec, socket=small_ring.sock, mode="split", group="late")
    got = {}

    def run(k, r):
        got[k] = _read(r, timeout=60)
        r.close()

    ts = [threading.Thread(target=run, args=kv) for kv in (("1", m1), ("2", m2))]
    for t in ts:
        t.start()
    for t in ts:
        t.join(120)
    assert sorted(lab for _, lab in got["1"] + got["2"]) == sorted(ref)
    with open(os.path.join(small_ring.tmp, "sluiced.log")) as f:
        log = f.read()
    assert log.count("reads that epoch whole from private pipeline") == 2


def test_late_reader_of_an_endless_pipeline_starts_at_an_epoch(small_ring, tmp_path):
    """A broadcast reader, then a rank group, joining an endless shuffled pipeline in the middle
    of an epoch start at the next epoch: their first batches are that epoch's, whole."""
    spec = image_spec(small_ring.data, name="endless", batch=4, epochs=None, **shuffled(5))
    ref = [b for b in run_reference(tmp_path, dict(spec, args=dict(spec["args"], epochs=3)),
                                    "label")]
    per_epoch = len(ref) // 3
    name = sluice.register(spec, socket=small_ring.sock)
    first = sluice.attach(name, socket=small_ring.sock)
    head = _read(first, per_epoch + 3)  # into epoch 1, far past what 8 slots hold
    late = sluice.attach(name, socket=small_ring.sock)
    grp = sluice.attach(name, socket=small_ring.sock, mode="rank", group="r", index=0,
                        count=1)
    got = {}
    ts = [threading.Thread(target=lambda: head.extend(_read(first, per_epoch * 2))),
          threading.Thread(target=lambda: got.update(grp=_read_epochs(grp, per_epoch)))]
    for t in ts:  # each reader at its own pace, as separate jobs
        t.start()
    got_late = _read_epochs(late, per_epoch)
    for t in ts:
        t.join(60)
    got_grp = got["grp"]
    for got in (got_late, got_grp):
        # the epoch it starts at: 1 if the ring still held its first batch, else 2
        e = got[0][0]
        assert e in (1, 2) and all(x[0] == e for x in got)
        assert [lab for _, lab in got] == [b["tensors"]["label"]["values"] for b in ref
                                           if b["epoch"] == e]
    for r in (first, late, grp):
        r.close()


def test_elastic_restart_with_another_count(fresh_daemon, tmp_path):
    """A rank group whose members all went comes back with another count (torchrun's elastic
    restart): it starts the next epoch with the new count, and the log says which epoch's rest
    it did not get."""
    spec = image_spec(fresh_daemon.data, name="elastic", batch=4, epochs=None)
    ref = run_reference(tmp_path, dict(spec, args=dict(spec["args"], epochs=1)), "label")
    name = sluice.register(spec, socket=fresh_daemon.sock)
    rs = [sluice.attach(name, socket=fresh_daemon.sock, mode="rank", group="el", index=k,
                        count=2) for k in range(2)]
    assert [e for e, _ in _read_epochs(rs[0], 2)] == [0, 0]
    for r in rs:
        r.close()
    with sluice.attach(name, socket=fresh_daemon.sock, mode="rank", group="el", index=0,
                       count=1) as r:
        got = _read_epochs(r, 4)
    e = got[0][0]
    # not shuffled: every epoch is epoch 0 again, and this one starts at its first batch
    assert e >= 1 and all(x[0] == e for x in got)
    assert [lab for _, lab in got] == [b["tensors"]["label"]["values"] for b in ref][:4]
    with open(os.path.join(fresh_daemon.tmp, "sluiced.log")) as f:
        log = f.read()
    assert 'group "el" comes back with 1 ranks (it had 2): it starts at epoch %d' % e in log

