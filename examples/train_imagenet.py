#!/usr/bin/python3
# SPDX-License-Identifier: Apache-2.0
"""Train a ResNet on ImageNet-style JPEG records whose decoding and augmentation run in sluiced.

    /usr/bin/python3 examples/train_imagenet.py                  # starts its own sluiced
    /usr/bin/python3 examples/train_imagenet.py --socket S       # uses a running one
    /usr/bin/python3 examples/train_imagenet.py --data DIR       # your own TFRecords

Without --data it writes a small ImageNet-like dataset (`sluicectl gen jpeg`: JPEG images of
300 - 500 pixels a side in `image/encoded`, a class in `image/class/label`). The pipeline is
torchvision's reference training recipe, as sluice processing steps: decode, RandomResizedCrop
224, horizontal flip, normalize to float32 CHW; sluiced runs it on its pool and writes each
image straight into the shared-memory batch, so `batch["image"]` arrives as a ready
[B, 3, 224, 224] tensor (on a GPU machine, `device="cuda"` copies it by DMA from the pinned
batch). Trains torchvision's ResNet-18 (CPU here) and prints per step the loss and how long the
step waited for its input. Needs torch and torchvision (Debian: python3-torch,
python3-torchvision).
"""

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path[:0] = [HERE, os.path.join(os.path.dirname(HERE), "libclient", "python")]

import torch  # noqa: E402
import torchvision  # noqa: E402

import sluice.torch  # noqa: E402
from train_torch import find_tool, start_daemon  # noqa: E402

MEAN, STD = [123.675, 116.28, 103.53], [58.395, 57.12, 57.375]  # ImageNet's, 0..255 scale


def spec(data, batch, size, seed):
    img = "image"
    return {"name": "imagenet-train", "type": "independent",
            "args": {"dataset": {"type": "dir", "args": {"data_dir": data}},
                     "target_batch_size": batch, "drop_remainder": True, "epochs": None,
                     "shuffle": True, "seed": seed, "num_shuffle_buffer_elements": 1024,
                     "num_filenames_shuffle_buffer": 4, "num_mix_files": 4,
                     "num_read_buffer_bytes": 1 << 20, "num_prefetch": 2,
                     "primary_features": [{"from_name": "image/encoded", "to_name": img},
                                          {"from_name": "image/class/label",
                                           "to_name": "label"}],
                     "processing_steps": [
                         {"tensor": img, "type": "decode_image", "args": {"channels": 3}},
                         {"tensor": img, "type": "random_resized_crop",
                          "args": {"size": [size, size]}},
                         {"tensor": img, "type": "random_flip", "args": {}},
                         {"tensor": img, "type": "normalize",
                          "args": {"mean": MEAN, "std": STD}}]}}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--socket", help="a running sluiced's socket (default: start one)")
    ap.add_argument("--data", help="a directory of TFRecords with image/encoded and "
                    "image/class/label (default: generate one)")
    ap.add_argument("--records", type=int, default=512)
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--size", type=int, default=224)
    ap.add_argument("--classes", type=int, default=1000)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--device", default="cpu", help="cpu, or cuda on a GPU machine")
    a = ap.parse_args()
    torch.manual_seed(a.seed)
    tmp = tempfile.mkdtemp(prefix="sluice-imagenet-")
    daemon = None
    try:
        data = a.data
        if not data:
            data = os.path.join(tmp, "jpeg")
            subprocess.run([find_tool("SLUICECTL", "tools/sluicectl"), "gen", "jpeg", data,
                            "--records", str(a.records), "--files", "4",
                            "--seed", str(a.seed)], check=True, stdout=subprocess.DEVNULL)
        sock = a.socket
        if not sock:
            daemon, sock = start_daemon(tmp, memory="1G")  # batches of float images
        # batch_size=None: sluice batches; the DataLoader only hands them over
        ds = sluice.torch.IterableDataset(spec(os.path.abspath(data), a.batch, a.size, a.seed),
                                          socket=sock, device=a.device)
        loader = torch.utils.data.DataLoader(ds, batch_size=None)
        model = torchvision.models.resnet18(num_classes=a.classes).to(a.device)
        opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9, weight_decay=1e-4)
        lossf = torch.nn.CrossEntropyLoss()
        it = iter(loader)
        waited, t0 = 0.0, time.perf_counter()
        for step in range(1, a.steps + 1):
            w0 = time.perf_counter()
            b = next(it, None)
            if b is None:  # an epoch ended: the next one
                it = iter(loader)
                b = next(it)
            wait = time.perf_counter() - w0
            waited += wait
            x, y = b["image"], b["label"].reshape(-1) % a.classes
            if step == 1:
                print("batch: image %s %s, label %s" % (tuple(x.shape), x.dtype,
                                                        tuple(y.shape)), file=sys.stderr)
            loss = lossf(model(x), y)
            opt.zero_grad()
            loss.backward()
            opt.step()
            print(json.dumps({"step": step, "loss": round(loss.item(), 4),
                              "input_wait_ms": round(wait * 1e3, 2)}), flush=True)
        total = time.perf_counter() - t0
        print("%d steps in %.1f s, %.1f%% of it waiting for input" % (
            a.steps, total, 100 * waited / total if total else 0), file=sys.stderr)
        del it, loader
    finally:
        if daemon:
            daemon.terminate()
            daemon.wait(30)
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
