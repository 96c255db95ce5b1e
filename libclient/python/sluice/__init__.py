# SPDX-License-Identifier: Apache-2.0
"""sluice: read the batches of sluiced's pipelines as numpy arrays that borrow its shared memory.

    import sluice
    with sluice.attach("imagenet-train") as reader:
        for batch in reader:                 # a read-only mapping: tensor name -> numpy array
            x, y = batch["image"], batch["label"]
            ...                              # the batch goes back when x and y are gone

A batch's arrays point straight into the daemon's read-only shared memory (`flags.writeable`
is False and cannot be set). The batch is given back to sluiced when the last array that
borrows it is gone (or at `batch.release()` / the end of a `with batch:` block when no array
borrows it any more): an array never outlives the memory it shows. A string tensor is a
`Strings(values, offsets)` pair, as Arrow keeps strings: all their bytes in one uint8 array and
int64 offsets (element i is `values[offsets[i]:offsets[i + 1]]`), both borrowing the shared
memory: no object and no copy per string (`batch.strings(name)` gives `bytes` objects for those
who want them). A ragged tensor is a `Ragged(values, row_splits)` pair.

Everything goes through libsluice.so with ctypes (see _lib.py for where it is looked for).
Errors are `SluiceError` (an OSError: `.errno`, and the daemon's message as `.strerror`).
"""

import collections
import collections.abc
import ctypes
import errno as _errno
import json
import math
import os
import weakref

import numpy as np

from . import _lib

__version__ = _lib.VERSION

__all__ = ["attach", "register", "remove", "state_at", "Reader", "Batch", "Ragged", "Strings", "SluiceError",
           "SluiceTimeout", "library_path"]

Ragged = collections.namedtuple("Ragged", ["values", "row_splits"])
Ragged.__doc__ = "A ragged tensor (ragged at axis 1): flat values and int64 row_splits[rows + 1]."


class Strings(collections.namedtuple("Strings", ["values", "offsets"])):
    """A tensor of strings: values (uint8, every string's bytes one after the other) and offsets
    (int64, one more than there are strings: string i is values[offsets[i]:offsets[i + 1]]).
    shape is the tensor's shape (its strings in row-major order); len(offsets) - 1 strings."""

    shape = ()

    @property
    def nbytes(self):
        """Bytes of values and offsets together."""
        return self.values.nbytes + self.offsets.nbytes

    def to_list(self):
        """The strings as a flat list of bytes objects (copies)."""
        v, o = self.values, self.offsets.tolist()
        return [v[o[i]:o[i + 1]].tobytes() for i in range(len(o) - 1)]

    def copy(self):
        """Strings that do not borrow the batch."""
        c = Strings(self.values.copy(), self.offsets.copy())
        c.shape = self.shape
        return c

try:  # numpy has no bfloat16; JAX's ml_dtypes does
    from ml_dtypes import bfloat16 as _bfloat16
except ImportError:  # the raw bits: uint16 (bfloat16 is the top half of a float32)
    _bfloat16 = np.uint16
_NP_DTYPES = {k: np.dtype(v) for k, v in {
    _lib.INT8: np.int8, _lib.INT16: np.int16, _lib.INT32: np.int32, _lib.INT64: np.int64,
    _lib.UINT8: np.uint8, _lib.UINT16: np.uint16, _lib.UINT32: np.uint32,
    _lib.UINT64: np.uint64, _lib.FLOAT16: np.float16, _lib.FLOAT32: np.float32,
    _lib.FLOAT64: np.float64, _lib.BOOL: np.bool_, _lib.BFLOAT16: _bfloat16,
}.items()}
_I64 = np.dtype(np.int64)

_SLICE_MS = 200  # a wait without limit is done in slices, so that Ctrl-C gets through


class SluiceError(OSError):
    """An error of libsluice or sluiced: .errno (positive), .strerror the message."""

    def __init__(self, code, message):
        super().__init__(abs(code), message)


class SluiceTimeout(SluiceError, TimeoutError):
    """Reader.next(timeout=...) found no batch in time."""


def _error(rc, err=None, what=None):
    msg = err.msg.decode("utf-8", "replace") if err is not None and err.msg else ""
    if not msg:
        msg = _lib.lib().sluice_strerror(rc).decode("utf-8", "replace")
        if what:
            msg = "%s: %s" % (what, msg)
    cls = SluiceTimeout if -rc == _errno.ETIMEDOUT else SluiceError
    return cls(rc, msg)


def library_path():
    """The path of the libsluice.so in use (loading it if need be)."""
    _lib.lib()
    return _lib.path


def _spec_text(spec):
    """A spec given as a dict, JSON text (str/bytes) or a path -> (JSON text, directory).

    The directory is where the spec's relative dataset paths start (docs/pipeline-spec.md,
    "Relative paths"): the spec file's, or None for the working directory (a dict or text).
    """
    if isinstance(spec, collections.abc.Mapping):
        return json.dumps(spec), None
    if isinstance(spec, (bytes, bytearray)):
        spec = bytes(spec).decode("utf-8")
    if isinstance(spec, str) and spec.lstrip().startswith("{"):
        return spec, None
    if isinstance(spec, (str, os.PathLike)):
        with open(spec, encoding="utf-8") as f:
            return f.read(), os.path.dirname(os.path.abspath(spec))
    raise TypeError("a spec is a dict, JSON text or a path, not %s" % type(spec).__name__)


def _connect(socket):
    L = _lib.lib()
    c = ctypes.c_void_p()
    err = _lib.Error()
    path = os.fsencode(socket) if socket is not None else None
    rc = L.sluice_connect(path, ctypes.byref(c), ctypes.byref(err))
    if rc < 0:
        raise _error(rc, err, "connect")
    return c


def register(spec, *, socket=None):
    """Start a pipeline spec (dict, JSON text or path) in sluiced; returns its name."""
    text, spec_dir = _spec_text(spec)
    L = _lib.lib()
    c = _connect(socket)
    try:
        name = ctypes.create_string_buffer(256)
        fp = ctypes.create_string_buffer(16)
        err = _lib.Error()
        rc = L.sluice_register_at(c, text.encode("utf-8"),
                                  os.fsencode(spec_dir) if spec_dir else None,
                                  name, len(name), fp, ctypes.byref(err))
        if rc < 0:
            raise _error(rc, err, "register")
        return name.value.decode("utf-8")
    finally:
        L.sluice_disconnect(c)


def stats(name, *, socket=None):
    """A pipeline's counters as a dict {key: int} ("records", "epoch_batches",
    "stage.parse.cpu_ns", ...: docs/pipeline.md)."""
    L = _lib.lib()
    c = _connect(socket)
    try:
        s = ctypes.c_void_p()
        err = _lib.Error()
        rc = L.sluice_stats(c, name.encode("utf-8"), ctypes.byref(s), ctypes.byref(err))
        if rc < 0:
            raise _error(rc, err, "stats")
        try:
            out, v = {}, ctypes.c_int64()
            for i in range(L.sluice_stats_count(s)):
                key = L.sluice_stats_at(s, i, ctypes.byref(v))
                out[key.decode("utf-8")] = v.value
            return out
        finally:
            L.sluice_stats_free(s)
    finally:
        L.sluice_disconnect(c)


def state_at(name, at, *, socket=None):
    """The state (bytes, for attach(state=...)) of position at=(epoch, index_in_epoch, seq) of
    pipeline `name`, for a process that holds no reader of it: the main process of a
    DataLoader whose workers read (sluice_state_at)."""
    L = _lib.lib()
    c = _connect(socket)
    try:
        e, i, s = (int(x) for x in at)
        buf = ctypes.create_string_buffer(_lib.STATE_MAX)
        n = ctypes.c_size_t()
        err = _lib.Error()
        rc = L.sluice_state_at(c, name.encode("utf-8"), e, i, s, buf, len(buf),
                               ctypes.byref(n), ctypes.byref(err))
        if rc < 0:
            raise _error(rc, err, "state_at")
        return buf.raw[:n.value]
    finally:
        L.sluice_disconnect(c)


def remove(name, *, socket=None):
    """Remove pipeline `name` from sluiced (as `sluicectl rm`): its readers' next call raises
    SluiceError "... the pipeline was removed by uid N". Only its owner or root may."""
    L = _lib.lib()
    c = _connect(socket)
    try:
        err = _lib.Error()
        rc = L.sluice_remove(c, name.encode("utf-8"), ctypes.byref(err))
        if rc < 0:
            raise _error(rc, err, "remove")
    finally:
        L.sluice_disconnect(c)


def attach(name=None, *, spec=None, socket=None, mode="broadcast", index=None, count=None,
           group=None, state=None, lag=None, max_lag=None, lag_timeout=None,
           reattach_s=None):
    """Attach to pipeline `name`, or to the pipeline of `spec` (registered if need be).

    mode: "broadcast" (every reader sees every batch), "split" (each batch goes to one
    reader of its group) or "rank" (batch k goes to the reader of its group with `index` ==
    k mod `count`). group (split and rank): the consumer group, as in Kafka: every group sees
    every batch of the one computation, and divides them among its members; None is the
    pipeline's default group; the first member sets the group's mode and count. A batch that a
    member took and never released (it died) goes to another member with
    Batch.redelivered set. state: bytes from
    Reader.state() to resume there. lag (broadcast, DESIGN.md §5): None (the default: the
    daemon's policy, under which a reader that stopped does not stall the others: once it is
    more than `max_lag` batches behind the leading other reader, default half the daemon's
    ring, or has held the others back without taking or releasing a batch for `lag_timeout`
    seconds, default 300, it is moved off the shared stream and goes on from a pipeline of
    its own, without a gap or a repeat, and the others no longer wait), "catch_up" (the same
    with `max_lag` counted behind the newest batch) or "hold" (a slow reader holds the others
    back, however long).
    socket: sluiced's control socket (default: as sluice.h says, $SLUICE_SOCKET first).
    reattach_s: how long the reader tries to re-attach after sluiced went away (a restart:
    it resumes where it was), in seconds; default $SLUICE_REATTACH_S, else 60; 0: never.
    Returns a Reader.
    """
    if (name is None) == (spec is None):
        raise ValueError("attach: give a pipeline name or a spec, not %s" % (
            "both" if name is not None else "neither"))
    if mode not in _lib.MODES:
        raise ValueError("attach: mode %r is not one of %s" % (mode, ", ".join(_lib.MODES)))
    if mode == "rank":
        if index is None or count is None:
            raise ValueError("attach: mode \"rank\" needs index and count")
        if not 0 <= index < count:
            raise ValueError("attach: index %d must be in [0, count %d)" % (index, count))
    elif index is not None or count is not None:
        raise ValueError("attach: index and count go with mode \"rank\"")
    if group is not None and mode == "broadcast":
        raise ValueError("attach: group %r: a broadcast reader is a group of its own; a named "
                         "group reads in mode \"split\" or \"rank\"" % group)
    if lag not in _lib.LAGS:
        raise ValueError("attach: lag %r is not None, \"catch_up\" or \"hold\"" % (lag,))
    if lag == "catch_up" and mode != "broadcast":
        raise ValueError("attach: lag %r is for broadcast readers" % lag)
    if (max_lag is not None or lag_timeout is not None) and (lag == "hold"
                                                            or mode != "broadcast"):
        raise ValueError("attach: max_lag and lag_timeout bound a broadcast reader that does "
                         "not hold the others back (lag None or \"catch_up\")")
    if max_lag is not None and max_lag < 1:
        raise ValueError("attach: max_lag %r: expected at least 1 batch" % (max_lag,))
    if lag_timeout is not None and not 0.001 <= lag_timeout <= 86400 * 365:
        raise ValueError("attach: lag_timeout %r: expected 0.001 to a year of seconds"
                         % (lag_timeout,))
    if reattach_s is not None and not 0 <= reattach_s <= 86400:
        raise ValueError("attach: reattach_s %r is not 0 to 86400 seconds" % (reattach_s,))
    L = _lib.lib()
    opts = _lib.AttachOpts()
    L.sluice_attach_opts_init(ctypes.byref(opts))
    if name is not None:
        opts.name = name.encode("utf-8")
    else:
        text, spec_dir = _spec_text(spec)
        opts.spec_json = text.encode("utf-8")
        opts.spec_dir = os.fsencode(spec_dir) if spec_dir else None
    opts.mode = _lib.MODES[mode]
    opts.lag_policy = _lib.LAGS[lag]
    opts.max_lag = max_lag or 0
    opts.lag_timeout_ms = int(math.ceil(lag_timeout * 1000)) if lag_timeout is not None else 0
    if reattach_s is not None:  # attempts 100 ms apart, as the library makes them
        opts.reconnect_tries = int(math.ceil(reattach_s * 10))
    if mode == "rank":
        opts.rank_index, opts.rank_count = index, count
    if group:
        opts.group = group.encode("utf-8")
    state_buf = None
    if state is not None:
        state = bytes(state)
        state_buf = ctypes.create_string_buffer(state, len(state))
        opts.state = ctypes.cast(state_buf, ctypes.c_void_p)
        opts.state_len = len(state)
    c = _connect(socket)
    r = ctypes.c_void_p()
    err = _lib.Error()
    rc = L.sluice_attach(c, ctypes.byref(opts), ctypes.byref(r), ctypes.byref(err))
    if rc < 0:
        L.sluice_disconnect(c)
        raise _error(rc, err, "attach")
    return Reader(c, r)


def _close_reader(L, c, r):
    L.sluice_detach(r)
    L.sluice_disconnect(c)


class Reader:
    """One attachment to a pipeline: iterate it for Batches (see attach()).

    Used by one thread at a time; its batches may be released from any thread. Closing it
    (close(), the end of a `with` block, or garbage collection) detaches; batches still held
    stay valid until they are released.
    """

    def __init__(self, client, reader):
        self._L = _lib.lib()
        self._r = reader
        self._tarray = None     # a ctypes array type of struct sluice_tensor, sized to the schema
        self._names_key = None  # the schema's name pointers -> {name: index}
        self._names_map = None
        b, err, self._info = ctypes.c_void_p(), _lib.Error(), _lib.BatchInfo()
        self._next_args = (b, ctypes.byref(b), err, ctypes.byref(err))  # reused by next()
        self._info_ref = ctypes.byref(self._info)
        self._fin = weakref.finalize(self, _close_reader, self._L, client, reader)

    @property
    def closed(self):
        return not self._fin.alive

    def _check(self):
        if not self._fin.alive:
            raise ValueError("the reader is closed")

    def next(self, timeout=None):
        """The next Batch, or None at the end of the stream. timeout: seconds (None: no limit,
        0: do not wait); SluiceTimeout when none came in time."""
        if not self._fin.alive:
            raise ValueError("the reader is closed")
        L = self._L
        b, bref, err, eref = self._next_args
        if timeout is None:
            while True:
                rc = L.sluice_next(self._r, _SLICE_MS, bref, eref)
                if rc != -_errno.ETIMEDOUT:
                    break
        else:
            ms = max(0, int(math.ceil(timeout * 1000)))
            deadline = ms
            rc = -_errno.ETIMEDOUT
            while True:
                step = min(deadline, _SLICE_MS) if deadline > 0 else 0
                rc = L.sluice_next(self._r, step, bref, eref)
                deadline -= step
                if rc != -_errno.ETIMEDOUT or deadline <= 0:
                    break
            if rc == -_errno.ETIMEDOUT:
                raise SluiceTimeout(rc, "next: no batch within %g s" % timeout)
        if rc == 1:
            return Batch._take(self, b.value)
        if rc == 0:
            return None
        raise _error(rc, err, "next")

    def _tensor_array(self, n):
        """A fresh array of struct sluice_tensor: of the schema's size (n None) or n."""
        if n is not None or self._tarray is None:
            self._tarray = _lib.Tensor * (n if n is not None else 8)
        return self._tarray()

    def _names(self, tens, n):
        """{name: index} of the schema (decoded once per ring the reader is attached to)."""
        # the name pointers (the first field of each struct), read in one piece
        words = ctypes.sizeof(_lib.Tensor) // 8
        key = np.frombuffer(tens, dtype=np.uint64, count=n * words)[::words].tobytes()
        if key != self._names_key:
            ptrs = np.frombuffer(key, dtype=np.uint64).tolist()
            self._names_map = {ctypes.string_at(p).decode("utf-8"): i for i, p in enumerate(ptrs)}
            self._names_key = key
        return self._names_map

    def __iter__(self):
        return self

    def __next__(self):
        b = self.next()
        if b is None:
            raise StopIteration
        return b

    def state(self, at=None):
        """Where the reader is, as bytes: pass them to attach(..., state=...) to resume.

        at=(epoch, index_in_epoch, seq): the state of that position of the pipeline instead,
        for a reader of any mode (a rank group's epoch position: sluice_reader_save_at)."""
        self._check()
        buf = ctypes.create_string_buffer(_lib.STATE_MAX)
        n = ctypes.c_size_t()
        err = _lib.Error()
        if at is None:
            rc = self._L.sluice_reader_save(self._r, buf, len(buf), ctypes.byref(n),
                                            ctypes.byref(err))
        else:
            e, i, s = (int(x) for x in at)
            rc = self._L.sluice_reader_save_at(self._r, e, i, s, buf, len(buf),
                                               ctypes.byref(n), ctypes.byref(err))
        if rc < 0:
            raise _error(rc, err, "state")
        return buf.raw[:n.value]

    def close(self):
        """Detach (idempotent). Batches still held stay valid until released."""
        self._fin()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


class _Owner:
    """Holds a batch of libsluice: when the last reference goes, the batch is released.

    The Batch holds one reference; the buffer every array of the batch borrows holds another.
    """
    __slots__ = ("ptr", "_release", "__weakref__")

    def __init__(self, ptr, release):
        self.ptr = ptr
        self._release = release

    def __del__(self):
        ptr, self.ptr = self.ptr, None
        if ptr:
            self._release(ptr)


def _count(shape):
    n = 1
    for d in shape:
        n *= d
    return n


class Batch(collections.abc.Mapping):
    """A batch: a read-only mapping from tensor name to numpy array (see the module's doc).

    seq, epoch, index_in_epoch (batches before it in its epoch), rows, end_of_epoch describe
    it; redelivered is True when another member of
    the reader's group took it before and went away without releasing it. Numbers are arrays borrowing the shared
    memory; strings Strings(values, offsets) borrowing it too (strings(name): bytes objects);
    a ragged tensor Ragged(values, row_splits). release() or a `with` block gives it back as
    soon as no array borrows it.
    """

    def __init__(self):
        raise TypeError("batches come from Reader.next()")

    @classmethod
    def _take(cls, reader, ptr):
        """One sluice_batch_describe() call tells everything; arrays are made on demand."""
        L = reader._L
        owner = _Owner(ptr, L.sluice_batch_release)  # released if anything below fails
        info, iref = reader._info, reader._info_ref
        tens = reader._tensor_array(None)
        n = L.sluice_batch_describe(ptr, iref, tens, len(tens))
        if n >= 0 and info.n_tensors > n:
            tens = reader._tensor_array(info.n_tensors)
            n = L.sluice_batch_describe(ptr, iref, tens, len(tens))
        if n < 0:
            raise _error(n, None, "next: a batch")
        self = object.__new__(cls)
        self._owner = owner
        self._ref = weakref.ref(owner)
        self.seq = info.seq
        self.epoch = info.epoch
        self.rows = info.rows
        self.end_of_epoch = bool(info.end_of_epoch)
        self.index_in_epoch = L.sluice_batch_index_in_epoch(ptr)
        self.redelivered = bool(L.sluice_batch_redelivered(ptr))
        self._t = tens
        self._index = reader._names(tens, n)
        self._extent = (info.extent, info.extent_len)
        self._base = None
        self._cache = {}
        return self

    @property
    def _tensors(self):
        """name -> the tensor's struct sluice_tensor (ctypes), in schema order."""
        t = self._t
        return {k: t[i] for k, i in self._index.items()}

    @property
    def released(self):
        """True once the batch went back to sluiced (no array borrows it any more)."""
        return self._ref() is None

    def _live(self):
        if self._owner is None:
            raise ValueError("batch %d was released" % self.seq)
        return self._owner

    def __getitem__(self, name):
        a = self._cache.get(name)
        if a is None:
            owner = self._live()
            t = self._t[self._index[name]]  # KeyError for an unknown name, as a Mapping should
            a = self._cache[name] = self._array(owner, t)
        return a

    def __iter__(self):
        return iter(self._index)

    def __len__(self):
        return len(self._index)

    def dtype(self, name):
        """The tensor's element type: "float32", ..., "string"."""
        return _lib.DTYPE_NAMES[self._t[self._index[name]].dtype]

    def _base_array(self, owner):
        """The batch's whole extent as one read-only uint8 array that keeps owner alive: every
        array of the batch is a view of it (array -> ... -> memoryview -> buf -> owner)."""
        base = self._base
        if base is None:
            addr, nbytes = self._extent
            buf = (ctypes.c_char * nbytes).from_address(addr)
            buf._sluice_owner = owner
            base = self._base = np.frombuffer(memoryview(buf).toreadonly(), np.uint8)
        return base

    def _borrow(self, owner, addr, nbytes, dtype, shape, base=None):
        """A read-only array of dtype and shape over nbytes at addr, inside the extent (or
        inside base, a copy of the extent)."""
        if _count(shape) * dtype.itemsize != nbytes:
            raise SluiceError(-_errno.EBADMSG, "a tensor of %d bytes cannot hold %s %s" % (
                nbytes, "x".join(map(str, shape)), dtype))
        if nbytes == 0 or not addr:
            a = np.zeros(shape, dtype)
            a.flags.writeable = False
            return a
        off = addr - self._extent[0]
        if off < 0 or off + nbytes > self._extent[1]:
            raise SluiceError(-_errno.EBADMSG, "a tensor at offset %d (%d bytes) lies outside "
                              "its batch of %d bytes" % (off, nbytes, self._extent[1]))
        if base is None:
            base = self._base_array(owner)
        return base[off:off + nbytes].view(dtype).reshape(shape)

    def _array(self, owner, t, base=None):
        rank = t.rank
        shape = tuple(t.shape[:rank])
        splits = None
        if t.row_splits:
            rows = self.rows
            splits = self._borrow(owner, t.row_splits, (rows + 1) * 8, _I64, (rows + 1,), base)
            inner = shape[2:]
            per = _count(inner)
            shape = (t.n_elems // per if per else 0,) + inner
        if t.dtype == _lib.STRING:
            values = self._strings(owner, t, shape, base)
        else:
            values = self._borrow(owner, t.data, t.nbytes, _NP_DTYPES[t.dtype], shape, base)
        return Ragged(values, splits) if splits is not None else values

    def _strings(self, owner, t, shape, base=None):
        n = int(t.n_elems)
        if n != _count(shape):
            raise SluiceError(-_errno.EBADMSG, "a string tensor of %d elements cannot have shape "
                              "%s" % (n, "x".join(map(str, shape))))
        offs = self._borrow(owner, t.offsets, (n + 1) * 8, _I64, (n + 1,), base)
        values = self._borrow(owner, t.data, t.nbytes, np.dtype(np.uint8), (int(t.nbytes),),
                              base)
        # what a buggy writer could get wrong, checked once (a slice past the end would only
        # be short, but a reader must not be handed offsets that lie about its strings)
        if offs[0] != 0 or offs[-1] != t.nbytes or (n and (np.diff(offs) < 0).any()):
            raise SluiceError(-_errno.EBADMSG, "string offsets of a tensor are not 0 .. %d in "
                              "order" % t.nbytes)
        out = Strings(values, offs)
        out.shape = shape
        return out

    def strings(self, name):
        """Tensor name's strings as bytes objects (copies): a list (nested as the tensor's
        shape: one list per row for [rows, k]), or for a ragged tensor one list per row."""
        v = self[name]
        if not isinstance(v, (Strings, Ragged)) or \
                not isinstance(v.values if isinstance(v, Ragged) else v, Strings):
            raise TypeError("tensor %r holds %s, not strings" % (name, self.dtype(name)))
        if isinstance(v, Ragged):
            flat, per = v.values.to_list(), _count(v.values.shape[1:])
            s = v.row_splits.tolist()
            return [flat[s[i] * per:s[i + 1] * per] for i in range(len(s) - 1)]
        flat = v.to_list()
        if len(v.shape) <= 1:
            return flat
        a = np.empty(len(flat), dtype=object)
        a[:] = flat
        return a.reshape(v.shape).tolist()

    def release(self):
        """Done with the batch: it goes back now when no array borrows it any more (True),
        else when the last such array is gone (False). The batch's own views are dropped."""
        self._cache = {}
        self._base = None
        self._owner = None  # the arrays' buffers hold the other references
        return self.released

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.release()

    def __repr__(self):
        return "<sluice.Batch seq=%d epoch=%d rows=%d tensors=%s%s>" % (
            self.seq, self.epoch, self.rows, list(self._tensors),
            " released" if self._owner is None else "")

    def numpy(self, copy=False):
        """A dict of every tensor (copies that do not borrow the batch when copy is True: the
        batch is copied once, in one piece, and the arrays are writable views of that copy)."""
        if not copy:
            return dict(self.items())
        owner = self._live()
        base = self._base_array(owner).copy()  # one memcpy for every tensor
        return {k: self._array(owner, self._t[self._index[k]], base) for k in self._index}

    def to_torch(self, device="cpu", non_blocking=True):
        """A dict of torch tensors on device ("cpu", "cuda", "cuda:N"): a ragged tensor as a
        (values, row_splits) pair of tensors, strings as a Strings(values, offsets) pair of
        uint8 and int64 tensors (on the CPU whatever the device: they are bytes for the host).

        On the CPU the values are copied (a torch tensor is always writable; the shared memory
        is not). On a GPU they are copied with DMA straight from the shared memory on the
        current stream (sluice_batch_copy_to_cuda); non_blocking=False waits for the copies.
        Either way the returned tensors do not borrow the batch.
        """
        from . import torch as sluice_torch  # ImportError (saying so) without torch
        return sluice_torch.batch_to_torch(self, device, non_blocking)

    def _copy_to_cuda(self, dst, dst_aux, stream):
        owner = self._live()  # held across the call
        n = len(self._index)
        d = (ctypes.c_void_p * n)(*dst)
        a = (ctypes.c_void_p * n)(*dst_aux)
        err = _lib.Error()
        rc = _lib.lib().sluice_batch_copy_to_cuda(owner.ptr, d, a, ctypes.c_void_p(stream),
                                               ctypes.byref(err))
        if rc < 0:
            raise _error(rc, err, "copy_to_cuda")
