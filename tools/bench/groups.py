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

With --sharing N (DESIGN.md §8, "Sharing": four jobs on one identical pipeline cost the daemon
at most 1.2x the CPU of one): N broadcast readers of one pipeline by name, each paced at --rate
rows a second as a training step paces it, under the default lag policy (a reader more than
max_lag behind the leading one, or holding the others back for the time bound, is moved off
to a pipeline of its own: docs/DECISIONS.md, "Readers that cannot hold others"), against one
such reader alone, in the same run:

    bench=sharing scenario=one|shared daemon_cpu_s=... wall_s=... moved=... rows=...
    bench=sharing readers=N rate=... daemon_cpu_ratio=... (shared / one) moved=...

moved counts the readers the daemon moved off the shared stream (its log): each one costs a
computation of its own.
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


def start_daemon(build, tmp, extra=(), log=None):
    """A fresh sluiced on a socket of its own (tools/bench/cache.py passes --cache-memory);
    log: a file for its stderr (else none)."""
    conf = tempfile.mkdtemp(dir=tmp)
    sock = os.path.join(conf, "s.sock")
    p = subprocess.Popen([os.path.join(build, "daemon", "sluiced"), "--no-config", "--socket", sock,
                          "--config-dir", conf, "--workers", "2"] + list(extra),
                         stdout=subprocess.DEVNULL, stderr=log or subprocess.DEVNULL)
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


def sharing(build, tmp, data, n, rate, lag=None):
    """n paced broadcast readers of one pipeline (default lag policy): the daemon's CPU."""
    log_path = os.path.join(tempfile.mkdtemp(dir=tmp), "sluiced.log")
    with open(log_path, "w") as log:
        d, sock = start_daemon(build, tmp, log=log)
    try:
        sys.path.insert(0, os.path.join(ROOT, "libclient", "python"))
        os.environ["SLUICE_LIBRARY"] = os.path.join(build, "libclient", "libsluice.so")
        import sluice
        name = sluice.register(ctr_spec(data, name="ctr"), socket=sock)
        c0, t0 = proc_cpu(d.pid), time.perf_counter()
        t = {"name": name, "rate": rate}
        if lag:
            t["lag"] = lag
        procs = readers(build, sock, [t for _ in range(n)])
        rows = finish(procs)
        wall = time.perf_counter() - t0
        cpu = proc_cpu(d.pid) - c0
    finally:
        d.terminate()
        d.wait(30)
    with open(log_path) as f:
        moved = sum("moved off the shared stream" in line for line in f)
    return {"daemon_cpu_s": cpu, "wall_s": wall, "moved": moved, "rows": rows}


def main_sharing(a, data):
    res = {1: [], a.sharing: []}
    for _ in range(a.repeat):
        for n in (1, a.sharing):
            r = sharing(a.build, os.path.dirname(data), data, n, a.rate, a.lag)
            if any(x != a.records for x in r["rows"]):
                raise SystemExit("groups.py --sharing: %d readers delivered %s" % (n, r))
            res[n].append(r)
            print("bench=sharing scenario=%s readers=%d daemon_cpu_s=%.3f wall_s=%.2f moved=%d "
                  "rows=%s" % ("one" if n == 1 else "shared", n, r["daemon_cpu_s"], r["wall_s"],
                               r["moved"], ",".join(str(x) for x in r["rows"])), flush=True)
    med = {n: statistics.median(x["daemon_cpu_s"] for x in res[n]) for n in res}
    print("bench=sharing readers=%d lag=%s rate=%d records=%d daemon_cpu_s_one=%.3f "
          "daemon_cpu_s_shared=%.3f daemon_cpu_ratio=%.2f moved=%d" % (
              a.sharing, a.lag or "default", a.rate, a.records, med[1], med[a.sharing],
              med[a.sharing] / med[1],
              sum(x["moved"] for x in res[a.sharing])))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", default=os.path.join(ROOT, "build-rel"))
    ap.add_argument("--records", type=int, default=400000)
    ap.add_argument("--files", type=int, default=16)
    ap.add_argument("--ranks", type=int, default=8)
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--repeat", type=int, default=2)
    ap.add_argument("--sharing", type=int, default=0,
                    help="N paced broadcast readers of one pipeline against one (DESIGN §8)")
    ap.add_argument("--lag", choices=("hold", "catch_up"),
                    help="--sharing: the readers' lag policy (default: the daemon's)")
    ap.add_argument("--rate", type=int, default=1000000,
                    help="--sharing: rows a second each reader takes")
    a = ap.parse_args()
    ctl = os.path.join(a.build, "tools", "sluicectl")
    with tempfile.TemporaryDirectory(prefix="sluice-groups-") as tmp:
        data = os.path.join(tmp, "ctr")
        subprocess.run([ctl, "gen", "ctr", data, "--files", str(a.files), "--records",
                        str(a.records), "--seed", "3"], check=True, stdout=subprocess.DEVNULL)
        if a.sharing:
            return main_sharing(a, data)
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
