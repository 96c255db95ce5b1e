# SPDX-License-Identifier: Apache-2.0
"""sluice for PyTorch: Batch.to_torch() and an IterableDataset for DataLoader(batch_size=None).

    import sluice.torch
    ds = sluice.torch.IterableDataset("imagenet-train", device="cuda")
    for batch in torch.utils.data.DataLoader(ds, batch_size=None):
        loss = model(batch["image"]) ...

Needs torch (Debian: python3-torch); importing this module without it raises ImportError.
"""

import errno as _errno
import multiprocessing
import os
import sys

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


class EndOfData(RuntimeError):
    """iter() past the last epoch of a finite pipeline: every epoch of its spec was served."""


class Batch(dict):
    """A batch as a dict name -> tensor, with where it stands in the stream: epoch,
    index_in_epoch (batches before it in its epoch), seq, end_of_epoch, and padded (True for
    a batch repeated so that every rank takes as many steps: see IterableDataset, drop_last)."""

    epoch = index_in_epoch = seq = -1
    end_of_epoch = padded = False

    def __init__(self, *args, **kwargs):
        # torch's DataLoader rebuilds a mapping as type(data)({...}): its collate (a batch
        # size was given: refused), its convert (batch_size=None) and its pin_memory, whose
        # `data` is the batch the new one stands for: its place in the stream is kept
        f = sys._getframe(1)
        if f.f_code.co_name in ("default_collate", "collate", "collate_mapping_fn"):
            raise ValueError(_BATCHED)
        super().__init__(*args, **kwargs)
        src = f.f_locals.get("data")
        if isinstance(src, Batch) and src is not self:
            self.epoch, self.index_in_epoch, self.seq = src.epoch, src.index_in_epoch, src.seq
            self.end_of_epoch, self.padded = src.end_of_epoch, src.padded

    @classmethod
    def _of(cls, tensors, b, padded=False):
        self = dict.__new__(cls)
        dict.update(self, tensors)
        self.epoch, self.index_in_epoch, self.seq = b.epoch, b.index_in_epoch, b.seq
        self.end_of_epoch, self.padded = b.end_of_epoch, padded
        return self

    def __reduce__(self):  # to the main process from a DataLoader worker, attributes kept
        return (_rebuild, (dict(self), self.epoch, self.index_in_epoch, self.seq,
                           self.end_of_epoch, self.padded))


def _rebuild(d, epoch, index_in_epoch, seq, end_of_epoch, padded):
    self = dict.__new__(Batch)
    dict.update(self, d)
    self.epoch, self.index_in_epoch, self.seq = epoch, index_in_epoch, seq
    self.end_of_epoch, self.padded = end_of_epoch, padded
    return self


_BATCHED = ("sluice batches are made by the pipeline: give the DataLoader batch_size=None "
            "(its default of 1 adds a dimension; another size stacks whole batches)")


def _refuse_batching():
    """Raise when a DataLoader that batches (batch_size given, torch's default 1 included)
    asks the dataset's iterator: its fetcher, the caller's caller, says auto_collation."""
    f = sys._getframe(2)
    while f is not None:
        fetcher = f.f_locals.get("self")
        if fetcher is not None and hasattr(fetcher, "auto_collation"):
            if fetcher.auto_collation:
                raise ValueError(_BATCHED)
            return
        f = f.f_back


class _Layout:
    """How this process (or DataLoader worker) reads: member r of count in a rank group (or a
    broadcast reader: r 0 of 1). The group is `ranks` processes that step together, each with
    `workers` DataLoader workers: member r is worker r // ranks of rank r % ranks, so that a
    rank's batches (seq % ranks == rank) go round its workers in the order the DataLoader takes
    them. equal: every rank takes as many batches per epoch (pad, or drop with drop_last).

    sluiced hands batch seq s to member (s - base) % count, base the seq its pipeline started
    at (0, or a saved position's): learnt from the first batch (saw), the member's own."""

    def __init__(self, mode, r, count, equal, workers):
        self.mode, self.r, self.count, self.equal, self.workers = mode, r, count, equal, workers
        self.ranks = max(1, count // workers) if mode == "rank" else 1
        self.base = 0 if mode != "rank" else None

    def saw(self, b):
        if self.base is None:
            self.base = (b.seq - self.r) % self.count

    def own(self, n, first_seq):
        """This member's batches among an epoch's first n whose first has seq first_seq."""
        if self.mode != "rank":
            return n
        return len(range((self.r - first_seq + self.base) % self.count, n, self.count))

    def rank_share(self, n, drop_last):
        """Batches each rank takes per epoch of n (equal only)."""
        return n // self.ranks if drop_last else -(-n // self.ranks)

    def rank_before(self, i, first_seq):
        """Batches of this member's rank among the epoch's first i."""
        rank = self.r % self.ranks
        return len(range((rank - first_seq + self.base) % self.ranks, i, self.ranks))

    def steps(self, k, first_seq):
        """This member's steps among its rank's first k: the rank's step j is held by worker
        (s0 // ranks + j) % workers, s0 the seq of the rank's first batch of the epoch."""
        rank, w = self.r % self.ranks, self.r // self.ranks
        first_seq -= self.base
        s0 = first_seq + (rank - first_seq) % self.ranks
        return len(range((w - s0 // self.ranks) % self.workers, k, self.workers))

    def share(self, n, first_seq, drop_last):
        """Batches this member takes per epoch of n (padding included), or None."""
        if self.mode != "rank" or not self.equal:
            return None
        return self.steps(self.rank_share(n, drop_last), first_seq)


class IterableDataset(torch.utils.data.IterableDataset):
    """Batches of a sluice pipeline as dicts of torch tensors, for DataLoader(ds, batch_size=None).

    The rules (docs/python.md, "PyTorch", says each with its reason):
    - The pipeline makes the batches: the DataLoader must have batch_size=None (a batch size,
      torch's default of 1 included, is refused with a ValueError that says so).
    - Each iter() is the next epoch of one attachment; past the spec's last epoch iter()
      raises EndOfData. Breaking out of an epoch: the next iter() goes on with its rest
      (set_epoch(n) for the next one skips it). Batches are Batch dicts that say their epoch,
      index_in_epoch, seq and whether they are padding.
    - Data-parallel (torchrun's environment, torch.distributed initialized, or rank= and
      num_replicas= given): rank mode in the job's group, every rank the same number of
      batches per epoch — drop_last=False (the default, as DistributedSampler) repeats a
      rank's first batch of the epoch (padded=True) on the ranks one short; drop_last=True
      drops the last round. len() is the number of batches this rank takes per epoch.
    - state_dict() is where the next batch starts: a rank group's epoch position (every rank
      took its batches below it), which resumes with any number of ranks. With DataLoader
      workers, take it from sluice.torch.DataLoader (the main process knows what the loop
      took; the dataset's own state_dict() raises RuntimeError).

    name_or_spec: a pipeline name, or a spec (dict, JSON text or path to a .json file).
    mode: None picks broadcast in the main process, rank among DataLoader workers (worker w
    takes batches w, w + n, ...: the order the DataLoader hands them on). device: where
    to_torch puts the tensors (with workers, keep "cpu"). state (bytes from state_dict)
    resumes the first attach. lag, max_lag and lag_timeout (broadcast only): as sluice.attach
    (the default, None: the daemon's policy; a reader that stops does not stall the others).
    """

    def __init__(self, name_or_spec, *, socket=None, mode=None, index=None, count=None,
                 group=None, state=None, device="cpu", non_blocking=True, timeout=None,
                 lag=None, max_lag=None, rank=None, num_replicas=None, drop_last=False,
                 lag_timeout=None):
        super().__init__()
        if (rank is None) != (num_replicas is None):
            raise ValueError("IterableDataset: give rank and num_replicas together")
        if num_replicas is not None and not 0 <= rank < num_replicas:
            raise ValueError("IterableDataset: rank %r is not below num_replicas %r"
                             % (rank, num_replicas))
        self.name_or_spec = name_or_spec
        self.socket, self.mode, self.index, self.count = socket, mode, index, count
        self.group = group
        self.state, self.device, self.non_blocking = state, device, non_blocking
        self.timeout = timeout
        self.lag, self.max_lag, self.lag_timeout = lag, max_lag, lag_timeout
        self.rank, self.num_replicas, self.drop_last = rank, num_replicas, bool(drop_last)
        self._want = None  # set_epoch's
        self._name = None
        self._token = os.urandom(6).hex()  # names the workers' group, forked or spawned
        # a DataLoader worker says here that it read: the main process cannot tell the
        # loop's position then (shared with the workers, forked or spawned)
        self._in_worker = multiprocessing.Value("b", 0, lock=False)
        # where sluice.torch.DataLoader (main process) tells its workers to read from: a
        # generation, then the state to attach with (shared memory, forked or spawned)
        self._place = multiprocessing.Array("B", 16 + _lib.STATE_MAX, lock=False)
        self._gen = 0
        self._reset()

    def _reset(self):
        self._reader, self._pid, self._pending, self._lay = None, None, None, None
        self._cur = None          # the epoch in progress (some of it taken), or None
        self._first_seq = None    # its first batch's seq
        self._steps = 0           # batches yielded in it (padding included)
        self._own_taken = 0       # of them this rank's own
        self._pad = None          # this rank's first batch of it, to repeat
        self._n = None            # batches in it, once known
        self._done = None         # the last epoch finished: (epoch, first_seq, n)
        self._ended = False       # the stream's end came

    def __getstate__(self):
        d = dict(self.__dict__)
        for k in ("_reader", "_pid", "_pending", "_pad", "_lay"):
            d[k] = None  # the process that attached owns them
        return d

    def _placed(self):
        """(generation, state or None) the main process's DataLoader last placed at."""
        b = bytes(self._place[:16])
        gen, n = int.from_bytes(b[:8], "little"), int.from_bytes(b[8:12], "little")
        return gen, (bytes(self._place[16:16 + n]) if b[12] else None)

    def _place_at(self, blob):
        """Main process: the workers' next iter() re-attaches at state blob (None: anew)."""
        gen = self._placed()[0] + 1
        if blob is not None:
            self._place[16:16 + len(blob)] = blob
        self._place[:16] = (gen.to_bytes(8, "little") + len(blob or b"").to_bytes(4, "little")
                            + bytes([blob is not None, 0, 0, 0]))

    def _target(self):
        x = self.name_or_spec
        if isinstance(x, str) and not x.lstrip().startswith("{") and not x.endswith(".json"):
            return {"name": x}
        return {"spec": x}

    def _pipeline_name(self):
        if self._name is None:
            t = self._target()
            self._name = t.get("name") or sluice.register(t["spec"], socket=self.socket)
        return self._name

    def _distributed(self, target, info):
        """The data-parallel job's rank group (and, attached by spec on several hosts, this
        host's file shard), or None when not data-parallel."""
        workers = info.num_workers if info is not None else 1
        wid = info.id if info is not None else 0
        if self.num_replicas is not None:
            if self.num_replicas <= 1 and workers <= 1:
                return None
            group = self.group or "torch:%s" % os.environ.get("TORCHELASTIC_RUN_ID", "local")
            return target, dict(mode="rank", index=wid * self.num_replicas + self.rank,
                                count=self.num_replicas * workers, group=group)
        job = _job()
        if job is None:
            return None
        local_rank, local_world, node, nnodes, run_id = job
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
        return target, dict(mode="rank", index=wid * local_world + local_rank,
                            count=local_world * workers, group=group)

    def _how(self):
        """(target, attach arguments, _Layout) for this process."""
        info = torch.utils.data.get_worker_info()
        target = self._target()
        workers = info.num_workers if info is not None else 1
        dist = None if self.mode else self._distributed(target, info)
        if dist is not None:
            target, how = dist
            equal = how["count"] // workers > 1  # several processes step together
            if self.num_replicas is not None:
                equal = self.num_replicas > 1
        elif self.mode:
            how = dict(mode=self.mode, index=self.index, count=self.count,
                       group=self.group if self.mode != "broadcast" else None)
            equal = False
        elif workers > 1:
            # worker w takes batches w, w + n, ... of the stream, the order in which the
            # DataLoader takes them from its workers; one group per DataLoader
            how = dict(mode="rank", index=info.id, count=workers,
                       group=self.group or "torch-workers:%s" % self._token)
            equal = False
        else:
            how = dict(mode="broadcast", index=None, count=None, group=None)
            equal = False
        bounded = self.max_lag is not None or self.lag_timeout is not None
        if (self.lag == "catch_up" or bounded) and how["mode"] != "broadcast":
            raise ValueError("IterableDataset: lag=%r (max_lag, lag_timeout) is for a "
                             "broadcast reader; this one "
                             "reads in %s mode (%d DataLoader workers%s)" % (
                                 self.lag, how["mode"], workers,
                                 ", data-parallel" if dist else ""))
        mode = how["mode"]
        if self._gen and how.get("group") and (dist is not None or not self.mode):
            # re-placed by sluice.torch.DataLoader: a group of its own from that position
            how["group"] = "%s/%d" % (how["group"], self._gen)
        lay = _Layout(mode, how["index"] or 0 if mode == "rank" else 0,
                      how["count"] or 1 if mode == "rank" else 1, equal,
                      1 if self.mode else workers)
        return target, how, lay

    def _open(self):
        """This process's reader: attached at the first iter(), kept across epochs."""
        if self._pid != os.getpid():  # a DataLoader worker forked with the parent's copy
            state = self.state
            self._reset()
            self.state = state
            self._pid = os.getpid()
        if torch.utils.data.get_worker_info() is not None:
            self._in_worker.value = 1
            gen, blob = self._placed()
            if gen != self._gen:  # the main process's DataLoader placed the workers anew
                self.close()
                self._reset()
                self._pid, self._gen, self.state = os.getpid(), gen, blob
        if self._reader is not None:
            return self._reader
        target, how, self._lay = self._how()
        state, self.state = self.state, None
        self._reader = sluice.attach(**target, socket=self.socket, state=state,
                                     lag=self.lag, max_lag=self.max_lag,
                                     lag_timeout=self.lag_timeout, **how)
        return self._reader

    # ---- the stream, batch by batch ----

    def _take(self):
        """The next batch of this reader's stream (kept back, or sluice's), None at its end."""
        if self._pending is not None:
            b, self._pending = self._pending, None
            return b
        if self._ended:
            return None
        b = self._reader.next(self.timeout)
        if b is None:
            self._ended = True
        else:
            self._lay.saw(b)
        return b

    def _peek(self):
        b = self._take()
        self._pending = b
        return b

    def _epoch_batches(self, wait=False):
        """Batches per epoch (every epoch has as many) once sluiced knows, else None. wait:
        the epoch's last batch was published (a later one, or the end, came), so sluiced
        counted it: ask until the count is there."""
        if self._n is not None:
            return self._n
        name = self._pipeline_name()
        deadline = None
        while True:
            n = sluice.stats(name, socket=self.socket).get("epoch_batches", 0)
            if n > 0 or not wait:
                return n if n > 0 else None
            import time
            now = time.monotonic()
            deadline = deadline or now + 10
            if now > deadline:
                raise sluice.SluiceError(-_errno.ETIMEDOUT, "pipeline %r: the epoch ended "
                                         "but sluiced did not say how many batches it had"
                                         % name)
            time.sleep(0.01)  # poll: the stats are the daemon's, a moment behind

    def _convert(self, b, padded=False):
        with b:
            out = Batch._of(b.to_torch(self.device, self.non_blocking), b, padded)
        return out

    def __iter__(self):
        # A batch handed on is not kept here while this generator waits to be asked again
        # (hence `yield box.pop()`): in a DataLoader worker it is pickled and dropped.
        _refuse_batching()
        self._open()
        lay = self._lay
        box = []
        if self._cur is None:
            b = self._peek()
            # epochs finished, or skipped by set_epoch: their batches left are dropped
            while b is not None and ((self._done is not None and b.epoch <= self._done[0])
                                     or (self._want is not None and b.epoch < self._want)):
                self._pending = None
                b.release()
                b = self._peek()
            if b is None:
                raise EndOfData(
                    "pipeline %r: its last epoch%s was served; iter() past it has nothing to "
                    "give (give the spec more epochs, or \"epochs\": null for an endless "
                    "stream)" % (self._pipeline_name(), " (%d)" % self._done[0]
                                 if self._done is not None else ""))
            self._cur, self._first_seq = b.epoch, b.seq - b.index_in_epoch
            # resumed inside the epoch (a saved position): what comes before it was taken
            self._own_taken = lay.own(b.index_in_epoch, self._first_seq)
            self._steps = (lay.steps(lay.rank_before(b.index_in_epoch, self._first_seq),
                                     self._first_seq) if lay.mode == "rank"
                           else b.index_in_epoch)
            self._pad = None
            self._want = None
        e = self._cur
        if self._n is None:
            self._n = self._epoch_batches()
        while True:
            n = self._n
            share = lay.share(n, self._first_seq, self.drop_last) if n is not None else None
            own = lay.own(n, self._first_seq) if n is not None else None
            if own is not None and self._own_taken >= own:
                b = None  # every batch of this rank in this epoch was taken: no read ahead
            else:
                b = self._take()
                if b is not None and b.epoch != e:
                    self._pending, b = b, None
            if b is None:  # the epoch is over for this reader
                if lay.equal:
                    if n is None:
                        n = self._n = self._epoch_batches(wait=True)
                        share = lay.share(n, self._first_seq, self.drop_last)
                    if share > 0 and self._pad is None:
                        raise sluice.SluiceError(
                            -_errno.EINVAL, "pipeline %r: %d batches per epoch for %d ranks: "
                            "too few to pad; give drop_last=True or a smaller batch"
                            % (self._pipeline_name(), n, lay.ranks))
                    while self._steps < share:
                        self._steps += 1
                        box.append(Batch._of(self._pad, self._pad, True))
                        yield box.pop()
                self._finish(e)
                return
            if n is None and b.end_of_epoch:
                n = self._n = b.index_in_epoch + 1
            if lay.equal:
                if n is None:  # is this its last? the next one says (kept, not released)
                    nxt = self._peek()
                    if nxt is None or nxt.epoch != e:
                        n = self._n = self._epoch_batches(wait=True)
                if n is not None and self._steps >= lay.share(n, self._first_seq,
                                                              self.drop_last):
                    self._own_taken += 1
                    b.release()  # drop_last: this rank's batch of the last round
                    continue
            box.append(self._convert(b))
            del b
            self._own_taken += 1
            self._steps += 1
            if lay.equal and self._pad is None:
                self._pad = box[0]
            end = box[0].end_of_epoch and lay.mode != "rank"
            yield box.pop()
            if end:
                self._n = self._n or self._steps
                self._finish(e)
                return

    def _finish(self, e):
        self._done = (e, self._first_seq, self._n)
        self._cur, self._pad = None, None

    def set_epoch(self, epoch):
        """The next iter() serves epoch `epoch`: the epoch in progress or the next one as
        they come; a later one skips the epochs between (read and dropped); an earlier one
        is a ValueError (a stream does not go back: load_state_dict resumes a saved place)."""
        epoch = int(epoch)
        nxt = self._cur if self._cur is not None else (
            self._done[0] + 1 if self._done is not None else None)
        if nxt is None and self._pending is None and self._reader is None:
            self._want = epoch if epoch > 0 else None  # nothing read yet
            return
        if nxt is None:
            nxt = 0
        if epoch < nxt:
            raise ValueError("set_epoch(%d): epoch %d is %s; sluice cannot go back (use "
                             "load_state_dict to resume a saved position)"
                             % (epoch, nxt, "in progress" if self._cur is not None
                                else "the next"))
        if epoch > nxt:
            if self._cur is not None:
                self._finish(self._cur)
            self._want = epoch

    def __len__(self):
        """Batches this rank (this process, with every DataLoader worker) takes per epoch,
        once sluiced knows how many an epoch has: ahead from a record index (sluicectl
        index; uncompressed files are counted at the start), else after the first epoch."""
        n = self._n
        if n is None:
            name = self._pipeline_name()
            n = sluice.stats(name, socket=self.socket).get("epoch_batches", 0)
            if n <= 0:
                raise TypeError(
                    "len(): pipeline %r: the number of batches per epoch is not known yet "
                    "(its files are not indexed: run `sluicectl index DIR` on the dataset to "
                    "count them ahead, or read one epoch)" % name)
        lay = self._lay
        if lay is None:
            _, _, lay = self._how()
        if lay.mode == "rank" and lay.equal:
            return lay.rank_share(n, self.drop_last)
        if lay.mode == "rank" and lay.workers <= 1 and lay.count > 1:
            return -(-n // lay.count)  # an explicit rank reader: at most this many
        return n

    def state_dict(self):
        """Where the next iter() starts, {"sluice_state": bytes} (None: nothing read yet and
        no state given: the start). Rank mode: the group's epoch position."""
        if self._in_worker.value and self._pid != os.getpid():
            raise RuntimeError(
                "state_dict(): DataLoader workers read this dataset, and only the main "
                "process sees what the loop consumed (the workers read ahead): read through "
                "sluice.torch.DataLoader(ds, num_workers=...) and take its state_dict(), or "
                "read with num_workers=0 (sluiced does the work; workers only pass batches on)")
        if self._reader is None:
            return {"sluice_state": self.state}
        lay = self._lay
        if self._cur is not None:
            e, first, n = self._cur, self._first_seq, self._n
            if lay.mode == "rank":
                done = self._steps * lay.ranks
                if n is not None and done >= n:
                    e, done, first = e + 1, 0, first + n
            elif lay.mode == "broadcast":
                done = self._steps
            else:
                raise RuntimeError("state_dict(): a %s reader sees part of the stream, and "
                                   "where its group is is not known here" % lay.mode)
            pos = (e, done, first + done)
        elif self._done is not None:
            e, first, n = self._done
            pos = (e + 1, 0, first + n)
        else:
            return {"sluice_state": self.state}
        return {"sluice_state": self._reader.state(at=pos), "epoch": pos[0],
                "index_in_epoch": pos[1]}

    def load_state_dict(self, state_dict):
        """Start the next iter() where state_dict() was taken (detaching the current reader)."""
        self.close()
        self._reset()
        self.state = state_dict.get("sluice_state")

    def close(self):
        """Detach this process's reader (the next iter() attaches again)."""
        r, self._reader = self._reader, None
        if r is not None and self._pid == os.getpid():
            r.close()


class DataLoader(torch.utils.data.DataLoader):
    """torch's DataLoader over a sluice.torch.IterableDataset (batch_size=None by default)
    whose state_dict() works with workers, as torchdata's StatefulDataLoader (torch >= 2): the
    main process tracks the batches the loop took, and saves that position through sluiced
    (sluice.state_at) — not the workers', which read ahead.

    With num_workers > 0 the batches come to the loop in the epoch's order (a rank's, in a
    data-parallel job): a worker's batch that comes early is held until those before it came.
    After load_state_dict(), after a loop broke off an epoch, and each epoch with
    persistent_workers=False once the workers read from a saved position, the workers
    re-attach at the position the loop reached: no batch lost (the ones they had read ahead
    are served again) or repeated. Without workers the dataset tracks itself (its state_dict).
    """

    def __init__(self, dataset, *args, batch_size=None, **kwargs):
        if not isinstance(dataset, IterableDataset):
            raise TypeError("sluice.torch.DataLoader: the dataset is a %s, not a "
                            "sluice.torch.IterableDataset" % type(dataset).__name__)
        super().__init__(dataset, *args, batch_size=batch_size, **kwargs)
        self._t_epoch = None      # the epoch of the last batch taken, and its first seq
        self._t_first = None
        self._t_steps = 0         # the batches the loop took in it (padding included)
        self._t_done = True       # the last iteration ran to its end
        self._t_any = False       # a batch was taken since the start or the last load
        self._base = dataset.state  # the position before any of them
        self._loaded = False      # load_state_dict() since the last iter()
        self._private = dataset.state is not None  # the workers read from a saved state

    def _ranks(self):
        """(this rank, ranks stepping together) of the main process."""
        lay = self.dataset._how()[2]
        return (lay.r, lay.ranks) if lay.mode == "rank" and lay.equal else (0, 1)

    def __iter__(self):
        if self.num_workers == 0:
            return super().__iter__()
        ds = self.dataset
        moved = self._loaded or (self._t_any and (not self._t_done or (
            not self.persistent_workers and self._private)))
        if moved:
            blob = self._base if self._loaded else self.state_dict()["sluice_state"]
            ds._place_at(blob)
            self._private = blob is not None
            self._loaded = False
        return self._ordered(super().__iter__())

    def _ordered(self, it):
        ranks = self._ranks()[1]
        held, pads, nxt = {}, [], None
        self._t_done = False
        for b in it:
            if b.padded:  # repeats, after the epoch's own batches
                pads.append(b)
                continue
            if nxt is None:  # this rank's first at or after where the loop is
                at = self._t_steps * ranks if b.epoch == self._t_epoch else 0
                nxt = at + (b.index_in_epoch - at) % ranks
            held[b.index_in_epoch] = b
            while nxt in held:
                out = held.pop(nxt)
                nxt += ranks
                self._took(out)
                yield out
        for k in sorted(held):
            self._took(held[k])
            yield held.pop(k)
        for b in pads:
            self._took(b)
            yield b
        self._t_done = True

    def _took(self, b):
        if b.epoch != self._t_epoch:
            self._t_epoch, self._t_steps = b.epoch, 0
        self._t_first = b.seq - b.index_in_epoch
        self._t_steps += 1
        self._t_any = True

    def state_dict(self):
        """Where the loop is, {"sluice_state": bytes, "epoch", "index_in_epoch"}: the next
        iter() (of this loader after load_state_dict, or of a new job) starts there. In a
        data-parallel job the group's position (every rank took its batches below it),
        which resumes with any number of ranks and workers."""
        ds = self.dataset
        if self.num_workers == 0:
            return ds.state_dict()
        if not self._t_any:
            return {"sluice_state": self._base}
        _, ranks = self._ranks()
        e, first = self._t_epoch, self._t_first
        n = ds._epoch_batches(wait=self._t_done)
        done = self._t_steps * ranks
        if self._t_done or (n is not None and done >= n):
            pos = (e + 1, 0, first + n)
        else:
            pos = (e, done, first + done)
        blob = sluice.state_at(ds._pipeline_name(), pos, socket=ds.socket)
        return {"sluice_state": blob, "epoch": pos[0], "index_in_epoch": pos[1]}

    def load_state_dict(self, state_dict):
        """The next iter() starts where state_dict() was taken."""
        ds = self.dataset
        ds.load_state_dict(state_dict)
        self._base = state_dict.get("sluice_state")
        if self.num_workers == 0:
            return
        _, ranks = self._ranks()
        self._t_epoch = state_dict.get("epoch")
        self._t_steps = state_dict.get("index_in_epoch", 0) // ranks
        self._t_first = None
        self._t_any, self._t_done, self._loaded = False, True, True
