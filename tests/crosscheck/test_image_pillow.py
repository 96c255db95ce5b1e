# SPDX-License-Identifier: Apache-2.0
# Cross-check: io/image.c (through image_dump) against Pillow, byte for byte.
"""usage: test_image_pillow.py IMAGE_DUMP generated|testdata

generated: images written by `sluicectl gen jpeg --segmentation` (libjpeg/libpng through
io/image_enc.c) and by Pillow itself (its own PNG encoder; its JPEG settings: subsampling,
progressive, CMYK) in every colour type; testdata: the JPEGs and PNG masks of the real
TFRecord files in $SLUICE_SHARED_DIR/testdata (skipped, saying so, when absent).

For each image: the probe against Pillow's size and mode; channels 0 and 3 against
Image.convert("RGB") (gray: "L"); channels 1 against convert("L") for PNG and CMYK and against
libjpeg's own grayscale output for colour JPEGs (Pillow's draft("L")); a 16-bit PNG against
its high bytes; scaled decoding (1/2, 1/4, 1/8) against Pillow's draft(), which asks libjpeg
for the same scale_denom; crops against the same slice of Pillow's image; palette indices
against Pillow's "P" image. Damaged files must fail in both. Output: TAP, for meson.
"""

import io
import os
import random
import shutil
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import common  # noqa: E402

try:
    import numpy as np
    from PIL import Image
except ImportError as e:
    common.skip("[deps] Pillow and numpy are needed (python3-pil, python3-numpy): %s" % e)

Image.MAX_IMAGE_PIXELS = None


class Dump:
    """image_dump, one request a line (tests/crosscheck/image_dump.c)."""

    def __init__(self, exe):
        self.p = subprocess.Popen([exe], stdin=subprocess.PIPE, stdout=subprocess.PIPE)

    def _ask(self, line):
        self.p.stdin.write((line + "\n").encode())
        self.p.stdin.flush()
        return self.p.stdout.readline().decode("utf-8", "replace").rstrip("\n")

    def probe(self, path):
        return self._ask("probe " + path).split(" ")

    def decode(self, path, channels=0, scale=1, palette_index=False, crop=None, dct="accurate"):
        """An HxWxC uint8 array, or the error line (a str)."""
        x, y, w, h = crop or (0, 0, 0, 0)
        line = self._ask("decode %s %d %s %d %d %d %d %d %d" % (
            path, channels, dct, scale, int(palette_index), x, y, w, h))
        if not line.startswith("ok "):
            return line
        hh, ww, cc = map(int, line.split()[1:])
        data = self.p.stdout.read(hh * ww * cc)
        return np.frombuffer(data, np.uint8).reshape(hh, ww, cc)

    def close(self):
        self.p.stdin.close()
        self.p.wait()


ck = common.Checker("test_image_pillow")


def same(name, ours, ref):
    """ours (array or error line) equals ref (array) exactly."""
    if isinstance(ours, str):
        return ck.check(False, "%s: decode failed: %s" % (name, ours))
    if ref.ndim == 2:
        ref = ref[:, :, None]
    if ours.shape != ref.shape:
        return ck.check(False, "%s: shape %s, Pillow %s" % (name, ours.shape, ref.shape))
    if not np.array_equal(ours, ref):
        d = np.abs(ours.astype(int) - ref.astype(int))
        return ck.check(False, "%s: %d of %d bytes differ (max %d)" % (
            name, int((d != 0).sum()), d.size, int(d.max())))
    return ck.check(True, name)


def high_bytes(im):
    """A 16-bit gray Pillow image ("I" or "I;16") as its high bytes."""
    return (np.array(im).astype(np.uint32) >> 8).astype(np.uint8)


def pillow_rgb(path):
    im = Image.open(path)
    if im.mode in ("I", "I;16", "I;16B"):
        g = high_bytes(im)
        return np.repeat(g[:, :, None], 3, 2)
    return np.array(im.convert("RGB"))


def pillow_gray(path, fmt):
    im = Image.open(path)
    if im.mode in ("I", "I;16", "I;16B"):
        return high_bytes(im)
    if fmt == "jpeg" and im.mode in ("RGB", "YCbCr"):
        im.draft("L", None)  # libjpeg's JCS_GRAYSCALE output: the Y channel
        return np.array(im)
    return np.array(im.convert("L"))


def rand_crop(rng, w, h):
    """A RandomResizedCrop-like box (8..100 % of the area), or a tiny one."""
    if rng.random() < 0.2:
        cw, ch = rng.randint(1, min(w, 9)), rng.randint(1, min(h, 9))
    else:
        area = w * h * rng.uniform(0.08, 1.0)
        aspect = rng.uniform(0.75, 1.333)
        cw = max(1, min(w, int(round((area * aspect) ** 0.5))))
        ch = max(1, min(h, int(round((area / aspect) ** 0.5))))
    return rng.randint(0, w - cw), rng.randint(0, h - ch), cw, ch


GRAY_MODES = ("L", "LA", "1", "I", "I;16", "I;16B")


# Scaled decoding against the full decode averaged over s x s blocks (an area resize):
# {(source, s): [sum of per-image mean |error|, images, max |error|]}.
SCALE_ERR = {}


def area_resize_error(full, scaled, s):
    """Mean and max |scaled - area resize of full| (edge blocks average what they cover)."""
    h, w, c = full.shape
    hs, ws = scaled.shape[:2]
    acc = np.zeros((hs * s, ws * s, c))
    cnt = np.zeros((hs * s, ws * s, 1))
    acc[:h, :w] = full
    cnt[:h, :w] = 1
    ref = acc.reshape(hs, s, ws, s, c).sum((1, 3)) / cnt.reshape(hs, s, ws, s, 1).sum((1, 3))
    e = np.abs(np.floor(ref + 0.5) - scaled.astype(np.float64))
    return float(e.mean()), int(e.max())


def check_image(d, path, name, rng, crops=4, mask=False, source=None):
    """Every comparison for one image file."""
    try:
        im = Image.open(path)
        im.load()
    except Exception as e:  # Pillow cannot read it: then neither may we
        out = d.decode(path)
        ck.check(isinstance(out, str), "%s: Pillow fails (%s), so must we: %s" % (
            name, e, "ok" if isinstance(out, str) else "decoded"))
        return
    pr = d.probe(path)
    if not ck.check(pr[0] == "ok", "%s: probe %s" % (name, " ".join(pr))):
        return
    fmt, color, w, h = pr[1], pr[2], int(pr[3]), int(pr[4])
    ck.check((w, h) == im.size, "%s: probe size %dx%d, Pillow %dx%d" % (name, w, h, *im.size))
    ck.check(fmt == im.format.lower(), "%s: format %s, Pillow %s" % (name, fmt, im.format))
    stored_gray = color in ("gray", "gray+alpha")
    ck.check(stored_gray == (im.mode in GRAY_MODES),
             "%s: colour %s vs Pillow mode %s" % (name, color, im.mode))

    rgb = pillow_rgb(path)
    gray = pillow_gray(path, fmt)
    same("%s channels 3" % name, d.decode(path, 3), rgb)
    same("%s channels 1" % name, d.decode(path, 1), gray)
    same("%s channels 0" % name, d.decode(path, 0), gray if stored_gray else rgb)
    if color == "palette":
        same("%s palette indices" % name, d.decode(path, 0, palette_index=True),
             np.array(Image.open(path)))
    if mask:
        return
    for _ in range(crops):
        x, y, cw, ch = rand_crop(rng, w, h)
        same("%s crop %dx%d+%d+%d" % (name, cw, ch, x, y), d.decode(path, 3, crop=(x, y, cw, ch)),
             rgb[y:y + ch, x:x + cw])
    if fmt != "jpeg":
        return
    for s in (2, 4, 8):
        ref = Image.open(path)
        ref.draft(ref.mode, (w // s, h // s))  # Pillow asks libjpeg for scale_denom s
        if ref.size != ((w + s - 1) // s, (h + s - 1) // s):
            ck.check(False, "%s: Pillow's draft gave %s at 1/%d" % (name, ref.size, s))
            continue
        sref = np.array(ref.convert("RGB"))
        ours = d.decode(path, 3, scale=s)
        same("%s scale 1/%d" % (name, s), ours, sref)
        if source and not isinstance(ours, str):
            mean, mx = area_resize_error(rgb, ours, s)
            e = SCALE_ERR.setdefault((source, s), [0.0, 0, 0])
            e[0] += mean
            e[1] += 1
            e[2] = max(e[2], mx)
        sw, sh = ref.size
        x, y, cw, ch = rand_crop(rng, sw, sh)
        same("%s scale 1/%d crop %dx%d+%d+%d" % (name, s, cw, ch, x, y),
             d.decode(path, 3, scale=s, crop=(x, y, cw, ch)), sref[y:y + ch, x:x + cw])


def examples_of(path, compression="none"):
    """[Example] of a TFRecord file (common's framing, google.protobuf's parsing)."""
    pb2 = common.protos()[0]
    with open(path, "rb") as f:
        stream = common.decompress(f.read(), compression)
    out = []
    for _, payload in common.read_frames(stream):
        ex = pb2.Example()
        ex.ParseFromString(payload)
        out.append(ex)
    return out


def feature_bytes(ex, name):
    f = ex.features.feature.get(name)
    return f.bytes_list.value[0] if f is not None and f.bytes_list.value else None


def feature_int(ex, name):
    f = ex.features.feature.get(name)
    return f.int64_list.value[0] if f is not None and f.int64_list.value else None


def pillow_made(tmp, rng):
    """Images Pillow encodes: every PNG colour type, JPEG settings, CMYK; [(path, name)]."""
    out = []
    h, w = 211, 317
    yy, xx = np.mgrid[0:h, 0:w]
    base = np.stack([(xx * 0.7 + yy * 0.3) % 256, np.sin(xx / 20.0) * 100 + 128,
                     np.cos(yy / 15.0) * 90 + 120], -1)
    nrng = np.random.default_rng(rng.randint(0, 1 << 30))
    base = np.clip(base + nrng.normal(0, 6, base.shape), 0, 255).astype(np.uint8)
    im = Image.fromarray(base)
    for ss, sname in ((0, "444"), (1, "422"), (2, "420")):
        for prog in (False, True):
            p = os.path.join(tmp, "pil_%s_%s.jpg" % (sname, "prog" if prog else "base"))
            im.save(p, quality=90, subsampling=ss, progressive=prog)
            out.append(p)
    for mode in ("L", "CMYK"):
        p = os.path.join(tmp, "pil_%s.jpg" % mode)
        im.convert(mode).save(p, quality=85)
        out.append(p)
    for mode in ("RGB", "RGBA", "L", "LA", "P", "1"):
        p = os.path.join(tmp, "pil_%s.png" % mode)
        im.convert(mode).save(p)
        out.append(p)
        p = os.path.join(tmp, "pil_%s_interlaced.png" % mode)
        im.convert(mode).save(p, interlace=1) if mode != "1" else None
        if os.path.exists(p):
            out.append(p)
    p = os.path.join(tmp, "pil_P_trns.png")
    im.convert("P").save(p, transparency=3)
    out.append(p)
    g16 = (base[:, :, 0].astype(np.uint16) * 257) ^ (base[:, :, 1] & 15).astype(np.uint16)
    p = os.path.join(tmp, "pil_I16.png")
    Image.fromarray(g16).save(p)
    out.append(p)
    return out


def damaged(d, tmp, good_jpeg, good_png):
    """Cut and corrupted files: Pillow and we both refuse them."""
    cases = []
    with open(good_jpeg, "rb") as f:
        j = f.read()
    with open(good_png, "rb") as f:
        p = f.read()
    cases.append(("jpeg cut in the data", j[:len(j) // 2]))
    cases.append(("jpeg cut in the header", j[:100]))
    cases.append(("png cut in the data", p[:len(p) // 2]))
    bad = bytearray(p)
    bad[29] ^= 1  # IHDR's CRC
    cases.append(("png with a bad IHDR CRC", bytes(bad)))
    cases.append(("zero bytes", b""))
    cases.append(("random bytes", bytes(random.Random(5).getrandbits(8) for _ in range(300))))
    for name, data in cases:
        path = os.path.join(tmp, "damaged.bin")
        with open(path, "wb") as f:
            f.write(data)
        try:
            Image.open(io.BytesIO(data)).load()
            pil_ok = True
        except Exception:
            pil_ok = False
        ours = d.decode(path)
        ck.check(not pil_ok and isinstance(ours, str) and ours.startswith("err "),
                 "%s: Pillow %s, we: %s" % (name, "decodes it" if pil_ok else "refuses",
                                          ours if isinstance(ours, str) else "decode"))


def run_generated(d, tmp, rng):
    common.sluicectl_path()
    common.protos()
    ds = os.path.join(tmp, "ds")
    # seed 1: the 120 records hold all 9 kinds of image the generator makes
    r = common.run(["gen", "jpeg", ds, "--records", "120", "--files", "2", "--seed", "1",
                    "--segmentation"])
    if not ck.check(r.returncode == 0, "gen jpeg: %s" % r.stderr.decode()):
        return
    r = common.run(["validate", ds])
    ck.check(r.returncode == 0 and b"result: valid" in r.stdout, "validate of gen jpeg")
    kinds = {}
    for fn in sorted(os.listdir(ds)):
        if not fn.endswith(".tfrecords"):
            continue
        for i, ex in enumerate(examples_of(os.path.join(ds, fn))):
            name = "%s[%d]" % (fn, i)
            img = feature_bytes(ex, "image/encoded")
            msk = feature_bytes(ex, "image/segmentation/class/encoded")
            path = os.path.join(tmp, "img")
            with open(path, "wb") as f:
                f.write(img)
            pr = d.probe(path)
            kind = (pr[1], pr[2], pr[6], pr[7], pr[10])
            kinds[kind] = kinds.get(kind, 0) + 1
            ck.check(feature_bytes(ex, "image/format").decode() == pr[1],
                     "%s: image/format says %s" % (name, pr[1]))
            ck.check((feature_int(ex, "image/width"), feature_int(ex, "image/height")) ==
                     (int(pr[3]), int(pr[4])), "%s: image/width, image/height" % name)
            lab = feature_int(ex, "image/class/label")
            ck.check(lab is not None and 0 <= lab < 1000, "%s: label %s" % (name, lab))
            ws, hs = int(pr[3]), int(pr[4])
            ck.check(300 <= min(ws, hs) <= 500 and 0.74 <= ws / hs <= 1.34,
                     "%s: %dx%d is ImageNet-like" % (name, ws, hs))
            check_image(d, path, name, rng, source="generated")
            mpath = os.path.join(tmp, "mask")
            with open(mpath, "wb") as f:
                f.write(msk)
            m = Image.open(mpath)
            ck.check(m.size == (ws, hs) and m.mode in ("P", "L"),
                     "%s: mask %s %s" % (name, m.mode, m.size))
            idx = d.decode(mpath, 0, palette_index=True)
            same("%s mask classes" % name, idx, np.array(m))
            if not isinstance(idx, str):
                ck.check(int(idx.max()) <= 20, "%s: mask classes within 0..20" % name)
            check_image(d, mpath, name + " mask", rng, mask=True)
    print("generated kinds (format, colour, bit depth, progressive, MCU width): %r" % kinds)
    ck.check(len(kinds) == 9, "the generator mixes 9 kinds of image: %d" % len(kinds))
    made = pillow_made(tmp, rng)
    for p in made:
        check_image(d, p, os.path.basename(p), rng, crops=12)
    damaged(d, tmp, made[0], [p for p in made if p.endswith("pil_RGB.png")][0])


TESTDATA = [
    # (file, image feature, mask feature, source): deeplab's test "photos" are uniform noise
    ("domj07+Tensorflow-Ion-Detetection__models_research_deeplab_testing_pascal_voc_seg_val-"
     "00000-of-00001.tfrecord", "image/encoded", "image/segmentation/class/encoded", "noise"),
    ("jongwook+tfrecord_lite__tests_images.tfrecord", "image_raw", None, "photo"),
    ("mindspore-ai+mindspore_test__tests_ut_data_dataset_test_tf_file_3_images_train-0000-of-"
     "0001.data", "image", None, "photo"),
]

# Bounds on the mean |error| of scaled decoding vs an area resize, per source: photos and the
# generator's images are smooth; on uniform noise the two filters simply differ (~12 at 1/2).
SCALE_ERR_BOUND = {"photo": 1.0, "generated": 1.0}


def report_scale_error():
    for (source, s), (tot, n, mx) in sorted(SCALE_ERR.items()):
        mean = tot / n
        print("scaled IDCT vs full decode + area resize: %s 1/%d: mean |error| %.2f over %d "
              "images, max %d" % (source, s, mean, n, mx))
        if source in SCALE_ERR_BOUND:
            ck.check(mean < SCALE_ERR_BOUND[source], "%s 1/%d: mean |error| %.2f < %.1f" % (
                source, s, mean, SCALE_ERR_BOUND[source]))


def run_testdata(d, tmp, rng):
    td = common.testdata_dir()
    common.protos()
    n = 0
    for fn, feat, mfeat, source in TESTDATA:
        path = os.path.join(td, fn)
        if not os.path.exists(path):
            common.skip("[testdata] %s is missing" % path)
        for i, ex in enumerate(examples_of(path)):
            name = "%s[%d]" % (fn[:40], i)
            ipath = os.path.join(tmp, "img")
            with open(ipath, "wb") as f:
                f.write(feature_bytes(ex, feat))
            check_image(d, ipath, name, rng, crops=20, source=source)
            pr = d.probe(ipath)
            h, w = feature_int(ex, "image/height"), feature_int(ex, "image/width")
            if h is None:
                h, w = feature_int(ex, "height"), feature_int(ex, "width")
            if h is not None:
                ck.check((int(pr[3]), int(pr[4])) == (w, h),
                         "%s: the record's width/height %dx%d" % (name, w, h))
            n += 1
            if mfeat:
                mpath = os.path.join(tmp, "mask")
                with open(mpath, "wb") as f:
                    f.write(feature_bytes(ex, mfeat))
                m = Image.open(mpath)
                ck.check(m.size == (int(pr[3]), int(pr[4])), "%s: mask size" % name)
                same("%s mask" % name, d.decode(mpath, 0, palette_index=True), np.array(m))
                check_image(d, mpath, name + " mask", rng, mask=True)
    print("testdata: %d images" % n)


def main():
    if len(sys.argv) != 3 or sys.argv[2] not in ("generated", "testdata"):
        print(__doc__)
        sys.exit(2)
    d = Dump(sys.argv[1])
    tmp = tempfile.mkdtemp(prefix="sluice-image-")
    rng = random.Random(7)
    try:
        if sys.argv[2] == "generated":
            run_generated(d, tmp, rng)
        else:
            run_testdata(d, tmp, rng)
        report_scale_error()
    finally:
        d.close()
        shutil.rmtree(tmp, ignore_errors=True)
    ck.finish()


main()
