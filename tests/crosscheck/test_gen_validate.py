# SPDX-License-Identifier: Apache-2.0
# sluicectl gen + validate: generated datasets pass, tampered ones fail with the exact problem.
"""Cross-check `sluicectl validate` against datasets written by `sluicectl gen`, against
records framed and encoded here by an independent (pure Python) writer, and against a real
TensorFlow-written file from the shared testdata.

Environment: SLUICECTL (the binary), SLUICE_SHARED_DIR (optional: the mnist check is skipped
without it). Output: TAP (common.check), for meson.
"""

import json
import os
import re
import shutil
import struct
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import common  # noqa: E402

SLUICECTL = os.environ.get("SLUICECTL", "")
SHARED = os.environ.get("SLUICE_SHARED_DIR", "")
MNIST = "tensorflow+tfx__tfx_examples_mnist_data_mnist.tfrecord"

check = common.check  # a TAP case (common.finish counts the failures)


def run(args, env_extra=None):
    env = dict(os.environ)
    env.pop("SLUICE_IO_ENGINE", None)
    if env_extra:
        env.update(env_extra)
    p = subprocess.run([SLUICECTL] + args, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                       env=env, timeout=300)
    return p.returncode, p.stdout.decode("utf-8", "replace"), p.stderr.decode("utf-8", "replace")


def kv_line(out, prefix):
    """The key=value pairs of the line that starts with prefix ("counts:", "problems:")."""
    for line in out.splitlines():
        if line.startswith(prefix):
            return {k: v for k, v in re.findall(r"(\w+)=(\S+)", line)}
    return {}


def counts(out):
    c = kv_line(out, "counts:")
    p = kv_line(out, "problems:")
    r = {k: int(v) for k, v in c.items()}
    r.update({"p_" + k: int(v) for k, v in p.items()})
    return r


def validate(args, env_extra=None):
    rc, out, err = run(["validate"] + args, env_extra)
    return rc, out, err, counts(out)


# ---- an independent writer: CRC32C, TFRecord framing, Example encoding ----

crc32c, frame, varint, ld = common.crc32c, common.frame, common.varint, common.ld


def feature(kind, values):
    if kind == "int":
        body = ld(1, b"".join(varint(v) for v in values))
        return ld(3, body)
    if kind == "float":
        return ld(2, ld(1, b"".join(struct.pack("<f", v) for v in values)))
    return ld(1, b"".join(ld(1, v) for v in values))


def example(feats):
    """feats: {name: (kind, [values])} -> serialized tf.train.Example."""
    entries = b"".join(ld(1, ld(1, n.encode()) + ld(2, feature(k, v)))
                       for n, (k, v) in feats.items())
    return ld(1, entries)


def write_tfrecords(path, payloads):
    with open(path, "wb") as f:
        for p in payloads:
            f.write(frame(p))


def record_offsets(path):
    """(offset, length) of each record of an uncompressed TFRecord file."""
    out = []
    with open(path, "rb") as f:
        data = f.read()
    off = 0
    while off < len(data):
        (n,) = struct.unpack_from("<Q", data, off)
        out.append((off, n))
        off += 12 + n + 4
    return out


def manifest(feats, compression=None, allow_var_len=False):
    return {"compression": compression, "allow_var_len": allow_var_len, "features": feats}


def write_json(path, obj):
    with open(path, "w") as f:
        json.dump(obj, f, indent=1)


def load_manifest(d):
    with open(os.path.join(d, "__manifest__.json")) as f:
        return json.load(f)


def copy_dataset(src, dst):
    shutil.copytree(src, dst)
    return dst


def data_files(d):
    return sorted(os.path.join(d, n) for n in os.listdir(d) if n.endswith(".tfrecords"))


# ---- the checks ----

RECORDS = {"ctr": 300, "image": 40, "seq": 50}


def gen(kind, outdir, compression, files=3, seed=1):
    rc, out, err = run(["gen", kind, outdir, "--files", str(files), "--records",
                        str(RECORDS[kind]), "--compression", compression, "--seed", str(seed)])
    check(rc == 0, "gen %s %s (%s)" % (kind, compression, err.strip()))
    return rc == 0


def test_generated(tmp):
    for kind in ("ctr", "image", "seq"):
        for comp in ("none", "gzip", "zlib"):
            d = os.path.join(tmp, "%s-%s" % (kind, comp))
            if not gen(kind, d, comp):
                continue
            rc, out, err, c = validate([d])
            name = "validate %s %s" % (kind, comp)
            check(rc == 0, name + ": exit 0 (%d: %s)" % (rc, err.strip()))
            check(c.get("records") == RECORDS[kind] and c.get("files") == 3,
                  name + ": records=%s files=%s" % (c.get("records"), c.get("files")))
            check(c.get("p_total") == 0 and "result: valid" in out, name + ": no problems")
            rc2, out2, _, c2 = validate([d, "--threads", "1"], {"SLUICE_IO_ENGINE": "pread"})
            check(rc2 == 0 and c2 == c, name + ": pread engine, 1 thread: same counts")
            check(re.search(r"^engine: pread", out2, re.M) is not None,
                  name + ": pread engine reported")
            rc3, out3, _, c3 = validate([d, "--no-pool"])
            check(rc3 == 0 and c3 == c, name + ": decoding on the reading threads: same counts")
            check(re.search(r"^speed: threads=", out3, re.M) is not None and
                  re.search(r"^speed: workers=", out, re.M) is not None,
                  name + ": pool and no-pool runs say which they were")


def test_tampered_manifests(tmp, base):
    n = RECORDS["ctr"]
    m0 = load_manifest(base)

    def with_manifest(tag, mutate):
        d = copy_dataset(base, os.path.join(tmp, "ctr-" + tag))
        m = json.loads(json.dumps(m0))
        mutate(m)
        write_json(os.path.join(d, "__manifest__.json"), m)
        return validate([d, "--max-errors", "5"])

    def feat(m, name):
        return next(f for f in m["features"] if f["name"] == name)

    # shape disagrees: dense3 declared [2], records hold 1 value
    rc, out, _, c = with_manifest("shape", lambda m: feat(m, "dense3").update(shape=[2]))
    check(rc == 1 and c.get("p_shape") == n and c.get("p_total") == n,
          "shape [2]: %d shape problems (got %s)" % (n, c))
    check(re.search(r'part-\S+\.tfrecords: record 0 \(offset 0\): feature "dense3": '
                    r'expected 2 values \(shape \[2\]\), got 1', out) is not None,
          "shape [2]: message names file, record, offset, feature")
    check(len([l for l in out.splitlines() if 'feature "dense3"' in l]) == 5,
          "shape [2]: --max-errors 5 prints 5 problems")

    # int8 for ids up to 2000 (sparse1: vocabulary 2000)
    rc, out, _, c = with_manifest("int8", lambda m: feat(m, "sparse1").update(dtype="int8"))
    vals = [int(v) for v in re.findall(r'"sparse1": expected values that fit int8, got (-?\d+)',
                                       out)]
    check(rc == 1 and c.get("p_dtype", 0) > 0 and c.get("p_total") == c.get("p_dtype"),
          "int8: dtype problems only (%s)" % c)
    check(vals and all(v > 127 or v < -128 for v in vals), "int8: reported values out of range")

    # label is 0/1: bool and int8 fit; uint8 fits too
    for dt in ("bool", "int8", "uint8"):
        rc, out, _, c = with_manifest("label-" + dt,
                                      lambda m, dt=dt: feat(m, "label").update(dtype=dt))
        check(rc == 0, "label as %s: valid" % dt)

    # a feature the records do not have
    def add_missing(m):
        m["features"].append({"name": "nonexistent", "dtype": "int64", "shape": [1],
                              "deserialize_type": "int"})
    rc, out, _, c = with_manifest("missing", add_missing)
    check(rc == 1 and c.get("p_missing") == n and c.get("bad_records") == n,
          "missing feature: %d missing (%s)" % (n, c))
    check('feature "nonexistent": expected int64_list' in out and "got no such feature" in out,
          "missing feature: message")

    # the wrong list kind
    rc, out, _, c = with_manifest("kind", lambda m: feat(m, "dense0").update(
        deserialize_type="int", dtype="int64"))
    check(rc == 1 and c.get("p_kind") == n, "kind: %d kind problems (%s)" % (n, c))
    check('feature "dense0": expected int64_list (deserialize_type int), got float_list' in out,
          "kind: message")


def test_flipped_byte(tmp, base):
    n = RECORDS["ctr"]
    d = copy_dataset(base, os.path.join(tmp, "ctr-flip"))
    path = data_files(d)[1]
    recs = record_offsets(path)
    off, ln = recs[len(recs) // 2]
    with open(path, "r+b") as f:
        f.seek(off + 12 + ln // 2)
        b = f.read(1)
        f.seek(off + 12 + ln // 2)
        f.write(bytes([b[0] ^ 0x40]))
    rc, out, _, c = validate([d])
    check(rc == 1 and c.get("p_framing") == 1 and c.get("p_total") == 1,
          "flipped byte: one framing problem (%s)" % c)
    check(c.get("records") == n - 1, "flipped byte: the other records are read (%s)" %
          c.get("records"))
    line = next((l for l in out.splitlines() if "CRC" in l), "")
    check(path in line and ("offset %d" % off) in line and "data CRC mismatch" in line,
          "flipped byte: CRC problem names %s at offset %d: %r" % (os.path.basename(path), off,
                                                                    line))
    rc2, _, _, c2 = validate([d], {"SLUICE_IO_ENGINE": "pread"})
    check(rc2 == 1 and c2 == c, "flipped byte: pread engine agrees")
    rc3, out3, _, c3 = validate([d, "--no-pool"])
    check(rc3 == 1 and c3 == c, "flipped byte: decoding on the reading threads agrees")
    line3 = next((l for l in out3.splitlines() if "CRC" in l), "")
    check(line3 == line, "flipped byte: the same CRC message with and without the pool")

    # a truncated gzip stream
    g = os.path.join(tmp, "ctr-gzip")
    if os.path.isdir(g):
        d = copy_dataset(g, os.path.join(tmp, "ctr-gzip-cut"))
        path = data_files(d)[0]
        size = os.path.getsize(path)
        os.truncate(path, size // 2)
        rc, out, _, c = validate([d])
        check(rc == 1 and c.get("p_framing", 0) >= 1 and os.path.basename(path) in out,
              "truncated gzip: framing problem naming the file (%s)" % c)


def test_list_dataset(tmp, base):
    n = RECORDS["ctr"]
    files = data_files(base)
    lst = os.path.join(tmp, "ctr.list")
    with open(lst, "w") as f:
        f.write("# the files of ctr-none\n\n")
        for p in files:
            f.write(os.path.relpath(p, tmp) + "\n")
    man = os.path.join(base, "__manifest__.json")
    rc, out, _, c = validate([man, lst])
    check(rc == 0 and c.get("records") == n and c.get("files") == len(files),
          "list dataset: valid, %d records (%s)" % (n, c))
    flip = os.path.join(tmp, "ctr-flip")
    if os.path.isdir(flip):
        with open(lst, "w") as f:
            for p in data_files(flip):
                f.write(p + "\n")
        rc, out, _, c = validate([man, lst])
        check(rc == 1 and c.get("p_framing") == 1, "list dataset with a flipped byte: invalid")
    rc, _, err, _ = validate([man, os.path.join(tmp, "no-such.list")])
    check(rc == 1 and err, "list dataset: a missing list file is an error")


def test_crafted(tmp):
    """Records written here: dtype ranges, float16 overflow, raw byte strings."""
    d = os.path.join(tmp, "crafted")
    os.makedirs(d)
    recs = []
    for i in range(10):
        f = {
            "flag": ("int", [i % 2]),
            "small": ("int", [i, -i]),
            "f16": ("float", [1.5, 70000.0 if i == 7 else 65504.0]),
            "pix": ("bytes", [bytes(range(12))]),
            "vecs": ("bytes", [struct.pack("<4f", 1, 2, 3, 4), struct.pack("<4f", 5, 6, 7, 8)]),
            "any": ("bytes", [b"\x00\x01" * (i + 1)]),
            "name": ("bytes", [b"x%d" % i]),
            "big": ("int", [-(1 << 40)]),
        }
        recs.append(example(f))
    write_tfrecords(os.path.join(d, "a.tfrecords"), recs)
    feats = [
        {"name": "flag", "dtype": "bool", "shape": [], "deserialize_type": "int"},
        {"name": "small", "dtype": "int8", "shape": [2], "deserialize_type": "int"},
        {"name": "f16", "dtype": "float16", "shape": [2], "deserialize_type": "float"},
        {"name": "pix", "dtype": "uint8", "shape": [3, 4], "deserialize_type": "raw",
         "deserialize_args": {"endian": "little"}},
        {"name": "vecs", "dtype": "float32", "shape": [4], "deserialize_type": "raw",
         "deserialize_args": {"endian": "little", "len": 2}},
        {"name": "any", "dtype": "int16", "shape": [-1], "deserialize_type": "raw",
         "deserialize_args": {"endian": "big"}},
        {"name": "name", "dtype": "string", "shape": [1], "deserialize_type": "string"},
        {"name": "big", "dtype": "int64", "shape": [1], "deserialize_type": "int"},
    ]
    write_json(os.path.join(d, "__manifest__.json"), manifest(feats))
    rc, out, err, c = validate([d])
    check(rc == 1 and c.get("records") == 10 and c.get("p_total") == 1 and
          c.get("p_dtype") == 1, "crafted: only the float16 overflow (%s %s)" % (c, err))
    check(re.search(r'a\.tfrecords: record 7 \(offset \d+\): feature "f16": expected values '
                    r'that fit float16, got 70000 at index 1', out) is not None,
          "crafted: float16 overflow message")

    def variant(tag, mutate, want_cls, want_msg):
        m = manifest(json.loads(json.dumps(feats)))
        mutate(m["features"])
        d2 = os.path.join(tmp, "crafted-" + tag)
        os.makedirs(d2)
        shutil.copy(os.path.join(d, "a.tfrecords"), d2)
        write_json(os.path.join(d2, "__manifest__.json"), m)
        rc, out, err, c = validate([d2])
        want = c.get("p_" + want_cls, 0)
        check(rc == 1 and want > 0 and want_msg in out,
              "crafted %s: %s problem %r (%s %s)" % (tag, want_cls, want_msg, c, err.strip()))

    def setf(name, **kw):
        return lambda fs: next(f for f in fs if f["name"] == name).update(**kw)

    variant("f16", lambda fs: None, "dtype", '"f16"')
    variant("pix-shape", setf("pix", shape=[5, 2]), "raw",
            'feature "pix": expected 10 uint8 elements (shape [5, 2]) = 10 bytes, got 12 bytes')
    variant("pix-size", setf("pix", dtype="float64", shape=[-1]), "raw",
            'feature "pix": expected a byte length divisible by 8 (float64), got 12 bytes')
    variant("vecs-len", setf("vecs", deserialize_args={"endian": "little", "len": 3}), "shape",
            'feature "vecs": expected 3 byte strings of raw float32 (deserialize_args.len), got 2')
    variant("any-multiple", setf("any", dtype="int32", shape=[-1]), "raw",
            'feature "any": expected a byte length divisible by 4 (int32), got 2 bytes')
    variant("flag-int", setf("small", dtype="bool"), "dtype",
            'feature "small": expected values that fit bool, got -1 at index 1')
    variant("big-int32", setf("big", dtype="int32"), "dtype",
            'feature "big": expected values that fit int32, got -1099511627776')
    variant("big-uint64", setf("big", dtype="uint64"), "dtype",
            'feature "big": expected values that fit uint64')

    # variable-length features and defaults: missing or empty is fine, the count is checked
    d4 = os.path.join(tmp, "crafted-varlen")
    os.makedirs(d4)
    recs = []
    for i in range(6):
        f = {"id": ("int", [i])}
        if i % 3:
            f["toks"] = ("int", list(range(i)))
            f["boxes"] = ("float", [0.5] * (4 * i))
            f["opt"] = ("bytes", [b"o"])
        recs.append(example(f))
    recs.append(example({"id": ("int", [6]), "boxes": ("float", [1.0] * 6)}))
    write_tfrecords(os.path.join(d4, "v.tfrecords"), recs)
    vfeats = [
        {"name": "id", "dtype": "int64", "shape": [], "deserialize_type": "int"},
        {"name": "toks", "dtype": "int32", "shape": [-1], "deserialize_type": "int"},
        {"name": "boxes", "dtype": "float32", "shape": [-1, 4], "deserialize_type": "float"},
        {"name": "opt", "dtype": "string", "shape": [], "deserialize_type": "string",
         "default": ""},
    ]
    write_json(os.path.join(d4, "__manifest__.json"), manifest(vfeats))
    rc, out, err, c = validate([d4])
    check(rc == 1 and c.get("records") == 7 and c.get("p_total") == 1 and
          c.get("p_missing") == 0 and
          re.search(r'v\.tfrecords: record 6 \(offset \d+\): feature "boxes": expected a '
                    r'multiple of 4 values \(shape \[-1, 4\]\), got 6', out) is not None,
          "var-length and default features: only record 6's 6 box values (%s %s)" %
          (c, err.strip()))
    del vfeats[3]["default"]
    write_json(os.path.join(d4, "__manifest__.json"), manifest(vfeats))
    rc, out, err, c = validate([d4])
    check(rc == 1 and c.get("p_missing") == 3,
          "without its default, a missing feature is a problem (%s)" % c)

    # not an Example at all: a decode problem per record, file and offset named
    d3 = os.path.join(tmp, "crafted-garbage")
    os.makedirs(d3)
    write_tfrecords(os.path.join(d3, "g.tfrecords"), [b"\x0a\x05\x0a\x03", example({})])
    write_json(os.path.join(d3, "__manifest__.json"), manifest(feats[:1]))
    rc, out, err, c = validate([d3])
    check(rc == 1 and c.get("p_decode") == 1 and c.get("p_missing") == 1 and
          re.search(r"g\.tfrecords: record 0 \(offset 0\): expected a valid Example", out),
          "garbage record: decode problem, empty Example: missing (%s)" % c)


def test_missing_feature_list_has_zero_steps(tmp):
    """Regression: validate reported a SequenceExample record without one of the manifest's
    feature lists as a "missing" problem; docs/DECISIONS.md and the pipeline read it as zero
    steps."""
    def seq(ctx, lists):
        fl = b"".join(ld(1, ld(1, n.encode()) + ld(2, b"".join(ld(1, feature(k, v))
                                                               for k, v in steps)))
                      for n, steps in lists.items())
        return example(ctx) + ld(2, fl)

    d = os.path.join(tmp, "seq-missing-list")
    os.makedirs(d)
    recs = [seq({"n": ("int", [2])}, {"tok": [("int", [1]), ("int", [2])]}),
            seq({"n": ("int", [0])}, {}),
            example({"n": ("int", [0])})]
    write_tfrecords(os.path.join(d, "s.tfrecords"), recs)
    feats = [{"name": "n", "dtype": "int64", "shape": [], "var_len": False,
              "deserialize_type": "int"},
             {"name": "tok", "dtype": "int64", "shape": [], "var_len": True,
              "deserialize_type": "int"}]
    write_json(os.path.join(d, "__manifest__.json"), manifest(feats, allow_var_len=True))
    rc, out, err, c = validate([d])
    check(rc == 0 and c.get("records") == 3 and c.get("p_total") == 0,
          "a feature list missing from records 1 and 2: zero steps, valid (%s %s)" % (c, err))
    feats[1]["shape"] = [2]
    write_json(os.path.join(d, "__manifest__.json"), manifest(feats, allow_var_len=True))
    rc, out, err, c = validate([d])
    check(rc == 1 and c.get("p_shape") == 2 and c.get("p_missing") == 0,
          "the steps that are there are still checked (%s)" % c)


def test_mnist(tmp):
    if not SHARED:
        common.skip_case("mnist", "[env] SLUICE_SHARED_DIR is not set")
        return
    src = os.path.join(SHARED, "testdata", MNIST)
    if not os.path.exists(src):
        common.skip_case("mnist", "[testdata] %s is absent" % src)
        return
    man = os.path.join(tmp, "mnist.json")
    write_json(man, manifest([
        {"name": "image_class", "dtype": "int64", "shape": [1], "deserialize_type": "int"},
        {"name": "image_floats", "dtype": "float32", "shape": [784], "deserialize_type": "float"},
    ]))
    lst = os.path.join(tmp, "mnist.list")
    with open(lst, "w") as f:
        f.write(src + "\n")
    rc, out, err, c = validate([man, lst])
    check(rc == 0 and c.get("records") == 1000 and c.get("p_total") == 0,
          "mnist: 1000 records valid (%s %s)" % (c, err.strip()))
    rc, out, err, c = validate([man, lst], {"SLUICE_IO_ENGINE": "pread"})
    check(rc == 0 and c.get("records") == 1000, "mnist: pread engine")
    # image_class as uint8 fits (classes 0..9); as shape [2] it does not
    m = manifest([
        {"name": "image_class", "dtype": "uint8", "shape": [2], "deserialize_type": "int"},
    ])
    write_json(man, m)
    rc, out, err, c = validate([man, lst])
    check(rc == 1 and c.get("p_shape") == 1000, "mnist: shape [2] -> 1000 shape problems")


def test_usage(tmp):
    rc, _, _, _ = validate([])
    check(rc == 2, "validate without arguments: exit 2")
    rc, _, _, _ = validate([tmp, "--threads", "x"])
    check(rc == 2, "validate --threads x: exit 2")
    rc, _, _, _ = validate([tmp, "--bogus"])
    check(rc == 2, "validate --bogus: exit 2")
    rc, _, err, _ = validate([os.path.join(tmp, "nope")])
    check(rc == 1 and err, "validate of a missing directory: exit 1 with a message")
    rc, out, _ = run(["--help"])
    check(rc == 0 and "validate" in out, "sluicectl --help")
    rc, out, _ = run(["--version"])
    check(rc == 0 and out.startswith("sluicectl "), "sluicectl --version")
    rc, _, _ = run(["frobnicate"])
    check(rc == 2, "unknown command: exit 2")


def main():
    common.start()
    if not SLUICECTL or not os.access(SLUICECTL, os.X_OK):
        common.skip("[env] SLUICECTL is not set to an executable")
    with tempfile.TemporaryDirectory(prefix="sluice-gen-validate-") as tmp:
        test_usage(tmp)
        test_generated(tmp)
        base = os.path.join(tmp, "ctr-none")
        if os.path.isdir(base):
            test_tampered_manifests(tmp, base)
            test_flipped_byte(tmp, base)
            test_list_dataset(tmp, base)
        test_crafted(tmp)
        test_missing_feature_list_has_zero_steps(tmp)
        test_mnist(tmp)
    common.finish()


if __name__ == "__main__":
    sys.exit(main())
