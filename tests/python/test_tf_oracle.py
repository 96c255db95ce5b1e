# SPDX-License-Identifier: Apache-2.0
"""TensorFlow as the oracle (issue 17): the same files through a sluice spec (`sluicectl run`)
and through tf.data + tf.io.parse_example / parse_sequence_example (tests/crosscheck/
tf_oracle.py, run by the peers' venv python in ONE process for the whole module, handing its
tensors over as .npz), batch by batch: the same dtype, shape, values, ragged row splits, and
the same bytes (sluicectl's digest is the CRC-32 of a tensor's splits, offsets and data, so
floats compare bit for bit, NaN payloads included).

Cases (every one a pytest case of `test_against_tensorflow`):
- datasets: `sluicectl gen ctr`, `gen image`, `gen seq`; every Example and SequenceExample
  file of ../shared/testdata with the manifest `sluicectl manifest` infers (FixedLenFeature
  where the count is fixed, RaggedFeature where it varies; feature lists as RaggedFeature);
  a google.protobuf random corpus (tests/crosscheck/test_random_corpus.py's generators: packed
  and unpacked, merged messages, repeated keys, unknown fields) of Examples and of
  SequenceExamples, with a manifest of the features whose kind never changes;
- casts: a manifest dtype other than the list's own (tf.cast), `raw` (tf.io.decode_raw, both
  endians, `len`), on a file of edge values written here; where sluice departs from tf.cast on
  purpose (docs/pipeline-semantics.md, "Differences from TensorFlow") sluice must give what the
  documented rule gives (a numpy model) and TensorFlow the rest;
- slices (the `slice` step vs TensorFlow's basic indexing of each record's tensor), padding
  (`padding` vs padded_batch with padded_shapes and padding_values), defaults
  (FixedLenFeature's default_value);
- images: `decode_image` vs tf.io.decode_jpeg (dct_method INTEGER_ACCURATE / INTEGER_FAST) and
  decode_png on `sluicectl gen jpeg --segmentation`, channels 0, 1, 3, batch 1 and padded.

Needs SLUICE_TF_PYTHON, the venv's python that tools/test.sh makes with
`tools/peers/venv.sh --oracle`; skipped without it.
"""

import json
import math
import os
import subprocess
import sys
import zlib

import numpy as np
import pytest

from conftest import SRC, ctl

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from test_testdata import FILES, TESTDATA, infer  # noqa: E402
import common  # noqa: E402  (tests/crosscheck, on the path through test_testdata)

TF = os.environ.get("SLUICE_TF_PYTHON", "")
pytestmark = pytest.mark.skipif(not (TF and os.access(TF, os.X_OK)),
                                reason="[peer] no TensorFlow venv (SLUICE_TF_PYTHON; "
                                "tools/peers/venv.sh --oracle)")
BATCH = 7
INTS = ["int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64"]
FLOATS = ["float16", "float32", "float64"]

# ---- datasets ------------------------------------------------------------------------------


def feature(name, dtype, shape, kind, **kw):
    f = {"name": name, "dtype": dtype, "shape": shape, "var_len": False,
         "deserialize_type": kind}
    f.update(kw)
    return f


def manifest(features, sequence=False, compression=None):
    return {"compression": compression, "allow_var_len": sequence, "features": features}


# Edge values for casts: every integer and float boundary of the numeric dtypes, rounding
# ties of float16 / float32, NaN, infinities, signed zeros and subnormals.
CAST_INTS = [0, 1, -1, 2, 127, 128, -128, -129, 255, 256, 32767, 32768, -32768, -32769, 65535,
             65536, 2**31 - 1, 2**31, -2**31, -2**31 - 1, 2**32 - 1, 2**32, 2049, 2051, 65504,
             65519, 65520, 2**24 + 1, 2**24 + 3, 2**53 + 1, 2**62, 2**63 - 1, -2**63, -2**63 + 1,
             1000, -1000]
CAST_FLOATS = [0.0, -0.0, 0.5, -0.5, 1.5, 2.5, -1.7, 1.9999, 127.9, 128.5, -128.9, -129.5, 255.5,
               256.0, 32767.5, 32768.0, -32769.0, 65535.9, 65536.0, 2.0**31, -2.0**31, 2.0**32,
               1e10, -1e10, 2.0**63, -2.0**63, 2.0**64, 3.0e38, -3.0e38, math.inf, -math.inf,
               math.nan, -math.nan, 1e-45, -1e-45, 1e-40, 6e-8, 3e-8, 65504.0, 65519.0, 65520.0,
               0.1, 1.0 / 3, 2049.0, 1e-5]
CAST_RECORDS = 5
CORPUS_FEATURES = 64


def rolled(values, r):
    return values[r % len(values):] + values[:r % len(values)]


class Data:
    """The datasets of the module, made on first use under one temporary directory."""

    def __init__(self, tmp):
        self.tmp = tmp
        self.cache = {}

    def once(self, key, make):
        if key not in self.cache:
            self.cache[key] = make()
        return self.cache[key]

    def gen(self, kind, records, *more):
        def make():
            d = os.path.join(self.tmp, "gen-" + kind)
            r = ctl("gen", kind, d, "--files", 1, "--records", records, "--seed", 7, *more)
            assert r.returncode == 0, r.stderr
            with open(os.path.join(d, "__manifest__.json")) as f:
                man = json.load(f)
            files = sorted(x for x in os.listdir(d) if x.endswith(".tfrecords"))
            comp = (man.get("compression") or "none").lower()
            return [(os.path.join(d, x), comp) for x in files], man
        return self.once(("gen", kind), make)

    def testdata(self, name, comp):
        path = os.path.join(TESTDATA, name)
        return self.once(("td", name), lambda: ([(path, comp)], infer(path)))

    def write(self, name, payloads):
        path = os.path.join(self.tmp, name + ".tfrecord")
        common.write_tfrecord(path, payloads)
        return [(path, "none")]

    def casts(self):
        """Records of CAST_INTS ("i"), CAST_FLOATS ("f"), both as [-1] ("iv", "fv": ragged),
        and raw bytes ("r": one 16-byte string, "r2": two, "rv": 8 bytes per step)."""
        def make():
            pb = common.protos()[0]
            rng = np.random.default_rng(17)
            out = []
            for r in range(CAST_RECORDS):
                ex = pb.Example()
                fe = ex.features.feature
                fe["i"].int64_list.value.extend(rolled(CAST_INTS, r))
                fe["f"].float_list.value.extend(rolled(CAST_FLOATS, r))
                fe["iv"].int64_list.value.extend(rolled(CAST_INTS, r)[:r * 3])
                fe["fv"].float_list.value.extend(rolled(CAST_FLOATS, r)[:r * 4])
                fe["r"].bytes_list.value.append(rng.bytes(16))
                fe["r2"].bytes_list.value.extend([rng.bytes(16), rng.bytes(16)])
                out.append(ex.SerializeToString())
            return self.write("casts", out)
        return self.once("casts", make)

    def cast_ints(self):
        """casts() with "i" as it is: int64 [len(CAST_INTS)]."""
        return self.casts(), manifest([feature("i", "int64", [len(CAST_INTS)], "int")])

    def cast_source(self, name):
        """Per record, the flat values of a casts() feature as written (int64 or float32)."""
        vals, dt = (CAST_INTS, np.int64) if name[0] == "i" else (CAST_FLOATS, np.float32)
        n = {"i": None, "f": None, "iv": 3, "fv": 4}[name]
        return [np.array(rolled(vals, r)[:None if n is None else r * n], dt)
                for r in range(CAST_RECORDS)]

    def defaults(self):
        """Records where "a" (int [2]), "b" (float []), "s" (string [2]) are present in some
        and missing in others."""
        def make():
            pb = common.protos()[0]
            out = []
            for r in range(9):
                ex = pb.Example()
                fe = ex.features.feature
                fe["id"].int64_list.value.append(r)
                if r % 2:
                    fe["a"].int64_list.value.extend([r, -r])
                if r % 3 == 0:
                    fe["b"].float_list.value.append(r / 4)
                if r in (2, 3, 7):
                    fe["s"].bytes_list.value.extend([b"x%d" % r, b""])
                out.append(ex.SerializeToString())
            return self.write("defaults", out)
        return self.once("defaults", make)

    def strings(self):
        """Records of a ragged string list "s" (0 to 3 values) and float list "v" (0 to 2),
        read as float16."""
        def make():
            pb = common.protos()[0]
            out = []
            for r in range(11):
                ex = pb.Example()
                ex.features.feature["s"].bytes_list.value.extend(
                    [b"w%d-%d" % (r, k) for k in range(r % 4)])
                ex.features.feature["v"].float_list.value.extend([r * 0.5] * (r % 3))
                out.append(ex.SerializeToString())
            return self.write("strings", out), manifest([
                feature("s", "string", [-1], "string"), feature("v", "float16", [-1], "float")])
        return self.once("strings", make)

    def sequences(self):
        """SequenceExamples: context "c" (int [2]), feature lists "r" (one 8-byte string per
        step: raw), "f" (3 floats per step) and "n" (1 int per step), 0 to 6 steps."""
        def make():
            pb = common.protos()[0]
            rng = np.random.default_rng(5)
            out = []
            for r in range(13):
                se = pb.SequenceExample()
                se.context.feature["c"].int64_list.value.extend([r - 6, 300 * r])
                fl = se.feature_lists.feature_list
                for k in range(r % 7):
                    fl["r"].feature.add().bytes_list.value.append(rng.bytes(8))
                    fl["f"].feature.add().float_list.value.extend(
                        rng.normal(0, 1e4, 3).astype(np.float32).tolist())
                    fl["n"].feature.add().int64_list.value.append(int(rng.integers(-2**40,
                                                                                  2**40)))
                out.append(se.SerializeToString())
            return self.write("sequences", out)
        return self.once("sequences", make)

    def corpus(self, sequence):
        """(files, manifest) of test_random_corpus's random records (google.protobuf's
        serializations, packed and unpacked, and two messages concatenated = merged): the
        CORPUS_FEATURES most frequent features (and feature lists) whose kind is the same in
        every record that has one, as [-1] (a feature list: the step shape when every step of
        every record holds the same count)."""
        def make():
            import test_random_corpus as rc
            pb = common.protos()[0]
            rand = rc.rand_sequence if sequence else rc.rand_example
            recs = []
            for _ in range(300 if sequence else 1000):
                r = rc.rng.random()  # the wire forms TensorFlow's parser takes (WIRE_REFUSED)
                recs.append(rand(pb).SerializeToString() if r < 0.5 else
                            rc.unpacked(rand(pb)) if r < 0.8 else b"" if r < 0.85 else
                            rc.packed_or_not(rand(pb)) + rc.packed_or_not(rand(pb)))
            kinds, steps, seen = {}, {}, {}
            for p in recs:
                msg = pb.SequenceExample() if sequence else pb.Example()
                msg.ParseFromString(p)
                feats = msg.context.feature if sequence else msg.features.feature
                for name, f in feats.items():
                    kinds.setdefault(name, set()).add(f.WhichOneof("kind"))
                    seen[name] = seen.get(name, 0) + 1
                for name, fl in (msg.feature_lists.feature_list.items() if sequence else []):
                    seen[name] = seen.get(name, 0) + 1
                    for s in fl.feature:
                        k = s.WhichOneof("kind")
                        steps.setdefault(name, set()).add(
                            (k, len(getattr(s, k).value) if k else 0))
            kind = {"int64_list": "int", "float_list": "float", "bytes_list": "string"}
            dt = {"int": "int64", "float": "float32", "string": "string"}
            fs = []
            for name, ks in sorted(kinds.items()):
                ks.discard(None)
                if len(ks) == 1 and name and "\0" not in name and name not in steps:
                    k = kind[ks.pop()]
                    fs.append(feature(name, dt[k], [-1], k))
            for name, ss in sorted(steps.items()):
                if len(ss) == 1 and name and "\0" not in name and name not in kinds:
                    k, c = ss.pop()
                    if k and c:
                        k = kind[k]
                        fs.append(feature(name, dt[k], [] if c == 1 else [c], k, var_len=True))
            # the most frequent (a thousand names, each in one record, take TensorFlow a
            # minute and say nothing more)
            fs = sorted(fs, key=lambda f: (-seen[f["name"]], f["name"]))[:CORPUS_FEATURES]
            files = self.write("corpus-seq" if sequence else "corpus", recs)
            return files, manifest(fs, sequence)
        return self.once(("corpus", sequence), make)


# ---- cases ---------------------------------------------------------------------------------
# A case: files, the manifest sluice reads, the selected features ([(name, extras)]: "slice",
# "image"), batch, padding (None, True or [{"tensor", "shape", "value"}]), and optionally
# "model" (per tensor, the source values of a cast and the documented rule) or "tolerance"
# (per tensor, {"max", "mean"} absolute difference allowed: images).

CASES = {}


def case(cid):
    def reg(fn):
        CASES[cid] = fn
        return fn
    return reg


def plain(files, man, batch=BATCH, **kw):
    return dict(files=files, man=man, select=[(f["name"], {}) for f in man["features"]
                                              if f["deserialize_type"] != "raw"],
                batch=batch, **kw)


for _kind, _n in (("ctr", 300), ("image", 40), ("seq", 60)):
    case("gen-" + _kind)(lambda d, k=_kind, n=_n: plain(*d.gen(k, n)))

for _name, _k, _comp in FILES:
    case("testdata-%s-%s" % (_k, _name[:60]))(
        lambda d, n=_name, c=_comp: plain(*d.testdata(n, c)))

case("corpus-example")(lambda d: plain(*d.corpus(False)))
case("corpus-sequence")(lambda d: plain(*d.corpus(True)))


def cast_case(src, dtype, shape):
    def make(d):
        kind = "int" if src[0] == "i" else "float"
        f = feature(src, dtype, shape, kind)
        return dict(files=d.casts(), man=manifest([f]), select=[(src, {})], batch=2,
                    model={src: (d.cast_source(src), dtype)})
    return make


for _dt in INTS + FLOATS + ["bool"]:
    case("cast-int-" + _dt)(cast_case("i", _dt, [len(CAST_INTS)]))
    case("cast-float-" + _dt)(cast_case("f", _dt, [len(CAST_FLOATS)]))
for _dt in ("int8", "uint32", "float16", "float64", "bool"):
    case("cast-ragged-int-" + _dt)(cast_case("iv", _dt, [-1, 3]))
    case("cast-ragged-float-" + _dt)(cast_case("fv", _dt, [-1, 2]))


def raw_case(name, dtype, endian, n_len):
    def make(d):
        args = {"endian": endian}
        if n_len:
            args["len"] = n_len
        f = feature(name, dtype, [-1], "raw", deserialize_args=args)
        return dict(files=d.casts(), man=manifest([f]), select=[(name, {})], batch=2)
    return make


for _dt in INTS + FLOATS + ["bool"]:
    for _end in ("little", "big"):
        case("raw-%s-%s" % (_dt, _end))(raw_case("r", _dt, _end, None))
    case("raw-len2-" + _dt)(raw_case("r2", _dt, "little", 2))


def slice_case(data, name, text, **kw):
    def make(d):
        files, man = getattr(d, data[0])(*data[1:])
        return dict(files=files, man=man, select=[(name, {"slice": text})], batch=BATCH, **kw)
    return make


for _s in ("[1:5]", "[::-2]", "[-1]", "[3]", "[-3:]", "[40:]", "[1:-1:3]", "[ -2 : 0 : -1 ]"):
    case("slice-int-" + _s)(slice_case(("cast_ints",), "i", _s))
for _s in ("[1:]", "[::2]", "[:-1]", "[::-1]", "[:, 1:3]", "[1:, ::-1]", "[:, -1]"):
    case("slice-ragged-" + _s)(slice_case(("gen", "image", 40), "bbox", _s))
for _s in ("[0]", "[1:3, ::2]", "[-1, -1]", "[:, 2]"):
    case("slice-seq-" + _s)(slice_case(("gen", "seq", 60), "tokens", _s))


def pad_case(data, names, padding, batch=BATCH):
    def make(d):
        files, man = getattr(d, data[0])(*data[1:])
        return dict(files=files, man=man, select=[(n, {}) for n in names], batch=batch,
                    padding=padding)
    return make


case("pad-image-bbox-true")(pad_case(("gen", "image", 40), ["bbox", "label", "image"], True))
case("pad-image-bbox-shape")(pad_case(("gen", "image", 40), ["bbox", "label"], [
    {"tensor": "t0", "shape": [12, 4], "value": -1.5}, {"tensor": "t1", "value": 3}]))
case("pad-image-bbox-partial")(pad_case(("gen", "image", 40), ["bbox"], [
    {"tensor": "t0", "shape": [-1, 4], "value": 0.25}]))
case("pad-seq-true")(pad_case(("gen", "seq", 60), ["tokens", "weights", "id", "length"], True))
case("pad-seq-values")(pad_case(("gen", "seq", 60), ["tokens", "weights", "id"], [
    {"tensor": "t0", "shape": [40, 4], "value": -7}, {"tensor": "t1", "value": 0.5},
    {"tensor": "t2", "value": "pad"}]))


case("pad-strings-empty")(pad_case(("strings",), ["s", "v"], True, batch=4))
case("pad-strings-value")(pad_case(("strings",), ["s", "v"], [
    {"tensor": "t0", "shape": [5], "value": "<pad>"}, {"tensor": "t1", "value": -2.5}], batch=4))


def default_case(dts, defaults):
    def make(d):
        fs = [feature("id", "int64", [], "int"),
              feature("a", dts[0], [2], "int", default=defaults[0]),
              feature("b", dts[1], [], "float", default=defaults[1]),
              feature("s", "string", [2], "string", default=defaults[2])]
        return dict(files=d.defaults(), man=manifest(fs),
                    select=[(f["name"], {}) for f in fs], batch=4)
    return make


case("default-scalar")(default_case(("int64", "float32"), (7, -0.5, "none")))
case("default-arrays")(default_case(("int64", "float32"), ([1, -2], 3.25, ["p", "q"])))
case("default-cast")(default_case(("int8", "float16"), ([300, -1], 1e-7, "z")))


def image_case(name, channels, dct, batch=1, padding=None):
    def make(d):
        files, man = d.gen("jpeg", 16, "--segmentation")
        img = {"channels": channels, "dct_method": dct}
        return dict(files=files, man=man, select=[(name, {"image": img})], batch=batch,
                    padding=padding, tolerance=GRAY_TOLERANCE if channels == 1 else None)
    return make


# JPEGs (both IDCTs, every channels) and gray PNGs decode byte for byte as TensorFlow's; a
# colour PNG to channels 1 is Pillow's luma in sluice and libpng's rgb_to_gray in TensorFlow:
# within 1 level, about half the pixels (docs/image.md; measured max 1, mean 0.50). Batches
# holding only JPEGs stay exact.
GRAY_TOLERANCE = {"max": 1, "mean": 0.55}
for _ch in (0, 1, 3):
    for _dct in ("accurate", "fast"):
        case("image-jpeg-c%d-%s" % (_ch, _dct))(image_case("image/encoded", _ch, _dct))
    case("image-png-c%d" % _ch)(image_case("image/segmentation/class/encoded", _ch, "accurate"))
case("image-jpeg-padded")(image_case("image/encoded", 3, "accurate", batch=4, padding=True))
case("image-png-padded")(image_case("image/segmentation/class/encoded", 1, "fast", batch=4,
                                    padding=[{"tensor": "t0", "value": 9}]))

def loader_case(kind, window, stride=None, batch=3):
    """The continuous_sequence / discrete_sequence loader with min_window == max_window."""
    def make(d):
        files, man = d.gen("seq", 60)
        return dict(files=files, man=man, batch=batch,
                    select=[(f["name"], {}) for f in man["features"] if f["var_len"]],
                    loader={"type": kind, "window": window, "stride": stride})
    return make


case("loader-continuous-5")(loader_case("continuous", 5))
case("loader-continuous-7-stride-3")(loader_case("continuous", 7, 3))
case("loader-continuous-2-stride-9")(loader_case("continuous", 2, 9, batch=4))
case("loader-discrete-1")(loader_case("discrete", 1, batch=5))
case("loader-discrete-4")(loader_case("discrete", 4))


def seq_case(c_dt, f_dt, n_dt, r_dt, endian="little"):
    """Casts and raw decodes of SequenceExample context features and feature lists."""
    def make(d):
        fs = [feature("c", c_dt, [2], "int"),
              feature("r", r_dt, [8 // np.dtype(r_dt).itemsize], "raw", var_len=True,
                      deserialize_args={"endian": endian}),
              feature("f", f_dt, [3], "float", var_len=True),
              feature("n", n_dt, [], "int", var_len=True)]
        return dict(files=d.sequences(), man=manifest(fs, sequence=True),
                    select=[(f["name"], {}) for f in fs], batch=4)
    return make


case("seq-casts-int8")(seq_case("int8", "float16", "int16", "int16"))
case("seq-casts-uint32")(seq_case("uint32", "float64", "uint8", "uint64", "big"))
case("seq-casts-float")(seq_case("float32", "int32", "float16", "float32", "big"))
case("seq-casts-bool")(seq_case("bool", "bool", "bool", "uint8"))


# Where TensorFlow refuses what sluice reads: valid protobuf wire forms that TensorFlow's fast
# Example parser does not take (google.protobuf and sluice do: tests/crosscheck/
# test_random_corpus.py), and an empty Feature with a default. The case's "refused" is what
# sluice must give instead: per tensor, the flat values of the batch and its row splits.


def _wire(pb):
    from common import ld, tag, varint
    f = pb.Feature()
    f.int64_list.value.extend([5, -6])
    feat = f.SerializeToString()
    key, val = ld(1, b"zz"), ld(2, feat)
    group = tag(16, 3) + tag(1, 0) + varint(7) + tag(16, 4)

    def ex(*entries, pre=b""):
        return pre + ld(1, b"".join(ld(1, e) for e in entries))
    return {  # name: (record, the values google.protobuf reads for "zz")
        "group-at-top": (ex(key + val, pre=group), [5, -6]),
        "group-in-entry": (ex(key + group + val), [5, -6]),
        "unknown-in-entry": (ex(key + tag(3, 0) + varint(1) + val), [5, -6]),
        "unknown-in-feature": (ex(key + ld(2, tag(9, 0) + varint(1) + feat)), [5, -6]),
        "unknown-in-features": (ld(1, ld(1, key + val) + tag(5, 0) + varint(1)), [5, -6]),
        "entry-without-key": (ex(val), []),  # the key is "", not "zz"
        "entry-without-value": (ex(key), []),  # Feature{}
        "entry-key-twice": (ex(ld(1, b"yy") + key + val), [5, -6]),  # the last key wins
        "entry-value-twice": (ex(key + val + val), [5, -6, 5, -6]),  # the messages merge
    }


def wire_case(name):
    def make(d):
        pb = common.protos()[0]
        rec, want = _wire(pb)[name]
        msg = pb.Example()
        msg.ParseFromString(rec)  # google.protobuf takes it, and reads want
        got = list(msg.features.feature["zz"].int64_list.value)
        assert got == want, name
        files = d.write("wire-" + name, [rec])
        return dict(files=files, man=manifest([feature("zz", "int64", [-1], "int")]),
                    select=[("zz", {})], batch=1, refused={"t0": (want, [0, len(want)])})
    return make


for _w in ("group-at-top", "group-in-entry", "unknown-in-entry", "unknown-in-feature",
           "unknown-in-features", "entry-without-key", "entry-without-value", "entry-key-twice",
           "entry-value-twice"):
    case("wire-" + _w)(wire_case(_w))


@case("default-empty-feature")
def _default_empty(d):
    pb = common.protos()[0]
    recs = []
    for empty in (True, False):
        ex = pb.Example()
        if empty:
            ex.features.feature["a"].int64_list.SetInParent()  # an empty int64_list
        else:
            ex.features.feature["a"].SetInParent()  # Feature{}
        recs.append(ex.SerializeToString())
    return dict(files=d.write("default-empty", recs),
                man=manifest([feature("a", "int64", [2], "int", default=[4, -4])]),
                select=[("a", {})], batch=2, refused={"t0": ([4, -4, 4, -4], None)})


# ---- running both --------------------------------------------------------------------------


def build(cid, c, tmp):
    """Write the manifest, list and spec of a case; return (spec path, TensorFlow run)."""
    d = os.path.join(tmp, "case-%d" % sorted(CASES).index(cid))
    os.makedirs(d, exist_ok=True)
    mpath, lpath, spath = (os.path.join(d, x) for x in ("manifest.json", "files.list",
                                                       "spec.json"))
    with open(mpath, "w") as f:
        json.dump(c["man"], f)
    with open(lpath, "w") as f:
        f.write("".join(p + "\n" for p, _ in c["files"]))
    byname = {f["name"]: f for f in c["man"]["features"]}
    feats, steps = [], []
    for i, (name, extra) in enumerate(c["select"]):
        to = "t%d" % i
        feats.append(dict(byname[name], to=to, **extra))
        if "slice" in extra:
            steps.append({"tensor": to, "type": "slice", "args": {"slice": extra["slice"]}})
        if "image" in extra:
            steps.append({"tensor": to, "type": "decode_image", "args": extra["image"]})
    pad = c.get("padding")
    lo = c.get("loader")
    spec = {"type": lo["type"] + "_sequence" if lo else "independent", "args": {
        "dataset": {"type": "list", "args": {"manifest_file": mpath, "list_file": lpath}},
        "target_batch_size": c["batch"], "drop_remainder": False, "epochs": 1,
        "num_read_buffer_bytes": 65536, "num_prefetch": 2, "num_parallel_reads": 1,
        "primary_features": [{"from_name": f["name"], "to_name": f["to"]} for f in feats],
        "processing_steps": steps, "padding": pad or False}}
    if lo:
        spec["args"].update(min_window=lo["window"], max_window=lo["window"])
        if lo["type"] == "continuous":
            spec["args"]["stride"] = lo["stride"]
    with open(spath, "w") as f:
        json.dump(spec, f)
    run = {"files": [list(x) for x in c["files"]], "batch": c["batch"],
           "drop_remainder": False, "sequence": bool(c["man"].get("allow_var_len")),
           "features": feats, "out": os.path.join(d, "tf"), "loader": lo,
           "padding": None if not pad else {} if pad is True else
           {p["tensor"]: {k: p.get(k) for k in ("shape", "value")} for p in pad}}
    return spath, run


@pytest.fixture(scope="module")
def oracle(tmp_path_factory):
    """Every case built, and TensorFlow's batches of all of them from one process:
    {case id: (spec path, run, batches, or the message when TensorFlow failed, case)}."""
    tmp = str(tmp_path_factory.mktemp("oracle"))
    data = Data(tmp)
    built = {cid: (c,) + build(cid, c, tmp) for cid, c in
             ((cid, CASES[cid](data)) for cid in sorted(CASES))}
    cp = os.path.join(tmp, "tf.json")
    with open(cp, "w") as f:
        json.dump({"runs": [b[2] for b in built.values()]}, f)
    t = subprocess.run([TF, os.path.join(SRC, "tests", "crosscheck", "tf_oracle.py"), cp],
                       capture_output=True, text=True, timeout=1200,
                       env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2"))
    assert t.returncode == 0, t.stderr[-3000:]
    counts = dict(line.rsplit(" ", 1) for line in t.stdout.splitlines() if line.strip())
    out = {}
    for cid, (c, spath, run) in built.items():
        n = int(counts[run["out"]])
        if n < 0:
            with open(os.path.join(run["out"], "error")) as f:
                theirs = f.read()
        else:
            theirs = [dict(np.load(os.path.join(run["out"], "batch_%05d.npz" % i)))
                      for i in range(n)]
        out[cid] = (spath, run, theirs, c)
    return out


def run_sluice(spath, feats):
    r = ctl("run", spath, "--json", "--values", ",".join(f["to"] for f in feats))
    assert r.returncode == 0, r.stderr
    # a float -0.0 prints as "-0", which json reads as the integer 0
    return [json.loads(x, parse_int=lambda s: -0.0 if s == "-0" else int(s))
            for x in r.stdout.splitlines() if x.strip()]


# ---- comparing -----------------------------------------------------------------------------


def sluice_cast(src, dtype):
    """The casts of docs/pipeline-semantics.md as a numpy model: integers wrap; floats to an
    integer truncate toward zero, NaN gives 0, out of range saturates; to bool, != 0."""
    if dtype == "bool" or src.dtype.kind == "i" or np.dtype(dtype).kind == "f":
        with np.errstate(over="ignore"):  # to float16: inf, as the rule says
            return src.astype(dtype)
    info = np.iinfo(dtype)
    out = [0 if math.isnan(v) else info.max if v >= info.max + 1 else info.min
           if v <= info.min - 1 else int(v) for v in src.astype(np.float64).tolist()]
    return np.array(out, dtype)


def departs(src, dtype):
    """The elements where sluice departs from tf.cast on purpose (docs/pipeline-semantics.md):
    float → integer of NaN or of a value out of the integer's range (C leaves it undefined;
    TensorFlow gives what the CPU's conversion instruction gives), and float32 subnormals
    (TensorFlow's CPU kernels run with denormals flushed to zero; sluice keeps IEEE)."""
    if src.dtype.kind != "f":
        return np.zeros(src.shape, bool)
    v = src.astype(np.float64)
    sub = (v != 0) & (np.abs(v) < np.finfo(np.float32).tiny)
    if np.dtype(dtype).kind not in "iu":
        return sub
    info = np.iinfo(dtype)
    with np.errstate(invalid="ignore"):
        t = np.trunc(v)
        return sub | np.isnan(v) | (t >= float(info.max) + 1) | (t < float(info.min))


def same(a, b):
    """Elementwise: the same bits, or both NaN (JSON carries no NaN payload: the digest
    compares those bits)."""
    if a.dtype.kind != "f":
        return a == b
    u = np.dtype("u%d" % a.dtype.itemsize)
    return (a.view(u) == b.view(u)) | (np.isnan(a) & np.isnan(b))


def digest(splits, offsets, data):
    crc = 0
    for b in (splits, offsets):
        if b is not None:
            crc = zlib.crc32(np.ascontiguousarray(b, "<i8").tobytes(), crc)
    return "%08x" % zlib.crc32(data, crc)


def tf_tensor(t, name):
    """TensorFlow's tensor from the .npz: (flat values: ndarray, or list of bytes for
    strings; string offsets or None; row splits or None; dense shape or None)."""
    if name + ".bytes" in t:
        raw, offs = t[name + ".bytes"].tobytes(), t[name + ".offsets"]
        vals = [raw[offs[i]:offs[i + 1]] for i in range(len(offs) - 1)]
    else:
        vals, offs = t[name], None
    return vals, offs, t.get(name + ".splits"), t.get(name + ".shape")


def check_tensor(x, t, f, rows, where, c, first_row):
    name = f["to"]
    vals, offs, splits, shape = tf_tensor(t, name)
    want_dt = "uint8" if "image" in f else f["dtype"]
    assert x["dtype"] == want_dt, "%s: dtype %s, want %s" % (where, x["dtype"], want_dt)
    if x["ragged"] and splits is None and len(shape) > 1:
        # sluice keeps a variable first axis ragged when its rows happen to be of one length
        # (a var_len or [-1] feature, an image before a crop); TensorFlow's batch is dense
        splits = np.arange(rows + 1, dtype=np.int64) * shape[1]
    assert bool(x["ragged"]) == (splits is not None), "%s: ragged %s" % (where, x["ragged"])
    if splits is not None:
        assert x["row_splits"] == splits.tolist(), "%s: row splits" % where
    else:
        assert x["shape"] == shape.tolist(), "%s: shape %s, TensorFlow %s" % (
            where, x["shape"], shape.tolist())
    if want_dt == "string":
        got = [v.encode("latin-1") for v in x["values"]]
        assert got == vals, "%s: values differ" % where
        assert x["digest"] == digest(splits, offs, b"".join(vals)), "%s: digest" % where
        return
    got = np.array([float(v) if isinstance(v, str) else v for v in x["values"]],
                   dtype=want_dt).reshape(-1)
    want = np.array(vals, want_dt)
    if want_dt == "bool":  # decode_raw's bool keeps the byte (0x80 is true), as sluice's does
        bits, want = want, want.view(np.uint8) != 0
    else:
        bits = None
    assert got.shape == want.shape, "%s: %s values, TensorFlow %s" % (where, got.shape,
                                                                       want.shape)
    model = (c.get("model") or {}).get(f["name"])
    if model is not None:  # a cast: TensorFlow, but the documented rule where sluice departs
        src = np.concatenate(model[0][first_row:first_row + rows])
        rule = sluice_cast(src, model[1])
        bad = np.flatnonzero(~same(got, rule))
        assert not len(bad), "%s: %d values differ from the documented casts, first %r → " \
            "sluice %r, rule %r" % (where, len(bad), src[bad[0]], got[bad[0]], rule[bad[0]])
        mask = departs(src, model[1])
        want = want.copy()
        want[mask] = rule[mask]
        if bits is not None:
            bits = bits.copy()
            bits[mask] = rule[mask]
    # the tolerance is for PNGs only: a batch of JPEGs must be exact
    tol = c.get("tolerance") if t.get(name + ".png", np.ones(1, bool)).any() else None
    if tol is not None and not same(got, want).all():
        diff = np.abs(got.astype(np.int64) - want.astype(np.int64))
        assert diff.max() <= tol["max"] and diff.mean() <= tol["mean"], \
            "%s: max abs difference %d, mean %.4f (bound %s)" % (where, diff.max(),
                                                                diff.mean(), tol)
        return
    bad = np.flatnonzero(~same(got, want))
    assert not len(bad), "%s: %d values differ, first at %d: sluice %r, TensorFlow %r" % (
        where, len(bad), bad[0], got[bad[0]], want[bad[0]])
    assert x["digest"] == digest(splits, None, (want if bits is None else bits).tobytes()), \
        "%s: digest" % where


def compare(ours, theirs, c, run, what):
    assert len(ours) == len(theirs), "%s: %d batches, TensorFlow %d" % (what, len(ours),
                                                                         len(theirs))
    first = 0
    for k, (o, t) in enumerate(zip(ours, theirs)):
        for f in run["features"]:
            where = "%s batch %d feature %s" % (what, k, f["name"])
            check_tensor(o["tensors"][f["to"]], t, f, o["rows"], where, c, first)
        first += o["rows"]


@pytest.mark.parametrize("cid", sorted(CASES))
def test_against_tensorflow(cid, oracle):
    spath, run, theirs, c = oracle[cid]
    if c.get("refused"):
        assert isinstance(theirs, str), "%s: TensorFlow now takes it: the difference " \
            "documented in docs/pipeline-semantics.md is gone" % cid
        ours = run_sluice(spath, run["features"])
        assert len(ours) == 1, cid
        for to, (values, splits) in c["refused"].items():
            x = ours[0]["tensors"][to]
            assert x["values"] == values, "%s: %s" % (cid, x["values"])
            assert x.get("row_splits") == splits, "%s: %s" % (cid, x.get("row_splits"))
        return
    assert not isinstance(theirs, str), "TensorFlow failed: %s" % theirs
    compare(run_sluice(spath, run["features"]), theirs, c, run, cid)
