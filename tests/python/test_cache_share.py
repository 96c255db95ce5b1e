# SPDX-License-Identifier: Apache-2.0
"""The shared record cache between jobs that run at once (issue 18), with real processes against a
real sluiced started with --cache-memory.

A job that opens a file another job is putting in the cache reads that job's records as they
come instead of reading the file again; when that job stalls (its reader holds a batch and its
ring is full), the follower reads on from the file itself after a quarter second, from the record
where the cache stopped. Either way its batches are those of `sluicectl run` without a cache.
"""

import json
import os
import sys

import pytest

import sluice
import test_daemon
from conftest import SRC, ctl, run_reference, wait_for
from test_groups import Proc, _labels

RECORDS = 8000  # in 2 gzip files: far more than the filler's ring and prefetch hold


@pytest.fixture
def ctr(tmp_path):
    d = str(tmp_path / "ctr")
    r = ctl("gen", "ctr", d, "--files", 2, "--records", RECORDS, "--seed", 5,
            "--compression", "gzip")
    assert r.returncode == 0, r.stderr
    return d


@pytest.fixture
def cached_daemon(tmp_path):
    conf = str(tmp_path / "conf")
    os.makedirs(conf)
    d = test_daemon.Daemon(str(tmp_path), conf, ["--cache-memory", "64M"])
    assert d.ready, "sluiced did not say READY=1"
    yield d
    assert d.stop() == 0, "sluiced did not exit cleanly"


def ctr_spec(data, name, batch, **args):
    a = {"dataset": {"type": "dir", "args": {"data_dir": data}}, "target_batch_size": batch,
         "drop_remainder": False, "epochs": 1, "num_parallel_reads": 2,
         "num_read_buffer_bytes": 65536, "num_prefetch": 2,
         "primary_features": [{"from_name": f, "to_name": f} for f in ("dense0", "label")]}
    a.update(args)
    return {"type": "independent", "name": name, "args": a}


def reference(tmp_path, spec):
    return _labels([{"labels": b["tensors"]["label"]["values"]}
                    for b in run_reference(tmp_path, spec, "label")])


def cache_stats(sock, name):
    st = sluice.stats(name, socket=sock)
    return {k: v for k, v in st.items() if k.startswith("cache") or k == "producer_waits"}


def test_a_job_reads_the_records_another_is_caching(cached_daemon, ctr, tmp_path):
    """Job 2 starts while job 1 frames both files into the cache: it reads them from there as
    they come (cache_followed), reads no file itself, and its batches are right."""
    sock = cached_daemon.sock
    s1 = ctr_spec(ctr, "first", 16)
    s2 = ctr_spec(ctr, "second", 24, shuffle=True, seed=7, num_shuffle_buffer_elements=64,
                  num_filenames_shuffle_buffer=2, num_mix_files=2)
    ref1, ref2 = reference(tmp_path, s1), reference(tmp_path, s2)
    n1 = sluice.register(s1, socket=sock)  # a registered pipeline starts at once
    j1 = Proc(sock, n1, "broadcast")
    j1.go()
    first = j1.line()  # job 1 has opened both files (its interleave cycle is 2)
    n2 = sluice.register(s2, socket=sock)
    j2 = Proc(sock, n2, "broadcast")
    j2.go()
    assert _labels(j2.batches()) == ref2
    assert [first["labels"]] + _labels(j1.batches()) == ref1
    st1, st2 = cache_stats(sock, n1), cache_stats(sock, n2)
    assert st1["cache_filled"] == 2 and st1["cache_files"] == 0, st1
    assert st2["cache_files"] == 2 and st2["cache_filled"] == 0, st2
    # it followed what was still being filled, or read what was done: never the files
    assert st2["cache_followed"] <= 2, st2


def test_a_job_reads_on_from_the_file_when_the_caching_job_stalls(cached_daemon, ctr, tmp_path):
    """Job 1's reader holds a batch: its ring fills, its pipeline waits mid-file, its fills stop.
    Job 2 follows them, then reads each file on itself from where the cache stopped; its batches
    are right and job 1 is none the worse (kill -9 of its reader; the daemon goes on)."""
    sock = cached_daemon.sock
    s1 = ctr_spec(ctr, "stalled", 16)
    s2 = ctr_spec(ctr, "onward", 24, shuffle=True, seed=7, num_shuffle_buffer_elements=64,
                  num_filenames_shuffle_buffer=2, num_mix_files=2)
    ref2 = reference(tmp_path, s2)
    n1 = sluice.register(s1, socket=sock)  # a registered pipeline starts at once
    holder = Proc(sock, n1, "broadcast", "--hold-after", 2)
    holder.go()
    assert [holder.line() for _ in range(2)] and "holding" in holder.line()
    st1 = wait_for("job 1 to wait for its ring",
                   lambda: (lambda s: s if s["producer_waits"] > 0 else None)(
                       cache_stats(sock, n1)))
    assert st1["cache_filled"] == 0, st1  # mid-file: neither file is cached whole
    n2 = sluice.register(s2, socket=sock)
    j2 = Proc(sock, n2, "broadcast")
    j2.go()
    assert _labels(j2.batches()) == ref2
    st2 = cache_stats(sock, n2)
    assert st2["cache_followed"] == 2 and st2["cache_fallbacks"] == 2, st2
    assert st2["cache_filled"] == 0, st2
    holder.kill()
    # the daemon serves on: a third job over the same files reads them, rightly
    s3 = ctr_spec(ctr, "third", 32)
    j3 = Proc(sock, sluice.register(s3, socket=sock), "broadcast")
    j3.go()
    assert _labels(j3.batches()) == reference(tmp_path, s3)
    assert json.dumps(cache_stats(sock, "third"))  # answers


def _short_ctr(d, files=2, records=600, bad=(1, 250)):
    """dense0 and label, one value each, in `files` uncompressed files of `records` records,
    except that record bad[1] of file bad[0] holds two labels: it decodes (the cache keeps it
    decoded) and fails only as its row is laid into a batch."""
    sys.path.insert(0, os.path.join(SRC, "tests", "crosscheck"))
    import common
    pb = common.protos()[0]
    os.makedirs(d)
    with open(os.path.join(d, "__manifest__.json"), "w") as f:
        json.dump({"compression": None, "allow_var_len": False, "features": [
            {"name": "dense0", "dtype": "float32", "shape": [1], "deserialize_type": "float"},
            {"name": "label", "dtype": "int64", "shape": [1], "deserialize_type": "int"}]}, f)
    for k in range(files):
        recs = []
        for i in range(records):
            ex = pb.Example()
            ex.features.feature["dense0"].float_list.value.append(i / 8)
            ex.features.feature["label"].int64_list.value.extend(
                [k * records + i] * (2 if (k, i) == bad else 1))
            recs.append(ex.SerializeToString())
        common.write_tfrecord(os.path.join(d, "part-%d.tfrecords" % k), recs)
    return d


def _read_all(sock, spec):
    """Register spec and read it to its end: every batch's labels, the error that ended it (or
    None), and its stats then."""
    name = sluice.register(spec, socket=sock)
    out, err = [], None
    try:
        with sluice.attach(name, socket=sock) as r:
            for b in r:
                out.append(b.numpy()["label"].ravel().tolist())
                b.release()
    except sluice.SluiceError as e:
        err = e
    return out, err, sluice.stats(name, socket=sock)


def test_a_cached_epoch_fails_and_skips_a_bad_row_as_the_files_do(cached_daemon, tmp_path):
    """Job 1 (on_corrupt skip_record) puts both files in the cache, decoded, the bad record too.
    Job 2 (on_corrupt fail, another batch size and seed) then runs its epoch on compact rows
    from the cache (cached_epochs 1): it fails at the bad row with the message `sluicectl run`
    gives reading the files, naming the file, record and offset. The daemon serves on: job 3
    (skip_record) reads a cached epoch with the bad row dropped, as from the files."""
    sock = cached_daemon.sock
    data = _short_ctr(str(tmp_path / "short"))
    got, err, st = _read_all(sock, ctr_spec(data, "filler", 50, on_corrupt="skip_record"))
    assert err is None and sum(map(len, got)) == 1199, err
    assert st["cache_filled"] == 2 and st["cached_epochs"] == 0, st
    shuffled = dict(shuffle=True, seed=3, num_shuffle_buffer_elements=100,
                    num_filenames_shuffle_buffer=2, num_mix_files=2)
    s2 = ctr_spec(data, "failing", 64, on_corrupt="fail", **shuffled)
    path = str(tmp_path / "failing.json")
    with open(path, "w") as f:
        json.dump(s2, f)
    ref = ctl("run", path)  # in process, no cache: from the files
    assert ref.returncode != 0
    msg = ref.stderr.strip().splitlines()[-1]
    assert "part-1.tfrecords" in msg and "record 250" in msg, msg
    got, err, st = _read_all(sock, s2)
    assert err is not None, "the bad row did not fail job 2"
    assert msg.split("run: ", 1)[1] in err.strerror, (msg, err.strerror)
    assert st["cached_epochs"] == 1 and st["cache_filled"] == 0, st
    s3 = ctr_spec(data, "skipping", 64, on_corrupt="skip_record", **shuffled)
    got, err, st = _read_all(sock, s3)
    assert err is None and got == [b["tensors"]["label"]["values"] for b in
                                   run_reference(tmp_path, s3, "label")]
    assert st["cached_epochs"] == 1 and st["skipped_records"] == 1, st
