# SPDX-License-Identifier: Apache-2.0
# Cross-check helpers: protos compiled at run time, a pure-Python TFRecord reader/writer, JSON.
"""Helpers shared by the cross-check scripts.

Everything here is independent of sluice's C code: the TFRecord framing (with its own CRC32C
table), gzip/zlib through Python's modules, and tf.Example parsing through google.protobuf with
protos compiled from example.proto. The scripts compare `sluicectl inspect --json` against it.

Every script reports to meson in TAP (protocol: 'tap'): check() is a case, skip_case() a case
that could not run here, with its reason, and finish() writes the plan and exits (0, or 1 when
a case failed or none ran). What else a script prints goes to stderr (docs/testing.md).
"""

import base64
import fractions
import gzip
import json
import math
import os
import shutil
import struct
import subprocess
import sys
import tempfile
import warnings
import zlib

HERE = os.path.dirname(os.path.abspath(__file__))


# ---- TAP: what meson reads ----------------------------------------------------------------

class _Tap:
    """The TAP stream on the script's standard output. Once it is made (start(), or the first
    case), file descriptor 1 is stderr for everything else (print, children), so that no other
    line can be taken for a case."""

    def __init__(self):
        sys.stdout.flush()
        self.out = os.fdopen(os.dup(1), "w", buffering=1)
        os.dup2(2, 1)
        self.n = 0
        self.failed = 0
        self.skipped = 0

    @staticmethod
    def _text(s):
        # one line, and no "#", which would start a TAP directive
        return " ".join(str(s).split()).replace("#", "No.")

    def case(self, ok, what, skip=None):
        self.n += 1
        line = "%s %d - %s" % ("ok" if ok else "not ok", self.n, self._text(what))
        if skip is not None:
            line += " # SKIP " + self._text(skip)
        self.out.write(line + "\n")
        self.out.flush()


_tap = None


def tap():
    """The stream (made on first use). A script calls it first thing as start(), so that
    nothing it prints before its first case reaches the TAP stream."""
    global _tap
    if _tap is None:
        _tap = _Tap()
    return _tap


start = tap


def check(cond, what):
    """One case: ok or not ok. Returns bool(cond)."""
    t = tap()
    t.case(bool(cond), what)
    if not cond:
        t.failed += 1
        print("FAIL: " + str(what), file=sys.stderr, flush=True)
    return bool(cond)


def skip_case(what, why):
    """A case that cannot run here; why starts with its tag ("[testdata] ..."), the rule
    tools/test_summary.py applies to what a machine may skip."""
    t = tap()
    t.skipped += 1
    t.case(True, what, skip=why)
    print("SKIP: %s: %s" % (what, why), file=sys.stderr, flush=True)


def finish(name=None):
    """The plan, then exit: 1 if a case failed or none ran (a script that checked nothing has
    not passed), else 0."""
    t = tap()
    if t.n == 0:
        t.case(False, "%s: no case ran" % (name or os.path.basename(sys.argv[0])))
        t.failed += 1
    t.out.write("1..%d\n" % t.n)
    t.out.flush()
    print("%s: %d cases, %d failed, %d skipped" % (
        name or os.path.basename(sys.argv[0]), t.n, t.failed, t.skipped), file=sys.stderr)
    sys.exit(1 if t.failed else 0)


def skip(why):
    """Nothing more can run here: the whole script is skipped ("1..0 # SKIP why") when no
    case ran yet, else the rest is one skipped case."""
    t = tap()
    if t.n == 0:
        t.out.write("1..0 # SKIP %s\n" % _Tap._text(why))
        t.out.flush()
        print("SKIP: " + why, file=sys.stderr)
        sys.exit(0)
    skip_case("the rest of %s" % os.path.basename(sys.argv[0]), why)
    finish()


def scaled(seconds):
    """A wait or a lease of the tests, in seconds, scaled for this build: meson sets
    SLUICE_TEST_TIME_SCALE to 4 in a sanitizer's build (its code runs several times slower),
    so that no test carries numbers tuned for one machine's load."""
    return seconds * float(os.environ.get("SLUICE_TEST_TIME_SCALE") or 1)


# ---- environment --------------------------------------------------------------------------

def sluicectl_path():
    p = os.environ.get("SLUICECTL")
    if not p:
        skip("[env] SLUICECTL is not set (run through meson test)")
    if not os.access(p, os.X_OK):
        # meson builds the binary before the tests: a missing one is a failure, not a skip
        print("FAIL: SLUICECTL=%s is not an executable" % p)
        sys.exit(1)
    return p


def testdata_dir():
    d = os.environ.get("SLUICE_SHARED_DIR")
    if not d:
        skip("[env] SLUICE_SHARED_DIR is not set")
    t = os.path.join(d, "testdata")
    if not os.path.isfile(os.path.join(t, "files.tsv")):
        skip("[testdata] no testdata at %s" % t)
    return t


_protos = None


def protos():
    """(example_pb2, example_unpacked_pb2), compiled with protoc into a temporary directory."""
    global _protos
    if _protos is not None:
        return _protos
    protoc = shutil.which("protoc")
    if not protoc:
        skip("[deps] protoc is not installed")
    try:
        import google.protobuf  # noqa: F401
    except ImportError:
        skip("[deps] python3-protobuf is not installed")
    out = tempfile.mkdtemp(prefix="sluice-proto-")
    subprocess.run([protoc, "--proto_path=" + HERE, "--python_out=" + out,
                    "example.proto", "example_unpacked.proto"], check=True)
    sys.path.insert(0, out)
    import example_pb2
    import example_unpacked_pb2
    _protos = (example_pb2, example_unpacked_pb2)
    return _protos


# ---- a small test harness -----------------------------------------------------------------

class Checker:
    """A script's cases under one name (see check() and finish())."""

    def __init__(self, name):
        self.name = name

    def check(self, cond, msg):
        return check(cond, msg)

    def finish(self):
        finish(self.name)


# ---- CRC32C and TFRecord framing ----------------------------------------------------------

def _crc32c_table():
    poly = 0x82F63B78  # Castagnoli, reflected
    table = []
    for i in range(256):
        c = i
        for _ in range(8):
            c = (c >> 1) ^ poly if c & 1 else c >> 1
        table.append(c)
    return table


_CRC_TABLE = _crc32c_table()


def crc32c(data, crc=0):
    t = _CRC_TABLE
    crc ^= 0xFFFFFFFF
    for b in data:
        crc = t[(crc ^ b) & 0xFF] ^ (crc >> 8)
    return crc ^ 0xFFFFFFFF


def masked_crc(data):
    c = crc32c(data)
    return ((((c >> 15) | (c << 17)) & 0xFFFFFFFF) + 0xA282EAD8) & 0xFFFFFFFF


def _self_test_crc():
    # RFC 3720 B.4 vectors and the usual check value
    assert crc32c(b"123456789") == 0xE3069283
    assert crc32c(bytes(32)) == 0x8A9136AA
    assert crc32c(b"\xff" * 32) == 0x62A8AB43
    assert crc32c(bytes(range(32))) == 0x46DD794E


_self_test_crc()


def frame(payload):
    """One TFRecord: length, masked CRC of the length, data, masked CRC of the data."""
    n = struct.pack("<Q", len(payload))
    return n + struct.pack("<I", masked_crc(n)) + payload + struct.pack("<I", masked_crc(payload))


# ---- raw protobuf wire writers (for encodings google.protobuf never writes) ---------------

def varint(n):
    """Base-128 varint of n taken modulo 2^64 (negative int64 become 10 bytes)."""
    n &= (1 << 64) - 1
    out = bytearray()
    while True:
        b = n & 0x7F
        n >>= 7
        if n:
            out.append(b | 0x80)
        else:
            out.append(b)
            return bytes(out)


def tag(field, wt):
    return varint(field << 3 | wt)


def ld(field, b):
    """A length-delimited field."""
    return tag(field, 2) + varint(len(b)) + b


def compress(stream, compression):
    if compression == "none":
        return stream
    if compression == "gzip":
        return gzip.compress(stream, mtime=0)
    if compression == "zlib":
        return zlib.compress(stream)
    raise ValueError(compression)


def write_tfrecord(path, payloads, compression="none"):
    data = compress(b"".join(frame(p) for p in payloads), compression)
    with open(path, "wb") as f:
        f.write(data)
    return data


class FrameError(Exception):
    def __init__(self, offset, msg):
        super().__init__("offset %d: %s" % (offset, msg))
        self.offset = offset


def decompress(data, compression):
    if compression == "none":
        return data
    if compression == "gzip":
        return gzip.decompress(data)  # every member, as a stream
    if compression == "zlib":
        return zlib.decompress(data)
    raise ValueError(compression)


def read_frames(stream, verify=True):
    """[(offset, payload)] of an uncompressed TFRecord stream; FrameError on damage."""
    out = []
    pos = 0
    n = len(stream)
    while pos < n:
        if n - pos < 12:
            raise FrameError(pos, "truncated header")
        hdr = stream[pos:pos + 8]
        (length,) = struct.unpack("<Q", hdr)
        (hcrc,) = struct.unpack("<I", stream[pos + 8:pos + 12])
        if verify and hcrc != masked_crc(hdr):
            raise FrameError(pos, "header CRC mismatch")
        if length > n - pos - 12:
            raise FrameError(pos, "truncated data")
        if n - pos - 12 - length < 4:
            raise FrameError(pos, "truncated footer")
        payload = stream[pos + 12:pos + 12 + length]
        (dcrc,) = struct.unpack("<I", stream[pos + 12 + length:pos + 16 + length])
        if verify and dcrc != masked_crc(payload):
            raise FrameError(pos, "data CRC mismatch")
        out.append((pos, payload))
        pos += 16 + length
    return out


# ---- the JSON model ------------------------------------------------------------------------
#
# Both sides are turned into the same plain structure ("canon"):
#   Example          {"features": {name: FEATURE}}
#   SequenceExample  {"context": {name: FEATURE}, "feature_lists": {name: [FEATURE, ...]}}
#   FEATURE          {} | {"bytes_list": [base64 str]} | {"int64_list": [int]}
#                    | {"float_list": [float32 bits as int, or "NaN"]}

def f32_bits(v):
    """float32 bits of a Python float that holds a float32 value; "NaN" for any NaN."""
    if math.isnan(v):
        return "NaN"
    return struct.unpack("<I", struct.pack("<f", v))[0]


def feature_canon(f):
    kind = f.WhichOneof("kind")
    if kind is None:
        return {}
    if kind == "bytes_list":
        return {kind: [base64.b64encode(v).decode("ascii") for v in f.bytes_list.value]}
    if kind == "float_list":
        return {kind: [f32_bits(v) for v in f.float_list.value]}
    return {kind: [int(v) for v in f.int64_list.value]}


def example_canon(ex):
    return {"features": {k: feature_canon(v) for k, v in ex.features.feature.items()}}


def sequence_canon(se):
    return {"context": {k: feature_canon(v) for k, v in se.context.feature.items()},
            "feature_lists": {k: [feature_canon(s) for s in v.feature]
                              for k, v in se.feature_lists.feature_list.items()}}


def parse_payload(payload, sequence):
    """google.protobuf's reading of a record: its canon, or raises DecodeError."""
    pb2 = protos()[0]
    msg = pb2.SequenceExample() if sequence else pb2.Example()
    # The Python binding of the C++ parser stops at an unexpected end-group tag at the top
    # level with only a RuntimeWarning ("Unexpected end-group tag: Not all data was
    # converted") and keeps what came before; C++'s own ParseFromString (what TensorFlow
    # uses) fails on it. Treat it as the failure it is.
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        n = msg.ParseFromString(payload)
    if n is not None and n != len(payload):
        raise ValueError("google.protobuf read %d of %d bytes" % (n, len(payload)))
    return sequence_canon(msg) if sequence else example_canon(msg)


class FloatTok(str):
    """A number or NaN/Infinity token from sluice's JSON, kept as text."""


def _pairs_sorted(pairs):
    keys = [k.encode("utf-8", "surrogatepass") for k, _ in pairs]
    if keys != sorted(keys) or len(set(keys)) != len(keys):
        raise ValueError("object keys not unique and in byte order: %r" % [k for k, _ in pairs])
    return dict(pairs)


def load_json_line(line):
    return json.loads(line, parse_float=FloatTok, parse_constant=FloatTok,
                      object_pairs_hook=_pairs_sorted)


def _f32_from_bits(b):
    return struct.unpack("<f", struct.pack("<I", b))[0]


def decimal_to_f32_bits(s):
    """The float32 nearest to the decimal s (ties to even), exactly: "NaN" for NaN."""
    if s == "NaN":
        return "NaN"
    if s == "Infinity":
        return 0x7F800000
    if s == "-Infinity":
        return 0xFF800000
    v = float(s)  # correctly rounded to double
    try:
        bits = f32_bits(v)
    except OverflowError:
        raise ValueError("float token %r is beyond float32" % s)
    f = _f32_from_bits(bits)
    if v == f or math.isinf(f):
        return bits
    # Double rounding (decimal -> double -> float32) can only go wrong when the double is
    # exactly halfway between two float32 values; decide that case with exact arithmetic.
    other = bits + 1 if (abs(v) > abs(f)) else bits - 1
    g = _f32_from_bits(other)
    mid = (f + g) / 2  # exact: both have 24-bit significands
    if v != mid:
        return bits
    d = fractions.Fraction(s)
    m = fractions.Fraction(mid)
    if d == m:
        return bits if bits % 2 == 0 else other
    closer_to_f = (d < m) == (f < g)
    return bits if closer_to_f else other


def sluice_feature_canon(feat, where):
    if not isinstance(feat, dict) or len(feat) > 1:
        raise ValueError("%s: expected {} or one kind, got %r" % (where, feat))
    if not feat:
        return {}
    (kind, vals), = feat.items()
    if not isinstance(vals, list):
        raise ValueError("%s: %s is not a list" % (where, kind))
    if kind == "bytes_list":
        for v in vals:
            if not isinstance(v, str):
                raise ValueError("%s: bytes value %r is not a string" % (where, v))
            base64.b64decode(v, validate=True)
        return {kind: list(vals)}
    if kind == "float_list":
        out = []
        for v in vals:
            if not isinstance(v, FloatTok):
                raise ValueError("%s: float value %r is not written as a float" % (where, v))
            out.append(decimal_to_f32_bits(v))
        return {kind: out}
    if kind == "int64_list":
        for v in vals:
            if type(v) is not int or not -2**63 <= v < 2**63:
                raise ValueError("%s: int64 value %r" % (where, v))
        return {kind: list(vals)}
    raise ValueError("%s: unknown kind %r" % (where, kind))


def sluice_canon(obj, sequence, where=""):
    """The canon of one parsed sluice JSON line (ValueError when its shape is wrong)."""
    if sequence:
        if not isinstance(obj, dict) or set(obj) != {"context", "feature_lists"}:
            raise ValueError("%s: expected context and feature_lists, got %r" % (where, obj))
        ctx = {k: sluice_feature_canon(v, "%s context %r" % (where, k))
               for k, v in obj["context"].items()}
        lists = {}
        for k, v in obj["feature_lists"].items():
            if not isinstance(v, list):
                raise ValueError("%s: feature list %r is not a list" % (where, k))
            lists[k] = [sluice_feature_canon(s, "%s list %r step %d" % (where, k, i))
                        for i, s in enumerate(v)]
        return {"context": ctx, "feature_lists": lists}
    if not isinstance(obj, dict) or set(obj) != {"features"}:
        raise ValueError("%s: expected {\"features\": ...}, got %r" % (where, obj))
    return {"features": {k: sluice_feature_canon(v, "%s feature %r" % (where, k))
                         for k, v in obj["features"].items()}}


def first_difference(a, b, path=""):
    """A short description of where two canons differ, or None."""
    if type(a) is not type(b):
        return "%s: %r vs %r" % (path or "/", a, b)
    if isinstance(a, dict):
        for k in sorted(set(a) | set(b)):
            if k not in a:
                return "%s/%r: missing on the left" % (path, k)
            if k not in b:
                return "%s/%r: missing on the right" % (path, k)
            d = first_difference(a[k], b[k], "%s/%r" % (path, k))
            if d:
                return d
        return None
    if isinstance(a, list):
        if len(a) != len(b):
            return "%s: %d vs %d values" % (path, len(a), len(b))
        for i, (x, y) in enumerate(zip(a, b)):
            d = first_difference(x, y, "%s[%d]" % (path, i))
            if d:
                return d
        return None
    return None if a == b else "%s: %r vs %r" % (path, a, b)


# ---- running sluicectl -------------------------------------------------------------------

def run(args, **kw):
    """subprocess.run([sluicectl] + args), capturing bytes."""
    return subprocess.run([sluicectl_path()] + list(args), stdout=subprocess.PIPE,
                          stderr=subprocess.PIPE, timeout=kw.pop("timeout", 300), **kw)


def inspect_json(path, sequence=False, extra=()):
    """(returncode, [canon per stdout line], stderr text, raw stdout)."""
    args = ["inspect", "--json"] + (["--sequence"] if sequence else []) + list(extra) + [path]
    p = run(args)
    canons = []
    text = p.stdout.decode("utf-8")
    # split on "\n" only: str.splitlines() would also split inside names holding U+2028 etc.
    for i, line in enumerate(text.split("\n")[:-1] if text else []):
        canons.append(sluice_canon(load_json_line(line), sequence, "line %d" % i))
    return p.returncode, canons, p.stderr.decode("utf-8", "replace"), p.stdout


def python_records(path, compression, sequence):
    """google.protobuf's reading of a whole file: [(offset, canon or DecodeError)]."""
    with open(path, "rb") as f:
        data = f.read()
    out = []
    for off, payload in read_frames(decompress(data, compression)):
        try:
            out.append((off, parse_payload(payload, sequence)))
        except Exception as e:  # google.protobuf.message.DecodeError
            out.append((off, e))
    return out
