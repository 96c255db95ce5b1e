# SPDX-License-Identifier: Apache-2.0
"""The shared record cache (issue 18): what a later epoch and other jobs cost with and without it.

    /usr/bin/python3 tools/bench/cache.py [--build build-rel] [--records 400000] [--repeat 3]

Two measurements, each on a CTR dataset written uncompressed and with gzip, the baseline (no
cache) measured in the same run (the cached runs say --cache-uncompressed, the default since
these figures, so that builds from before it cache the uncompressed dataset too):

1. `sluicectl run` in process, E epochs of a shuffled spec, with and without
   `--cache-memory`: the CPU of each epoch, read from the process's threads (schedstat) as the
   first batch of the next epoch comes out; medians over --repeat runs of the first epoch, the
   second, and the mean of the later ones. Prints `bench=cache_epochs compression=C cache=0|1
   epoch1_cpu_s=... epoch2_cpu_s=... later_epoch_cpu_s=... epoch2_ratio=...`.
2. A fresh sluiced and 4 jobs over the dataset with batch sizes 256/512/1024/4096 and 4 seeds,
   started 1 s apart (the issue's acceptance), one epoch each, read by Python processes that
   release every batch; the daemon's CPU against one such job alone. The daemon's CPU is what
   wait4 reports as it exits (microseconds, every thread), less what it had spent when the first
   job came (its threads' schedstat): its exit is counted, in both. The readers take all they
   get, and with --rate R (repeatable) also R rows a second each, as a training step would
   (the daemon then waits for room in the ring, as it does under real jobs). Prints
   `bench=cache_jobs compression=C cache=0|1 rate=R one_job_cpu_s=... four_jobs_cpu_s=...
   ratio=...` (rate=0: as fast as they read).

With --acceptance CGROUP_BYTES, issue 37's run instead: the same 4 jobs against one, on a
sluiced started with no flags in a v1 memory cgroup of that size made by hand, over a CTR
dataset twice the size of its default record cache, and again with --cache-memory 0; with the
cgroup's peak (memory.max_usage_in_bytes) and its oom_kill count. Prints
`bench=cache_acceptance ...`.
"""

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

from groups import finish, readers, start_daemon  # noqa: E402


def spec(data, epochs, batch=1024, seed=3):
    return {"type": "independent", "args": {
        "dataset": {"type": "dir", "args": {"data_dir": data}}, "target_batch_size": batch,
        "drop_remainder": False, "epochs": epochs, "num_parallel_reads": 2,
        "num_read_buffer_bytes": 1 << 20, "num_prefetch": 4, "shuffle": True, "seed": seed,
        "num_shuffle_buffer_elements": 10000, "num_filenames_shuffle_buffer": 8,
        "num_mix_files": 4,
        "primary_features": [{"from_name": f, "to_name": f}
                             for f in ("dense0", "sparse0", "label")]}}


def task_cpu_ns(pid, seen):
    """CPU time of pid's threads so far: schedstat's nanoseconds (where /proc/PID/stat counts
    10 ms ticks) of each thread, a thread that ended counted at what it was last seen at (seen:
    tid -> ns, kept between calls)."""
    for tid in os.listdir("/proc/%d/task" % pid):
        try:
            with open("/proc/%d/task/%s/schedstat" % (pid, tid)) as f:
                seen[tid] = max(seen.get(tid, 0), int(f.read().split()[0]))
        except (OSError, ValueError, IndexError):
            pass  # a thread that just ended
    return sum(seen.values())


def epoch_cpus(ctl, path, extra, epochs):
    """One `sluicectl run` of `epochs` epochs: the CPU-seconds of each epoch, from the process's
    start to the first batch of the next epoch as its output shows it (the pipeline is then at
    most its prefetch ahead: the same skew at both ends of a later epoch), the last to the end."""
    p = subprocess.Popen([ctl, "run", path] + extra, stdout=subprocess.PIPE,
                         stderr=subprocess.DEVNULL, text=True, bufsize=1)
    marks, epoch, tids = [], 0, {}
    for line in p.stdout:
        m = line.split(" epoch=", 1)
        if len(m) == 2 and int(m[1].split()[0]) > epoch:
            epoch += 1
            marks.append(task_cpu_ns(p.pid, tids))
    # the last epoch's end: the process's CPU as it exits (its threads are gone by then; one
    # that ended before with work since it was last seen counts in the last epoch)
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    if p.wait() != 0:
        raise SystemExit("cache.py: sluicectl run %s failed" % path)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    total = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    if len(marks) != epochs - 1:
        raise SystemExit("cache.py: %d epochs seen, %d asked for" % (len(marks) + 1, epochs))
    at = [0] + [m / 1e9 for m in marks] + [total]
    return [at[i + 1] - at[i] for i in range(epochs)]


def epochs_bench(ctl, tmp, data, comp, epochs, repeat, budget):
    path = os.path.join(tmp, "ep-%s-%d.json" % (comp, epochs))
    with open(path, "w") as f:
        json.dump(spec(data, epochs), f)
    for cache in (False, True):
        # --cache-uncompressed: the uncompressed dataset too (what the default rule weighs)
        extra = ["--cache-memory", str(budget), "--cache-uncompressed"] if cache else []
        runs = [epoch_cpus(ctl, path, extra, epochs) for _ in range(repeat)]
        first = statistics.median(r[0] for r in runs)
        second = statistics.median(r[1] for r in runs)
        later = statistics.median(statistics.mean(r[1:]) for r in runs)
        print("bench=cache_epochs compression=%s cache=%d epochs=%d epoch1_cpu_s=%.3f "
              "epoch2_cpu_s=%.3f later_epoch_cpu_s=%.3f epoch2_ratio=%.3f runs=%d" % (
                  comp, cache, epochs, first, second, later, second / first if first else 0,
                  repeat), flush=True)


def jobs_bench(build, tmp, data, comp, budget, gap=1.0, repeat=1, rate=0):
    """Medians of repeat runs of each (cache, jobs) case: a fresh daemon's first touch of
    memory costs it 0.1 - 0.4 CPU-s more or less from run to run on this VM."""
    runs = {}
    for _ in range(repeat):
        for (cache, n), cpu in jobs_once(build, tmp, data, budget, gap, rate).items():
            runs.setdefault((cache, n), []).append(cpu)
    out = {k: statistics.median(v) for k, v in runs.items()}
    for cache in (False, True):
        print("bench=cache_jobs compression=%s cache=%d rate=%d one_job_cpu_s=%.3f "
              "four_jobs_cpu_s=%.3f ratio=%.2f ratio_to_uncached_job=%.2f runs=%d" % (
                  comp, cache, rate, out[(cache, 1)], out[(cache, 4)],
                  out[(cache, 4)] / out[(cache, 1)], out[(cache, 4)] / out[(False, 1)],
                  repeat), flush=True)


def jobs_once(build, tmp, data, budget, gap, rate=0):
    out = {}
    for cache in (False, True):
        for n in (1, 4):
            extra = ["--cache-memory", str(budget), "--cache-uncompressed"] if cache else []
            d, sock = start_daemon(build, tmp, extra)
            try:
                c0 = task_cpu_ns(d.pid, {}) / 1e9  # its start: every thread it has is alive
                procs = []
                for k, (b, seed) in enumerate(zip((256, 512, 1024, 4096), (1, 2, 3, 4))):
                    if k == n:
                        break
                    if k:
                        time.sleep(gap)  # started 1 s apart (the acceptance)
                    procs += readers(build, sock, [{"spec": json.dumps(spec(data, 1, b, seed)),
                                                    "rate": rate}])
                    procs[-1].stdin.write("go\n")
                    procs[-1].stdin.flush()
                rows = finish(procs, go=False)
            finally:
                d.terminate()
                # its CPU in microseconds, all threads (its pipelines' ended ones too), where
                # /proc counts 10 ms ticks: a later cached job costs a few ticks
                _, status, ru = os.wait4(d.pid, 0)
                d.returncode = status
            out[(cache, n)] = ru.ru_utime + ru.ru_stime - c0
            if len(set(rows)) != 1:
                raise SystemExit("cache.py: the jobs read %s rows" % rows)
    return out


def start_bare(build, tmp, extra, cgroup):
    """A fresh sluiced as installed (no tuning flag: only its socket and an empty config dir),
    inside the v1 memory cgroup directory cgroup."""
    conf = tempfile.mkdtemp(dir=tmp)
    sock = os.path.join(conf, "s.sock")

    def join():
        with open(os.path.join(cgroup, "cgroup.procs"), "w") as f:
            f.write(str(os.getpid()))

    p = subprocess.Popen([os.path.join(build, "daemon", "sluiced"), "--no-config", "--socket", sock,
                          "--config-dir", conf] + list(extra),
                         stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, preexec_fn=join)
    for _ in range(500):
        if os.path.exists(sock):
            break
        time.sleep(0.01)
    return p, sock


def cg_read(cgroup, name):
    with open(os.path.join(cgroup, name)) as f:
        return f.read()


def acceptance(build, tmp, comp, cg_bytes, repeat, rate, gap):
    """Issue 37's acceptance: four jobs over one dataset twice the size of the default record
    cache (a quarter of the cgroup: sluiced takes half of it as --memory, the cache half of that),
    batches 256 - 4096 and 4 seeds started gap s apart, on a sluiced started with no flags in a
    v1 memory cgroup of cg_bytes; against one such job, and against the same with
    --cache-memory 0; the cgroup's peak and whether anything was OOM-killed."""
    base = "/sys/fs/cgroup/memory"
    if not os.path.isdir(base) or os.geteuid() != 0:
        raise SystemExit("cache.py --acceptance: needs root and cgroup v1's memory controller")
    cache = cg_bytes // 4
    data = os.path.join(tmp, "acc-" + comp)
    per = 817  # a CTR record's bytes on disk, uncompressed, header and footer included
    subprocess.run([os.path.join(build, "tools", "sluicectl"), "gen", "ctr", data, "--files",
                    "16", "--records", str(2 * cache // per), "--seed", "5", "--compression",
                    comp], check=True, stdout=subprocess.DEVNULL)
    size = sum(os.path.getsize(os.path.join(data, f)) for f in os.listdir(data))
    runs = {}
    for _ in range(repeat):
        for extra in ([], ["--cache-memory", "0"]):
            for n in (1, 4):
                cg = os.path.join(base, "sluice-acc-%d" % os.getpid())
                os.mkdir(cg)
                try:
                    with open(os.path.join(cg, "memory.limit_in_bytes"), "w") as f:
                        f.write(str(cg_bytes))
                    d, sock = start_bare(build, tmp, extra, cg)
                    try:
                        c0 = task_cpu_ns(d.pid, {}) / 1e9
                        procs = []
                        for k, (b, seed) in enumerate(zip((256, 512, 1024, 4096), (1, 2, 3, 4))):
                            if k == n:
                                break
                            if k:
                                time.sleep(gap)
                            procs += readers(build, sock, [{"spec": json.dumps(
                                spec(data, 1, b, seed)), "rate": rate}])
                            procs[-1].stdin.write("go\n")
                            procs[-1].stdin.flush()
                        rows = finish(procs, go=False)
                    finally:
                        d.terminate()
                        _, status, ru = os.wait4(d.pid, 0)
                    oom = [line for line in cg_read(cg, "memory.oom_control").splitlines()
                           if line.startswith("oom_kill ")]
                    peak = int(cg_read(cg, "memory.max_usage_in_bytes"))
                finally:
                    os.rmdir(cg)
                if len(set(rows)) != 1 or not os.WIFEXITED(status) or os.WEXITSTATUS(status):
                    raise SystemExit("cache.py: rows %s, sluiced's status %#x" % (rows, status))
                key = (bool(extra), n)
                r = runs.setdefault(key, {"cpu": [], "peak": [], "oom": 0})
                r["cpu"].append(ru.ru_utime + ru.ru_stime - c0)
                r["peak"].append(peak)
                r["oom"] += int(oom[0].split()[1]) if oom else 0
    for off in (False, True):
        one, four = runs[(off, 1)], runs[(off, 4)]
        c1, c4 = statistics.median(one["cpu"]), statistics.median(four["cpu"])
        print("bench=cache_acceptance compression=%s cache=%s cgroup_bytes=%d data_bytes=%d "
              "rate=%d one_job_cpu_s=%.3f four_jobs_cpu_s=%.3f ratio=%.2f peak_bytes=%d "
              "oom_kills=%d runs=%d" % (
                  comp, "off" if off else "default", cg_bytes, size, rate, c1, c4, c4 / c1,
                  max(one["peak"] + four["peak"]), one["oom"] + four["oom"], repeat),
              flush=True)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", default=os.path.join(os.path.dirname(os.path.dirname(HERE)),
                                                     "build-rel"))
    ap.add_argument("--records", type=int, default=400000)
    ap.add_argument("--epochs", type=int, default=4)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--cache-memory", type=int, default=2 << 30)
    ap.add_argument("--gap", type=float, default=1.0, help="seconds between the jobs' starts")
    ap.add_argument("--only", choices=("epochs", "jobs"), help="one of the two measurements")
    ap.add_argument("--rate", type=float, action="append", default=[],
                    help="also the jobs with readers paced at this many rows a second each")
    ap.add_argument("--compression", choices=("none", "gzip"), action="append")
    ap.add_argument("--acceptance", type=int, metavar="CGROUP_BYTES",
                    help="issue 37's run instead: a sluiced with no flags in a v1 memory cgroup "
                         "of this many bytes, a dataset twice its default cache")
    a = ap.parse_args()
    ctl = os.path.join(a.build, "tools", "sluicectl")
    if a.acceptance:
        with tempfile.TemporaryDirectory(prefix="sluice-acc-") as tmp:
            for comp in a.compression or ("none",):
                for rate in [0] + a.rate:
                    acceptance(a.build, tmp, comp, a.acceptance, a.repeat, rate, a.gap)
        return
    with tempfile.TemporaryDirectory(prefix="sluice-cache-") as tmp:
        for comp in a.compression or ("none", "gzip"):
            data = os.path.join(tmp, comp)
            subprocess.run([ctl, "gen", "ctr", data, "--files", "8", "--records",
                            str(a.records), "--seed", "5", "--compression", comp],
                           check=True, stdout=subprocess.DEVNULL)
            if a.only != "jobs":
                epochs_bench(ctl, tmp, data, comp, a.epochs, a.repeat, a.cache_memory)
            if a.only != "epochs":
                for rate in [0] + a.rate:
                    jobs_bench(a.build, tmp, data, comp, a.cache_memory, a.gap, a.repeat, rate)


if __name__ == "__main__":
    main()
