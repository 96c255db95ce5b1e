# SPDX-License-Identifier: Apache-2.0
# The image kernels (daemon/pipeline/imgops.c) against their numpy model (imgref.py) and Pillow.
"""Random images and sizes through `imgops_tool`: resizes (nearest, bilinear, area; up, down,
one axis, flips) within 1 unit of imgref.py everywhere and of Pillow's Image.resize where Pillow
is installed; crops exact; normalization exact in every dtype and layout; RandomResizedCrop
draws identical to imgref's (torchvision's get_params on the pipeline's random stream),
fallback included.

Environment: IMGOPS_TOOL (the binary). Output: TAP (common.check), for meson.
"""

import os
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import common  # noqa: E402

try:
    import numpy as np
except ImportError:
    common.skip("[deps] numpy is not installed")
import imgref  # noqa: E402
from plref import Rng  # noqa: E402

TOOL = os.environ.get("IMGOPS_TOOL", "")

check = common.check  # a TAP case (common.finish counts the failures)


def run(*args):
    r = subprocess.run([TOOL] + [str(a) for a in args], capture_output=True, text=True)
    if r.returncode != 0:
        raise RuntimeError("imgops_tool %s: exit %d %s" % (args[0], r.returncode, r.stderr))
    return r.stdout


def smooth(rng, h, w, c):
    """Photo-like content (gradients, a blob, noise), so resampling is not all saturation."""
    y, x = np.mgrid[0:h, 0:w].astype(np.float64)
    img = np.empty((h, w, c))
    for ch in range(c):
        a, b, f = rng.uniform(-1, 1, 3)
        img[..., ch] = 128 + 90 * np.sin(a * x / (w + 1) * 6 + b * y / (h + 1) * 6 + f * 3)
    img += rng.normal(0, 12, img.shape)
    return np.clip(img, 0, 255).astype(np.uint8)


def ties(n_in, n_out):
    """The output indices whose nearest source position is exactly between two pixels."""
    return np.array([(2 * o + 1) * n_in % (2 * n_out) == 0 for o in range(n_out)])


def test_resize(tmp, rng):
    worst = {}
    pil_worst = 0
    try:
        from PIL import Image
    except ImportError:
        Image = None
        common.skip_case("resize against Pillow", "[deps] python3-pil is not installed")
    cases = [(1, 1, 3, 5, 7), (7, 1, 1, 1, 9), (375, 500, 3, 224, 224), (300, 451, 3, 256, 384),
             (64, 64, 1, 64, 17), (33, 80, 3, 33, 80), (224, 224, 3, 500, 375)]
    cases += [(int(rng.integers(1, 200)), int(rng.integers(1, 200)), int(rng.choice([1, 3])),
               int(rng.integers(1, 260)), int(rng.integers(1, 260))) for _ in range(40)]
    src, dst = os.path.join(tmp, "in.raw"), os.path.join(tmp, "out.raw")
    for k, (h, w, c, oh, ow) in enumerate(cases):
        img = smooth(rng, h, w, c)
        img.tofile(src)
        for interp in ("nearest", "bilinear", "area"):
            fx, fy = bool(k % 2), bool(k % 3 == 0)
            run("resize", src, h, w, c, oh, ow, interp, int(fx), int(fy), dst)
            got = np.fromfile(dst, np.uint8).reshape(oh, ow, c)
            want = imgref.resize(img, oh, ow, interp, fx, fy)
            d = int(np.abs(got.astype(int) - want.astype(int)).max())
            worst[interp] = max(worst.get(interp, 0), d)
            if d > 1:
                check(False, "resize %dx%dx%d -> %dx%d %s flip %d%d: max diff %d" % (
                    h, w, c, oh, ow, interp, fx, fy, d))
            if Image is not None and not fx and not fy and c == 3:
                mode = {"nearest": Image.NEAREST, "bilinear": Image.BILINEAR,
                        "area": Image.BOX}[interp]
                pil = np.asarray(Image.fromarray(img).resize((ow, oh), mode))
                diff = np.abs(got.astype(int) - pil.astype(int))
                if interp == "nearest":
                    # Pillow's nearest runs in 16.16 fixed point: where (o + 0.5) * in / out is
                    # an integer (a tie between two pixels) it may land on the one before
                    diff[ties(h, oh)] = 0
                    diff[:, ties(w, ow)] = 0
                pd = int(diff.max())
                pil_worst = max(pil_worst, pd)
                if pd > 1:
                    check(False, "resize %dx%d -> %dx%d %s: %d from Pillow" % (
                        h, w, oh, ow, interp, pd))
    check(all(v <= 1 for v in worst.values()),
          "resize: %d cases x 3 filters within 1 of imgref (worst %s)" % (len(cases), worst))
    if Image is not None:
        check(pil_worst <= 1, "resize: within 1 of Pillow's Image.resize (worst %d)" % pil_worst)


def test_crop(tmp, rng):
    src, dst = os.path.join(tmp, "in.raw"), os.path.join(tmp, "out.raw")
    ok = True
    for _ in range(20):
        h, w = int(rng.integers(1, 90)), int(rng.integers(1, 90))
        img = smooth(rng, h, w, 3)
        img.tofile(src)
        cw, ch = int(rng.integers(1, w + 1)), int(rng.integers(1, h + 1))
        x, y = int(rng.integers(0, w - cw + 1)), int(rng.integers(0, h - ch + 1))
        run("crop", src, h, w, 3, x, y, cw, ch, dst)
        ok &= np.array_equal(np.fromfile(dst, np.uint8).reshape(ch, cw, 3),
                             img[y:y + ch, x:x + cw])
    check(ok, "crop: exact")


def test_normalize(tmp, rng):
    src, dst = os.path.join(tmp, "in.raw"), os.path.join(tmp, "out.raw")
    img = smooth(rng, 17, 23, 3)
    img.tofile(src)
    mean, std = (123.675, 116.28, 103.53), (58.395, 57.12, 57.375)
    for dt, npdt in (("uint8", np.uint8), ("float16", np.float16), ("bfloat16", np.uint16),
                     ("float32", np.float32)):
        for chw in (0, 1):
            run("normalize", src, 17, 23, 3, dt, chw, *mean, *std, dst)
            got = np.fromfile(dst, npdt)
            want = imgref.normalize(img, dt, chw, mean, std).reshape(-1)
            check(got.tobytes() == want.astype(npdt).tobytes(),
                  "normalize %s %s: exact" % (dt, "CHW" if chw else "HWC"))


def test_random_resized_crop():
    cases = [(375, 500, 0.08, 1.0, 3 / 4, 4 / 3), (500, 375, 0.08, 1.0, 3 / 4, 4 / 3),
             (224, 224, 0.5, 1.0, 1.0, 1.0), (10, 1000, 0.9, 1.0, 0.9, 1.1),  # fallback: wide
             (1000, 10, 0.9, 1.0, 0.9, 1.1), (1, 1, 0.08, 1.0, 3 / 4, 4 / 3),
             (300, 300, 0.99, 1.0, 5.0, 6.0)]  # no fit in 10 tries: the central fallback
    for seed, (h, w, slo, shi, rlo, rhi) in enumerate(cases):
        out = run("rrc", seed, 3, 7, 200, h, w, slo, shi, rlo, rhi).split("\n")
        got = [tuple(int(v) for v in line.split()) for line in out if line]
        want = [imgref.random_resized_crop(Rng(seed, 3, 7, i), h, w, (slo, shi), (rlo, rhi))
                for i in range(200)]
        fits = all(0 <= x and x + cw <= w and 0 <= y and y + ch <= h for x, y, cw, ch in got)
        check(got == want and fits,
              "random_resized_crop %dx%d scale (%g, %g) ratio (%g, %g): 200 draws equal "
              "imgref's and lie inside" % (h, w, slo, shi, rlo, rhi))


def test_color_jitter(tmp, rng):
    """Each adjustment alone and all four in random orders: the kernel against imgref within 1,
    and alone against torchvision's functional adjust_* on a PIL image (the oracle) within 1;
    the draws equal imgref's."""
    try:
        from PIL import Image
        import torchvision.transforms.functional as TF
    except Exception as e:  # torchvision may be missing or fail to import
        TF, why = None, str(e)
    worst_ref = worst_tv = 0
    names = ("brightness", "contrast", "saturation", "hue")
    for trial in range(24):
        h, w = int(rng.integers(1, 60)), int(rng.integers(1, 60))
        c = 3 if trial % 6 else 1
        img = smooth(rng, h, w, c) if trial % 2 else rng.integers(0, 256, (h, w, c), np.uint8)
        if trial < 16:
            k = trial % 4
            on = [i == k for i in range(4)]
            f = float(rng.uniform(-0.5, 0.5)) if k == 3 else float(rng.uniform(0, 2))
            factors = [f if i == k else 0.0 for i in range(4)]
            order = [0, 1, 2, 3]
        else:
            on = [bool(rng.integers(0, 2)) for _ in range(4)]
            factors = [float(rng.uniform(0.5, 1.5)) for _ in range(3)] + [
                float(rng.uniform(-0.3, 0.3))]
            order = [int(x) for x in rng.permutation(4)]
        src = os.path.join(tmp, "j.in")
        dst = os.path.join(tmp, "j.out")
        img.tofile(src)
        run("jitter", src, h, w, c, "".join(map(str, order)), "".join("1" if x else "0"
                                                                       for x in on),
            *["%.9g" % x for x in factors], dst)
        got = np.fromfile(dst, np.uint8).reshape(h, w, c)
        want = imgref.color_jitter(img, order, [float(np.float32(x)) for x in factors], on)
        d = int(np.abs(got.astype(int) - want.astype(int)).max()) if got.size else 0
        worst_ref = max(worst_ref, d)
        if d > 1:
            check(False, "color_jitter trial %d (%s) within 1 of imgref: %d" % (
                trial, [names[i] for i in order if on[i]], d))
        if TF is not None and trial < 16 and (c == 3 or k < 2):
            pil = Image.fromarray(img[..., 0] if c == 1 else img)
            fn = (TF.adjust_brightness, TF.adjust_contrast, TF.adjust_saturation,
                  TF.adjust_hue)[k]
            tv = np.asarray(fn(pil, float(np.float32(f)))).reshape(h, w, c)
            d = int(np.abs(got.astype(int) - tv.astype(int)).max()) if got.size else 0
            worst_tv = max(worst_tv, d)
            if d > 1:
                check(False, "color_jitter: %s %g on %dx%dx%d within 1 of torchvision: %d" %
                      (names[k], f, h, w, c, d))
    check(worst_ref <= 1, "color_jitter: 24 images within 1 of imgref (worst %d)" % worst_ref)
    if TF is None:
        common.skip_case("color_jitter against torchvision", "[deps] %s" % why)
    else:
        check(worst_tv <= 1, "color_jitter: each adjustment within 1 of torchvision's "
              "adjust_* (worst %d)" % worst_tv)
    ranges = [(0.6, 1.4), (0.7, 1.3), (0.0, 2.0), (-0.1, 0.1)]
    for on in ([True] * 4, [True, False, True, False]):
        out = run("jdraw", 9, 2, 300, 50, *[x for r in ranges for x in r],
                  "".join("1" if x else "0" for x in on)).split("\n")
        got = [line.split() for line in out if line]
        ok = len(got) == 50
        for i, g in enumerate(got):
            order, fac = imgref.jitter_draw(Rng(9, 2, 300, i), ranges, on)
            ok &= [int(x) for x in g[:4]] == order
            ok &= all(abs(float(x) - y) < 1e-6 for x, y in zip(g[4:], fac))
        check(ok, "color_jitter draws (order and factors, %s) equal imgref's" % on)


def main():
    common.start()
    if not TOOL or not os.access(TOOL, os.X_OK):
        common.skip("[env] IMGOPS_TOOL is not set (run through meson test)")
    rng = np.random.default_rng(int(os.environ.get("SLUICE_CROSSCHECK_SEED", "16")))
    with tempfile.TemporaryDirectory(prefix="sluice-imgops-") as tmp:
        test_resize(tmp, rng)
        test_crop(tmp, rng)
        test_normalize(tmp, rng)
        test_random_resized_crop()
        test_color_jitter(tmp, rng)
    common.finish()


if __name__ == "__main__":
    sys.exit(main())
