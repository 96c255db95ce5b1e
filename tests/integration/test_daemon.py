# SPDX-License-Identifier: Apache-2.0
"""sluiced as a process: a real socket, real shared memory, real clients, real kill -9.

Starts sluiced on a temporary socket with a config dir of pipeline specs over a dataset written
here (an int64 "id" per record, unique, so that who got which record can be checked), and drives
it with `sluicectl drain` and a small ctypes client over libsluice.so. Output: TAP, for meson.
"""

import ctypes
import json
import os
import pwd
import resource
import select
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "crosscheck"))
import common  # noqa: E402

# a case of the TAP stream meson reads, and one that cannot run here (its tagged reason);
# common.finish() counts them
check = common.check
skip_case = common.skip_case


def poll_until(cond, timeout):
    """cond()'s first true value, asked every 20 ms (the condition itself: a stats field, a
    file), or None once timeout seconds (scaled for this build: common.scaled) passed without
    one."""
    end = time.monotonic() + common.scaled(timeout)
    while True:
        v = cond()
        if v or time.monotonic() > end:
            return v or None
        time.sleep(0.02)  # polls the condition itself


N_FILES, PER_FILE = 4, 50  # 200 records, ids 0..199


def write_dataset(d):
    ex_pb2, _ = common.protos()
    os.makedirs(d)
    i = 0
    for f in range(N_FILES):
        recs = []
        for _ in range(PER_FILE):
            ex = ex_pb2.Example()
            ex.features.feature["id"].int64_list.value.append(i)
            ex.features.feature["x"].float_list.value.extend([i * 0.5, -i])
            recs.append(ex.SerializeToString())
            i += 1
        common.write_tfrecord(os.path.join(d, "part-%d.tfrecords" % f), recs)
    with open(os.path.join(d, "__manifest__.json"), "w") as f:
        json.dump({"compression": None, "allow_var_len": False, "features": [
            {"name": "id", "dtype": "int64", "shape": [], "deserialize_type": "int"},
            {"name": "x", "dtype": "float32", "shape": [2], "deserialize_type": "float"}]}, f)


def spec(data, name=None, epochs=1, batch=10, **args):
    a = {"dataset": {"type": "dir", "args": {"data_dir": data}}, "target_batch_size": batch,
         "drop_remainder": False, "epochs": epochs, "num_read_buffer_bytes": 65536,
         "num_prefetch": 2,
         "primary_features": [{"from_name": "id", "to_name": "id"},
                              {"from_name": "x", "to_name": "x"}]}
    a.update(args)
    s = {"type": "independent", "args": a}
    if name:
        s["name"] = name
    return s


class Daemon:
    def __init__(self, tmp, conf, extra=(), env=None, cwd=None, preexec_fn=None):
        self.sock = os.path.join(tmp, "sluice.sock")
        self.notify = os.path.join(tmp, "notify")
        self.ns = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        if os.path.exists(self.notify):
            os.unlink(self.notify)
        self.ns.bind(self.notify)
        self.ns.settimeout(20)
        env = dict(os.environ, NOTIFY_SOCKET=self.notify, **(env or {}))
        self.log = open(os.path.join(tmp, "sluiced.log"), "a")
        # --no-config: the host's sluiced.conf (the build's sysconfdir) is not the test's
        self.p = subprocess.Popen([os.environ["SLUICED"], "--no-config", "--socket", self.sock,
                                   "--config-dir", conf, "--workers", "2", "--pipeline-memory",
                                   "8M"] + list(extra),
                                  env=env, stderr=self.log, cwd=cwd, preexec_fn=preexec_fn)
        self.ready = b"READY=1" in self.ns.recv(4096)

    def stop(self, sig=signal.SIGTERM):
        if self.p.poll() is None:
            self.p.send_signal(sig)
        try:
            return self.p.wait(20)
        except subprocess.TimeoutExpired:
            self.p.kill()
            return self.p.wait()
        finally:
            self.ns.close()


def ctl(d, *args, user=None, timeout=60):
    cmd = [os.environ["SLUICECTL"], "--socket", d.sock] + list(args)
    if user:
        pw = pwd.getpwnam(user)
        cmd = ["setpriv", "--reuid", str(pw.pw_uid), "--regid", str(pw.pw_gid),
               "--clear-groups"] + cmd
    return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)


def drain_json(d, target, *args):
    r = ctl(d, "drain", target, "--json", "--values", "id", *args)
    lines = [json.loads(x) for x in r.stdout.splitlines() if x.strip()]
    return r, lines


def ids_of(lines):
    return [int(v) for b in lines for v in b["values"]["id"]]


def test_broadcast(d):
    procs = [subprocess.Popen([os.environ["SLUICECTL"], "--socket", d.sock, "drain", "bc",
                               "--json", "--values", "id"], stdout=subprocess.PIPE, text=True)
             for _ in range(3)]
    outs = [p.communicate(timeout=60)[0] for p in procs]
    runs = [[json.loads(x) for x in o.splitlines() if x.strip()] for o in outs]
    check(all(p.returncode == 0 for p in procs), "broadcast: 3 readers exit 0")
    check(all(sorted(ids_of(r)) == list(range(200)) for r in runs),
          "broadcast: every reader sees every record (%s)" % [len(ids_of(r)) for r in runs])
    by_seq = [{b["seq"]: b["digest"] for b in r} for r in runs]
    same = all(by_seq[0][k] == m[k] for m in by_seq[1:] for k in set(by_seq[0]) & set(m))
    check(same and by_seq[0], "broadcast: identical batches for every sequence number they share")


def test_split_and_kill(d, tmp, data):
    sp = os.path.join(tmp, "split.json")
    with open(sp, "w") as f:
        json.dump(spec(data, name="sp", epochs=1, batch=5), f)
    lib = os.path.join(os.environ["SLUICE_BUILD_DIR"], "libclient", "libsluice.so")
    holder = None
    # a sanitizer build's libsluice.so cannot be loaded into an uninstrumented python
    loadable = os.path.exists(lib) and subprocess.run(
        [sys.executable, "-c", "import ctypes, sys; ctypes.CDLL(sys.argv[1])", lib],
        capture_output=True).returncode == 0
    if not loadable:
        skip_case("split: the reader killed while holding batches",
                  "[sanitizer] %s cannot be loaded into this python" % lib)
    if loadable:
        # a reader that takes 3 batches, never releases them, and is killed with SIGKILL
        code = r'''
import ctypes, sys, time
L = ctypes.CDLL(sys.argv[1])
cl = ctypes.c_void_p(); rd = ctypes.c_void_p(); b = ctypes.c_void_p()
err = ctypes.create_string_buffer(1024)
assert L.sluice_connect(sys.argv[2].encode(), ctypes.byref(cl), err) == 0, err.raw
# the package's own mirror of struct sluice_attach_opts: init writes the whole struct
sys.path.insert(0, sys.argv[4])
from _lib import AttachOpts
o = AttachOpts(); L.sluice_attach_opts_init(ctypes.byref(o))
o.spec_json = open(sys.argv[3], "rb").read(); o.mode = 1
assert L.sluice_attach(cl, ctypes.byref(o), ctypes.byref(rd), err) == 0, err.raw
n = 0
while n < 3:
    r = L.sluice_next(rd, 5000, ctypes.byref(b), err)
    if r == 1:
        n += 1
print("HOLDING", n, flush=True)
time.sleep(60)  # the workload: a reader that holds its batches until it is killed
'''
        holder = subprocess.Popen([sys.executable, "-c", code, lib, d.sock, sp,
                                   os.path.join(os.environ["SLUICE_SRC_DIR"], "libclient",
                                                "python", "sluice")],
                                  stdout=subprocess.PIPE, text=True)
        line = holder.stdout.readline()
        check(line.startswith("HOLDING 3"), "split: a reader holds 3 batches (%r)" % line)
    procs = [subprocess.Popen([os.environ["SLUICECTL"], "--socket", d.sock, "drain", sp, "--mode",
                               "split", "--json", "--values", "id"],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for _ in range(2)]

    def readers():
        r = ctl(d, "stats", "sp", "--json")
        return json.loads(r.stdout)["readers"] if r.returncode == 0 else -1
    # the kill below must find both split readers attached (else the held batches would go
    # to whichever attached after it, and the scenario is not the one this checks)
    if holder:
        check(poll_until(lambda: readers() >= 3, 30) is not None,
              "split: both drain readers attached beside the holder (%d readers)" % readers())
        holder.send_signal(signal.SIGKILL)
        holder.wait()
    res = [p.communicate(timeout=60) for p in procs]
    got = sorted(i for out, _ in res for i in
                 ids_of([json.loads(x) for x in out.splitlines() if x.strip()]))
    check(all(p.returncode == 0 for p in procs), "split: the readers finish (%s)" %
          [e.strip()[-200:] for _, e in res if e.strip()])
    check(got == list(range(200)),
          "split: the union of rows is every record exactly once%s (%d rows, %d distinct)" % (
              ", after kill -9 of a reader holding batches" if holder else "", len(got),
              len(set(got))))


def test_rank(d, tmp, data):
    rp = os.path.join(tmp, "rank.json")
    with open(rp, "w") as f:
        json.dump(spec(data, name="rk", epochs=1, batch=7), f)
    procs = [subprocess.Popen([os.environ["SLUICECTL"], "--socket", d.sock, "drain", rp, "--mode",
                               "rank", "--index", str(i), "--count", "2", "--json", "--values",
                               "id"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for i in range(2)]
    res = [p.communicate(timeout=60) for p in procs]
    runs = [[json.loads(x) for x in o.splitlines() if x.strip()] for o, _ in res]
    ok = all(b["seq"] % 2 == i for i, r in enumerate(runs) for b in r)
    check(all(p.returncode == 0 for p in procs) and ok and runs[0] and runs[1],
          "rank: batch k goes to reader k mod 2 (%s)" % [[b["seq"] for b in r] for r in runs])
    check(sorted(ids_of(runs[0]) + ids_of(runs[1])) == list(range(200)),
          "rank: together the ranks see every record once")


def test_groups(d, tmp, data):
    """One named pipeline, read at once by a rank group of two, a split group of two (one of
    them killed with kill -9 mid-stream) and a broadcast reader, all with sluicectl drain."""
    gp = os.path.join(tmp, "groups.json")
    with open(gp, "w") as f:
        json.dump(spec(data, name="grp", epochs=1, batch=4), f)
    r = ctl(d, "register", gp)
    check(r.returncode == 0, "groups: register (%s)" % r.stderr.strip()[:200])

    def drain(*args):
        return subprocess.Popen([os.environ["SLUICECTL"], "--socket", d.sock, "drain", "grp",
                                 "--json", "--values", "id"] + list(args),
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    ranks = [drain("--mode", "rank", "--group", "job", "--index", str(i), "--count", "2")
             for i in range(2)]
    # the victim reads a few batches and is killed (its batches go to the other member)
    victim = drain("--mode", "split", "--group", "w")
    # a line per batch, as it takes them (bounded: a daemon that stalls fails here, not at
    # meson's timeout with nothing said)
    ready, _, _ = select.select([victim.stdout], [], [], common.scaled(60))
    check(bool(ready), "groups: the split member takes a batch within 60 s")
    first = victim.stdout.readline() if ready else ""
    victim.send_signal(signal.SIGKILL)
    victim.wait()
    vout = [json.loads(x) for x in (first + victim.stdout.read()).splitlines() if x.strip()]
    split = drain("--mode", "split", "--group", "w")
    bcast = drain()
    outs = {}
    for k, p in (("r0", ranks[0]), ("r1", ranks[1]), ("s", split), ("b", bcast)):
        out, err = p.communicate(timeout=60)
        outs[k] = [json.loads(x) for x in out.splitlines() if x.strip()]
        check(p.returncode == 0, "groups: drain %s exits 0 (%s)" % (k, err.strip()[-200:]))
    check(all(b["seq"] % 2 == i for i in range(2) for b in outs["r%d" % i]) and outs["r0"]
          and outs["r1"], "groups: rank k of group job gets batches k mod 2")
    check(sorted(ids_of(outs["r0"]) + ids_of(outs["r1"])) == list(range(200)),
          "groups: the rank group sees every record once")
    got = ids_of(outs["s"]) + ids_of(vout)
    again = [b for b in outs["s"] if b.get("redelivered")]
    check(vout and set(got) == set(range(200)) and len(got) - len(set(got)) <= 4 * len(again)
          and len(again) <= 1,
          "groups: the split group sees every record after kill -9 of a member (at least "
          "once: %d rows, %d distinct, %d batches re-delivered, the victim took %d)" % (
              len(got), len(set(got)), len(again), len(vout)))
    check(sorted(ids_of(outs["b"])) == list(range(200)),
          "groups: the broadcast reader sees every record")
    r = ctl(d, "stats", "grp")
    pub = [ln for ln in r.stdout.splitlines() if ln.split()[:1] == ["batches_published"]]
    check(pub and pub[0].split()[-1] == "50",
          "groups: one computation, 50 batches published for all of them (%s)" % pub)


def test_access_and_garbage(d, tmp, data):
    rs = os.path.join(tmp, "root.json")
    with open(rs, "w") as f:
        json.dump(spec(data, name="mine", epochs=1, seed=99), f)  # not bc's fingerprint
    r = ctl(d, "register", rs)
    check(r.returncode == 0 and "mine" in r.stdout, "register prints the name (%s)" %
          (r.stdout + r.stderr).strip()[:200])
    if os.geteuid() != 0:
        skip_case("access: another uid and the spec's readers",
                  "[root] needs root to run clients as nobody")
    else:
        os.chmod(tmp, 0o755)
        r = ctl(d, "drain", "mine", "--batches", "1", user="nobody")
        check(r.returncode == 1 and "permission denied" in r.stderr.lower(),
              "another uid (nobody) gets EACCES: %s" % r.stderr.strip()[:200])
        # the spec's "readers" lets a team's other users in: by uid, by group
        nobody = pwd.getpwnam("nobody")
        for k, (who, readers) in enumerate((("by-uid", {"uids": [nobody.pw_uid]}),
                                            ("by-gid", {"gids": [nobody.pw_gid]}))):
            p = os.path.join(tmp, "team-%s.json" % who)
            with open(p, "w") as f:
                json.dump(dict(spec(data, name="team-" + who, epochs=1, batch=23 + k),
                               readers=readers), f)
            r = ctl(d, "register", p)
            check(r.returncode == 0, "readers %s: registered (%s)" % (who, r.stderr.strip()))
            r = ctl(d, "drain", "team-" + who, "--batches", "1", user="nobody")
            check(r.returncode == 0, "readers %s: nobody may read it (%s)" % (
                who, r.stderr.strip()[:200]))
        p = os.path.join(tmp, "team-bad.json")
        with open(p, "w") as f:
            json.dump(dict(spec(data, name="team-bad"), readers={"uids": ["nobody"]}), f)
        r = ctl(d, "register", p)
        check(r.returncode == 1 and "readers.uids[0]" in r.stderr,
              "readers: a bad id is named by its JSON path (%s)" % r.stderr.strip()[:200])
    s = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    s.connect(d.sock)
    s.send(os.urandom(100))
    s.settimeout(5)
    try:
        closed = s.recv(100) == b""
    except (ConnectionResetError, socket.timeout):
        closed = True
    check(closed, "garbage on the socket: that connection is closed")
    r = ctl(d, "list")
    check(r.returncode == 0 and "bc" in r.stdout, "... and the daemon goes on (list: %s)" %
          r.stdout.strip().replace("\n", " | ")[:200])


def test_budget(tmp, data):
    conf = os.path.join(tmp, "conf-budget")
    os.makedirs(conf)
    for n in ("a", "b"):
        with open(os.path.join(conf, n + ".json"), "w") as f:
            json.dump(spec(data, name=n, epochs=1, seed=ord(n)), f)
    # no record cache: two rings are all of --memory, and the entries a running pipeline
    # reads would count too (a slow build's b was refused at start for a's 5 KiB of them)
    d = Daemon(tmp, conf, ["--memory", "16M", "--cache-memory", "0"])
    sp = os.path.join(tmp, "third.json")
    with open(sp, "w") as f:
        json.dump(spec(data, name="third", epochs=1, seed=3), f)
    r = ctl(d, "register", sp)
    check(r.returncode == 1 and "memory budget" in r.stderr,
          "memory budget exceeded: refused at register (%s)" % r.stderr.strip()[:200])
    d.stop()


def test_ended_dropped(tmp, data):
    """Ended pipelines do not hold memory for ever (issue 19): with --memory for two rings, a
    third one-epoch pipeline after two finished ones is served, the longest idle dropped for its
    room; with --linger 1 a finished pipeline whose reader left is dropped by itself."""
    conf = os.path.join(tmp, "conf-ended")
    os.makedirs(conf)
    paths = {}
    for k, n in enumerate(("first", "second", "third")):
        paths[n] = os.path.join(tmp, "ended-%s.json" % n)
        with open(paths[n], "w") as f:  # three computations (batch sizes), not one shared
            json.dump(spec(data, name=n, epochs=1, batch=10 + k), f)
    d = Daemon(tmp, conf, ["--memory", "16M", "--linger", "600"])
    try:
        for n in ("first", "second", "third"):
            r, lines = drain_json(d, paths[n])
            check(r.returncode == 0 and len(ids_of(lines)) == N_FILES * PER_FILE,
                  "ended: %s served in a budget of two rings (rc %d, %d rows, %s)" % (
                      n, r.returncode, len(ids_of(lines)), r.stderr.strip()[-200:]))
        names = [x.split()[0] for x in ctl(d, "list").stdout.splitlines()[1:]]
        check(names and "first" not in names and "second" in names and "third" in names,
              "ended: the longest idle finished pipeline made room (%s)" % names)
    finally:
        d.stop()
    with open(os.path.join(tmp, "sluiced.log")) as f:
        check("pipeline first dropped for memory" in f.read(), "ended: the drop is logged")
    d = Daemon(tmp, conf, ["--linger", "1"])
    try:
        r, _ = drain_json(d, paths["first"])
        check(r.returncode == 0, "linger: drained")
        deadline = time.monotonic() + 30
        log = ""
        while "pipeline first dropped: it ended and had no reader" not in log and \
                time.monotonic() < deadline:
            time.sleep(0.05)  # polls the log line itself
            with open(os.path.join(tmp, "sluiced.log")) as f:
                log = f.read()
        names = [x.split()[0] for x in ctl(d, "list").stdout.splitlines()[1:]]
        check("first" not in names and "dropped: it ended" in log,
              "linger: a finished pipeline without readers is dropped after --linger (%s)" % names)
    finally:
        d.stop()


def fake_cgroup(tmp, name, memory_max):
    """A fake /sys/fs/cgroup under tmp/name (sluiced reads it through SLUICED_TEST_CGROUP_ROOT)
    whose memory.max on this process's cgroup v2 path is memory_max: its root, or None when
    the process has no v2 path."""
    with open("/proc/self/cgroup") as f:
        own = [x.strip()[3:] for x in f if x.startswith("0::")]
    if not own:
        return None
    root = os.path.join(tmp, name)
    os.makedirs(os.path.join(root, own[0].lstrip("/")), exist_ok=True)
    with open(os.path.join(root, own[0].lstrip("/"), "memory.max"), "w") as f:
        f.write("%d\n" % memory_max)
    return root


def test_memory_and_quotas(tmp, data):
    """Memory the daemon may use comes from its cgroup (issue 19): with memory.max 64 MiB on its
    cgroup path (a fake tree: SLUICED_TEST_CGROUP_ROOT), --memory is 32 MiB, said in the log,
    and a fifth 8 MiB ring is refused with the figures instead of the kernel killing the daemon;
    a uid other than root runs at most --user-pipelines pipelines (EDQUOT, with its counts)."""
    root = fake_cgroup(tmp, "cgroup", 64 << 20)
    if not root:
        print("ok   memory: no cgroup v2 path here (skipped)")
        return
    conf = os.path.join(tmp, "conf-quota")
    os.makedirs(conf)
    # no cache: the entries running pipelines read are counted too, a few KiB of these files
    d = Daemon(tmp, conf, ["--user-pipelines", "2", "--cache-memory", "0"],
               env={"SLUICED_TEST_CGROUP_ROOT": root})
    try:
        outs = []
        for k in range(5):
            p = os.path.join(tmp, "quota-%d.json" % k)
            with open(p, "w") as f:  # endless: they never end, so nothing is dropped
                json.dump(spec(data, name="q%d" % k, epochs=None, batch=10 + k), f)
            os.chmod(p, 0o644)
            outs.append(ctl(d, "register", p))
        check([r.returncode for r in outs] == [0, 0, 0, 0, 1] and
              "memory budget: 33554432 of 33554432 bytes" in outs[4].stderr,
              "memory: 4 rings of 8 MiB fit half of memory.max, the fifth is refused (%s)" %
              outs[4].stderr.strip()[-200:])
        with open(os.path.join(tmp, "sluiced.log")) as f:
            log = f.read()
            check("memory: 32768 KiB for rings, engines and the record cache (half of the "
                  "cgroup's memory.max, 65536 KiB)" in log and
                  "record cache: off (--cache-memory 0)" in log,
                  "memory: the budget and where it comes from are logged")
    finally:
        d.stop()
    # the record cache is inside the budget: 24 MiB asked of 32, cut to 16; what it does not
    # hold is the rings' (test_memory.py: what it holds it gives back to them)
    d = Daemon(tmp, conf, ["--cache-memory", "24M"], env={"SLUICED_TEST_CGROUP_ROOT": root})
    try:
        outs = [ctl(d, "register", os.path.join(tmp, "quota-%d.json" % k)) for k in range(5)]
        codes = [r.returncode for r in outs]
        # the cache holds what the running pipelines read of their files (a few KiB): three
        # rings fit whatever it holds, the fifth never, and a refusal names the cache's part
        check(codes[:3] == [0, 0, 0] and codes[4] == 1 and
              "of them the record cache's, read by running pipelines" in outs[codes.index(1)].stderr,
              "memory: the record cache's part (cut to half) is the rings' but what running "
              "pipelines read of it, which a refusal names (%s: %s)" %
              (codes, outs[codes.index(1)].stderr.strip()[-300:] if 1 in codes else ""))
    finally:
        d.stop()
    with open(os.path.join(tmp, "sluiced.log")) as f:
        log = f.read()
    check("the cache gets 16777216" in log and
          "record cache: up to 16384 KiB of framed records of all files (--cache-memory)" in log,
          "memory: the cut and the cache's share are logged")
    d = Daemon(tmp, conf, ["--user-pipelines", "2", "--cache-memory", "0"])
    try:
        outs = []
        for k in range(3):
            p = os.path.join(tmp, "quota-%d.json" % k)
            outs.append(ctl(d, "register", p, user="nobody"))
        check([r.returncode for r in outs] == [0, 0, 1] and "quota" in outs[2].stderr and
              "runs 2 pipelines of 2" in outs[2].stderr,
              "quota: nobody's third pipeline is refused (%s)" % outs[2].stderr.strip()[-200:])
        r = ctl(d, "register", os.path.join(tmp, "quota-2.json"))
        check(r.returncode == 0, "quota: root is not counted (%s)" % r.stderr.strip()[-200:])
    finally:
        d.stop()


def test_fair_shares(tmp, data):
    """Issue 37 item 6: two users at their default --user-memory (half each) used to fill
    --memory, and root's next pipeline was refused. With a 32 MiB budget (a fake cgroup of
    64 MiB) and rings of 8: nobody gets two (then at most half of what is left to users), uid
    1 ("daemon"), who has nothing yet, gets one, its second is refused naming the fair share,
    and root still gets its pipeline (an eighth of --memory is kept for root and the config dir)."""
    root = fake_cgroup(tmp, "cgroup-fair", 64 << 20) if os.geteuid() == 0 else None
    if not root:
        skip_case("fair shares: two users and root", "[nonroot] needs root and a cgroup v2 "
                  "path to fake (setpriv to other users)")
        return
    conf = os.path.join(tmp, "conf-fair")
    os.makedirs(conf)
    specs = []
    for k in range(6):
        p = os.path.join(tmp, "fair-%d.json" % k)
        with open(p, "w") as f:  # endless: they never end, so nothing is dropped
            json.dump(spec(data, name="fair%d" % k, epochs=None, batch=20 + k), f)
        os.chmod(p, 0o644)
        specs.append(p)
    # no cache: what running pipelines read of it is counted too (test_memory.py)
    d = Daemon(tmp, conf, ["--cache-memory", "0"], env={"SLUICED_TEST_CGROUP_ROOT": root})
    try:
        a = [ctl(d, "register", specs[k], user="nobody") for k in range(3)]
        b = [ctl(d, "register", specs[3 + k], user="daemon") for k in range(2)]
        r = ctl(d, "register", specs[5])
    finally:
        d.stop()
    check([x.returncode for x in a] == [0, 0, 1] and ("fair share" in a[2].stderr or
                                                      "--user-memory" in a[2].stderr),
          "fair shares: nobody gets two rings (its default --user-memory, half of the "
          "rings'), the third is refused with the figures (%s)" % a[2].stderr.strip()[-250:])
    check([x.returncode for x in b] == [0, 1] and "fair share" in b[1].stderr,
          "fair shares: a uid with nothing yet gets one, then none (%s)" %
          b[1].stderr.strip()[-250:])
    check(r.returncode == 0, "fair shares: root's pipeline still fits (%s)" %
          r.stderr.strip()[-200:])


def v1_dir(controller, probe):
    """sluiced-test's own directory in the cgroup v1 hierarchy of controller (made here), or
    None and why (no such v1 hierarchy, not writable: not root)."""
    with open("/proc/self/cgroup") as f:
        own = [x.strip().split(":", 2) for x in f]
    paths = [path for _, ctrls, path in own if controller in ctrls.split(",")]
    base = "/sys/fs/cgroup/" + controller
    if not paths or not os.path.isfile(os.path.join(base, probe)):
        return None, "[cgroup] no cgroup v1 %s hierarchy here" % controller
    d = os.path.join(base + paths[0].rstrip("/"), "sluice-test-%d" % os.getpid())
    try:
        os.mkdir(d)
    except OSError as e:
        return None, "[cgroup] cannot make a v1 %s cgroup: %s" % (controller, e)
    return d, None


def joiner(cg):
    """A preexec_fn that puts the child in cgroup cg before it execs: sluiced starts inside."""
    procs = os.path.join(cg, "cgroup.procs")

    def join():
        with open(procs, "w") as f:
            f.write("%d\n" % os.getpid())
    return join


def test_memory_cgroup_v1(tmp, data):
    """Issue 37 item 4: inside a real cgroup v1 memory cgroup of 64 MiB (made by hand, as a
    host without systemd has them), sluiced's default --memory is half of its
    memory.limit_in_bytes, said in the log, and a fifth 8 MiB ring is refused with the figures."""
    cg, why = v1_dir("memory", "memory.limit_in_bytes")
    if not cg:
        skip_case("memory (cgroup v1): the default budget from memory.limit_in_bytes", why)
        return
    try:
        with open(os.path.join(cg, "memory.limit_in_bytes"), "w") as f:
            f.write("67108864\n")
        procs = os.path.join(cg, "cgroup.procs")
        conf = os.path.join(tmp, "conf-v1")
        os.makedirs(conf)
        mark = log_mark(tmp)
        d = Daemon(tmp, conf, [], preexec_fn=joiner(cg))
        try:
            with open(procs) as f:
                inside = str(d.p.pid) in f.read().split()
            outs = []
            for k in range(5):
                p = os.path.join(tmp, "v1-%d.json" % k)
                with open(p, "w") as f:
                    json.dump(spec(data, name="v1q%d" % k, epochs=None, batch=10 + k), f)
                outs.append(ctl(d, "register", p))
        finally:
            d.stop()
        said = "\n".join(log_since(mark))
        check(inside and "memory: 32768 KiB for rings, engines and the record cache (half "
              "of the cgroup's memory.limit_in_bytes (v1), 65536 KiB)" in said,
              "memory (cgroup v1): half of a 64 MiB memory.limit_in_bytes is the budget, logged "
              "(%s)" % [x for x in said.splitlines() if "for rings" in x])
        codes = [r.returncode for r in outs]
        check(codes[:3] == [0, 0, 0] and codes[4] == 1 and
              "memory budget: " in outs[4].stderr and " of 33554432 bytes" in outs[4].stderr,
              "memory (cgroup v1): 8 MiB rings fit, less what the default record cache holds "
              "of the files they read, the fifth is refused (%s: %s)" %
              (codes, outs[4].stderr.strip()[-200:]))
        check("record cache: up to 16384 KiB of framed records of all files (half of "
              "--memory)" in said, "memory (cgroup v1): the default record cache is half of "
              "the budget, logged")
    finally:
        try:
            os.rmdir(cg)
        except OSError:
            pass


def test_cpus_cgroup_v1(tmp, data):
    """Issue 37 item 4: inside a real cgroup v1 cpu cgroup with a quota of half a core
    (cpu.cfs_quota_us 50000 of cpu.cfs_period_us 100000), sluiced's model budget is 500
    millicores and, with --workers 0, its pool one worker."""
    cg, why = v1_dir("cpu", "cpu.cfs_period_us")
    if not cg:
        skip_case("cpus (cgroup v1): the budget from cpu.cfs_quota_us", why)
        return
    try:
        with open(os.path.join(cg, "cpu.cfs_period_us"), "w") as f:
            f.write("100000\n")
        with open(os.path.join(cg, "cpu.cfs_quota_us"), "w") as f:
            f.write("50000\n")
        conf = os.path.join(tmp, "conf-cpu-v1")
        os.makedirs(conf)
        with open(os.path.join(conf, "c.json"), "w") as f:
            json.dump(spec(data, name="c1", epochs=1), f)
        d = Daemon(tmp, conf, ["--workers", "0"], preexec_fn=joiner(cg))
        try:
            r, lines = drain_json(d, "c1")
            _, flat = stats_of(d, "c1")
        finally:
            d.stop()
        check(r.returncode == 0 and sorted(ids_of(lines)) == list(range(200)) and
              flat.get("cpus_milli") == 500 and flat.get("workers") == 1,
              "cpus (cgroup v1): a quota of half a core gives 500 millicores and one worker "
              "(%s)" % {k: flat.get(k) for k in ("cpus_milli", "workers")})
    finally:
        try:
            os.rmdir(cg)
        except OSError:
            pass


def stats_of(d, name):
    """`sluicectl stats NAME --json`: the finished process and its stats ({} if not JSON)."""
    st = ctl(d, "stats", name, "--json")
    try:
        stats = json.loads(st.stdout)
        return st, stats.get("stats", stats) if isinstance(stats, dict) else {}
    except ValueError:
        return st, {}


def test_cpus(tmp, data):
    """--cpus bounds the cores sluiced takes: the model's budget (cpus_milli) and, with
    --workers 0, the parse pool (one worker per core, rounded up)."""
    conf = os.path.join(tmp, "conf-cpus")
    os.makedirs(conf)
    with open(os.path.join(conf, "c.json"), "w") as f:
        json.dump(spec(data, name="c", epochs=1), f)
    d = Daemon(tmp, conf, ["--cpus", "0.5", "--workers", "0"])
    try:
        r, lines = drain_json(d, "c")
        _, flat = stats_of(d, "c")
    finally:
        d.stop()
    check(r.returncode == 0 and sorted(ids_of(lines)) == list(range(200)),
          "--cpus 0.5: every record once (%s)" % r.stderr.strip()[-200:])
    check(flat.get("cpus_milli") == 500 and flat.get("workers") == 1,
          "--cpus 0.5: a budget of 500 millicores and one worker (%s)" % (
              {k: flat.get(k) for k in ("cpus_milli", "workers")}))
    bad = subprocess.run([os.environ["SLUICED"], "--no-config", "--cpus", "0"],
                         capture_output=True, text=True, timeout=30)
    check(bad.returncode == 2 and "not a number of cores above 0" in bad.stderr,
          "--cpus 0 is refused (%s)" % bad.stderr.strip())


def test_io_options(tmp, data):
    """--direct-io and the pread fallback: same batches, said in the stats and (once) the log."""
    conf = os.path.join(tmp, "conf-io")
    os.makedirs(conf)
    with open(os.path.join(conf, "io.json"), "w") as f:
        json.dump(spec(data, name="io", epochs=1), f)
    log = os.path.join(tmp, "sluiced.log")
    before = os.path.getsize(log) if os.path.exists(log) else 0
    d = Daemon(tmp, conf, ["--direct-io"], env={"SLUICE_IO_ENGINE": "pread"})
    try:
        r, lines = drain_json(d, "io")
        _, flat = stats_of(d, "io")
    finally:
        d.stop()
    check(r.returncode == 0 and sorted(ids_of(lines)) == list(range(200)),
          "--direct-io with the pread engine: every record once (%s)" % r.stderr.strip()[-200:])
    try:  # does this file system take O_DIRECT? (tmpfs did not before Linux 6.6)
        os.close(os.open(os.path.join(data, sorted(os.listdir(data))[0]),
                         os.O_RDONLY | os.O_DIRECT))
        fs_direct = True
    except OSError:
        fs_direct = False
    shown = {k: flat.get(k) for k in ("direct_io", "io_uring", "direct_io_bytes")}
    check(flat.get("direct_io") == 1 and flat.get("io_uring") == 0 and
          (flat.get("direct_io_bytes", 0) > 0) == fs_direct,
          "stats say direct_io 1, io_uring 0, and bytes read with O_DIRECT where the file "
          "system takes it (%s): %s" % (fs_direct, shown))
    check_stage_stats(flat, records=200, files=N_FILES, batches=20)
    with open(log) as f:
        f.seek(before)
        said = [x for x in f.read().splitlines() if "pread engine" in x]
    check(len(said) == 1 and "SLUICE_IO_ENGINE=pread" in said[0],
          "the fallback is said once in the log: %s" % said)


def test_record_cache(tmp, data):
    """--cache-memory: a second pipeline over the same files (another batch size, shuffled with
    its seed) frames them from the cache, not the files, and its batches are those of
    `sluicectl run` without one; a file that changes is read again."""
    conf = os.path.join(tmp, "conf-cache")
    os.makedirs(conf)
    d = Daemon(tmp, conf, ["--cache-memory", "16M", "--cache-uncompressed"])
    specs = [spec(data, name="c1", epochs=1, batch=10),
             spec(data, name="c2", epochs=2, batch=7, shuffle=True, seed=4,
                  num_shuffle_buffer_elements=30, num_filenames_shuffle_buffer=2,
                  num_mix_files=2)]
    paths = []
    for s in specs:
        paths.append(os.path.join(tmp, s["name"] + ".json"))
        with open(paths[-1], "w") as f:
            json.dump(s, f)
    try:
        outs, flats = [], []
        for p in paths:
            r, lines = drain_json(d, p)
            check(r.returncode == 0, "cache: drain %s (%s)" % (p, r.stderr.strip()[-200:]))
            outs.append(lines)
            flats.append(stats_of(d, os.path.basename(p)[:-5])[1])
        os.utime(os.path.join(data, "part-0.tfrecords"))  # a new mtime: not the cached file
        s3 = spec(data, name="c3", epochs=1, batch=9)
        p3 = os.path.join(tmp, "c3.json")
        with open(p3, "w") as f:
            json.dump(s3, f)
        r3, lines3 = drain_json(d, p3)
        flat3 = stats_of(d, "c3")[1]
    finally:
        d.stop()
    for p, lines in zip(paths + [p3], outs + [lines3]):
        ref = ctl(d, "run", p, "--json", "--values", "id")  # in process, no cache
        want = [(b["seq"], b["epoch"], b["rows"], [int(v) for v in b["tensors"]["id"]["values"]])
                for b in map(json.loads, ref.stdout.splitlines())]
        got = [(b["seq"], b["epoch"], b["rows"], [int(v) for v in b["values"]["id"]])
               for b in lines]
        check(ref.returncode == 0 and got == want,
              "cache: %s's batches equal sluicectl run's without a cache" % os.path.basename(p))
    check(flats[0].get("cache_level") == 3 and flats[0].get("cache_filled") == N_FILES and
          flats[0].get("cache_files") == 0,
          "cache: the first pipeline put its %d files in the cache (%s)" % (
              N_FILES, {k: v for k, v in flats[0].items() if k.startswith("cache")}))
    check(flats[1].get("cache_files") == 2 * N_FILES and flats[1].get("cache_filled") == 0,
          "cache: the second read them from it, both epochs (%s)" % (
              {k: v for k, v in flats[1].items() if k.startswith("cache")}))
    check(flat3.get("cache_files") == N_FILES - 1 and flat3.get("cache_filled") == 1 and
          flat3.get("cache_invalidations") == 1,
          "cache: a file touched since is read again, the others come from the cache (%s)" % (
              {k: v for k, v in flat3.items() if k.startswith("cache")}))


def write_big_dataset(d, n=30, floats=25600):
    """n records of an "id" and an "x" of `floats` float32 (100 KB at the default)."""
    ex_pb2, _ = common.protos()
    os.makedirs(d)
    recs = []
    for i in range(n):
        ex = ex_pb2.Example()
        ex.features.feature["id"].int64_list.value.append(i)
        ex.features.feature["x"].float_list.value.extend([float(i)] * floats)
        recs.append(ex.SerializeToString())
    common.write_tfrecord(os.path.join(d, "part-0.tfrecords"), recs)
    with open(os.path.join(d, "__manifest__.json"), "w") as f:
        json.dump({"compression": None, "allow_var_len": False, "features": [
            {"name": "id", "dtype": "int64", "shape": [], "deserialize_type": "int"},
            {"name": "x", "dtype": "float32", "shape": [floats],
             "deserialize_type": "float"}]}, f)


def test_ring_memory(tmp, data):
    """Ring memory by use (docs/ring.md, "Memory"): a 256 MiB ring serving a small stream
    commits a few MiB, as the stats say; a ring that cannot grow for a batch (growth refused
    here with SLUICED_TEST_COMMIT_LIMIT, as a full memory cgroup would) fails its pipeline with
    a message naming the cause, and the daemon goes on (no SIGBUS)."""
    conf = os.path.join(tmp, "conf-mem")
    os.makedirs(conf)
    sp = os.path.join(tmp, "small.json")
    with open(sp, "w") as f:
        json.dump(spec(data, name="small", epochs=3), f)
    d = Daemon(tmp, conf, ["--pipeline-memory", "256M"])
    try:
        r, lines = drain_json(d, sp)
        _, flat = stats_of(d, "small")
    finally:
        rc = d.stop()
    check(r.returncode == 0 and sorted(ids_of(lines)) == sorted(list(range(200)) * 3),
          "ring memory: a 256 MiB ring serves 3 epochs (%s)" % r.stderr.strip()[-200:])
    shown = {k: flat.get(k) for k in ("ring_bytes", "ring_bytes_committed",
                                      "ring_commit_failures")}
    # --pipeline-memory 256M is the pipeline's: its engine's fixed needs, then its ring
    check(128 << 20 <= flat.get("ring_bytes", 0) <= 256 << 20 and
          0 < flat.get("ring_bytes_committed", 0) <= 4 << 20 and
          flat.get("ring_commit_failures") == 0,
          "ring memory: its stats show a few MiB committed of 256 MiB: %s" % shown)
    check(rc == 0, "ring memory: sluiced stops cleanly (exit %s)" % rc)

    big = os.path.join(tmp, "big")
    write_big_dataset(big)
    sp = os.path.join(tmp, "big.json")
    with open(sp, "w") as f:
        json.dump(spec(big, name="big", batch=30), f)  # one batch of 3 MB
    d = Daemon(tmp, conf, ["--pipeline-memory", "64M", "--ring-commit", "1M"],
               env={"SLUICED_TEST_COMMIT_LIMIT": "2M"})
    try:
        r, lines = drain_json(d, sp)
        listed = ctl(d, "list")
        alive = d.p.poll() is None
    finally:
        rc = d.stop()
    check(r.returncode != 0 and "could not grow past" in r.stderr and
          "No space left on device" in r.stderr,
          "ring memory: a growth the host refuses fails the pipeline, saying why (%s)" %
          r.stderr.strip()[-300:])
    check(alive and rc == 0 and "big" in listed.stdout,
          "ring memory: ... and the daemon goes on (exit %s; list: %s)" % (
              rc, listed.stdout.strip().replace("\n", " | ")[:200]))


STAGES = ("files", "read", "frame", "window", "interleave", "shuffle", "parse", "decode",
          "deliver")
COUNTERS = ("elems_in", "elems_out", "bytes_in", "bytes_out", "completions", "cpu_ns",
            "wait_up_ns", "wait_down_ns", "buffered", "capacity", "dropped")


def check_stage_stats(flat, records, files, batches):
    """Every stage's counters are in the stats (stage.NAME.COUNTER) and agree with the stream."""
    missing = ["stage.%s.%s" % (s, c) for s in STAGES for c in COUNTERS
               if "stage.%s.%s" % (s, c) not in flat]
    check(not missing, "stats: every counter of every stage (missing: %s)" % missing[:5])

    def g(s, c):
        return flat.get("stage.%s.%s" % (s, c))
    got = {"files": g("files", "elems_out"), "opened": g("read", "elems_in"),
           "records": g("frame", "elems_out"), "rows": g("parse", "elems_out"),
           "batches": g("deliver", "elems_in"), "parse_cpu": g("parse", "cpu_ns"),
           "read_bytes": g("read", "bytes_out"), "record_bytes": g("frame", "bytes_out")}
    check(got["files"] == files and got["opened"] == files and got["records"] == records and
          got["rows"] == records and got["batches"] == batches and
          got["records"] == flat.get("records") and got["parse_cpu"] > 0 and
          got["read_bytes"] >= got["record_bytes"] == flat.get("record_bytes") > 0,
          "stats per stage: %d files read, %d records framed, %d rows parsed into %d batches, "
          "parse CPU > 0: %s" % (files, records, records, batches, got))
    nested = flat.get("stages", {})
    check(sorted(nested) == sorted(STAGES) and
          all(nested[s][c] == flat["stage.%s.%s" % (s, c)] for s in STAGES for c in COUNTERS),
          "stats --json: \"stages\" nests the same counters by stage (%s)" % sorted(nested))


def write_one_file(d, contents, compression=None):
    """A dataset of one file of these bytes, and its manifest (an int64 "id" per record)."""
    os.makedirs(d)
    with open(os.path.join(d, "part-0.tfrecords"), "wb") as f:
        f.write(contents)
    with open(os.path.join(d, "__manifest__.json"), "w") as f:
        json.dump({"compression": compression, "allow_var_len": False, "features": [
            {"name": "id", "dtype": "int64", "shape": [], "deserialize_type": "int"}]}, f)


def bad_inputs():
    """(name, compression, the file's bytes, what its error says): files a pipeline fails on
    under on_corrupt "fail"; most fail at their first record, before the engine's first batch."""
    ex_pb2, _ = common.protos()
    good = []
    for i in range(5):
        ex = ex_pb2.Example()
        ex.features.feature["id"].int64_list.value.append(i)
        good.append(common.frame(ex.SerializeToString()))
    head = b"".join(good)
    huge = struct.pack("<Q", 3000000000)  # over the 256 MiB limit, its length CRC right
    huge += struct.pack("<I", common.masked_crc(huge)) + b"\0" * 1000
    bad_len_crc = bytearray(good[0])
    bad_len_crc[8] ^= 0xff
    bad_data_crc = bytearray(good[0])
    bad_data_crc[-1] ^= 0xff
    gz = lambda b: common.compress(b, "gzip")  # noqa: E731
    return [
        ("huge-gzip", "gzip", gz(huge), "length 3000000000 exceeds the limit"),
        ("huge", None, huge, "length 3000000000 exceeds the limit"),
        ("huge-late", "gzip", gz(head + huge), "length 3000000000 exceeds the limit"),
        ("truncated", None, good[0][:-6], "runs past the end of the file"),
        ("truncated-gzip", "gzip", gz(head)[:-30], "truncated"),
        ("length-crc", None, bytes(bad_len_crc), "header CRC mismatch"),
        ("data-crc", "gzip", gz(bytes(bad_data_crc)), "data CRC mismatch"),
        ("undecodable", None, common.frame(b"\xff" * 6),  # a tag varint of 6 bytes
         "tag varint longer than 5 bytes"),
    ]


def reader_loadable():
    """Whether libsluice.so loads into this python (a sanitizer build's does not)."""
    lib = os.path.join(os.environ["SLUICE_BUILD_DIR"], "libclient", "libsluice.so")
    return os.path.exists(lib) and subprocess.run(
        [sys.executable, "-c", "import ctypes, sys; ctypes.CDLL(sys.argv[1])", lib],
        capture_output=True).returncode == 0


PY_READER = r"""
import sys
sys.path.insert(0, sys.argv[1])
import sluice
try:
    n = sum(1 for _ in sluice.attach(spec=sys.argv[3], socket=sys.argv[2]))
    print("END after %d batches" % n)
except sluice.SluiceError as e:
    print("ERROR %s" % e.strerror)
"""


def test_errors_reach_readers(tmp, data):
    """Issue 19: every error that fails a pipeline under the daemon reaches each of its readers
    (sluicectl drain, over libsluice's sluice_next, and Python's sluice) with the message
    `sluicectl run` gives, the pipeline is listed as failed, and the daemon and its other
    pipelines go on. A first record that fails came before the engine's first batch: the
    engine used to end before its ring was made, and nobody was told (the reader hung, list
    said running). Rings allocated whole at their start (--ring-commit all) take longer to make
    than such an engine takes to fail: that race was lost every time."""
    conf = os.path.join(tmp, "conf-errors")
    os.makedirs(conf)
    d = Daemon(tmp, conf, ["--pipeline-memory", "16M", "--ring-commit", "all"])
    py = reader_loadable()
    if not py:
        skip_case("errors: the Python readers of failed pipelines",
                  "[sanitizer] libsluice.so cannot be loaded into this python")
    pkg = os.path.join(os.environ.get("SLUICE_SRC_DIR", os.path.join(HERE, "..", "..")),
                       "libclient", "python")
    names = []
    try:
        for name, comp, contents, cause in bad_inputs():
            data_dir = os.path.join(tmp, "bad-" + name)
            write_one_file(data_dir, contents, comp)
            paths = []
            for who, seed in (("c", 1), ("py", 2)):  # a pipeline each: each starts its own
                s = spec(data_dir, name="bad-%s-%s" % (name, who), batch=2, seed=seed,
                         on_corrupt="fail", primary_features=[{"from_name": "id",
                                                               "to_name": "id"}])
                paths.append(os.path.join(tmp, "bad-%s-%s.json" % (name, who)))
                with open(paths[-1], "w") as f:
                    json.dump(s, f)
                if who == "c" or py:  # the Python one runs only where it can load
                    names.append(s["name"])
            ref = ctl(d, "run", paths[0])
            want = ref.stderr.strip().split("sluicectl: run: ", 1)[-1]
            check(ref.returncode == 1 and data_dir in want and cause in want,
                  "%s: sluicectl run fails naming the file and the cause (%s)" % (name, want))
            try:
                r = ctl(d, "drain", paths[0], timeout=30)
                got, rc = r.stderr.strip(), r.returncode
            except subprocess.TimeoutExpired:
                got, rc = "no error within 30 s", None
            check(rc == 1 and want in got,
                  "%s: sluicectl drain gets the pipeline's error, as run gives it (%s)" % (
                      name, got[-300:]))
            if py:
                try:
                    r = subprocess.run([sys.executable, "-c", PY_READER, pkg, d.sock, paths[1]],
                                       capture_output=True, text=True, timeout=30)
                    got = (r.stdout + r.stderr).strip()
                except subprocess.TimeoutExpired:
                    got = "no error within 30 s"
                want_py = want.replace("bad-%s-c" % name, "bad-%s-py" % name)
                check(got.startswith("ERROR ") and want_py in got,
                      "%s: a Python reader gets it too (%s)" % (name, got[-300:]))
        listed = ctl(d, "list", timeout=30)
        rows = {ln.split()[0]: ln.split()[1] for ln in listed.stdout.splitlines()[1:]
                if len(ln.split()) > 1}
        check(listed.returncode == 0 and all(rows.get(n) == "failed" for n in names),
              "every pipeline that failed is listed as failed: %s" % {
                  n: rows.get(n) for n in names if rows.get(n) != "failed"})
        hp = os.path.join(tmp, "healthy.json")
        with open(hp, "w") as f:
            json.dump(spec(data, name="healthy", epochs=1, seed=77), f)
        r, lines = drain_json(d, hp)
        check(r.returncode == 0 and sorted(ids_of(lines)) == list(range(N_FILES * PER_FILE)),
              "... and a healthy pipeline on the same daemon delivers every record (%s)" %
              r.stderr.strip()[-200:])
    finally:
        rc = d.stop()
    check(rc == 0, "sluiced with failed pipelines stops cleanly (exit %s)" % rc)


def open_idle(path, n):
    """n connections to the socket that never say a word."""
    conns = []
    for _ in range(n):
        s = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        s.connect(path)
        conns.append(s)
    return conns


def log_since(before):
    with open(os.path.join(before[0], "sluiced.log")) as f:
        f.seek(before[1])
        return f.read().splitlines()


def log_mark(tmp):
    log = os.path.join(tmp, "sluiced.log")
    return (tmp, os.path.getsize(log) if os.path.exists(log) else 0)


def test_fd_limit(tmp):
    """Issue 19, item 4: at its file-descriptor limit (64 here, 100 idle connections) sluiced
    used to spin on the readable listening socket (a core's worth of CPU, nothing logged) and
    never answer a new client. Now it takes each new connection: the connection silent longest
    (a second or more) makes room for it, else it is closed at once with the reason; the log
    says so once. `sluicectl list` is polled until it answers (its first tries come before any
    idle connection has been silent a second: refused, saying why). Not spinning is a count:
    the times accepting met the limit (its exit line) are at most two per connection that
    came (one that took or refused it, one that found the queue empty), where a spinning loop
    meets it at every turn."""
    conf = os.path.join(tmp, "conf-fds")
    os.makedirs(conf)
    mark = log_mark(tmp)
    d = Daemon(tmp, conf, preexec_fn=lambda: resource.setrlimit(resource.RLIMIT_NOFILE,
                                                                  (64, 64)))
    conns = []
    try:
        t0 = time.monotonic()
        conns = open_idle(d.sock, 100)
        refusals, answered, why, tries = [], False, "", 0
        while not answered and time.monotonic() - t0 < 60:  # the condition itself, polled
            tries += 1
            try:
                r = ctl(d, "list", timeout=10)
            except subprocess.TimeoutExpired:
                why = "no answer within 10 s"
                break
            answered, why = r.returncode == 0, r.stderr.strip()
            if not answered:
                refusals.append(why)
                time.sleep(0.05)  # the workload: a client that retries a refused connection
        wall = time.monotonic() - t0
        alive = d.p.poll() is None
    finally:
        for c in conns:
            c.close()
        rc = d.stop()
    check(answered,
          "at its fd limit with 100 idle connections, sluiced answers sluicectl list (after "
          "%.1f s, %d refusals; %s)" % (wall, len(refusals), why[-200:]))
    check(all("at its limit of 64 open files" in x for x in refusals),
          "a connection refused at the limit is told why (%s)" % refusals[:1])
    log = log_since(mark)
    met = [int(x.split(" open files ")[1].split()[0]) for x in log
           if "accepting met the limit of open files " in x]
    came = len(conns) + tries  # each sluicectl list is one connection
    check(len(met) == 1 and 0 < met[0] <= 2 * came,
          "... without spinning: accepting met the limit %s times for %d connections" % (
              met, came))
    said = [x for x in log if "limit of 64 open files" in x]
    check(len(said) == 1, "the limit is logged once: %s" % said)
    check(alive and rc == 0, "... and sluiced goes on, and stops cleanly (exit %s)" % rc)


HOLDER = r"""
import socket, sys
conns = []
for _ in range(int(sys.argv[2])):
    s = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    s.connect(sys.argv[1])
    conns.append(s)
print("OPEN", len(conns), flush=True)
sys.stdin.readline()
"""


def test_user_connections(tmp):
    """--user-connections: a uid other than root holds at most N connections; one more is
    refused with a message that says so, root is not counted, and the uid connects again once
    its connections are gone."""
    if os.geteuid() != 0:
        skip_case("--user-connections", "[root] needs root to run clients as nobody")
        return
    pw = pwd.getpwnam("nobody")
    conf = os.path.join(tmp, "conf-cap")
    os.makedirs(conf)
    os.chmod(tmp, 0o755)
    mark = log_mark(tmp)
    d = Daemon(tmp, conf, ["--user-connections", "3"])
    holder = None
    try:
        # three connections of nobody's, taken before the fourth (the listen queue is FIFO)
        holder = subprocess.Popen(["setpriv", "--reuid", str(pw.pw_uid), "--regid",
                                   str(pw.pw_gid), "--clear-groups", sys.executable, "-c",
                                   HOLDER, d.sock, "3"], stdin=subprocess.PIPE,
                                  stdout=subprocess.PIPE, text=True)
        line = holder.stdout.readline()
        check(line.startswith("OPEN 3"), "cap: nobody holds 3 connections (%r)" % line)
        over = ctl(d, "list", user="nobody")
        root = ctl(d, "list")
        holder.stdin.write("\n")
        holder.stdin.close()
        holder.wait(30)
        t0 = time.monotonic()
        while True:  # its connections are closed when the daemon has seen them go
            again = ctl(d, "list", user="nobody")
            if again.returncode == 0 or time.monotonic() - t0 > 20:
                break
            time.sleep(0.05)  # polls the condition itself
    finally:
        if holder and holder.poll() is None:
            holder.kill()
            holder.wait()
        rc = d.stop()
    want = "uid %d has its limit of 3 connections to sluiced (--user-connections)" % pw.pw_uid
    check(over.returncode == 1 and want in over.stderr,
          "cap: nobody's fourth connection is refused, saying why (%s)" % over.stderr.strip())
    check(root.returncode == 0, "cap: root's connections are not counted (%s)" %
          root.stderr.strip())
    check(again.returncode == 0, "cap: once its connections are gone, nobody connects again "
          "(%s)" % again.stderr.strip())
    said = [x for x in log_since(mark) if "--user-connections" in x]
    check(len(said) == 1, "cap: the log says it (once): %s" % said)
    check(rc == 0, "cap: sluiced stops cleanly (exit %s)" % rc)


IDLE_READER = r"""
import sys
sys.path.insert(0, sys.argv[1])
import sluice
r = sluice.attach(sys.argv[3], socket=sys.argv[2])
print("ATTACHED", flush=True)
sys.stdin.readline()
print("ROWS", sum(len(b["id"]) for b in r), flush=True)
"""


def test_idle_timeout(tmp, data):
    """--idle-timeout: a connection that never sends a request is closed (it gets a SHUTDOWN
    notice that says why, then EOF), while a reader attached for longer, silent on the socket
    as readers are, stays attached and reads on."""
    conf = os.path.join(tmp, "conf-idle")
    os.makedirs(conf)
    with open(os.path.join(conf, "idle.json"), "w") as f:
        json.dump(spec(data, name="idle", epochs=1), f)
    mark = log_mark(tmp)
    d = Daemon(tmp, conf, ["--idle-timeout", "1"])
    reader = None
    try:
        if reader_loadable():
            pkg = os.path.join(os.environ.get("SLUICE_SRC_DIR", os.path.join(HERE, "..", "..")),
                               "libclient", "python")
            reader = subprocess.Popen([sys.executable, "-c", IDLE_READER, pkg, d.sock, "idle"],
                                      stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
            line = reader.stdout.readline()
            check(line.startswith("ATTACHED"), "idle: a reader attaches (%r)" % line)
        else:
            skip_case("idle: the attached reader",
                      "[sanitizer] libsluice.so cannot be loaded into this python")
        s = open_idle(d.sock, 1)[0]
        s.settimeout(30)
        got, closed = b"", False
        try:
            while True:  # the notice, then EOF
                b = s.recv(4096)
                if not b:
                    closed = True
                    break
                got += b
        except ConnectionResetError:
            closed = True
        except socket.timeout:
            pass
        s.close()
        check(closed and b"--idle-timeout" in got,
              "idle: a connection that never speaks is closed after --idle-timeout, told why "
              "(%r)" % got[-120:])
        if reader:
            _, flat = stats_of(d, "idle")
            check(flat.get("readers") == 1, "idle: the reader silent for longer is still "
                  "attached (readers %s)" % flat.get("readers"))
            reader.stdin.write("\n")
            reader.stdin.flush()
            out = reader.communicate(timeout=60)[0]
            check(reader.returncode == 0 and "ROWS %d" % (N_FILES * PER_FILE) in out,
                  "idle: ... and reads every record (%s)" % out.strip()[-200:])
    finally:
        if reader and reader.poll() is None:
            reader.kill()
            reader.wait()
        rc = d.stop()
    said = [x for x in log_since(mark) if "--idle-timeout" in x]
    check(len(said) == 1, "idle: the log says it: %s" % said)
    check(rc == 0, "idle: sluiced stops cleanly (exit %s)" % rc)


def test_command_line(tmp):
    """sluiced's options: --version, --help, an unknown option, --opt=VALUE."""
    def run(*a):
        return subprocess.run([os.environ["SLUICED"]] + list(a), capture_output=True, text=True,
                              timeout=30)
    r = run("--version")
    check(r.returncode == 0 and r.stdout.startswith("sluiced ") and len(r.stdout.split()) == 2,
          "sluiced --version prints its version and exits 0 (%r)" % r.stdout)
    r = run("--help")
    check(r.returncode == 0 and "usage: sluiced" in r.stdout and "--direct-io" in r.stdout,
          "sluiced --help prints the usage and exits 0")
    r = run("--bogus")
    check(r.returncode == 2 and "--bogus" in r.stderr and "--help" in r.stderr,
          "an unknown option: exit 2, named (%r)" % r.stderr.strip())
    r = run("--workers")
    check(r.returncode == 2 and "--workers needs a value" in r.stderr,
          "an option without its value: exit 2, named (%r)" % r.stderr.strip())
    conf = os.path.join(tmp, "conf-cli")
    os.makedirs(conf)
    d = Daemon(tmp, conf, ["--ring-slots=32", "--memory=64M"])
    try:
        r = ctl(d, "list")
    finally:
        rc = d.stop()
    check(d.ready and r.returncode == 0 and rc == 0,
          "--opt=VALUE works as --opt VALUE (ready %s, list exit %s, stop %s)" %
          (d.ready, r.returncode, rc))


def drain_pausing(d, target, pause, *args):
    """`sluicectl drain TARGET --json --values id` that stops after `pause` batches (it says
    "paused" on stderr) until told to go on (go_on)."""
    p = subprocess.Popen([os.environ["SLUICECTL"], "--socket", d.sock, "drain", target, "--json",
                          "--values", "id", "--pause-after", str(pause)] + list(args),
                         stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                         text=True)
    p.pause = pause
    return p


def wait_paused(p):
    """Wait until p says it paused (it is provably mid-stream); whether it did."""
    return p.stderr.readline().startswith("paused: batches=%d" % p.pause)


def drain_paused(d, target, pause, *args):
    p = drain_pausing(d, target, pause, *args)
    return p, wait_paused(p)


def go_on(p, timeout=90):
    """Let a paused drain go on; its batches ({seq, values, redelivered}) and stderr."""
    return go_on_all([p], timeout)[0]


def go_on_all(ps, timeout=90):
    """go_on for readers that wait for each other (rank): all of them told first."""
    for p in ps:
        p.stdin.write("go\n")
        p.stdin.flush()
    outs = [p.communicate(timeout=timeout) for p in ps]
    return [([json.loads(x) for x in out.splitlines() if x.strip()], err) for out, err in outs]


def reference(tmp, sp, n=None):
    """The uninterrupted run of spec file sp in process: [(seq, ids)]."""
    r = subprocess.run([os.environ["SLUICECTL"], "run", sp, "--json", "--values", "id"] +
                       (["--batches", str(n)] if n else []),
                       capture_output=True, text=True, timeout=120)
    return [(b["seq"], b["tensors"]["id"]["values"]) for b in map(json.loads, r.stdout.splitlines())]


def got_of(lines):
    return [(b["seq"], b["values"]["id"]) for b in lines]


def log_text(tmp):
    with open(os.path.join(tmp, "sluiced.log")) as f:
        return f.read()


# A small ring (8 batches) so that a reader mid-stream cannot finish from what the killed
# daemon's ring already held: it must re-attach to the new daemon.
RESTART_OPTS = ["--ring-slots", "8"]


def test_restart(tmp, conf):
    """Issue 19 item 6: kill -9 of sluiced while a broadcast reader is mid-stream, restart:
    the reader resumes exactly (no batch twice, none missing, compared with an uninterrupted
    run), from the position the daemon kept in its state directory."""
    sd = os.path.join(tmp, "state")
    want = reference(tmp, os.path.join(conf, "forever.json"), 60)
    d = Daemon(tmp, conf, RESTART_OPTS + ["--state-dir", sd])
    before = len(log_text(tmp))
    p, paused = drain_paused(d, "forever", 25, "--batches", "60")
    d.stop(signal.SIGKILL)
    d2 = Daemon(tmp, conf, RESTART_OPTS + ["--state-dir", sd])
    lines, err = go_on(p)
    log = log_text(tmp)[before:]
    check(paused and p.returncode == 0 and "resumed from the position kept for forever" in log,
          "daemon killed (-9) with a reader at batch 25 of 60, restarted: the reader re-attached "
          "and resumed from the kept position (exit %s: %s)" % (p.returncode, err.strip()[-300:]))
    check(len(want) == 60 and got_of(lines) == want,
          "restart: the broadcast reader's 60 batches are exactly the uninterrupted run's (got "
          "seqs %s)" % [b["seq"] for b in lines][:70])
    check(not any(b.get("redelivered") for b in lines), "restart: nothing marked re-delivered")
    # a reader that waits 2 s for sluiced to come back (SLUICE_REATTACH_S; default 60)
    q = subprocess.Popen([os.environ["SLUICECTL"], "--socket", d2.sock, "drain", "forever"],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                         env=dict(os.environ, SLUICE_REATTACH_S="2"))
    for _ in range(600):  # until the reader has taken a batch (polls the condition itself)
        st, flat = stats_of(d2, "forever")
        taken = [v for k, v in flat.items() if k.startswith("reader.") and k.endswith(".taken")]
        if taken and max(taken) > 0:
            break
    ok = st.returncode == 0 and flat.get("batches_published", 0) > 0 and bool(taken) and \
        max(taken) > 0 and any(k.endswith(".wait_ns") for k in flat) and \
        flat.get("io_uring") in (0, 1) and flat.get("direct_io") == 0
    check(ok, "stats: per pipeline and per reader (batches taken, time waited, lag): %s" %
          st.stdout.strip()[:300])
    rc = d2.stop(signal.SIGTERM)
    _, qerr = q.communicate(timeout=60)
    check(rc == 0 and not os.path.exists(d2.sock),
          "SIGTERM: sluiced exits 0 and unlinks its socket (rc %s)" % rc)
    check(q.returncode != 0, "SIGTERM: an attached reader is told (exit %s: %s)" % (
        q.returncode, qerr.strip()[-200:]))


def restart_conf(tmp, data, name, **args):
    conf = os.path.join(tmp, "conf-" + name)
    os.makedirs(conf, exist_ok=True)
    sp = os.path.join(conf, name + ".json")
    with open(sp, "w") as f:
        json.dump(spec(data, name=name, epochs=3, shuffle=True, seed=3,
                       num_shuffle_buffer_elements=30, num_filenames_shuffle_buffer=2,
                       num_mix_files=2, **args), f)  # 60 batches
    return conf, sp


def test_restart_rank(tmp, data):
    """Two rank readers (index 0 and 1 of 2), sluiced killed with both mid-stream: after the
    restart each gets exactly its batches (k mod 2), none twice, none missing."""
    conf, sp = restart_conf(tmp, data, "rk")
    sd = os.path.join(tmp, "state-rk")
    want = reference(tmp, sp)
    d = Daemon(tmp, conf, RESTART_OPTS + ["--state-dir", sd])
    ps = [drain_pausing(d, "rk", 10, "--mode", "rank", "--index", str(i), "--count", "2")
          for i in range(2)]  # each waits for the other's batches to pass: both, then wait
    ps = [(p, wait_paused(p)) for p in ps]
    d.stop(signal.SIGKILL)
    d2 = Daemon(tmp, conf, RESTART_OPTS + ["--state-dir", sd])
    outs = go_on_all([p for p, _ in ps])
    rc = d2.stop()
    for i, ((p, paused), (lines, err)) in enumerate(zip(ps, outs)):
        check(paused and p.returncode == 0 and got_of(lines) == want[i::2] and
              not any(b.get("redelivered") for b in lines),
              "restart: rank %d of 2 resumes exactly: its %d batches, as uninterrupted (got "
              "%s; %s)" % (i, len(want[i::2]), [b["seq"] for b in lines], err.strip()[-200:]))
    check(rc == 0, "restart (rank): sluiced stops cleanly (exit %s)" % rc)


def test_restart_split(tmp, data):
    """Two split readers of one group, sluiced killed with both mid-stream: after the restart
    every batch reached the group at least once, each as the uninterrupted run has it, and a
    batch that came twice is marked re-delivered."""
    conf, sp = restart_conf(tmp, data, "sp")
    sd = os.path.join(tmp, "state-sp")
    want = dict(reference(tmp, sp))
    d = Daemon(tmp, conf, RESTART_OPTS + ["--state-dir", sd])
    ps = [drain_pausing(d, "sp", 10, "--mode", "split", "--group", "g") for _ in range(2)]
    ps = [(p, wait_paused(p)) for p in ps]
    d.stop(signal.SIGKILL)
    d2 = Daemon(tmp, conf, RESTART_OPTS + ["--state-dir", sd])
    outs = go_on_all([p for p, _ in ps])
    rc = d2.stop()
    batches = [b for lines, _ in outs for b in lines]
    unmarked = [b["seq"] for b in batches if not b.get("redelivered")]
    ok = all(paused and p.returncode == 0 for p, paused in ps)
    check(ok and set(b["seq"] for b in batches) == set(want),
          "restart: the split group got every batch at least once (%d of %d; %s)" % (
              len(set(b["seq"] for b in batches)), len(want),
              " | ".join(e.strip()[-150:] for _, e in outs)))
    check(all(want.get(b["seq"]) == b["values"]["id"] for b in batches),
          "restart: each batch the split readers got is the uninterrupted run's")
    check(len(unmarked) == len(set(unmarked)) and len(batches) > len(set(unmarked)),
          "restart: a batch the split group got twice is marked re-delivered (%d batches, %d "
          "marked)" % (len(batches), len(batches) - len(unmarked)))
    check(rc == 0, "restart (split): sluiced stops cleanly (exit %s)" % rc)


def test_restart_sloppy(tmp, data):
    """A sloppy pipeline (its order is not the spec's): after kill -9 and a restart the
    broadcast reader gets every record of every epoch at least once, and a record it got twice
    came again in a batch marked re-delivered."""
    conf, sp = restart_conf(tmp, data, "sl", sloppy_interleave=True)
    sd = os.path.join(tmp, "state-sl")
    d = Daemon(tmp, conf, RESTART_OPTS + ["--state-dir", sd])
    p, paused = drain_paused(d, "sl", 25)
    d.stop(signal.SIGKILL)
    d2 = Daemon(tmp, conf, RESTART_OPTS + ["--state-dir", sd])
    lines, err = go_on(p)
    rc = d2.stop()
    by_epoch = {}
    for b in lines:
        by_epoch.setdefault(b["epoch"], []).append(b)
    every = all(sorted(set(i for b in bs for i in b["values"]["id"])) == list(range(200))
                for bs in by_epoch.values()) and sorted(by_epoch) == [0, 1, 2]
    once = all(len(ids) == len(set(ids)) for ids in (
        [i for b in bs if not b.get("redelivered") for i in b["values"]["id"]]
        for bs in by_epoch.values()))
    marked = sum(1 for b in lines if b.get("redelivered"))
    check(paused and p.returncode == 0 and every,
          "restart (sloppy): every record of the 3 epochs at least once (%d batches; %s)" % (
              len(lines), err.strip()[-200:]))
    check(once and marked > 0, "restart (sloppy): records that came twice came again in "
          "batches marked re-delivered (%d marked)" % marked)
    check(rc == 0, "restart (sloppy): sluiced stops cleanly (exit %s)" % rc)


def test_restart_registered(tmp, data):
    """A pipeline a user registered (not the config dir's) is gone with the killed daemon: a
    reader by name resumes all the same, exactly, from the pipeline made again from its kept
    record."""
    _, sp = restart_conf(tmp, data, "regr")
    conf = os.path.join(tmp, "conf-regr-empty")
    os.makedirs(conf, exist_ok=True)
    sd = os.path.join(tmp, "state-regr")
    want = reference(tmp, sp)
    d = Daemon(tmp, conf, RESTART_OPTS + ["--state-dir", sd])
    reg = ctl(d, "register", sp)
    p, paused = drain_paused(d, "regr", 20)
    d.stop(signal.SIGKILL)
    d2 = Daemon(tmp, conf, RESTART_OPTS + ["--state-dir", sd])
    lines, err = go_on(p)
    rc = d2.stop()
    check(reg.returncode == 0 and paused and p.returncode == 0 and got_of(lines) == want and
          rc == 0 and "made again from its kept record" in log_text(tmp),
          "restart: a reader of a registered pipeline resumes exactly by name (%d of %d "
          "batches; %s)" % (len(lines), len(want), (reg.stderr + err).strip()[-300:]))


def test_restart_crash_loop(tmp, data):
    """sluiced killed 11 times in a row: the state directory keeps the newest 8 positions of
    its config-dir pipeline (and this run's), not one more file per start."""
    conf, sp = restart_conf(tmp, data, "loop")
    sd = os.path.join(tmp, "state-loop")
    counts = []
    for _ in range(11):
        before = set(os.listdir(sd)) if os.path.isdir(sd) else set()
        d = Daemon(tmp, conf, RESTART_OPTS + ["--state-dir", sd])
        for _ in range(2000):  # until this run's first batch wrote its record
            now = set(f for f in os.listdir(sd) if f.endswith(".pos"))
            if now - before:
                break
            time.sleep(0.005)  # polls the condition itself
        counts.append(len(now))
        d.stop(signal.SIGKILL)
    check(counts[:9] == list(range(1, 10)) and max(counts) == 9,
          "crash loop: at most the newest 8 earlier positions of a pipeline and this run's "
          "are kept (files after each start: %s)" % counts)


def test_restart_position_lost(tmp, data):
    """Where resuming is impossible the reader gets an error, never its data again from the
    start: the state directory removed while sluiced was down; sluiced without one; the
    dataset changed (a file's mtime) while it was down, for a reader by name and by spec."""
    for case in ("removed", "none", "changed-name", "changed-spec"):
        own = os.path.join(tmp, "data-lost-" + case)  # a copy: its mtime changes
        subprocess.run(["cp", "-a", data, own], check=True)
        conf, sp = restart_conf(tmp, own, "lost-" + case)
        sd = os.path.join(tmp, "state-lost-" + case)
        opts = RESTART_OPTS + (["--state-dir", sd] if case != "none" else [])
        d = Daemon(tmp, conf, opts)
        p, paused = drain_paused(d, sp if case == "changed-spec" else "lost-" + case, 20)
        d.stop(signal.SIGKILL)
        if case == "removed":
            subprocess.run(["rm", "-rf", sd], check=True)
        if case.startswith("changed"):
            f = os.path.join(own, "part-0.tfrecords")
            st = os.stat(f)
            os.utime(f, ns=(st.st_atime_ns, st.st_mtime_ns + 10**9))
        d2 = Daemon(tmp, conf, opts)
        lines, err = go_on(p)
        rc = d2.stop()
        seqs = [b["seq"] for b in lines]
        check(paused and p.returncode == 1 and "cannot resume where it was" in err and
              seqs == list(range(len(seqs))) and 20 <= len(seqs) < 60 and rc == 0,
              "restart (%s): the reader fails with a clear error after %d batches, "
              "none read again (exit %s: %s)" % (case, len(seqs), p.returncode,
                                                  err.strip()[-300:]))


def test_state_resume(tmp, data):
    """A reader saves its position; after a daemon restart it resumes there exactly."""
    conf = os.path.join(tmp, "conf-empty")
    os.makedirs(conf, exist_ok=True)
    sp = os.path.join(tmp, "resume.json")
    with open(sp, "w") as f:
        json.dump(spec(data, name="resume", epochs=2, shuffle=True, seed=5,
                       num_shuffle_buffer_elements=30, num_filenames_shuffle_buffer=2,
                       num_mix_files=2), f)
    st = os.path.join(tmp, "reader.state")
    runs = []
    for extra in ([], ["--batches", "13", "--state-out", st], ["--state-in", st]):
        d = Daemon(tmp, conf)
        r, lines = drain_json(d, sp, *extra)
        runs.append((r, lines))
        d.stop()
    (r0, full), (r1, head), (r2, tail) = runs
    ok = r0.returncode == 0 and r1.returncode == 0 and r2.returncode == 0
    check(ok and len(full) == 40 and head == full[:13],
          "state: the first 13 batches, and the position saved (%s)" % (
              (r1.stderr + r2.stderr).strip()[:200]))
    check(ok and tail == full[13:], "state: after a restart the reader resumes at batch 13 "
          "exactly (%d batches, first seq %s)" % (len(tail), tail[0]["seq"] if tail else None))


def test_resume_by_name(tmp, data):
    """A reader resumes by name while the shared pipeline is elsewhere: it gets a private
    pipeline started at its saved position (exactly the batches that follow), and the private
    pipeline goes when the reader does; the shared one is not moved."""
    conf = os.path.join(tmp, "conf-res")
    os.makedirs(conf, exist_ok=True)
    sp = os.path.join(conf, "res.json")
    with open(sp, "w") as f:
        json.dump(spec(data, name="res", epochs=4, shuffle=True, seed=5,
                       num_shuffle_buffer_elements=30, num_filenames_shuffle_buffer=2,
                       num_mix_files=2), f)  # 80 batches: more than the ring's 64 slots
    ref = subprocess.run([os.environ["SLUICECTL"], "run", sp, "--json", "--values", "id"],
                         capture_output=True, text=True, timeout=60)
    want = [(b["seq"], b["epoch"], b["tensors"]["id"]["values"])
            for b in map(json.loads, ref.stdout.splitlines())]
    got = lambda lines: [(b["seq"], b["epoch"], b["values"]["id"]) for b in lines]  # noqa: E731
    st = os.path.join(tmp, "res.state")
    d = Daemon(tmp, conf)
    try:
        r1, head = drain_json(d, "res", "--batches", "13", "--state-out", st)
        r2, more = drain_json(d, "res", "--batches", "5")  # the shared stream moves on
        r3, tail = drain_json(d, "res", "--state-in", st)
        listed = ctl(d, "list").stdout
        r4, rest = drain_json(d, "res")
    finally:
        rc = d.stop()
    check(ref.returncode == 0 and len(want) == 80, "resume by name: the reference run (%s)" %
          ref.stderr.strip()[:200])
    check(r1.returncode == 0 and got(head) == want[:13],
          "resume by name: the first 13 batches, position saved (%s)" % r1.stderr.strip()[:200])
    k = more[0]["seq"] if more else 0
    check(r2.returncode == 0 and len(more) == 5 and got(more) == want[k:k + 5],
          "resume by name: another reader reads the shared stream (seqs %s)" %
          [b["seq"] for b in more])
    check(r3.returncode == 0 and got(tail) == want[13:],
          "resume by name: the reader resumes at batch 13 exactly, not where the shared "
          "pipeline is (%d batches, first seq %s; %s)" % (
              len(tail), tail[0]["seq"] if tail else None, r3.stderr.strip()[:200]))
    with open(os.path.join(tmp, "sluiced.log")) as f:
        log = f.read()
    check("private pipeline res@" in log and "res@" not in listed,
          "resume by name: a private pipeline served it, and went with its reader (list: %s)" %
          listed.strip().replace("\n", " | ")[:300])
    check(r4.returncode == 0 and rest and got(rest) == want[rest[0]["seq"]:],
          "resume by name: the shared pipeline goes on, unmoved by the resume (from seq %s)" % (
              rest[0]["seq"] if rest else None))
    check(rc == 0, "resume by name: sluiced stops cleanly (exit %s)" % rc)


def test_relative_paths(tmp, data):
    """One rule: relative dataset paths start at the spec file's directory (register, drain,
    the config dir), never at the daemon's working directory (here "/")."""
    base = os.path.join(tmp, "rel")
    conf = os.path.join(base, "conf")
    specs = os.path.join(base, "specs")
    elsewhere = os.path.join(base, "elsewhere")
    for x in (conf, specs, elsewhere):
        os.makedirs(x)
    os.symlink(data, os.path.join(base, "data"))
    rel = os.path.relpath(os.path.join(base, "data"), conf)  # "../data"
    with open(os.path.join(conf, "relconf.json"), "w") as f:
        json.dump(spec(rel, name="relconf"), f)
    with open(os.path.join(specs, "relreg.json"), "w") as f:
        json.dump(spec("../data", name="relreg", batch=9), f)
    with open(os.path.join(specs, "reldrain.json"), "w") as f:
        json.dump(spec("../data", name="reldrain", batch=7), f)
    want = list(range(N_FILES * PER_FILE))
    d = Daemon(base, conf, cwd="/")
    try:
        _, lines = drain_json(d, "relconf")
        check(sorted(ids_of(lines)) == want,
              "a config-dir spec's relative data_dir starts at the config dir")
        r = subprocess.run([os.environ["SLUICECTL"], "--socket", d.sock, "register",
                            os.path.join("..", "specs", "relreg.json")],
                           capture_output=True, text=True, cwd=elsewhere, timeout=60)
        check(r.returncode == 0, "register: a spec with a relative data_dir, from another "
              "working directory (%s)" % r.stderr.strip())
        r, lines = drain_json(d, "relreg")
        check(sorted(ids_of(lines)) == want,
              "register: the relative data_dir starts at the spec file's directory (%s %s)" %
              (r.stderr.strip(), sorted(ids_of(lines))[:20]))
        r = subprocess.run([os.environ["SLUICECTL"], "--socket", d.sock, "drain",
                            os.path.join("..", "specs", "reldrain.json"), "--json", "--values",
                            "id"], capture_output=True, text=True, cwd=elsewhere, timeout=60)
        lines = [json.loads(x) for x in r.stdout.splitlines() if x.strip()]
        check(r.returncode == 0 and sorted(ids_of(lines)) == want,
              "drain SPEC: the relative data_dir starts at the spec file's directory (%s)" %
              r.stderr.strip())
        # the same spec text from a directory where "../data" is not the dataset: an error
        # that names the path, resolved against the client's directory (not the daemon's "/")
        with open(os.path.join(elsewhere, "moved.json"), "w") as f:
            json.dump(spec("../nodata", name="moved"), f)
        r = subprocess.run([os.environ["SLUICECTL"], "--socket", d.sock, "register",
                            "moved.json"], capture_output=True, text=True, cwd=elsewhere,
                           timeout=60)
        check(r.returncode != 0 and os.path.join(elsewhere, "../nodata") in r.stderr,
              "register: a relative path that does not exist is named as resolved (%s)" %
              r.stderr.strip())
    finally:
        rc = d.stop()
    check(rc == 0, "sluiced (cwd /) stops cleanly (exit %s)" % rc)


def main():
    common.start()
    for v in ("SLUICED", "SLUICECTL", "SLUICE_BUILD_DIR"):
        if not os.environ.get(v):
            common.skip("[env] %s is not set (run through meson test)" % v)
    r = subprocess.run([os.environ["SLUICECTL"], "drain", "--help"], capture_output=True, text=True)
    if "unknown command" in (r.stdout + r.stderr):
        common.skip("[deps] sluicectl drain is not built")
    common.protos()
    with tempfile.TemporaryDirectory(prefix="sluice-daemon-") as tmp:
        data = os.path.join(tmp, "data")
        write_dataset(data)
        conf = os.path.join(tmp, "conf")
        os.makedirs(conf)
        with open(os.path.join(conf, "bc.json"), "w") as f:
            json.dump(spec(data, name="bc", epochs=1), f)
        with open(os.path.join(conf, "forever.json"), "w") as f:
            json.dump(spec(data, name="forever", epochs=None, shuffle=True,
                           num_shuffle_buffer_elements=20, num_filenames_shuffle_buffer=2,
                           num_mix_files=2), f)
        with open(os.path.join(conf, "broken.json"), "w") as f:
            f.write('{"type": "independent", "args": {"dataset": 3}}')
        d = Daemon(tmp, conf)
        check(d.ready, "sluiced says READY=1 on NOTIFY_SOCKET once it listens")
        try:
            test_broadcast(d)
            test_split_and_kill(d, tmp, data)
            test_rank(d, tmp, data)
            test_groups(d, tmp, data)
            test_access_and_garbage(d, tmp, data)
        finally:
            rc = d.stop()
        check(rc == 0, "sluiced stops cleanly (exit %s)" % rc)
        test_budget(tmp, data)
        test_ended_dropped(tmp, data)
        test_memory_and_quotas(tmp, data)
        test_memory_cgroup_v1(tmp, data)
        test_fair_shares(tmp, data)
        test_state_resume(tmp, data)
        test_resume_by_name(tmp, data)
        test_io_options(tmp, data)
        test_cpus(tmp, data)
        test_cpus_cgroup_v1(tmp, data)
        test_record_cache(tmp, data)
        test_ring_memory(tmp, data)
        test_errors_reach_readers(tmp, data)
        test_fd_limit(tmp)
        test_user_connections(tmp)
        test_idle_timeout(tmp, data)
        test_command_line(tmp)
        test_relative_paths(tmp, data)
        test_restart(tmp, conf)
        test_restart_rank(tmp, data)
        test_restart_split(tmp, data)
        test_restart_sloppy(tmp, data)
        test_restart_position_lost(tmp, data)
        test_restart_crash_loop(tmp, data)
        test_restart_registered(tmp, data)
        with open(os.path.join(tmp, "sluiced.log")) as f:
            log = f.read()
        check("broken.json" in log, "a broken spec in the config dir is logged and skipped")
    common.finish()


if __name__ == "__main__":
    sys.exit(main())
