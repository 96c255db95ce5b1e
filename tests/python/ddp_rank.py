# SPDX-License-Identifier: Apache-2.0
"""One rank of a data-parallel job for test_torch_loop.py: a real torch.distributed process.

    ddp_rank.py SOCKET NAME OUT [--epochs E] [--drop-last] [--workers W]
                [--steps K --save PATH] [--past]

Started as torchrun would start it (RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE,
MASTER_ADDR, MASTER_PORT, TORCHELASTIC_RUN_ID in the environment). It joins a gloo process
group, reads pipeline NAME through sluice.torch.IterableDataset and DataLoader(batch_size=None,
num_workers=W) for E epochs, an all_reduce per step (a training step: a rank that takes more
steps than the others waits there), and writes OUT, a JSON object:

    {"rank", "world", "stat_before": epoch_batches before reading, "len_before": len(ds) or
     the TypeError's message, "epochs": [{"steps", "len", "batches": [{"epoch",
     "index_in_epoch", "seq", "padded", "end_of_epoch", "ids"}]}], "past": the exception
     type and message of iter() past the last epoch (--past), "state_dict_error": with
     workers, the exception type of ds.state_dict()}

--steps K: epoch 0 stops after K steps; rank 0 then saves the loader's state_dict() to PATH
(torch.save) and every rank exits after a barrier. The loader is sluice.torch.DataLoader
(torch's, whose state_dict() works with workers).
"""

import argparse
import datetime
import json
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "libclient", "python"))

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402

import sluice  # noqa: E402
import sluice.torch as st  # noqa: E402


def ids_of(b):
    """The record ids of a batch (feature "id", a string per record)."""
    s = b["id"]
    vals = s.values.numpy().tobytes()
    offs = s.offsets.tolist()
    return [vals[offs[i]:offs[i + 1]].decode() for i in range(len(offs) - 1)]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("socket")
    ap.add_argument("name")
    ap.add_argument("out")
    ap.add_argument("--epochs", type=int, default=2)
    ap.add_argument("--drop-last", action="store_true")
    ap.add_argument("--workers", type=int, default=0)
    ap.add_argument("--steps", type=int)
    ap.add_argument("--save")
    ap.add_argument("--past", action="store_true")
    ap.add_argument("--timeout", type=float, default=120)
    a = ap.parse_args()
    dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=a.timeout))
    rank, world = dist.get_rank(), dist.get_world_size()
    res = {"rank": rank, "world": world, "epochs": []}
    res["stat_before"] = sluice.stats(a.name, socket=a.socket).get("epoch_batches", 0)
    ds = st.IterableDataset(a.name, socket=a.socket, drop_last=a.drop_last, timeout=a.timeout)
    try:
        res["len_before"] = len(ds)
    except TypeError as e:
        res["len_before"] = str(e)
    dl = st.DataLoader(ds, num_workers=a.workers, persistent_workers=a.workers > 0)
    for ep in range(a.epochs):
        got = []
        for b in dl:
            t = torch.ones(1)
            dist.all_reduce(t)  # the step: every rank must take it
            assert t.item() == world, t
            got.append({"epoch": b.epoch, "index_in_epoch": b.index_in_epoch, "seq": b.seq,
                        "padded": bool(b.padded), "end_of_epoch": bool(b.end_of_epoch),
                        "ids": ids_of(b)})
            if a.steps is not None and len(got) == a.steps:
                break
        try:
            n = len(ds)
        except TypeError as e:
            n = str(e)
        res["epochs"].append({"steps": len(got), "len": n, "batches": got})
        if a.steps is not None:
            if rank == 0:
                torch.save(dl.state_dict(), a.save)
            dist.barrier()  # rank 0 saved while every reader was still attached
            break
    if a.past:
        try:
            next(iter(dl))
            res["past"] = None
        except Exception as e:  # noqa: BLE001  (the test says which it must be)
            res["past"] = [type(e).__name__, str(e)]
    if a.workers > 0:
        try:
            ds.state_dict()
            res["state_dict_error"] = None
        except Exception as e:  # noqa: BLE001
            res["state_dict_error"] = type(e).__name__
    # the reduce after the loops: a rank that took a step more waits here, not past the end
    steps = torch.tensor([float(sum(e["steps"] for e in res["epochs"]))])
    dist.all_reduce(steps)
    res["total_steps_all"] = steps.item()
    with open(a.out + ".tmp", "w") as f:
        json.dump(res, f)
    os.rename(a.out + ".tmp", a.out)
    dist.barrier()
    ds.close()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
