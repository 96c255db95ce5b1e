# SPDX-License-Identifier: Apache-2.0
"""The numpy model of the image kernels (daemon/pipeline/imgops.c), written from their sources'
definitions rather than from the C: torchvision's RandomResizedCrop.get_params and center_crop,
Pillow's resampling (Image.resize: separable, horizontal then vertical, each pass rounded to
uint8, the filter's support widened by the scale when shrinking), flips and normalization.
docs/image.md states the rules; test_imgops.py compares the two.
"""

import math

import numpy as np

from plref import Rng


def rng_uniform(rng):
    """A double in [0, 1) from the top 53 bits of the next draw."""
    return (rng.next() >> 11) * 2.0 ** -53


def random_resized_crop(rng, h, w, scale=(0.08, 1.0), ratio=(3 / 4, 4 / 3)):
    """torchvision's get_params: (x, y, cw, ch). Python's round() is half to even, as there."""
    area = h * w
    log_lo, log_hi = math.log(ratio[0]), math.log(ratio[1])
    for _ in range(10):
        target = area * (scale[0] + (scale[1] - scale[0]) * rng_uniform(rng))
        aspect = math.exp(log_lo + (log_hi - log_lo) * rng_uniform(rng))
        cw = int(round(math.sqrt(target * aspect)))
        ch = int(round(math.sqrt(target / aspect)))
        if 0 < cw <= w and 0 < ch <= h:
            y = rng.below(h - ch + 1)
            x = rng.below(w - cw + 1)
            return x, y, cw, ch
    in_ratio = w / h
    if in_ratio < ratio[0]:
        cw, ch = w, int(round(w / ratio[0]))
    elif in_ratio > ratio[1]:
        ch, cw = h, int(round(h * ratio[1]))
    else:
        cw, ch = w, h
    cw, ch = max(cw, 1), max(ch, 1)
    return (w - cw) // 2, (h - ch) // 2, cw, ch


def center_crop(h, w, ch, cw):
    """torchvision: top = int(round((H - h) / 2.0)), left likewise -> (x, y, cw, ch)."""
    return int(round((w - cw) / 2.0)), int(round((h - ch) / 2.0)), cw, ch


def _filter(interp, x):
    if interp == "area":  # Pillow's box
        return ((x > -0.5) & (x <= 0.5)).astype(np.float64)
    x = np.abs(x)
    return np.where(x < 1.0, 1.0 - x, 0.0)


def _weights(n_in, n_out, interp):
    """[n_out, n_in] matrix of normalised weights (Pillow's precompute_coeffs)."""
    scale = n_in / n_out
    m = np.zeros((n_out, n_in), dtype=np.float64)
    if interp == "nearest":
        for o in range(n_out):
            m[o, min(int(math.floor((o + 0.5) * scale)), n_in - 1)] = 1.0
        return m
    fscale = max(scale, 1.0)
    support = (0.5 if interp == "area" else 1.0) * fscale
    for o in range(n_out):
        center = (o + 0.5) * scale
        lo = max(int(center - support + 0.5), 0)  # int() truncates toward zero, as C
        hi = min(int(center + support + 0.5), n_in)
        idx = np.arange(lo, hi)
        k = _filter(interp, (idx - center + 0.5) / fscale)
        if k.sum() != 0:
            m[o, lo:hi] = k / k.sum()
    return m


def _round8(a):
    return np.clip(np.floor(a + 0.5), 0, 255).astype(np.uint8)


def resize(img, out_h, out_w, interp="bilinear", flip_x=False, flip_y=False):
    """img uint8 [H, W, C] -> [out_h, out_w, C]."""
    h, w, _ = img.shape
    out = img
    if out_w != w:
        out = _round8(np.einsum("ow,hwc->hoc", _weights(w, out_w, interp), out.astype(np.float64)))
    if out_h != h:
        out = _round8(np.einsum("oh,hwc->owc", _weights(h, out_h, interp), out.astype(np.float64)))
    if flip_x:
        out = out[:, ::-1]
    if flip_y:
        out = out[::-1]
    return np.ascontiguousarray(out)


def normalize(img, dtype, chw, mean, std):
    """(img - mean) / std in float32, as dtype (uint8: the pixels unchanged), HWC or CHW."""
    if dtype == "uint8":
        out = img.copy()
    else:
        out = (img.astype(np.float32) - np.array(mean, np.float32)) / np.array(std, np.float32)
        if dtype == "float16":
            out = out.astype(np.float16)
        elif dtype == "bfloat16":  # round to nearest even into the top 16 bits
            u = out.view(np.uint32).astype(np.uint64)
            out = ((u + 0x7FFF + ((u >> 16) & 1)) >> 16).astype(np.uint16)
    return np.ascontiguousarray(out.transpose(2, 0, 1) if chw else out)


# ---- color_jitter: torchvision's ColorJitter as Pillow computes it on a uint8 image ----

def jitter_draw(rng, ranges, on):
    """The permutation (Fisher-Yates from the top, j = floor(u * (i + 1))), then a factor
    uniform in [lo, hi] for each adjustment that is on (brightness, contrast, saturation, hue)."""
    order = [0, 1, 2, 3]
    for i in range(3, 0, -1):
        k = int(rng_uniform(rng) * (i + 1))
        order[i], order[k] = order[k], order[i]
    factors = []
    for k in range(4):
        lo, hi = ranges[k]
        factors.append(lo + rng_uniform(rng) * (hi - lo) if on[k] else 0.0)
    return order, factors


def _blend(d, v, f):
    """Pillow's ImagingBlend: d + f * (v - d) in float32, truncated into 0..255."""
    t = np.float32(d) + np.float32(f) * (v.astype(np.float32) - np.float32(d))
    return np.clip(np.trunc(t), 0, 255).astype(np.uint8)


def _luma(img):
    """Pillow's RGB -> L."""
    r, g, b = (img[..., k].astype(np.int64) for k in range(3))
    return ((r * 19595 + g * 38470 + b * 7471 + 0x8000) >> 16).astype(np.int64)


def _rgb_to_hsv8(img):
    r, g, b = (img[..., k].astype(np.int64) for k in range(3))
    mx, mn = np.maximum(np.maximum(r, g), b), np.minimum(np.minimum(r, g), b)
    cr = (mx - mn).astype(np.float32)
    safe = np.where(cr == 0, np.float32(1), cr)
    s = cr / np.where(mx == 0, np.float32(1), mx.astype(np.float32))
    rc, gc, bc = ((mx - x).astype(np.float32) / safe for x in (r, g, b))
    rd, gd, bd = (x.astype(np.float64) for x in (rc, gc, bc))  # Pillow's 2.0 + rc - bc: double
    hh = np.where(r == mx, bc - gc, np.where(g == mx, 2.0 + rd - bd,
                                             4.0 + gd - rd).astype(np.float32))
    hf = np.fmod(hh.astype(np.float64) / 6.0 + 1.0, 1.0).astype(np.float32)  # as Pillow keeps it
    h8 = np.clip((hf.astype(np.float64) * 255.0).astype(np.int64), 0, 255)
    s8 = np.clip((s.astype(np.float64) * 255.0).astype(np.int64), 0, 255)
    same = mx == mn
    return np.where(same, 0, h8), np.where(same, 0, s8), mx


def _hsv8_to_rgb(h, s, v):
    hf = h.astype(np.float32) * np.float32(6) / np.float32(255)
    i = np.floor(hf).astype(np.int64)
    f = hf - i.astype(np.float32)
    fs = s.astype(np.float32) / np.float32(255)
    vf = v.astype(np.float32)

    def r8(x):
        return np.clip(np.round(x.astype(np.float64)), 0, 255).astype(np.int64)  # lround
    p = r8(vf * (np.float32(1) - fs))
    q = r8(vf * (np.float32(1) - fs * f))
    t = r8(vf * (np.float32(1) - fs * (np.float32(1) - f)))
    table = [(v, t, p), (q, v, p), (p, v, t), (p, q, v), (t, p, v), (v, p, q)]
    out = np.zeros(h.shape + (3,), np.int64)
    sel = i % 6
    for k, (a, b, c) in enumerate(table):
        m = sel == k
        out[m] = np.stack([a[m], b[m], c[m]], axis=-1)
    gray = s == 0
    out[gray] = np.stack([v[gray]] * 3, axis=-1)
    return out.astype(np.uint8)


def color_jitter(img, order, factors, on):
    """In the given order: brightness (blend with black), contrast (with the luma's mean,
    rounded), saturation (with the luma), hue (the H byte of Pillow's HSV shifted, wrapping)."""
    img = img.copy()
    rgb = img.shape[2] >= 3
    n = 3 if rgb else 1
    for k in order:
        if not on[k]:
            continue
        f = factors[k]
        v = img[..., :n]
        if k == 0:
            img[..., :n] = _blend(0, v, f)
        elif k == 1:
            lum = _luma(img) if rgb else img[..., 0].astype(np.int64)
            m = int(float(lum.sum()) / lum.size + 0.5)
            img[..., :n] = _blend(m, v, f)
        elif k == 2 and rgb:
            img[..., :3] = _blend(_luma(img)[..., None].astype(np.float32), v, f)
        elif k == 3 and rgb:
            h, s, val = _rgb_to_hsv8(img)
            d = int(np.float32(f) * np.float32(255)) % 256  # C's (uint8)(int)
            img[..., :3] = _hsv8_to_rgb((h + d) % 256, s, val)
    return img
