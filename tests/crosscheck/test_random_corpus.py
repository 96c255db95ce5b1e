# SPDX-License-Identifier: Apache-2.0
# Cross-check: random (Sequence)Examples from google.protobuf, read back by sluicectl inspect.
"""A seeded random corpus, encoded by google.protobuf (packed and unpacked) and by a raw wire
builder that exercises protobuf's merge rules (fields in any order, repeated keys, concatenated
messages, unknown fields of every wire type). Each record is written into TFRecord files (none,
gzip, zlib, multi-member gzip) and `sluicectl inspect --json` must print exactly what
google.protobuf's ParseFromString reads. Then single-byte mutations of records: sluice must
accept what google.protobuf accepts (with the same content) and reject what it rejects.
"""

import gzip
import os
import random
import re
import struct
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import common  # noqa: E402

SEED = int(os.environ.get("SLUICE_CROSSCHECK_SEED", "20240611"))
N_EXAMPLES = 2500
N_SEQUENCES = 800
N_MUTATIONS = 400

ck = common.Checker("test_random_corpus")
pb, pbu = common.protos()
common.sluicectl_path()
rng = random.Random(SEED)

try:
    import numpy
except ImportError:
    numpy = None

# ---- random values -------------------------------------------------------------------------

NAMES = ["", "a", "label", "image/encoded", "x" * 300, "名前", "émoji 😀", "tab\there",
         "quote\"and\\back", "nul\x00in", "del\x7f", "ctrl\x01\x1f", "\u2028line", "Z", "a/b/c",
         "\ufeffbom", "\U0010ffff", "label2", "A"]

INT_SPECIAL = [0, 1, -1, 2**63 - 1, -2**63, 2**31 - 1, -2**31, 2**32, 127, 128, -128, 300,
               2**56, -2**56 - 1, 2**62]

F32_SPECIAL_BITS = [0x00000000, 0x80000000, 0x7F800000, 0xFF800000, 0x7FC00000, 0xFFC00000,
                    0x7F800001, 0x00000001, 0x80000001, 0x007FFFFF, 0x00800000, 0x7F7FFFFF,
                    0xFF7FFFFF, 0x3F800000, 0x3DCCCCCD, 0x4B000001, 0x33800000, 0x1, 0x7FFFFFFF]


def f32_of_bits(b):
    return struct.unpack("<f", struct.pack("<I", b))[0]


def rand_name():
    r = rng.random()
    if r < 0.5:
        return rng.choice(NAMES)
    if r < 0.8:
        return "f%d" % rng.randrange(60)
    return "".join(chr(rng.choice([rng.randrange(0x20, 0x7f), rng.randrange(0xa0, 0x3000),
                                   rng.randrange(0x10000, 0x10400)]))
                   for _ in range(rng.randrange(1, 12)))


def rand_len():
    r = rng.random()
    if r < 0.15:
        return 0
    if r < 0.5:
        return 1
    if r < 0.98:
        return rng.randrange(2, 20)
    return rng.randrange(20, 1000)


def rand_int():
    r = rng.random()
    if r < 0.3:
        return rng.choice(INT_SPECIAL)
    if r < 0.6:
        return rng.randrange(-1000, 1000)
    return rng.randrange(-2**63, 2**63)


def rand_float():
    r = rng.random()
    if r < 0.25:
        return f32_of_bits(rng.choice(F32_SPECIAL_BITS))
    if r < 0.5:
        return f32_of_bits(rng.getrandbits(32))  # every pattern: NaN payloads, denormals
    if r < 0.75:
        return struct.unpack("<f", struct.pack("<f", rng.uniform(-1, 1)))[0]
    return struct.unpack("<f", struct.pack("<f", rng.gauss(0, 1e6)))[0]


def rand_bytes():
    r = rng.random()
    n = 0 if r < 0.15 else rng.randrange(1, 40) if r < 0.995 else rng.randrange(1000, 70000)
    return rng.getrandbits(8 * n).to_bytes(n, "little") if n else b""


def fill_feature(f):
    kind = rng.choice(["none", "bytes", "float", "int64", "float", "int64", "bytes"])
    n = rand_len()
    if kind == "bytes":
        f.bytes_list.SetInParent()
        f.bytes_list.value.extend(rand_bytes() for _ in range(min(n, 50)))
    elif kind == "float":
        f.float_list.SetInParent()
        f.float_list.value.extend(rand_float() for _ in range(n))
    elif kind == "int64":
        f.int64_list.SetInParent()
        f.int64_list.value.extend(rand_int() for _ in range(n))
    return f


def n_features():
    r = rng.random()
    return 0 if r < 0.05 else rng.randrange(1, 12) if r < 0.98 else rng.randrange(100, 200)


def rand_example(mod):
    ex = mod.Example()
    if rng.random() < 0.05:
        return ex  # no features field at all
    ex.features.SetInParent()
    for _ in range(n_features()):
        fill_feature(ex.features.feature[rand_name()])
    return ex


def rand_sequence(mod):
    se = mod.SequenceExample()
    if rng.random() < 0.9:
        se.context.SetInParent()
        for _ in range(rng.randrange(0, 6)):
            fill_feature(se.context.feature[rand_name()])
    if rng.random() < 0.9:
        se.feature_lists.SetInParent()
        for _ in range(rng.randrange(0, 5)):
            fl = se.feature_lists.feature_list[rand_name()]
            for _ in range(rng.choice([0, 1, 2, 3, 10, 30])):
                fill_feature(fl.feature.add())
    return se


def unpacked(msg):
    """The same message, serialized with unpacked repeated scalars."""
    other = getattr(pbu, type(msg).__name__)()
    other.ParseFromString(msg.SerializeToString())
    return other.SerializeToString()


def packed_or_not(msg):
    return unpacked(msg) if rng.random() < 0.4 else msg.SerializeToString()


# ---- a raw wire builder (merge rules, field order, unknown fields) ------------------------

varint, tag, ld = common.varint, common.tag, common.ld


def unknown():
    """Zero or more unknown fields of random wire types (field numbers the schema lacks)."""
    out = b""
    for _ in range(rng.choice([0, 0, 0, 1, 2])):
        field = rng.choice([4, 5, 15, 16, 100, 2**29 - 1])
        wt = rng.choice([0, 1, 2, 3, 5])
        if wt == 0:
            out += tag(field, 0) + varint(rand_int())
        elif wt == 1:
            out += tag(field, 1) + rng.getrandbits(64).to_bytes(8, "little")
        elif wt == 2:
            out += ld(field, rand_bytes()[:30])
        elif wt == 5:
            out += tag(field, 5) + rng.getrandbits(32).to_bytes(4, "little")
        else:  # a group, with something inside
            inner = tag(1, 0) + varint(7) + ld(2, b"in a group")
            if rng.random() < 0.3:
                inner += tag(3, 3) + tag(1, 5) + b"\0\0\0\0" + tag(3, 4)
            out += tag(field, 3) + inner + tag(field, 4)
    return out


def raw_feature():
    """A Feature's bytes: one or two serializations (merged), unknown fields around."""
    parts = [packed_or_not(fill_feature(pb.Feature()))]
    if rng.random() < 0.2:
        parts.append(packed_or_not(fill_feature(pb.Feature())))
    return unknown() + b"".join(parts) + unknown()


def raw_entry(name, value, more=None):
    """A map entry: key 1 and value 2 in either order, sometimes repeated or missing."""
    k = ld(1, name.encode("utf-8"))
    v = ld(2, value)
    r = rng.random()
    if r < 0.6:
        body = k + v
    elif r < 0.75:
        body = v + k
    elif r < 0.8:
        body = ld(1, rand_name().encode("utf-8")) + k + v  # repeated key: the last wins
    elif r < 0.85:
        body = k + v + ld(2, (more or raw_feature)())  # repeated value: the messages merge
    elif r < 0.9:
        body = v  # no key: ""
    elif r < 0.95:
        body = k  # no value: Feature{}
    else:
        body = k + unknown() + v
    return ld(1, unknown() + body + unknown())


def raw_features():
    names = [rand_name() for _ in range(n_features())]
    if names and rng.random() < 0.3:
        names.append(rng.choice(names))  # a key that repeats
    return b"".join(raw_entry(n, raw_feature()) for n in names) + unknown()


def raw_example():
    body = ld(1, raw_features())
    if rng.random() < 0.2:
        body += ld(1, raw_features())  # Example.features twice: merged
    return unknown() + body + unknown()


def raw_feature_list():
    return b"".join(ld(1, raw_feature()) for _ in range(rng.choice([0, 1, 2, 5]))) + unknown()


def raw_sequence():
    ctx = raw_features() if rng.random() < 0.8 else b""
    lists = b"".join(raw_entry(rand_name(), raw_feature_list(), raw_feature_list)
                     for _ in range(rng.randrange(4)))
    parts = [ld(1, ctx), ld(2, lists)]
    if rng.random() < 0.3:
        parts.reverse()
    if rng.random() < 0.2:
        parts.append(ld(2, raw_entry(rand_name(), raw_feature_list(), raw_feature_list)))
    return unknown() + b"".join(parts) + unknown()


# ---- the corpus ----------------------------------------------------------------------------

def make_records(sequence, n):
    recs = []
    rand_msg = rand_sequence if sequence else rand_example
    raw = raw_sequence if sequence else raw_example
    for _ in range(n):
        r = rng.random()
        if r < 0.35:
            recs.append(rand_msg(pb).SerializeToString())
        elif r < 0.5:
            recs.append(unpacked(rand_msg(pb)))
        elif r < 0.6:
            # two messages concatenated = one merged message (duplicate keys: the last wins)
            recs.append(packed_or_not(rand_msg(pb)) + packed_or_not(rand_msg(pb)))
        elif r < 0.65:
            recs.append(b"")  # the empty message
        else:
            recs.append(raw())
    return recs


def float_tokens(obj, out):
    if isinstance(obj, common.FloatTok):
        out.append(str(obj))
    elif isinstance(obj, dict):
        for v in obj.values():
            float_tokens(v, out)
    elif isinstance(obj, list):
        for v in obj:
            float_tokens(v, out)


def sig_digits(s):
    """Significant digits of a decimal token: '-1.50e+03' -> '15'."""
    m = s.lstrip("+-").lower().split("e")[0].replace(".", "").lstrip("0").rstrip("0")
    return m or "0"


def check_shortest(stdout, what):
    """Every finite float is printed with as few digits as numpy's shortest repr."""
    if numpy is None:
        return
    toks = []
    if stdout is None:
        return
    for line in stdout.decode("utf-8").split("\n")[:-1]:
        float_tokens(common.load_json_line(line), toks)
    bad = []
    for t in toks:
        if t in ("NaN", "Infinity", "-Infinity"):
            continue
        f = numpy.float32(f32_of_bits(common.decimal_to_f32_bits(t)))
        want = numpy.format_float_scientific(f, unique=True)
        if len(sig_digits(t)) > len(sig_digits(want)):
            bad.append((t, want))
    ck.check(not bad, "%s: %d of %d floats not shortest, e.g. %r" % (what, len(bad), len(toks),
                                                                     bad[:3]))


def compare_file(path, want, sequence, extra, what):
    try:
        rc, got, err, out = common.inspect_json(path, sequence, extra)
    except ValueError as e:
        ck.check(False, "%s: bad JSON from inspect: %s" % (what, e))
        return None
    ck.check(rc == 0, "%s: inspect exit %d: %s" % (what, rc, err.strip()[:500]))
    ck.check(len(got) == len(want), "%s: %d records, want %d" % (what, len(got), len(want)))
    for i, (g, w) in enumerate(zip(got, want)):
        d = common.first_difference(g, w)
        if not ck.check(d is None, "%s: record %d differs: %s" % (what, i, d)):
            break
    return out


def corpus_test(tmp, sequence, n):
    kind = "sequence" if sequence else "example"
    recs = make_records(sequence, n)
    want = [common.parse_payload(r, sequence) for r in recs]
    stream = b"".join(common.frame(r) for r in recs)
    print("%s corpus: %d records, %d bytes" % (kind, len(recs), len(stream)), flush=True)
    files = []
    for comp in ("none", "gzip", "zlib"):
        path = os.path.join(tmp, "%s.%s.tfrecord" % (kind, comp))
        common.write_tfrecord(path, recs, comp)
        files.append((path, comp))
    # several gzip members, cut at arbitrary bytes (even inside a record)
    cuts = sorted(rng.sample(range(1, len(stream)), 3))
    path = os.path.join(tmp, "%s.multigzip.tfrecord" % kind)
    with open(path, "wb") as f:
        for a, b in zip([0] + cuts, cuts + [len(stream)]):
            f.write(gzip.compress(stream[a:b], mtime=0))
    files.append((path, "gzip"))
    out0 = None
    for path, comp in files:
        name = os.path.basename(path)
        out = compare_file(path, want, sequence, [], name)
        if out0 is None:
            out0 = out
            check_shortest(out, name)
        else:
            ck.check(out == out0, "%s: output differs from the uncompressed file's" % name)
        out = compare_file(path, want, sequence, ["--compression", comp], name + " explicit")
    out = compare_file(files[0][0], want, sequence, ["--chunk-size", "13"], kind + " chunk 13")
    ck.check(out == out0, "%s: --chunk-size 13 output differs" % kind)
    out = compare_file(files[1][0], want, sequence, ["--chunk-size", "1"], kind + " gzip chunk 1")
    ck.check(out == out0, "%s: gzip --chunk-size 1 output differs" % kind)
    return recs


def mutation_test(tmp, recs, sequence):
    """Flip, drop or insert one byte: sluice must accept exactly what google.protobuf accepts."""
    cands = [r for r in recs if 0 < len(r) < 5000]
    good, bad = [], []
    for _ in range(N_MUTATIONS):
        r = bytearray(rng.choice(cands))
        i = rng.randrange(len(r))
        op = rng.random()
        if op < 0.6:
            r[i] ^= 1 << rng.randrange(8)
        elif op < 0.8:
            del r[i]
        else:
            r.insert(i, rng.randrange(256))
        r = bytes(r)
        try:
            good.append((r, common.parse_payload(r, sequence)))
        except Exception:  # DecodeError
            bad.append(r)
    kind = "sequence" if sequence else "example"
    print("%s mutations: google.protobuf accepts %d, rejects %d" % (kind, len(good), len(bad)))
    path = os.path.join(tmp, "mut-good.tfrecord")
    common.write_tfrecord(path, [r for r, _ in good])
    compare_file(path, [w for _, w in good], sequence, [], kind + " accepted mutations")
    # each rejected one after a good record: one record out, then the error naming record 1
    accepted_by_sluice = 0
    for r in bad:
        common.write_tfrecord(path, [b"", r])
        p = common.run(["inspect", "--json"] + (["--sequence"] if sequence else []) + [path])
        if p.returncode == 0 and re.search(rb"\\u00[89a-f][0-9a-f]", p.stdout):
            # google.protobuf checks that proto3 strings (the feature names) are UTF-8; sluice,
            # like TensorFlow's fast parser, takes names as bytes (escaped in the JSON)
            accepted_by_sluice += 1
            continue
        rc, got, err, out = common.inspect_json(path, sequence)
        ck.check(rc == 1 and len(got) == 1 and "record 1" in err,
                 "%s mutation %s: python rejects, sluice exit %d, %d records, %r"
                 % (kind, r.hex()[:120], rc, len(got), err[:300]))
    print("%s mutations rejected by python, accepted by sluice for invalid UTF-8 names: %d"
          % (kind, accepted_by_sluice))


def main():
    print("seed %d" % SEED)
    with tempfile.TemporaryDirectory(prefix="sluice-corpus-") as tmp:
        ex = corpus_test(tmp, False, N_EXAMPLES)
        se = corpus_test(tmp, True, N_SEQUENCES)
        mutation_test(tmp, ex, False)
        mutation_test(tmp, se, True)
    ck.finish()


if __name__ == "__main__":  # imported by tests/python/test_tf_oracle.py for its corpus
    main()
