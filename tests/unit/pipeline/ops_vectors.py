#!/usr/bin/python3
# SPDX-License-Identifier: Apache-2.0
# Writes tests/unit/pipeline/ops_vectors.h: numpy's casts, float16 roundings and slices.
"""Generate the expected results for tests/unit/pipeline/test_ops.c (run with Debian's
/usr/bin/python3 and its numpy; the output is committed).

- casts: int64 and float32 inputs with edge values, and the result of numpy's astype into every
  numeric dtype and bool. Where numpy's result is undefined (float -> integer out of range, NaN)
  the expected value follows our documented rule instead (truncate, NaN -> 0, saturate).
- float16: numpy's float32 -> float16 for random floats and constructed ties, numpy's
  float64 -> float16 for random doubles and doubles next to half ties (where rounding through
  float32 would differ), each also checked here against an exact rational reference; a hash of
  numpy's float16 -> float32 over all 65536 bit patterns.
- slices: for a table of shapes and slice strings, numpy's basic-indexing result as flat source
  indices and the result shape.

usage: ops_vectors.py [OUT]   (default: ops_vectors.h next to this script)
"""
import math
import os
import sys
import warnings
from fractions import Fraction

import numpy as np

DTYPES = [  # (name in C, numpy dtype, C type of the stored expectation)
    ("i8", np.int8, "int8_t"),
    ("i16", np.int16, "int16_t"),
    ("i32", np.int32, "int32_t"),
    ("i64", np.int64, "int64_t"),
    ("u8", np.uint8, "uint8_t"),
    ("u16", np.uint16, "uint16_t"),
    ("u32", np.uint32, "uint32_t"),
    ("u64", np.uint64, "uint64_t"),
    ("f16", np.float16, "uint16_t"),  # bits
    ("f32", np.float32, "uint32_t"),  # bits
    ("f64", np.float64, "uint64_t"),  # bits
    ("bool", np.bool_, "uint8_t"),
]
BITS_VIEW = {np.float16: np.uint16, np.float32: np.uint32, np.float64: np.uint64,
             np.bool_: np.uint8}

I64_IN = [0, 1, -1, 2, 127, 128, -128, -129, 255, 256, 32767, 32768, -32768, -32769, 65535,
          65536, 2049, 2051, 4097, 65504, 65519, 65520, -65520, 2 ** 24 + 1, 2 ** 31 - 1,
          2 ** 31, -2 ** 31, -2 ** 31 - 1, 2 ** 32 - 1, 2 ** 32, 2 ** 53 + 1, 1234567890123,
          -1234567890123, 2 ** 63 - 1, -2 ** 63, -2 ** 63 + 1]

F32_IN = [0.0, -0.0, 1.0, -1.0, 0.5, -0.5, 1.5, -1.5, 2.5, -2.5, 0.99999994, -0.99999994,
          127.0, 127.9, 128.0, -128.0, -128.9, -129.0, 255.0, 255.5, 256.0, 32767.0, 32768.0,
          -32768.0, -32769.0, 65535.0, 65536.0, 65504.0, 65519.0, 65520.0, 1e-8, 6e-8,
          2.0 ** -24, 2.0 ** -25, 3 * 2.0 ** -25, 2.0 ** -20, 2.0 ** -14, 6.1e-5, 1e-45,
          99.9, -99.9, 300.7, -300.7, 2147483520.0, 2.0 ** 31, -2.0 ** 31, -2147483904.0,
          4294967040.0, 2.0 ** 32, 1e10, -1e10, 2.0 ** 63, -2.0 ** 63, 2.0 ** 64, 3.4e38,
          -3.4e38, math.inf, -math.inf, math.nan, -math.nan]


def half_ref(x):
    """Round the double x to float16 bits, exactly, round to nearest even."""
    sign = 0x8000 if math.copysign(1.0, x) < 0 else 0
    if math.isnan(x):
        return sign | 0x7e00
    a = abs(x)
    if math.isinf(a) or a >= 65520:
        return sign | 0x7c00
    f = Fraction(a)
    if f < Fraction(1, 2 ** 14):
        return sign | round(f * 2 ** 24)  # round() on a Fraction is half-to-even
    e = math.frexp(a)[1] - 1  # 2^e <= a < 2^(e+1)
    q = round(f / Fraction(2) ** (e - 10))
    if q == 2048:
        e, q = e + 1, 1024
    bits = ((e + 15) << 10) | (q - 1024)
    assert bits < 0x7c00
    return sign | bits


def f32_bits(vals):
    return np.array(vals, dtype=np.float32).view(np.uint32)


def f64_bits(vals):
    return np.array(vals, dtype=np.float64).view(np.uint64)


def c_int(v, ctype):
    if ctype == "int64_t":
        if v == -2 ** 63:
            return "INT64_MIN"
        return "INT64_C(%d)" % v if abs(v) >= 2 ** 31 else "%d" % v
    if ctype == "uint64_t":
        return "UINT64_C(0x%016x)" % v
    if ctype == "uint32_t":
        return "0x%08xu" % v
    if ctype == "uint16_t":
        return "0x%04x" % v
    return "%d" % v


def c_array(out, ctype, name, vals, per_line=8):
    vals = list(vals)
    out.append("static const %s %s[%d] = {" % (ctype, name, len(vals)))
    for i in range(0, len(vals), per_line):
        out.append("\t" + ", ".join(c_int(int(v), ctype) for v in vals[i:i + per_line]) + ",")
    out.append("};")


def expected_cast(src, np_dt):
    """numpy's astype, except float -> integer out of range or NaN: our rule."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        got = src.astype(np_dt)
    if np_dt in BITS_VIEW:
        return got.view(BITS_VIEW[np_dt])
    if src.dtype == np.float32 and np.issubdtype(np_dt, np.integer):
        info = np.iinfo(np_dt)
        fixed = []
        for x, g in zip(src.tolist(), got.tolist()):
            if math.isnan(x):
                fixed.append(0)
                continue
            if math.isinf(x):
                fixed.append(info.max if x > 0 else info.min)
                continue
            t = math.trunc(x)
            if info.min <= t <= info.max:
                assert g == t, (x, np_dt, g)  # numpy agrees wherever it is defined
                fixed.append(g)
            else:
                fixed.append(info.max if t > 0 else info.min)
        return np.array(fixed, dtype=object)
    return got


def gen_casts(out):
    i64 = np.array(I64_IN, dtype=np.int64)
    f32 = np.array(F32_IN, dtype=np.float32)
    out.append("/* Casts: inputs, and numpy's astype into each dtype (float bits as integers). */")
    out.append("#define OV_N_I64 %d" % len(i64))
    c_array(out, "int64_t", "ov_i64_in", i64.tolist(), 4)
    out.append("#define OV_N_F32 %d" % len(f32))
    c_array(out, "uint32_t", "ov_f32_in", f32.view(np.uint32).tolist(), 7)
    for src, sname in ((i64, "i64"), (f32, "f32")):
        for name, np_dt, ctype in DTYPES:
            c_array(out, ctype, "ov_%s_to_%s" % (sname, name), expected_cast(src, np_dt).tolist(),
                    {8: 3, 4: 7}.get(np.dtype(np_dt).itemsize, 8))
    # int64 -> float16 through double: the same as numpy's.
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        i64_h = i64.astype(np.float16).view(np.uint16).tolist()
    for v, h in zip(I64_IN, i64_h):
        assert half_ref(float(v)) == h, v


def gen_half(out):
    rng = np.random.default_rng(20240611)
    # Random floats, mostly with exponents around float16's range (subnormals to overflow),
    # some over the whole range (NaNs included).
    n_near, n_any = 6144, 2048
    sign = rng.integers(0, 2, n_near, dtype=np.uint32) << 31
    exp = rng.integers(98, 146, n_near, dtype=np.uint32) << 23
    man = rng.integers(0, 1 << 23, n_near, dtype=np.uint32)
    near = sign | exp | man
    anyb = rng.integers(0, 1 << 32, n_any, dtype=np.uint64).astype(np.uint32)
    # Ties: the exact midpoint between two neighbouring halves, and the floats either side.
    hs = rng.integers(0, 0x7bff, 512, dtype=np.uint16)
    hs[:4] = [0, 1, 0x3ff, 0x7bfe]
    lo = hs.view(np.float16).astype(np.float32)
    hi = (hs + 1).view(np.float16).astype(np.float32)
    mid = ((lo.astype(np.float64) + hi.astype(np.float64)) / 2).astype(np.float32)
    assert np.all(mid.astype(np.float64) * 2 == lo.astype(np.float64) + hi.astype(np.float64))
    ties = np.concatenate([mid, np.nextafter(mid, np.float32(np.inf)),
                           np.nextafter(mid, np.float32(-np.inf))])
    ties = np.concatenate([ties, -ties])
    fin = np.concatenate([near, anyb, ties.view(np.uint32)]).view(np.float32)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        exp_h = fin.astype(np.float16).view(np.uint16)
    for x, h in zip(fin.tolist(), exp_h.tolist()):
        r = half_ref(x)
        if math.isnan(x):
            assert (h & 0x7c00) == 0x7c00 and (h & 0x3ff), hex(h)
        else:
            assert r == h, (x, hex(r), hex(h))
    out.append("/* float32 -> float16: random floats and ties, numpy's bits. */")
    out.append("#define OV_N_F2H %d" % len(fin))
    c_array(out, "uint32_t", "ov_f2h_in", fin.view(np.uint32).tolist(), 7)
    c_array(out, "uint16_t", "ov_f2h_out", exp_h.tolist(), 12)

    # Doubles: random ones, exact ties, and doubles a hair off a tie (float32 would round them
    # onto the tie, and then to even: the wrong answer).
    n_rand = 2048
    sign = rng.integers(0, 2, n_rand, dtype=np.uint64) << np.uint64(63)
    exp = rng.integers(995, 1040, n_rand, dtype=np.uint64) << np.uint64(52)
    man = rng.integers(0, 1 << 52, n_rand, dtype=np.uint64)
    rnd = (sign | exp | man).view(np.float64)
    hs = rng.integers(0, 0x7bff, 512, dtype=np.uint16)
    hs[:3] = [0, 1, 0x7bfe]
    lo = hs.view(np.float16).astype(np.float64)
    hi = (hs + 1).view(np.float16).astype(np.float64)
    mid = (lo + hi) / 2
    off = np.concatenate([mid + mid * 2.0 ** -40, mid - mid * 2.0 ** -40, mid])
    assert np.all(off[:len(mid) * 2].astype(np.float32) == np.tile(mid, 2).astype(np.float32))
    dbl = np.concatenate([rnd, off, -off, [math.inf, -math.inf, 65519.999, 65520.0, 1e300,
                                           2.0 ** -25, 2.0 ** -25 * (1 + 2.0 ** -50), 5e-324]])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        exp_d = dbl.astype(np.float16).view(np.uint16)
    for x, h in zip(dbl.tolist(), exp_d.tolist()):
        assert half_ref(x) == h, (x, hex(half_ref(x)), hex(h))
    out.append("/* float64 -> float16: random doubles and doubles at and next to ties. */")
    out.append("#define OV_N_D2H %d" % len(dbl))
    c_array(out, "uint64_t", "ov_d2h_in", dbl.view(np.uint64).tolist(), 3)
    c_array(out, "uint16_t", "ov_d2h_out", exp_d.tolist(), 12)

    # float16 -> float32 over all bit patterns: FNV-1a 64 of the float bits, NaNs as 0x7fc00000.
    allf = np.arange(65536, dtype=np.uint32).astype(np.uint16).view(np.float16).astype(np.float32)
    bits = allf.view(np.uint32).copy()
    bits[np.isnan(allf)] = 0x7fc00000
    hsh = 0xcbf29ce484222325
    for b in bits.tolist():
        for k in range(4):
            hsh = ((hsh ^ ((b >> (8 * k)) & 0xff)) * 0x100000001b3) & 0xffffffffffffffff
    out.append("/* FNV-1a 64 of numpy's float16 -> float32 bits for all 65536 halves (LE bytes,")
    out.append(" * NaNs as 0x7fc00000). */")
    out.append("#define OV_H2F_FNV UINT64_C(0x%x)" % hsh)


SHAPES_SLICES = [
    ([4, 5, 6], ["[1]", "[-1,:,::2]", "[::-1]", "[1:3,-2:]", "[:,:,5]", "[3:1]", "[::-2, 1]",
                 "[:,::-3,-1]", "[-100:100]", "[10:]", "[:,1:100:7]", "[-1,-1,-1]",
                 "[::3,::-2,1:5:2]", "[2:2]", "[:,:,::-1]", "[0,:,-6]", "[-4:-1:2,4:0:-2]",
                 "[::9223372036854775807]", "[::-9223372036854775808]",
                 "[-9223372036854775808:9223372036854775807]", "[1:,:-1,1:-1]", "[:]", "[]"]),
    ([7], ["[::-1]", "[-3:]", "[:-3]", "[1::3]", "[6:0:-2]", "[-8:-1]", "[5:-100:-2]",
           "[100:-100:-1]", "[-100:100:3]", "[-100::-1]", "[-8:3:-1]", "[-7::-1]",
           "[:-100:-1]", "[100::-3]", "[3]", "[-7]", "[7:]", "[:0:-1]"]),
    ([0, 3], ["[::-1]", "[:,1]", "[:,::-1]", "[::-1,-1]"]),
    ([], ["[]"]),
    ([2, 1, 3, 2], ["[1,0]", "[:,:,::-2,1]", "[::-1,0,1:]", "[-2,-1,-3,-2]"]),
    ([1, 9], ["[0,::4]", "[:,8:]", "[0,-9::8]"]),
]


def parse_slice(text):
    """'[1:3,-2:]' -> a list of int or (start, stop, step) with None for absent parts."""
    body = text.strip()[1:-1].strip()
    dims = []
    if not body:
        return dims
    for part in body.split(","):
        part = part.strip()
        if ":" in part:
            p = [s.strip() for s in part.split(":")]
            p += [""] * (3 - len(p))
            dims.append(tuple(int(s) if s else None for s in p))
        else:
            dims.append(int(part))
    return dims


def c_dim(d):
    if isinstance(d, int):
        return "OV_I(%s)" % c_int(d, "int64_t")
    parts = []
    for v in d:
        parts += ["0", "0"] if v is None else ["1", c_int(v, "int64_t")]
    return "OV_R(%s)" % ", ".join(parts)


def gen_slices(out):
    out.append("/* Slices: numpy basic indexing of arange(prod(shape)).reshape(shape). */")
    out.append("#define OV_I(i) { .kind = PL_SLICE_INDEX, .index = (i) }")
    out.append("#define OV_R(hs, s, he, e, hp, p)                                               \\")
    out.append("\t{ .kind = PL_SLICE_RANGE, .has_start = (hs), .start = (s), .has_stop = (he), \\")
    out.append("\t  .stop = (e), .has_step = (hp), .step = (p) }")
    cases = []
    for shape, slices in SHAPES_SLICES:
        a = np.arange(int(np.prod(shape)), dtype=np.int64).reshape(shape)
        for text in slices:
            dims = parse_slice(text)
            key = tuple(d if isinstance(d, int) else slice(*d) for d in dims)
            r = np.asarray(a[key])
            cases.append((shape, text, dims, list(r.shape), r.ravel().tolist()))
    for k, (_, _, _, _, idx) in enumerate(cases):
        c_array(out, "int64_t", "ov_slice_idx_%d" % k, idx or [-1], 8)
    out.append("struct ov_slice_case {")
    out.append("\tconst char *text;")
    out.append("\tunsigned rank;")
    out.append("\tint64_t shape[4];")
    out.append("\tunsigned n;")
    out.append("\tstruct pl_slice_dim dims[4];")
    out.append("\tunsigned out_rank;")
    out.append("\tint64_t out_shape[4];")
    out.append("\tint64_t count;")
    out.append("\tconst int64_t *idx;")
    out.append("};")
    out.append("static const struct ov_slice_case ov_slices[] = {")
    for k, (shape, text, dims, rshape, idx) in enumerate(cases):
        out.append("\t{")
        out.append("\t\t.text = \"%s %s\"," % (shape, text))
        out.append("\t\t.rank = %d," % len(shape))
        out.append("\t\t.shape = { %s }," % ", ".join(str(s) for s in shape or [0]))
        out.append("\t\t.n = %d," % len(dims))
        if dims:
            out.append("\t\t.dims = {")
            for d in dims:
                out.append("\t\t\t%s," % c_dim(d))
            out.append("\t\t},")
        out.append("\t\t.out_rank = %d," % len(rshape))
        out.append("\t\t.out_shape = { %s }," % ", ".join(str(s) for s in rshape or [0]))
        out.append("\t\t.count = %d," % len(idx))
        out.append("\t\t.idx = ov_slice_idx_%d," % k)
        out.append("\t},")
    out.append("};")


def main():
    here = os.path.dirname(os.path.abspath(__file__))
    path = sys.argv[1] if len(sys.argv) > 1 else os.path.join(here, "ops_vectors.h")
    out = ["/* SPDX-License-Identifier: Apache-2.0 */",
           "/* Generated by ops_vectors.py (numpy %s); do not edit. */" % np.__version__,
           "#ifndef SLUICE_TEST_OPS_VECTORS_H",
           "#define SLUICE_TEST_OPS_VECTORS_H",
           "",
           "#include <stdbool.h>",
           "#include <stdint.h>",
           "",
           "#include \"daemon/pipeline/spec.h\"",
           ""]
    gen_casts(out)
    gen_half(out)
    gen_slices(out)
    out += ["", "#endif", ""]
    with open(path, "w") as f:
        f.write("\n".join(out))


if __name__ == "__main__":
    main()
