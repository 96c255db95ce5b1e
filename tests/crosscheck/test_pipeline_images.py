# SPDX-License-Identifier: Apache-2.0
# Image steps: `sluicectl run` against the reference model (plref.py, Pillow + imgref.py).
"""JPEG and PNG images written here with Pillow (colour, grayscale, progressive, palette PNG,
a truncated JPEG), in TFRecord files of Examples; each spec runs through `sluicectl run --json
--values` and through plref.batches(), batch by batch: seq, epoch, rows, shapes, dtypes, and
every value. Decoding alone must be exact (the same libjpeg-turbo DCT as Pillow); after crops
and resizes a pixel may differ by one unit (float rounding in the resampler), which normalize
turns into 1/std.

Environment: SLUICECTL. Output: TAP, for meson.
"""

import io
import json
import os
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import common  # noqa: E402

try:
    import numpy as np
    from PIL import Image
except ImportError as e:
    common.skip("[deps] %s (python3-numpy, python3-pil)" % e)
import plref  # noqa: E402

SLUICECTL = os.environ.get("SLUICECTL", "")
MEAN, STD = [123.675, 116.28, 103.53], [58.395, 57.12, 57.375]

check = common.check  # a TAP case (common.finish counts the failures)


def picture(rng, h, w):
    y, x = np.mgrid[0:h, 0:w].astype(np.float64)
    img = np.empty((h, w, 3))
    for c in range(3):
        a, b, f = rng.uniform(-1, 1, 3)
        img[..., c] = 128 + 100 * np.sin(a * x / w * 5 + b * y / h * 5 + f * 3)
    img += rng.normal(0, 8, img.shape)
    return np.clip(img, 0, 255).astype(np.uint8)


def encode(rng, i):
    """Record i's image: mostly colour JPEG, some grayscale, progressive, PNG, palette PNG;
    and its segmentation mask: a grayscale PNG of the same size, classes 0..4 by the image's
    red level."""
    h, w = int(rng.integers(48, 140)), int(rng.integers(48, 140))
    px = picture(rng, h, w)
    mask = io.BytesIO()
    Image.fromarray((px[:, :, 0] // 52).astype(np.uint8)).save(mask, "PNG")
    out = io.BytesIO()
    kind = i % 6
    if kind == 1:
        Image.fromarray(px).convert("L").save(out, "JPEG", quality=90)
    elif kind == 2:
        Image.fromarray(px).save(out, "JPEG", quality=85, progressive=True)
    elif kind == 3:
        Image.fromarray(px).save(out, "PNG")
    elif kind == 4:
        Image.fromarray(px).convert("P", palette=Image.ADAPTIVE, colors=32).save(out, "PNG")
    else:
        Image.fromarray(px).save(out, "JPEG", quality=90)
    return out.getvalue(), mask.getvalue()


def write_dataset(d, n_files, per_file, seed, bad=None):
    pb = common.protos()[0]
    rng = np.random.default_rng(seed)
    os.makedirs(d)
    i = 0
    for f in range(n_files):
        recs = []
        for _ in range(per_file):
            ex = pb.Example()
            data, mask = encode(rng, i)
            if bad is not None and i == bad:
                data = data[:len(data) // 2]  # a truncated image
            ex.features.feature["image/encoded"].bytes_list.value.append(data)
            ex.features.feature["image/copy"].bytes_list.value.append(data)
            ex.features.feature["mask/encoded"].bytes_list.value.append(mask)
            ex.features.feature["label"].int64_list.value.append(i)
            recs.append(ex.SerializeToString())
            i += 1
        common.write_tfrecord(os.path.join(d, "part-%d.tfrecords" % f), recs, "none")
    with open(os.path.join(d, "__manifest__.json"), "w") as f:
        json.dump({"compression": None, "allow_var_len": False, "features": [
            {"name": "image/encoded", "dtype": "string", "shape": [],
             "deserialize_type": "string"},
            {"name": "image/copy", "dtype": "string", "shape": [],
             "deserialize_type": "string"},
            {"name": "mask/encoded", "dtype": "string", "shape": [],
             "deserialize_type": "string"},
            {"name": "label", "dtype": "int64", "shape": [], "deserialize_type": "int"}]}, f)
    return d


def spec(data, steps, **args):
    a = {"dataset": {"type": "dir", "args": {"data_dir": data}}, "target_batch_size": 5,
         "drop_remainder": False, "epochs": 1, "num_read_buffer_bytes": 65536,
         "num_prefetch": 2, "seed": 11,
         "primary_features": [{"from_name": "image/encoded", "to_name": "image"},
                              {"from_name": "label", "to_name": "label"}],
         "processing_steps": [dict(s, tensor="image") for s in steps]}
    a.update(args)
    return {"type": "independent", "args": a}


def step(t, **args):
    return {"type": t, "args": args}


def run(tmp, s):
    path = os.path.join(tmp, "spec.json")
    with open(path, "w") as f:
        json.dump(s, f)
    names = ",".join(x["to_name"] for x in s["args"]["primary_features"])
    p = subprocess.run([SLUICECTL, "run", path, "--json", "--values", names],
                       capture_output=True, text=True, timeout=600)
    return p.returncode, [json.loads(x) for x in p.stdout.splitlines() if x.strip()], p.stderr


def case(tmp, name, s, tol=0.0):
    """Compare every batch; tol: the largest difference allowed in an image value."""
    try:
        exp = plref.batches(s)
    except plref.PipelineError as e:
        exp = e
    rc, got, err = run(tmp, s)
    if isinstance(exp, Exception):
        return check(rc != 0 and str(exp).split(":")[0] in err,
                     "%s: both fail (%s | %s)" % (name, str(exp)[:120], err.strip()[:160]))
    if not check(rc == 0, "%s: sluicectl run exits 0 (%s)" % (name, err.strip()[:300])):
        return False
    ok = len(got) == len(exp)
    worst = 0.0
    for g, e in zip(got, exp):
        ok &= (g["seq"], g["epoch"], g["rows"]) == (e["seq"], e["epoch"], e["rows"])
        for t in sorted(e["tensors"]):
            gt, et = g["tensors"][t], e["tensors"][t]
            ok &= gt["dtype"] == et["dtype"] and gt["shape"] == et["shape"]
            gv = np.array(gt["values"], dtype=np.float64)
            ev = np.asarray(et["values"])
            if et["dtype"] == "bfloat16":  # the model's bits; sluicectl prints the values
                ev = (ev.astype(np.uint32) << 16).view(np.float32)
            ev = ev.astype(np.float64)
            if gv.shape != ev.shape:
                ok = False
                continue
            d = float(np.abs(gv - ev).max()) if gv.size else 0.0
            if t in ("boxes", "px"):  # the same float arithmetic: equal to float32 rounding
                ok &= d <= 1e-5 * max(1.0, float(np.abs(ev).max()) if ev.size else 1.0)
            elif t != "label":
                worst = max(worst, d)
                ok &= d <= tol
            else:
                ok &= d == 0
            if gt["ragged"]:
                ok &= gt["row_splits"] == et["row_splits"]
    return check(ok, "%s: %d batches equal the reference (largest image difference %g, "
                 "allowed %g)" % (name, len(exp), worst, tol))


def torchvision_center_crop(tmp, data, s):
    """The oracle: torchvision's center_crop on the PIL image, record by record."""
    try:
        import torchvision.transforms.functional as TF
    except Exception as e:
        print("skip center_crop against torchvision (%s)" % e)
        return
    rc, got, err = run(tmp, s)
    imgs = {}  # by label (the record's number)
    pb = common.protos()[0]
    for name in sorted(os.listdir(data)):
        if name.endswith(".tfrecords"):
            with open(os.path.join(data, name), "rb") as f:
                for _, payload in common.read_frames(f.read()):
                    ex = pb.Example()
                    ex.ParseFromString(payload)
                    imgs[ex.features.feature["label"].int64_list.value[0]] = \
                        ex.features.feature["image/encoded"].bytes_list.value[0]
    hh, ww = s["args"]["processing_steps"][1]["args"]["size"]
    ok, n = rc == 0, 0
    for g in got:
        vals = np.array(g["tensors"]["image"]["values"], np.uint8).reshape(-1, hh, ww, 3)
        for v, label in zip(vals, g["tensors"]["label"]["values"]):
            im = Image.open(io.BytesIO(imgs[label])).convert("RGB")
            ok &= np.array_equal(np.asarray(TF.center_crop(im, [hh, ww])), v)
            n += 1
    check(ok and n == len(imgs), "center_crop equals torchvision's on all %d images (%s)" %
          (n, err.strip()[:200]))


def write_box_dataset(d, n, seed, fmt="PNG", sizes=(60, 120)):
    """PNG images (exact pixels; or JPEG) of a white rectangle on black, its box in two features:
    "bbox" normalized ymin, xmin, ymax, xmax (TensorFlow's detection API) and "bbox_px" in
    pixels xmin, ymin, xmax, ymax (torchvision's); a second, empty box after it."""
    pb = common.protos()[0]
    rng = np.random.default_rng(seed)
    os.makedirs(d)
    recs = []
    for i in range(n):
        h, w = int(rng.integers(*sizes)), int(rng.integers(*sizes))
        r0, c0 = int(rng.integers(0, h // 2)), int(rng.integers(0, w // 2))
        r1, c1 = int(rng.integers(r0 + 8, h + 1)), int(rng.integers(c0 + 8, w + 1))
        img = np.zeros((h, w, 3), np.uint8)
        img[r0:r1, c0:c1] = 255
        out = io.BytesIO()
        Image.fromarray(img).save(out, fmt, **({"quality": 95} if fmt == "JPEG" else {}))
        ex = pb.Example()
        ex.features.feature["image/encoded"].bytes_list.value.append(out.getvalue())
        ex.features.feature["label"].int64_list.value.append(i)
        ex.features.feature["bbox"].float_list.value.extend(
            [r0 / h, c0 / w, r1 / h, c1 / w, 0.5, 0.5, 0.5, 0.5])
        ex.features.feature["bbox_px"].float_list.value.extend([c0, r0, c1, r1, 0, 0, 0, 0])
        recs.append(ex.SerializeToString())
    common.write_tfrecord(os.path.join(d, "part-0.tfrecords"), recs, "none")
    with open(os.path.join(d, "__manifest__.json"), "w") as f:
        json.dump({"compression": None, "allow_var_len": False, "features": [
            {"name": "image/encoded", "dtype": "string", "shape": [],
             "deserialize_type": "string"},
            {"name": "label", "dtype": "int64", "shape": [], "deserialize_type": "int"},
            {"name": "bbox", "dtype": "float32", "shape": [-1, 4], "deserialize_type": "float"},
            {"name": "bbox_px", "dtype": "float32", "shape": [2, 4],
             "deserialize_type": "float"}]}, f)
    return d


def boxes(tmp):
    """A boxes step: the boxes follow the image's crop, resize and flips, equal to the model,
    and (model-free) they bound the white rectangle they boxed, within a pixel of resampling."""
    data = write_box_dataset(os.path.join(tmp, "boxes"), 12, 8)
    s = spec(data, [], seed=3)
    s["args"]["primary_features"] = [
        {"from_name": "image/encoded", "to_name": "image"},
        {"from_name": "bbox", "to_name": "boxes"}, {"from_name": "bbox_px", "to_name": "px"},
        {"from_name": "label", "to_name": "label"}]
    s["args"]["processing_steps"] = [
        dict(step("decode_image", channels=3), tensor="image"),
        dict(step("random_flip"), tensor="image"),
        dict(step("random_resized_crop", size=[48, 40], scale=[0.4, 1.0]), tensor="image"),
        dict(step("random_flip", axis=0), tensor="image"),
        dict(step("normalize", dtype="uint8", layout="HWC"), tensor="image"),
        dict(step("boxes", image="image"), tensor="boxes"),
        dict(step("boxes", image="image", format="xyxy", normalized=False), tensor="px")]
    case(tmp, "boxes follow the image's flips and crop (normalized yxyx, pixel xyxy)", s,
         tol=1)
    rc, got, err = run(tmp, s)
    ok, checked, worst = rc == 0, 0, 0.0
    for g in got:
        imgs = np.array(g["tensors"]["image"]["values"], np.uint8).reshape(-1, 48, 40, 3)
        bxs = np.array(g["tensors"]["boxes"]["values"], np.float64).reshape(-1, 2, 4)
        pxs = np.array(g["tensors"]["px"]["values"], np.float64).reshape(-1, 2, 4)
        for im, b, px in zip(imgs, bxs, pxs):
            y0, x0, y1, x1 = b[0] * [48, 40, 48, 40]
            ok &= np.allclose([x0, y0, x1, y1], px[0], atol=1e-3)  # the two forms agree
            ok &= b[1][0] == b[1][2] and b[1][1] == b[1][3]  # the empty box stays empty
            white = np.argwhere(im[:, :, 0] > 127)
            if y1 - y0 < 2 or x1 - x0 < 2 or not len(white):
                continue  # cropped away (the box is then empty or a sliver)
            (r0, c0), (r1, c1) = white.min(0), white.max(0) + 1
            worst = max(worst, float(np.abs(np.array([r0, c0, r1, c1]) -
                                            np.array([y0, x0, y1, x1])).max()))
            checked += 1
    check(ok and checked >= 6 and worst <= 1.0,
          "boxes bound their white rectangle after flips and the crop in %d images (worst "
          "edge %.2f px; %s)" % (checked, worst, err.strip()[:200]))
    bad = json.loads(json.dumps(s))
    bad["args"]["processing_steps"][5]["args"]["image"] = "label"
    rc, _, err = run(tmp, bad)
    check(rc != 0 and 'boxes follow tensor "label", which has no decode_image' in err,
          "boxes that follow a tensor without decode_image: refused (%s)" % err.strip()[:200])


def scaled_idct(tmp):
    """decode_image's scaled_idct: JPEGs 160 - 480 pixels a side cropped and shrunk to 40 x 32
    (2x - 12x), decoded at 1/2 .. 1/8. Against the exact pipeline (same draws): a bounded
    error; and the boxes still bound their rectangles (the crop widened to whole scaled pixels
    moves the geometry, and the boxes follow it)."""
    data = write_box_dataset(os.path.join(tmp, "big"), 16, 9, "JPEG", (160, 480))
    outs = {}
    for scaled in (False, True):
        s = spec(data, [], seed=6)
        s["args"]["primary_features"] = [
            {"from_name": "image/encoded", "to_name": "image"},
            {"from_name": "bbox", "to_name": "boxes"}, {"from_name": "label", "to_name": "label"}]
        s["args"]["processing_steps"] = [
            dict(step("decode_image", channels=3, scaled_idct=scaled), tensor="image"),
            dict(step("random_resized_crop", size=[40, 32], scale=[0.6, 1.0]), tensor="image"),
            dict(step("random_flip"), tensor="image"),
            dict(step("normalize", dtype="uint8", layout="HWC"), tensor="image"),
            dict(step("boxes", image="image"), tensor="boxes")]
        rc, got, err = run(tmp, s)
        if not check(rc == 0, "scaled_idct=%s: sluicectl run (%s)" % (scaled, err.strip()[:200])):
            return
        outs[scaled] = got
    a = np.concatenate([np.array(g["tensors"]["image"]["values"], np.int64) for g in outs[0]])
    b = np.concatenate([np.array(g["tensors"]["image"]["values"], np.int64) for g in outs[1]])
    d = np.abs(a - b)
    check(a.shape == b.shape and 0 < d.mean() < 4 and np.percentile(d, 99) < 64,
          "scaled_idct against the exact decode + resize: mean |error| %.2f, 99th percentile "
          "%d, max %d levels (bounds 4, 64: the edges of the rectangles)" % (
              d.mean(), np.percentile(d, 99), d.max()))
    worst, n = 0.0, 0
    for g in outs[1]:
        imgs = np.array(g["tensors"]["image"]["values"], np.uint8).reshape(-1, 40, 32, 3)
        bxs = np.array(g["tensors"]["boxes"]["values"], np.float64).reshape(-1, 2, 4)
        for im, bx in zip(imgs, bxs):
            y0, x0, y1, x1 = bx[0] * [40, 32, 40, 32]
            white = np.argwhere(im[:, :, 0] > 127)
            if y1 - y0 < 2 or x1 - x0 < 2 or not len(white):
                continue
            (r0, c0), (r1, c1) = white.min(0), white.max(0) + 1
            worst = max(worst, float(np.abs(np.array([r0, c0, r1, c1]) -
                                            np.array([y0, x0, y1, x1])).max()))
            n += 1
    check(n >= 8 and worst <= 1.0, "scaled_idct: the boxes bound their rectangles in %d images "
          "(worst edge %.2f px)" % (n, worst))


def paired(tmp, data, train, norm_tol):
    """Paired augmentation: steps that share a "draw" take the same random numbers. The image
    and a byte-identical copy of it, both through the train steps with the crop and the flip
    drawn together, come out equal; drawn apart they do not (so the first check can fail).
    The segmentation form: the image and its PNG mask, the mask cropped alike, resized with
    nearest and left uint8; against the model, and every mask value a class of the input."""
    feats = [{"from_name": "image/encoded", "to_name": "image"},
             {"from_name": "image/copy", "to_name": "twin"},
             {"from_name": "label", "to_name": "label"}]

    def steps_for(tensor, drawn, interp="bilinear", norm=True):
        out = [dict(step("decode_image", channels=3 if norm else 1), tensor=tensor),
               dict(step("random_resized_crop", size=[40, 48], interpolation=interp),
                    tensor=tensor),
               dict(step("random_flip"), tensor=tensor)]
        if drawn:
            out[1]["args"]["draw"], out[2]["args"]["draw"] = "crop", "flip"
        if norm:
            out.append(dict(step("normalize", mean=MEAN, std=STD), tensor=tensor))
        return out

    for drawn in (True, False):
        s = spec(data, [], seed=4)
        s["args"]["primary_features"] = feats
        s["args"]["processing_steps"] = steps_for("image", drawn) + steps_for("twin", drawn)
        rc, got, err = run(tmp, s)
        same = rc == 0 and all(g["tensors"]["image"]["values"] == g["tensors"]["twin"]["values"]
                               for g in got)
        if drawn:
            check(same and len(got) == 5, "draw shared by an image and its copy: equal crops "
                  "and flips, in every batch (%s)" % err.strip()[:200])
            case(tmp, "draw shared by an image and its copy", s, tol=norm_tol)
        else:
            check(rc == 0 and not same, "without a shared draw the copy is cropped otherwise")
    s = spec(data, [], seed=5)
    s["args"]["primary_features"] = [feats[0], {"from_name": "mask/encoded", "to_name": "mask"},
                                     feats[2]]
    s["args"]["processing_steps"] = (steps_for("image", True) +
                                     steps_for("mask", True, "nearest", norm=False))
    case(tmp, "segmentation: image and PNG mask share the crop and the flip, mask nearest", s,
         tol=norm_tol)
    rc, got, err = run(tmp, s)
    vals = set(v for g in got for v in g["tensors"]["mask"]["values"]) if rc == 0 else set()
    check(rc == 0 and vals and vals <= set(range(5)) and
          all(g["tensors"]["mask"]["shape"][1:] == [40, 48, 1] for g in got),
          "segmentation: the mask stays classes (%s), [40, 48, 1] uint8" % sorted(vals))
    s["args"]["processing_steps"][5]["args"]["scale"] = [0.5, 1.0]
    rc, _, err = run(tmp, s)
    check(rc != 0 and "args.processing_steps[5].args.draw" in err and "scale" in err,
          "a draw shared by steps with other scales is a spec error at its path (%s)" %
          err.strip()[:300])


def main():
    common.start()
    if not SLUICECTL:
        common.skip("[env] SLUICECTL is not set (run through meson test)")
    common.protos()
    norm_tol = 1.0 / min(STD) + 1e-3
    with tempfile.TemporaryDirectory(prefix="sluice-img-") as tmp:
        data = write_dataset(os.path.join(tmp, "img"), 2, 12, 5)
        case(tmp, "decode, as stored, padded", spec(data, [step("decode_image")], padding=True))
        case(tmp, "decode to RGB, padded", spec(data, [step("decode_image", channels=3)],
                                                padding=True))
        case(tmp, "decode to gray (libjpeg's Y for JPEG), padded",
             spec(data, [step("decode_image", channels=1)], padding=True), tol=1)
        train = [step("decode_image", channels=3), step("random_resized_crop", size=[40, 48]),
                 step("random_flip"), step("normalize", mean=MEAN, std=STD)]
        case(tmp, "train: random_resized_crop, flip, normalize CHW float32",
             spec(data, train), tol=norm_tol)
        case(tmp, "train, shuffled, 2 epochs",
             spec(data, train, shuffle=True, epochs=2, num_shuffle_buffer_elements=7,
                  num_filenames_shuffle_buffer=2, num_mix_files=2), tol=norm_tol)
        evals = [step("decode_image", channels=3), step("resize", shorter_side=52),
                 step("center_crop", size=[48, 48]),
                 step("normalize", mean=MEAN, std=STD, dtype="float16", layout="HWC")]
        case(tmp, "eval: resize shorter side, center_crop, normalize HWC float16",
             spec(data, evals), tol=norm_tol + 0.01)
        bf16 = [step("decode_image", channels=3), step("random_resized_crop", size=[40, 48]),
                step("normalize", mean=MEAN, std=STD, dtype="bfloat16", layout="HWC")]
        case(tmp, "normalize to bfloat16 (round to nearest even), HWC", spec(data, bf16),
             tol=norm_tol + 1 / 64)  # a level of difference, then one bfloat16 step
        case(tmp, "resize (area), vertical flip always, uint8",
             spec(data, [step("decode_image", channels=3),
                         step("resize", size=[30, 20], interpolation="area"),
                         step("random_flip", axis=0, probability=1.0)]), tol=1)
        # color_jitter where its input is exact (the decoded image): the 8-bit HSV of its hue
        # step turns a unit of difference in a resized pixel into several
        jitter = [step("decode_image", channels=3),
                  step("color_jitter", brightness=0.4, contrast=0.4, saturation=0.4, hue=0.1),
                  step("random_resized_crop", size=[40, 48]), step("random_flip"),
                  step("normalize", mean=MEAN, std=STD)]
        case(tmp, "train with color_jitter (all four, random order), then the crop",
             spec(data, jitter), tol=norm_tol)
        case(tmp, "color_jitter, then center_crop, uint8 HWC: exact",
             spec(data, [step("decode_image", channels=3),
                         step("color_jitter", brightness=[0.5, 1.5],
                                                    hue=[-0.2, 0.3]),
                         step("center_crop", size=[40, 40]),
                         step("normalize", dtype="uint8", layout="HWC")]))
        big = [step("decode_image", channels=3), step("center_crop", size=[120, 131]),
               step("normalize", dtype="uint8", layout="HWC")]
        case(tmp, "center_crop larger than the image: padded with zeros, as torchvision",
             spec(data, big))
        case(tmp, "center_crop larger, after a random flip: the padding mirrored too",
             spec(data, [big[0], step("random_flip"), step("random_flip", axis=0), big[1],
                         big[2]]))
        torchvision_center_crop(tmp, data, spec(data, big))
        case(tmp, "a flip before the crop mirrors the crop",
             spec(data, [step("decode_image", channels=3), step("random_flip"),
                         step("center_crop", size=[40, 30]),
                         step("random_resized_crop", size=[16, 16], scale=[0.3, 0.6])]),
             tol=1)
        paired(tmp, data, train, norm_tol)
        boxes(tmp)
        scaled_idct(tmp)
        bad = write_dataset(os.path.join(tmp, "bad"), 1, 8, 6, bad=5)  # a colour JPEG
        case(tmp, "a truncated JPEG, on_corrupt skip_record: its row is dropped",
             spec(bad, train, on_corrupt="skip_record"), tol=norm_tol)
        rc, _, err = run(tmp, spec(bad, train))
        check(rc != 0 and "record 5" in err and 'tensor "image"' in err and "JPEG" in err,
              "a truncated JPEG, on_corrupt fail: the error names the record, the tensor and "
              "the decoder (%s)" % err.strip()[:300])
    common.finish()


if __name__ == "__main__":
    sys.exit(main())
