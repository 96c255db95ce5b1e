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


def _spec_dict(spec):
    """A spec (dict, JSON text, or a .json path) as a dict of its own (to add the shard)."""
    import copy
    import json
    if isinstance(spec, dict):
        return copy.deepcopy(spec)
    text, spec_dir = sluice._spec_text(spec)
    if spec_dir:  # a file's relative dataset paths start at its directory
        raise ValueError("IterableDataset: a spec file (%r) on several hosts: give the spec as "
                         "a dict, so that sluice can add this host's shard" % (spec,))
    return json.loads(text)


def _env_int(name):
    v = os.environ.get(name)
    try:
        return int(v) if v is not None else None
    except ValueError:
        raise ValueError("sluice.torch: %s=%r is not an integer" % (name, v)) from None


def _job():
    """(local_rank, local_world_size, node, nnodes, run_id) of a data-parallel job, or None.

    torchrun sets LOCAL_RANK, LOCAL_WORLD_SIZE, GROUP_RANK (the host), NNODES and
    TORCHELASTIC_RUN_ID; a job that initialized torch.distributed itself has its rank and
    world size there (one host assumed unless the variables say otherwise)."""
    local_rank, local_world = _env_int("LOCAL_RANK"), _env_int("LOCAL_WORLD_SIZE")
    world = _env_int("WORLD_SIZE")
    dist = torch.distributed
    if local_world is None and dist.is_available() and dist.is_initialized():
        world = dist.get_world_size()
        local_rank = dist.get_rank() if local_rank is None else local_rank
        local_world = world
    if local_world is None and world is not None and _env_int("RANK") is not None:
        local_rank, local_world = _env_int("RANK"), world  # RANK/WORLD_SIZE on one host
    if local_world is None or local_world < 1 or (world or local_world) <= 1:
        return None
    if local_rank is None or not 0 <= local_rank < local_world:
        raise ValueError("sluice.torch: LOCAL_RANK %r is not below LOCAL_WORLD_SIZE %d"
                         % (local_rank, local_world))
    node = _env_int("GROUP_RANK") or 0
    nnodes = _env_int("NNODES") or max(1, (world or local_world) // local_world)
    run_id = (os.environ.get("TORCHELASTIC_RUN_ID")
              or "%s:%s" % (os.environ.get("MASTER_ADDR", "local"),
                            os.environ.get("MASTER_PORT", "0")))
    return local_rank, local_world, node, nnodes, run_id


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
                 group=None, state=None, device="cpu", non_blocking=True, timeout=None,
                 lag="hold", max_lag=None):
        super().__init__()
        self.name_or_spec = name_or_spec
        self.socket, self.mode, self.index, self.count = socket, mode, index, count
        self.group = group
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

    def _distributed(self, target, info):
        """Under torchrun (or torch.distributed initialized): the job's rank group and, attached
        by spec on several hosts, this host's file shard. None when not data-parallel."""
        job = _job()
        if job is None:
            return None
        local_rank, local_world, node, nnodes, run_id = job
        workers = info.num_workers if info is not None else 1
        wid = info.id if info is not None else 0
        if nnodes > 1:
            if "spec" in target:
                spec = _spec_dict(target["spec"])
                args = spec.setdefault("args", {})
                if "shard" in args and args["shard"] != {"index": node, "count": nnodes}:
                    raise ValueError("IterableDataset: the spec's shard %r is not this host's "
                                     "(GROUP_RANK %d of NNODES %d)" % (args["shard"], node,
                                                                       nnodes))
                args["shard"] = {"index": node, "count": nnodes}
                target = {"spec": spec}
            else:
                st = sluice.stats(target["name"], socket=self.socket)
                shard = ({"index": st["shard_index"], "count": st["shard_count"]}
                         if st.get("shard_count", 1) > 1 else None)
                if shard != {"index": node, "count": nnodes}:
                    raise ValueError(
                        "IterableDataset: pipeline %r is read by %d hosts (NNODES), but it "
                        "carries %s: register it on each host with \"shard\": {\"index\": "
                        "GROUP_RANK, \"count\": NNODES} in its args (here {\"index\": %d, "
                        "\"count\": %d}), or give the spec so that sluice adds it"
                        % (target["name"], nnodes,
                           "no shard" if shard is None else "shard %r" % (shard,), node,
                           nnodes))
        # one rank group per job and pipeline; a DataLoader worker is a rank of its own
        group = self.group or "torch:%s" % run_id
        return target, dict(mode="rank", index=local_rank * workers + wid,
                            count=local_world * workers, group=group)

    def _open(self):
        """This process's reader: attached at the first iter(), kept across epochs."""
        if self._pid != os.getpid():  # a DataLoader worker forked with the parent's copy
            self._reader, self._pid, self._pending = None, os.getpid(), None
        if self._reader is not None and not self._reader.closed:
            return self._reader
        info = torch.utils.data.get_worker_info()
        target = self._target()
        dist = None if self.mode else self._distributed(target, info)
        if dist is not None:
            target, how = dist
        else:
            mode = self.mode or ("split" if info is not None and info.num_workers > 1
                                 else "broadcast")
            how = dict(mode=mode, index=self.index, count=self.count,
                       group=self.group if mode != "broadcast" else None)
        if self.lag != "hold" and how["mode"] != "broadcast":
            raise ValueError("IterableDataset: lag=%r is for a broadcast reader; this one "
                             "reads in %s mode (%d DataLoader workers%s)" % (
                                 self.lag, how["mode"], info.num_workers if info else 1,
                                 ", data-parallel" if dist else ""))
        state, self.state = self.state, None
        self._reader = sluice.attach(**target, socket=self.socket, state=state,
                                     lag=self.lag, max_lag=self.max_lag, **how)
        return self._reader

    def __iter__(self):
        # A batch handed on is not kept here while this generator waits to be asked again
        # (hence `yield box.pop()`: no local holds it across the yield). In a DataLoader worker
        # it is pickled and dropped; were the generator to hold it, the worker would hold a
        # batch of its split group while not reading, and the group's end of stream would wait
        # for it (the daemon keeps the end from a member while another may still give a batch
        # back) while the DataLoader, in order, waits for that member: a deadlock.
        reader = self._open()
        epoch = None
        box = []
        if self._pending is not None:  # the first batch of this epoch, taken by the last one
            pending, epoch, end = self._pending
            self._pending = None
            box.append(pending)
            del pending
            yield box.pop()
            if end:
                return
        while True:
            b = reader.next(self.timeout)
            if b is None:  # the end of the stream
                self.close()
                return
            with b:
                box.append(b.to_torch(self.device, self.non_blocking))
                end, e = b.end_of_epoch, b.epoch
            del b
            if epoch is not None and e != epoch:
                # split between workers, the batch that ends the epoch went to another one:
                # this one ends its epoch at the first batch of the next, kept for then
                self._pending = (box.pop(), e, end)
                return
            epoch = e
            yield box.pop()
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
