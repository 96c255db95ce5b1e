#!/usr/bin/python3
# SPDX-License-Identifier: Apache-2.0
"""Train a small click-through-rate model on the CPU from batches that sluiced serves.

    /usr/bin/python3 examples/train_torch.py                  # starts its own sluiced
    /usr/bin/python3 examples/train_torch.py --socket S       # uses a running one

Writes a synthetic CTR dataset (`sluicectl gen ctr`: 13 dense float features, 26 categorical
int64 features, a 0/1 label), starts sluiced on a temporary socket unless --socket is given,
and trains embeddings + an MLP with Adam through sluice.torch.IterableDataset, printing per
step the loss and how long the step waited for its input. Needs torch (Debian: python3-torch).
"""

import argparse
import json
import os
import shutil
import socket as socketmod
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, os.path.join(ROOT, "libclient", "python"))

import torch  # noqa: E402

import sluice.torch  # noqa: E402

N_DENSE, N_SPARSE, BUCKETS = 13, 26, 1000


def find_tool(env, rel):
    p = os.environ.get(env) or os.path.join(ROOT, "build", rel)
    if not os.access(p, os.X_OK):
        sys.exit("%s not found: build sluice (meson setup build && ninja -C build) or set %s"
                 % (p, env))
    return p


def spec(data, batch, seed):
    feats = ["dense%d" % i for i in range(N_DENSE)] + ["sparse%d" % i for i in range(N_SPARSE)]
    return {"name": "ctr-train", "type": "independent",
            "args": {"dataset": {"type": "dir", "args": {"data_dir": data}},
                     "target_batch_size": batch, "drop_remainder": True, "epochs": None,
                     "num_read_buffer_bytes": 1 << 20, "num_prefetch": 4, "shuffle": True,
                     "seed": seed, "num_shuffle_buffer_elements": 4096,
                     "num_filenames_shuffle_buffer": 4, "num_mix_files": 4,
                     "primary_features": [{"from_name": f, "to_name": f}
                                          for f in feats + ["label"]]}}


def start_daemon(tmp, memory="64M"):
    """sluiced on a temporary socket (memory: its --pipeline-memory); returns (process,
    socket path) once it is READY."""
    sock, notify = os.path.join(tmp, "sluice.sock"), os.path.join(tmp, "notify")
    ns = socketmod.socket(socketmod.AF_UNIX, socketmod.SOCK_DGRAM)
    ns.bind(notify)
    ns.settimeout(30)
    conf = os.path.join(tmp, "conf")
    os.makedirs(conf)
    p = subprocess.Popen([find_tool("SLUICED", "daemon/sluiced"), "--socket", sock,
                          "--config-dir", conf, "--pipeline-memory", memory],
                         env=dict(os.environ, NOTIFY_SOCKET=notify),
                         stderr=open(os.path.join(tmp, "sluiced.log"), "w"))
    try:
        while b"READY=1" not in ns.recv(4096):
            pass
    finally:
        ns.close()
    return p, sock


class CTRModel(torch.nn.Module):
    """One embedding table per categorical feature, concatenated with the dense ones, an MLP."""

    def __init__(self, dim=8, hidden=64):
        super().__init__()
        self.emb = torch.nn.ModuleList(torch.nn.Embedding(BUCKETS, dim) for _ in range(N_SPARSE))
        self.mlp = torch.nn.Sequential(
            torch.nn.Linear(N_DENSE + N_SPARSE * dim, hidden), torch.nn.ReLU(),
            torch.nn.Linear(hidden, hidden), torch.nn.ReLU(), torch.nn.Linear(hidden, 1))

    def forward(self, dense, sparse):
        e = [emb(sparse[:, i] % BUCKETS) for i, emb in enumerate(self.emb)]
        return self.mlp(torch.cat([dense] + e, dim=1)).squeeze(1)


def inputs(b):
    """A batch (dict of tensors, each [rows, 1]) -> dense [rows, 13], sparse [rows, 26], label."""
    dense = torch.cat([b["dense%d" % i] for i in range(N_DENSE)], dim=1)
    dense = torch.log1p(dense.clamp(min=0))  # the generated dense values are counts-like
    sparse = torch.cat([b["sparse%d" % i] for i in range(N_SPARSE)], dim=1)
    return dense, sparse, b["label"].reshape(-1).float()


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--socket", help="a running sluiced's socket (default: start one)")
    ap.add_argument("--steps", type=int, default=300)
    ap.add_argument("--batch", type=int, default=256)
    ap.add_argument("--records", type=int, default=50000)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--workers", type=int, default=0, help="DataLoader workers")
    a = ap.parse_args()
    torch.manual_seed(a.seed)
    tmp = tempfile.mkdtemp(prefix="sluice-train-")
    daemon = None
    try:
        data = os.path.join(tmp, "ctr")
        subprocess.run([find_tool("SLUICECTL", "tools/sluicectl"), "gen", "ctr", data,
                        "--records", str(a.records), "--seed", str(a.seed)], check=True,
                       stdout=subprocess.DEVNULL)
        sock = a.socket
        if not sock:
            daemon, sock = start_daemon(tmp)
        ds = sluice.torch.IterableDataset(spec(data, a.batch, a.seed), socket=sock)
        loader = sluice.torch.DataLoader(ds, num_workers=a.workers)  # state_dict() too
        model = CTRModel()
        opt = torch.optim.Adam(model.parameters(), lr=1e-3)
        lossf = torch.nn.BCEWithLogitsLoss()
        it = iter(loader)  # one epoch (sluice's iterator stops at the end of each epoch)
        waited = 0.0
        t0 = time.perf_counter()
        for step in range(1, a.steps + 1):
            w0 = time.perf_counter()
            b = next(it, None)
            if b is None:  # the epoch ended: the next one, from the same reader
                it = iter(loader)
                b = next(it)
            wait = time.perf_counter() - w0
            waited += wait
            dense, sparse, label = inputs(b)
            loss = lossf(model(dense, sparse), label)
            opt.zero_grad()
            loss.backward()
            opt.step()
            print(json.dumps({"step": step, "loss": round(loss.item(), 5),
                              "input_wait_ms": round(wait * 1e3, 3)}), flush=True)
        total = time.perf_counter() - t0
        print("%d steps in %.2f s, %.1f%% of it waiting for input" % (
            a.steps, total, 100 * waited / total if total else 0), file=sys.stderr)
        del it, loader
    finally:
        if daemon:
            daemon.terminate()
            daemon.wait(30)
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
