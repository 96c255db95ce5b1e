# SPDX-License-Identifier: Apache-2.0
"""libsluice.so through ctypes: finding it, its structs and its function signatures.

The library is looked for, in order: $SLUICE_LIBRARY; next to this package (a wheel's copy);
where meson install put it (sluice/_installed.py, written at install); $SLUICE_BUILD_DIR/libclient; the source tree's build directories (build*/libclient of
the checkout this package sits in); then the system's library path. Nothing is compiled.
"""

import ctypes
import ctypes.util
import glob
import os

STATE_MAX = 4096
MAX_RANK = 8

# enum sluice_dtype
INT8, INT16, INT32, INT64, UINT8, UINT16, UINT32, UINT64, FLOAT16, FLOAT32, FLOAT64, BOOL, \
    STRING, BFLOAT16 = range(14)
DTYPE_NAMES = ("int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64",
               "float16", "float32", "float64", "bool", "string", "bfloat16")

MODES = {"broadcast": 0, "split": 1, "rank": 2}
LAGS = {None: 0, "catch_up": 1, "hold": 2}  # None: the daemon's default policy


class Error(ctypes.Structure):
    _fields_ = [("code", ctypes.c_int), ("msg", ctypes.c_char * 512)]


class AttachOpts(ctypes.Structure):
    _fields_ = [("size", ctypes.c_size_t),
                ("name", ctypes.c_char_p),
                ("spec_json", ctypes.c_char_p),
                ("mode", ctypes.c_int),
                ("rank_index", ctypes.c_uint32),
                ("rank_count", ctypes.c_uint32),
                ("state", ctypes.c_void_p),
                ("state_len", ctypes.c_size_t),
                ("reconnect_tries", ctypes.c_uint),
                ("lag_policy", ctypes.c_uint),
                ("max_lag", ctypes.c_uint64),
                ("spec_dir", ctypes.c_char_p),
                ("group", ctypes.c_char_p),
                ("lag_timeout_ms", ctypes.c_uint64)]


class Tensor(ctypes.Structure):
    _fields_ = [("name_ptr", ctypes.c_void_p),
                ("dtype", ctypes.c_int),
                ("rank", ctypes.c_uint),
                ("shape", ctypes.c_int64 * MAX_RANK),
                ("data", ctypes.c_void_p),
                ("nbytes", ctypes.c_uint64),
                ("row_splits", ctypes.c_void_p),
                ("offsets", ctypes.c_void_p),
                ("n_elems", ctypes.c_uint64)]

    @property
    def name(self):
        return ctypes.string_at(self.name_ptr) if self.name_ptr else None


class BatchInfo(ctypes.Structure):
    _fields_ = [("seq", ctypes.c_uint64),
                ("epoch", ctypes.c_uint64),
                ("rows", ctypes.c_uint64),
                ("end_of_epoch", ctypes.c_uint32),
                ("n_tensors", ctypes.c_uint32),
                ("extent", ctypes.c_void_p),
                ("extent_len", ctypes.c_uint64)]


_P = ctypes.c_void_p
_ERR = ctypes.POINTER(Error)
# The package's version: the library it loads must have the same major and minor version.
VERSION = "0.1.0"

_SIGNATURES = {
    "sluice_version": (ctypes.c_char_p, []),
    "sluice_strerror": (ctypes.c_char_p, [ctypes.c_int]),
    "sluice_connect": (ctypes.c_int, [ctypes.c_char_p, ctypes.POINTER(_P), _ERR]),
    "sluice_disconnect": (None, [_P]),
    "sluice_register": (ctypes.c_int, [_P, ctypes.c_char_p, ctypes.c_char_p, ctypes.c_size_t,
                                       ctypes.c_char_p, _ERR]),
    "sluice_register_at": (ctypes.c_int, [_P, ctypes.c_char_p, ctypes.c_char_p, ctypes.c_char_p,
                                          ctypes.c_size_t, ctypes.c_char_p, _ERR]),
    "sluice_stats": (ctypes.c_int, [_P, ctypes.c_char_p, ctypes.POINTER(_P), _ERR]),
    "sluice_stats_count": (ctypes.c_size_t, [_P]),
    "sluice_stats_at": (ctypes.c_char_p, [_P, ctypes.c_size_t, ctypes.POINTER(ctypes.c_int64)]),
    "sluice_stats_free": (None, [_P]),
    "sluice_remove": (ctypes.c_int, [_P, ctypes.c_char_p, _ERR]),
    "sluice_attach_opts_init": (None, [ctypes.POINTER(AttachOpts)]),
    "sluice_attach": (ctypes.c_int, [_P, ctypes.POINTER(AttachOpts), ctypes.POINTER(_P), _ERR]),
    "sluice_detach": (None, [_P]),
    "sluice_next": (ctypes.c_int, [_P, ctypes.c_int, ctypes.POINTER(_P), _ERR]),
    "sluice_batch_release": (None, [_P]),
    "sluice_reader_save": (ctypes.c_int, [_P, ctypes.c_void_p, ctypes.c_size_t,
                                          ctypes.POINTER(ctypes.c_size_t), _ERR]),
    "sluice_reader_save_at": (ctypes.c_int, [_P, ctypes.c_uint64, ctypes.c_uint64,
                                             ctypes.c_uint64, ctypes.c_void_p, ctypes.c_size_t,
                                             ctypes.POINTER(ctypes.c_size_t), _ERR]),
    "sluice_state_at": (ctypes.c_int, [_P, ctypes.c_char_p, ctypes.c_uint64, ctypes.c_uint64,
                                       ctypes.c_uint64, ctypes.c_void_p, ctypes.c_size_t,
                                       ctypes.POINTER(ctypes.c_size_t), _ERR]),
    "sluice_batch_seq": (ctypes.c_uint64, [_P]),
    "sluice_batch_epoch": (ctypes.c_uint64, [_P]),
    "sluice_batch_rows": (ctypes.c_uint64, [_P]),
    "sluice_batch_end_of_epoch": (ctypes.c_bool, [_P]),
    "sluice_batch_redelivered": (ctypes.c_bool, [_P]),
    "sluice_batch_index_in_epoch": (ctypes.c_uint64, [_P]),
    "sluice_batch_num_tensors": (ctypes.c_size_t, [_P]),
    "sluice_batch_tensor_at": (ctypes.c_int, [_P, ctypes.c_size_t, ctypes.POINTER(Tensor)]),
    "sluice_batch_tensor": (ctypes.c_int, [_P, ctypes.c_char_p, ctypes.POINTER(Tensor)]),
    "sluice_batch_describe": (ctypes.c_int, [_P, ctypes.POINTER(BatchInfo),
                                             ctypes.POINTER(Tensor), ctypes.c_size_t]),
    "sluice_batch_copy_to_cuda": (ctypes.c_int, [_P, ctypes.POINTER(_P), ctypes.POINTER(_P),
                                                 _P, _ERR]),
}

_HERE = os.path.dirname(os.path.abspath(__file__))


def candidates():
    """Where the library is looked for, in order (paths that may not exist)."""
    out = []
    env = os.environ.get("SLUICE_LIBRARY")
    if env:
        out.append(env)
    out += sorted(glob.glob(os.path.join(_HERE, "libsluice.so*")))
    try:
        from . import _installed  # written by meson install
        out.append(_installed.LIBRARY)
    except ImportError:
        pass
    bdir = os.environ.get("SLUICE_BUILD_DIR")
    if bdir:
        out.append(os.path.join(bdir, "libclient", "libsluice.so"))
    # libclient/python/sluice -> the checkout's root
    root = os.path.normpath(os.path.join(_HERE, "..", "..", ".."))
    out.append(os.path.join(root, "build", "libclient", "libsluice.so"))
    out += sorted(glob.glob(os.path.join(root, "build*", "libclient", "libsluice.so")))
    return out


def _load():
    tried = []
    env = os.environ.get("SLUICE_LIBRARY")
    for path in candidates():
        if not os.path.exists(path):
            if path == env:
                raise OSError("SLUICE_LIBRARY=%s: no such file" % path)
            continue
        try:
            return ctypes.CDLL(path), path
        except OSError as e:
            if path == env:
                raise OSError("SLUICE_LIBRARY=%s cannot be loaded: %s" % (path, e)) from e
            tried.append("%s (%s)" % (path, e))
    name = ctypes.util.find_library("sluice")
    if name:
        try:
            return ctypes.CDLL(name), name
        except OSError as e:
            tried.append("%s (%s)" % (name, e))
    raise OSError("libsluice.so not found: set SLUICE_LIBRARY to its path, or SLUICE_BUILD_DIR "
                  "to the meson build directory%s" % (
                      "; tried " + ", ".join(tried) if tried else ""))


_lib = None
path = None


def lib():
    """The loaded library, with argument and result types set (loaded at first use)."""
    global _lib, path
    if _lib is None:
        L, p = _load()
        if not hasattr(L, "sluice_version"):
            raise OSError("%s is a libsluice older than this sluice package (%s): it has no "
                          "sluice_version" % (p, VERSION))
        L.sluice_version.restype = ctypes.c_char_p
        have = L.sluice_version().decode("ascii", "replace")
        if have.split(".")[:2] != VERSION.split(".")[:2]:
            raise OSError("%s is libsluice %s; this sluice package is %s (point SLUICE_LIBRARY "
                          "at the library of the same version)" % (p, have, VERSION))
        for name, (res, args) in _SIGNATURES.items():
            f = getattr(L, name)
            f.restype = res
            f.argtypes = args
        _lib, path = L, p
    return _lib
