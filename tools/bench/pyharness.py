# SPDX-License-Identifier: Apache-2.0
"""What the Python benchmarks share: an epoch timed in a process of its own, CPU of every process
involved, a fresh sluiced read by a Python process, and the ResNet-50 recipes.

Used by tools/bench/python_vs_dataloader.py and tools/bench/peers.py (Debian's /usr/bin/python3)
and imported by tools/bench/peers_child.py in the peers' venv: only the standard library at the
top, so any python can import it.

A child process speaks a two-line protocol: it prints `ready` once its imports are done, the
parent starts what must be timed with it (a daemon) and writes a line; the child times its epoch
from that line and prints one JSON object as its last line of output: `records`, `wall_s`,
`cpu_s` (its own CPU and that of the children it has joined), `first_batch_s` (start-up: from
the parent's line to the first batch) and `tensors`, per output tensor `[rows, elements]` over
the epoch (strings count one element per string, a ragged tensor its flat values) so that the
sides of a comparison can be checked to deliver the same epoch.

    /usr/bin/python3 tools/bench/pyharness.py sluice --socket S --name N   (the sluice reader)
"""

import json
import os
import resource
import subprocess
import sys
import tempfile
import time

ROOT = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))


def cpu_now():
    """CPU-seconds of this process (all its threads) and of its children once joined."""
    s = resource.getrusage(resource.RUSAGE_SELF)
    c = resource.getrusage(resource.RUSAGE_CHILDREN)  # e.g. a DataLoader's workers, once joined
    return s.ru_utime + s.ru_stime + c.ru_utime + c.ru_stime


def proc_stat(pid):
    """/proc/PID/stat's fields after the command name (field 3 of proc(5) is [0])."""
    with open("/proc/%d/stat" % pid) as f:
        return f.read().rsplit(")", 1)[1].split()


def proc_cpu(pid):
    """CPU-seconds of a running process (all its threads) from /proc."""
    fields = proc_stat(pid)
    tick = os.sysconf("SC_CLK_TCK")
    return (int(fields[11]) + int(fields[12])) / tick  # utime, stime


def child_wait_go():
    """The child's side of the protocol: imports are done; block until the parent says go."""
    print("ready", flush=True)
    sys.stdin.readline()
    return time.perf_counter(), cpu_now()


_first = []  # when tally() first ran in this process: the first batch's arrival


def child_report(t0, c0, records, tensors=None, **extra):
    out = {"records": records, "wall_s": time.perf_counter() - t0, "cpu_s": cpu_now() - c0}
    if _first:
        out["first_batch_s"] = _first[0] - t0
    if tensors is not None:
        out["tensors"] = tensors
    out.update(extra)
    print(json.dumps(out), flush=True)


def tally(acc, name, rows, elements):
    """Count a batch's tensor (rows, elements) into acc; the first call marks the first batch."""
    if not _first:
        _first.append(time.perf_counter())
    t = acc.setdefault(name, [0, 0])
    t[0] += rows
    t[1] += elements


def run_child(argv, env, when_ready=None, python=None, script=None, what="bench"):
    """Run `python script argv`; when it says it is ready (imports done), call when_ready()
    and let it go. Returns its JSON report."""
    p = subprocess.Popen([python or sys.executable, script or os.path.abspath(__file__)] + argv,
                         stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                         text=True, env=env)
    if p.stdout.readline().strip() != "ready":
        p.kill()
        raise SystemExit("%s: %s did not start: %s" % (what, " ".join(argv[:2]),
                                                       p.stderr.read()[-3000:]))
    if when_ready:
        when_ready()
    out, err = p.communicate("go\n", timeout=3600)
    if p.returncode != 0:
        raise SystemExit("%s: %s failed: %s" % (what, " ".join(argv[:2]), err[-3000:]))
    return json.loads(out.strip().splitlines()[-1])


def attach_when_listening(sluice, socket, name):
    """sluice.attach(name) once the daemon being started listens on socket and has loaded its
    config dir (polled every 2 ms: the wait is part of what a first epoch costs)."""
    while not os.path.exists(socket):
        time.sleep(0.002)  # polls the socket's path
    while True:
        try:
            return sluice.attach(name, socket=socket)
        except sluice.SluiceError:  # not listening yet, or the config dir not loaded yet
            time.sleep(0.002)  # polls: attach again


def child_sluice(socket, name):
    """Attach to pipeline `name` of the daemon about to listen on `socket` and read one epoch,
    taking every tensor of every batch as numpy (strings as Strings, ragged as Ragged)."""
    sys.path.insert(0, os.path.join(ROOT, "libclient", "python"))
    import sluice
    __import__("numpy")  # imported before the clock starts, as the peers import theirs
    t0, c0 = child_wait_go()  # the daemon is being started now: the epoch is timed from here
    r = attach_when_listening(sluice, socket, name)
    records = 0
    tensors = {}
    with r:
        for b in r:
            with b:
                for k in b:
                    v = b[k]
                    if isinstance(v, sluice.Strings):
                        n = len(v.offsets) - 1
                        tally(tensors, k, b.rows, n)
                    elif isinstance(v, sluice.Ragged):
                        tally(tensors, k, len(v.row_splits) - 1, v.values.size)
                    else:
                        tally(tensors, k, v.shape[0], v.size)
                    del v
                records += b.rows
    child_report(t0, c0, records, tensors)


def run_sluice(build, tmp, spec, env, daemon_args=(), what="bench"):
    """One epoch of `spec` (a pipeline spec dict with a name) through a fresh sluiced started
    when the reader has its imports done. CPU: the reader's and the whole daemon's."""
    conf = tempfile.mkdtemp(dir=tmp)
    with open(os.path.join(conf, spec["name"] + ".json"), "w") as f:
        json.dump(spec, f)
    sock = os.path.join(conf, "s.sock")
    daemon = []

    def start():
        daemon.append(subprocess.Popen([os.path.join(build, "daemon", "sluiced"), "--no-config",
                                        "--socket", sock, "--config-dir", conf] + list(daemon_args),
                                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
    try:
        out = run_child(["sluice", "--socket", sock, "--name", spec["name"]], env, start,
                        python=sys.executable, what=what)
        out["reader_cpu_s"] = out["cpu_s"]
        out["daemon_cpu_s"] = proc_cpu(daemon[0].pid)
        out["daemon_minflt"] = int(proc_stat(daemon[0].pid)[7])
        out["cpu_s"] += out["daemon_cpu_s"]
    finally:
        for d in daemon:
            d.terminate()
            d.wait(30)
    return out


# The ResNet-50 input pipelines (torchvision's reference recipes) as sluice steps and as
# torchvision transforms on Pillow images.
MEAN, STD = [123.675, 116.28, 103.53], [58.395, 57.12, 57.375]


def train_steps(tensor="image", dct_method=None, layout=None):
    decode = {"channels": 3}
    if dct_method:
        decode["dct_method"] = dct_method
    norm = {"mean": MEAN, "std": STD}
    if layout:
        norm["layout"] = layout
    return [{"tensor": tensor, "type": "decode_image", "args": decode},
            {"tensor": tensor, "type": "random_resized_crop", "args": {"size": [224, 224]}},
            {"tensor": tensor, "type": "random_flip", "args": {}},
            {"tensor": tensor, "type": "normalize", "args": norm}]


EVAL_STEPS = [
    {"tensor": "image", "type": "decode_image", "args": {"channels": 3}},
    {"tensor": "image", "type": "resize", "args": {"shorter_side": 256}},
    {"tensor": "image", "type": "center_crop", "args": {"size": [224, 224]}},
    {"tensor": "image", "type": "normalize", "args": {"mean": MEAN, "std": STD}}]


def torchvision_recipe(kind):
    """A function of encoded image bytes to a normalized float32 CHW tensor: Pillow's decode and
    torchvision's transforms, kind "train" or "eval"."""
    import io
    import torchvision.transforms as T
    from PIL import Image
    norm = [T.ToTensor(), T.Normalize([m / 255 for m in MEAN], [d / 255 for d in STD])]
    if kind == "train":
        tf = T.Compose([T.RandomResizedCrop(224), T.RandomHorizontalFlip()] + norm)
    else:
        tf = T.Compose([T.Resize(256), T.CenterCrop(224)] + norm)
    return lambda data: tf(Image.open(io.BytesIO(data)).convert("RGB"))


def main():
    import argparse
    ap = argparse.ArgumentParser()
    ap.add_argument("kind", choices=("sluice",))
    ap.add_argument("--socket", required=True)
    ap.add_argument("--name", required=True)
    a = ap.parse_args()
    child_sluice(a.socket, a.name)


if __name__ == "__main__":
    sys.exit(main())
