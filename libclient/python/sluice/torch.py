# SPDX-License-Identifier: Apache-2.0
"""sluice for PyTorch: Batch.to_torch() and an IterableDataset for DataLoader(batch_size=None).

    import sluice.torch
    ds = sluice.torch.IterableDataset("imagenet-train", device="cuda")
    for batch in torch.utils.data.DataLoader(ds, batch_size=None):
        loss = model(batch["image"]) ...

Needs torch (Debian: python3-torch); importing this module without it raises ImportError.
"""

import errno as _errno

import os

import numpy as np

try:
    import torch
except ImportError as e:  # pragma: no cover - depends on the host
    raise ImportError("sluice.torch needs PyTorch (Debian: apt-get install python3-torch): %s"
                      % e) from e

import sluice
from sluice import _lib

# numpy dtypes torch has no counterpart of (before torch 2.3): widened on the CPU first.
_WIDEN = {np.dtype(np.uint16): np.int32, np.dtype(np.uint32): np.int64,
          np.dtype(np.uint64): np.int64}

_TORCH_DTYPES = {
    _lib.INT8: torch.int8, _lib.INT16: torch.int16, _lib.INT32: torch.int32,
    _lib.INT64: torch.int64, _lib.UINT8: torch.uint8, _lib.FLOAT16: torch.float16,
    _lib.FLOAT32: torch.float32, _lib.FLOAT64: torch.float64, _lib.BOOL: torch.bool,
    _lib.BFLOAT16: torch.bfloat16,
}


def _cpu_tensor(a):
    """A torch tensor holding a copy of the read-only array a."""
    w = _WIDEN.get(a.dtype)
    return torch.from_numpy(a.astype(w) if w else np.array(a, copy=True))


def _own_tensor(a):
    """A torch tensor over a (writable, owned by nobody else: a view of the batch's copy)."""
    w = _WIDEN.get(a.dtype)
    return torch.from_numpy(a.astype(w) if w else a)


def _own_bf16(a):
    """A torch bfloat16 tensor over a's 2-byte elements (ml_dtypes' bfloat16, or the bits)."""
    return torch.from_numpy(a.view(np.int16)).view(torch.bfloat16)


def _cuda(batch, dev, non_blocking):
    if not torch.cuda.is_available():
        raise sluice.SluiceError(-_errno.ENODEV, "to_torch(device=%r): no CUDA device (torch."
                                 "cuda.is_available() is False)" % str(dev))
    out, dst, aux, later = {}, [], [], []
    with torch.cuda.device(dev):
        stream = torch.cuda.current_stream(dev)
        for name, t in batch._tensors.items():
            tdt = _TORCH_DTYPES.get(t.dtype)
            v = batch[name]
            if tdt is None:
                # strings stay on the CPU; unsigned types torch lacks are widened there first
                dst.append(None)
                aux.append(None)
                later.append(name)
                continue
            ragged = isinstance(v, sluice.Ragged)
            vals = v.values if ragged else v
            d = torch.empty(vals.shape, dtype=tdt, device=dev)
            dst.append(d.data_ptr() if d.numel() else None)
            if ragged:
                s = torch.empty(v.row_splits.shape, dtype=torch.int64, device=dev)
                aux.append(s.data_ptr())
                out[name] = (d, s)
            else:
                aux.append(None)
                out[name] = d
        batch._copy_to_cuda(dst, aux, stream.cuda_stream)
        if later:
            for name in later:
                out[name] = _to_dev(_cpu_one(batch[name]), dev, non_blocking)
        if not non_blocking:
            stream.synchronize()
    return out


def _strings(v, conv=_cpu_tensor):
    s = sluice.Strings(conv(v.values), conv(v.offsets))
    s.shape = v.shape
    return s


def _cpu_one(v, conv=_cpu_tensor):
    """Tensors of an array (a Ragged pair, Strings): copies with _cpu_tensor, or with
    _own_tensor over arrays that are already copies."""
    if isinstance(v, sluice.Ragged):
        vals = v.values
        vals = _strings(vals, conv) if isinstance(vals, sluice.Strings) else conv(vals)
        return (vals, conv(v.row_splits))
    if isinstance(v, sluice.Strings):
        return _strings(v, conv)
    return conv(v)


def _to_dev(x, dev, non_blocking):
    if isinstance(x, sluice.Strings):
        return x  # bytes for the host stay on the CPU
    if isinstance(x, torch.Tensor):
        return x.to(dev, non_blocking=non_blocking)
    if isinstance(x, tuple):
        return tuple(_to_dev(e, dev, non_blocking) for e in x)
    return x


def batch_to_torch(batch, device="cpu", non_blocking=True):
    """See sluice.Batch.to_torch."""
    dev = torch.device(device)
    if dev.type == "cpu":  # the batch copied in one piece; the tensors share that copy
        out = {}
        for name, v in batch.numpy(copy=True).items():
            if batch._tensors[name].dtype != _lib.BFLOAT16:
                out[name] = _cpu_one(v, _own_tensor)
            elif isinstance(v, sluice.Ragged):
                out[name] = (_own_bf16(v.values), _own_tensor(v.row_splits))
            else:
                out[name] = _own_bf16(v)
        return out
    if dev.type == "cuda":
        return _cuda(batch, dev, non_blocking)
    raise ValueError("to_torch: device %r is neither cpu nor cuda" % str(device))


class IterableDataset(torch.utils.data.IterableDataset):
    """Batches of a sluice pipeline as dicts of torch tensors, for DataLoader(ds, batch_size=None).

    The pipeline makes the batches: give the DataLoader batch_size=None (its default of 1
    would add a dimension) and num_workers=0 (the daemon does the work; workers would only
    pass batches on, a copy each). One iter() is one epoch: it stops after the batch that ends
    the epoch, and the next iter() goes on with the next epoch of the same reader (as a
    DataLoader over a sampler with set_epoch does), so `for epoch in ...: for b in loader`
    works; breaking out of an epoch leaves the reader where it was. state_dict() and
    load_state_dict() (torchdata's StatefulDataLoader convention) save and restore that
    position exactly. close() detaches.

    name_or_spec: a pipeline name, or a spec (dict, JSON text or path to a .json file).
    mode: None picks "broadcast" in the main process or a single worker, and "split" when
    the DataLoader has several workers (each batch to one of them; each worker keeps its own
    reader). device: where to_torch puts the tensors (with workers, keep "cpu" and move them in
    the main process). state (bytes from a Reader or state_dict) resumes the first attach. lag
    and max_lag (broadcast only): as sluice.attach, e.g. lag="catch_up" for an evaluation loop
    that must not hold training readers of the same pipeline back.
    """

    def __init__(self, name_or_spec, *, socket=None, mode=None, index=None, count=None,
                 state=None, device="cpu", non_blocking=True, timeout=None, lag="hold",
                 max_lag=None):
        super().__init__()
        self.name_or_spec = name_or_spec
        self.socket, self.mode, self.index, self.count = socket, mode, index, count
        self.state, self.device, self.non_blocking = state, device, non_blocking
        self.timeout = timeout
        self.lag, self.max_lag = lag, max_lag
        self._reader, self._pid, self._pending = None, None, None

    def __getstate__(self):
        d = dict(self.__dict__)
        d["_reader"] = d["_pid"] = d["_pending"] = None  # the process that attached owns them
        return d

    def _target(self):
        x = self.name_or_spec
        if isinstance(x, str) and not x.lstrip().startswith("{") and not x.endswith(".json"):
            return {"name": x}
        return {"spec": x}

    def _open(self):
        """This process's reader: attached at the first iter(), kept across epochs."""
        if self._pid != os.getpid():  # a DataLoader worker forked with the parent's copy
            self._reader, self._pid, self._pending = None, os.getpid(), None
        if self._reader is not None and not self._reader.closed:
            return self._reader
        info = torch.utils.data.get_worker_info()
        mode = self.mode or ("split" if info is not None and info.num_workers > 1
                             else "broadcast")
        if self.lag != "hold" and mode != "broadcast":
            raise ValueError("IterableDataset: lag=%r is for a broadcast reader; with %d "
                             "DataLoader workers the dataset reads in %s mode" % (
                                 self.lag, info.num_workers if info else 1, mode))
        state, self.state = self.state, None
        self._reader = sluice.attach(**self._target(), socket=self.socket, mode=mode,
                                     index=self.index, count=self.count, state=state,
                                     lag=self.lag, max_lag=self.max_lag)
        return self._reader

    def __iter__(self):
        reader = self._open()
        epoch = None
        if self._pending is not None:  # the first batch of this epoch, taken by the last one
            out, epoch, end = self._pending
            self._pending = None
            yield out
            if end:
                return
        while True:
            b = reader.next(self.timeout)
            if b is None:  # the end of the stream
                self.close()
                return
            with b:
                out = b.to_torch(self.device, self.non_blocking)
                end, e = b.end_of_epoch, b.epoch
            if epoch is not None and e != epoch:
                # split between workers, the batch that ends the epoch went to another one:
                # this one ends its epoch at the first batch of the next, kept for then
                self._pending = (out, e, end)
                return
            epoch = e
            yield out
            if end:
                return

    def __len__(self):
        """Batches per epoch, once sluiced has finished an epoch of the pipeline (it counts
        them then; every epoch has as many). Before that the number is not known — TFRecord
        files carry no record count, and tf.data says UNKNOWN_CARDINALITY here too — and
        len() raises TypeError, as for an iterable without a length."""
        t = self._target()
        name = t.get("name") or sluice.register(t["spec"], socket=self.socket)
        n = sluice.stats(name, socket=self.socket).get("epoch_batches", 0)
        if n <= 0:
            raise TypeError("len(): pipeline %r has not finished an epoch yet, so its number "
                            "of batches per epoch is not known" % name)
        return n

    def state_dict(self):
        """Where the next iter() starts: {"sluice_state": bytes or None (the beginning)}.
        For the main process's reader (num_workers=0): each worker has a reader of its own."""
        if self._reader is not None and not self._reader.closed and self._pid == os.getpid():
            return {"sluice_state": self._reader.state()}
        return {"sluice_state": self.state}

    def load_state_dict(self, state_dict):
        """Start the next iter() where state_dict() was taken (detaching the current reader)."""
        self.close()
        self._pending = None
        self.state = state_dict.get("sluice_state")

    def close(self):
        """Detach this process's reader (the next iter() attaches again)."""
        r, self._reader = self._reader, None
        if r is not None and self._pid == os.getpid():
            r.close()
