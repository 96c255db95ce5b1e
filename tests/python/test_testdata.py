# SPDX-License-Identifier: Apache-2.0
"""Acceptance: every TensorFlow-written file of ../shared/testdata whose records are Examples or
SequenceExamples, with the manifest `sluicectl manifest` infers from it, through a pipeline in
process (`sluicectl run`) and through sluiced into Python (`sluice.attach`): every value of every
feature of every record equals what google.protobuf decodes from that record.

Skipped without ../shared/testdata (SLUICE_SHARED_DIR, else ../shared beside the repository).
"""

import json
import os
import struct
import sys

import numpy as np
import pytest

import sluice
from conftest import SRC, ctl

sys.path.insert(0, os.path.join(SRC, "tests", "crosscheck"))
import common  # noqa: E402  (google.protobuf's Example classes, TFRecord reading)

SHARED = os.environ.get("SLUICE_SHARED_DIR") or os.path.join(SRC, "..", "shared")
TESTDATA = os.path.join(SHARED, "testdata")


def _files():
    """[(name, kind, compression)] of files.tsv whose records are Examples or SequenceExamples."""
    tsv = os.path.join(TESTDATA, "files.tsv")
    if not os.path.exists(tsv):
        return []
    out = []
    with open(tsv) as f:
        for line in f:
            if line.startswith("#") or not line.strip():
                continue
            name, kind, comp = line.rstrip("\n").split("\t")[:3]
            if kind in ("example", "sequence"):
                out.append((name, kind, comp))
    return out


FILES = _files()
needs_testdata = pytest.mark.skipif(not FILES, reason="[testdata] no ../shared/testdata")


def _records(path, comp):
    with open(path, "rb") as f:
        data = common.decompress(f.read(), comp)
    return [p for _, p in common.read_frames(data)]


def _pb_values(feat, kind):
    """A protobuf Feature's values as a list (int, float32 or bytes); [] for Feature{}."""
    which = feat.WhichOneof("kind")
    if which is None:
        return []
    vals = list(getattr(feat, which).value)
    if which == "float_list":
        return [np.float32(v) for v in vals]
    return vals


def expected_rows(payloads, man):
    """{feature name: [row per record]}: a row is the flat list of its values, and for a
    variable-length or var_len feature also its length along axis 0 (values or steps)."""
    pb = common.protos()[0]
    out = {f["name"]: [] for f in man["features"]}
    for p in payloads:
        msg = pb.SequenceExample() if man["allow_var_len"] else pb.Example()
        msg.ParseFromString(p)
        for f in man["features"]:
            name = f["name"]
            if f.get("var_len"):
                fl = msg.feature_lists.feature_list
                steps = [_pb_values(s, f) for s in fl[name].feature] if name in fl else []
                out[name].append(([v for s in steps for v in s], len(steps)))
                continue
            feats = msg.context.feature if man["allow_var_len"] else msg.features.feature
            vals = _pb_values(feats[name], f) if name in feats else []
            inner = int(np.prod(f["shape"][1:])) if f["shape"] else 1
            out[name].append((vals, len(vals) // inner if f["shape"][:1] == [-1] else None))
    return out


def infer(path):
    r = ctl("manifest", path)
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout)


def make_spec(tmp, name, path, man):
    mpath = os.path.join(tmp, name + ".manifest.json")
    lpath = os.path.join(tmp, name + ".list")
    with open(mpath, "w") as f:
        json.dump(man, f)
    with open(lpath, "w") as f:
        f.write(path + "\n")
    tensors = {"t%d" % i: f for i, f in enumerate(man["features"])}
    spec = {"type": "independent", "args": {
        "dataset": {"type": "list", "args": {"manifest_file": mpath, "list_file": lpath}},
        "target_batch_size": 7, "drop_remainder": False, "epochs": 1,
        "num_read_buffer_bytes": 65536, "num_prefetch": 2,
        "primary_features": [{"from_name": f["name"], "to_name": t}
                             for t, f in tensors.items()]}}
    return spec, tensors


def _same(got, want, what):
    """Flat value lists: floats bit-for-bit as float32 (NaN equals NaN), bytes exactly."""
    assert len(got) == len(want), "%s: %d values, want %d" % (what, len(got), len(want))
    for k, (g, w) in enumerate(zip(got, want)):
        if isinstance(w, np.float32):
            assert struct.pack("<f", np.float32(g)) == struct.pack("<f", w) or \
                (np.isnan(w) and np.isnan(np.float32(g))), "%s[%d]: %r != %r" % (what, k, g, w)
        else:
            assert g == w, "%s[%d]: %r != %r" % (what, k, g, w)


def check_rows(rows, want, name):
    assert len(rows) == len(want), "%s: %d rows, want %d" % (name, len(rows), len(want))
    for r, ((gv, gn), (wv, wn)) in enumerate(zip(rows, want)):
        _same(gv, wv, "%s row %d" % (name, r))
        if wn is not None:
            assert gn == wn, "%s row %d: length %s, want %s" % (name, r, gn, wn)


def _json_value(v, dtype):
    if dtype == "string":
        return v.encode("latin-1")
    if dtype == "float32":
        return np.float32(float(v)) if not isinstance(v, str) else np.float32(v)
    return v


def rows_of_run(batches, t, f):
    """Per-record (values, length) of tensor t from `sluicectl run --json --values` lines."""
    rows = []
    for b in batches:
        x = b["tensors"][t]
        vals = [_json_value(v, x["dtype"]) for v in x["values"]]
        if x["ragged"]:
            s = x["row_splits"]
            per = len(vals) // s[-1] if s[-1] else 0
            rows += [(vals[s[i] * per:s[i + 1] * per], s[i + 1] - s[i]) for i in range(len(s) - 1)]
        else:
            n = b["rows"]
            per = len(vals) // n if n else 0
            rows += [(vals[i * per:(i + 1) * per], None) for i in range(n)]
    return rows


def rows_of_batch(b, t):
    v = b[t]
    if isinstance(v, sluice.Ragged):
        s = v.row_splits.tolist()
        flat = v.values.to_list() if isinstance(v.values, sluice.Strings) else \
            v.values.reshape(-1).tolist()
        per = len(flat) // s[-1] if s[-1] else 0
        return [(flat[s[i] * per:s[i + 1] * per], s[i + 1] - s[i]) for i in range(len(s) - 1)]
    flat = v.to_list() if isinstance(v, sluice.Strings) else v.reshape(-1).tolist()
    per = len(flat) // b.rows if b.rows else 0
    return [(flat[i * per:(i + 1) * per], None) for i in range(b.rows)]


def _compare(rows, want, f):
    if f["shape"][:1] != [-1] and not f.get("var_len"):
        want = [(v, None) for v, _ in want]
    else:
        rows = [(v, n if n is not None else len(v)) for v, n in rows]
    check_rows(rows, want, f["name"])


@needs_testdata
@pytest.mark.parametrize("name,kind,comp", FILES, ids=[x[0][:60] for x in FILES])
def test_testdata_file_in_process_and_through_sluiced(name, kind, comp, daemon, tmp_path):
    path = os.path.join(TESTDATA, name)
    man = infer(path)
    assert man["allow_var_len"] == (kind == "sequence")
    assert (man["compression"] or "none") == comp
    payloads = _records(path, comp)
    want = expected_rows(payloads, man)
    spec, tensors = make_spec(str(tmp_path), "ds", path, man)
    if not tensors:
        pytest.skip("no feature has a kind in %s" % name)
    # in process
    sp = tmp_path / "spec.json"
    sp.write_text(json.dumps(spec))
    r = ctl("run", sp, "--json", "--values", ",".join(tensors))
    assert r.returncode == 0, r.stderr
    batches = [json.loads(x) for x in r.stdout.splitlines() if x.strip()]
    assert sum(b["rows"] for b in batches) == len(payloads)
    for t, f in tensors.items():
        _compare(rows_of_run(batches, t, f), want[f["name"]], f)
    # through sluiced into Python
    got = {t: [] for t in tensors}
    n = 0
    with sluice.attach(spec=spec, socket=daemon.sock) as reader:
        for b in reader:
            with b:
                n += b.rows
                for t in tensors:
                    got[t] += rows_of_batch(b, t)
    assert n == len(payloads)
    for t, f in tensors.items():
        _compare(got[t], want[f["name"]], f)
