# SPDX-License-Identifier: Apache-2.0
"""Chaos (issue 19): sluiced killed 20 times under readers of every mode, readers killed too.

One sluiced with a state directory serves one finite, deterministic pipeline (attached by spec)
to six reader processes (chaos_reader.py): two broadcast readers, a rank group (index 0 and 1 of
2) and a split group of two. At points chosen by progress (a reader's output grew by k batches,
k from a seeded random generator: a fixed seed in the test suite, SLUICE_CHAOS_SEED another;
tools/soak.sh draws new ones and prints each, so that a failure replays) sluiced is
killed and started again with the same state directory, 20 times (every 5th with SIGTERM, a
clean stop, the others with SIGKILL); broadcast and split readers are killed with SIGKILL and
started again (a broadcast reader from the state it saved with its last batch); one split
member stops itself (SIGSTOP) holding a batch, past sluiced's --lease, and goes on (SIGCONT).

At the end: each broadcast reader read exactly the reference run's batches in order (from
wherever its process resumed); each rank member exactly batches k mod 2, in order, once; the
split group every batch at least once, each extra copy marked re-delivered, and the stopped
member's held batch came again, marked, while the member was told why (ETIME); sluiced's open
descriptors and RSS come back to what they were after its start once every reader is gone
(the last restart is made with every reader stopped, so that the baseline has no client).

The readers sleep PACE per batch (split members twice that: the group goes as fast as one
reader) until the last restart, then read the rest at full speed. A split member is killed or
stopped only once its group resumed in the running sluiced (see the comment in the loop). About
20 s alone, 30 s with three more at once on 2 cores.
"""

import errno
import json
import os
import random
import re
import shutil
import signal
import subprocess
import sys
import time

import test_daemon
from conftest import ctl

HERE = os.path.dirname(os.path.abspath(__file__))
READER = os.path.join(HERE, "chaos_reader.py")

RECORDS, BATCH, EPOCHS = 1000, 2, 2  # 1000 batches
DAEMON_KILLS = 20
READER_KILLS = ["b0", "b1", "b0", "s0", "s1"]
FIXED_SEED = 1357911
# the lease: a setting scaled for the build (common.scaled), not a number tuned for one host's load
OPTS = ["--ring-slots", "8", "--lease", "%g" % test_daemon.common.scaled(3), "--linger", "1"]
PACE = 0.01  # seconds a reader sleeps per batch (a training step) until the last restart
RSS_SLACK = 8 << 20  # allocator arenas and caches that stay after the first pipelines
LEASE_LOG = "longer than the lease"


READERS = {}  # name -> Reader, for what a timeout says
DAEMON = []  # the sluiced running now, for its stacks when a wait timed out


def wait_for(cond, what, timeout=60, step=0.02):
    """Poll cond() until it is true (returned); fail saying what() after timeout seconds, with
    where each reader waits and what it wrote last."""
    deadline = time.monotonic() + timeout
    while True:
        v = cond()
        if v:
            return v
        if time.monotonic() > deadline:
            raise AssertionError("waited %d s for %s\n%s" % (timeout, what(), where()))
        time.sleep(step)  # polls the condition itself


def where():
    out = []
    live = [x for x in READERS.values() if x.p.poll() is None]
    had = {x.name: os.path.getsize(x.err) for x in live}
    for x in live:
        x.p.send_signal(signal.SIGUSR1)  # faulthandler: its stack on its stderr
    # (only on the way to failing) until each live reader wrote its stack, or 5 s
    test_daemon.poll_until(lambda: all(os.path.getsize(x.err) > had[x.name] for x in live), 5)
    for x in READERS.values():
        out.append("%s (pid %d, %s): %s\n%s" % (x.name, x.p.pid, x.state(),
                                                x.events()[-2:], x.stderr()[-1500:]))
    out.append(daemon_stacks())
    return "\n".join(out)


def daemon_stacks():
    """Where sluiced's threads are (gdb, when there is one): what a stalled daemon waits for."""
    if not DAEMON or DAEMON[0].p.poll() is not None or not shutil.which("gdb"):
        return "sluiced's stacks: not taken (no gdb, or sluiced is gone)"
    try:
        r = subprocess.run(["gdb", "-p", str(DAEMON[0].p.pid), "-batch", "-nx", "-ex",
                            "thread apply all bt 12"], capture_output=True, text=True,
                           timeout=60)
    except subprocess.TimeoutExpired:
        return "sluiced's stacks: gdb did not answer within 60 s"
    lines = [x for x in r.stdout.splitlines() if x.startswith(("Thread", "#"))]
    return "sluiced's stacks:\n" + "\n".join(lines)[-6000:]


class Reader:
    """chaos_reader.py in a process of its own, started again after each kill."""

    def __init__(self, tmp, name, mode, sock, spec, *args):
        self.name, self.mode = name, mode
        self.out = os.path.join(tmp, name + ".jsonl")
        self.err = os.path.join(tmp, name + ".stderr")
        self.stop_file = os.path.join(tmp, name + ".stop")
        self.cmd = [sys.executable, READER, sock, spec, self.out, mode]
        self.cmd += ["--pace", PACE, "--pace-file", os.path.join(tmp, "pace"),
                     "--stop-file", self.stop_file] + list(args)
        if mode == "broadcast":  # they hold the ring at the first batch until every group came
            self.cmd += ["--go-file", os.path.join(tmp, "go")]
        self.cmd = [str(a) for a in self.cmd]
        self.procs = []
        self.start()

    def start(self):
        with open(self.err, "a") as err:
            self.p = subprocess.Popen(self.cmd, stdin=subprocess.DEVNULL,
                                      stdout=subprocess.DEVNULL, stderr=err)
        self.procs.append(self.p)

    def kill(self):
        self.p.send_signal(signal.SIGKILL)
        self.p.wait(30)

    def events(self):
        if not os.path.exists(self.out):
            return []
        with open(self.out) as f:
            return [json.loads(x) for x in f if x.endswith("\n")]

    def batches(self):
        if not os.path.exists(self.out):
            return 0
        with open(self.out, "rb") as f:
            return f.read().count(b'"ids"')

    def ended(self):
        ev = self.events()
        return bool(ev) and ev[-1].get("ev") == "end"

    def state(self):
        """The process's state letter (R, S, T, Z...), or None once reaped."""
        try:
            with open("/proc/%d/stat" % self.p.pid) as f:
                return f.read().rsplit(")", 1)[1].split()[0]
        except (FileNotFoundError, ProcessLookupError):
            return None

    def alive(self):
        """Whether the process runs; an exit before the end of its stream fails the test."""
        if self.p.poll() is None:
            return True
        if self.p.returncode != 0 or not self.ended():
            raise AssertionError("reader %s exited %s: %s %s" % (
                self.name, self.p.returncode, self.events()[-2:], self.stderr()))
        return False

    def stderr(self):
        with open(self.err) as f:
            return f.read()[-2000:]


def fd_kinds(pid):
    """What sluiced's descriptors are (socket and pipe numbers left out), sorted."""
    out = []
    d = "/proc/%d/fd" % pid
    for fd in os.listdir(d):
        try:
            out.append(re.sub(r"\[\d+\]", "[]", os.readlink(os.path.join(d, fd))))
        except FileNotFoundError:
            pass
    return sorted(out)


def only_listening(pid):
    """fd_kinds(pid) when its one socket is the listening one (it has no client), else None."""
    fds = fd_kinds(pid)
    return fds if fds.count("socket:[]") == 1 else None


def rss(pid):
    with open("/proc/%d/status" % pid) as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    return 0


def this_run_log(tmp):
    """The log of the sluiced running now (since it said where it listens)."""
    with open(os.path.join(tmp, "sluiced.log")) as f:
        text = f.read()
    return text[text.rfind("listening on"):]


def split_attached(tmp):
    """Whether a split reader attached to the sluiced running now: its group resumed."""
    return re.search(r"attached to \S+ \(split\)", this_run_log(tmp)) is not None


def attaches(r):
    return sum(1 for e in r.events() if e.get("ev") == "attach")


def log_count(tmp, what):
    with open(os.path.join(tmp, "sluiced.log")) as f:
        return f.read().count(what)


def reference(tmp, spec_path):
    r = ctl("run", spec_path, "--json", "--values", "id")
    assert r.returncode == 0, r.stderr
    ref = [json.loads(x) for x in r.stdout.splitlines() if x.strip()]
    assert [b["seq"] for b in ref] == list(range(len(ref)))
    return [(b["epoch"], [int(s.split("-")[1]) for s in b["tensors"]["id"]["values"]])
            for b in ref]


def check_broadcast(r, ref, seed):
    """Each session goes on exactly after the batch whose state it resumed from, to the end."""
    expect, sessions = None, 0
    for e in r.events():
        if e.get("ev") == "attach":
            expect, sessions = e["from"] + 1, sessions + 1
        elif "ids" in e:
            assert e["seq"] == expect, "seed %d: %s: batch %d where %s was due (from %s)" % (
                seed, r.name, e["seq"], expect, e)
            assert (e["epoch"], e["ids"]) == ref[e["seq"]] and not e["re"], (seed, r.name, e)
            expect += 1
        else:
            assert e.get("ev") == "end", "seed %d: %s: %s" % (seed, r.name, e)
    assert expect == len(ref) and r.ended(), (seed, r.name, expect)
    return sessions


def check_rank(r, index, ref, seed):
    ev = r.events()
    got = [(e["seq"], e["epoch"], e["ids"], e["re"]) for e in ev if "ids" in e]
    want = [(s, ref[s][0], ref[s][1], False) for s in range(index, len(ref), 2)]
    assert [g[0] for g in got] == [w[0] for w in want], "seed %d: %s: seqs %s" % (
        seed, r.name, [g[0] for g in got])
    assert got == want, "seed %d: %s: contents differ" % (seed, r.name)
    assert [e["ev"] for e in ev if "ev" in e] == ["attach", "end"], (seed, r.name)


def test_chaos(tmp_path):
    # a fixed seed: the suite's result must not depend on a draw (tools/soak.sh draws them)
    seed = int(os.environ.get("SLUICE_CHAOS_SEED") or FIXED_SEED)
    print("chaos seed %d (SLUICE_CHAOS_SEED=%d replays it)" % (seed, seed), flush=True)
    rnd = random.Random(seed)
    t0 = time.monotonic()
    tmp = str(tmp_path)
    data = os.path.join(tmp, "data")
    r = ctl("gen", "seq", data, "--records", RECORDS, "--files", 4, "--seed", seed % 1000)
    assert r.returncode == 0, r.stderr
    spec_path = os.path.join(tmp, "chaos.json")
    with open(spec_path, "w") as f:
        json.dump({"name": "chaos", "type": "independent", "args": {
            "dataset": {"type": "dir", "args": {"data_dir": data}}, "target_batch_size": BATCH,
            "drop_remainder": False, "epochs": EPOCHS, "num_read_buffer_bytes": 65536,
            "num_prefetch": 2, "shuffle": True, "seed": seed % 997,
            "num_shuffle_buffer_elements": 30, "num_filenames_shuffle_buffer": 2,
            "num_mix_files": 2, "primary_features": [{"from_name": "id", "to_name": "id"}]}}, f)
    ref = reference(tmp, spec_path)
    assert len(ref) == RECORDS * EPOCHS // BATCH
    conf, sd = os.path.join(tmp, "conf"), os.path.join(tmp, "state")
    os.makedirs(conf)
    opts = OPTS + ["--state-dir", sd]
    d = test_daemon.Daemon(tmp, conf, opts)
    DAEMON[:] = [d]
    assert d.ready
    with open(os.path.join(tmp, "pace"), "w"):
        pass
    readers = READERS
    readers.clear()
    try:
        sock = d.sock
        # The broadcast readers attach first and wait: the ring keeps the first batch, and
        # the groups that attach next start there (a group that comes later reads from the
        # next epoch). Group members do not wait, attached, holding what they are handed:
        # that would be past the lease on a loaded host.
        readers.update({
            "b0": Reader(tmp, "b0", "broadcast", sock, spec_path),
            "b1": Reader(tmp, "b1", "broadcast", sock, spec_path),
        })
        wait_for(lambda: all(x.events() for x in readers.values()),
                 lambda: "the readers to attach: %s" % {n: x.stderr() for n, x in readers.items()})
        readers.update({
            "r0": Reader(tmp, "r0", "rank", sock, spec_path, "--group", "ranks", "--index", 0,
                         "--count", 2),
            "r1": Reader(tmp, "r1", "rank", sock, spec_path, "--group", "ranks", "--index", 1,
                         "--count", 2),
            # two members share the stream: at half the pace, the group goes as fast as one
            "s0": Reader(tmp, "s0", "split", sock, spec_path, "--group", "workers", "--pace",
                         2 * PACE),
            "s1": Reader(tmp, "s1", "split", sock, spec_path, "--group", "workers", "--pace",
                         2 * PACE),
        })
        wait_for(lambda: all(x.events() for x in readers.values()),
                 lambda: "the readers to attach: %s" % {n: x.stderr() for n, x in readers.items()})
        with open(os.path.join(tmp, "go"), "w"):
            pass
        events = ["daemon"] * (DAEMON_KILLS - 1) + ["kill:" + n for n in READER_KILLS]
        rnd.shuffle(events)
        events.insert(rnd.randrange(len(events) // 3), "stop:" + rnd.choice(["s0", "s1"]))
        events.append("final")  # the last restart: the baseline of descriptors and memory
        kills, reader_kills, stopped = 0, 0, None
        for ev in events:
            # a point chosen by progress: a running reader's output grew by k batches
            running = [x for x in readers.values() if x.alive() and not x.ended()]
            if running:  # (a split member counts the batches of its group: it may get none)
                who, k = rnd.choice(running), rnd.randint(2, 6)
                grp = [readers["s0"], readers["s1"]] if who.mode == "split" else [who]
                n0 = sum(x.batches() for x in grp)
                wait_for(lambda: sum(x.batches() for x in grp) >= n0 + k or who.ended() or
                         not who.alive(),
                         lambda: "seed %d: %s to read %d batches past %d before %s" % (
                             seed, who.name, k, n0, ev))
            if ev.startswith("kill:s") or ev.startswith("stop:"):
                # A split member that joins its group again (started again, or removed for
                # its lease) without a resume token finds it where it resumed after the last
                # restart, not before one of its members came back: sluiced does not resume a
                # group by its name alone, and it would start anew (a known limit).
                wait_for(lambda: split_attached(tmp) or readers["s0"].ended(),
                         lambda: "seed %d: the split group to resume" % seed)
            now = time.monotonic()
            print("%6.2f s (%.3f): %s%s" % (now - t0, now, ev, " (%s read %d)" % (
                who.name, who.batches()) if running else ""), flush=True)
            if ev in ("daemon", "final"):
                kills += 1
                sig = signal.SIGTERM if kills % 5 == 0 else signal.SIGKILL
                if ev == "final":  # nobody attaches before the baseline is taken
                    for x in readers.values():
                        x.p.send_signal(signal.SIGSTOP)
                rc = d.stop(sig)
                assert rc == (0 if sig == signal.SIGTERM else -signal.SIGKILL), (seed, kills, rc)
                d = test_daemon.Daemon(tmp, conf, opts)
                DAEMON[:] = [d]
                assert d.ready, "seed %d: sluiced did not start again (kill %d)" % (seed, kills)
                if ev == "final":  # once it closed the socket that said READY=1
                    base_fds = wait_for(lambda: only_listening(d.p.pid), lambda: "seed %d: "
                                        "sluiced's descriptors %s" % (seed, fd_kinds(d.p.pid)))
                    base_rss = rss(d.p.pid)
                    os.unlink(os.path.join(tmp, "pace"))  # the rest at full speed
                    for x in readers.values():
                        x.p.send_signal(signal.SIGCONT)
            elif ev.startswith("kill:"):
                x = readers[ev[5:]]
                if x.ended():  # started again it would read from the start (a new reader)
                    continue
                reader_kills += 1
                n = attaches(x)
                x.kill()
                x.start()
                if x.mode == "split":  # in this run, where its group is
                    wait_for(lambda: attaches(x) > n or x.ended() or not x.alive(),
                             lambda: "seed %d: %s to attach again" % (seed, x.name))
            else:  # a split member stops holding a batch, past the lease, and goes on
                x = stopped = readers[ev[5:]]
                assert not x.ended(), "seed %d: %s ended before its stop" % (seed, x.name)
                leases = log_count(tmp, LEASE_LOG)
                with open(x.stop_file, "w"):
                    pass
                wait_for(lambda: x.state() == "T", lambda: "seed %d: %s to stop (%s)" % (
                    seed, x.name, x.state()))
                held = [e for e in x.events() if e.get("ev") == "stopping"][-1]["seq"]
                wait_for(lambda: log_count(tmp, LEASE_LOG) > leases,
                         lambda: "seed %d: sluiced to remove %s for its lease" % (seed, x.name))
                n = attaches(x)
                x.p.send_signal(signal.SIGCONT)
                wait_for(lambda: any(e.get("errno") == errno.ETIME for e in x.events()),
                         lambda: "seed %d: %s to be told it lost its lease: %s" % (
                             seed, x.name, x.events()[-3:]))
                wait_for(lambda: attaches(x) > n, lambda: "seed %d: %s to attach again" % (
                    seed, x.name))
                wait_for(lambda: any(e.get("seq") == held and e.get("re") and "ids" in e
                                     for y in ("s0", "s1") for e in readers[y].events()),
                         lambda: "seed %d: batch %d held by %s to come again, marked" % (
                             seed, held, x.name))
        chaos_s = time.monotonic() - t0
        for x in readers.values():
            wait_for(lambda: x.p.poll() is not None, lambda: "seed %d: %s to end: %s" % (
                seed, x.name, x.events()[-2:]), timeout=120)
            assert x.p.returncode == 0, "seed %d: %s exited %s: %s" % (
                seed, x.name, x.p.returncode, x.stderr())
        # every reader is gone: sluiced's descriptors and memory come back (its pipelines
        # ended and linger 1 s without readers)
        pid = d.p.pid
        wait_for(lambda: fd_kinds(pid) == base_fds and rss(pid) <= base_rss + RSS_SLACK,
                 lambda: "seed %d: sluiced's descriptors %s and RSS %d to come back to %s and "
                 "%d" % (seed, fd_kinds(pid), rss(pid), base_fds, base_rss), timeout=60)
        end_rss = rss(pid)
    finally:
        for x in readers.values():
            for p in x.procs:
                if p.poll() is None:
                    p.send_signal(signal.SIGCONT)
                    p.kill()
                    p.wait()
        rc = d.stop()
    assert rc == 0 and kills == DAEMON_KILLS and stopped is not None
    sessions = {n: check_broadcast(readers[n], ref, seed) for n in ("b0", "b1")}
    check_rank(readers["r0"], 0, ref, seed)
    check_rank(readers["r1"], 1, ref, seed)
    copies = {}
    for n in ("s0", "s1"):
        for e in readers[n].events():
            if "ids" in e:
                assert (e["epoch"], e["ids"]) == ref[e["seq"]], (seed, n, e)
                copies.setdefault(e["seq"], []).append(e["re"])
            elif e.get("ev") == "error":
                assert n == stopped.name and e["errno"] == errno.ETIME and "lease" in e["msg"]
    assert sorted(copies) == list(range(len(ref))), "seed %d: the split group missed %s" % (
        seed, sorted(set(range(len(ref))) - set(copies)))
    twice = [s for s, c in copies.items() if c.count(False) > 1]
    assert not twice, "seed %d: split batches given twice unmarked: %s" % (seed, twice)
    resumed = log_count(tmp, "resumed from the position kept")
    assert log_count(tmp, "cannot resume") == 0 and resumed >= DAEMON_KILLS
    print("chaos seed %d: %d restarts (%d by SIGTERM), %d reader kills, broadcast sessions %s, "
          "%d resumes, %d split batches re-delivered; %.1f s of chaos, %.1f s in all; RSS %d -> "
          "%d" % (seed, kills, kills // 5, reader_kills, sessions, resumed,
                  sum(c.count(True) for c in copies.values()), chaos_s, time.monotonic() - t0,
                  base_rss, end_rss))
