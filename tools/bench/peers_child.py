# SPDX-License-Identifier: Apache-2.0
"""One epoch of one pipeline through one of sluice's peers, for tools/bench/peers.py:

    PYTHON tools/bench/peers_child.py CONFIG.json

CONFIG: {"system": "tfdata" | "dali" | "tfrecord", "pipeline": "ctr" | "image" | "seq" |
"imagenet", "files": [...], "index": [...] (tfrecord2idx's, one per file), "batch": B,
"shuffle": S (buffer elements), "threads": N, "seed": K, "features": [...] (image: the tensors
to deliver)}. tf.data and DALI run in the peers' venv (tools/peers/venv.sh); the tfrecord reader
under Debian's torch (/usr/bin/python3, the package from the venv's site-packages on
PYTHONPATH). Speaks tools/bench/pyharness.py's protocol: `ready` after the imports, the epoch
timed from the parent's line, one JSON report with records, wall and CPU seconds (every thread;
the DataLoader's workers once joined) and per tensor [rows, elements].

Each side takes every tensor of every batch as numpy: tf.data `.numpy()` (ragged: flat values
and row splits), DALI `.as_array()` (variable-sized samples one by one), the DataLoader's batches
collated into numpy arrays (ragged: concatenated values and row splits).
"""

import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from pyharness import MEAN, STD, child_report, child_wait_go, tally  # noqa: E402

CTR_DENSE = ["dense%d" % i for i in range(13)]
CTR_SPARSE = ["sparse%d" % i for i in range(26)]
WIDTH = {"bbox": 4, "tokens": 4, "weights": 1}  # the values in a feature list's step


# ---------------------------------------------------------------- tf.data
def tfdata(cfg):
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    import tensorflow as tf
    AUTO = tf.data.AUTOTUNE
    p, B = cfg["pipeline"], cfg["batch"]
    t0, c0 = child_wait_go()
    tf.random.set_seed(cfg["seed"])
    files = tf.data.Dataset.from_tensor_slices(cfg["files"]).shuffle(len(cfg["files"]))
    ds = files.interleave(tf.data.TFRecordDataset, cycle_length=len(cfg["files"]),
                          num_parallel_calls=AUTO, deterministic=False)
    ds = ds.shuffle(cfg["shuffle"])

    def ragged(dt, k):
        parts = [tf.io.RaggedFeature.UniformRowLength(k)] if k > 1 else []
        return tf.io.RaggedFeature(dtype=dt, partitions=parts, row_splits_dtype=tf.int64)

    if p == "ctr":
        spec = {n: tf.io.FixedLenFeature([1], tf.float32) for n in CTR_DENSE}
        spec.update({n: tf.io.FixedLenFeature([1], tf.int64) for n in CTR_SPARSE + ["label"]})
        ds = ds.batch(B).map(lambda x: tf.io.parse_example(x, spec), num_parallel_calls=AUTO)
    elif p in ("image", "seq"):  # SequenceExamples: context features and feature lists
        if p == "image":
            ctx = {"image": tf.io.FixedLenFeature([1], tf.string),
                   "label": tf.io.FixedLenFeature([1], tf.int64)}
            seq = {"bbox": ragged(tf.float32, 4)}
        else:
            ctx = {"length": tf.io.FixedLenFeature([1], tf.int64),
                   "id": tf.io.FixedLenFeature([1], tf.string)}
            seq = {"tokens": ragged(tf.int64, 4), "weights": ragged(tf.float32, 1)}
        ctx = {k: v for k, v in ctx.items() if k in cfg["features"]}
        seq = {k: v for k, v in seq.items() if k in cfg["features"]}

        def parse(x):
            c, s, _ = tf.io.parse_sequence_example(x, context_features=ctx,
                                                   sequence_features=seq)
            return dict(c, **s)
        ds = ds.batch(B).map(parse, num_parallel_calls=AUTO)
    else:  # imagenet: the ResNet-50 training recipe, decoding only the crop
        spec = {"image/encoded": tf.io.FixedLenFeature([], tf.string),
                "image/class/label": tf.io.FixedLenFeature([], tf.int64)}
        mean = tf.constant(MEAN, tf.float32)
        std = tf.constant(STD, tf.float32)
        whole = tf.constant([0.0, 0.0, 1.0, 1.0], tf.float32, [1, 1, 4])

        def crop_window(shape):
            begin, size, _ = tf.image.sample_distorted_bounding_box(
                shape, bounding_boxes=whole, min_object_covered=0.1,
                aspect_ratio_range=(3 / 4, 4 / 3), area_range=(0.08, 1.0), max_attempts=10,
                use_image_if_no_bounding_boxes=True)
            return tf.stack([begin[0], begin[1], size[0], size[1]])

        def decode_crop(data):
            # decode_and_crop_jpeg for JPEGs (the fast IDCT, tf.io's default); the tenth of the
            # generated images that are PNG are decoded whole and cropped
            def jpeg():
                return tf.io.decode_and_crop_jpeg(data, crop_window(tf.io.extract_jpeg_shape(data)),
                                                  channels=3)

            def other():
                img = tf.io.decode_image(data, channels=3, expand_animations=False)
                w = crop_window(tf.shape(img))
                return tf.image.crop_to_bounding_box(img, w[0], w[1], w[2], w[3])
            return tf.cond(tf.io.is_jpeg(data), jpeg, other)

        def one(x):
            r = tf.io.parse_single_example(x, spec)
            img = decode_crop(r["image/encoded"])
            img = tf.image.resize(img, [224, 224])  # bilinear, float32
            img = tf.image.random_flip_left_right(img)
            return {"image": (img - mean) / std, "label": r["image/class/label"]}
        ds = ds.map(one, num_parallel_calls=AUTO).batch(B)
    ds = ds.prefetch(AUTO)
    records, tensors = 0, {}
    for b in ds:
        rows = 0
        for k, v in b.items():
            if isinstance(v, tf.RaggedTensor):
                vals, splits = v.flat_values.numpy(), v.row_splits.numpy()
                rows = len(splits) - 1
                tally(tensors, k, rows, vals.size)
            else:
                a = v.numpy()
                rows = a.shape[0]
                tally(tensors, k, rows, a.size)
        records += rows
    child_report(t0, c0, records, tensors)


# ---------------------------------------------------------------- DALI
def dali(cfg):
    from nvidia.dali import fn, pipeline_def, types
    import nvidia.dali.tfrecord as tfrec
    p, B = cfg["pipeline"], cfg["batch"]
    t0, c0 = child_wait_go()
    if p == "ctr":
        feats = {n: tfrec.FixedLenFeature([1], tfrec.float32, 0.0) for n in CTR_DENSE}
        feats.update({n: tfrec.FixedLenFeature([1], tfrec.int64, 0)
                      for n in CTR_SPARSE + ["label"]})
    elif p == "image":  # a SequenceExample's context read as an Example's features
        feats = {"image": tfrec.FixedLenFeature((), tfrec.string, ""),
                 "label": tfrec.FixedLenFeature([1], tfrec.int64, -1)}
    elif p == "imagenet":
        feats = {"image/encoded": tfrec.FixedLenFeature((), tfrec.string, ""),
                 "image/class/label": tfrec.FixedLenFeature([], tfrec.int64, -1)}
    else:
        raise SystemExit("dali: no SequenceExample feature lists (pipeline %s)" % p)
    names = sorted(feats)

    @pipeline_def(batch_size=B, num_threads=cfg["threads"], device_id=None, seed=cfg["seed"],
                  prefetch_queue_depth=2)
    def pipe():
        r = fn.readers.tfrecord(path=cfg["files"], index_path=cfg["index"], features=feats,
                                random_shuffle=True, initial_fill=cfg["shuffle"],
                                pad_last_batch=True, name="reader")
        if p != "imagenet":
            return tuple(r[n] for n in names)
        img = fn.decoders.image_random_crop(r["image/encoded"], device="cpu",
                                            output_type=types.RGB, random_area=[0.08, 1.0],
                                            random_aspect_ratio=[3 / 4, 4 / 3], num_attempts=10)
        img = fn.resize(img, resize_x=224, resize_y=224)
        img = fn.crop_mirror_normalize(img, dtype=types.FLOAT, output_layout="CHW",
                                       mean=MEAN, std=STD, mirror=fn.random.coin_flip())
        return img, r["image/class/label"]
    pl = pipe()
    pl.build()
    out_names = names if p != "imagenet" else ["image", "label"]
    epoch = pl.epoch_size("reader")
    records, tensors = 0, {}
    while records < epoch:
        outs = pl.run()
        k = min(B, epoch - records)  # the last batch is padded with repeats of its last record
        for n, tl in zip(out_names, outs):
            if tl.is_dense_tensor():
                a = tl.as_array()[:k]
                tally(tensors, n, k, a.size)
            else:  # variable-sized samples (strings): one array each
                arrs = [tl.at(i) for i in range(k)]
                tally(tensors, n, k, len(arrs))
        records += k
    child_report(t0, c0, records, tensors)


# ---------------------------------------------------------------- tfrecord + DataLoader
def tfrecord_loader(cfg):
    import numpy as np
    import torch
    from tfrecord.torch.dataset import MultiTFRecordDataset
    p, B, W = cfg["pipeline"], cfg["batch"], cfg["threads"]
    image = None
    if p == "imagenet":
        from pyharness import torchvision_recipe
        image = torchvision_recipe("train")
    t0, c0 = child_wait_go()
    files = cfg["files"]
    splits = {os.path.basename(f)[:-len(".tfrecords")]: 1.0 for f in files}
    data_pat = os.path.join(os.path.dirname(files[0]), "{}.tfrecords")
    index_pat = os.path.join(os.path.dirname(cfg["index"][0]), "{}.idx")
    seq = None
    if p == "ctr":
        desc = {n: "float" for n in CTR_DENSE}
        desc.update({n: "int" for n in CTR_SPARSE + ["label"]})
    elif p == "image":
        desc = {"image": "byte", "label": "int"}
        seq = {"bbox": "float"} if "bbox" in cfg["features"] else None
    elif p == "seq":
        desc, seq = {"length": "int", "id": "byte"}, {"tokens": "int", "weights": "float"}
    else:
        desc = {"image/encoded": "byte", "image/class/label": "int"}

    def transform(x):
        if seq is not None:  # (context, feature lists): each list's steps as one array
            c, s = x
            for k, steps in s.items():
                c[k] = np.stack(steps) if steps else np.zeros((0, WIDTH[k]), np.float32)
            x = c
        if image is not None:
            return {"image": image(x["image/encoded"]),
                    "label": x["image/class/label"]}
        return x

    ragged = set(WIDTH)
    strings = {"image", "id"} if p != "imagenet" else set()

    def collate(rows):  # to numpy: fixed shapes stacked, ragged as values + row splits
        out = {}
        for k in rows[0]:
            vs = [r[k] for r in rows]
            if k in ragged:
                splits = np.zeros(len(vs) + 1, np.int64)
                np.cumsum([len(v) for v in vs], out=splits[1:])
                out[k] = (np.concatenate(vs), splits)
            elif k in strings:
                out[k] = vs  # bytes
            elif isinstance(vs[0], torch.Tensor):
                out[k] = torch.stack(vs).numpy()
            else:
                out[k] = np.stack(vs)
        return out

    ds = MultiTFRecordDataset(data_pat, index_pat, splits, description=desc,
                              sequence_description=seq,
                              shuffle_queue_size=max(1, cfg["shuffle"] // W),
                              transform=transform, infinite=False)
    dl = torch.utils.data.DataLoader(ds, batch_size=B, num_workers=W, collate_fn=collate)
    records, tensors = 0, {}
    for b in dl:
        rows = 0
        for k, v in b.items():
            if isinstance(v, tuple):
                rows = len(v[1]) - 1
                tally(tensors, k, rows, v[0].size)
            elif isinstance(v, list):
                rows = len(v)
                tally(tensors, k, rows, rows)
            else:
                rows = v.shape[0]
                tally(tensors, k, rows, v.size)
        records += rows
    del dl  # its workers are joined: their CPU time is in RUSAGE_CHILDREN from here
    child_report(t0, c0, records, tensors)


def main():
    with open(sys.argv[1]) as f:
        cfg = json.load(f)
    {"tfdata": tfdata, "dali": dali, "tfrecord": tfrecord_loader}[cfg["system"]](cfg)


if __name__ == "__main__":
    sys.exit(main())
