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

import pytest

import sluice
import test_daemon
from conftest import ctl, run_reference, wait_for
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
