# SPDX-License-Identifier: Apache-2.0
"""The training loop of sluice.torch against a real sluiced: epochs, breaks, set_epoch, the
DataLoader's batch size, and data-parallel jobs of real processes (ddp_rank.py, gloo).

Every check is on record ids (`sluicectl gen seq`: a unique string "id" per record), so that a
record lost, repeated or replayed shows. The dataset has 314 records in batches of 4: 79
batches per epoch, the last one of 2, so that 2 ranks are one batch apart (40 and 39).
"""

import json
import os
import socket
import subprocess
import sys

import pytest

import sluice
import test_daemon
from conftest import ctl, rewrite_same_size, run_reference, shuffled

try:
    import torch
except ImportError:
    torch = None

pytestmark = pytest.mark.skipif(torch is None,
                                reason="[deps] torch is not installed (python3-torch)")

HERE = os.path.dirname(os.path.abspath(__file__))
RECORDS, BATCH = 314, 4
N = 79  # batches per epoch: 78 of 4 and one of 2


def scaled(seconds):
    return test_daemon.common.scaled(seconds)


@pytest.fixture(scope="module")
def seq_data(tmp_path_factory):
    if not os.environ.get("SLUICECTL"):
        pytest.skip("[env] SLUICECTL not set (run through meson test)")
    d = str(tmp_path_factory.mktemp("loop") / "seq")
    r = ctl("gen", "seq", d, "--records", RECORDS, "--files", 3, "--seed", 5)
    assert r.returncode == 0, r.stderr
    return d


def seq_spec(data, name, epochs, **args):
    a = {"dataset": {"type": "dir", "args": {"data_dir": data}}, "target_batch_size": BATCH,
         "drop_remainder": False, "epochs": epochs, "num_read_buffer_bytes": 65536,
         "num_prefetch": 2, "primary_features": [{"from_name": "id", "to_name": "id"}]}
    a.update(args)
    return {"type": "independent", "name": name, "args": a}


def reference(tmp, spec, epochs):
    """The batches' ids of each epoch, by `sluicectl run` (in process, no daemon)."""
    ref = run_reference(tmp, spec, "id")
    out = [[b["tensors"]["id"]["values"] for b in ref if b["epoch"] == e] for e in range(epochs)]
    for e in out:
        assert len(e) == N
    return out


def ids_of(b):
    s = b["id"]
    vals = s.values.numpy().tobytes()
    offs = s.offsets.tolist()
    return [vals[offs[i]:offs[i + 1]].decode() for i in range(len(offs) - 1)]


def flat(batches):
    return [i for b in batches for i in b]


def loader(ds, **kw):
    kw.setdefault("batch_size", None)
    return torch.utils.data.DataLoader(ds, **kw)


@pytest.fixture
def no_job_env(monkeypatch):
    """The test process is no rank of a job, whatever the environment it was started in."""
    for v in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "GROUP_RANK", "NNODES",
              "TORCHELASTIC_RUN_ID", "MASTER_ADDR", "MASTER_PORT"):
        monkeypatch.delenv(v, raising=False)


# ---- one process ----------------------------------------------------------------------------

def test_loop_past_the_specs_epochs_is_end_of_data(fresh_daemon, seq_data, tmp_path,
                                                     no_job_env):
    """`for ep in range(4): for b in loader` over a spec of 2 epochs: epochs 0 and 1 whole,
    each record once, in the pipeline's order; the third iter() raises EndOfData (a replay of
    the last epoch, or an empty epoch, would be a silent bug), and so does the fourth."""
    import sluice.torch as st
    spec = seq_spec(seq_data, "loop2", 2)
    ref = reference(tmp_path, spec, 2)
    ds = st.IterableDataset(spec, socket=fresh_daemon.sock)
    dl = loader(ds)
    got, ends = [], []
    for ep in range(4):
        try:
            got.append([b for b in dl])
        except st.EndOfData as e:
            ends.append((ep, str(e)))
    assert len(got) == 2, "epochs served: %d" % len(got)
    for e, batches in enumerate(got):
        assert all(isinstance(b, st.Batch) and isinstance(b, dict) for b in batches)
        assert [ids_of(b) for b in batches] == ref[e]
        assert sorted(flat(ref[e])) == sorted(set(flat(ref[e]))) and len(flat(ref[e])) == RECORDS
        assert [b.epoch for b in batches] == [e] * N
        assert [b.index_in_epoch for b in batches] == list(range(N))
        assert [b.end_of_epoch for b in batches] == [False] * (N - 1) + [True]
        assert not any(b.padded for b in batches)
        assert [b.seq for b in batches] == list(range(e * N, (e + 1) * N))
    assert [ep for ep, _ in ends] == [2, 3]
    assert issubclass(st.EndOfData, RuntimeError)
    for _, msg in ends:
        assert "last epoch" in msg, msg
    assert len(ds) == N
    ds.close()


def test_endless_spec_keeps_giving_epochs(fresh_daemon, seq_data, tmp_path, no_job_env):
    """epochs: null: every iter() is one whole epoch more, without end."""
    import sluice.torch as st
    spec = seq_spec(seq_data, "endless", None)
    ref = reference(tmp_path, dict(spec, args=dict(spec["args"], epochs=1)), 1)[0]
    ds = st.IterableDataset(spec, socket=fresh_daemon.sock)
    dl = loader(ds)
    for e in range(3):
        batches = list(dl)
        assert [ids_of(b) for b in batches] == ref, "epoch %d" % e
        assert [b.epoch for b in batches] == [e] * N
    ds.close()


def test_break_then_iter_goes_on_and_set_epoch(fresh_daemon, seq_data, tmp_path, no_job_env):
    """A break leaves the epoch where it was: the next iter() gives its rest (nothing lost or
    repeated). set_epoch(n): the epoch in progress or the next is a no-op; a later one skips
    to it (the epochs between dropped); an earlier one is a ValueError."""
    import sluice.torch as st
    spec = seq_spec(seq_data, "breaks", 5, **shuffled(17))
    ref = reference(tmp_path, spec, 5)
    assert ref[0] != ref[1]  # shuffled: each epoch its own order, so a wrong epoch shows
    ds = st.IterableDataset(spec, socket=fresh_daemon.sock)
    dl = loader(ds)

    def take(k=None):
        out = []
        for b in dl:
            out.append(b)
            if k is not None and len(out) == k:
                break
        return out

    part = take(10)
    ds.set_epoch(0)  # the epoch in progress: goes on
    rest = take()
    assert [ids_of(b) for b in part + rest] == ref[0]
    assert [b.index_in_epoch for b in part + rest] == list(range(N))
    assert {b.epoch for b in part + rest} == {0}
    assert len(ds) == N
    ds.set_epoch(1)  # the next: a no-op
    part = take(5)
    assert [ids_of(b) for b in part] == ref[1][:5] and {b.epoch for b in part} == {1}
    # a later epoch, with epoch 1 in progress: the rest of 1, and 2, are dropped
    ds.set_epoch(3)
    got = take()
    assert {b.epoch for b in got} == {3}
    assert [ids_of(b) for b in got] == ref[3]
    with pytest.raises(ValueError):
        ds.set_epoch(2)
    with pytest.raises(ValueError):
        ds.set_epoch(0)
    ds.set_epoch(4)  # the next: a no-op
    got = take()
    assert [ids_of(b) for b in got] == ref[4] and {b.epoch for b in got} == {4}
    with pytest.raises(st.EndOfData, match="last epoch"):
        take()
    ds.close()


def test_set_epoch_before_the_first_iter(fresh_daemon, seq_data, tmp_path, no_job_env):
    """set_epoch(2) before anything was read: the first iter() is epoch 2."""
    import sluice.torch as st
    spec = seq_spec(seq_data, "first", 3, **shuffled(23))
    ref = reference(tmp_path, spec, 3)
    ds = st.IterableDataset(spec, socket=fresh_daemon.sock)
    ds.set_epoch(2)
    got = list(loader(ds))
    assert {b.epoch for b in got} == {2} and [ids_of(b) for b in got] == ref[2]
    ds.close()


def test_dataloader_batch_size_is_refused(fresh_daemon, seq_data, tmp_path, no_job_env):
    """DataLoader's default batch_size=1 (and any size) would add a dimension or stack whole
    batches: the first next() raises ValueError saying batch_size=None, and takes nothing
    (a loader with batch_size=None then gives the whole epoch)."""
    import sluice.torch as st
    spec = seq_spec(seq_data, "bs", 1)
    ref = reference(tmp_path, spec, 1)[0]
    ds = st.IterableDataset(spec, socket=fresh_daemon.sock)
    with pytest.raises(ValueError, match="batch_size=None"):
        next(iter(torch.utils.data.DataLoader(ds)))
    with pytest.raises(ValueError, match="batch_size=None"):
        next(iter(torch.utils.data.DataLoader(ds, batch_size=2)))
    got = list(torch.utils.data.DataLoader(ds, batch_size=None))
    assert [ids_of(b) for b in got] == ref
    ds.close()
    ds2 = st.IterableDataset(seq_spec(seq_data, "bs2", 1), socket=fresh_daemon.sock)
    with pytest.raises(ValueError, match="batch_size=None"):
        next(iter(torch.utils.data.DataLoader(ds2, num_workers=2)))
    ds2.close()


def test_dataset_state_dict_with_workers_is_an_error(fresh_daemon, seq_data, no_job_env):
    """With DataLoader workers only the main process sees what the loop took: the dataset's
    own state_dict() raises RuntimeError naming sluice.torch.DataLoader, never returns a
    state (or None) that would lose or repeat batches."""
    import sluice.torch as st
    ds = st.IterableDataset(seq_spec(seq_data, "workers", 2), socket=fresh_daemon.sock)
    dl = loader(ds, num_workers=2, persistent_workers=True)
    got = list(dl)
    assert sorted(flat(ids_of(b) for b in got)) == sorted(set(flat(ids_of(b) for b in got)))
    assert len(flat(ids_of(b) for b in got)) == RECORDS
    with pytest.raises(RuntimeError, match="sluice.torch.DataLoader"):
        ds.state_dict()
    ds.close()


@pytest.mark.parametrize("persistent", [True, False])
def test_loader_state_dict_with_workers_resumes(fresh_daemon, seq_data, tmp_path, no_job_env,
                                                persistent):
    """sluice.torch.DataLoader, 2 workers: the loop takes the epoch's batches in order; after
    10 batches its state_dict() (torch.save) is loaded by a new dataset and loader (2 workers):
    they give batches 10.. of epoch 0, then epoch 1 whole, nothing lost or repeated, then
    EndOfData. The first loader, iterated again after its break, goes on at batch 10 too (the
    batches its workers had read ahead are served again), and each epoch after that is whole
    (persistent_workers=False: new workers each epoch)."""
    import sluice.torch as st
    name = "wstate-%d" % persistent
    spec = seq_spec(seq_data, name, 2)
    ref = reference(tmp_path, spec, 2)
    ds = st.IterableDataset(spec, socket=fresh_daemon.sock)
    dl = st.DataLoader(ds, num_workers=2, persistent_workers=persistent)
    before = []
    for b in dl:
        before.append(b)
        if len(before) == 10:
            break
    assert [(b.epoch, b.index_in_epoch) for b in before] == [(0, i) for i in range(10)]
    sd = dl.state_dict()
    assert (sd["epoch"], sd["index_in_epoch"]) == (0, 10)
    ckpt = os.path.join(str(tmp_path), "w.pt")
    torch.save(sd, ckpt)
    # the same loader goes on where its loop stopped
    rest = list(dl)
    assert [b.index_in_epoch for b in rest] == list(range(10, N))
    assert [ids_of(b) for b in before + rest] == ref[0]
    assert dl.state_dict()["epoch"] == 1 and dl.state_dict()["index_in_epoch"] == 0
    assert [ids_of(b) for b in dl] == ref[1]
    with pytest.raises(st.EndOfData):
        list(dl)
    ds.close()
    # a new job from the checkpoint
    ds2 = st.IterableDataset(spec, socket=fresh_daemon.sock)
    dl2 = st.DataLoader(ds2, num_workers=2, persistent_workers=persistent)
    dl2.load_state_dict(torch.load(ckpt))
    after = list(dl2)
    assert [(b.epoch, b.index_in_epoch) for b in after] == [(0, i) for i in range(10, N)]
    seen = flat(ids_of(b) for b in before) + flat(ids_of(b) for b in after)
    assert seen == flat(ref[0]), "lost %s, repeated %s" % (
        sorted(set(flat(ref[0])) - set(seen))[:8],
        sorted({i for i in seen if seen.count(i) > 1})[:8])
    assert [ids_of(b) for b in dl2] == ref[1]
    with pytest.raises(st.EndOfData):
        list(dl2)
    ds2.close()


# ---- data-parallel jobs of real processes ---------------------------------------------------

def free_port():
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run_job(tmp, sock, name, run_id, world=2, args=(), timeout=120):
    """world ddp_rank.py processes started as torchrun starts them; their JSON results.
    A rank that has not ended in `timeout` seconds (scaled) fails the test (a hang)."""
    port = free_port()
    procs, outs = [], []
    for r in range(world):
        env = dict(os.environ, RANK=str(r), WORLD_SIZE=str(world), LOCAL_RANK=str(r),
                   LOCAL_WORLD_SIZE=str(world), GROUP_RANK="0", ROLE_RANK=str(r),
                   ROLE_WORLD_SIZE=str(world), GROUP_WORLD_SIZE="1", MASTER_ADDR="127.0.0.1",
                   MASTER_PORT=str(port), TORCHELASTIC_RUN_ID=run_id,
                   TORCHELASTIC_RESTART_COUNT="0", TORCHELASTIC_MAX_RESTARTS="0")
        env.pop("NNODES", None)
        out = os.path.join(str(tmp), "%s-rank%d.json" % (run_id, r))
        outs.append(out)
        procs.append(subprocess.Popen(
            [sys.executable, os.path.join(HERE, "ddp_rank.py"), sock, name, out,
             "--timeout", str(scaled(timeout))] + [str(a) for a in args],
            env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True))
    errs, hung = [], []
    for r, p in enumerate(procs):
        try:
            _, err = p.communicate(timeout=scaled(timeout))
        except subprocess.TimeoutExpired:
            hung.append(r)
            for q in procs:
                if q.poll() is None:
                    q.kill()
            _, err = p.communicate()
        errs.append((p.returncode, err))
    assert not hung, "ranks %s hung: %s" % (hung, [e[-2000:] for _, e in errs])
    for r, (rc, err) in enumerate(errs):
        assert rc == 0, "rank %d exited %d: %s" % (r, rc, err[-3000:])
    res = []
    for out in outs:
        with open(out) as f:
            res.append(json.load(f))
    return res


def check_len_before(res, share):
    """len(ds) before any epoch: the dataset is uncompressed, which sluiced counts at the
    start by hopping from record header to record header."""
    for r in res:
        assert r["len_before"] == share, r


def test_len_before_the_first_epoch_from_the_index(fresh_daemon, tmp_path, no_job_env):
    """Uncompressed: len() is known before anything is read. gzip: a TypeError naming
    `sluicectl index` until the dataset is indexed, then the count; a file rewritten to the
    same size with its mtime put back (touch -r) makes its entry stale, never trusted."""
    import sluice.torch as st
    plain, gz = str(tmp_path / "plain"), str(tmp_path / "gz")
    for d, c in ((plain, "none"), (gz, "gzip")):
        r = ctl("gen", "seq", d, "--records", RECORDS, "--files", 3, "--seed", 5,
                "--compression", c)
        assert r.returncode == 0, r.stderr
    ds = st.IterableDataset(seq_spec(plain, "plain", 1), socket=fresh_daemon.sock)
    assert len(ds) == N
    ds.close()

    def fresh_len(epochs):  # a new pipeline (another fingerprint) sees the index as it is now
        ds = st.IterableDataset(seq_spec(gz, "gz%d" % epochs, epochs), socket=fresh_daemon.sock)
        try:
            return len(ds)
        except TypeError as e:
            return str(e)
    got = fresh_len(1)
    assert isinstance(got, str) and "sluicectl index" in got, got
    r = ctl("index", gz)
    assert r.returncode == 0, r.stdout + r.stderr
    assert os.path.exists(os.path.join(gz, ".sluice-index"))
    assert fresh_len(2) == N
    # rewrite a data file with other bytes of the same size, its mtime restored
    f = sorted(x for x in os.listdir(gz) if not x.startswith((".", "__")))[0]
    rewrite_same_size(os.path.join(gz, f), scaled(5))
    got = fresh_len(3)
    assert isinstance(got, str) and "sluicectl index" in got, got


@pytest.mark.parametrize("workers", [0, 2])
def test_ddp_two_ranks_pad(fresh_daemon, seq_data, tmp_path, workers):
    """2 ranks (gloo, an all_reduce per step), 79 batches an epoch: each rank takes 40 steps
    in each of 2 epochs (the short rank a padding batch, a repeat of its first of the epoch);
    len(ds) is 40; the ranks' real batches are every record of the epoch once; a third iter()
    is EndOfData on both. With DataLoader workers in each rank: the same steps, no hang."""
    spec = seq_spec(seq_data, "ddp-pad-%d" % workers, 2)
    ref = reference(tmp_path, spec, 2)
    name = sluice.register(spec, socket=fresh_daemon.sock)
    share = -(-N // 2)
    res = run_job(tmp_path, fresh_daemon.sock, name, "pad-%d-%d" % (workers, os.getpid()),
                  args=["--epochs", 2, "--past", "--workers", workers])
    check_len_before(res, share)
    for r in res:
        assert [e["steps"] for e in r["epochs"]] == [share, share], r["rank"]
        assert [e["len"] for e in r["epochs"]] == [share, share], r["rank"]
        assert r["total_steps_all"] == 2 * 2 * share
        assert r["past"] is not None and r["past"][0] == "EndOfData", r["past"]
        assert "last epoch" in r["past"][1]
        if workers:
            assert r["state_dict_error"] == "RuntimeError"
    for e in range(2):
        real = [b for r in res for b in r["epochs"][e]["batches"] if not b["padded"]]
        pads = [(r, b) for r in res for b in r["epochs"][e]["batches"] if b["padded"]]
        assert len(pads) == 2 * share - N, "epoch %d: %d padding batches" % (e, len(pads))
        assert {b["epoch"] for b in real} == {e}
        assert sorted(flat(b["ids"] for b in real)) == sorted(flat(ref[e]))
        assert len(real) == N and sorted(b["index_in_epoch"] for b in real) == list(range(N))
        for r, b in pads:  # a repeat of that rank's first real batch of the epoch (with
            # workers, each worker a rank of the group: of one of this process's batches)
            mine = [x["ids"] for x in r["epochs"][e]["batches"] if not x["padded"]]
            assert b["epoch"] == e and (b["ids"] == mine[0] if not workers else b["ids"] in mine)
        for r in res:  # each batch where the pipeline put it in the epoch
            for b in r["epochs"][e]["batches"]:
                assert b["ids"] == ref[e][b["index_in_epoch"]]


def test_ddp_two_ranks_drop_last(fresh_daemon, seq_data, tmp_path):
    """drop_last=True: each rank takes 39 steps an epoch, len(ds) 39, no padding; the epoch's
    last batch (the round one rank could not match) is dropped and nothing else."""
    spec = seq_spec(seq_data, "ddp-drop", 2)
    ref = reference(tmp_path, spec, 2)
    name = sluice.register(spec, socket=fresh_daemon.sock)
    share = N // 2
    res = run_job(tmp_path, fresh_daemon.sock, name, "drop-%d" % os.getpid(),
                  args=["--epochs", 2, "--drop-last", "--past"])
    check_len_before(res, share)
    for r in res:
        assert [e["steps"] for e in r["epochs"]] == [share, share], r["rank"]
        assert [e["len"] for e in r["epochs"]] == [share, share], r["rank"]
        assert r["past"] is not None and r["past"][0] == "EndOfData", r["past"]
    for e in range(2):
        got = [b for r in res for b in r["epochs"][e]["batches"]]
        assert not any(b["padded"] for b in got)
        assert {b["epoch"] for b in got} == {e}
        assert sorted(flat(b["ids"] for b in got)) == sorted(flat(ref[e][:-1]))


@pytest.mark.parametrize("resume", ["plain", "num_replicas=1", "workers"])
def test_ddp_resume_with_another_rank_count(fresh_daemon, seq_data, tmp_path, no_job_env,
                                            resume):
    """2 ranks take 10 steps of epoch 0 and rank 0 saves the loader's state_dict()
    (torch.save); the job exits. One process (no job, or rank=0 of num_replicas=1) loads it
    and reads on: the records of epoch 0 before and after are every record once, then epoch
    1 whole. "workers": each rank reads through 2 DataLoader workers, and so does the
    process that resumes (sluice.torch.DataLoader)."""
    import sluice.torch as st
    spec = seq_spec(seq_data, "ddp-resume-" + resume.replace("=", ""), 2)
    ref = reference(tmp_path, spec, 2)
    name = sluice.register(spec, socket=fresh_daemon.sock)
    ckpt = os.path.join(str(tmp_path), "ckpt.pt")
    workers = 2 if resume == "workers" else 0
    res = run_job(tmp_path, fresh_daemon.sock, name, "resume-%s-%d" % (resume, os.getpid()),
                  args=["--epochs", 1, "--steps", 10, "--save", ckpt, "--workers", workers])
    before = [b for r in res for b in r["epochs"][0]["batches"]]
    assert [r["epochs"][0]["steps"] for r in res] == [10, 10]
    assert not any(b["padded"] for b in before)
    assert sorted(b["index_in_epoch"] for b in before) == list(range(20))
    kw = {"rank": 0, "num_replicas": 1} if resume == "num_replicas=1" else {}
    ds = st.IterableDataset(name, socket=fresh_daemon.sock, **kw)
    dl = st.DataLoader(ds, num_workers=workers)
    dl.load_state_dict(torch.load(ckpt))
    after = list(dl)
    assert [b.index_in_epoch for b in after] == list(range(20, N))
    assert {b.epoch for b in after} == {0}
    seen = flat(b["ids"] for b in before) + flat(ids_of(b) for b in after)
    assert sorted(seen) == sorted(flat(ref[0])), "lost %s, repeated %s" % (
        sorted(set(flat(ref[0])) - set(seen))[:8],
        sorted({i for i in seen if seen.count(i) > 1})[:8])
    assert [ids_of(b) for b in dl] == ref[1]
    with pytest.raises(st.EndOfData):
        list(dl)
    ds.close()
