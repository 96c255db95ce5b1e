# SPDX-License-Identifier: Apache-2.0
"""sluiced's own record index (docs/index.md, "sluiced's own index"): a gzip dataset framed
whole once by one pipeline gives a later pipeline (another spec, another batch size) an exact
epoch_batches before its first epoch, without a file written beside the data; an entry whose
file changed since (same size, mtime put back: only ctime moved) is never used; with a state
directory the entries outlive a restart; a file not framed whole gives no entry."""

import os
import struct

import pytest

from conftest import ctl, rewrite_same_size, test_daemon, wait_for

import sluice

RECORDS = 314


def spec(data, name, batch):
    a = {"dataset": {"type": "dir", "args": {"data_dir": data}}, "target_batch_size": batch,
         "drop_remainder": False, "epochs": 1, "num_read_buffer_bytes": 65536,
         "num_prefetch": 2, "primary_features": [{"from_name": "id", "to_name": "id"}]}
    return {"type": "independent", "name": name, "args": a}


def batches(batch, records=RECORDS):
    return -(-records // batch)


def gen(tmp_path, records=RECORDS, files=3):
    if not os.environ.get("SLUICECTL"):
        pytest.skip("[env] SLUICECTL not set (run through meson test)")
    d = str(tmp_path / "gz")
    r = ctl("gen", "seq", d, "--records", records, "--files", files, "--seed", 7,
            "--compression", "gzip")
    assert r.returncode == 0, r.stderr
    return d


@pytest.fixture
def gz(tmp_path):
    return gen(tmp_path)


def start(tmp_path, extra=()):
    conf = str(tmp_path / "conf")
    os.makedirs(conf, exist_ok=True)
    d = test_daemon.Daemon(str(tmp_path), conf, list(extra))
    assert d.ready, "sluiced did not say READY=1"
    return d


def read_epoch(d, s):
    """Register spec s and read its one epoch whole: the number of batches."""
    name = sluice.register(s, socket=d.sock)
    n = 0
    with sluice.attach(name, socket=d.sock) as r:
        while True:
            b = r.next(timeout=60)
            if b is None:
                break
            n += 1
            b.release()
    return n


def ahead(d, s):
    """A new pipeline's epoch_batches and epoch_batches_ahead, before anything was read."""
    name = sluice.register(s, socket=d.sock)
    st = sluice.stats(name, socket=d.sock)
    return st["epoch_batches"], st["epoch_batches_ahead"]


def test_gzip_count_from_a_pipeline_read_before(tmp_path, gz):
    listing = sorted(os.listdir(gz))
    d = start(tmp_path)
    try:
        assert ahead(d, spec(gz, "first", 5)) == (0, 0)  # nothing read yet: unknown
        assert read_epoch(d, spec(gz, "a", 4)) == batches(4)
        assert ahead(d, spec(gz, "b", 8)) == (batches(8), batches(8))
        assert sorted(os.listdir(gz)) == listing  # nothing written beside the data
        f = sorted(x for x in listing if not x.startswith((".", "__")))[0]
        rewrite_same_size(os.path.join(gz, f))
        assert ahead(d, spec(gz, "c", 6)) == (0, 0)  # a stale entry is never used
    finally:
        assert d.stop() == 0
    assert sorted(os.listdir(gz)) == listing


# 5000 records in one file: more than the 1024 offsets an entry keeps (the stride doubles)
@pytest.mark.parametrize("records,files", [(RECORDS, 3), (5000, 1)])
def test_own_index_outlives_a_restart(tmp_path, records, files):
    gz = gen(tmp_path, records, files)
    listing = sorted(os.listdir(gz))
    sd = str(tmp_path / "state")
    d = start(tmp_path, ["--state-dir", sd])
    try:
        assert read_epoch(d, spec(gz, "a", 4)) == batches(4, records)
        ix = os.path.join(sd, "index")
        # poll: the store's own thread writes the index file, off the pipeline's
        wait_for("the state dir's index", lambda: [x for x in os.listdir(ix)
                                                   if x.endswith(".sluice-index")], 20)
    finally:
        assert d.stop() == 0
    files = [x for x in os.listdir(ix) if x.endswith(".sluice-index")]
    assert len(files) == 1 and len(files[0]) == 16 + len(".sluice-index"), files
    assert sorted(os.listdir(gz)) == listing
    d = start(tmp_path, ["--state-dir", sd])
    try:  # read back from the state dir (every entry checked as it is parsed)
        assert ahead(d, spec(gz, "b", 8)) == (batches(8, records), batches(8, records))
    finally:
        assert d.stop() == 0
    assert sorted(os.listdir(gz)) == listing


def own_index_names(sd):
    """The data files named in sluiced's own index files under STATE/index (the SLIDX001 table:
    docs/index.md), by index file."""
    out = {}
    ix = os.path.join(sd, "index")
    for f in sorted(os.listdir(ix)):
        if not f.endswith(".sluice-index"):
            continue
        with open(os.path.join(ix, f), "rb") as fh:
            b = fh.read()
        assert b[:8] == b"SLIDX001", f
        n, = struct.unpack_from("<Q", b, 16)
        dl, = struct.unpack_from("<I", b, 24)
        pos = 28 + dl
        names = []
        for _ in range(n):
            nl, = struct.unpack_from("<I", b, pos + 16)
            names.append(b[pos + 20:pos + 20 + nl].decode())
            pos += 20 + nl
        out[f] = (b[28:28 + dl].decode(), names)
    return out


def data_files(d):
    return sorted(x for x in os.listdir(d) if not x.startswith((".", "__")))


def test_a_file_not_framed_whole_gives_no_entry(tmp_path, gz):
    """skip_file over a gzip file cut short: the two intact files get entries, the cut one none
    (so the count stays unknown); a shard's pipeline enters only the files it read."""
    files = data_files(gz)
    cut = os.path.join(gz, files[1])
    size = os.path.getsize(cut)
    os.truncate(cut, size // 2)  # the gzip stream ends early: a framing error midway
    listing = sorted(os.listdir(gz))
    sd = str(tmp_path / "state")
    d = start(tmp_path, ["--state-dir", sd])
    try:
        s = spec(gz, "skip", 4)
        s["args"]["on_corrupt"] = "skip_file"
        n = read_epoch(d, s)
        assert 0 < n < batches(4)  # the cut file's records (some) are not there
        assert sluice.stats("skip", socket=d.sock)["skipped_files"] == 1
        assert ahead(d, spec(gz, "b", 8)) == (0, 0)  # one file has no entry: unknown
    finally:
        assert d.stop() == 0  # writes what is not written yet
    got = own_index_names(sd)
    assert list(got.values()) == [(gz, [files[0], files[2]])], got
    assert sorted(os.listdir(gz)) == listing


def test_a_shard_enters_only_its_files(tmp_path):
    gz = gen(tmp_path, RECORDS, 3)
    files = data_files(gz)
    sd = str(tmp_path / "state")
    d = start(tmp_path, ["--state-dir", sd])
    try:
        s = spec(gz, "shard", 4)
        s["args"]["shard"] = {"index": 0, "count": 3}
        assert read_epoch(d, s) > 0
        assert ahead(d, spec(gz, "b", 8)) == (0, 0)  # the other files were not read
    finally:
        assert d.stop() == 0
    got = list(own_index_names(sd).values())
    assert len(got) == 1 and got[0][0] == gz and len(got[0][1]) == 1, got
    assert got[0][1][0] in files
