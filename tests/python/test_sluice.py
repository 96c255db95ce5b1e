# SPDX-License-Identifier: Apache-2.0
"""The Python package sluice against a real sluiced: values, lifetimes, state, errors, torch."""

import errno
import gc
import hashlib
import json
import os
import threading
import time
import weakref
import zlib

import numpy as np
import pytest

import sluice
from conftest import (BATCH, RECORDS, ctl, image_spec, run_reference, shuffled, test_daemon,
                      wait_for)

try:
    import torch
except ImportError:
    torch = None

needs_torch = pytest.mark.skipif(torch is None,
                                 reason="[deps] torch is not installed (python3-torch)")
needs_gpu = pytest.mark.skipif(torch is None or not torch.cuda.is_available(),
                               reason="[gpu] no CUDA device (torch.cuda.is_available())")


def read_all(reader, keep=False):
    """Every batch of the reader as plain data: seq, rows, end_of_epoch and copied tensors."""
    out = []
    for b in reader:
        with b:
            out.append({"seq": b.seq, "epoch": b.epoch, "rows": b.rows,
                        "end_epoch": b.end_of_epoch, "tensors": b.numpy(copy=True)})
    return out


def digest(v):
    """The CRC-32 of `sluicectl run --json`: row_splits, string offsets, then the data."""
    crc = 0
    if isinstance(v, sluice.Ragged):
        crc = zlib.crc32(v.row_splits.tobytes(), crc)
        v = v.values
    if isinstance(v, sluice.Strings):  # the offsets and the bytes, as they lie in the batch
        crc = zlib.crc32(v.offsets.tobytes(), crc)
        return "%08x" % zlib.crc32(v.values.tobytes(), crc)
    return "%08x" % zlib.crc32(np.ascontiguousarray(v).tobytes(), crc)


def check_against_reference(got, ref):
    assert len(got) == len(ref)
    for g, r in zip(got, ref):
        assert (g["seq"], g["epoch"], g["rows"], g["end_epoch"]) == \
            (r["seq"], r["epoch"], r["rows"], r["end_epoch"])
        assert set(g["tensors"]) == set(r["tensors"])
        for name, rt in r["tensors"].items():
            v = g["tensors"][name]
            assert digest(v) == rt["digest"], "seq %d tensor %s" % (g["seq"], name)
            if rt["ragged"]:
                assert isinstance(v, sluice.Ragged)
                assert v.row_splits.tolist() == rt["row_splits"]
                v = v.values
            if rt["dtype"] == "string":
                assert v.to_list() == [s.encode("latin-1") for s in rt["values"]]
            elif rt["dtype"] == "float32":
                np.testing.assert_array_equal(v.reshape(-1),
                                              np.array(rt["values"], dtype=np.float32))
            else:
                assert v.reshape(-1).tolist() == rt["values"]


# ---- reading ------------------------------------------------------------------------------

def test_attach_iterate_values_equal_sluicectl_run(daemon, tmp_path):
    with sluice.attach("img", socket=daemon.sock) as r:
        got = read_all(r)
    assert sum(b["rows"] for b in got) == RECORDS
    check_against_reference(got, run_reference(tmp_path, daemon.specs["img"]))


def test_attach_by_spec_dict_json_and_path(daemon, tmp_path):
    spec = image_spec(daemon.data, epochs=1, seed=21)
    ref = run_reference(tmp_path, spec)
    path = tmp_path / "s.json"
    path.write_text(json.dumps(spec))
    for form in (spec, json.dumps(spec), str(path), path):
        with sluice.attach(spec=form, socket=daemon.sock) as r:
            check_against_reference(read_all(r), ref)


def test_relative_paths_start_at_the_spec_file_or_the_working_directory(daemon, tmp_path,
                                                                         monkeypatch):
    """A spec file's relative data_dir starts at its directory; a dict's or a text's at the
    caller's working directory (sent to the daemon, whose own is elsewhere)."""
    spec = image_spec(daemon.data, epochs=1, seed=23)
    ref = run_reference(tmp_path, spec)
    (tmp_path / "conf").mkdir()
    (tmp_path / "work").mkdir()
    os.symlink(daemon.data, str(tmp_path / "ds"))
    rel = dict(spec, args=dict(spec["args"], dataset={"type": "dir",
                                                      "args": {"data_dir": "../ds"}}))
    path = tmp_path / "conf" / "rel.json"
    path.write_text(json.dumps(rel))
    monkeypatch.chdir(str(tmp_path / "work"))  # "../ds" from here is the dataset too
    for form in (str(path), rel, json.dumps(rel)):
        with sluice.attach(spec=form, socket=daemon.sock) as r:
            check_against_reference(read_all(r), ref)
    assert sluice.register(str(path), socket=daemon.sock)
    monkeypatch.chdir(str(tmp_path))  # from here "../ds" is not: the error names where
    with pytest.raises(sluice.SluiceError) as e:
        sluice.attach(spec=rel, socket=daemon.sock)
    assert os.path.join(str(tmp_path), "../ds") in str(e.value)
    with sluice.attach(spec=str(path), socket=daemon.sock) as r:  # the file's dir still works
        check_against_reference(read_all(r), ref)


def test_types_shapes_and_read_only(daemon):
    with sluice.attach("img", socket=daemon.sock) as r:
        b = r.next(timeout=30)
        assert isinstance(b, sluice.Batch) and b.rows == BATCH and b.seq == 0
        assert list(b) == ["image", "label", "bbox"] and len(b) == 3
        assert b.dtype("image") == "string" and b.dtype("bbox") == "float32"
        img, label, bbox = b["image"], b["label"], b["bbox"]
        # strings: one uint8 array of their bytes and int64 offsets, both in the shared memory
        assert isinstance(img, sluice.Strings) and img.shape == (BATCH, 1)
        assert img.values.dtype == np.uint8 and img.offsets.dtype == np.int64
        assert img.offsets.shape == (BATCH + 1,) and img.offsets[0] == 0
        assert img.offsets[-1] == img.values.shape[0] and (np.diff(img.offsets) > 0).all()
        objs = b.strings("image")  # bytes objects for those who want them, nested as the shape
        assert len(objs) == BATCH and all(len(row) == 1 and isinstance(row[0], bytes) and row[0]
                                          for row in objs)
        assert [row[0] for row in objs] == img.to_list()
        o = img.offsets
        assert objs[3][0] == img.values[o[3]:o[4]].tobytes()
        with pytest.raises(TypeError):
            b.strings("label")
        assert label.dtype == np.int64 and label.shape == (BATCH, 1)
        assert isinstance(bbox, sluice.Ragged)
        assert bbox.values.dtype == np.float32 and bbox.values.shape[1:] == (4,)
        assert bbox.row_splits.shape == (BATCH + 1,)
        assert bbox.row_splits[-1] == bbox.values.shape[0]
        for a in (img.values, img.offsets, label, bbox.values, bbox.row_splits, label[1:],
                  label.T):
            assert not a.flags.writeable
        with pytest.raises(ValueError):
            label[0, 0] = 1
        with pytest.raises(ValueError):
            label.flags.writeable = True  # the buffer itself is read-only
        with pytest.raises(KeyError):
            b["nope"]
        b.release()


def test_next_timeout_and_end_of_stream(daemon):
    with sluice.attach("img", socket=daemon.sock) as r:
        n = 0
        while (b := r.next(timeout=30)) is not None:
            n += b.rows
            b.release()
        assert n == RECORDS
        assert r.next(timeout=0) is None  # stays at the end
    assert r.closed
    with pytest.raises(ValueError):
        r.next()


# ---- batch lifetime -----------------------------------------------------------------------

def test_arrays_keep_the_batch_and_gc_releases_it(daemon):
    with sluice.attach("forever", socket=daemon.sock) as r:
        b = r.next(timeout=30)
        owner = weakref.ref(b._owner)
        label = b["label"]
        expect = label.copy()
        view = label[2:]
        assert b.release() is False, "arrays still borrow the batch"
        assert not b.released and owner() is not None
        with pytest.raises(ValueError):
            b["label"]
        del label
        gc.collect()
        assert not b.released, "a view still borrows it"
        np.testing.assert_array_equal(view, expect[2:])
        del view
        gc.collect()
        assert b.released and owner() is None

        b2 = r.next(timeout=30)
        owner2 = weakref.ref(b2._owner)
        vals = b2["bbox"].values
        del b2  # the batch object goes; its array keeps the memory
        gc.collect()
        assert owner2() is not None
        float(vals.sum())
        del vals
        gc.collect()
        assert owner2() is None


def test_with_block_releases(daemon):
    with sluice.attach("forever", socket=daemon.sock) as r:
        with r.next(timeout=30) as b:
            s = int(b["label"].sum())
        assert b.released and s >= 0


def test_held_arrays_stall_the_ring_until_gone(daemon):
    """The daemon cannot reuse memory an array shows: holding arrays fills the ring, and
    dropping them (garbage collection) lets the pipeline go on."""
    held = []
    with sluice.attach("forever", socket=daemon.sock) as r:
        with pytest.raises(sluice.SluiceTimeout):
            for _ in range(10000):
                b = r.next(timeout=2)
                held.append(b["label"])
                del b
        assert len(held) > 2
        first = [a.copy() for a in held[:2]]
        for a, c in zip(held[:2], first):  # memory still intact while held
            np.testing.assert_array_equal(a, c)
        del held[:]
        gc.collect()
        for _ in range(5):
            r.next(timeout=30).release()


def test_version_and_a_mismatched_library(monkeypatch):
    """sluice.__version__ is the library's; a library of another version is refused, named."""
    from sluice import _lib
    have = _lib.lib().sluice_version().decode()
    assert sluice.__version__ == have and len(have.split(".")) == 3
    monkeypatch.setattr(_lib, "_lib", None)
    monkeypatch.setattr(_lib, "VERSION", "9.9.0")
    with pytest.raises(OSError, match=r"is libsluice %s; this sluice package is 9\.9\.0" % have):
        _lib.lib()


def test_batch_outlives_its_reader(daemon):
    r = sluice.attach("forever", socket=daemon.sock)
    b = r.next(timeout=30)
    img = b["image"]
    label = b["label"]
    expect = label.copy()
    r.close()
    np.testing.assert_array_equal(label, expect)  # the ring stays mapped for the batch
    assert img.shape[0] == b.rows and len(img.to_list()) == img.shape[0] * img.shape[1]
    assert img.to_list()[0] == bytes(img.values[:img.offsets[1]])  # its bytes still readable
    del label
    assert not b.release()  # the strings borrow the batch too (no copy): held while they live
    del img
    assert b.released


def test_release_from_another_thread(daemon):
    with sluice.attach("forever", socket=daemon.sock) as r:
        batches = [r.next(timeout=30) for _ in range(3)]
        t = threading.Thread(target=lambda: [b.release() for b in batches])
        t.start()
        t.join()
        assert all(b.released for b in batches)
        r.next(timeout=30).release()


def test_split_mode_threads_share_the_rows(daemon):
    spec = image_spec(daemon.data, epochs=1, seed=33)
    labels = [[], []]
    ready = threading.Barrier(2)

    def work(k):
        with sluice.attach(spec=spec, socket=daemon.sock, mode="split") as r:
            ready.wait(30)
            for b in r:
                with b:
                    labels[k] += b["label"].reshape(-1).tolist()

    ts = [threading.Thread(target=work, args=(k,)) for k in range(2)]
    for t in ts:
        t.start()
    for t in ts:
        t.join(60)
    ref = run_reference(daemon.tmp, spec, "label")
    assert sorted(labels[0] + labels[1]) == sorted(v for b in ref
                                                   for v in b["tensors"]["label"]["values"])


# ---- state --------------------------------------------------------------------------------

def test_state_and_resume(fresh_daemon, tmp_path, data):
    spec = image_spec(data, epochs=2, **shuffled(5))
    ref = run_reference(tmp_path, spec)
    with sluice.attach(spec=spec, socket=fresh_daemon.sock) as r:
        head = [r.next(timeout=30) for _ in range(5)]
        for b in head:
            b.release()
        st = r.state()
    assert isinstance(st, bytes) and 0 < len(st) <= 4096
    # a new daemon, as after a restart: the pipeline starts from the state
    fresh_daemon.stop()
    d2 = type(fresh_daemon)(fresh_daemon.tmp, data, fresh_daemon.conf, {})
    try:
        with sluice.attach(spec=spec, socket=d2.sock, state=st) as r:
            tail = read_all(r)
    finally:
        d2.stop()
    assert [b.seq for b in head] == [b["seq"] for b in ref[:5]]
    check_against_reference(tail, ref[5:])


# ---- register and errors ------------------------------------------------------------------

def test_register(daemon, tmp_path):
    spec = image_spec(daemon.data, name="reg1", epochs=1, seed=44)
    assert sluice.register(spec, socket=daemon.sock) == "reg1"
    assert sluice.register(json.dumps(spec), socket=daemon.sock) == "reg1"  # same fingerprint
    unnamed = image_spec(daemon.data, epochs=1, seed=45)
    name = sluice.register(unnamed, socket=daemon.sock)
    assert name and name != "reg1"
    with sluice.attach(name, socket=daemon.sock) as r:
        assert sum(b["rows"] for b in read_all(r)) == RECORDS


def test_register_shares_by_cycle(daemon):
    # issue 20: with cycle_length given, num_parallel_reads changes no batch, so specs that
    # differ only in it are one pipeline (named after its fingerprint); another cycle is not
    def name(**args):
        return sluice.register(image_spec(daemon.data, epochs=1, seed=46, **args),
                               socket=daemon.sock)
    one = name(cycle_length=2, num_parallel_reads=1)
    assert one
    assert name(cycle_length=2, num_parallel_reads=8) == one
    assert name(cycle_length=2, num_parallel_reads="auto") == one
    assert name(num_parallel_reads=2) == one  # the cycle before the key: the same batches
    assert name(cycle_length=3, num_parallel_reads=8) != one
    assert name(num_parallel_reads=8) != one


def test_errors_carry_errno_and_message(daemon, tmp_path):
    with pytest.raises(sluice.SluiceError) as e:
        sluice.attach("no-such-pipeline", socket=daemon.sock)
    assert e.value.errno == errno.ENOENT and "no-such-pipeline" in str(e.value)
    assert isinstance(e.value, OSError)

    bad = image_spec(daemon.data)
    bad["args"]["target_batch_size"] = "many"
    with pytest.raises(sluice.SluiceError) as e:
        sluice.attach(spec=bad, socket=daemon.sock)
    assert e.value.errno == errno.EINVAL and "target_batch_size" in str(e.value)

    with pytest.raises(sluice.SluiceError) as e:
        sluice.register({"type": "independent", "args": {"dataset": 3}}, socket=daemon.sock)
    assert e.value.errno == errno.EINVAL and "dataset" in e.value.strerror

    missing = str(tmp_path / "nobody.sock")
    with pytest.raises(sluice.SluiceError) as e:
        sluice.attach("img", socket=missing)
    assert e.value.errno in (errno.ENOENT, errno.ECONNREFUSED) and "nobody.sock" in str(e.value)

    # a pipeline served in broadcast mode takes rank readers too (a group of theirs), but a
    # group reads in one mode: test_groups.py has the rest
    with sluice.attach("img", socket=daemon.sock, mode="rank", index=0, count=2,
                       group="refusals"):
        with pytest.raises(sluice.SluiceError) as e:
            sluice.attach("img", socket=daemon.sock, mode="split", group="refusals")
        assert e.value.errno == errno.EBUSY and "rank mode with count 2" in str(e.value)

    with pytest.raises(ValueError):
        sluice.attach("img", spec={}, socket=daemon.sock)
    with pytest.raises(ValueError):
        sluice.attach("img", socket=daemon.sock, mode="rank")
    with pytest.raises(ValueError):
        sluice.attach("img", socket=daemon.sock, mode="sideways")
    with pytest.raises(TypeError):
        sluice.attach(spec=42, socket=daemon.sock)


def test_pipeline_error_is_raised_with_the_daemons_message(daemon, tmp_path):
    corrupt = tmp_path / "corrupt"
    corrupt.mkdir()
    for f in os.listdir(daemon.data):
        b = open(os.path.join(daemon.data, f), "rb").read()
        if f.endswith(".tfrecords") or f.endswith(".tfrecord"):
            b = bytearray(b)
            b[40] ^= 0xff  # inside the first record's data: a CRC mismatch
        (corrupt / f).write_bytes(bytes(b))
    spec = image_spec(str(corrupt), epochs=1, seed=46)
    with pytest.raises(sluice.SluiceError) as e:
        with sluice.attach(spec=spec, socket=daemon.sock) as r:
            read_all(r)
    assert e.value.errno == errno.EBADMSG
    # regression: the ring's error state used to overtake the error batch that carries the
    # daemon's message, and libsluice read it as a corrupt ring ("impossible value")
    assert str(corrupt) in str(e.value) and "CRC" in str(e.value), str(e.value)


# ---- GPU without a GPU, torch -------------------------------------------------------------

def test_copy_to_cuda_without_cuda_is_enodev(daemon, monkeypatch):
    if torch is not None and torch.cuda.is_available():
        pytest.skip("[gpu-present] a GPU is present: this case is for a host without one")
    monkeypatch.setenv("SLUICE_CUDA_LIBRARY", "/nonexistent/libcudart.so")
    with sluice.attach("forever", socket=daemon.sock) as r:
        with r.next(timeout=30) as b:
            with pytest.raises(sluice.SluiceError) as e:
                b._copy_to_cuda([None] * len(b), [None] * len(b), 0)
    assert e.value.errno == errno.ENODEV and "/nonexistent/libcudart.so" in str(e.value)


@needs_torch
def test_to_torch_cpu(daemon, tmp_path):
    ref = run_reference(tmp_path, daemon.specs["img"])
    with sluice.attach("img", socket=daemon.sock) as r:
        with r.next(timeout=30) as b:
            t = b.to_torch("cpu")
    assert t["label"].dtype == torch.int64 and t["label"].shape == (BATCH, 1)
    assert t["label"].reshape(-1).tolist() == ref[0]["tensors"]["label"]["values"]
    vals, splits = t["bbox"]
    assert splits.tolist() == ref[0]["tensors"]["bbox"]["row_splits"]
    assert vals.dtype == torch.float32 and vals.shape[1] == 4
    vals += 1  # a copy: writable, and the shared memory is untouched
    img = t["image"]
    assert isinstance(img, sluice.Strings) and img.values.dtype == torch.uint8
    assert img.offsets.dtype == torch.int64 and img.offsets.shape == (BATCH + 1,)
    o = img.offsets.tolist()
    assert [bytes(img.values[o[i]:o[i + 1]].tolist()) for i in range(BATCH)] == \
        [s.encode("latin-1") for s in ref[0]["tensors"]["image"]["values"]]


@needs_torch
def test_to_torch_cuda_without_gpu_is_a_clear_error(daemon):
    if torch.cuda.is_available():
        pytest.skip("[gpu-present] a GPU is present: this case is for a host without one")
    with sluice.attach("forever", socket=daemon.sock) as r:
        with r.next(timeout=30) as b:
            with pytest.raises(sluice.SluiceError) as e:
                b.to_torch("cuda")
    assert e.value.errno == errno.ENODEV and "CUDA" in str(e.value)


@needs_torch
def test_iterable_dataset_with_dataloader(daemon, tmp_path):
    import sluice.torch as st
    ref = run_reference(tmp_path, daemon.specs["img"], "label")
    dl = torch.utils.data.DataLoader(st.IterableDataset("img", socket=daemon.sock),
                                     batch_size=None)
    got = [b["label"].reshape(-1).tolist() for b in dl]
    assert got == [b["tensors"]["label"]["values"] for b in ref]
    spec = image_spec(daemon.data, epochs=1, seed=47)
    dl = torch.utils.data.DataLoader(st.IterableDataset(spec, socket=daemon.sock),
                                     batch_size=None, num_workers=2)
    rows = sum(b["label"].shape[0] for b in dl)
    assert rows == RECORDS  # split between the two workers
    # a catch-up reader (e.g. an evaluation loop) reads the same batches
    dl = torch.utils.data.DataLoader(st.IterableDataset("img", socket=daemon.sock,
                                                        lag="catch_up", max_lag=4),
                                     batch_size=None)
    got = [b["label"].reshape(-1).tolist() for b in dl]
    assert got == [b["tensors"]["label"]["values"] for b in ref]
    with pytest.raises(ValueError, match="broadcast"):
        next(iter(st.IterableDataset("img", socket=daemon.sock, mode="split",
                                     lag="catch_up")))


@needs_torch
def test_iterable_dataset_epochs_and_state_dict(daemon, tmp_path):
    """One iter() is one epoch of one reader; state_dict() resumes exactly where it was."""
    import sluice.torch as st
    spec = image_spec(daemon.data, epochs=3, seed=53)
    ref = run_reference(tmp_path, spec, "label")
    by_epoch = [[b["tensors"]["label"]["values"] for b in ref if b["epoch"] == e]
                for e in range(3)]
    ds = st.IterableDataset(spec, socket=daemon.sock)
    dl = torch.utils.data.DataLoader(ds, batch_size=None)
    got = [b["label"].reshape(-1).tolist() for b in dl]  # epoch 0, then it stops
    assert got == by_epoch[0]
    # the daemon has finished an epoch: it knows how many batches one has
    assert len(ds) == len(dl) == len(by_epoch[0]) == len(by_epoch[2])
    assert sluice.stats(sluice.register(spec, socket=daemon.sock),
                        socket=daemon.sock)["epoch_batches"] == len(by_epoch[0])
    # epoch 1: break after two batches, save, resume in a new dataset (a restarted job)
    it = iter(dl)
    part = [next(it)["label"].reshape(-1).tolist() for _ in range(2)]
    sd = ds.state_dict()
    assert isinstance(sd["sluice_state"], bytes)
    ds.close()
    ds2 = st.IterableDataset(spec, socket=daemon.sock)
    ds2.load_state_dict(sd)
    dl2 = torch.utils.data.DataLoader(ds2, batch_size=None)
    rest = [b["label"].reshape(-1).tolist() for b in dl2]
    assert part + rest == by_epoch[1]
    assert [b["label"].reshape(-1).tolist() for b in dl2] == by_epoch[2]
    with pytest.raises(st.EndOfData, match="last epoch"):  # past the spec's epochs:
        list(dl2)                                         # an error, not a replay
    # split between two workers (persistent, so each keeps its reader): every epoch whole
    ds3 = st.IterableDataset(image_spec(daemon.data, epochs=2, seed=59), socket=daemon.sock)
    dl3 = torch.utils.data.DataLoader(ds3, batch_size=None, num_workers=2,
                                      persistent_workers=True)
    for _ in range(2):
        assert sum(b["label"].shape[0] for b in dl3) == RECORDS


@needs_gpu
def test_to_torch_cuda_equals_cpu(daemon):
    with sluice.attach("forever", socket=daemon.sock) as r:
        for _ in range(3):
            with r.next(timeout=30) as b:
                cpu = b.to_torch("cpu")
                gpu = b.to_torch("cuda", non_blocking=False)
            assert torch.equal(gpu["label"].cpu(), cpu["label"])
            assert torch.equal(gpu["bbox"][0].cpu(), cpu["bbox"][0])
            assert torch.equal(gpu["bbox"][1].cpu(), cpu["bbox"][1])
            assert torch.equal(gpu["image"].values, cpu["image"].values)  # on the host
            assert torch.equal(gpu["image"].offsets, cpu["image"].offsets)
            with r.next(timeout=30) as b:
                gpu = b.to_torch("cuda")  # asynchronous: the release waits for the copy
                cpu = b.to_torch("cpu")
            torch.cuda.synchronize()
            assert torch.equal(gpu["label"].cpu(), cpu["label"])


def test_train_torch_example_runs_and_learns():
    """examples/train_torch.py: a real model trained on the CPU through sluice."""
    pytest.importorskip("torch")
    import subprocess
    import sys
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    r = subprocess.run([sys.executable, os.path.join(root, "examples", "train_torch.py"),
                        "--steps", "200", "--records", "20000"],
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]
    steps = [json.loads(x) for x in r.stdout.splitlines() if x.startswith("{")]
    assert len(steps) == 200
    first = sum(s["loss"] for s in steps[:20]) / 20
    last = sum(s["loss"] for s in steps[-20:]) / 20
    assert last < first, (first, last)
    assert all(s["input_wait_ms"] >= 0 for s in steps)


def test_bfloat16_images_through_sluiced(fresh_daemon, tmp_path):
    """normalize to bfloat16: the batch's dtype end to end (sluiced, libsluice, numpy's uint16
    bits or ml_dtypes' bfloat16, torch.bfloat16), each value the float32 pipeline's rounded to
    nearest even (torch's own rounding, an independent one)."""
    torch = pytest.importorskip("torch")
    data = str(tmp_path / "jpeg")
    assert ctl("gen", "jpeg", data, "--records", 16, "--files", 2, "--seed", 4).returncode == 0

    def run(dtype, name):
        spec = {"name": name, "type": "independent", "args": {
            "dataset": {"type": "dir", "args": {"data_dir": data}}, "target_batch_size": 8,
            "drop_remainder": False, "epochs": 1, "num_read_buffer_bytes": 65536,
            "num_prefetch": 2, "seed": 2,
            "primary_features": [{"from_name": "image/encoded", "to_name": "image"}],
            "processing_steps": [
                {"tensor": "image", "type": "decode_image", "args": {"channels": 3}},
                {"tensor": "image", "type": "random_resized_crop", "args": {"size": [32, 32]}},
                {"tensor": "image", "type": "normalize", "args": {
                    "mean": [123.675, 116.28, 103.53], "std": [58.395, 57.12, 57.375],
                    "dtype": dtype}}]}}
        out = []
        with sluice.attach(spec=spec, socket=fresh_daemon.sock) as r:
            for b in r:
                with b:
                    out.append((b["image"].dtype, b.to_torch()["image"]))
        return out
    f32, bf16 = run("float32", "f32"), run("bfloat16", "bf16")
    assert len(f32) == len(bf16) == 2
    for (_, a), (npdt, b) in zip(f32, bf16):
        assert npdt.itemsize == 2 and str(npdt) in ("uint16", "bfloat16"), npdt
        assert b.dtype == torch.bfloat16 and tuple(b.shape) == (8, 3, 32, 32)
        assert torch.equal(b, a.to(torch.bfloat16))


def test_ring_sized_for_big_image_batches(fresh_daemon, tmp_path):
    """Batches of float images larger than --pipeline-memory allows for num_prefetch + 2 of
    them (here 3.5 MB each against the test daemon's 8 MiB): the ring is sized for them from
    the plan (within --memory) instead of the pipeline failing."""
    data = str(tmp_path / "jpeg")
    assert ctl("gen", "jpeg", data, "--records", 70, "--files", 2, "--seed", 5).returncode == 0
    spec = {"name": "big", "type": "independent", "args": {
        "dataset": {"type": "dir", "args": {"data_dir": data}}, "target_batch_size": 32,
        "drop_remainder": False, "epochs": 1, "num_read_buffer_bytes": 65536,
        "num_prefetch": 2,
        "primary_features": [{"from_name": "image/encoded", "to_name": "image"}],
        "processing_steps": [
            {"tensor": "image", "type": "decode_image", "args": {"channels": 3}},
            {"tensor": "image", "type": "resize", "args": {"size": [96, 96]}},
            {"tensor": "image", "type": "normalize", "args": {"mean": 0, "std": 1}}]}}
    with sluice.attach(spec=spec, socket=fresh_daemon.sock) as r:
        rows = [b.rows for b in r]
        st = sluice.stats("big", socket=fresh_daemon.sock)
    assert rows == [32, 32, 6]
    assert st["ring_bytes"] >= 4 * 32 * 3 * 96 * 96 * 4 > 8 << 20, st["ring_bytes"]
    with open(os.path.join(fresh_daemon.tmp, "sluiced.log")) as f:
        assert "a ring of" in f.read()


def test_train_imagenet_example_runs():
    """examples/train_imagenet.py: a ResNet-18 step on [B, 3, H, W] float batches that sluiced
    decoded and augmented."""
    pytest.importorskip("torchvision")
    import subprocess
    import sys
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    r = subprocess.run([sys.executable, os.path.join(root, "examples", "train_imagenet.py"),
                        "--steps", "3", "--batch", "8", "--size", "64", "--records", "48",
                        "--classes", "10"], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]
    steps = [json.loads(x) for x in r.stdout.splitlines() if x.startswith("{")]
    assert [s["step"] for s in steps] == [1, 2, 3]
    assert "image (8, 3, 64, 64) torch.float32, label (8,)" in r.stderr, r.stderr[-500:]


# ---- lag policy ----------------------------------------------------------------------------

def _digest(b):
    h = hashlib.sha256()
    for name in sorted(b):
        v = b[name]
        parts = [v.values, v.row_splits] if isinstance(v, sluice.Ragged) else [v]
        for a in parts:
            for x in ([a.values, a.offsets] if isinstance(a, sluice.Strings) else [a]):
                h.update(x.tobytes())
    return h.hexdigest()


def test_lag_catch_up(fresh_daemon):
    """A slow catch-up reader stops holding the fast one back: the fast one reads far past what
    the ring holds while the slow one keeps its batch (never reused under it); then the slow
    one goes on without a gap from a pipeline of its own, with the very same batches."""
    d = fresh_daemon
    name = sluice.register(image_spec(d.data, name="lagged", epochs=20, **shuffled(4)),
                           socket=d.sock)
    with pytest.raises(ValueError):
        sluice.attach(name, socket=d.sock, mode="split", lag="catch_up")
    fast = sluice.attach(name, socket=d.sock)
    slow = sluice.attach(name, socket=d.sock, lag="catch_up", max_lag=4)
    b0 = slow.next(timeout=30)
    held = b0["label"]
    keep, seq0 = held.copy(), b0.seq
    seen = {}
    for _ in range(150):  # the ring holds 64: without the move this would time out
        with fast.next(timeout=20) as b:
            seen[b.seq] = _digest(b)
    np.testing.assert_array_equal(held, keep)
    del held
    b0.release()
    with slow.next(timeout=30) as b:  # the first from its own pipeline
        got = [(b.seq, _digest(b))]
    listed = ctl("--socket", d.sock, "list").stdout
    assert "lagged@" in listed, "a private pipeline serves the slow reader: " + listed
    for b in slow:
        with b:
            got.append((b.seq, _digest(b)))
    for b in fast:
        with b:
            seen[b.seq] = _digest(b)
    n = len(seen)
    assert sorted(seen) == list(range(n)) and n == 160
    assert [s for s, _ in got] == list(range(seq0 + 1, n)), "no gap, no repeat"
    assert all(seen[s] == dg for s, dg in got), "the same batches as the shared stream"
    slow.close()
    fast.close()

    def gone():  # the daemon drops the private pipeline once it has seen its last reader go
        r = ctl("--socket", d.sock, "list")
        assert r.returncode == 0, r.stderr
        return "lagged@" not in r.stdout
    wait_for("the private pipeline to go with its reader", gone, timeout=30)


@pytest.fixture
def roomy_daemon(tmp_path, data):
    """A daemon of its own whose ring holds 64 of the image batches: --pipeline-memory 16M
    (the engine's fixed needs come out of --pipeline-memory, docs/security.md "Memory", and
    the test's 8 MiB leaves the ring fewer than 64 of them)."""
    conf = str(tmp_path / "conf")
    os.makedirs(conf)
    d = test_daemon.Daemon(str(tmp_path), conf, ["--pipeline-memory", "16M"])
    assert d.ready, "sluiced did not say READY=1"
    d.data = data
    yield d
    d.stop()


def test_a_paced_reader_gets_the_ring_refilled(roomy_daemon):
    """A reader slower than its pipeline, as a training step paces it: once the ring is full
    the daemon waits until a quarter of it was released and makes that many batches in a row
    (ipc_ring_wait_releases), instead of waiting again for room before every batch; and when
    fewer than a quarter come it makes them all the same, once its patience runs out (a few
    tries of DMN_WAIT_NS). Checked here by counts that hold at any pace and load: fewer
    releases than a quarter are refilled, the ring is full again after a paced run, and every
    batch comes, in order, once. How many wake-ups the runs save depends on the pace against
    the daemon's patience and the host's load: a performance property (docs/BENCHMARKS.md, "A
    full ring wakes the driver once a quarter of it is released"), not a functional check."""
    d = roomy_daemon
    name = sluice.register(image_spec(d.data, name="paced", epochs=40), socket=d.sock)
    r = sluice.attach(name, socket=d.sock)
    stats = lambda: sluice.stats(name, socket=d.sock)  # noqa: E731

    def full(taken):
        """Every slot in use, each a batch not yet taken but for those the engine is filling
        (num_prefetch at most), and the daemon waiting for room: the stats, or None."""
        st = stats()
        return (st["producer_waits"] > 0 and st["ring_slots_used"] == st["ring_slots"] and
                st["batches_published"] - taken >= st["ring_slots"] - st["tune_prefetch"] and
                st) or None

    st = wait_for("the ring to fill", lambda: full(0))
    slots, seqs = st["ring_slots"], []
    few = slots // 8  # half the releases it waits for (a quarter of the batches it holds)
    for _ in range(few):
        with r.next(timeout=30) as b:
            seqs.append(b.seq)
    wait_for("%d releases, fewer than a quarter of the ring, to be refilled" % few,
             lambda: full(few))
    n = 240
    for _ in range(n):
        with r.next(timeout=30) as b:
            seqs.append(b.seq)
        time.sleep(0.0005)  # the workload: a step's pace, not a wait for anything
    st = wait_for("the ring to be full again after %d batches taken" % len(seqs),
                  lambda: full(len(seqs)))
    assert seqs == list(range(few + n)), seqs
    r.close()


def test_image_pipeline_through_sluiced(fresh_daemon, tmp_path):
    """decode + random_resized_crop + flip + normalize in sluiced: batch["image"] is a float32
    [B, 3, 64, 64] array over the shared memory, equal to sluicectl run in process."""
    data = str(tmp_path / "jpeg")
    r = ctl("gen", "jpeg", data, "--records", 24, "--files", 2, "--seed", 3)
    assert r.returncode == 0, r.stderr
    steps = [{"tensor": "image", "type": "decode_image", "args": {"channels": 3}},
             {"tensor": "image", "type": "random_resized_crop", "args": {"size": [64, 64]}},
             {"tensor": "image", "type": "random_flip", "args": {}},
             {"tensor": "image", "type": "normalize",
              "args": {"mean": [123.675, 116.28, 103.53], "std": [58.395, 57.12, 57.375]}}]
    spec = {"name": "imgs", "type": "independent", "args": {
        "dataset": {"type": "dir", "args": {"data_dir": data}}, "target_batch_size": 8,
        "drop_remainder": False, "epochs": 1, "num_read_buffer_bytes": 65536,
        "num_prefetch": 2, "seed": 5, "processing_steps": steps,
        "primary_features": [{"from_name": "image/encoded", "to_name": "image"},
                             {"from_name": "image/class/label", "to_name": "label"}]}}
    ref = run_reference(tmp_path, spec, "image,label")
    with sluice.attach(spec=spec, socket=fresh_daemon.sock) as reader:
        got = read_all(reader)
        st = sluice.stats("imgs", socket=fresh_daemon.sock)
    assert [g["rows"] for g in got] == [8, 8, 8]
    # the decode stage's own counters: every image once, its bytes in and the floats out
    assert st["stage.decode.elems_in"] == st["stage.decode.elems_out"] == 24, st
    assert st["stage.decode.dropped"] == 0 and st["stage.decode.cpu_ns"] > 0, st
    assert st["stage.decode.bytes_out"] == 24 * 3 * 64 * 64 * 4, st
    assert st["stage.decode.bytes_in"] > 24 * 1000, st  # encoded images, not the records
    for g, r_ in zip(got, ref):
        img = g["tensors"]["image"]
        assert img.dtype == np.float32 and img.shape == (8, 3, 64, 64)
        assert digest(img) == r_["tensors"]["image"]["digest"]  # the same bytes as in process
        np.testing.assert_array_equal(img.reshape(-1),
                                      np.array(r_["tensors"]["image"]["values"], np.float32))
