# SPDX-License-Identifier: Apache-2.0
"""Every byte a pipeline holds under sluiced's --memory (issue 37, item 1), against a real
sluiced: the red team's shapes. A spec whose fixed needs cannot fit is refused at register with
the figures; one that grows past what it may hold (a huge shuffle buffer, a record longer than
anything it may hold) fails alone, with a message naming the figures, before the bytes are read;
the daemon's peak RSS (VmHWM) stays within --memory plus 64 MiB and other pipelines read on.

Each test waits on what it checks (a reader's error, the daemon's reply), never on a time.
"""

import errno
import json
import os
import struct

import pytest

from conftest import ctl, test_daemon

import sluice

MB = 1 << 20
MEMORY = 96 * MB


def _crc32c(data):
    crc = 0xFFFFFFFF
    for b in data:
        crc ^= b
        for _ in range(8):
            crc = (crc >> 1) ^ 0x82F63B78 if crc & 1 else crc >> 1
    return crc ^ 0xFFFFFFFF


def _masked(data):
    c = _crc32c(data)
    return ((((c >> 15) | (c << 17)) & 0xFFFFFFFF) + 0xA282EAD8) & 0xFFFFFFFF


def _hwm(d):
    """sluiced's peak resident set (VmHWM), bytes."""
    with open("/proc/%d/status" % d.p.pid) as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024
    raise AssertionError("no VmHWM")


@pytest.fixture
def mem_daemon(tmp_path):
    conf = tmp_path / "conf"
    os.makedirs(str(conf))
    d = test_daemon.Daemon(str(tmp_path), str(conf), ["--memory", "96M"])
    assert d.ready, "sluiced did not say READY=1"
    yield d
    assert d.stop() == 0, "sluiced did not exit cleanly"


def _spec(data_dir, name, **args):
    a = {"dataset": {"type": "dir", "args": {"data_dir": data_dir}}, "target_batch_size": 8,
         "drop_remainder": False, "epochs": 1, "num_read_buffer_bytes": 65536,
         "num_prefetch": 2,
         "primary_features": [{"from_name": f, "to_name": f} for f in ("image", "label")]}
    a.update(args)
    return {"type": "independent", "name": name, "args": a}


def _gen(tmp_path, name, records, files=4):
    d = str(tmp_path / name)
    r = ctl("gen", "image", d, "--records", records, "--files", files, "--seed", 5)
    assert r.returncode == 0, r.stderr
    return d


def _drain(d, name):
    """Batches read to the end, and the error that ended them (None: the stream's end)."""
    n = 0
    with sluice.attach(name, socket=d.sock) as rd:
        try:
            for b in iter(lambda: rd.next(60), None):
                n += 1
                b.release()
        except sluice.SluiceError as e:
            assert not isinstance(e, sluice.SluiceTimeout), e
            return n, e
    return n, None


def _others_read_on(d, tmp_path):
    small = _gen(tmp_path, "small", 40, files=1)
    n, err = _drain(d, sluice.register(_spec(small, "after"), socket=d.sock))
    assert err is None and n == 5, (n, err)


def test_huge_read_buffers_are_refused_at_register_with_the_figures(mem_daemon, tmp_path):
    """num_read_buffer_bytes 256 MiB x num_parallel_reads 64: refused when registered (ENOSPC),
    naming the read buffers' figures, the knobs and --memory; nothing was allocated."""
    data = _gen(tmp_path, "img", 200)
    with pytest.raises(sluice.SluiceError) as ei:
        sluice.register(_spec(data, "huge-reads", num_read_buffer_bytes=256 * MB,
                              num_parallel_reads=64), socket=mem_daemon.sock)
    e = ei.value
    assert e.errno == errno.ENOSPC, e
    msg = str(e)
    assert "read buffers of" in msg and "num_read_buffer_bytes" in msg, msg
    assert "sluiced's --memory" in msg and "100663296" in msg, msg  # the limit's figure
    assert _hwm(mem_daemon) < MEMORY + 64 * MB
    _others_read_on(mem_daemon, tmp_path)


def test_a_huge_shuffle_buffer_fails_its_pipeline_not_the_daemon(mem_daemon, tmp_path):
    """num_shuffle_buffer_elements 2^31 - 1 over 132 MB of 16 KiB records under --memory 96M:
    the buffer fills until the pipeline may hold no more; its reader gets an error with the
    figures and the knobs, sluiced's peak RSS stays within --memory + 64 MiB, and another
    pipeline reads on."""
    data = _gen(tmp_path, "img", 8000)
    name = sluice.register(_spec(data, "huge-shuffle", shuffle=True, seed=1,
                                 num_shuffle_buffer_elements=2**31 - 1,
                                 num_filenames_shuffle_buffer=2, num_mix_files=2),
                           socket=mem_daemon.sock)
    n, err = _drain(mem_daemon, name)
    assert err is not None, n
    msg = str(err)
    assert "may not hold more memory" in msg, msg
    assert "bytes more would pass sluiced's --memory" in msg, msg
    assert "num_shuffle_buffer_elements" in msg, msg
    assert n == 0  # the buffer never filled: no batch came
    assert _hwm(mem_daemon) < MEMORY + 64 * MB, _hwm(mem_daemon)
    assert sluice.stats(name, socket=mem_daemon.sock)["status"] != 0
    _others_read_on(mem_daemon, tmp_path)


def test_sparse_255_mib_records_are_refused_before_they_are_read(mem_daemon, tmp_path):
    """Files of one record of 255 MiB each (a valid length CRC, sparse: almost no disk), read
    4 at a time: the first record is refused at its header, before its bytes are buffered,
    with an error naming the file, the record, its length and the figures; RSS stays small."""
    data = _gen(tmp_path, "sparse", 4, files=4)
    length = 255 * MB
    hdr = struct.pack("<Q", length)
    files = sorted(f for f in os.listdir(data) if f.endswith(".tfrecords"))
    for f in files:
        with open(os.path.join(data, f), "wb") as out:
            out.write(hdr + struct.pack("<I", _masked(hdr)))
            out.truncate(12 + length + 4)  # a hole: the data and its CRC read as zeros
    name = sluice.register(_spec(data, "sparse", num_parallel_reads=4),
                           socket=mem_daemon.sock)
    n, err = _drain(mem_daemon, name)
    assert err is not None and n == 0, (n, err)
    msg = str(err)
    assert "record 0 at offset 0 is %d bytes and is not read" % length in msg, msg
    assert any(os.path.join(data, f) in msg for f in files), msg
    assert "bytes more would pass" in msg, msg
    assert _hwm(mem_daemon) < MEMORY + 64 * MB, _hwm(mem_daemon)
    _others_read_on(mem_daemon, tmp_path)


def _listed(d):
    """The names of sluiced's pipelines."""
    r = ctl("--socket", d.sock, "list", "--json")
    assert r.returncode == 0, r.stderr
    return [p["name"] for p in json.loads(r.stdout)["pipelines"]]


def test_the_record_cache_gives_its_memory_back_to_pipelines(tmp_path):
    """The record cache is on by default, half of --memory, charged to no user: what finished
    pipelines left in it is evicted (its unread entries, least recently used first) for the
    rings of later pipelines, before any ended pipeline is dropped; and a later job over the
    same files reads them from the cache while it holds them."""
    conf = tmp_path / "conf"
    os.makedirs(str(conf))
    d = test_daemon.Daemon(str(tmp_path), str(conf),
                           ["--memory", "96M", "--pipeline-memory", "16M", "--linger", "600"])
    assert d.ready, "sluiced did not say READY=1"
    try:
        data = _gen(tmp_path, "img", 1500)  # 1500 x 16 KiB: about 24 MB cached
        first = sluice.register(_spec(data, "first"), socket=d.sock)
        n, err = _drain(d, first)
        assert err is None and n == 188, (n, err)
        st = sluice.stats(first, socket=d.sock)
        assert st["cache_memory"] == MEMORY // 2, st  # the default: half of --memory
        assert st["cache_filled"] == 4 and st["cache_memory_used"] > 20 * MB, st
        # a second job over the same files reads them from the cache
        again = sluice.register(_spec(data, "again", target_batch_size=16), socket=d.sock)
        n, err = _drain(d, again)
        assert err is None and n == 94, (n, err)
        st = sluice.stats(again, socket=d.sock)
        assert st["cache_files"] == 4 and st["cache_filled"] == 0, st
        held = st["cache_memory_used"]
        # rings of 16 MiB: two fit beside the ended pipelines' 32 MiB and the cache's 24; for
        # the third the cache gives back the entries nobody reads, and the ended pipelines stay
        small = _gen(tmp_path, "small", 40, files=1)

        def ring(k):
            return sluice.register(_spec(small, "ring%d" % k, epochs=None,
                                         target_batch_size=4 + k), socket=d.sock)

        for k in range(3):
            ring(k)
        st = sluice.stats("ring2", socket=d.sock)
        assert st["cache_reclaims"] >= 1 and st["cache_evictions"] >= 1, st
        assert st["cache_memory_used"] < held, (held, st)  # what was needed, not all
        listed = _listed(d)
        assert "first" in listed and "again" in listed, listed
        # once the cache has nothing more to give (the rings read what it holds now), the
        # ended pipelines are dropped for the next rings, then a ring is refused
        made = 3
        with pytest.raises(sluice.SluiceError) as ei:
            while made < 8:
                ring(made)
                made += 1
        assert made in (5, 6), made  # six rings of 16 MiB, or five beside what the cache holds
        assert ei.value.errno == errno.ENOSPC, ei.value
        assert "memory budget:" in str(ei.value), ei.value
        listed = _listed(d)
        assert "first" not in listed and "again" not in listed, listed
        assert _hwm(d) < MEMORY + 64 * MB, _hwm(d)
    finally:
        assert d.stop() == 0, "sluiced did not exit cleanly"
