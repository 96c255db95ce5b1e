# SPDX-License-Identifier: Apache-2.0
"""Fixtures for the tests of the Python package: a real sluiced on a temporary socket.

The daemon and its helpers come from tests/integration/test_daemon.py; the dataset is written
by `sluicectl gen image` (a string, an int64 and a ragged float32 feature per record).
Run through meson (`meson test --suite python`), which sets SLUICED, SLUICECTL,
SLUICE_BUILD_DIR and SLUICE_LIBRARY.
"""

import json
import os
import time
import subprocess
import sys

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
SRC = os.path.normpath(os.path.join(HERE, "..", ".."))
sys.path.insert(0, os.path.join(SRC, "libclient", "python"))
sys.path.insert(0, os.path.join(SRC, "tests", "integration"))

import test_daemon  # noqa: E402  (the Daemon helper; it runs nothing on import)

RECORDS = 60
BATCH = 8


def wait_for(what, cond, timeout=60):
    """Poll a daemon's stats until cond holds (the condition itself, not a time)."""
    got = test_daemon.poll_until(cond, timeout)
    assert got is not None, "timed out waiting for " + what
    return got


def read_labels(r, n=None, out=None, timeout=60):
    """Batches of reader r as (seq, labels, redelivered), appended to out, until out holds n
    or the stream ends; each batch released."""
    out = [] if out is None else out
    while n is None or len(out) < n:
        b = r.next(timeout=timeout)
        if b is None:
            break
        out.append((b.seq, b["label"].reshape(-1).tolist(), b.redelivered))
        b.release()
    return out


def _need_env():
    missing = [v for v in ("SLUICED", "SLUICECTL") if not os.environ.get(v)]
    if missing:
        pytest.skip("[env] %s not set (run through meson test)" % ", ".join(missing))


def ctl(*args, timeout=120):
    return subprocess.run([os.environ["SLUICECTL"]] + [str(a) for a in args],
                          capture_output=True, text=True, timeout=timeout)


def image_spec(data, name=None, epochs=1, batch=BATCH, **args):
    """A spec over the image dataset: image (string), label (int64), bbox (ragged float32)."""
    a = {"dataset": {"type": "dir", "args": {"data_dir": data}}, "target_batch_size": batch,
         "drop_remainder": False, "epochs": epochs, "num_read_buffer_bytes": 65536,
         "num_prefetch": 2,
         "primary_features": [{"from_name": f, "to_name": f}
                              for f in ("image", "label", "bbox")]}
    a.update(args)
    s = {"type": "independent", "args": a}
    if name:
        s["name"] = name
    return s


def shuffled(seed):
    """The args of a shuffling spec."""
    return {"shuffle": True, "seed": seed, "num_shuffle_buffer_elements": 16,
            "num_filenames_shuffle_buffer": 2, "num_mix_files": 2}


def run_reference(tmp, spec, values="image,label,bbox"):
    """`sluicectl run SPEC --json --values ...`: one dict per batch."""
    path = os.path.join(str(tmp), "ref-%d.json" % abs(hash(json.dumps(spec, sort_keys=True))))
    with open(path, "w") as f:
        json.dump(spec, f)
    r = ctl("run", path, "--json", "--values", values)
    assert r.returncode == 0, r.stderr
    return [json.loads(x) for x in r.stdout.splitlines() if x.strip()]


@pytest.fixture(scope="session")
def data(tmp_path_factory):
    _need_env()
    d = str(tmp_path_factory.mktemp("data") / "image")
    r = ctl("gen", "image", d, "--records", RECORDS, "--files", 3, "--seed", 11)
    assert r.returncode == 0, r.stderr
    return d


class Env:
    """A running daemon: .sock, .data, .tmp, .conf; .spec(name) the spec of a config file."""

    def __init__(self, tmp, data, conf, specs):
        self.tmp, self.data, self.conf, self.specs = tmp, data, conf, specs
        self.d = test_daemon.Daemon(tmp, conf)
        assert self.d.ready, "sluiced did not say READY=1"
        self.sock = self.d.sock

    def stop(self):
        return self.d.stop()


def _start(tmp, data, specs):
    conf = os.path.join(tmp, "conf")
    os.makedirs(conf, exist_ok=True)
    for name, s in specs.items():
        with open(os.path.join(conf, name + ".json"), "w") as f:
            json.dump(s, f)
    return Env(tmp, data, conf, specs)


@pytest.fixture(scope="session")
def daemon(tmp_path_factory, data):
    """A daemon serving "img" (one epoch) and "forever" (epochs without end)."""
    tmp = str(tmp_path_factory.mktemp("daemon"))
    env = _start(tmp, data, {"img": image_spec(data, name="img"),
                             "forever": image_spec(data, name="forever", epochs=None,
                                                   **shuffled(3))})
    yield env
    assert env.stop() == 0, "sluiced did not exit cleanly"


@pytest.fixture
def fresh_daemon(tmp_path, data):
    """A daemon of its own, with no configured pipeline (stopped after the test)."""
    env = _start(str(tmp_path), data, {})
    yield env
    env.stop()


def rewrite_same_size(path, timeout=5):
    """Other bytes of the same size (the last byte flipped: a gzip file's trailer), mtime put
    back with os.utime (as touch -r); returns once the ctime moved, which touch -r cannot set
    back: the file a stale index entry describes."""
    before = os.stat(path)
    with open(path, "rb") as fh:
        data = bytearray(fh.read())
    data[-1] ^= 0xFF  # the gzip trailer: same size, other bytes
    deadline = time.monotonic() + timeout
    while True:  # until the ctime moved (the kernel's coarse clock): the event under test
        with open(path, "r+b") as fh:
            fh.write(bytes(data))
        os.utime(path, ns=(before.st_atime_ns, before.st_mtime_ns))
        now = os.stat(path)
        if now.st_ctime_ns != before.st_ctime_ns or time.monotonic() > deadline:
            break
        time.sleep(0.002)  # poll: ctime moves with the kernel's coarse clock
    assert now.st_size == before.st_size and now.st_mtime_ns == before.st_mtime_ns
    assert now.st_ctime_ns != before.st_ctime_ns
