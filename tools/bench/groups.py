# SPDX-License-Identifier: Apache-2.0
"""One computation for a data-parallel job and other jobs (consumer groups, issue 18).

    /usr/bin/python3 tools/bench/groups.py [--build build-rel] [--records 400000]
                                           [--ranks 8] [--jobs 2] [--repeat 2]

A host runs one job of R ranks (processes) and J other jobs that read every batch of the same
CTR pipeline. With consumer groups all of them attach to one named pipeline (the ranks in one
rank group, each job a broadcast reader): the daemon reads, frames, parses and batches the data
once. Without them (what sluice offered before issue 18: a pipeline served in one mode only)
the ranks each attach by spec to a pipeline of their own with the file shard {k, R}, and the
jobs share one broadcast pipeline: every record is read and parsed twice. Both scenarios run
against a fresh sluiced (--build) in the same run; the readers are Python processes that count
rows and release each batch at once. Prints one line per scenario and repeat, then the medians:

    bench=groups scenario=S daemon_cpu_s=... wall_s=... pipelines=... rank_rows=... job_rows=...
    bench=groups daemon_cpu_ratio=... (without / with groups)
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.normpath(os.path.join(HERE, "..", ".."))
sys.path.insert(0, HERE)

from pyharness import proc_cpu  # noqa: E402

READER = r'''
import json, sys, time
sys.path.insert(0, sys.argv[1])
import sluice
a = json.loads(sys.argv[3])
if "spec" in a:
    a["spec"] = json.loads(a["spec"])
rate = a.pop("rate", 0)  # rows a second, as a training step would take them (0: all it gets)
r = sluice.attach(socket=sys.argv[2], **a)
print("attached", flush=True)
sys.stdin.readline()
rows = 0
t0 = time.monotonic()
for b in r:
    rows += b.rows
    b.release()
    if rate:
        ahead = t0 + rows / rate - time.monotonic()
        if ahead > 0:
            time.sleep(ahead)
print(json.dumps({"rows": rows}), flush=True)
'''


def ctr_spec(data, name=None, shard=None):
    a = {"dataset": {"type": "dir", "args": {"data_dir": data}}, "target_batch_size": 1024,
         "drop_remainder": False, "epochs": 1, "num_parallel_reads": 2,
         "num_read_buffer_bytes": 1 << 20, "num_prefetch": 4,
         "primary_features": [{"from_name": f, "to_name": f}
                              for f in ("dense0", "sparse0", "label")]}
    if shard:
        a["shard"] = {"index": shard[0], "count": shard[1]}
    s = {"type": "independent", "args": a}
    if name:
        s["name"] = name
    return s


def start_daemon(build, tmp, extra=()):
    """A fresh sluiced on a socket of its own (tools/bench/cache.py passes --cache-memory)."""
    conf = tempfile.mkdtemp(dir=tmp)
    sock = os.path.join(conf, "s.sock")
    p = subprocess.Popen([os.path.join(build, "daemon", "sluiced"), "--no-config", "--socket", sock,
                          "--config-dir", conf, "--workers", "2"] + list(extra),
                         stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    for _ in range(500):
        if os.path.exists(sock):
            break
        time.sleep(0.01)
    return p, sock


def readers(build, sock, targets):
    """Start one reader process per target (attach kwargs); once all attached, let them read."""
    env = dict(os.environ, SLUICE_LIBRARY=os.path.join(build, "libclient", "libsluice.so"))
    procs = [subprocess.Popen([sys.executable, "-c", READER,
                               os.path.join(ROOT, "libclient", "python"), sock, json.dumps(t)],
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=env)
             for t in targets]
    for p in procs:
        line = p.stdout.readline()
        if line.strip() != "attached":
            raise SystemExit("groups.py: a reader did not attach: %r" % line)
    return procs


def finish(procs, go=True):
    """Let the readers read (go: they were told already otherwise); the rows each read."""
    out = []
    for p in procs if go else ():
        p.stdin.write("go\n")
        p.stdin.flush()
    for p in procs:
        line = p.stdout.readline()
        if p.wait(600) != 0 or not line:
            raise SystemExit("groups.py: a reader failed")
        out.append(json.loads(line)["rows"])
    return out


def scenario(build, tmp, data, ranks, jobs, grouped):
    d, sock = start_daemon(build, tmp)
    try:
        sys.path.insert(0, os.path.join(ROOT, "libclient", "python"))
        os.environ["SLUICE_LIBRARY"] = os.path.join(build, "libclient", "libsluice.so")
        import sluice
        if grouped:
            name = sluice.register(ctr_spec(data, name="ctr"), socket=sock)
            targets = [{"name": name, "mode": "rank", "group": "job", "index": k,
                        "count": ranks} for k in range(ranks)]
            targets += [{"name": name} for _ in range(jobs)]
            pipelines = 1
        else:
            targets = [{"spec": json.dumps(ctr_spec(data, shard=(k, ranks))), "mode": "rank",
                        "index": 0, "count": 1} for k in range(ranks)]
            targets += [{"spec": json.dumps(ctr_spec(data))} for _ in range(jobs)]
            pipelines = ranks + 1
        c0, t0 = proc_cpu(d.pid), time.perf_counter()
        procs = readers(build, sock, targets)
        rows = finish(procs)
        wall = time.perf_counter() - t0
        cpu = proc_cpu(d.pid) - c0
    finally:
        d.terminate()
        d.wait(30)
    return {"daemon_cpu_s": cpu, "wall_s": wall, "pipelines": pipelines,
            "rank_rows": sum(rows[:ranks]), "job_rows": rows[ranks:]}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", default=os.path.join(ROOT, "build-rel"))
    ap.add_argument("--records", type=int, default=400000)
    ap.add_argument("--files", type=int, default=16)
    ap.add_argument("--ranks", type=int, default=8)
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--repeat", type=int, default=2)
    a = ap.parse_args()
    ctl = os.path.join(a.build, "tools", "sluicectl")
    with tempfile.TemporaryDirectory(prefix="sluice-groups-") as tmp:
        data = os.path.join(tmp, "ctr")
        subprocess.run([ctl, "gen", "ctr", data, "--files", str(a.files), "--records",
                        str(a.records), "--seed", "3"], check=True, stdout=subprocess.DEVNULL)
        res = {True: [], False: []}
        for _ in range(a.repeat):
            for grouped in (True, False):
                r = scenario(a.build, tmp, data, a.ranks, a.jobs, grouped)
                if r["rank_rows"] != a.records or any(j != a.records for j in r["job_rows"]):
                    raise SystemExit("groups.py: %s delivered %s" % (
                        "with groups" if grouped else "without", r))
                res[grouped].append(r)
                print("bench=groups scenario=%s daemon_cpu_s=%.2f wall_s=%.2f pipelines=%d "
                      "rank_rows=%d job_rows=%s" % (
                          "groups" if grouped else "per_rank_shards", r["daemon_cpu_s"],
                          r["wall_s"], r["pipelines"], r["rank_rows"],
                          ",".join(str(j) for j in r["job_rows"])), flush=True)
        med = {g: statistics.median(x["daemon_cpu_s"] for x in res[g]) for g in res}
        medw = {g: statistics.median(x["wall_s"] for x in res[g]) for g in res}
        print("bench=groups ranks=%d jobs=%d records=%d daemon_cpu_s_groups=%.2f "
              "daemon_cpu_s_without=%.2f daemon_cpu_ratio=%.2f wall_s_groups=%.2f "
              "wall_s_without=%.2f" % (a.ranks, a.jobs, a.records, med[True], med[False],
                                       med[False] / med[True], medw[True], medw[False]))


if __name__ == "__main__":
    main()
