# SPDX-License-Identifier: Apache-2.0
"""TensorFlow as the oracle (issue 17): the same files through a sluice spec (`sluicectl run`)
and through tf.data + tf.io.parse_example (tests/crosscheck/tf_oracle.py, run by the peers'
venv python in a process of its own, handing its tensors over as .npz), batch by batch: the
same dtype, shape, values (floats bit for bit) and ragged row splits.

Datasets: `sluicectl gen ctr` and `gen image` (fixed shapes and a ragged [-1, 4] box list),
and every Example file of ../shared/testdata with the manifest `sluicectl manifest` infers
(FixedLenFeature where the count is fixed, RaggedFeature where it varies or is missing).

Needs SLUICE_TF_PYTHON, the venv's python that tools/test.sh makes with
`tools/peers/venv.sh --oracle`; skipped without it.
"""

import json
import os
import subprocess
import sys

import numpy as np
import pytest

from conftest import SRC, ctl

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from test_testdata import FILES, TESTDATA, infer  # noqa: E402

TF = os.environ.get("SLUICE_TF_PYTHON", "")
pytestmark = pytest.mark.skipif(not (TF and os.access(TF, os.X_OK)),
                                reason="no TensorFlow venv (SLUICE_TF_PYTHON; "
                                "tools/peers/venv.sh --oracle)")
BATCH = 7
NP = {"int64": np.int64, "float32": np.float32}


def spec_and_config(tmp, path, comp, man):
    mpath = os.path.join(tmp, "manifest.json")
    lpath = os.path.join(tmp, "files.list")
    with open(mpath, "w") as f:
        json.dump(man, f)
    with open(lpath, "w") as f:
        f.write(path + "\n")
    feats = [dict(f, to="t%d" % i) for i, f in enumerate(man["features"])
             if f["deserialize_type"] != "raw"]
    spec = {"type": "independent", "args": {
        "dataset": {"type": "list", "args": {"manifest_file": mpath, "list_file": lpath}},
        "target_batch_size": BATCH, "drop_remainder": False, "epochs": 1,
        "num_read_buffer_bytes": 65536, "num_prefetch": 2, "num_parallel_reads": 1,
        "primary_features": [{"from_name": f["name"], "to_name": f["to"]} for f in feats]}}
    cfg = {"files": [[path, comp]], "batch": BATCH, "drop_remainder": False,
           "sequence": bool(man.get("allow_var_len")),
           "features": [dict({k: f[k] for k in ("name", "to", "shape", "deserialize_type")},
                             var_len=bool(f.get("var_len"))) for f in feats],
           "out": os.path.join(tmp, "tf")}
    return spec, cfg, feats


def run_both(tmp, path, comp, man):
    spec, cfg, feats = spec_and_config(tmp, path, comp, man)
    sp = os.path.join(tmp, "spec.json")
    with open(sp, "w") as f:
        json.dump(spec, f)
    names = ",".join(f["to"] for f in feats)
    r = ctl("run", sp, "--json", "--values", names)
    assert r.returncode == 0, r.stderr
    ours = [json.loads(x) for x in r.stdout.splitlines() if x.strip()]
    cp = os.path.join(tmp, "tf.json")
    with open(cp, "w") as f:
        json.dump(cfg, f)
    t = subprocess.run([TF, os.path.join(SRC, "tests", "crosscheck", "tf_oracle.py"), cp],
                       capture_output=True, text=True, timeout=600,
                       env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2"))
    assert t.returncode == 0, t.stderr[-3000:]
    theirs = [dict(np.load(os.path.join(cfg["out"], "batch_%05d.npz" % i)))
              for i in range(int(t.stdout.split()[-1]))]
    return ours, theirs, feats


def compare(ours, theirs, feats, what):
    assert len(ours) == len(theirs), "%s: %d batches, TensorFlow %d" % (what, len(ours),
                                                                         len(theirs))
    for k, (o, t) in enumerate(zip(ours, theirs)):
        for f in feats:
            name, x = f["to"], o["tensors"][f["to"]]
            where = "%s batch %d feature %s" % (what, k, f["name"])
            assert x["dtype"] == f["dtype"], where
            if f["dtype"] == "string":
                want = t[name + ".bytes"].tobytes()
                offs = t[name + ".offsets"]
                want = [want[offs[i]:offs[i + 1]] for i in range(len(offs) - 1)]
                got = [v.encode("latin-1") for v in x["values"]]
                assert got == want, where
            else:
                got = np.array(x["values"], dtype=NP[f["dtype"]])
                want = t[name]
                assert got.shape == want.shape, "%s: %s values, TensorFlow %s" % (
                    where, got.shape, want.shape)
                assert got.tobytes() == want.tobytes(), "%s: values differ" % where
            ragged = name + ".splits" in t
            assert bool(x["ragged"]) == ragged, where
            if ragged:
                assert x["row_splits"] == t[name + ".splits"].tolist(), where
            else:
                rows = o["rows"]
                assert x["shape"] == [rows] + list(f["shape"]), where


@pytest.mark.parametrize("kind", ["ctr", "image"])
def test_generated_against_tensorflow(kind, tmp_path):
    data = str(tmp_path / kind)
    r = ctl("gen", kind, data, "--files", 1, "--records", 300 if kind == "ctr" else 40,
            "--seed", 7)
    assert r.returncode == 0, r.stderr
    files = sorted(f for f in os.listdir(data) if f.endswith(".tfrecords"))
    with open(os.path.join(data, "__manifest__.json")) as f:
        man = json.load(f)
    comp = man.get("compression") or "none"
    ours, theirs, feats = run_both(str(tmp_path), os.path.join(data, files[0]),
                                   comp.lower(), man)
    compare(ours, theirs, feats, kind)


EXAMPLES = [x for x in FILES if x[1] == "example"]


@pytest.mark.skipif(not EXAMPLES, reason="no ../shared/testdata")
@pytest.mark.parametrize("name,kind,comp", EXAMPLES, ids=[x[0][:60] for x in EXAMPLES])
def test_testdata_against_tensorflow(name, kind, comp, tmp_path):
    path = os.path.join(TESTDATA, name)
    man = infer(path)
    ours, theirs, feats = run_both(str(tmp_path), path, comp, man)
    compare(ours, theirs, feats, name)
