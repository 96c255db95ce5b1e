# SPDX-License-Identifier: Apache-2.0
# The reference model of the pipeline: docs/pipeline-semantics.md in pure Python and numpy.
"""What batches a pipeline spec produces, written from docs/pipeline-semantics.md alone.

batches(spec) yields one dict per batch, shaped like a line of `sluicectl run --json`:
{"seq", "epoch", "rows", "end_epoch", "end_stream", "tensors": {name: {"dtype", "shape",
"ragged", "digest", "values", "row_splits"}}} where "values" is the flat numpy array (strings:
an object array of bytes) and "row_splits" a list (ragged tensors only). Records are parsed with
google.protobuf (common.protos()). Errors that stop the pipeline raise PipelineError.
"""

import fnmatch
import json
import os
import struct
import warnings
import zlib

import numpy as np

import common

M64 = (1 << 64) - 1
INT_DTYPES = ("int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64")


class PipelineError(Exception):
    """The pipeline stops (on_corrupt "fail", a plan error, a batch error)."""


class RecordError(Exception):
    """One record cannot become a row: handled by on_corrupt."""


# ---- random numbers ----------------------------------------------------------------------

def mix64(z):
    z &= M64
    z ^= z >> 30
    z = (z * 0xBF58476D1CE4E5B9) & M64
    z ^= z >> 27
    z = (z * 0x94D049BB133111EB) & M64
    return z ^ (z >> 31)


class Rng:
    """The SplitMix64 stream keyed by (seed, epoch, stream, index)."""

    def __init__(self, seed, epoch, stream, index):
        s = mix64(seed ^ 0x736C756963650000)
        s = mix64(s ^ epoch)
        s = mix64(s ^ stream)
        self.s = mix64(s ^ index)

    def next(self):
        self.s = (self.s + 0x9E3779B97F4A7C15) & M64
        return mix64(self.s)

    def below(self, n):
        return self.next() % n

    def uniform(self, lo, hi):
        return lo + self.below(hi - lo + 1)


def shuffle_buffer(items, size, rng):
    """tf.data's shuffle buffer of the given size over a list."""
    items = list(items)
    buf = items[:min(size, len(items))]
    nxt = len(buf)
    out = []
    while buf:
        i = rng.below(len(buf))
        out.append(buf[i])
        if nxt < len(items):
            buf[i] = items[nxt]
            nxt += 1
        else:
            buf[i] = buf[-1]
            buf.pop()
    return out


def global_perm(n, seed, epoch):
    """Step 4g: [perm(0), ..., perm(n - 1)], the global shuffle's permutation of [0, n) in
    epoch e: a six-round balanced Feistel network on 2h bits (4^h >= n, h >= 1), keyed by the
    first six outputs of stream (seed, e, 4, 0), walked along its cycle until below n."""
    h = 1
    while 4 ** h < n:
        h += 1
    mask = (1 << h) - 1
    rng = Rng(seed, epoch, 4, 0)
    keys = [rng.next() for _ in range(6)]

    def enc(x):
        left, right = x >> h, x & mask
        for kj in keys:
            left, right = right, left ^ (mix64(right ^ kj) & mask)
        return (left << h) | right

    out = []
    for k in range(n):
        x = enc(k)
        while x >= n:
            x = enc(x)
        out.append(x)
    return out


# ---- the spec ----------------------------------------------------------------------------

def describe(v):
    """A JSON value as the engine's messages show it (io/jsonmsg.c, jsonmsg_describe)."""
    if isinstance(v, dict):
        return "an object"
    if isinstance(v, list):
        return "an array"
    if v is None or isinstance(v, bool):
        return json.dumps(v)
    return json.dumps(v, ensure_ascii=False, separators=(",", ":"))


def parse_slice(text):
    """"[3,:,4:,:-2,1:4]" -> a tuple of ints and slices."""
    t = text.strip()
    if t.startswith("[") and t.endswith("]"):
        t = t[1:-1]
    out = []
    for part in t.split(","):
        part = part.strip()
        if ":" in part:
            nums = [int(x) if x.strip() else None for x in part.split(":")]
            out.append(slice(*nums))
        else:
            out.append(int(part))
    return tuple(out)


class Spec:
    """The keys of a spec that the semantics depend on, with their defaults."""

    def __init__(self, spec):
        a = spec["args"]
        self.type = spec.get("type", "independent")
        self.dataset = a["dataset"]
        self.batch = a["target_batch_size"]
        self.drop_remainder = a.get("drop_remainder", False)
        self.epochs = a.get("epochs", 1)
        shuffle = a.get("shuffle", False)
        if shuffle != "global" and not isinstance(shuffle, bool):
            raise PipelineError('args.shuffle: expected true, false or "global", got %s'
                                % describe(shuffle))
        # "global" (step 4g): one permutation of every record, no file shuffle, no interleave,
        # no buffer; shuffle itself is then false (the buffer knobs are ignored, as without it)
        self.global_shuffle = shuffle == "global"
        self.shuffle = shuffle is True
        self.on_corrupt = a.get("on_corrupt", "fail")
        if self.global_shuffle:
            if self.type != "independent":
                raise PipelineError('args.shuffle: "global" is for the independent loader '
                                    '(records are read by offset; a sequence loader\'s windows '
                                    'are made of consecutive records)')
            if "cycle_length" in a:
                raise PipelineError('args.cycle_length: not allowed when shuffle is "global": '
                                    'there is no interleave')
            if a.get("sloppy_interleave", False) is True:
                raise PipelineError('args.sloppy_interleave: not allowed when shuffle is '
                                    '"global": there is no interleave')
            if self.on_corrupt == "skip_file":
                raise PipelineError('args.on_corrupt: "skip_file" is not allowed when shuffle '
                                    'is "global": a file\'s records are not read in order (use '
                                    '"skip_record")')
        # the interleave cycle: num_mix_files when shuffling (cycle_length is refused then),
        # else cycle_length when given (num_parallel_reads then changes no batch), else
        # num_parallel_reads ("auto": 4)
        reads = a.get("num_parallel_reads", 1)
        if self.shuffle:
            if "cycle_length" in a:
                raise PipelineError("args.cycle_length: not allowed when shuffle is true: the "
                                    "interleave cycle is then num_mix_files (use num_mix_files "
                                    "instead)")
            self.cycle = a.get("num_mix_files", 1)
        elif "cycle_length" in a:
            self.cycle = a["cycle_length"]
        else:
            self.cycle = 4 if reads == "auto" else reads
        self.shuffle_elems = a.get("num_shuffle_buffer_elements", 1)
        self.shuffle_files = a.get("num_filenames_shuffle_buffer", 1)
        self.seed = a.get("seed", 0)
        self.shard = a.get("shard")
        self.primary = [(p["from_name"], p["to_name"]) for p in a["primary_features"]]
        # {"to_name", "type": "const", "args": {"shape", "dtype", "value"}}, flattened
        self.secondary = [dict(s.get("args") or {}, to_name=s["to_name"])
                          for s in a.get("secondary_features", [])]
        # {"tensor", "type": "slice", "args": {"slice": "[...]"}} as (tensor, index tuple);
        # the image steps (decode_image, ...) as (their index, the step), per tensor
        steps = a.get("processing_steps", [])
        self.steps = [(s["tensor"], parse_slice(s["args"]["slice"]))
                      for s in steps if s["type"] == "slice"]
        self.image_steps = {}  # tensor -> [(the step's random stream index, step)]
        first_of_draw = {}  # steps that share a "draw" take the first one's stream
        self.box_steps = {}  # tensor -> (image tensor, xyxy, pixels)
        for i, s in enumerate(steps):
            if s["type"] == "boxes":
                a = s["args"]
                self.box_steps[s["tensor"]] = (a["image"], a.get("format", "yxyx") == "xyxy",
                                               not a.get("normalized", True))
            elif s["type"] != "slice":
                d = s.get("args", {}).get("draw")
                k = first_of_draw.setdefault(d, i) if d is not None else i
                self.image_steps.setdefault(s["tensor"], []).append((k, s))
        pad = a.get("padding", False)
        self.padding = bool(pad)
        self.pad_entries = {}
        if isinstance(pad, list):
            for e in pad:
                self.pad_entries[e["tensor"]] = e  # {"tensor", "shape", "value"}
        self.min_window = a.get("min_window", 1)
        self.max_window = a.get("max_window", 1)
        self.stride = a.get("stride")


# ---- the dataset -------------------------------------------------------------------------

def load_manifest(path):
    with open(path) as f:
        m = json.load(f)
    comp = m["compression"]
    m["compression"] = comp.lower() if comp else "none"
    m["by_name"] = {f["name"]: f for f in m["features"]}
    return m


def _framed(path, compression):
    """Whether the file starts as a TFRecord stream: empty, or a header whose CRC holds."""
    with open(path, "rb") as f:
        head = f.read(4096)
    if compression != "none":
        try:
            d = zlib.decompressobj(16 + zlib.MAX_WBITS if compression == "gzip"
                                   else zlib.MAX_WBITS)
            out = d.decompress(head, 12)
        except zlib.error:
            return False
        if not out and d.eof:
            return True
        head = out
    elif not head:
        return True
    return len(head) >= 12 and struct.unpack("<I", head[8:12])[0] == common.masked_crc(head[:8])


def is_data(root, path, pattern, compression):
    """dataset_open_dir's rule: the pattern on the relative path, else *.tfrecords or framed."""
    if pattern is not None:
        rel = os.path.relpath(path, root)
        # fnmatch with FNM_PATHNAME | FNM_PERIOD: match each '/'-separated part
        parts, pats = rel.split("/"), pattern.split("/")
        return len(parts) == len(pats) and all(
            fnmatch.fnmatchcase(x, y) and not (x.startswith(".") and not y.startswith("."))
            for x, y in zip(parts, pats))
    if path.lower().endswith(".tfrecords"):
        return True
    return os.path.isfile(path) and _framed(path, compression)


def dataset_files(ds):
    """(manifest, [absolute file paths in the dataset's order])."""
    a = ds["args"]
    if ds["type"] == "dir":
        root = os.path.realpath(a["data_dir"])
        man = load_manifest(os.path.join(root, "__manifest__.json"))
        files = []
        for d, dirs, names in os.walk(root, followlinks=True):
            dirs[:] = [x for x in dirs if not x.startswith(".")]
            files += [os.path.join(d, n) for n in names
                      if not n.startswith(".") and n != "__manifest__.json" and
                      is_data(root, os.path.join(d, n), a.get("pattern"),
                              man["compression"])]
        return man, sorted(files, key=lambda p: p.encode("utf-8", "surrogateescape"))
    man = load_manifest(a["manifest_file"])
    base = os.path.dirname(os.path.abspath(a["list_file"]))
    files = []
    with open(a["list_file"]) as f:
        for line in f:
            line = line.strip()
            if line and not line.startswith("#"):
                files.append(os.path.join(base, line))
    return man, files


def file_records(path, compression):
    """[(index, offset, payload, crc_ok)], and a framing error message or None."""
    with open(path, "rb") as f:
        data = f.read()
    try:
        data = common.decompress(data, compression)
    except Exception as e:  # a broken gzip/zlib stream
        return [], "%s: %s" % (path, e)
    out = []
    pos, n = 0, len(data)
    while pos < n:
        if n - pos < 12:
            return out, "%s: offset %d: truncated header" % (path, pos)
        hdr = data[pos:pos + 8]
        (length,) = struct.unpack("<Q", hdr)
        if struct.unpack("<I", data[pos + 8:pos + 12])[0] != common.masked_crc(hdr):
            return out, "%s: offset %d: header CRC mismatch" % (path, pos)
        if length > n - pos - 16:
            return out, "%s: offset %d: truncated record" % (path, pos)
        payload = data[pos + 12:pos + 12 + length]
        (dcrc,) = struct.unpack("<I", data[pos + 12 + length:pos + 16 + length])
        out.append((len(out), pos, payload, dcrc == common.masked_crc(payload)))
        pos += 16 + length
    return out, None


# ---- a record to a row -------------------------------------------------------------------

def np_dtype(name):
    if name == "bfloat16":  # numpy has none: the bits (the top half of a float32)
        return np.dtype(np.uint16)
    return np.dtype(object) if name == "string" else np.dtype(name)


def cast(a, dt):
    """int64 or float32 values to dt with the documented rules (wrap, truncate, saturate)."""
    t = np.dtype(dt)
    with np.errstate(all="ignore"), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        if t == np.bool_:
            return a != 0
        if a.dtype.kind == "f" and t.kind in "iu":
            x = np.trunc(a.astype(np.float64))
            x[np.isnan(x)] = 0
            info = np.iinfo(t)
            hi, lo = x >= float(int(info.max) + 1), x < float(int(info.min))
            mid = ~(hi | lo)
            out = np.zeros(x.shape, t)
            out[mid] = x[mid].astype(t)
            out[hi], out[lo] = info.max, info.min
            return out
        return a.astype(t)


def var_count(f):
    """A variable-length Example (or context) feature: int, float or string, shape [-1, ...]."""
    return (f["deserialize_type"] != "raw" and not f.get("var_len") and len(f["shape"]) > 0
            and f["shape"][0] == -1)


def default_value(f, what):
    """The feature's default as an array of its shape (the manifest's "default", cast)."""
    d = f["default"]
    vals = list(np.array(d, dtype=object).reshape(-1)) if isinstance(d, list) else [d]
    n = int(np.prod(f["shape"]))
    if len(vals) == 1:
        vals = vals * n
    kind, dt = f["deserialize_type"], f["dtype"]
    if kind == "int":
        a = cast(np.array(vals, dtype=np.int64).reshape(-1), dt)
    elif kind == "float":
        a = cast(np.array(vals, dtype=np.float32).reshape(-1), dt)
    else:
        a = np.empty(len(vals), dtype=object)
        a[:] = [v.encode("utf-8") for v in vals]
    return _reshape(a, f["shape"], what)


def record_shape(f):
    """A manifest feature's per-record shape, -1 for the var_len axis."""
    s = list(f["shape"])
    n = (f.get("deserialize_args") or {}).get("len") or 1
    if f["deserialize_type"] == "raw" and n > 1:
        s = [n] + s
    return ([-1] if f.get("var_len") else []) + s


def _reshape(vals, shape, what):
    shape = list(shape)
    if -1 in shape:
        known = int(np.prod([d for d in shape if d != -1]))
        if known == 0 or len(vals) % known:
            raise RecordError("%s: %d values do not fit shape %s" % (what, len(vals), shape))
        shape[shape.index(-1)] = len(vals) // known
    if int(np.prod(shape)) != len(vals):
        raise RecordError("%s: expected %d values (shape %s), got %d" %
                          (what, int(np.prod(shape)), shape, len(vals)))
    return vals.reshape(shape)


def _values(feat, f, what):
    """One protobuf Feature of manifest feature f: a numpy array of the feature's elements."""
    dt, kind = f["dtype"], f["deserialize_type"]
    want = {"int": "int64_list", "float": "float_list"}.get(kind, "bytes_list")
    kind_set = feat.WhichOneof("kind")
    if kind_set not in (None, want):  # Feature{} is an empty list of the right kind
        raise RecordError("%s: expected %s, got %s" % (what, want, kind_set))
    vals = getattr(feat, want).value
    if kind == "int":
        return cast(np.array(vals, dtype=np.int64), dt)
    if kind == "float":
        return cast(np.array(vals, dtype=np.float32), dt)
    if kind == "string":
        out = np.empty(len(vals), dtype=object)
        out[:] = list(vals)
        return out
    return [bytes(v) for v in vals]


def _raw(b, f, shape, what):
    dt = f["dtype"]
    if dt == "bool":
        arr = np.frombuffer(b, dtype=np.uint8) != 0
    else:
        end = "<" if f["deserialize_args"]["endian"] == "little" else ">"
        t = np.dtype(dt).newbyteorder(end)
        if len(b) % t.itemsize:
            raise RecordError("%s: %d bytes are not a multiple of %d" % (what, len(b), t.itemsize))
        arr = np.frombuffer(b, dtype=t).astype(np.dtype(dt))
    return _reshape(arr, shape, what)


def _one(feat, f, what):
    """A non-var_len feature (or one step of a var_len one) to its array."""
    v = _values(feat, f, what)
    if f["deserialize_type"] != "raw":
        return _reshape(v, f["shape"], what)
    n = (f.get("deserialize_args") or {}).get("len") or 1
    if len(v) != n:
        raise RecordError("%s: expected %d byte strings, got %d" % (what, n, len(v)))
    parts = [_raw(b, f, f["shape"], what) for b in v]
    if n == 1:
        return parts[0]
    if any(p.shape != parts[0].shape for p in parts):
        raise RecordError("%s: byte strings of different lengths" % what)
    return np.stack(parts)


def parse_record(payload, man, what):
    """A serialized record -> its protobuf message (Example or SequenceExample)."""
    pb2 = common.protos()[0]
    msg = pb2.SequenceExample() if man["allow_var_len"] else pb2.Example()
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            msg.ParseFromString(payload)
    except Exception as e:
        raise RecordError("%s: not a valid %s (%s)" % (what, type(msg).__name__, e))
    return msg


def feature_value(msg, man, name, what):
    f = man["by_name"][name]
    what = '%s: feature "%s"' % (what, name)
    if not man["allow_var_len"]:
        feats = msg.features.feature
    elif not f.get("var_len"):
        feats = msg.context.feature
    else:
        lists = msg.feature_lists.feature_list  # an absent list has zero steps
        steps = [_one(s, f, what) for s in lists[name].feature] if name in lists else []
        inner = [d for d in f["shape"]]
        if not steps:
            return np.zeros([0] + [max(d, 0) for d in inner], dtype=np_dtype(f["dtype"]))
        if any(s.shape != steps[0].shape for s in steps):
            raise RecordError("%s: steps of different shapes" % what)
        return np.stack(steps)
    if name not in feats:
        if "default" in f:  # FixedLenFeature's default
            return default_value(f, what)
        if var_count(f):  # an empty row (RaggedFeature)
            return np.zeros([0] + list(f["shape"][1:]), dtype=np_dtype(f["dtype"]))
        raise RecordError("%s: no such feature" % what)
    kind = feats[name].WhichOneof("kind")
    if "default" in f and (kind is None or len(getattr(feats[name], kind).value) == 0):
        return default_value(f, what)  # a feature without values takes it too
    return _one(feats[name], f, what)


def const_value(val, dt):
    if dt == "string":
        return (val if val is not None else "").encode("utf-8")  # JSON text is UTF-8
    if val is None:
        val = 0
    return np.array([val]).astype(np.dtype(dt))[0] if dt != "bool" else bool(val)


def const_fill(shape, dt, val):
    a = np.empty(shape, dtype=np_dtype(dt))
    a.fill(const_value(val, dt))
    return a


class Tensor:
    """An output tensor: name, dtype, and whether its axis 0 is a ragged (var_len) axis."""

    def __init__(self, name, dtype, varlen):
        self.name, self.dtype, self.varlen = name, dtype, varlen


def plan(sp, man):
    """[Tensor] in output order, applying the static effect of the slices on raggedness."""
    out, by = [], {}
    for frm, to in sp.primary:
        f = man["by_name"][frm]
        by[to] = Tensor(to, f["dtype"], bool(f.get("var_len")) or var_count(f))
        out.append(by[to])
    for s in sp.secondary:
        shp, dt = s.get("shape"), s.get("dtype")
        src = by.get(shp) if isinstance(shp, str) else None
        t = Tensor(s["to_name"], by[dt].dtype if dt in by else dt, bool(src and src.varlen))
        by[t.name] = t
        out.append(t)
    for name, idx in sp.steps:
        t = by[name]
        if t.varlen and isinstance(idx[0], int):
            t.varlen = False
    for name, steps in sp.image_steps.items():  # [h, w, c] or [c, h, w]: ragged unless resized
        t = by[name]
        fixed = False
        t.dtype = "uint8"
        for _, st in steps:
            a = st["args"]
            if st["type"] in ("random_resized_crop", "center_crop") or \
                    (st["type"] == "resize" and "size" in a):
                fixed = True
            elif st["type"] == "resize":
                fixed = False
            elif st["type"] == "normalize":
                t.dtype = a.get("dtype", "float32")
        t.varlen = not fixed
    return out


# ---- image steps (docs/image.md; the kernels in imgref.py) --------------------------------

STREAM_AUGMENT = 0x100


def decode_image(data, args, what):
    """The pixels Pillow decodes (libjpeg-turbo's ISLOW DCT underneath): uint8 [H, W, C]."""
    import io
    from PIL import Image
    try:
        im = Image.open(io.BytesIO(data))
        ch = args.get("channels", 0)
        gray = im.mode in ("L", "LA", "I", "I;16", "1")  # a palette is colour: 3
        if ch == 1 and im.format == "JPEG":
            im.draft("L", im.size)  # libjpeg's own grayscale output: the Y channel
        if im.mode in ("I", "I;16"):
            a = (np.asarray(im, dtype=np.uint16) >> 8).astype(np.uint8)  # the high byte
            if ch == 3:
                a = np.repeat(a[:, :, None], 3, axis=2)
            return a[:, :, None] if a.ndim == 2 else a
        want = "L" if ch == 1 or (ch == 0 and gray) else "RGB"
        a = np.asarray(im.convert(want))
    except Exception as e:
        raise RecordError("%s: decode_image: %s" % (what, e))
    return a[:, :, None] if a.ndim == 2 else a


def image_chain(data, steps, sp, epoch, position, what, geo=None):
    """decode_image, then the steps in order: crops mirrored by the flips drawn before them,
    resizes, the flips applied last, normalize (as the engine does: docs/image.md). geo, a
    list, gets the geometry for boxes: ("size", h, w), then ("crop", x, y, w, h), ("pad",
    top, left, h, w), ("resize", h, w) in the unflipped image, and ("flip", fx, fy, h, w)."""
    import imgref
    img = decode_image(data, steps[0][1]["args"], what)
    if geo is not None:
        geo.append(("size",) + img.shape[:2])
    flip_x = flip_y = False
    out_dt, chw, mean, std = "uint8", False, None, None
    for idx, st in steps[1:]:
        a, t = st["args"], st["type"]
        rng = Rng(sp.seed, epoch, STREAM_AUGMENT + idx, position)
        h, w = img.shape[:2]
        rect = None
        if t == "random_resized_crop":
            rect = imgref.random_resized_crop(rng, h, w, tuple(a.get("scale", (0.08, 1.0))),
                                              tuple(a.get("ratio", (3 / 4, 4 / 3))))
        elif t == "center_crop":
            ch_, cw_ = a["size"]
            if ch_ > h or cw_ > w:  # torchvision: zeros around, the odd one bottom/right
                ph, pw = max(ch_ - h, 0), max(cw_ - w, 0)
                top, left = ph // 2, pw // 2
                if flip_y:  # the image is kept unflipped: the padding mirrored
                    top = ph - top
                if flip_x:
                    left = pw - left
                img = np.pad(img, ((top, ph - top), (left, pw - left), (0, 0)))
                h, w = img.shape[:2]
                if geo is not None:
                    geo.append(("pad", top, left, h, w))
            rect = imgref.center_crop(h, w, ch_, cw_)
        elif t == "resize":
            if "size" in a:
                oh, ow = a["size"]
            else:
                s_ = a["shorter_side"]
                oh, ow = (s_, s_ * w // h) if h <= w else (s_ * h // w, s_)
            img = imgref.resize(img, max(oh, 1), max(ow, 1), a.get("interpolation", "bilinear"))
            if geo is not None:
                geo.append(("resize", max(oh, 1), max(ow, 1)))
        elif t == "random_flip":
            if imgref.rng_uniform(rng) < a.get("probability", 0.5):
                if a.get("axis", 1) == 1:
                    flip_x = not flip_x
                else:
                    flip_y = not flip_y
        elif t == "color_jitter":  # pixel by pixel: the pending flips commute with it
            ranges, on = [], []
            for k, key in enumerate(("brightness", "contrast", "saturation", "hue")):
                v, centre = a.get(key, 0), (0.0 if k == 3 else 1.0)
                r = (list(v) if isinstance(v, list) else
                     [-v, v] if k == 3 else [max(0.0, 1.0 - v), 1.0 + v])
                ranges.append(r)
                on.append(not (r[0] == centre and r[1] == centre))
            order, factors = imgref.jitter_draw(rng, ranges, on)
            img = imgref.color_jitter(img, order, [float(np.float32(f)) for f in factors], on)
        elif t == "normalize":
            out_dt, chw = a.get("dtype", "float32"), a.get("layout", "CHW") == "CHW"
            mean, std = a.get("mean", 0), a.get("std", 1)
        if rect is not None:
            x, y, cw, ch_ = rect
            if flip_x:
                x = w - x - cw
            if flip_y:
                y = h - y - ch_
            img = img[y:y + ch_, x:x + cw]
            if geo is not None:
                geo.append(("crop", x, y, cw, ch_))
            if t == "random_resized_crop":
                img = imgref.resize(img, a["size"][0], a["size"][1],
                                    a.get("interpolation", "bilinear"))
                if geo is not None:
                    geo.append(("resize", a["size"][0], a["size"][1]))
    if geo is not None:
        geo.append(("flip", flip_x, flip_y) + img.shape[:2])
    if flip_x:
        img = img[:, ::-1]
    if flip_y:
        img = img[::-1]
    c = img.shape[2]
    if out_dt == "uint8":
        return np.ascontiguousarray(img.transpose(2, 0, 1) if chw else img)
    mean = [mean] * c if not isinstance(mean, list) else (mean * c if len(mean) == 1 else mean)
    std = [std] * c if not isinstance(std, list) else (std * c if len(std) == 1 else std)
    if len(mean) != c:
        raise RecordError("%s: normalize: %d means for %d channels" % (what, len(mean), c))
    return imgref.normalize(np.ascontiguousarray(img), out_dt, chw, mean, std)


def move_boxes(boxes, geo, xyxy, pixels):
    """Boxes [..., 4] through an image's geometry (image_chain's geo): shifted and clipped by
    each crop (kept, empty, when outside: aligned with their labels), shifted by pads, scaled
    by resizes, mirrored by the final flips; computed in double, stored as float32."""
    b = np.array(boxes, dtype=np.float64).reshape(-1, 4)
    iy, ix = (1, 0) if xyxy else (0, 1)
    y0, x0, y1, x1 = b[:, iy], b[:, ix], b[:, iy + 2], b[:, ix + 2]
    _, h, w = geo[0]
    if not pixels:
        y0, y1, x0, x1 = y0 * h, y1 * h, x0 * w, x1 * w
    for g in geo[1:]:
        if g[0] == "crop":
            _, cx, cy, cw, ch = g
            y0, y1 = np.clip(y0 - cy, 0, ch), np.clip(y1 - cy, 0, ch)
            x0, x1 = np.clip(x0 - cx, 0, cw), np.clip(x1 - cx, 0, cw)
            h, w = ch, cw
        elif g[0] == "pad":
            _, top, left, h, w = g
            y0, y1, x0, x1 = y0 + top, y1 + top, x0 + left, x1 + left
        elif g[0] == "resize":
            _, oh, ow = g
            sy, sx = oh / h, ow / w
            y0, y1, x0, x1 = y0 * sy, y1 * sy, x0 * sx, x1 * sx
            h, w = oh, ow
        elif g[0] == "flip":
            _, fx, fy, h, w = g
            if fx:
                x0, x1 = w - x1, w - x0
            if fy:
                y0, y1 = h - y1, h - y0
    if not pixels:
        y0, y1, x0, x1 = y0 / h, y1 / h, x0 / w, x1 / w
    out = np.empty_like(b)
    out[:, iy], out[:, ix], out[:, iy + 2], out[:, ix + 2] = y0, x0, y1, x1
    return out.astype(np.float32).reshape(np.shape(boxes))


def make_row(payload, crc_ok, man, sp, tensors, what, epoch=0, position=0):
    """One record -> [array per tensor] (strings: object arrays of bytes); RecordError.
    epoch and position (in the epoch's order) key the image steps' random draws."""
    if not crc_ok:
        raise RecordError("%s: data CRC mismatch" % what)
    msg = parse_record(payload, man, what)
    row = {}
    for frm, to in sp.primary:
        row[to] = feature_value(msg, man, frm, what)
    prim_rev = {to: frm for frm, to in sp.primary}
    for s in sp.secondary:
        shp, dt = s.get("shape"), s.get("dtype")
        if isinstance(shp, str):
            rs = record_shape(man["by_name"][prim_rev[shp]])
            shp = [row[shp].shape[i] if d == -1 else d for i, d in enumerate(rs)]
        if dt in prim_rev:
            dt = man["by_name"][prim_rev[dt]]["dtype"]
        row[s["to_name"]] = const_fill(shp, dt, s.get("value"))
    for name, idx in sp.steps:
        try:
            row[name] = np.asarray(row[name][idx], dtype=row[name].dtype)
        except IndexError as e:
            raise RecordError('%s: tensor "%s": slice %s: %s' % (what, name, idx, e))
    geos = {}
    for name, steps in sp.image_steps.items():
        v = row[name]
        if v.size != 1:
            raise RecordError('%s: tensor "%s": decode_image needs one encoded image' %
                              (what, name))
        row[name] = image_chain(v.reshape(-1)[0], steps, sp, epoch, position, what,
                                geos.setdefault(name, []))
    for name, (img, xyxy, pixels) in sp.box_steps.items():
        row[name] = move_boxes(row[name], geos[img], xyxy, pixels)
    return [row[t.name] for t in tensors]


# ---- rows to a batch ---------------------------------------------------------------------

def tensor_bytes(a, dt):
    """(offsets as int64 or None, data bytes) of a flat or n-d array."""
    flat = a.reshape(-1)
    if dt == "string":
        offs = np.zeros(len(flat) + 1, dtype="<i8")
        offs[1:] = np.cumsum([len(b) for b in flat]) if len(flat) else []
        return offs, b"".join(flat)
    if dt == "bool":
        return None, flat.astype(np.uint8).tobytes()
    return None, flat.astype(np_dtype(dt).newbyteorder("<")).tobytes()


def digest(dt, values, row_splits=None):
    """The batch tensor digest: CRC-32 of row_splits, string offsets and data, "%08x"."""
    c = 0
    if row_splits is not None:
        c = zlib.crc32(np.asarray(row_splits, dtype="<i8").tobytes(), c)
    offs, data = tensor_bytes(values, dt)
    if offs is not None:
        c = zlib.crc32(offs.tobytes(), c)
    return "%08x" % zlib.crc32(data, c)


def _pad(rows, t, entry):
    rank = rows[0].ndim
    if any(r.ndim != rank for r in rows):
        raise PipelineError('tensor "%s": rows of different ranks' % t.name)
    dims = [max(r.shape[i] for r in rows) for i in range(rank)]
    val = None
    if entry is not None:
        val = entry.get("value")
        if entry.get("shape") is not None:
            for i, d in enumerate(entry["shape"]):
                if d != -1:
                    if dims[i] > d:
                        raise PipelineError('tensor "%s": a row is larger than the padded shape'
                                            % t.name)
                    dims[i] = d
    out = const_fill([len(rows)] + dims, t.dtype, val)
    for i, r in enumerate(rows):
        out[(i,) + tuple(slice(0, d) for d in r.shape) + (Ellipsis,)] = r
    return out


def make_tensor(rows, t, sp):
    """The rows of one tensor -> the dict of sluicectl's JSON (values kept as numpy)."""
    if sp.padding:
        a = _pad(rows, t, sp.pad_entries.get(t.name))
        return {"dtype": t.dtype, "shape": list(a.shape), "ragged": False,
                "digest": digest(t.dtype, a), "values": a.reshape(-1)}
    if t.varlen:
        inner = rows[0].shape[1:] if rows else ()
        for i, r in enumerate(rows):
            if r.ndim == 0 or r.shape[1:] != inner:
                raise PipelineError('tensor "%s": row %d has shape %s, row 0 has %s'
                                    % (t.name, i, r.shape, rows[0].shape))
        splits = [0] + list(np.cumsum([r.shape[0] for r in rows]))
        vals = (np.concatenate(rows) if rows else np.zeros((0,) + inner, np_dtype(t.dtype)))
        return {"dtype": t.dtype, "shape": [len(rows), -1] + list(inner), "ragged": True,
                "digest": digest(t.dtype, vals, splits), "values": vals.reshape(-1),
                "row_splits": [int(x) for x in splits]}
    for i, r in enumerate(rows):
        if r.shape != rows[0].shape:
            raise PipelineError('tensor "%s": row %d has shape %s, row 0 has %s'
                                % (t.name, i, r.shape, rows[0].shape))
    a = np.stack(rows) if rows else np.zeros((0,), np_dtype(t.dtype))
    return {"dtype": t.dtype, "shape": list(a.shape), "ragged": False,
            "digest": digest(t.dtype, a), "values": a.reshape(-1)}


# ---- the pipeline ------------------------------------------------------------------------

def interleave(files, cycle, elements):
    """tf.data's interleave (block length 1) of elements(file) over an ordered file list."""
    order = list(files)
    nxt = 0
    slots = []
    while len(slots) < cycle and nxt < len(order):
        slots.append(iter(elements(order[nxt])))
        nxt += 1
    slots += [None] * (cycle - len(slots))
    k = 0
    while any(s is not None for s in slots):
        if slots[k] is None:
            k = (k + 1) % cycle
            continue
        x = next(slots[k], StopIteration)
        if x is not StopIteration:
            yield x
            k = (k + 1) % cycle
        elif nxt < len(order):
            slots[k] = iter(elements(order[nxt]))
            nxt += 1
        else:
            slots[k] = None


class Pipeline:
    def __init__(self, spec):
        self.sp = sp = Spec(spec)
        self.man, all_files = dataset_files(sp.dataset)
        self.pos = {p: i for i, p in enumerate(all_files)}
        self.files = all_files
        if sp.shard:
            self.files = [p for i, p in enumerate(all_files)
                          if i % sp.shard["count"] == sp.shard["index"]]
            if not self.files:
                raise PipelineError("shard %(index)d of %(count)d has no file" % sp.shard)
        if sp.global_shuffle and self.man["compression"] != "none":
            raise PipelineError('args.shuffle: "global" reads records by offset, and the '
                                'dataset is compressed (%s)' % self.man["compression"])
        self.tensors = plan(sp, self.man)
        self.skipped = 0
        self._cache = {}
        if sp.type != "independent":  # windows: axis 0 is ragged unless it is fixed
            for t in self.tensors:
                t.varlen = (sp.min_window != sp.max_window or
                            (sp.type == "discrete_sequence" and t.varlen))

    def _records(self, path):
        """The file's records as elements: (path, index, offset, payload, crc_ok)."""
        if path not in self._cache:
            recs, err = file_records(path, self.man["compression"])
            self._cache[path] = (recs, err)
        recs, err = self._cache[path]
        for idx, off, payload, ok in recs:
            if self.sp.on_corrupt == "skip_file":
                try:
                    self._row((path, idx, off, payload, ok))
                except RecordError:
                    return
            yield (path, idx, off, payload, ok)
        if err and self.sp.on_corrupt == "fail":
            raise PipelineError(err)

    def _row(self, e, epoch=0, position=0):
        path, idx, off, payload, ok = e
        what = "%s: record %d (offset %d)" % (path, idx, off)
        return make_row(payload, ok, self.man, self.sp, self.tensors, what, epoch, position)

    def _row_or_skip(self, e, epoch=0, position=0):
        """A row, or None when on_corrupt drops it."""
        try:
            return self._row(e, epoch, position)
        except RecordError as err:
            if self.sp.on_corrupt == "fail":
                raise PipelineError(str(err))
            self.skipped += 1
            return None

    def _windows(self, epoch):
        sp = self.sp

        def elements(path):
            rows = [r for r in (self._row_or_skip(e) for e in self._records(path)) if r]
            rng = Rng(sp.seed, epoch, 3, self.pos[path])
            nt = len(self.tensors)
            if sp.type == "continuous_sequence":
                for r in rows:
                    if any(x.ndim == 0 or x.shape[0] != r[0].shape[0] for x in r):
                        raise PipelineError("%s: tensors of different lengths" % path)
                seqs = [np.concatenate([r[i] for r in rows]) if rows else None
                        for i in range(nt)]
                total = seqs[0].shape[0] if rows else 0
                p, L = 0, rng.uniform(sp.min_window, sp.max_window)
                while p + L <= total:
                    yield [s[p:p + L] for s in seqs]
                    p += sp.stride if sp.stride else L
                    L = rng.uniform(sp.min_window, sp.max_window)
            else:
                p, k = 0, rng.uniform(sp.min_window, sp.max_window)
                while p + k <= len(rows):
                    yield [np.concatenate([r[i] for r in rows[p:p + k]]) for i in range(nt)]
                    p += k
                    k = rng.uniform(sp.min_window, sp.max_window)
        return elements

    def _global_elements(self, epoch):
        """Step 4g: the records of the (sharded) files in their order, numbered across the
        files, element k being record perm(k). Every file is framed first (the engine scans
        them all before an epoch's first record), so a broken frame under "fail" stops the
        pipeline before the epoch's first batch; under skip_record the file's records before it
        stay (the semantics doc's on_corrupt paragraph: a broken frame ends that file)."""
        recs = []
        for path in self.files:
            if path not in self._cache:
                self._cache[path] = file_records(path, self.man["compression"])
            rs, err = self._cache[path]
            if err and self.sp.on_corrupt == "fail":
                raise PipelineError(err)
            recs += [(path,) + r for r in rs]
        return [recs[r] for r in global_perm(len(recs), self.sp.seed, epoch)]

    def epoch_elements(self, epoch):
        sp = self.sp
        if sp.global_shuffle:
            return self._global_elements(epoch)
        files = self.files
        if sp.shuffle:
            files = shuffle_buffer(files, sp.shuffle_files, Rng(sp.seed, epoch, 1, 0))
        elements = self._records if sp.type == "independent" else self._windows(epoch)
        elems = list(interleave(files, sp.cycle, elements))
        if sp.shuffle:
            elems = shuffle_buffer(elems, sp.shuffle_elems, Rng(sp.seed, epoch, 2, 0))
        return elems

    def batches(self):
        """Yields the batch dicts; raises PipelineError where the pipeline stops."""
        sp = self.sp
        seq, epoch = 0, 0
        while sp.epochs is None or epoch < sp.epochs:
            elems = self.epoch_elements(epoch)
            groups = [elems[i:i + sp.batch] for i in range(0, len(elems), sp.batch)]
            if groups and sp.drop_remainder and len(groups[-1]) < sp.batch:
                groups.pop()
            if not groups and sp.epochs is None:
                raise PipelineError("epoch %d produced no batch" % epoch)
            for gi, g in enumerate(groups):
                if sp.type == "independent":
                    rows = [self._row_or_skip(e, epoch, gi * sp.batch + j)
                            for j, e in enumerate(g)]
                    rows = [r for r in rows if r is not None]
                else:
                    rows = g
                tensors = {}
                for i, t in enumerate(self.tensors):
                    tensors[t.name] = make_tensor([r[i] for r in rows], t, sp)
                last = gi == len(groups) - 1
                yield {"seq": seq, "epoch": epoch, "rows": len(rows), "end_epoch": last,
                       "end_stream": last and sp.epochs is not None and epoch == sp.epochs - 1,
                       "tensors": tensors}
                seq += 1
            epoch += 1


def batches(spec, limit=None):
    """The list of batches of spec (a dict), at most limit of them."""
    out = []
    if limit == 0:
        return out
    for b in Pipeline(spec).batches():
        out.append(b)
        if limit is not None and len(out) >= limit:
            break
    return out
