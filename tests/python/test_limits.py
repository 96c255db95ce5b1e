# SPDX-License-Identifier: Apache-2.0
"""sluiced's limits end to end: --max-readers (EUSERS), --user-memory (EDQUOT) and the pool's
weights between pipelines (the tuner's allocation), against a real sluiced on a real socket.

Each test waits on what it checks (a stats field, a reader's batches, the daemon's reply), never
on a time, and counts every batch the readers got.
"""

import errno
import json
import os
import pwd
import shutil
import tempfile
import threading

import pytest

from conftest import ctl, image_spec, read_labels, shuffled, test_daemon, wait_for

import sluice


_read = read_labels


def _reference(tmp, spec, n=None):
    """`sluicectl run SPEC --json --values label [--batches n]`: (seq, labels, False) a batch."""
    path = os.path.join(str(tmp), "ref-%d.json" % abs(hash(json.dumps(spec, sort_keys=True))))
    with open(path, "w") as f:
        json.dump(spec, f)
    r = ctl("run", path, "--json", "--values", "label", *(["--batches", n] if n else []))
    assert r.returncode == 0, r.stderr
    return [(b["seq"], b["tensors"]["label"]["values"], False)
            for b in map(json.loads, r.stdout.splitlines()) if b]


def _daemon(tmp_path, extra):
    tmp, conf = str(tmp_path), str(tmp_path / "conf")
    os.makedirs(conf)
    return test_daemon.Daemon(tmp, conf, list(extra))


def _log(d):
    with open(os.path.join(os.path.dirname(d.sock), "sluiced.log")) as f:
        return f.read()


def test_max_readers_refuses_the_one_past_the_limit_and_takes_one_after_a_detach(tmp_path,
                                                                                  data):
    """sluiced --max-readers 2: two readers of a pipeline read; a third is refused with EUSERS
    naming the pipeline and the limit, and the two read on, every batch once, in order; once
    one of them detached (the log says so), a new one is taken, and it reads whole
    epochs (DESIGN.md §5) to the end, with the other, every batch once."""
    spec = image_spec(data, name="capped", epochs=2, batch=2, **shuffled(4))  # 60 batches
    want = _reference(tmp_path, spec)
    assert len(want) == 60
    d = _daemon(tmp_path, ["--max-readers", "2", "--ring-slots", "8"])
    readers = []
    try:
        name = sluice.register(spec, socket=d.sock)
        # they hold each other (as before the default lag policy): the one read ahead of the
        # other stays a reader of this pipeline (test_lag.py: the default moves it off)
        a, b = (sluice.attach(name, socket=d.sock, lag="hold") for _ in range(2))
        readers += [a, b]
        got_a, got_b = _read(a, 4), _read(b, 4)
        with pytest.raises(sluice.SluiceError) as ei:
            readers.append(sluice.attach(name, socket=d.sock))
        assert ei.value.errno == errno.EUSERS, ei.value
        assert 'pipeline "%s" has its limit of 2 readers' % name in ei.value.strerror, ei.value
        assert sluice.stats(name, socket=d.sock)["readers"] == 2
        _read(a, 10, got_a)  # the refusal cost the two nothing
        _read(b, 10, got_b)
        b.close()
        wait_for("sluiced to log the detach",
                 lambda: _log(d).count(" detached from %s" % name) == 1, timeout=20)
        c = sluice.attach(name, socket=d.sock)
        readers.append(c)
        assert sluice.stats(name, socket=d.sock)["readers"] == 2
        got_c = []
        ts = [threading.Thread(target=_read, args=(r,), kwargs={"out": out})
              for r, out in ((a, got_a), (c, got_c))]
        for t in ts:
            t.start()
        for t in ts:
            t.join(60)
        assert not any(t.is_alive() for t in ts), "a reader never came to the end"
        log = _log(d)
    finally:
        for r in readers:
            r.close()
        rc = d.stop()
    assert got_a == want, "a reader that was there all along: every batch once, in order"
    assert got_b == want[:10], "the one that detached: what it read, once, in order"
    # the new reader: from the start of an epoch, every batch once, in order, to the end
    assert got_c and got_c == want[-len(got_c):] and len(got_c) % 30 == 0, \
        [s for s, _, _ in got_c]
    assert log.count(" attached to %s " % name) == 3, log  # the refused one never was
    assert rc == 0


@pytest.fixture
def shared_tmp():
    """A directory another user may enter and read (pytest's are root's alone), removed after."""
    if os.geteuid() != 0 or not shutil.which("setpriv"):
        pytest.skip("[root] needs root and setpriv to run clients as another user")
    try:
        pwd.getpwnam("nobody")
        pwd.getpwnam("daemon")
    except KeyError:
        pytest.skip("[users] needs the users nobody and daemon")
    tmp = tempfile.mkdtemp(prefix="sluice-limits-")
    os.chmod(tmp, 0o755)
    yield tmp
    shutil.rmtree(tmp, ignore_errors=True)


def _as(user, d, *args):
    return test_daemon.ctl(d, *[str(a) for a in args], user=user)


def test_user_memory_refuses_a_users_pipeline_past_its_budget(shared_tmp):
    """sluiced --user-memory 16M, rings of 8M (--pipeline-memory): nobody runs two pipelines,
    and its third is refused (EDQUOT: the bytes it holds, the budget, what a pipeline takes),
    by register and by an attach to a new spec alike, while its pipelines within the budget go
    on (a reader gets every batch once, in order) and another user (daemon) runs its own; once
    nobody removes one of its two, the third is taken."""
    data = os.path.join(shared_tmp, "image")
    r = ctl("gen", "image", data, "--records", 60, "--files", 3, "--seed", 11)
    assert r.returncode == 0, r.stderr
    specs = []
    for k in range(4):  # endless, so that none ends and leaves the budget
        p = os.path.join(shared_tmp, "q%d.json" % k)
        with open(p, "w") as f:
            json.dump(image_spec(data, name="q%d" % k, epochs=None, batch=4 + k), f)
        os.chmod(p, 0o644)
        specs.append(p)
    want = _reference(shared_tmp, image_spec(data, name="q0", epochs=None, batch=4), 30)
    conf = os.path.join(shared_tmp, "conf")
    os.makedirs(conf)
    d = test_daemon.Daemon(shared_tmp, conf, ["--user-memory", "16M", "--user-pipelines", "0"])
    try:
        uid = pwd.getpwnam("nobody").pw_uid
        quota = ("uid %d's quota: it runs 2 pipelines of 0 and holds 16777216 of 16777216 "
                 "bytes, a pipeline takes 8388608 (--user-pipelines, --user-memory)" % uid)
        regs = [_as("nobody", d, "register", p) for p in specs[:3]]
        assert [x.returncode for x in regs] == [0, 0, 1], [x.stderr for x in regs]
        assert quota in regs[2].stderr, regs[2].stderr
        dr = _as("nobody", d, "drain", specs[2], "--batches", 1)  # a spec that is not running
        assert dr.returncode == 1 and quota in dr.stderr, dr.stderr
        other = _as("daemon", d, "register", specs[3])  # its own budget
        assert other.returncode == 0, other.stderr
        # nobody's pipeline within the budget goes on: 30 batches, each once, in order
        dr = _as("nobody", d, "drain", "q0", "--batches", 30, "--json", "--values", "label")
        assert dr.returncode == 0, dr.stderr
        got = [(b["seq"], b["values"]["label"], b.get("redelivered", False))
               for b in map(json.loads, dr.stdout.splitlines()) if b]
        assert got == want
        listed = json.loads(ctl("--socket", d.sock, "list", "--json").stdout)["pipelines"]
        owners = sorted((p["name"], p["owner"]) for p in listed)
        assert owners == [("q0", "nobody"), ("q1", "nobody"), ("q3", "daemon")], owners
        rm = _as("nobody", d, "rm", "q1")
        assert rm.returncode == 0, rm.stderr
        # a removed pipeline without readers is dropped by the rm itself: its ring's bytes
        # are nobody's again at once
        again = _as("nobody", d, "register", specs[2])
        assert again.returncode == 0 and "q2" in again.stdout, again.stderr
    finally:
        rc = d.stop()
    assert rc == 0


def test_pool_weights_order_pipelines_by_their_readers_demand(tmp_path, data):
    """Two pipelines, one read as fast as its reader can ("fast"), one whose reader takes a
    batch each time the fast one took 8 ("slow", its demand an eighth of the other's rate): the
    tuner's allocation (Plumber's water-filling over the readers' demands, daemon/tune.c)
    gives the fast one the whole pool weight (64/64) and the slow one a weight in proportion to
    the rate it asks for (about 64/8, at most twice that), as the stats say (tune_weight,
    tune_alloc_per_s). An allocation by cost alone (demands ignored) gives the slow one about
    half. Both readers get every batch once, in order, meanwhile. (The log's "its share of the
    pool set to" line is said only for a change of more than 2x with more than one pipeline in
    the window, so it is not a condition here.)"""
    K = 8
    d = _daemon(tmp_path, ["--ring-slots", "8"])
    stop = threading.Event()
    turns = threading.Semaphore(0)  # one for each K batches the fast reader took
    seqs = {"fast": [], "slow": []}
    errs = []
    readers, ts = [], []

    def fast(r):
        try:
            while not stop.is_set():
                b = r.next(timeout=20)
                seqs["fast"].append(b.seq)
                b.release()
                if len(seqs["fast"]) % K == 0:
                    turns.release()
        except Exception as e:  # noqa: BLE001  (reported by the test)
            errs.append(e)
        finally:
            stop.set()
            turns.release()

    def slow(r):
        try:
            while True:
                turns.acquire()  # the fast reader's K batches (or the stop) pace it
                if stop.is_set():
                    return
                b = r.next(timeout=20)
                seqs["slow"].append(b.seq)
                b.release()
        except Exception as e:  # noqa: BLE001
            errs.append(e)
            stop.set()

    try:
        for nm, seed in (("fast", 1), ("slow", 2)):
            sluice.register(image_spec(data, name=nm, epochs=None, batch=4, **shuffled(seed)),
                            socket=d.sock)
            readers.append(sluice.attach(nm, socket=d.sock))
        ts += [threading.Thread(target=fn, args=(r,)) for fn, r in zip((fast, slow), readers)]
        for t in ts:
            t.start()

        def ordered():
            if stop.is_set():
                return "stopped"  # a reader failed (errs says how)
            f, s = (sluice.stats(nm, socket=d.sock) for nm in ("fast", "slow"))
            # its weight in proportion to its rate, an eighth of the other's: within 2x of
            # 64/K (the other's allocated rate is at least what it read, usually more)
            ok = (f["tune_weight"] == 64 and 1 <= s["tune_weight"] <= 2 * 64 // K and
                  0 < s["tune_alloc_per_s"] * K <= 2 * f["tune_alloc_per_s"])
            return (f, s) if ok else None

        got = wait_for("the pool weights ordered by demand", ordered, timeout=20)
    finally:
        stop.set()
        turns.release()
        for t in ts:
            t.join(30)
        for r in readers:
            r.close()
        rc = d.stop()
    assert not errs and not any(t.is_alive() for t in ts), errs
    f, s = got
    assert f["tune_weight"] == 64 and s["tune_weight"] <= 2 * 64 // K, (f, s)
    assert s["tune_alloc_per_s"] * K <= 2 * f["tune_alloc_per_s"], (f, s)
    for nm in ("fast", "slow"):  # every batch once, in order
        assert seqs[nm] == list(range(len(seqs[nm]))), (nm, seqs[nm][:40])
    assert len(seqs["fast"]) >= K * len(seqs["slow"]) > 0
    assert rc == 0


def test_fifo_in_a_data_files_place_fails_the_pipeline_not_the_server(fresh_daemon, tmp_path):
    """A data file replaced by a FIFO after the pipeline listed it (any user who can write the
    dataset's directory can): opening it must not block the pipeline's thread (nobody writes
    the FIFO) nor anything else. The reader gets an error naming the file and saying it is not
    a regular file; stats, LIST and rm answer; another pipeline reads on."""
    d = str(tmp_path / "fifo")
    r = ctl("gen", "seq", d, "--records", 40000, "--files", 4, "--seed", 3)
    assert r.returncode == 0, r.stderr
    files = sorted(f for f in os.listdir(d) if not f.startswith((".", "_")))
    spec = {"type": "independent", "name": "fifo",
            "args": {"dataset": {"type": "dir", "args": {"data_dir": d}},
                     "target_batch_size": 4, "drop_remainder": False, "epochs": 1,
                     "num_read_buffer_bytes": 65536, "num_prefetch": 2,
                     "num_parallel_reads": 1,
                     "primary_features": [{"from_name": "id", "to_name": "id"}]}}
    name = sluice.register(spec, socket=fresh_daemon.sock)
    last = os.path.join(d, files[-1])
    os.unlink(last)
    os.mkfifo(last)
    got, err = 0, None
    with sluice.attach(name, socket=fresh_daemon.sock) as rd:
        try:
            while True:
                b = rd.next(60)  # a hang fails here (SluiceTimeout), not the whole suite
                if b is None:
                    break
                got += 1
                b.release()
        except sluice.SluiceError as e:
            err = e
    assert err is not None and not isinstance(err, sluice.SluiceTimeout), (got, err)
    assert last in str(err) and "not a regular file" in str(err), str(err)
    assert got > 0
    assert sluice.stats(name, socket=fresh_daemon.sock)["status"] != 0
    r = ctl("--socket", fresh_daemon.sock, "list", timeout=30)
    assert r.returncode == 0 and name in r.stdout, r.stdout + r.stderr
    sluice.remove(name, socket=fresh_daemon.sock)
    spec2 = dict(spec, name="after", args=dict(spec["args"], dataset={
        "type": "dir", "args": {"data_dir": str(tmp_path / "ok")}}))
    r = ctl("gen", "seq", str(tmp_path / "ok"), "--records", 40, "--files", 1)
    assert r.returncode == 0, r.stderr
    with sluice.attach(sluice.register(spec2, socket=fresh_daemon.sock),
                       socket=fresh_daemon.sock) as rd:
        n = 0
        for b in iter(lambda: rd.next(60), None):
            n += 1
            b.release()
        assert n == 10
