#!/usr/bin/python3
# SPDX-License-Identifier: Apache-2.0
"""What a global shuffle costs against the shuffle buffer: its read pattern, wall time and the
daemon's CPU per record, epoch by epoch, through a fresh sluiced (issue 36).

    /usr/bin/python3 tools/bench/global_shuffle.py --build build [--data DIR] [--repeat 3]
        [--ctr-records 1000000] [--image-records 30000] [--buffers 10000,100000]
        [--epochs 3] [--cold-repeat N] [--no-cold] [--poll-ms 20]

Datasets (`sluicectl gen`, 8 files each, cached in DIR, default
~/.cache/sluice/bench-gshuffle): ctr (~800 bytes a record: every feature, batches of 1024)
and image (SequenceExamples of 2-30 KiB random bytes, 16 KiB a record on average: `image`
and `label`, batches of 256). Modes, per dataset: unshuffled (`none`), the shuffle buffer
(`bufferN`: num_shuffle_buffer_elements N, num_mix_files 4, num_filenames_shuffle_buffer 8)
and `shuffle: "global"` (one read per record by its offset, the offset table scanned at epoch
0), all with 4 files read at once, 1 MiB read chunks, num_prefetch 4, seed 1, --epochs
epochs. Page cache warm: every file is read once before each dataset's runs, then one
untimed unshuffled run (the first sluiced of a set starts slower). Runs alternate: per round,
every mode in turn, --repeat rounds.

Each run starts a sluiced on the spec; a Python process attaches by name and counts the rows of
every batch (nothing else: the reader costs little). The parent polls the pipeline's counters
(sluice.stats, every --poll-ms, every 2 ms until the first batch) and cuts the run at the
daemon's epoch boundaries: where `records` crosses k x records-per-epoch (interpolated between
the two polls around it), taking there `sluiced_cpu_ns` (the whole daemon's CPU), `now_ns`,
`stage.read.completions` (reads: 1 MiB chunks, or one record each for global),
`stage.read.bytes_out`, `read_wait_ns` (the driver blocked on reads), `driver_cpu_ns`, and the
data's block device's reads and sectors (/sys/dev/block/M:N/stat: the whole device, so other
processes' reads count too). Epoch 0 runs from the pipeline's start (it includes the global
scan); the steady state is epochs 1 to the last, per epoch. Prints per run

    bench=global_shuffle data=D mode=M records=N e0_rec_per_s=... e0_cpu_us=...
        ss_rec_per_s=... ss_cpu_us=... ss_driver_us=... sys_share=... e0_reads=...
        ss_reads=... ss_bytes_per_read=... e0_read_wait_ms=... ss_read_wait_ms=...
        first_batch_ms=... peak_rss_mb=... e0_disk_mb=... ss_disk_mb=... ss_disk_reads=...

(cpu_us: daemon CPU-µs per record, driver_us the driver thread's; sys_share: the daemon's
system time over its CPU, the whole run; reads, read wait, disk: per epoch; first_batch_ms:
the pipeline's start to the first poll that saw a record, the global scan included; peak_rss:
the daemon's VmHWM) and per dataset and mode the medians, with table_bytes (the global offset
table: 8 bytes a record) and held_bytes (what a full shuffle buffer holds: N records of the
dataset's mean size):

    bench=global_shuffle_summary data=D mode=M ... runs=R

Then, unless --no-cold (or /proc/sys/vm/drop_caches cannot be written: skipped with a note),
the image set cold: the page cache dropped before the run and again when the daemon's
`records` first reaches the end of epoch 0, for the smaller buffer and for global, 2 epochs,
--cold-repeat rounds (default --repeat); lines as above with cold=1 (epoch 0: cold, with the
scan; epoch 1: cold, no scan; up to the reads already in flight at the drop come from cache).
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from index_cost import data_files, read_loop  # noqa: E402
from pyharness import (ROOT, attach_when_listening, child_report, child_wait_go,  # noqa: E402
                       proc_stat, run_child)

CTR_FEATURES = ["dense%d" % i for i in range(13)] + ["sparse%d" % i for i in range(26)] + ["label"]
SETS = {  # name: (gen kind, features, batch)
    "ctr": ("ctr", CTR_FEATURES, 1024),
    "image": ("image", ["image", "label"], 256),
}
KEYS = ("records", "record_bytes", "now_ns", "uptime_ns", "sluiced_cpu_ns", "driver_cpu_ns",
        "read_wait_ns", "stage.read.completions", "stage.read.bytes_out", "disk_reads",
        "disk_sectors")


def gen(ctl, data, name, records):
    d = os.path.join(data, "%s-%d" % (name, records))
    if not os.path.isfile(os.path.join(d, "__manifest__.json")):
        subprocess.run([ctl, "gen", SETS[name][0], d, "--files", "8", "--records",
                        str(records)], check=True, stdout=subprocess.DEVNULL)
    return d


def warm(d):
    """Read every data file of d once (the page cache warm); its bytes."""
    return read_loop(data_files(d))


def disk_stat_path(d):
    """/sys's stat file of the block device that holds d (None where there is none)."""
    st = os.stat(d)
    p = "/sys/dev/block/%d:%d/stat" % (os.major(st.st_dev), os.minor(st.st_dev))
    return p if os.path.exists(p) else None


def disk_stat(path):
    """(reads completed, sectors read) of the device since boot: block/stat.rst."""
    if not path:
        return 0, 0
    with open(path) as f:
        v = f.read().split()
    return int(v[0]), int(v[2])


def drop_caches():
    """Drop the page cache; False where this process may not."""
    try:
        os.sync()
        with open("/proc/sys/vm/drop_caches", "w") as f:
            f.write("3\n")
        return True
    except OSError:
        return False


def spec(name, data, mode, epochs):
    _, features, batch = SETS[name]
    a = {"dataset": {"type": "dir", "args": {"data_dir": data}},
         "target_batch_size": batch, "drop_remainder": False, "epochs": epochs,
         "num_parallel_reads": 4, "num_read_buffer_bytes": 1 << 20, "num_prefetch": 4,
         "primary_features": [{"from_name": f, "to_name": f} for f in features]}
    if mode == "global":
        a.update(shuffle="global", seed=1)
    elif mode != "none":
        a.update(shuffle=True, num_shuffle_buffer_elements=int(mode[len("buffer"):]),
                 num_mix_files=4, num_filenames_shuffle_buffer=8, seed=1)
    return {"name": "gshuffle-bench", "type": "independent", "args": a}


def child(socket, name):
    """The reader: attach by name, count every batch's rows and release it."""
    sys.path.insert(0, os.path.join(ROOT, "libclient", "python"))
    import sluice
    t0, c0 = child_wait_go()
    r = attach_when_listening(sluice, socket, name)
    records = 0
    with r:
        for b in r:
            records += b.rows
            b.release()
    child_report(t0, c0, records)


class Poller(threading.Thread):
    """Polls the pipeline's counters until `records` reaches target; drops the page cache once
    when it first reaches drop_at (if given)."""

    def __init__(self, socket, name, target, interval, disk, drop_at=None):
        super().__init__(daemon=True)
        self.disk = disk
        self.socket, self.name, self.target, self.interval = socket, name, target, interval
        self.drop_at = drop_at
        self.samples = []
        self.stop = threading.Event()

    def run(self):
        import sluice
        while not self.stop.is_set():
            try:
                s = sluice.stats(self.name, socket=self.socket)
            except OSError:  # SluiceError too: not listening yet, or the spec not loaded yet
                time.sleep(0.002)
                continue
            s["disk_reads"], s["disk_sectors"] = disk_stat(self.disk)
            self.samples.append({k: s.get(k, 0) for k in KEYS})
            n = s.get("records", 0)
            if self.drop_at is not None and n >= self.drop_at:
                drop_caches()
                self.drop_at = None
            if n >= self.target:
                return
            time.sleep(0.002 if n == 0 else self.interval)


def at_records(samples, r):
    """The counters where `records` crossed r, interpolated between the polls around it."""
    for i, s in enumerate(samples):
        if s["records"] >= r:
            if s["records"] == r or i == 0:
                return dict(s)
            p = samples[i - 1]
            f = (r - p["records"]) / (s["records"] - p["records"])
            return {k: p[k] + f * (s[k] - p[k]) for k in KEYS}
    raise SystemExit("global_shuffle: the daemon never reached %d records" % r)


def peak_rss(pid):
    with open("/proc/%d/status" % pid) as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024
    return 0


def run_one(build, tmp, name, data, mode, epochs, n, interval, cold=False):
    sp = spec(name, data, mode, epochs)
    conf = tempfile.mkdtemp(dir=tmp)
    with open(os.path.join(conf, sp["name"] + ".json"), "w") as f:
        json.dump(sp, f)
    sock = os.path.join(conf, "s.sock")
    disk = disk_stat_path(data)
    poll = Poller(sock, sp["name"], epochs * n, interval, disk, drop_at=n if cold else None)
    daemon = []

    def start():
        if cold:
            drop_caches()
        poll.disk0 = disk_stat(disk)
        daemon.append(subprocess.Popen([os.path.join(build, "daemon", "sluiced"), "--no-config",
                                        "--socket", sock, "--config-dir", conf],
                                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
        poll.start()
    try:
        out = run_child(["child", "--socket", sock, "--name", sp["name"]], dict(os.environ),
                        start, python=sys.executable, script=os.path.abspath(__file__),
                        what="global_shuffle")
        poll.join(30)
        rss = peak_rss(daemon[0].pid)
        st = proc_stat(daemon[0].pid)
        sys_share = int(st[12]) / max(1, int(st[11]) + int(st[12]))  # stime / (utime + stime)
    finally:
        poll.stop.set()
        for d in daemon:
            d.terminate()
            d.wait(30)
    if out["records"] != epochs * n:
        raise SystemExit("global_shuffle: %s %s: %d records, expected %d" %
                         (name, mode, out["records"], epochs * n))
    s = poll.samples
    first = next(x for x in s if x["records"] > 0)
    t0 = s[0]["now_ns"] - s[0]["uptime_ns"]  # the pipeline's start
    cuts = [dict(s[0], now_ns=t0, sluiced_cpu_ns=0, driver_cpu_ns=0, read_wait_ns=0, **{
        "stage.read.completions": 0, "stage.read.bytes_out": 0}, disk_reads=poll.disk0[0],
        disk_sectors=poll.disk0[1])]
    cuts += [at_records(s, k * n) for k in range(1, epochs + 1)]

    def d(k, a, b):
        return cuts[b][k] - cuts[a][k]
    ss = epochs - 1
    r = {"records": n,
         "e0_rec_per_s": n / (d("now_ns", 0, 1) / 1e9),
         "e0_cpu_us": d("sluiced_cpu_ns", 0, 1) / 1e3 / n,
         "ss_rec_per_s": ss * n / (d("now_ns", 1, epochs) / 1e9),
         "ss_cpu_us": d("sluiced_cpu_ns", 1, epochs) / 1e3 / (ss * n),
         "ss_driver_us": d("driver_cpu_ns", 1, epochs) / 1e3 / (ss * n),
         "sys_share": sys_share,
         "e0_reads": d("stage.read.completions", 0, 1),
         "ss_reads": d("stage.read.completions", 1, epochs) / ss,
         "ss_bytes_per_read": d("stage.read.bytes_out", 1, epochs) /
         max(1, d("stage.read.completions", 1, epochs)),
         "e0_read_wait_ms": d("read_wait_ns", 0, 1) / 1e6,
         "ss_read_wait_ms": d("read_wait_ns", 1, epochs) / 1e6 / ss,
         "e0_disk_mb": d("disk_sectors", 0, 1) * 512 / 2**20,
         "ss_disk_mb": d("disk_sectors", 1, epochs) * 512 / 2**20 / ss,
         "ss_disk_reads": d("disk_reads", 1, epochs) / ss,
         "first_batch_ms": first["uptime_ns"] / 1e6,
         "peak_rss_mb": rss / 2**20,
         "record_bytes": s[-1]["record_bytes"] / (epochs * n),
         "reader_wall_s": out["wall_s"]}
    return r


FIELDS = ("e0_rec_per_s", "e0_cpu_us", "ss_rec_per_s", "ss_cpu_us", "ss_driver_us", "sys_share",
          "e0_reads", "ss_reads", "ss_bytes_per_read", "e0_read_wait_ms", "ss_read_wait_ms",
          "first_batch_ms", "peak_rss_mb", "e0_disk_mb", "ss_disk_mb", "ss_disk_reads")


def fmt(r):
    return " ".join("%s=%s" % (k, ("%.0f" if abs(r[k]) >= 100 else "%.3f") % r[k])
                    for k in FIELDS)


def summary(name, mode, rs, cold=False):
    med = {k: statistics.median(x[k] for x in rs) for k in FIELDS}
    n = rs[0]["records"]
    mean = statistics.median(x["record_bytes"] for x in rs)
    extra = ""
    if mode == "global":
        extra = " table_bytes=%d" % (8 * n)
    elif mode != "none":
        extra = " held_bytes=%d" % (min(n, int(mode[len("buffer"):])) * mean)
    print("bench=global_shuffle_summary data=%s mode=%s%s records=%d mean_record_bytes=%.0f %s%s "
          "range_ss_rec_per_s=%.0f-%.0f range_ss_cpu_us=%.3f-%.3f runs=%d" % (
              name, mode, " cold=1" if cold else "", n, mean, fmt(med), extra,
              min(x["ss_rec_per_s"] for x in rs), max(x["ss_rec_per_s"] for x in rs),
              min(x["ss_cpu_us"] for x in rs), max(x["ss_cpu_us"] for x in rs), len(rs)),
          flush=True)


def main():
    if len(sys.argv) > 1 and sys.argv[1] == "child":
        ap = argparse.ArgumentParser()
        ap.add_argument("cmd")
        ap.add_argument("--socket", required=True)
        ap.add_argument("--name", required=True)
        a = ap.parse_args()
        child(a.socket, a.name)
        return
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--build", default="build")
    ap.add_argument("--data", default=os.path.join(os.environ.get("XDG_CACHE_HOME") or
                                                   os.path.expanduser("~/.cache"),
                                                   "sluice", "bench-gshuffle"))
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--ctr-records", type=int, default=1000000)
    ap.add_argument("--image-records", type=int, default=30000)
    ap.add_argument("--buffers", default="10000,100000")
    ap.add_argument("--epochs", type=int, default=3)
    ap.add_argument("--cold-repeat", type=int)
    ap.add_argument("--no-cold", action="store_true")
    ap.add_argument("--poll-ms", type=float, default=20)
    a = ap.parse_args()
    if a.epochs < 2:
        sys.exit("global_shuffle.py: --epochs must be at least 2 (epoch 0 and a steady state)")
    build = os.path.abspath(a.build)
    ctl = os.path.join(build, "tools", "sluicectl")
    if not os.access(ctl, os.X_OK):
        sys.exit("global_shuffle.py: no %s (build first)" % ctl)
    os.environ.setdefault("SLUICE_BUILD_DIR", build)  # libsluice.so for sluice.stats and the reader
    sys.path.insert(0, os.path.join(ROOT, "libclient", "python"))
    os.makedirs(a.data, exist_ok=True)
    buffers = [int(x) for x in a.buffers.split(",") if x]
    modes = ["none"] + ["buffer%d" % b for b in buffers] + ["global"]
    interval = a.poll_ms / 1e3
    with tempfile.TemporaryDirectory(prefix="sluice-gshuffle-") as tmp:
        for name, n in (("ctr", a.ctr_records), ("image", a.image_records)):
            d = gen(ctl, a.data, name, n)
            runs = {m: [] for m in modes}
            warm(d)
            run_one(build, tmp, name, d, "none", 2, n, interval)  # untimed: first-run costs
            for _ in range(a.repeat):
                for m in modes:
                    r = run_one(build, tmp, name, d, m, a.epochs, n, interval)
                    runs[m].append(r)
                    print("bench=global_shuffle data=%s mode=%s records=%d %s" %
                          (name, m, n, fmt(r)), flush=True)
            for m in modes:
                summary(name, m, runs[m])
        if a.no_cold:
            return
        if not drop_caches():
            print("bench=global_shuffle cold=skipped (cannot write /proc/sys/vm/drop_caches)",
                  flush=True)
            return
        d = gen(ctl, a.data, "image", a.image_records)
        cmodes = ["buffer%d" % buffers[0], "global"] if buffers else ["global"]
        runs = {m: [] for m in cmodes}
        for _ in range(a.cold_repeat if a.cold_repeat is not None else a.repeat):
            for m in cmodes:
                r = run_one(build, tmp, "image", d, m, 2, a.image_records, interval, cold=True)
                runs[m].append(r)
                print("bench=global_shuffle data=image mode=%s cold=1 records=%d %s" %
                      (m, a.image_records, fmt(r)), flush=True)
        for m in cmodes:
            summary("image", m, runs[m], cold=True)
        warm(d)


if __name__ == "__main__":
    main()
