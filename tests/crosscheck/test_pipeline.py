# SPDX-License-Identifier: Apache-2.0
# sluicectl run against the reference model (plref.py): every batch, tensor, digest and value.
"""Datasets are written here with google.protobuf and common.py's TFRecord writer; for each spec,
`sluicectl run SPEC --json --values ...` is compared batch by batch with plref.batches(): seq,
epoch, rows, end_epoch, tensor names and order, dtype, shape, ragged, digest, values, row_splits.
Also: the model's own invariants, determinism across parse threads, the record multiset of
shuffled epochs, checkpoints (--state-out / --state-in), on_corrupt.

Environment: SLUICECTL (the binary). `--model-only` runs the model's self-checks without it.
Output: TAP (common.check); a failing case fails the script, and none is ever a skip.
"""

import json
import os
import shutil
import struct
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import common  # noqa: E402

try:
    import numpy as np
except ImportError:
    common.skip("[deps] numpy is not installed (python3-numpy)")

SLUICECTL = os.environ.get("SLUICECTL", "")
MODEL_ONLY = "--model-only" in sys.argv
# `--cache-memory N` (meson's test_pipeline_cached): every run with the shared record cache, whose
# epochs after the first read the files it holds from memory; the model is the same
CACHE = os.environ.get("SLUICE_TEST_CACHE_MEMORY", "")
# (--cache-uncompressed, the default, said: these datasets are mostly uncompressed, and every case
# must go through it)
RUN_EXTRA = ["--cache-memory", CACHE, "--cache-uncompressed"] if CACHE else []

check = common.check  # a TAP case (common.finish counts the failures)


# ---- datasets ----------------------------------------------------------------------------

MAIN_FILES = [("a.tfrecords", 17), ("b.tfrecords", 5), ("c.tfrecords", 0), ("d.tfrecords", 11),
              ("f.TFRecords", 3), ("sub/e.tfrecords", 8)]
# shards named as real ones are (dataset_open_dir's default rule finds them by their framing)
NAMED_FILES = [("a.tfrecord", 6), ("b-00000-of-00002", 3), ("b-00001-of-00002", 0),
               ("sub/c.data", 4), ("d.tfrecords", 2)]
SEQ_FILES = [("s0.tfrecords", 6), ("s1.tfrecords", 4), ("s2.tfrecords", 9), ("s3.tfrecords", 0)]

RAW = {"endian": "little"}
MAIN_FEATURES = [
    {"name": "id", "dtype": "int64", "shape": [], "deserialize_type": "int"},
    {"name": "i64", "dtype": "int64", "shape": [3], "deserialize_type": "int"},
    {"name": "i32", "dtype": "int32", "shape": [2, 2], "deserialize_type": "int"},
    {"name": "u16", "dtype": "uint16", "shape": [2], "deserialize_type": "int"},
    {"name": "flag", "dtype": "bool", "shape": [], "deserialize_type": "int"},
    {"name": "f32", "dtype": "float32", "shape": [2, 3], "deserialize_type": "float"},
    {"name": "f64", "dtype": "float64", "shape": [1], "deserialize_type": "float"},
    {"name": "name", "dtype": "string", "shape": [], "deserialize_type": "string"},
    {"name": "tags", "dtype": "string", "shape": [2], "deserialize_type": "string"},
    {"name": "rawle", "dtype": "int16", "shape": [3], "deserialize_type": "raw",
     "deserialize_args": {"endian": "little", "len": 2}},
    {"name": "rawbe", "dtype": "float32", "shape": [2], "deserialize_type": "raw",
     "deserialize_args": {"endian": "big"}},
    {"name": "rawbe64", "dtype": "int64", "shape": [], "deserialize_type": "raw",
     "deserialize_args": {"endian": "big"}},
    {"name": "rawinf", "dtype": "uint16", "shape": [2, -1], "deserialize_type": "raw",
     "deserialize_args": RAW},
    {"name": "rawbool", "dtype": "bool", "shape": [4], "deserialize_type": "raw",
     "deserialize_args": RAW},
    {"name": "rawf16", "dtype": "float16", "shape": [2], "deserialize_type": "raw",
     "deserialize_args": {"endian": "big"}},
    {"name": "rawu8", "dtype": "uint8", "shape": [2, 3], "deserialize_type": "raw",
     "deserialize_args": RAW},
]
MAIN_NAMES = [f["name"] for f in MAIN_FEATURES]

CAST_INTS = {"ci_i8": "int8", "ci_u8": "uint8", "ci_f16": "float16", "ci_bool": "bool",
             "ci_u64": "uint64", "ci_f32": "float32"}
CAST_FLOATS = {"cf_i32": "int32", "cf_f16": "float16", "cf_f64": "float64", "cf_bool": "bool",
               "cf_u8": "uint8", "cf_i64": "int64", "cf_u64": "uint64", "cf_i8": "int8"}
SPECIAL_F = [float("nan"), float("inf"), float("-inf"), -0.0, 3e9, -2.7, 65519.0, 65520.0,
             -1e10, 1e-8, 2.5, -3.5, 9.3e18, -9.3e18, 1.9e19]

SEQ_FEATURES = [
    {"name": "id", "dtype": "int64", "shape": [], "var_len": False, "deserialize_type": "int"},
    {"name": "ctxv", "dtype": "int64", "shape": [-1], "var_len": False,
     "deserialize_type": "int"},
    {"name": "cdef", "dtype": "float64", "shape": [2], "var_len": False,
     "deserialize_type": "float", "default": [1.5, -2]},
    {"name": "tok", "dtype": "int32", "shape": [], "var_len": True, "deserialize_type": "int"},
    {"name": "vec", "dtype": "float32", "shape": [2], "var_len": True,
     "deserialize_type": "float"},
    {"name": "pos", "dtype": "int64", "shape": [2], "var_len": True, "deserialize_type": "int"},
    {"name": "word", "dtype": "string", "shape": [], "var_len": True,
     "deserialize_type": "string"},
    {"name": "rawv", "dtype": "int16", "shape": [2], "var_len": True, "deserialize_type": "raw",
     "deserialize_args": {"endian": "big"}},
]

# variable-length Example features (shape [-1, ...]) and defaults, sometimes missing or empty
VL_FILES = [("v0.tfrecords", 9), ("v1.tfrecords", 0), ("v2.tfrecords", 14)]
VL_FEATURES = [
    {"name": "id", "dtype": "int64", "shape": [], "deserialize_type": "int"},
    {"name": "toks", "dtype": "int32", "shape": [-1], "deserialize_type": "int"},
    {"name": "boxes", "dtype": "float32", "shape": [-1, 4], "deserialize_type": "float"},
    {"name": "words", "dtype": "string", "shape": [-1], "deserialize_type": "string"},
    {"name": "dint", "dtype": "int16", "shape": [], "deserialize_type": "int", "default": -7},
    {"name": "dvec", "dtype": "float32", "shape": [2], "deserialize_type": "float",
     "default": [0.5, -1.5]},
    {"name": "dstr", "dtype": "string", "shape": [], "deserialize_type": "string",
     "default": "unk\u00e9"},
    {"name": "dbcast", "dtype": "int64", "shape": [3], "deserialize_type": "int",
     "default": 9},
]
VL_NAMES = [f["name"] for f in VL_FEATURES]


def write_json(path, obj):
    with open(path, "w") as f:
        json.dump(obj, f, indent=1)


def write_dataset(d, files, make, features, compression=None, allow_var_len=False, start=0):
    os.makedirs(d, exist_ok=True)
    write_json(os.path.join(d, "__manifest__.json"),
               {"compression": compression, "allow_var_len": allow_var_len,
                "features": features})
    rid = start
    for name, n in files:
        path = os.path.join(d, name)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        common.write_tfrecord(path, [make(rid + i) for i in range(n)],
                              (compression or "none").lower())
        rid += n
    return d


def main_record(i):
    pb = common.protos()[0]
    ex = pb.Example()
    f = ex.features.feature
    f["id"].int64_list.value.append(i)
    f["i64"].int64_list.value.extend([i * 1000 - 500, -(i * 37), (1 << 40) + i])
    f["i32"].int64_list.value.extend([i, -i, 2 * i, 7])
    f["u16"].int64_list.value.extend([i * 1500 % 65536, 65535])
    f["flag"].int64_list.value.append(i % 3)
    f["f32"].float_list.value.extend([i + 0.25, -i / 3.0, SPECIAL_F[i % len(SPECIAL_F)], 1e-3 * i,
                                      3.4e38, -0.0])
    f["f64"].float_list.value.append(i / 7.0)
    f["name"].bytes_list.value.append(b"n%d" % i + b"\xff\x00" * (i % 3) if i % 5 else b"")
    f["tags"].bytes_list.value.extend([b"t" * (i % 4), b"tag-%d" % i])
    f["rawle"].bytes_list.value.extend([struct.pack("<3h", i, -i, 300 * i % 32768),
                                        struct.pack("<3h", 1, 2, -32768)])
    f["rawbe"].bytes_list.value.append(struct.pack(">2f", i * 1.5, -2.0 ** -i))
    f["rawbe64"].bytes_list.value.append(struct.pack(">q", -(i << 33) - 5))
    f["rawinf"].bytes_list.value.append(struct.pack("<4H", i, 65535 - i, 256, 1))
    f["rawbool"].bytes_list.value.append(bytes([0, 1, i % 256, 255]))
    f["rawf16"].bytes_list.value.append(np.array([i / 3.0, -65504.0], dtype=">f2").tobytes())
    f["rawu8"].bytes_list.value.append(bytes((i * 7 + k) % 256 for k in range(6)))
    return ex.SerializeToString()


WIDE_FEATURES = [{"name": "v", "dtype": "int64", "shape": [20], "deserialize_type": "int"}]


def wide_record(i):
    ex = common.protos()[0].Example()
    ex.features.feature["v"].int64_list.value.extend((i + k) % 100 for k in range(20))
    return ex.SerializeToString()


def short_record(i):
    """wide_record, but record 7 holds 19 values where the manifest says 20: it decodes (and so
    is cached decoded) and fails only as its row is laid into the batch."""
    ex = common.protos()[0].Example()
    ex.features.feature["v"].int64_list.value.extend(
        (i + k) % 100 for k in range(19 if i == 7 else 20))
    return ex.SerializeToString()


def cast_record(i):
    pb = common.protos()[0]
    ex = pb.Example()
    f = ex.features.feature
    f["id"].int64_list.value.append(i)
    ints = [i, -1, 300, -129, 255, 256, 65519, 65521, (1 << 40) + 7, -(1 << 63), (1 << 63) - 1, 0]
    for k in CAST_INTS:
        f[k].int64_list.value.extend(ints)
    fl = SPECIAL_F[i % 3:] + SPECIAL_F[:i % 3]
    for k in CAST_FLOATS:
        f[k].float_list.value.extend(fl)
    return ex.SerializeToString()


def seq_record(i):
    pb = common.protos()[0]
    se = pb.SequenceExample()
    se.context.feature["id"].int64_list.value.append(i)
    if i % 4:
        se.context.feature["ctxv"].int64_list.value.extend(range(i, i + i % 4))
    if i % 3 == 0:
        se.context.feature["cdef"].float_list.value.extend([i / 2.0, i])
    t = (i * 3) % 5
    lists = se.feature_lists.feature_list
    for s in range(t):
        lists["tok"].feature.add().int64_list.value.append(i * 10 + s)
        lists["vec"].feature.add().float_list.value.extend([i + s / 4.0, -s])
        lists["pos"].feature.add().int64_list.value.extend([(i << 33) + s, -i * 1000 - s])
        lists["word"].feature.add().bytes_list.value.append(b"w%d.%d" % (i, s) + b"\xe9" * s)
        lists["rawv"].feature.add().bytes_list.value.append(struct.pack(">2h", i, -s))
    if t == 0 and i % 2:  # an absent list is zero steps; so is an empty one
        lists["tok"].feature.extend([])
    return se.SerializeToString()


def vl_record(i):
    """Variable-length features of i % k values; missing, Feature{} or an empty list at times."""
    pb = common.protos()[0]
    ex = pb.Example()
    f = ex.features.feature
    f["id"].int64_list.value.append(i)
    if i % 5 == 0:
        pass  # toks missing: an empty row
    elif i % 7 == 3:
        f["toks"].SetInParent()  # Feature{}: an empty row too
    elif i % 11 == 4:
        f["toks"].int64_list.SetInParent()  # an empty int64_list
    else:
        f["toks"].int64_list.value.extend([i * 100 + k - 50 for k in range(i % 4 + 1)])
    if i % 4 != 1:
        f["boxes"].float_list.value.extend([i + k / 8.0 for k in range((i % 3) * 4)])
    if i % 6 != 2:
        f["words"].bytes_list.value.extend([b"w%d" % k + b"\xe9" * (i % 2) for k in range(i % 3)])
    if i % 3 == 1:
        f["dint"].int64_list.value.append(i - 40000)  # wraps in int16
    elif i % 3 == 2:
        f["dint"].SetInParent()
    if i % 4 != 2:
        f["dvec"].float_list.value.extend([i / 4.0, -i])
    if i % 2 == 0:
        f["dstr"].bytes_list.value.append(b"s%d" % i)
    if i % 3 == 0:
        f["dbcast"].int64_list.value.extend([i, i + 1, i + 2])
    elif i % 3 == 2:
        f["dbcast"].int64_list.SetInParent()
    return ex.SerializeToString()


def make_datasets(tmp):
    ds = {}
    ds["main"] = write_dataset(os.path.join(tmp, "main"), MAIN_FILES, main_record, MAIN_FEATURES)
    with open(os.path.join(ds["main"], ".hidden.tfrecords"), "wb") as f:
        f.write(b"not a tfrecord")
    with open(os.path.join(ds["main"], "notes.txt"), "w") as f:
        f.write("not data\n")
    ds["gzip"] = write_dataset(os.path.join(tmp, "gzip"), MAIN_FILES[:4], main_record,
                               MAIN_FEATURES, "gzip")
    ds["zlib"] = write_dataset(os.path.join(tmp, "zlib"), MAIN_FILES[2:5], main_record,
                               MAIN_FEATURES, "ZLIB")
    cast_feats = [MAIN_FEATURES[0]]
    cast_feats += [{"name": k, "dtype": v, "shape": [12], "deserialize_type": "int"}
                   for k, v in CAST_INTS.items()]
    cast_feats += [{"name": k, "dtype": v, "shape": [15], "deserialize_type": "float"}
                   for k, v in CAST_FLOATS.items()]
    ds["casts"] = write_dataset(os.path.join(tmp, "casts"), [("c.tfrecords", 7)], cast_record,
                                cast_feats)
    ds["named"] = write_dataset(os.path.join(tmp, "named"), NAMED_FILES, main_record,
                                MAIN_FEATURES)
    for name, text in (("README.md", "# not data\n"), ("dataset_info.json", "{}")):
        with open(os.path.join(ds["named"], name), "w") as f:
            f.write(text)
    ds["vl"] = write_dataset(os.path.join(tmp, "vl"), VL_FILES, vl_record, VL_FEATURES)
    ds["seq"] = write_dataset(os.path.join(tmp, "seq"), SEQ_FILES, seq_record, SEQ_FEATURES,
                              allow_var_len=True)
    # one record's data CRC damaged: d.tfrecords record 4
    bad = os.path.join(tmp, "corrupt")
    shutil.copytree(ds["main"], bad)
    path = os.path.join(bad, "d.tfrecords")
    with open(path, "rb") as f:
        data = bytearray(f.read())
    off = 0
    for _ in range(4):
        off += 16 + struct.unpack_from("<Q", data, off)[0]
    data[off + 12 + 3] ^= 0x20
    with open(path, "wb") as f:
        f.write(data)
    ds["corrupt"] = bad
    ds["corrupt_at"] = (path, 4, off)
    # a list dataset: main's files in another order, relative paths, comments
    lst = os.path.join(tmp, "main.list")
    with open(lst, "w") as f:
        f.write("# reversed\n\n")
        for name, _ in reversed(MAIN_FILES):
            f.write("  main/%s \n" % name)
    ds["list"] = lst
    return ds


# ---- specs -------------------------------------------------------------------------------

def spec(data, primary, loader="independent", **args):
    """A spec dict: data is a dataset dir, or (manifest, list file)."""
    if isinstance(data, tuple):
        dataset = {"type": "list", "args": {"manifest_file": data[0], "list_file": data[1]}}
    else:
        dataset = {"type": "dir", "args": {"data_dir": data}}
    a = {"dataset": dataset, "target_batch_size": 4, "drop_remainder": False, "epochs": 1,
         "num_read_buffer_bytes": 65536, "num_prefetch": 2,
         "primary_features": [{"from_name": p, "to_name": p} for p in primary]}
    a.update(args)
    if a.get("shuffle") is True:  # "global" needs no buffer knobs
        a.setdefault("num_shuffle_buffer_elements", 8)
        a.setdefault("num_filenames_shuffle_buffer", 2)
        a.setdefault("num_mix_files", 2)
    return {"type": loader, "args": a}


def const(to_name, shape, dtype, value=None):
    args = {"shape": shape, "dtype": dtype}
    if value is not None:
        args["value"] = value
    return {"to_name": to_name, "type": "const", "args": args}


def slice_step(tensor, text):
    return {"tensor": tensor, "type": "slice", "args": {"slice": text}}


def tensor_names(s):
    a = s["args"]
    return ([p["to_name"] for p in a["primary_features"]] +
            [x["to_name"] for x in a.get("secondary_features", [])])


# ---- running and comparing ---------------------------------------------------------------

def run_cli(tmp, s, values=None, extra=()):
    """(rc, [batch dicts], stderr) of sluicectl run."""
    path = os.path.join(tmp, "spec.json")
    write_json(path, s)
    args = [SLUICECTL, "run", path, "--json"]
    if values:
        args += ["--values", ",".join(values)]
    p = subprocess.run(args + list(extra) + RUN_EXTRA, stdout=subprocess.PIPE,
                       stderr=subprocess.PIPE, timeout=120)
    err = p.stderr.decode("utf-8", "replace")
    out = []
    for line in p.stdout.decode("utf-8", "replace").split("\n"):
        if line.strip():
            try:
                out.append(json.loads(line))
            except ValueError:
                out.append({"unparsable": line})
    return p.returncode, out, err


def values_equal(dt, got, exp):
    """got: the JSON list; exp: plref's flat numpy array."""
    if not isinstance(got, list) or len(got) != len(exp):
        return False
    if dt == "string":
        return all(isinstance(g, str) and g.encode("latin-1") == e for g, e in zip(got, exp))
    if dt == "bool":
        return [int(g) for g in got] == [int(e) for e in exp]
    if np.dtype(dt).kind in "iu":
        return all(type(g) is int for g in got) and [int(e) for e in exp] == got
    try:
        g = np.array([float(x) for x in got], dtype=np.float64).astype(dt)
    except (TypeError, ValueError):
        return False
    return np.array_equal(g, exp, equal_nan=True)  # "-0" reads back as 0: the digest has the bits


def short(v, n=12):
    v = list(v)
    return repr([x if not isinstance(x, np.generic) else x.item() for x in v[:n]]) + (
        "..." if len(v) > n else "")


def compare(name, exp, got, values, start=0, max_report=6):
    """Every batch of got against exp; returns the number of mismatches (each reported)."""
    bad = []
    if len(got) != len(exp):
        bad.append("%d batches, expected %d" % (len(got), len(exp)))
    for k, (e, g) in enumerate(zip(exp, got)):
        where = "batch %d" % (start + k)
        for key in ("seq", "epoch", "rows", "end_epoch"):
            if g.get(key) != e[key]:
                bad.append("%s: %s %r, expected %r" % (where, key, g.get(key), e[key]))
        gt = g.get("tensors", {})
        if list(gt) != list(e["tensors"]):
            bad.append("%s: tensors %s, expected %s" % (where, list(gt), list(e["tensors"])))
        for tn, et in e["tensors"].items():
            t = gt.get(tn)
            if not isinstance(t, dict):
                continue
            for key in ("dtype", "shape", "ragged", "digest"):
                if t.get(key) != et[key]:
                    bad.append("%s: tensor %s: %s %r, expected %r" % (where, tn, key, t.get(key),
                                                                      et[key]))
            if tn in values:
                if not values_equal(et["dtype"], t.get("values"), et["values"]):
                    bad.append("%s: tensor %s: values %s, expected %s" % (
                        where, tn, short(t.get("values") or []), short(et["values"])))
                if et["ragged"] and t.get("row_splits") != et["row_splits"]:
                    bad.append("%s: tensor %s: row_splits %r, expected %r" % (
                        where, tn, t.get("row_splits"), et["row_splits"]))
    for b in bad[:max_report]:
        print("  %s: %s" % (name, b))
    if len(bad) > max_report:
        print("  %s: ... %d more mismatches" % (name, len(bad) - max_report))
    return len(bad)


def as_json(b):
    """An expected batch as sluicectl would print it (for --model-only)."""
    def val(x, dt):
        if dt == "string":
            return x.decode("latin-1")
        if dt == "bool" or np.dtype(dt).kind in "iu":
            return int(x)
        if np.isnan(x) or np.isinf(x):
            return "nan" if np.isnan(x) else ("inf" if x > 0 else "-inf")
        return float("%.9g" % x) if dt != "float64" else float(x)
    out = {k: b[k] for k in ("seq", "epoch", "rows", "end_epoch")}
    out["tensors"] = {}
    for n, t in b["tensors"].items():
        o = {k: t[k] for k in ("dtype", "shape", "ragged", "digest")}
        o["values"] = [val(x, t["dtype"]) for x in t["values"]]
        if t["ragged"]:
            o["row_splits"] = t["row_splits"]
        out["tensors"][n] = o
    return json.loads(json.dumps(out))


def brief(err):
    """The gist of a stderr text: its first line, or a sanitizer's SUMMARY line."""
    lines = [x for x in err.strip().split("\n") if x.strip()]
    summ = [x for x in lines if x.startswith("SUMMARY:")]
    return (summ or lines or [""])[0][:300]


def case(tmp, name, s, values=None, limit=None):
    """Run spec s through sluicectl and plref and compare; returns (exp, got) or None."""
    import plref
    values = tensor_names(s) if values is None else values
    exp = plref.batches(s, limit)
    if MODEL_ONLY:
        got = [as_json(b) for b in exp]
        check(compare(name, exp, got, values) == 0, "%s: model, %d batches" % (name, len(exp)))
        return exp, got
    extra = ["--batches", str(limit)] if limit is not None else []
    rc, got, err = run_cli(tmp, s, values, extra)
    if not check(rc == 0, "%s: sluicectl run exits 0 (got %d: %s)" % (name, rc, brief(err))):
        return None
    n = compare(name, exp, got, values)
    check(n == 0, "%s: %d batches equal the reference (%d mismatches)" % (name, len(exp), n))
    a = s["args"]
    if a.get("shuffle") and "id" in values and not a.get("drop_remainder") and limit is None:
        # every epoch holds each record once: the ids of the unshuffled dataset, as a multiset
        plain = json.loads(json.dumps(s))
        plain["args"].update(shuffle=False, epochs=1)
        want = sorted(ids_per_epoch(plref.batches(plain)).get(0, []))
        per = ids_per_epoch([b for b in got if "tensors" in b])
        check((len(per) == a.get("epochs", 1) or not want) and  # (no record: no batch)
              all(sorted(v) == want for v in per.values()),
              "%s: each epoch holds every record once" % name)
    return exp, got


# ---- the model's own invariants ----------------------------------------------------------

def ids_per_epoch(batches, tensor="id"):
    out = {}
    for b in batches:
        out.setdefault(b["epoch"], []).extend(int(x) for x in b["tensors"][tensor]["values"])
    return out


def model_checks(ds):
    import plref
    _, named = plref.dataset_files(spec(ds["named"], ["id"])["args"]["dataset"])
    check([os.path.relpath(p, ds["named"]) for p in named] ==
          sorted(n for n, _ in NAMED_FILES), "model: the named shards are found by framing")
    # SplitMix64's first output from state 0
    check(plref.mix64(0x9E3779B97F4A7C15) == 0xE220A8397B1DCDAF, "model: mix64 vector")
    r = plref.Rng(0, 0, 0, 0)
    check([r.below(10) for _ in range(3)] == [r2 for r2 in _replay(0, 3)], "model: Rng replay")
    items = list(range(50))
    for size in (1, 7, 100):
        out = plref.shuffle_buffer(items, size, plref.Rng(3, 0, 2, 0))
        check(sorted(out) == items, "model: shuffle buffer %d is a permutation" % size)
    check(plref.shuffle_buffer(items, 1, plref.Rng(3, 0, 2, 0)) == items,
          "model: shuffle buffer 1 keeps the order")
    total = sum(n for _, n in MAIN_FILES)
    all_ids = list(range(total))
    b = plref.batches(spec(ds["main"], ["id"], target_batch_size=5))
    ids = ids_per_epoch(b)[0]
    # sorted by path in byte order: a b c d f.TFRecords sub/e (ids were given in MAIN_FILES order)
    check(ids == all_ids, "model: no shuffle, one read = file order")
    check([x["rows"] for x in b] == [5] * 8 + [4] and b[-1]["end_stream"],
          "model: batch sizes and flags")
    b = plref.batches(spec(ds["main"], ["id"], num_parallel_reads=2))
    ids = ids_per_epoch(b)[0]
    check(ids[:4] == [0, 17, 1, 18] and sorted(ids) == all_ids,
          "model: interleave of a and b, cycle 2")
    # cycle_length fixes the cycle; num_parallel_reads then changes nothing
    b = plref.batches(spec(ds["main"], ["id"], cycle_length=2, num_parallel_reads=5))
    check(ids_per_epoch(b)[0] == ids, "model: cycle_length 2 with 5 reads = 2 reads")
    by_reads = [ids_per_epoch(plref.batches(spec(ds["main"], ["id"], cycle_length=3,
                                                 num_parallel_reads=r)))[0]
                for r in (1, 8, "auto")]
    three = ids_per_epoch(plref.batches(spec(ds["main"], ["id"], num_parallel_reads=3)))[0]
    check(all(x == three for x in by_reads) and three[:3] == [0, 17, 22],
          "model: cycle_length 3 with 1, 8, auto reads = 3 reads (a, b, c... interleaved)")
    try:
        plref.batches(spec(ds["main"], ["id"], shuffle=True, cycle_length=2))
        check(False, "model: cycle_length with shuffle raises")
    except plref.PipelineError as e:
        check("args.cycle_length" in str(e) and "num_mix_files" in str(e),
              "model: cycle_length with shuffle names args.cycle_length and num_mix_files")
    for size in (1, 7, 1000):
        s = spec(ds["main"], ["id"], shuffle=True, epochs=3, num_shuffle_buffer_elements=size,
                 num_mix_files=3, seed=11)
        per = ids_per_epoch(plref.batches(s))
        check(all(sorted(v) == all_ids for v in per.values()) and len(per) == 3,
              "model: shuffle %d: each epoch is a permutation" % size)
        if size > 1:
            check(per[0] != per[1], "model: shuffle %d: epochs differ" % size)
    s = spec(ds["main"], ["id"], target_batch_size=6, epochs=2, drop_remainder=True)
    b = plref.batches(s)
    check(len(b) == 14 and all(x["rows"] == 6 for x in b) and b[6]["end_epoch"],
          "model: drop_remainder")
    s = spec(ds["corrupt"], ["id"], target_batch_size=5, on_corrupt="skip_record")
    b = plref.batches(s)
    check(sum(x["rows"] for x in b) == total - 1 and len(b) == 9,
          "model: skip_record drops one row, keeps the batches")
    try:
        plref.batches(spec(ds["corrupt"], ["id"]))
        check(False, "model: on_corrupt fail raises")
    except plref.PipelineError as e:
        check("d.tfrecords: record 4" in str(e), "model: on_corrupt fail names the record")
    b = plref.batches(spec(ds["seq"], ["id", "tok", "word"], target_batch_size=3))
    t = b[0]["tensors"]["tok"]
    check(t["ragged"] and t["shape"] == [3, -1] and t["row_splits"] == [0, 0, 3, 4],
          "model: ragged tok of ids 0..2 (lengths 0, 3, 1)")


def _replay(seed, n):
    # an independent spelling of SplitMix64 for the Rng check above
    def mix(z):
        z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9 % 2**64
        z = (z ^ (z >> 27)) * 0x94D049BB133111EB % 2**64
        return z ^ (z >> 31)
    s = mix(mix(mix(mix(seed ^ 0x736C756963650000) ^ 0) ^ 0) ^ 0)
    out = []
    for _ in range(n):
        s = (s + 0x9E3779B97F4A7C15) % 2**64
        out.append(mix(s) % 10)
    return out


def _np_global_perm(n, seed, epoch):
    """Step 4g written again, apart from plref: numpy uint64 arrays (every element of the epoch
    at once, wrapping multiplications), h from a bit length, the keys from a SplitMix64 of its
    own; the cycle walk as a masked loop over the elements still at or above n."""
    u = np.uint64

    def mix(z):
        z = z ^ (z >> u(30))
        z = z * u(0xBF58476D1CE4E5B9)
        z = z ^ (z >> u(27))
        z = z * u(0x94D049BB133111EB)
        return z ^ (z >> u(31))
    h = max(1, ((n - 1).bit_length() + 1) // 2) if n > 1 else 1
    mask = u((1 << h) - 1)
    with np.errstate(over="ignore"):
        st = mix(np.array([seed ^ 0x736C756963650000], dtype=u))
        st = mix(st ^ u(epoch))
        st = mix(st ^ u(4))  # the stream
        st = mix(st ^ u(0))  # its index
        keys = []
        for _ in range(6):
            st = st + u(0x9E3779B97F4A7C15)
            keys.append(mix(st)[0])

        def enc(x):
            lo, hi = x & mask, x >> u(h)
            for kj in keys:
                lo, hi = hi ^ (mix(lo ^ kj) & mask), lo
            return (hi << u(h)) | lo
        x = enc(np.arange(n, dtype=u))
        out_of_range = x >= u(n)
        while out_of_range.any():
            x[out_of_range] = enc(x[out_of_range])
            out_of_range = x >= u(n)
    return [int(v) for v in x]


GLOBAL_ERRORS = [
    # (what, loader, args, the engine's message: the model raises it too, verbatim)
    ("continuous_sequence", "continuous_sequence", {"min_window": 2, "max_window": 2},
     'args.shuffle: "global" is for the independent loader (records are read by offset; a '
     "sequence loader's windows are made of consecutive records)"),
    ("discrete_sequence", "discrete_sequence", {"min_window": 1, "max_window": 2},
     'args.shuffle: "global" is for the independent loader (records are read by offset; a '
     "sequence loader's windows are made of consecutive records)"),
    ("cycle_length", "independent", {"cycle_length": 2},
     'args.cycle_length: not allowed when shuffle is "global": there is no interleave'),
    ("sloppy_interleave true", "independent", {"sloppy_interleave": True},
     'args.sloppy_interleave: not allowed when shuffle is "global": there is no interleave'),
    ("on_corrupt skip_file", "independent", {"on_corrupt": "skip_file"},
     'args.on_corrupt: "skip_file" is not allowed when shuffle is "global": a file\'s records '
     'are not read in order (use "skip_record")'),
]
SHUFFLE_BAD = [("random", '"random"'), ("Global", '"Global"'), (1, "1"), (0, "0"),
               (None, "null"), (["global"], "an array"), ({"global": True}, "an object")]


def global_error_spec(ds, loader, args, shuffle="global"):
    data = ds["seq"] if loader != "independent" else ds["main"]
    return spec(data, ["id"] if loader == "independent" else ["tok"], loader, shuffle=shuffle,
                **args)


def model_global_checks(ds):
    """shuffle "global" (step 4g) in the model: the permutation against a second implementation,
    the epochs it makes, the spec errors."""
    import plref
    pairs = [(0, 0), (0, 1), (7, 0), (7, 2), ((1 << 63) - 1, 1)]
    perms = {}
    bad_perm, bad_np = [], []
    for seed, epoch in pairs:
        for n in range(301):
            p = plref.global_perm(n, seed, epoch)
            perms[(n, seed, epoch)] = p
            if sorted(p) != list(range(n)):
                bad_perm.append((n, seed, epoch))
            if _np_global_perm(n, seed, epoch) != p:
                bad_np.append((n, seed, epoch))
    check(not bad_perm, "model: global_perm(n) is a permutation of range(n), n 0..300, %d seeds "
          "and epochs (%s)" % (len(pairs), bad_perm[:5]))
    check(not bad_np, "model: global_perm equals an independent numpy uint64 implementation, "
          "n 0..300 (%s)" % bad_np[:5])
    same_epochs = [n for n in range(10, 301)
                   if perms[(n, 0, 0)] == perms[(n, 0, 1)] or perms[(n, 7, 0)] == perms[(n, 7, 2)]]
    check(not same_epochs, "model: global_perm: other epochs, other orders, n 10..300 (%s)" %
          same_epochs[:5])
    same_seeds = [n for n in range(10, 301) if perms[(n, 0, 0)] == perms[(n, 7, 0)]]
    identity = [n for n in range(10, 301) if perms[(n, 0, 0)] == list(range(n))]
    check(not same_seeds and not identity, "model: global_perm: other seeds, other orders; never "
          "the identity (%s %s)" % (same_seeds[:5], identity[:5]))
    # enc itself on [0, 4^h) for h = 1..5 (cycle walking relies on it being a bijection)
    check(all(sorted(_np_global_perm(4 ** h, 3, 0)) == list(range(4 ** h)) for h in range(1, 6)),
          "model: the Feistel network is a bijection of [0, 4^h), h 1..5")
    # the epochs: record r (ids are numbered in the dataset's file order) at element perm(k)
    total = sum(n for _, n in MAIN_FILES)
    s = spec(ds["main"], ["id"], shuffle="global", epochs=3, seed=5, target_batch_size=5)
    per = ids_per_epoch(plref.batches(s))
    check(len(per) == 3 and all(per[e] == plref.global_perm(total, 5, e) for e in range(3)),
          "model: global: epoch e's ids are global_perm(%d, seed, e)" % total)
    s = spec(ds["main"], ["id"], shuffle="global", epochs=2, seed=5, target_batch_size=5,
             num_shuffle_buffer_elements=3, num_filenames_shuffle_buffer=2, num_mix_files=4,
             sloppy_interleave=False, num_parallel_reads=3)
    check(ids_per_epoch(plref.batches(s)) == {e: per[e] for e in range(2)},
          "model: global: the buffer knobs, sloppy_interleave false and num_parallel_reads change "
          "nothing")
    # a shard numbers the records of its files only, in their order
    s = spec(ds["main"], ["id"], shuffle="global", shard={"index": 1, "count": 2}, seed=3)
    # (MAIN_FILES is in the dataset's path order, its ids numbered in that order)
    firsts = [sum(n for _, n in MAIN_FILES[:i]) for i in range(len(MAIN_FILES))]
    ids = [firsts[i] + j for i in range(1, len(MAIN_FILES), 2) for j in range(MAIN_FILES[i][1])]
    check(ids_per_epoch(plref.batches(s))[0] == [ids[r] for r in plref.global_perm(len(ids), 3, 0)],
          "model: global, shard 1 of 2: the shard's records, numbered in file order")
    for what, loader, args, want in GLOBAL_ERRORS:
        try:
            plref.batches(global_error_spec(ds, loader, args))
            check(False, "model: global with %s raises" % what)
        except plref.PipelineError as e:
            check(str(e) == want, "model: global with %s: %s" % (what, e))
    for val, shown in SHUFFLE_BAD:
        try:
            plref.batches(spec(ds["main"], ["id"], shuffle=val))
            check(False, "model: shuffle %s raises" % shown)
        except plref.PipelineError as e:
            check(str(e) == 'args.shuffle: expected true, false or "global", got ' + shown,
                  "model: shuffle %s: %s" % (shown, e))
    for comp in ("gzip", "zlib"):
        try:
            plref.batches(spec(ds[comp], ["id"], shuffle="global"))
            check(False, "model: global on %s raises" % comp)
        except plref.PipelineError as e:
            check("reads records by offset" in str(e), "model: global on %s: %s" % (comp, e))


# ---- the cases ---------------------------------------------------------------------------

def test_cases(tmp, ds):
    main = ds["main"]
    every = MAIN_NAMES
    case(tmp, "plain: every feature, no shuffle", spec(main, every, target_batch_size=5))
    case(tmp, "batch 1", spec(main, ["id", "name", "rawle"], target_batch_size=1))
    case(tmp, "batch larger than the dataset", spec(main, ["id", "f32"], target_batch_size=100))
    for size in (1, 7, 1000):
        for mix in (1, 3):
            s = spec(main, ["id", "f32", "name"], shuffle=True, epochs=2, seed=5,
                     num_shuffle_buffer_elements=size, num_mix_files=mix,
                     num_filenames_shuffle_buffer=3 if size > 1 else 1)
            case(tmp, "shuffle buffer %d, mix %d" % (size, mix), s)
    case(tmp, "num_parallel_reads 2", spec(main, ["id", "tags"], num_parallel_reads=2))
    case(tmp, "num_parallel_reads auto", spec(main, ["id"], num_parallel_reads="auto",
                                              target_batch_size=7))
    case(tmp, "epochs 2, drop_remainder false", spec(main, ["id", "i64"], epochs=2,
                                                      target_batch_size=6))
    case(tmp, "epochs 3, drop_remainder true", spec(main, ["id", "i64"], epochs=3,
                                                     target_batch_size=6, drop_remainder=True))
    case(tmp, "epochs null (forever), 30 batches",
         spec(main, ["id"], epochs=None, target_batch_size=4, shuffle=True, seed=2), limit=30)
    case(tmp, "padding true on dense tensors", spec(main, ["id", "f32", "name", "rawinf"],
                                                   padding=True))
    case(tmp, "padding list with shape and value",
         spec(main, ["id", "f32", "tags"], padding=[
             {"tensor": "f32", "shape": [3, -1], "value": -1.5},
             {"tensor": "tags", "shape": [4], "value": "<pad>"}]))
    case(tmp, "const secondaries", spec(main, ["id", "f32", "rawinf", "name"],
                                        secondary_features=[
                                            const("lit", [2, 3], "int16", 7),
                                            const("zero", [], "float64"),
                                            const("like_f32", "f32", "f32", 1.5),
                                            const("like_raw", "rawinf", "uint8", 255),
                                            const("txt", [2], "string", "x\u00e9"),
                                            const("flag", [1], "bool", True),
                                            const("half", [2], "float16", 0.1)]))
    case(tmp, "slices", spec(main, ["id", "f32", "i32", "i64", "rawle", "tags"],
                             processing_steps=[
                                 slice_step("f32", "[-1]"),
                                 slice_step("i32", "[:, 1]"),
                                 slice_step("i64", "[::-2]"),
                                 slice_step("rawle", "[1, 0:3:2]"),
                                 slice_step("tags", "[5:]"),
                                 slice_step("f32", "[1:]")]))
    case(tmp, "slices then padding", spec(main, ["f32", "rawu8"], padding=True,
                                          processing_steps=[slice_step("rawu8", "[-2:, ::2]")]))
    case(tmp, "casts", spec(ds["casts"], ["id"] + list(CAST_INTS) + list(CAST_FLOATS),
                            target_batch_size=3))
    case(tmp, "raw big-endian and bool", spec(main, ["rawbe", "rawbe64", "rawf16", "rawbool"]))
    case(tmp, "strings", spec(main, ["id", "name", "tags"], target_batch_size=6, shuffle=True,
                              seed=9))
    case(tmp, "gzip", spec(ds["gzip"], every, epochs=2, shuffle=True, seed=4))
    case(tmp, "zlib", spec(ds["zlib"], ["id", "f32", "name"], num_parallel_reads=3))
    named = ds["named"]
    case(tmp, "dir: shards found by their framing", spec(named, ["id", "name"],
                                                         num_parallel_reads=2))
    case(tmp, "dir with a pattern", spec(named, ["id", "name"], dataset={
        "type": "dir", "args": {"data_dir": named, "pattern": "b-*-of-*"}}))
    case(tmp, "dir with a pattern in a subdirectory", spec(named, ["id"], dataset={
        "type": "dir", "args": {"data_dir": named, "pattern": "*/*.data"}}))
    case(tmp, "list dataset", spec((os.path.join(main, "__manifest__.json"), ds["list"]),
                                   ["id", "tags"], num_parallel_reads=2))
    case(tmp, "shard 1 of 2", spec(main, ["id"], shard={"index": 1, "count": 2}))
    case(tmp, "shard 0 of 3, shuffled", spec(main, ["id", "f64"], shard={"index": 0, "count": 3},
                                             shuffle=True, seed=1, epochs=2))
    vl = ds["vl"]
    case(tmp, "variable-length features and defaults", spec(vl, VL_NAMES, target_batch_size=5))
    case(tmp, "variable-length features and defaults, shuffled",
         spec(vl, VL_NAMES, shuffle=True, seed=7, epochs=2, num_mix_files=2))
    case(tmp, "variable-length features, padding true",
         spec(vl, ["id", "toks", "boxes", "words"], target_batch_size=6, padding=True))
    case(tmp, "variable-length features, padding list",
         spec(vl, ["toks", "boxes", "words", "dvec"], target_batch_size=4, padding=[
             {"tensor": "toks", "shape": [5], "value": -1},
             {"tensor": "words", "value": "<pad>"},
             {"tensor": "boxes", "shape": [-1, 4], "value": 0.25}]))
    case(tmp, "variable-length features, slices and const",
         spec(vl, ["toks", "boxes", "words", "dbcast"], target_batch_size=4,
              secondary_features=[const("mask", "toks", "bool", 1),
                                  const("bmask", "boxes", "boxes", 2.5)],
              processing_steps=[slice_step("boxes", "[:, 1:3]"), slice_step("words", "[1:]"),
                                slice_step("dbcast", "[::2]"), slice_step("bmask", "[:, 0]")]))
    seq = ds["seq"]
    seqf = ["id", "tok", "vec", "pos", "word", "rawv"]
    case(tmp, "SequenceExample context: variable-length and default",
         spec(seq, ["id", "ctxv", "cdef", "tok"], target_batch_size=3))
    case(tmp, "ragged var_len", spec(seq, seqf, target_batch_size=3))
    case(tmp, "ragged var_len, shuffled", spec(seq, seqf, shuffle=True, seed=3, epochs=2,
                                               num_mix_files=3))
    case(tmp, "ragged var_len, padding true", spec(seq, seqf, target_batch_size=5, padding=True))
    case(tmp, "ragged var_len, padding list",
         spec(seq, seqf, target_batch_size=5, padding=[
             {"tensor": "tok", "shape": [6], "value": -1},
             {"tensor": "word", "value": "<pad>"}]))
    case(tmp, "ragged var_len, slices and const",
         spec(seq, ["tok", "vec", "word"], target_batch_size=4,
              secondary_features=[const("mask", "tok", "bool", 1),
                                  const("vmask", "vec", "vec", 2.5)],
              processing_steps=[slice_step("vec", "[:, 1]"), slice_step("word", "[1:]"),
                                slice_step("vmask", "[::2]")]))


def test_cycle_length(tmp, ds):
    """cycle_length (issue 20) fixes the interleave cycle; num_parallel_reads is then only the
    reads in flight per slot: sluicectl against the model for several of each, the same batches
    for any num_parallel_reads, and num_parallel_reads N without cycle_length is cycle N."""
    main = ds["main"]
    f = ["id", "tags", "f32"]
    runs = {}
    for name, args in [("cycle_length 3, num_parallel_reads 1", {"num_parallel_reads": 1}),
                       ("cycle_length 3, num_parallel_reads 8", {"num_parallel_reads": 8}),
                       ("cycle_length 3, num_parallel_reads auto",
                        {"num_parallel_reads": "auto"}),
                       ("cycle_length 3, num_parallel_reads 1024",
                        {"num_parallel_reads": 1024}),
                       ("cycle_length 3, default num_parallel_reads", {})]:
        r = case(tmp, name, spec(main, f, cycle_length=3, epochs=2, target_batch_size=5, **args))
        runs[name] = r[1] if r else None
    r = case(tmp, "num_parallel_reads 3 (no cycle_length)",
             spec(main, f, num_parallel_reads=3, epochs=2, target_batch_size=5))
    three = r[1] if r else None
    if not MODEL_ONLY:
        check(three is not None and all(g == three for g in runs.values()),
              "cycle_length 3 with 1, 8, auto, 1024 reads and num_parallel_reads 3: "
              "identical output")
    case(tmp, "cycle_length 1, num_parallel_reads 4 (file order)",
         spec(main, ["id", "name"], cycle_length=1, num_parallel_reads=4))
    case(tmp, "cycle_length 6 (every file), num_parallel_reads 2",
         spec(main, ["id", "name"], cycle_length=6, num_parallel_reads=2, target_batch_size=3))
    case(tmp, "cycle_length 9 (more slots than files), num_parallel_reads 20",
         spec(main, ["id"], cycle_length=9, num_parallel_reads=20))
    case(tmp, "cycle_length 2, zlib, num_parallel_reads 1",
         spec(ds["zlib"], ["id", "f32", "name"], cycle_length=2, num_parallel_reads=1))
    case(tmp, "cycle_length 2, shard 0 of 2", spec(main, ["id"], cycle_length=2,
                                                   num_parallel_reads=7,
                                                   shard={"index": 0, "count": 2}))
    case(tmp, "continuous_sequence, cycle_length 2, num_parallel_reads 8",
         spec(ds["seq"], ["tok", "word"], "continuous_sequence", target_batch_size=3,
              min_window=2, max_window=3, cycle_length=2, num_parallel_reads=8))
    if MODEL_ONLY:
        return
    # spec errors name args.cycle_length
    for what, args, want in [
            ("with shuffle true", {"shuffle": True, "cycle_length": 2}, "use num_mix_files"),
            ("0", {"cycle_length": 0}, "expected an integer from 1 to 1024, got 0"),
            ("1025", {"cycle_length": 1025}, "got 1025"),
            ("auto", {"cycle_length": "auto"}, 'got "auto"'),
            ("a string", {"cycle_length": "3"}, 'got "3"')]:
        rc, got, err = run_cli(tmp, spec(main, ["id"], **args))
        check(rc != 0 and not got and "args.cycle_length: " in err and want in err,
              "cycle_length %s: refused, naming args.cycle_length (%s)" % (what, brief(err)))


def test_seed_and_threads(tmp, ds):
    s = spec(ds["main"], ["id", "f32", "name", "rawle"], shuffle=True, epochs=2,
             num_shuffle_buffer_elements=16, num_mix_files=3)
    s["args"]["seed"] = 1
    r1 = case(tmp, "seed 1", s)
    s["args"]["seed"] = 2
    r2 = case(tmp, "seed 2", s)
    if r1 and r2:
        check(ids_per_epoch(r1[1]) != ids_per_epoch(r2[1]), "seed 1 and 2 give other orders")
    outs = []
    for parses in (1, 3):
        s["args"]["num_parallel_parses"] = parses
        rc, got, err = run_cli(tmp, s, tensor_names(s))
        outs.append((rc, got))
    check(outs[0][0] == 0 and outs[0] == outs[1], "num_parallel_parses 1 and 3: identical output")


def test_checkpoints(tmp, ds):
    import plref
    s = spec(ds["main"], ["id", "name", "rawinf"], shuffle=True, epochs=3, seed=6,
             target_batch_size=5, num_shuffle_buffer_elements=9, num_mix_files=2)
    exp = plref.batches(s)
    per_epoch = sum(1 for b in exp if b["epoch"] == 0)
    rc, full, err = run_cli(tmp, s, ["id"])
    if not check(rc == 0 and compare("checkpoint base", exp, full, ["id"]) == 0,
                 "checkpoint base run equals the reference"):
        return
    st = os.path.join(tmp, "state")
    for k in sorted({0, 1, 3, per_epoch - 1, per_epoch, per_epoch + 2, 2 * per_epoch,
                     len(exp) - 1, len(exp)}):
        if os.path.exists(st):
            os.unlink(st)
        rc, head, err = run_cli(tmp, s, ["id"], ["--batches", str(k), "--state-out", st])
        ok = check(rc == 0 and head == full[:k] and os.path.exists(st),
                   "checkpoint at %d: the first %d batches, state written (%s)" % (k, k,
                                                                                 brief(err)))
        if not ok:
            continue
        rc, tail, err = run_cli(tmp, s, ["id"], ["--state-in", st])
        n = compare("resume at %d" % k, exp[k:], tail, ["id"], start=k) if rc == 0 else -1
        check(rc == 0 and n == 0, "resume at %d: batches %d.. of the uninterrupted run (%s)" % (
            k, k, brief(err)))


def test_sequence_checkpoints(tmp, ds):
    """Resuming a sequence loader replays its windows (and their random lengths) exactly."""
    import plref
    for loader, args in [("continuous_sequence", {"min_window": 1, "max_window": 4, "stride": 2}),
                         ("discrete_sequence", {"min_window": 1, "max_window": 3})]:
        s = spec(ds["seq"], ["tok", "word"], loader, target_batch_size=2, epochs=2, shuffle=True,
                 seed=5, **args)
        exp = plref.batches(s)
        rc, full, err = run_cli(tmp, s, ["tok"])
        if not check(rc == 0 and compare(loader + " checkpoint base", exp, full, ["tok"]) == 0,
                     "%s: checkpoint base run equals the reference (%s)" % (loader, brief(err))):
            continue
        st = os.path.join(tmp, "state")
        for k in sorted({1, len(exp) // 2, len(exp) - 1}):
            if os.path.exists(st):
                os.unlink(st)
            rc, head, err = run_cli(tmp, s, ["tok"], ["--batches", str(k), "--state-out", st])
            rc2, tail, err2 = run_cli(tmp, s, ["tok"], ["--state-in", st])
            n = compare("%s resume at %d" % (loader, k), exp[k:], tail, ["tok"], start=k) \
                if rc == 0 and rc2 == 0 else -1
            check(n == 0, "%s: resume at %d gives batches %d.. (%s)" % (loader, k, k,
                                                                        brief(err + err2)))


def test_corrupt(tmp, ds):
    import plref
    path, idx, off = ds["corrupt_at"]
    s = spec(ds["corrupt"], ["id", "f32"], target_batch_size=5)
    rc, got, err = run_cli(tmp, s, ["id"])
    check(rc == 1 and os.path.basename(path) in err and ("record %d" % idx) in err,
          "on_corrupt fail: exit 1 naming d.tfrecords and record %d (exit %d: %s)" % (
              idx, rc, brief(err)))
    exp_clean = plref.batches(spec(ds["main"], ["id", "f32"], target_batch_size=5))
    n_before = next(i for i, b in enumerate(exp_clean)
                    if 17 + 5 + idx in [int(x) for x in b["tensors"]["id"]["values"]])
    check(compare("on_corrupt fail, batches before the error", exp_clean[:len(got)], got,
                  ["id"]) == 0 and len(got) <= n_before,
          "on_corrupt fail: only good batches before the error (%d)" % len(got))
    s["args"]["on_corrupt"] = "skip_record"
    r = case(tmp, "on_corrupt skip_record", s)
    if r:
        bad_id = 17 + 5 + idx
        want = [x for x in ids_per_epoch(exp_clean)[0] if x != bad_id]
        check(ids_per_epoch(r[1])[0] == want, "skip_record: the clean output minus record %d" %
              bad_id)
    s["args"].update(shuffle=True, seed=8, epochs=2, num_mix_files=3,
                     num_shuffle_buffer_elements=10, num_filenames_shuffle_buffer=2)
    case(tmp, "on_corrupt skip_record, shuffled", s)
    s["args"]["on_corrupt"] = "skip_file"
    case(tmp, "on_corrupt skip_file, shuffled (the file ends at the bad record)", s)


def model_until_error(s):
    """(the model's batches before the pipeline stops, its error or None)."""
    import plref
    out = []
    try:
        for b in plref.Pipeline(s).batches():
            out.append(b)
    except plref.PipelineError as e:
        return out, str(e)
    return out, None


def gspec(data, primary, **args):
    return spec(data, primary, shuffle="global", **args)


def test_global(tmp, ds):
    """shuffle "global" (step 4g, issue 36): one permutation of every record per epoch, read by
    offset. main has files of 17, 5, 0, 11, 3 and 8 records (N = 44)."""
    import plref
    main = ds["main"]
    f = ["id", "f32", "name", "rawinf"]
    runs = {}
    for name, args in [
            ("batch 4 (divides 44), 3 epochs", {"target_batch_size": 4, "epochs": 3}),
            ("batch 5, drop_remainder false, 3 epochs", {"target_batch_size": 5, "epochs": 3}),
            ("batch 5, drop_remainder true, 3 epochs",
             {"target_batch_size": 5, "epochs": 3, "drop_remainder": True}),
            ("batch 44 (= N), drop_remainder true, 2 epochs",
             {"target_batch_size": 44, "epochs": 2, "drop_remainder": True}),
            ("batch 100 (> N), 2 epochs", {"target_batch_size": 100, "epochs": 2}),
            ("batch 100 (> N), drop_remainder true: no batch",
             {"target_batch_size": 100, "epochs": 2, "drop_remainder": True}),
            ("batch 7, seed 1, 3 epochs", {"target_batch_size": 7, "epochs": 3, "seed": 1}),
            ("batch 7, seed 2, 3 epochs", {"target_batch_size": 7, "epochs": 3, "seed": 2}),
            ("batch 7, seed 2^63-1, 3 epochs",
             {"target_batch_size": 7, "epochs": 3, "seed": (1 << 63) - 1})]:
        r = case(tmp, "global: " + name, gspec(main, f, **args))
        runs[name] = r[1] if r else None
    r = runs["batch 4 (divides 44), 3 epochs"]
    if r:
        per = ids_per_epoch(r)
        check(len(per) == 3 and per[0] != per[1] and per[1] != per[2] and per[0] != per[2],
              "global: the 3 epochs are in 3 orders")
    seeds = [runs["batch 7, seed %s, 3 epochs" % k] for k in ("1", "2", "2^63-1")]
    if all(seeds):
        per = [ids_per_epoch(x) for x in seeds]
        check(per[0] != per[1] and per[1] != per[2] and per[0] != per[2],
              "global: seeds 1, 2 and 2^63-1 give other orders")
    case(tmp, "global: batch 1, every feature", gspec(main, MAIN_NAMES, target_batch_size=1))
    case(tmp, "global: default seed (0), 2 epochs", gspec(main, ["id", "tags"], epochs=2))
    # what changes only how far ahead the engine reads: the same batches as the model
    base = gspec(main, ["id", "f32", "name"], epochs=2, seed=4, target_batch_size=6)
    outs = []
    for name, args in [("defaults", {}),
                       ("num_parallel_reads 1", {"num_parallel_reads": 1}),
                       ("num_parallel_reads 8", {"num_parallel_reads": 8}),
                       ("num_parallel_reads auto", {"num_parallel_reads": "auto"}),
                       ("num_parallel_reads 1024, num_read_buffer_bytes 0",
                        {"num_parallel_reads": 1024, "num_read_buffer_bytes": 0}),
                       ("num_read_buffer_bytes 100 (under a record)",
                        {"num_read_buffer_bytes": 100, "num_parallel_reads": 16}),
                       ("num_parallel_parses 3", {"num_parallel_parses": 3}),
                       ("num_prefetch 0", {"num_prefetch": 0}),
                       ("the buffer knobs given (ignored)",
                        {"num_shuffle_buffer_elements": 8, "num_filenames_shuffle_buffer": 2,
                         "num_mix_files": 3}),
                       ("sloppy_interleave false", {"sloppy_interleave": False})]:
        s = json.loads(json.dumps(base))
        s["args"].update(args)
        r = case(tmp, "global, %s" % name, s)
        outs.append(r[1] if r else None)
    if not MODEL_ONLY:
        check(outs[0] is not None and all(o == outs[0] for o in outs),
              "global: reads, read buffer, parses, prefetch, the buffer knobs: identical output")
    case(tmp, "global: shard 1 of 2", gspec(main, ["id", "f64"], shard={"index": 1, "count": 2},
                                            epochs=2, seed=3))
    case(tmp, "global: shard 0 of 3, drop_remainder", gspec(
        main, ["id"], shard={"index": 0, "count": 3}, epochs=3, target_batch_size=3,
        drop_remainder=True))
    case(tmp, "global: list dataset (the list's file order)",
         gspec((os.path.join(main, "__manifest__.json"), ds["list"]), ["id", "tags"], epochs=2))
    case(tmp, "global: dir with a pattern", gspec(ds["named"], ["id", "name"], dataset={
        "type": "dir", "args": {"data_dir": ds["named"], "pattern": "b-*-of-*"}}))
    case(tmp, "global: epochs null (forever), 30 batches",
         gspec(main, ["id"], epochs=None, target_batch_size=4, seed=2), limit=30)
    case(tmp, "global: padding", gspec(main, ["id", "f32", "name", "rawinf"], padding=True))
    case(tmp, "global: variable-length features and defaults",
         gspec(ds["vl"], VL_NAMES, target_batch_size=5, epochs=2, seed=7))
    case(tmp, "global: SequenceExamples, ragged var_len",
         gspec(ds["seq"], ["id", "tok", "vec", "word", "rawv"], target_batch_size=3, epochs=2))
    case(tmp, "global: slices and const", gspec(
        main, ["id", "f32", "rawle"], secondary_features=[const("lit", [2], "int16", 7)],
        processing_steps=[slice_step("f32", "[-1]"), slice_step("rawle", "[1, 0:3:2]")]))
    # N around the Feistel widths (4^h): cycle walking or none; empty files among them
    for n in (0, 1, 2, 4, 5, 16, 17, 65):
        sizes = [n // 2, 0, n - n // 2 - n // 3, n // 3] if n > 1 else [0, n]
        d = write_dataset(os.path.join(tmp, "global-n%d" % n),
                          [("g%d.tfrecords" % i, k) for i, k in enumerate(sizes)],
                          main_record, MAIN_FEATURES)
        case(tmp, "global: N = %d in files of %s, 3 epochs" % (n, sizes),
             gspec(d, ["id", "name"], epochs=3, target_batch_size=3, seed=n))
    # a record whose data CRC is broken: d.tfrecords record 4 (id 17 + 5 + 4)
    path, idx, off = ds["corrupt_at"]
    bad_id = 17 + 5 + idx
    s = gspec(ds["corrupt"], ["id", "f32"], target_batch_size=5, epochs=2, seed=8,
              on_corrupt="skip_record")
    r = case(tmp, "global: on_corrupt skip_record", s)
    if r:
        clean = plref.batches(dict(s, args=dict(s["args"], dataset={
            "type": "dir", "args": {"data_dir": main}})))
        want = {e: [x for x in v if x != bad_id] for e, v in ids_per_epoch(clean).items()}
        short_by_one = [(b["seq"], b["rows"]) for b, c in zip(r[1], clean)
                        if b["rows"] != c["rows"]]
        check(ids_per_epoch(r[1]) == want and len(r[1]) == len(clean) and
              len(short_by_one) == 2,
              "global: skip_record: the clean epochs minus record %d, in the same batches, one "
              "row short in one batch an epoch (%s)" % (bad_id, short_by_one))
    if MODEL_ONLY:
        return
    s["args"]["on_corrupt"] = "fail"
    exp, why = model_until_error(s)
    rc, got, err = run_cli(tmp, s, ["id"])
    check(rc == 1 and why and os.path.basename(path) in err and ("record %d" % idx) in err,
          "global: on_corrupt fail: exit 1 naming d.tfrecords and record %d (exit %d: %s)" % (
              idx, rc, brief(err)))
    check(len(got) <= len(exp) and compare("global, fail", exp[:len(got)], got, ["id"]) == 0,
          "global: on_corrupt fail: only the good batches before the error (%d of %d)" % (
              len(got), len(exp)))
    # spec errors, the engine's message being the model's
    for what, loader, args, want in GLOBAL_ERRORS:
        rc, got, err = run_cli(tmp, global_error_spec(ds, loader, args))
        check(rc != 0 and not got and want in err,
              "global with %s: refused: %s (%s)" % (what, want, brief(err)))
    for val, shown in SHUFFLE_BAD:
        rc, got, err = run_cli(tmp, spec(main, ["id"], shuffle=val))
        want = 'args.shuffle: expected true, false or "global", got ' + shown
        check(rc != 0 and not got and want in err, "shuffle %s: refused: %s (%s)" % (
            shown, want, brief(err)))
    for comp in ("gzip", "zlib"):
        _, why = model_until_error(spec(ds[comp], ["id"], shuffle="global"))
        rc, got, err = run_cli(tmp, spec(ds[comp], ["id"], shuffle="global"))
        check(rc != 0 and not got and why and 'args.shuffle: "global" reads records by offset' in
              err, "global on a %s dataset: refused at pipeline creation (%s)" % (comp, brief(err)))


def test_global_checkpoints(tmp, ds):
    """A global shuffle resumes at (batches done) x target_batch_size of the epoch's permutation:
    the batches of the uninterrupted run from there on."""
    import plref
    st = os.path.join(tmp, "state")
    for name, s in [
            ("batch 5", gspec(ds["main"], ["id", "name", "rawinf"], epochs=3, seed=6,
                              target_batch_size=5)),
            ("batch 6, drop_remainder", gspec(ds["main"], ["id", "f32"], epochs=2, seed=9,
                                              target_batch_size=6, drop_remainder=True)),
            ("skip_record", gspec(ds["corrupt"], ["id"], epochs=2, seed=8, target_batch_size=5,
                                  on_corrupt="skip_record"))]:
        exp = plref.batches(s)
        per_epoch = sum(1 for b in exp if b["epoch"] == 0)
        rc, full, err = run_cli(tmp, s, ["id"])
        if not check(rc == 0 and compare("global checkpoint base, " + name, exp, full,
                                         ["id"]) == 0,
                     "global, %s: checkpoint base run equals the reference (%s)" % (
                         name, brief(err))):
            continue
        for k in sorted({0, 1, per_epoch // 2, per_epoch - 1, per_epoch, per_epoch + 3,
                         len(exp) - 1, len(exp)}):
            if os.path.exists(st):
                os.unlink(st)
            rc, head, err = run_cli(tmp, s, ["id"], ["--batches", str(k), "--state-out", st])
            if not check(rc == 0 and head == full[:k] and os.path.exists(st),
                         "global, %s: checkpoint at %d: the first %d batches, state written "
                         "(%s)" % (name, k, k, brief(err))):
                continue
            rc, tail, err = run_cli(tmp, s, ["id"], ["--state-in", st])
            n = compare("global, %s, resume at %d" % (name, k), exp[k:], tail, ["id"],
                        start=k) if rc == 0 else -1
            check(rc == 0 and n == 0, "global, %s: resume at %d: batches %d.. of the "
                  "uninterrupted run (%s)" % (name, k, k, brief(err)))


def test_sequences(tmp, ds):
    seq = ds["seq"]
    f = ["tok", "vec", "word"]
    for name, loader, args in [
            ("continuous_sequence, window 3", "continuous_sequence",
             {"min_window": 3, "max_window": 3}),
            ("continuous_sequence, window 2..4, stride 1", "continuous_sequence",
             {"min_window": 2, "max_window": 4, "stride": 1}),
            ("continuous_sequence, padding, shuffled", "continuous_sequence",
             {"min_window": 1, "max_window": 5, "padding": True, "shuffle": True, "seed": 3}),
            ("discrete_sequence, 1..3 records", "discrete_sequence",
             {"min_window": 1, "max_window": 3}),
            ("discrete_sequence, 2 records, padding", "discrete_sequence",
             {"min_window": 2, "max_window": 2, "padding": True, "epochs": 2}),
            ("continuous_sequence, stride 4 > window 2 (gaps), raw", "continuous_sequence",
             {"min_window": 2, "max_window": 2, "stride": 4}),
            ("continuous_sequence, window longer than any file", "continuous_sequence",
             {"min_window": 10000, "max_window": 10000}),
            ("continuous_sequence, slice and const per record", "continuous_sequence",
             {"min_window": 2, "max_window": 3, "processing_steps": [slice_step("vec", "[:, 1]")],
              "secondary_features": [const("ones", "tok", "float16", 1.5)]}),
            ("discrete_sequence, shuffled windows, 3 epochs", "discrete_sequence",
             {"min_window": 1, "max_window": 2, "shuffle": True, "seed": 11, "epochs": 3,
              "num_mix_files": 3, "num_shuffle_buffer_elements": 4})]:
        feats = f + ["rawv"] if "raw" in name else f
        case(tmp, name, spec(seq, feats, loader, target_batch_size=3, **args))


def test_cache_used(tmp, ds):
    """With the cache: epochs after the first frame their files from it (the total line's
    cache_files), a file it holds that changes is read again, and a file whose framing fails is
    not cached (the batches themselves are what every case above compares with the model)."""
    s = spec(ds["main"], ["id", "i64"], epochs=3, shuffle=True, seed=9)
    path = os.path.join(tmp, "cached.json")
    write_json(path, s)

    def totals(extra=RUN_EXTRA):
        p = subprocess.run([SLUICECTL, "run", path] + extra, stdout=subprocess.PIPE,
                           stderr=subprocess.PIPE, timeout=120, text=True)
        last = (p.stdout.strip().splitlines() or [""])[-1]
        return p.returncode, dict(kv.split("=", 1) for kv in last.split()[1:] if "=" in kv)
    files = len([f for f, n in MAIN_FILES])
    rc, t = totals()
    check(rc == 0 and int(t.get("cache_filled", -1)) == files and
          int(t.get("cache_files", -1)) == 2 * files,
          "cache: %d files filled in epoch 1 and read from memory in epochs 2 and 3 (%s)" % (
              files, t))
    # every file held decoded from epoch 2 on: those epochs run on compact rows
    check(rc == 0 and t.get("cached_epochs") == "2",
          "cache: epochs 2 and 3 are cached epochs (%s)" % t)
    # by default (--cache-memory alone) uncompressed files are cached too
    rc, t = totals(RUN_EXTRA[:2])
    check(rc == 0 and int(t.get("cache_filled", -1)) == files and
          int(t.get("cache_files", -1)) == 2 * files,
          "cache: an uncompressed dataset is cached by default (%s)" % t)
    # --cache-uncompressed=false: compressed files only (an uncompressed one is read again)
    compressed_only = RUN_EXTRA[:2] + ["--cache-uncompressed=false"]
    rc, t = totals(compressed_only)
    check(rc == 0 and t.get("cache_level") == "0" and int(t.get("cache_files", -1)) == 0 and
          int(t.get("cache_filled", -1)) == 0,
          "cache: with --cache-uncompressed=false an uncompressed dataset is not cached (%s)" % t)
    gz = spec(ds["gzip"], ["id"], epochs=2)
    write_json(path, gz)
    rc, t = totals(compressed_only)
    ngz = len([f for f in os.listdir(ds["gzip"]) if not f.startswith("__")])
    check(rc == 0 and t.get("cache_level") == "3" and int(t.get("cache_filled", -1)) == ngz and
          int(t.get("cache_files", -1)) == ngz,
          "cache: a gzip dataset is, with --cache-uncompressed=false: %d files filled and read "
          "again (%s)" % (ngz, t))
    bad = spec(ds["corrupt"], ["id"], epochs=2, on_corrupt="skip_file")
    write_json(path, bad)
    rc, t = totals()
    check(rc == 0 and int(t.get("cache_filled", -1)) == files - 1 and
          int(t.get("cache_files", -1)) == files - 1 and t.get("cached_epochs") == "0",
          "cache: a file skipped at a bad record (d.tfrecords) is not cached, the %d others are, "
          "so no epoch is a cached epoch (%s)" % (files - 1, t))
    # a record that decodes but has the wrong shape is cached decoded; in a cached epoch its row
    # fails as it does from the file: skip_record drops it from every epoch, the same batches
    short = write_dataset(os.path.join(tmp, "short"), [("s%d.tfrecords" % k, 6) for k in range(3)],
                          short_record, WIDE_FEATURES)
    s3 = spec(short, ["v"], epochs=3, on_corrupt="skip_record", shuffle=True, seed=4)
    write_json(path, s3)
    rc, t = totals()
    check(rc == 0 and t.get("cached_epochs") == "2" and t.get("skipped_records") == "3",
          "cache: a row of the wrong shape is skipped in each of 3 epochs, 2 of them cached (%s)"
          % t)
    outs = [subprocess.run([SLUICECTL, "run", path, "--json", "--values", "v"] + extra,
                           capture_output=True, text=True, timeout=120)
            for extra in (RUN_EXTRA[:2], [])]
    check(outs[0].returncode == 0 and outs[0].stdout == outs[1].stdout and
          outs[0].stdout.count('"epoch": 2') > 0,
          "cache: the batches of those 3 epochs, values and all, are those without the cache")
    # with skip_file a cached epoch would have to check each record on the driver: not one
    write_json(path, dict(s3, args=dict(s3["args"], on_corrupt="skip_file")))
    rc, t = totals()
    check(rc == 0 and t.get("cached_epochs") == "0",
          "cache: under on_corrupt skip_file no epoch is a cached epoch (%s)" % t)
    # a dataset larger than the budget keeps what fits (Plumber's rule) instead of each file
    # evicting the one before it (in a fixed file order that would leave no hit at all)
    ctr = os.path.join(tmp, "ctr-gz")
    g = subprocess.run([SLUICECTL, "gen", "ctr", ctr, "--files", "4", "--records", "20000",
                        "--seed", "3", "--compression", "gzip"], capture_output=True, text=True)
    check(g.returncode == 0, "cache: sluicectl gen ctr (%s)" % g.stderr.strip())
    big = {"type": "independent", "args": {
        "dataset": {"type": "dir", "args": {"data_dir": ctr}}, "target_batch_size": 500,
        "drop_remainder": False, "epochs": 3, "num_parallel_reads": 1,
        "num_read_buffer_bytes": 65536, "num_prefetch": 2,
        "primary_features": [{"from_name": f, "to_name": f} for f in ("dense0", "label")]}}
    write_json(path, big)
    rc, t = totals(["--cache-memory", str(64 << 20)])
    one = int(t.get("cache_need_bytes", 0)) // 4  # what a file's entry holds
    check(rc == 0 and t.get("cache_fits") == "1" and int(t.get("cache_filled", -1)) == 4 and one,
          "cache: the 4 files fit 64 MiB (%s)" % t)
    rc, t = totals(["--cache-memory", str(one * 3 // 2)])
    check(rc == 0 and t.get("cache_fits") == "0" and int(t.get("cache_filled", -1)) == 1 and
          int(t.get("cache_files", -1)) == 2,
          "cache: in a budget of 1.5 files one file is kept and read in epochs 2 and 3, the "
          "others read from their files (%s)" % t)
    # the level: an Example's decoded features (3) where they fit; a SequenceExample's
    # projected records (2)
    write_json(path, spec(ds["seq"], ["tok", "vec", "word"], "discrete_sequence", min_window=1,
                          max_window=2, epochs=2))
    rc, t = totals()
    check(rc == 0 and t.get("cache_level") == "2" and int(t.get("cache_files", -1)) > 0,
          "cache: a sequence loader's files are kept as projected records (%s)" % t)
    # where the decoded level would not fit and the projected one would, the projected one
    # (20 small int64 values: a varint byte each in the record, 8 bytes decoded)
    wide = write_dataset(os.path.join(tmp, "wide"), [("w%d.tfrecords" % k, 3000) for k in range(4)],
                         wide_record, WIDE_FEATURES)
    write_json(path, spec(wide, ["v"], epochs=3))
    rc, t = totals(["--cache-memory", str(64 << 20), "--cache-uncompressed"])
    need = int(t.get("cache_need_bytes", 0))
    check(rc == 0 and t.get("cache_level") == "3" and int(t.get("cache_filled", -1)) == 4 and
          need > 0, "cache: 20 decoded int64 values a record fit 64 MiB (%s)" % t)
    rc, t = totals(["--cache-memory", str(need * 2 // 3), "--cache-uncompressed"])
    check(rc == 0 and t.get("cache_level") == "2" and int(t.get("cache_filled", -1)) == 4 and
          int(t.get("cache_files", -1)) == 8,
          "cache: in 2/3 of what the decoded level needs, the projected records are kept, every "
          "file (%s)" % t)

    def digests(extra):
        p = subprocess.run([SLUICECTL, "run", path, "--json"] + extra, capture_output=True,
                           text=True, timeout=120)
        return p.returncode, p.stdout
    check(digests(["--cache-memory", str(one * 3 // 2)]) == digests([]),
          "cache: the batches of a dataset the cache holds in part are those without it")


def main():
    common.start()
    if not MODEL_ONLY and not (SLUICECTL and os.access(SLUICECTL, os.X_OK)):
        common.skip("[env] SLUICECTL is not set to an executable")
    common.protos()
    with tempfile.TemporaryDirectory(prefix="sluice-pipeline-") as tmp:
        ds = make_datasets(tmp)
        model_checks(ds)
        model_global_checks(ds)
        test_cases(tmp, ds)
        test_cycle_length(tmp, ds)
        test_sequences(tmp, ds)
        test_global(tmp, ds)
        if not MODEL_ONLY:
            test_global_checkpoints(tmp, ds)
            test_sequence_checkpoints(tmp, ds)
            test_seed_and_threads(tmp, ds)
            test_checkpoints(tmp, ds)
            test_corrupt(tmp, ds)
            if CACHE:
                test_cache_used(tmp, ds)
    common.finish()


if __name__ == "__main__":
    sys.exit(main())
