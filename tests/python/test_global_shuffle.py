# SPDX-License-Identifier: Apache-2.0
"""shuffle "global" through a real sluiced (issue 36; docs/pipeline.md, "Global shuffle").

A reader by spec gets exactly what `sluicectl run` gives (every record once per epoch, another
order each epoch); sluiced killed with SIGKILL mid-epoch resumes it exactly from its state
directory (that a resumed position reads nothing before it is tests/unit/pipeline/
test_gshuffle.c's); two jobs asking for the same spec share one computation; a compressed
dataset is refused at attach with the reason; the torch adapter's len() is right before the
first epoch.
"""

import os
import signal

import pytest

from conftest import ctl, image_spec, read_labels, run_reference, test_daemon

import sluice

OPTS = ["--ring-slots", "8"]


def _spec(data, **kw):
    # 60 batches of 2 over 2 epochs of the 60-record image set
    return image_spec(data, epochs=2, batch=2, shuffle="global", seed=5, **kw)


def _labels(ref):
    return [(b["seq"], b["tensors"]["label"]["values"], False) for b in ref]


def _start(tmp_path, extra=()):
    conf = str(tmp_path / "conf")
    os.makedirs(conf, exist_ok=True)
    d = test_daemon.Daemon(str(tmp_path), conf, OPTS + list(extra))
    assert d.ready, "sluiced did not say READY=1"
    return d


def test_reader_gets_the_reference_permutation(tmp_path, data):
    ref = run_reference(tmp_path, _spec(data), "label")
    epochs = [sorted(v for b in ref if b["epoch"] == e for v in b["tensors"]["label"]["values"])
              for e in (0, 1)]
    assert epochs[0] == epochs[1] and len(epochs[0]) == len(set(epochs[0]))  # every record once
    order = [[v for b in ref if b["epoch"] == e for v in b["tensors"]["label"]["values"]]
             for e in (0, 1)]
    assert order[0] != order[1], "each epoch draws another order"
    d = _start(tmp_path)
    try:
        with sluice.attach(spec=_spec(data), socket=d.sock) as r:
            got = read_labels(r)
    finally:
        rc = d.stop()
    assert got == _labels(ref) and rc == 0


def test_kill_mid_epoch_resumes_exactly_reading_only_the_rest(tmp_path, data):
    spec = _spec(data, name="gs")
    want = _labels(run_reference(tmp_path, spec, "label"))
    sd = str(tmp_path / "state")
    d = _start(tmp_path, ["--state-dir", sd])
    d2 = None
    try:
        with sluice.attach(spec=spec, socket=d.sock) as r:
            head = read_labels(r, 20)  # epoch 0, batch 20 of 30
            d.stop(signal.SIGKILL)
            d2 = _start(tmp_path, ["--state-dir", sd])
            tail = read_labels(r)
    finally:
        rc = d2.stop() if d2 else None
    assert len(want) == 60 and head + tail == want
    assert rc == 0
    with open(str(tmp_path / "sluiced.log")) as f:
        assert "resumed from the position kept" in f.read()


def test_two_jobs_share_one_computation(tmp_path, data):
    spec = _spec(data, name="shared")
    d = _start(tmp_path)
    try:
        with sluice.attach(spec=spec, socket=d.sock) as a, \
                sluice.attach(spec=spec, socket=d.sock) as b:
            assert sluice.stats("shared", socket=d.sock)["readers"] == 2
            ga, gb = [], []
            for _ in range(30):  # in step: the ring holds 8
                ga += read_labels(a, 1)
                gb += read_labels(b, 1)
            st = sluice.stats("shared", socket=d.sock)
    finally:
        d.stop()
    assert ga == gb and len(ga) == 30
    assert st["batches_published"] <= 30 + 8, st  # one computation for both


def test_compressed_dataset_refused_with_the_reason(tmp_path):
    gz = str(tmp_path / "gz")
    r = ctl("gen", "seq", gz, "--records", 20, "--files", 2, "--compression", "gzip")
    assert r.returncode == 0, r.stderr
    spec = {"type": "independent", "args": {
        "dataset": {"type": "dir", "args": {"data_dir": gz}}, "target_batch_size": 4,
        "drop_remainder": False, "epochs": 1, "num_read_buffer_bytes": 65536,
        "num_prefetch": 2, "shuffle": "global",
        "primary_features": [{"from_name": "id", "to_name": "id"}]}}
    d = _start(tmp_path)
    try:
        with pytest.raises(sluice.SluiceError) as e:
            sluice.attach(spec=spec, socket=d.sock)
    finally:
        d.stop()
    assert "reads records by offset" in str(e.value) and "gzip" in str(e.value)


def test_torch_len_before_the_first_epoch(tmp_path, data):
    torch_adapter = pytest.importorskip("sluice.torch")
    d = _start(tmp_path)
    try:
        ds = torch_adapter.IterableDataset(_spec(data), socket=d.sock)
        n = len(ds)
        got = sum(1 for _ in ds)
        ds.close()
    finally:
        d.stop()
    assert n == 30 and got == 30
