# SPDX-License-Identifier: Apache-2.0
"""TensorFlow's reading of TFRecord files, for the oracle tests (run in the peers' venv:
tools/peers/venv.sh; never imported by the project itself).

    python tf_oracle.py CONFIG.json

CONFIG: {"runs": [RUN, ...]} (or one RUN), so that one TensorFlow process (seconds to start)
answers a whole test module. RUN: {"files": [[path, "none"|"gzip"|"zlib"], ...], "batch": B,
"drop_remainder": bool, "sequence": bool, "features": [FEATURE], "padding": null or
{to: {"shape": [..] or null, "value": v}}, "out": DIR}.

FEATURE: {"name", "to", "shape", "deserialize_type", "var_len"} and, as a manifest and a spec
say them: "dtype" (the manifest's dtype: tf.cast after parsing, tf.io.decode_raw for `raw`
with "deserialize_args" "endian" and "len"), "default" (FixedLenFeature's default_value,
flat), "slice" (a processing step's "[...]", applied to each record's tensor as
TensorFlow's basic indexing), "image" ({"channels", "dct_method"}: a decode_image step,
tf.io.decode_jpeg / tf.io.decode_png).

The pipeline is the tf.data one a sluice spec describes with one reader and no shuffle:
TFRecordDataset over the files in order → batch(B) → tf.io.parse_example (FixedLenFeature for
a fixed shape, RaggedFeature for [-1] / [-1, k], a UniformRowLength partition) or
tf.io.parse_sequence_example, then the casts; with per-record steps: each record's tensors
through them, then stacked (dense when of one shape, else ragged over the first axis); with
padding: → unbatch → map(the steps) → padded_batch(B, padded_shapes, padding_values). All but
padding run eagerly: tracing a tf.function per run would cost a second each. Writes
DIR/batch_NNNNN.npz per batch: for tensor T, T (the flat values; strings as T.bytes +
T.offsets) and, when ragged, T.splits (the outer row splits); T.shape, the dense shape; for
an image, T.png (per row: a PNG, not a JPEG).
Prints "DIR N" per run.
"""

import json
import os
import sys

import numpy as np
import tensorflow as tf

KINDS = {"int": tf.int64, "float": tf.float32, "string": tf.string, "raw": tf.string}
COMP = {"none": "", "gzip": "GZIP", "zlib": "ZLIB"}


def feature_spec(f):
    dt = KINDS[f["deserialize_type"]]
    shape = f["shape"]
    if f["deserialize_type"] == "raw":  # the byte strings, decoded after parsing
        n = (f.get("deserialize_args") or {}).get("len") or 1
        if f.get("var_len"):
            return tf.io.RaggedFeature(dtype=dt, row_splits_dtype=tf.int64)
        return tf.io.FixedLenFeature([n] if n > 1 else [], dt)
    # a feature list's steps (SequenceExample, var_len) or an Example's [-1, ...] rows: ragged
    # over the outer axis, each step or row prod(rest) values (the row splits count them)
    inner = shape if f.get("var_len") else shape[1:] if shape[:1] == [-1] else None
    if inner is not None:
        k = int(np.prod(inner)) if inner else 1
        parts = [tf.io.RaggedFeature.UniformRowLength(k)] if k > 1 else []
        return tf.io.RaggedFeature(dtype=dt, partitions=parts, row_splits_dtype=tf.int64)
    if "default" in f:
        d = np.array(f["default"], dtype=dt.as_numpy_dtype if dt != tf.string else object)
        d = np.broadcast_to(d, shape) if d.size == 1 else d.reshape(shape)
        return tf.io.FixedLenFeature(shape, dt, default_value=d)
    return tf.io.FixedLenFeature(shape, dt)


def decode_raw(x, f):
    """tf.io.decode_raw of a batch's byte strings ([B], [B, len] or ragged steps), reshaped to
    [B] + [len] + shape as nnetmaker does."""
    dt = tf.as_dtype(f["dtype"])
    # DecodeRaw has no uint32 / uint64: their bits as int32 / int64, bitcast
    dt, cast = {tf.uint32: (tf.int32, dt), tf.uint64: (tf.int64, dt)}.get(dt, (dt, None))
    little = f["deserialize_args"]["endian"] == "little"
    if isinstance(x, tf.RaggedTensor):  # var_len: one string per step
        v = tf.io.decode_raw(x.flat_values, dt, little_endian=little)
        v = tf.reshape(v if cast is None else tf.bitcast(v, cast), [-1] + f["shape"])
        return tf.RaggedTensor.from_row_splits(v, x.row_splits)
    v = tf.io.decode_raw(x, dt, little_endian=little)
    v = v if cast is None else tf.bitcast(v, cast)
    return tf.reshape(v, tf.concat([tf.shape(x), f["shape"]], 0))


def convert(batch, features):
    out = {}
    for f in features:
        x = batch[f["name"]]
        want = tf.as_dtype(f.get("dtype") or KINDS[f["deserialize_type"]])
        if f["deserialize_type"] == "raw":
            x = decode_raw(x, f)
        else:
            if isinstance(x, tf.RaggedTensor) and x.ragged_rank > 1:
                # a feature list's [B, steps, values]: each step prod(shape) values
                x = tf.RaggedTensor.from_row_splits(
                    tf.reshape(x.values.flat_values, [-1] + f["shape"]), x.row_splits)
            if x.dtype != want:
                x = tf.cast(x, want)
        out[f["to"]] = x
    return out


def as_slice(text):
    """A slice step's "[a, b:c:d]" as Python's index tuple (the test wrote it; numpy's
    grammar is the one sluice parses)."""
    return eval("np.s_" + text, {"np": np})  # noqa: S307 (the test's own text)


def decode_image(x, img):
    ch = img.get("channels", 0)
    dct = "INTEGER_FAST" if img.get("dct_method") == "fast" else "INTEGER_ACCURATE"
    return tf.cond(tf.io.is_jpeg(x),
                   lambda: tf.io.decode_jpeg(x, channels=ch, dct_method=dct),
                   lambda: tf.io.decode_png(x, channels=ch))


def per_record(features):
    def f(el):
        out = dict(el)
        for ft in features:
            x = out[ft["to"]]
            if isinstance(x, tf.RaggedTensor):
                x = x.to_tensor()
            if "slice" in ft:  # a spec slices a list of images to one before decoding
                x = x[as_slice(ft["slice"])]
            if "image" in ft:  # T.png: which rows were PNGs (not JPEGs)
                out[ft["to"] + ".png"] = tf.logical_not(tf.io.is_jpeg(x))
                x = decode_image(x, ft["image"])
            out[ft["to"]] = x
        return out
    return f


def flat(name, x, out):
    a = x.numpy().reshape(-1)
    if a.dtype == object:
        out[name + ".bytes"] = np.frombuffer(b"".join(a), np.uint8)
        out[name + ".offsets"] = np.cumsum([0] + [len(s) for s in a]).astype(np.int64)
    else:
        out[name] = a


def parser(run):
    feats = run["features"]
    if run.get("sequence"):  # context features and feature lists
        ctx = {f["name"]: feature_spec(f) for f in feats if not f.get("var_len")}
        seq = {f["name"]: feature_spec(f) for f in feats if f.get("var_len")}

        def parse(x):
            c, s, _ = tf.io.parse_sequence_example(x, context_features=ctx,
                                                   sequence_features=seq)
            return convert(dict(c, **s), feats)
    else:
        spec = {f["name"]: feature_spec(f) for f in feats}

        def parse(x):
            return convert(tf.io.parse_example(x, spec), feats)
    return parse


def batched(rows):
    """ragged_batch's result for a batch's per-record tensors, without a tf.data program: one
    shape, dense; else ragged over the first axis."""
    if len({tuple(r.shape) for r in rows}) == 1:
        return tf.stack(rows)
    assert len({tuple(r.shape[1:]) for r in rows}) == 1, "ragged below the first axis"
    return tf.RaggedTensor.from_row_lengths(tf.concat(rows, 0), [r.shape[0] for r in rows])


def dataset(run):
    """The batches of a run: eager (no tf.function to trace: a few hundred runs stay fast)
    unless it pads, which is padded_batch's."""
    comps = {c for _, c in run["files"]}
    assert len(comps) == 1, "one compression per run"
    feats = run["features"]
    ds = tf.data.TFRecordDataset([p for p, _ in run["files"]], COMP[comps.pop()])
    ds = ds.batch(run["batch"], drop_remainder=run["drop_remainder"])
    pad = run.get("padding")
    if run.get("loader"):
        return windows(run)
    if pad is not None:
        return padded(ds.map(parser(run)), run)
    steps = per_record(feats) if any("slice" in f or "image" in f for f in feats) else None
    return (eager(parser(run)(x), steps) for x in ds)


def eager(b, steps):
    if steps is None:
        return b
    n = int(tf.shape(next(iter(b.values())))[0])
    rows = [steps({k: v[i] for k, v in b.items()}) for i in range(n)]
    return {k: batched([r[k] for r in rows]) for k in rows[0]}


def windows(run):
    """The sequence loaders with a fixed window (min_window == max_window: no random draw), as
    tf.data programs over one file of SequenceExamples whose features are feature lists.
    continuous: the records' steps in order → window(L, shift=stride) → batch(B), dense.
    discrete: batch(k) of whole records → their steps concatenated → ragged_batch(B)."""
    lo = run["loader"]
    (path, comp), = run["files"]
    feats = run["features"]
    ds = tf.data.TFRecordDataset([path], COMP[comp])
    L = lo["window"]
    if lo["type"] == "continuous":
        seq = {f["name"]: tf.io.FixedLenSequenceFeature(f["shape"], KINDS[f["deserialize_type"]])
               for f in feats}

        def parse(x):
            _, s = tf.io.parse_single_sequence_example(x, sequence_features=seq)
            return convert(s, feats)
        ds = ds.map(parse).flat_map(tf.data.Dataset.from_tensor_slices)
        ds = ds.window(L, shift=lo.get("stride") or L, drop_remainder=True)
        ds = ds.flat_map(lambda w: tf.data.Dataset.zip({k: v.batch(L) for k, v in w.items()}))
        return ds.batch(run["batch"], drop_remainder=run["drop_remainder"])
    parse = parser(run)
    ds = ds.batch(L, drop_remainder=True).map(
        lambda x: {k: v.values for k, v in parse(x).items()})
    return ds.ragged_batch(run["batch"], drop_remainder=run["drop_remainder"],
                           row_splits_dtype=tf.int64)


def padded(ds, run):
    """unbatch → the per-record steps → padded_batch(padded_shapes, padding_values)."""
    pad = run["padding"]
    ds = ds.unbatch().map(per_record(run["features"]))
    shapes = {k: [-1 if d is None else d for d in v.shape] for k, v in ds.element_spec.items()}
    values = {}
    for k, v in ds.element_spec.items():
        p = pad.get(k) or {}
        if p.get("shape") is not None:
            shapes[k] = p["shape"]
        val = p.get("value")
        if v.dtype == tf.bool:
            values[k] = tf.constant(False)
        elif v.dtype == tf.string:
            values[k] = tf.constant((val or "").encode("latin-1"))
        else:
            values[k] = tf.constant(val or 0, dtype=tf.float64 if v.dtype.is_floating
                                    else tf.int64)
            values[k] = tf.cast(values[k], v.dtype)
    return ds.padded_batch(run["batch"], padded_shapes=shapes, padding_values=values,
                           drop_remainder=run["drop_remainder"])


def write(run):
    os.makedirs(run["out"], exist_ok=True)
    n = 0
    for b in dataset(run):
        out = {}
        for f in run["features"]:
            x = b[f["to"]]
            if isinstance(x, tf.RaggedTensor):
                flat(f["to"], x.flat_values, out)
                out[f["to"] + ".splits"] = x.row_splits.numpy().astype(np.int64)
            else:
                flat(f["to"], x, out)
                out[f["to"] + ".shape"] = np.array(x.shape, np.int64)
            if f["to"] + ".png" in b:
                out[f["to"] + ".png"] = b[f["to"] + ".png"].numpy()
        np.savez(os.path.join(run["out"], "batch_%05d.npz" % n), **out)
        n += 1
    return n


def main():
    cfg = json.load(open(sys.argv[1]))
    for run in cfg.get("runs", [cfg]):
        try:
            n = write(run)
        except Exception as e:  # noqa: BLE001 (one run's failure is that case's, not all's)
            # TensorFlow refuses the data (the test says whether it must); a message that
            # quotes a record's bytes cannot even become a Python string
            os.makedirs(run["out"], exist_ok=True)
            with open(os.path.join(run["out"], "error"), "w") as f:
                f.write(getattr(e, "message", None) or str(e))
            n = -1
        print(run["out"], n, flush=True)


if __name__ == "__main__":
    main()
