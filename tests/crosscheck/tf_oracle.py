# SPDX-License-Identifier: Apache-2.0
"""TensorFlow's reading of TFRecord files, for the oracle tests (run in the peers' venv:
tools/peers/venv.sh; never imported by the project itself).

    python tf_oracle.py CONFIG.json

CONFIG: {"files": [[path, "none"|"gzip"|"zlib"], ...], "batch": B, "drop_remainder": bool,
"features": [{"name", "to", "shape", "deserialize_type"}], "out": DIR}. The pipeline is the
tf.data one a sluice spec describes with one reader and no shuffle: TFRecordDataset over the
files in order → batch(B) → tf.io.parse_example with FixedLenFeature for a fixed shape and
RaggedFeature for [-1] / [-1, k] (a UniformRowLength partition). Writes DIR/batch_NNNNN.npz
per batch: for tensor T, T (the flat values; strings as T.bytes + T.offsets) and, when
ragged, T.splits (the outer row splits).
"""

import json
import os
import sys

import numpy as np
import tensorflow as tf

KINDS = {"int": tf.int64, "float": tf.float32, "string": tf.string}
COMP = {"none": "", "gzip": "GZIP", "zlib": "ZLIB"}


def feature_spec(f):
    dt = KINDS[f["deserialize_type"]]
    shape = f["shape"]
    # a feature list's steps (SequenceExample, var_len) or an Example's [-1, ...] rows: ragged
    # over the outer axis, each step or row prod(rest) values (the row splits count them)
    inner = shape if f.get("var_len") else shape[1:] if shape[:1] == [-1] else None
    if inner is not None:
        k = int(np.prod(inner)) if inner else 1
        parts = [tf.io.RaggedFeature.UniformRowLength(k)] if k > 1 else []
        return tf.io.RaggedFeature(dtype=dt, partitions=parts, row_splits_dtype=tf.int64)
    return tf.io.FixedLenFeature(shape, dt)


def flat(name, x, out):
    a = x.numpy().reshape(-1)
    if a.dtype == object:
        out[name + ".bytes"] = np.frombuffer(b"".join(a), np.uint8)
        out[name + ".offsets"] = np.cumsum([0] + [len(s) for s in a]).astype(np.int64)
    else:
        out[name] = a


def main():
    cfg = json.load(open(sys.argv[1]))
    comps = {c for _, c in cfg["files"]}
    assert len(comps) == 1, "one compression per run"
    ds = tf.data.TFRecordDataset([p for p, _ in cfg["files"]], COMP[comps.pop()])
    ds = ds.batch(cfg["batch"], drop_remainder=cfg["drop_remainder"])
    if cfg.get("sequence"):  # context features and feature lists
        ctx = {f["name"]: feature_spec(f) for f in cfg["features"] if not f.get("var_len")}
        seq = {f["name"]: feature_spec(f) for f in cfg["features"] if f.get("var_len")}

        def parse(x):
            c, s, _ = tf.io.parse_sequence_example(x, context_features=ctx,
                                                   sequence_features=seq)
            return dict(c, **s)
        ds = ds.map(parse)
    else:
        spec = {f["name"]: feature_spec(f) for f in cfg["features"]}
        ds = ds.map(lambda x: tf.io.parse_example(x, spec))
    os.makedirs(cfg["out"], exist_ok=True)
    n = 0
    for b in ds:
        out = {}
        for f in cfg["features"]:
            x = b[f["name"]]
            if isinstance(x, tf.RaggedTensor):
                flat(f["to"], x.flat_values, out)
                out[f["to"] + ".splits"] = x.row_splits.numpy().astype(np.int64)
            else:
                flat(f["to"], x, out)
        np.savez(os.path.join(cfg["out"], "batch_%05d.npz" % n), **out)
        n += 1
    print(n)


if __name__ == "__main__":
    main()
