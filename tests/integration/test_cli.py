# SPDX-License-Identifier: Apache-2.0
"""Operating sluice (issue 21, "Operate"): the programs' command lines, `sluicectl list --json`,
"did you mean", `sluicectl rm`, SIGHUP's reload of the config dir, journald priorities, the
Prometheus output, sluiced's config file (--config, --no-config, flags over the file, errors that
name the file's line). A real sluiced on a real socket, driven by sluicectl; every wait is on the
event it checks (a log line, a process's exit, a listing), never a sleep.

The parts that need another user (rm by a non-owner, what nobody's "did you mean" may name) run
when this runs as root (clients as `nobody` through setpriv) and are skipped, said so,
otherwise. Output: TAP, for meson.
"""

import json
import os
import pwd
import re
import signal
import socket
import struct
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import test_daemon as td  # noqa: E402
from test_daemon import check, ctl, spec, Daemon  # noqa: E402

ROOT = os.geteuid() == 0


def wait_for(cond, what, timeout=30.0):
    """Poll cond() until it is true (its value) or timeout seconds pass (None, and a FAIL)."""
    v = td.poll_until(cond, timeout)
    if v is None:
        check(False, "within %.0f s: %s" % (timeout, what))
    return v


def log_lines(tmp):
    with open(os.path.join(tmp, "sluiced.log")) as f:
        return f.read().splitlines()


def write_spec(path, s):
    with open(path, "w") as f:
        json.dump(s, f)
    os.chmod(path, 0o644)


def listed(d, user=None):
    r = ctl(d, "list", "--json", user=user)
    return {p["name"]: p for p in json.loads(r.stdout)["pipelines"]} if r.returncode == 0 else None


# ---- the programs' command lines ----

def test_programs():
    progs = [("sluiced", os.environ["SLUICED"]), ("sluicectl", os.environ["SLUICECTL"])]
    bench = os.path.join(os.environ["SLUICE_BUILD_DIR"], "tools", "sluice-bench")
    if os.path.exists(bench):
        progs.append(("sluice-bench", bench))
    else:
        td.skip_case("sluice-bench's options", "[bench] sluice-bench is not built (-Dbench=false)")
    for name, path in progs:
        def run(*a):
            return subprocess.run([path] + list(a), capture_output=True, text=True, timeout=30)
        r = run("--help")
        check(r.returncode == 0 and r.stdout.startswith("usage: " + name) and not r.stderr,
              "%s --help: usage on stdout, exit 0 (%d)" % (name, r.returncode))
        r = run("--version")
        check(r.returncode == 0 and re.fullmatch(re.escape(name) + r" \d+\.\d+\.\d+\n", r.stdout)
              is not None, "%s --version: NAME VERSION on stdout, exit 0 (%r)" % (name, r.stdout))
        for bogus in ("--bogus", "--bogus=3"):
            r = run(bogus)
            check(r.returncode == 2 and "%s: unknown option --bogus" % name in r.stderr and
                  "needs a value" not in r.stderr,
                  "%s %s: named as an unknown option, exit 2 (%r)" % (name, bogus,
                                                                      r.stderr.strip()))
    if os.path.exists(bench):
        for sub in ("read", "crc", "sched", "pipeline", "next", "reader", "start", "image",
                    "predict", "autotune"):
            r = subprocess.run([bench, sub, "--help"], capture_output=True, text=True)
            check(r.returncode == 0 and r.stdout.startswith("usage: sluice-bench " + sub),
                  "sluice-bench %s --help: its usage on stdout, exit 0 (%d)" % (sub,
                                                                              r.returncode))
            r = subprocess.run([bench, sub, "--bogus=1"], capture_output=True, text=True)
            check(r.returncode == 2 and r.stderr.startswith(
                "sluice-bench %s: unknown option --bogus (try --help)" % sub),
                "sluice-bench %s --bogus=1: named as an unknown option, exit 2 (%r)" % (
                    sub, r.stderr.strip()[:200]))
        r = subprocess.run([bench, "read", "--threads"], capture_output=True, text=True)
        check(r.returncode == 2 and "sluice-bench read: --threads needs a value" in r.stderr,
              "sluice-bench read --threads without its value: named, exit 2 (%r)" %
              r.stderr.strip())
    r = subprocess.run([os.environ["SLUICED"], "--socket"], capture_output=True, text=True)
    check(r.returncode == 2 and "--socket needs a value" in r.stderr,
          "sluiced --socket without its value: named, exit 2 (%r)" % r.stderr.strip())
    for args in (["list", "--bogus"], ["stats", "--bogus", "x"], ["rm", "--bogus", "x"],
                 ["drain", "--bogus", "x"], ["register", "--bogus", "x"], ["run", "--bogus", "x"],
                 ["validate", "--bogus", "x"]):
        r = subprocess.run([os.environ["SLUICECTL"]] + args, capture_output=True, text=True)
        check(r.returncode == 2 and "unknown option --bogus" in r.stderr,
              "sluicectl %s: an unknown option of the command, exit 2 (%r)" % (
                  args[0], r.stderr.strip().splitlines()[0] if r.stderr else ""))
        r = subprocess.run([os.environ["SLUICECTL"], args[0], "--help"], capture_output=True,
                           text=True)
        check(r.returncode == 0 and r.stdout.startswith("usage: sluicectl"),
              "sluicectl %s --help: usage on stdout, exit 0" % args[0])
    # a rank's index must be below the count, at the edge too (without asking a daemon: the
    # socket named does not exist)
    for index, count, ok in ((2, 2, False), (3, 2, False), (1, 2, True)):
        r = subprocess.run([os.environ["SLUICECTL"], "--socket", "/nonexistent/sluice.sock",
                            "drain", "--mode", "rank", "--index", str(index), "--count",
                            str(count), "x"], capture_output=True, text=True)
        said = "--index must be below --count" in r.stderr
        check(r.returncode == 1 and not said if ok else r.returncode == 2 and said,
              "sluicectl drain --index %d --count %d: %s (exit %d: %r)" % (
                  index, count, "a usage error" if not ok else "past the usage check",
                  r.returncode, r.stderr.strip()[:200]))


# ---- a daemon ----

def test_list_json(d):
    r = ctl(d, "list", "--json")
    try:
        doc = json.loads(r.stdout)
    except ValueError:
        doc = None
    check(r.returncode == 0 and doc is not None and len(r.stdout.strip().splitlines()) == 1,
          "list --json: one JSON document (%r)" % r.stdout[:200])
    ps = {p["name"]: p for p in (doc or {}).get("pipelines", [])}
    keys = {"name", "owner_uid", "owner", "fingerprint", "status", "readers",
            "batches_published", "ring_slots_used", "ring_slots"}
    check({"mnist-train", "bc"} <= set(ps) and all(set(p) == keys for p in ps.values()) and
          all(re.fullmatch("[0-9a-f]{32}", p["fingerprint"]) for p in ps.values()) and
          all(p["status"] in ("running", "finished", "failed") for p in ps.values()),
          "list --json names the config dir's pipelines with every field (%s)" % sorted(ps))
    check(all(ps[n].get("owner_uid", 0) is None and ps[n].get("owner") == "(config)"
              for n in ("mnist-train", "bc") if n in ps),
          "list --json: the config dir's pipelines are the host's, no uid's (%s)" %
          [(p.get("owner_uid"), p.get("owner")) for p in ps.values()])
    r2 = ctl(d, "--socket=" + d.sock, "list")
    rows = [ln.split() for ln in r2.stdout.splitlines()]
    check(r2.returncode == 0 and rows and rows[0][:2] == ["NAME", "STATUS"] and
          rows[0][-1] == "OWNER" and ["mnist-train", "(config)"] in [[x[0], x[-1]] for x in rows],
          "sluicectl --socket=PATH works as --socket PATH; list's OWNER of a config dir "
          "pipeline is (config) (%r)" % r2.stdout)


def test_opt_equals(d, tmp):
    """--opt=VALUE as --opt VALUE, options before or after the operand."""
    r = ctl(d, "drain", "--batches=3", "mnist-train", "--json", "--mode=broadcast")
    lines = [ln for ln in r.stdout.splitlines() if ln.startswith("{")]
    check(r.returncode == 0 and len(lines) == 3,
          "drain --batches=3 NAME --json --mode=broadcast: 3 batches (%s)" % r.stderr.strip())
    p = os.path.join(tmp, "conf", "bc.json")
    r = subprocess.run([os.environ["SLUICECTL"], "run", p, "--batches=2", "--json"],
                       capture_output=True, text=True, timeout=60)
    check(r.returncode == 0 and len(r.stdout.splitlines()) == 2,
          "run SPEC --batches=2 --json: 2 batches (%s)" % r.stderr.strip())
    r = subprocess.run([os.environ["SLUICECTL"], "validate", "--threads=2",
                        os.path.join(tmp, "data")], capture_output=True, text=True, timeout=60)
    check(r.returncode == 0, "validate --threads=2 DIR (%s)" % r.stderr.strip()[-200:])


def test_did_you_mean(d, pub):
    # root's own, near the name, that nobody may not read
    write_spec(os.path.join(pub, "hidden.json"), spec("../data", name="mnist-trains", seed=5))
    r = ctl(d, "register", os.path.join(pub, "hidden.json"))
    check(r.returncode == 0, "register mnist-trains (%s)" % r.stderr.strip())
    r = ctl(d, "stats", "mnist_train")
    check(r.returncode == 1 and 'no pipeline named "mnist_train"; did you mean "mnist-train" or '
          '"mnist-trains"?' in r.stderr,
          "stats of an unknown name lists the close ones, closest first (%r)" % r.stderr.strip())
    r = ctl(d, "drain", "mnist_trian")
    check(r.returncode == 1 and 'did you mean "mnist-train"' in r.stderr,
          "attach by an unknown name too, a swap of two letters is close (%r)" %
          r.stderr.strip())
    r = ctl(d, "stats", "zzz-nothing")
    check(r.returncode == 1 and 'no pipeline named "zzz-nothing"' in r.stderr and
          "did you mean" not in r.stderr,
          "nothing close: no suggestion (%r)" % r.stderr.strip())
    if not ROOT:
        td.skip_case("what nobody's suggestions may name", "[root] needs root to run clients as nobody")
        return
    r = ctl(d, "stats", "mnist_train", user="nobody")
    check(r.returncode == 1 and 'did you mean "mnist-train"?' in r.stderr and
          "mnist-trains" not in r.stderr,
          "nobody is never told of a name it may not read (%r)" % r.stderr.strip())


def test_list_owner(d):
    """The pipeline this user registered (test_did_you_mean's mnist-trains) is listed as its,
    by name (test_rights.py lists root's, nobody's and a nameless uid's)."""
    uid = os.geteuid()
    try:
        name = pwd.getpwuid(uid).pw_name
    except KeyError:
        name = str(uid)
    p = (listed(d) or {}).get("mnist-trains")
    check(p is not None and p.get("owner_uid") == uid and p.get("owner") == name,
          "list --json: mnist-trains is uid %d's, %s (%s)" % (uid, name, p))


PY_REMOVE = r"""
import sys
sys.path.insert(0, sys.argv[1])
import sluice
it = iter(sluice.attach(spec=sys.argv[3], socket=sys.argv[2]))
next(it)
sluice.remove(sys.argv[4], socket=sys.argv[2])
try:
    for _ in it:
        pass
    print("END without an error")
except sluice.SluiceError as e:
    print("ERROR %s" % e.strerror)
"""


def test_rm(d, tmp, pub):
    nb = pwd.getpwnam("nobody") if ROOT else None
    s = spec("../data", name="victim", epochs=None, seed=9)
    if nb:
        s["readers"] = {"uids": [nb.pw_uid]}
    write_spec(os.path.join(pub, "victim.json"), s)
    r = ctl(d, "register", os.path.join(pub, "victim.json"))
    check(r.returncode == 0, "register victim (%s)" % r.stderr.strip())
    rd = subprocess.Popen([os.environ["SLUICECTL"], "--socket", d.sock, "drain", "victim",
                           "--json"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    first = rd.stdout.readline()
    check(first.startswith("{"), "a reader of victim reads (%r)" % first)
    if nb:
        r = ctl(d, "rm", "victim", user="nobody")
        check(r.returncode == 1 and "only its owner or root" in r.stderr,
              "rm by a reader that is not its owner: EACCES (%r)" % r.stderr.strip())
        r = ctl(d, "rm", "bc", user="nobody")
        check(r.returncode == 1 and "config dir: only root" in r.stderr,
              "rm of a config-dir pipeline by a user: EACCES (%r)" % r.stderr.strip())
    else:
        td.skip_case("rm by another user", "[root] needs root to run clients as nobody")
    r = ctl(d, "rm", "victim")
    check(r.returncode == 0, "rm victim by its owner (%s)" % r.stderr.strip())
    try:
        out, err = rd.communicate(timeout=30)
    except subprocess.TimeoutExpired:
        rd.kill()
        out, err = rd.communicate()
    check(rd.returncode == 1 and
          'pipeline "victim": the pipeline was removed by uid %d' % os.geteuid() in err,
          "the attached reader's next call fails saying who removed it (exit %s, %r)" % (
              rd.returncode, err.strip()[-300:]))
    ps = listed(d)
    check(ps is not None and "victim" not in ps, "victim is no longer listed")
    r = ctl(d, "stats", "victim")
    check(r.returncode == 1 and 'no pipeline named "victim"' in r.stderr,
          "nor found by name (%r)" % r.stderr.strip())
    wait_for(lambda: any("pipeline victim dropped: its last reader is gone" in ln
                         for ln in log_lines(tmp)),
             "the log says victim went with its last reader")
    # split readers: one is handed the error batch, the others the ring's error; none hangs
    write_spec(os.path.join(pub, "victim2.json"), spec("../data", name="victim2", epochs=None,
                                                       seed=11))
    r = ctl(d, "register", os.path.join(pub, "victim2.json"))
    rds = [subprocess.Popen([os.environ["SLUICECTL"], "--socket", d.sock, "drain", "victim2",
                             "--json", "--mode=split"], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True) for _ in range(2)]
    firsts = [p.stdout.readline() for p in rds]
    r2 = ctl(d, "rm", "victim2")
    errs = []
    for p in rds:
        try:
            errs.append((p.communicate(timeout=30)[1], p.returncode))
        except subprocess.TimeoutExpired:
            p.kill()
            errs.append(("no end within 30 s", p.wait()))
    check(r.returncode == 0 and r2.returncode == 0 and all(f.startswith("{") for f in firsts) and
          all(rc == 1 and "the pipeline was removed" in e for e, rc in errs),
          "two split readers of a removed pipeline both end with an error saying so (%s)" %
          [(rc, e.strip()[-120:]) for e, rc in errs])
    r = ctl(d, "rm", "victm")
    check(r.returncode == 1 and 'no pipeline named "victm"' in r.stderr,
          "rm of a name that is not there: ENOENT (%r)" % r.stderr.strip())
    if td.reader_loadable():
        pkg = os.path.join(os.environ.get("SLUICE_SRC_DIR", os.path.join(HERE, "..", "..")),
                           "libclient", "python")
        s3 = json.dumps(spec(os.path.join(tmp, "data"), name="victim3", epochs=None, seed=12))
        r = subprocess.run([sys.executable, "-c", PY_REMOVE, pkg, d.sock, s3, "victim3"],
                           capture_output=True, text=True, timeout=60)
        check(r.stdout.startswith("ERROR ") and "the pipeline was removed by uid" in r.stdout,
              "Python: sluice.remove(), and its reader's next batch raises saying so (%s)" %
              (r.stdout + r.stderr).strip()[-300:])
    else:
        td.skip_case("sluice.remove in Python",
                     "[sanitizer] libsluice.so cannot be loaded into this python")
    if nb:
        write_spec(os.path.join(pub, "own.json"), spec("../data", name="nobodys", seed=10))
        r = ctl(d, "register", os.path.join(pub, "own.json"), user="nobody")
        r2 = ctl(d, "rm", "nobodys", user="nobody")
        ps = listed(d)
        check(r.returncode == 0 and r2.returncode == 0 and ps is not None and
              "nobodys" not in ps,
              "a user removes its own pipeline (%s)" % (r.stderr + r2.stderr).strip())


def test_reload(d, tmp, conf):
    def hup_and_wait():
        n = sum("SIGHUP: reloaded" in ln for ln in log_lines(tmp))
        d.p.send_signal(signal.SIGHUP)
        return wait_for(lambda: [ln for ln in log_lines(tmp) if "SIGHUP: reloaded" in ln][n:],
                        "the reload's log line")
    write_spec(os.path.join(conf, "added.json"), spec(os.path.join(tmp, "data"), name="added",
                                                       seed=21, epochs=None))
    got = hup_and_wait()
    check(got and "1 started" in got[0], "SIGHUP with a new spec: started (%s)" % got)
    ps = listed(d)
    check(ps is not None and "added" in ps and d.p.poll() is None,
          "the new spec's pipeline is listed, the daemon runs on")
    # a changed spec is refused, the running one stays
    write_spec(os.path.join(conf, "bc.json"), spec(os.path.join(tmp, "data"), name="bc",
                                                    batch=7))
    got = hup_and_wait()
    check(got and "1 refused" in got[0] and
          any("bc.json changed: refused" in ln for ln in log_lines(tmp)),
          "SIGHUP with a changed spec: refused, with a log line (%s)" % got)
    rd = subprocess.Popen([os.environ["SLUICECTL"], "--socket", d.sock, "drain", "added",
                           "--json"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    first = rd.stdout.readline()
    os.unlink(os.path.join(conf, "added.json"))
    got = hup_and_wait()
    check(got and "1 removed" in got[0], "SIGHUP after a spec file went: removed (%s)" % got)
    try:
        out, err = rd.communicate(timeout=30)
    except subprocess.TimeoutExpired:
        rd.kill()
        out, err = rd.communicate()
    check(first.startswith("{") and rd.returncode == 0,
          "its reader drains what was published and gets the end of the stream (exit %s, %s)" %
          (rd.returncode, err.strip()[-200:]))
    wait_for(lambda: any("pipeline added dropped: its last reader is gone" in ln
                         for ln in log_lines(tmp)),
             "the drained pipeline is dropped with its last reader")
    ps = listed(d)
    check(ps is not None and "added" not in ps and "bc" in ps,
          "its pipeline is gone, the others stay")
    check(sum("SIGHUP: reloaded" in ln for ln in log_lines(tmp)) == 3,
          "each reload is logged once")


def test_events_logged_once(d, tmp):
    r = ctl(d, "drain", "bc")
    check(r.returncode == 0, "drain bc (%s)" % r.stderr.strip())
    lines = log_lines(tmp)
    ids = [m.group(1) for m in (re.search(r"reader (\d+) \(pid \d+, uid \d+\) attached to bc ",
                                          ln) for ln in lines) if m]
    rid = ids[-1] if ids else None
    att = [ln for ln in lines if rid and "reader %s (" % rid in ln and "attached to bc" in ln]
    det = [ln for ln in lines if rid and "reader %s (" % rid in ln and "detached from bc" in ln]
    check(len(att) == 1 and len(det) == 1,
          "a reader's attach and detach are logged once each (%d, %d)" % (len(att), len(det)))
    check(sum("pipeline bc finished" in ln for ln in lines) == 1 and
          sum("pipeline bc from" in ln for ln in lines) == 1,
          "a pipeline's start and finish are logged once each")


PROM_LINE = re.compile(r'^([a-zA-Z_:][a-zA-Z0-9_:]*)\{((?:[a-zA-Z_][a-zA-Z0-9_]*="(?:[^"\\\n]|'
                       r'\\.)*",?)*)\} (-?\d+)$')


def parse_prom(text):
    """The samples of a Prometheus text exposition, checked line by line: (errors, samples as
    (metric, {label: value}, value), types by metric)."""
    errors, samples, types, done, cur = [], [], {}, set(), None
    for i, ln in enumerate(text.splitlines()):
        if ln.startswith("# HELP "):
            parts = ln.split(" ", 3)
            if len(parts) < 4 or parts[2] in done:
                errors.append("line %d: HELP again or empty: %s" % (i + 1, ln))
        elif ln.startswith("# TYPE "):
            parts = ln.split(" ")
            if len(parts) != 4 or parts[3] not in ("counter", "gauge") or parts[2] in types:
                errors.append("line %d: bad TYPE: %s" % (i + 1, ln))
            else:
                types[parts[2]] = parts[3]
                if cur:
                    done.add(cur)
                cur = parts[2]
        else:
            m = PROM_LINE.match(ln)
            if not m:
                errors.append("line %d: not a sample: %r" % (i + 1, ln))
                continue
            if m.group(1) != cur or m.group(1) in done:
                errors.append("line %d: %s outside its family" % (i + 1, m.group(1)))
            labels = dict(re.findall(r'([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"',
                                     m.group(2)))
            samples.append((m.group(1), labels, int(m.group(3))))
    return errors, samples, types


def test_prometheus(d, tmp):
    r = ctl(d, "stats", "--prometheus")
    errors, samples, types = parse_prom(r.stdout)
    check(r.returncode == 0 and not errors and samples,
          "stats --prometheus: every line a HELP, TYPE or sample, families together (%s)" %
          (errors[:3] or r.stderr.strip()))
    pub = [s for s in samples if s[0] == "sluice_batches_published"]
    check({s[1].get("pipeline") for s in pub} >= {"bc", "mnist-train"} and
          types.get("sluice_batches_published") == "counter" and
          types.get("sluice_readers") == "gauge",
          "... sluice_batches_published{pipeline=...} of every pipeline, typed")
    check(any(s[0] == "sluice_stage_elems_out" and s[1].get("stage") for s in samples),
          "... and the stages' counters with a stage label")
    r = ctl(d, "stats", "--prometheus", "bc")
    errors, samples, _ = parse_prom(r.stdout)
    check(r.returncode == 0 and not errors and samples and
          all(s[1]["pipeline"] == "bc" for s in samples),
          "stats --prometheus NAME: that pipeline's only")
    path = os.path.join(tmp, "sluice.prom")
    r = ctl(d, "stats", "--prometheus", "--textfile", path)
    with open(path) as f:
        errors, samples, _ = parse_prom(f.read())
    check(r.returncode == 0 and r.stdout == "" and not errors and samples and
          not os.path.exists(path + ".tmp"),
          "--textfile PATH: the same text in PATH, no temporary left (%s)" % r.stderr.strip())
    r = ctl(d, "stats", "--textfile", path)
    check(r.returncode == 2, "--textfile without --prometheus is a usage error")


def raw_msg(t, req, fields):
    body = b"".join(struct.pack("<HI", tag, len(v)) + v for tag, v in fields)
    return struct.pack("<IHHIII", 0x4c434c53, 1, t, 0, req, len(body)) + body


def raw_fields(m):
    t, req, n = struct.unpack_from("<HxxxxII", m, 6)
    body, out, off = m[20:20 + n], {}, 0
    while off + 6 <= len(body):
        tag, ln = struct.unpack_from("<HI", body, off)
        out[tag] = body[off + 6:off + 6 + ln]
        off += 6 + ln
    return t, req, out


def test_unknown_request(d):
    """A request type this daemon does not know (a later client's): ERROR -EOPNOTSUPP naming
    it, and the connection goes on (docs/protocol.md); REMOVE itself is one such type for a
    daemon older than it."""
    s = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    s.settimeout(10)
    try:
        s.connect(d.sock)
        s.send(raw_msg(0x0001, 1, [(1, struct.pack("<I", 1)), (2, struct.pack("<I", os.getpid()))]))
        t, _, _ = raw_fields(s.recv(65536))
        s.send(raw_msg(0x0042, 2, []))
        t2, req2, f2 = raw_fields(s.recv(65536))
        code = struct.unpack("<i", f2[1])[0] if 1 in f2 else None
        s.send(raw_msg(0x0006, 3, []))
        t3, req3, _ = raw_fields(s.recv(65536))
    except (OSError, struct.error) as e:
        check(False, "an unknown request type: %s" % e)
        return
    finally:
        s.close()
    check(t == 0x8001 and t2 == 0x8000 and req2 == 2 and code == -95 and
          b"0x0042" in f2.get(2, b""),
          "an unknown request type: ERROR -EOPNOTSUPP naming it (%s, %r)" % (code, f2.get(2)))
    check(t3 == 0x8006 and req3 == 3, "... and the connection goes on: LIST answers")


def test_journal(tmp, data):
    jt = os.path.join(tmp, "journal")
    os.makedirs(os.path.join(jt, "conf"))
    write_spec(os.path.join(jt, "conf", "j.json"), spec(data, name="j"))
    with open(os.path.join(jt, "conf", "broken.json"), "w") as f:
        f.write("{")
    name, comp, contents, _ = td.bad_inputs()[1]  # fails at its first record
    td.write_one_file(os.path.join(jt, "bad"), contents, comp)
    write_spec(os.path.join(jt, "conf", "jbad.json"),
               spec(os.path.join(jt, "bad"), name="jbad", batch=2, on_corrupt="fail",
                    primary_features=[{"from_name": "id", "to_name": "id"}]))
    log = os.path.join(jt, "sluiced.log")
    open(log, "w").close()
    st = os.stat(log)
    d = Daemon(jt, os.path.join(jt, "conf"),
               env={"JOURNAL_STREAM": "%d:%d" % (st.st_dev, st.st_ino)})
    try:
        wait_for(lambda: any("listening on" in ln for ln in log_lines(jt)), "sluiced listens")
        wait_for(lambda: any("pipeline jbad failed" in ln for ln in log_lines(jt)),
                 "the bad pipeline's failure is logged")
        r = ctl(d, "drain", "j")
    finally:
        rc = d.stop()
    lines = log_lines(jt)
    bad = [ln for ln in lines if not re.match(r"<[346]>", ln)]
    check(rc == 0 and r.returncode == 0 and lines and not bad,
          "stderr is the journal (JOURNAL_STREAM): every line has a <N> priority (%s)" % bad[:3])
    check(any(ln.startswith("<6>") and "listening on" in ln for ln in lines) and
          any(ln.startswith("<4>") and "broken.json" in ln for ln in lines) and
          sum(ln.startswith("<3>pipeline jbad failed") for ln in lines) == 1 and
          not any("sluiced: " in ln[:12] for ln in lines),
          "... <6> for events, <4> for a skipped spec, <3> (once) for a pipeline that failed, "
          "no 'sluiced: ' prefix")
    plain = log_lines(tmp)
    check(plain and all(ln.startswith("sluiced: ") for ln in plain),
          "without JOURNAL_STREAM (or another file's): plain 'sluiced: ' lines")


# ---- the config file ----

def start_with(tmp, args, tag):
    """sluiced with these arguments only (no --socket, no --config-dir of its own), its stderr
    in tmp/TAG.log; (process, True once READY=1 came) or (process, False) when it exited."""
    notify = os.path.join(tmp, tag + ".notify")
    ns = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    ns.bind(notify)
    ns.settimeout(30)
    log = open(os.path.join(tmp, tag + ".log"), "w")
    env = {k: v for k, v in os.environ.items()
           if k not in ("SLUICE_SOCKET", "RUNTIME_DIRECTORY", "XDG_RUNTIME_DIR")}
    env["NOTIFY_SOCKET"] = notify
    p = subprocess.Popen([os.environ["SLUICED"]] + args, env=env, stderr=log)
    try:
        ready = b"READY=1" in ns.recv(4096)
    except socket.timeout:
        ready = False
    finally:
        ns.close()
        log.close()
    return p, ready


def stop(p):
    if p.poll() is None:
        p.send_signal(signal.SIGTERM)
    try:
        return p.wait(30)
    except subprocess.TimeoutExpired:
        p.kill()
        return p.wait()


def ring_slots(sock, name):
    r = subprocess.run([os.environ["SLUICECTL"], "--socket", sock, "list", "--json"],
                       capture_output=True, text=True, timeout=60)
    if r.returncode != 0:
        return None
    ps = {p["name"]: p for p in json.loads(r.stdout)["pipelines"]}
    return ps[name]["ring_slots"] if name in ps else None


def test_config_file(tmp, data):
    """sluiced --config FILE: the file's settings take effect, the command line's win over
    them, --no-config reads none, and a bad key or value names the file, the line and the key
    (exit 2)."""
    cf = os.path.join(tmp, "cf")
    os.makedirs(os.path.join(cf, "conf"))
    write_spec(os.path.join(cf, "conf", "fromconf.json"), spec(data, name="fromconf",
                                                               epochs=None))
    sock = os.path.join(cf, "file.sock")
    path = os.path.join(cf, "sluiced.conf")
    text = ("# sluiced's settings, as an administrator writes them\n"
            "\n"
            "socket = %s\n"
            "config-dir = %s   # the specs\n"
            "workers = 1\n"
            "pipeline-memory = 8M\n"
            "memory = 96M\n"
            "ring-slots = 16\n"
            "direct-io = no\n") % (sock, os.path.join(cf, "conf"))
    with open(path, "w") as f:
        f.write(text)
    p, ready = start_with(cf, ["--config", path], "file")
    try:
        check(ready, "sluiced --config FILE starts (%s)" %
              open(os.path.join(cf, "file.log")).read()[-300:])
        slots = ring_slots(sock, "fromconf")
        check(slots == 16, "the file's socket, config-dir and ring-slots = 16 take effect "
              "(ring_slots %s)" % slots)
        lines = open(os.path.join(cf, "file.log")).read()
        check("memory: 98304 KiB for rings, engines and the record cache (--memory)" in lines and
              "settings: %s, then the command line's" % path in lines,
              "... and memory = 96M; the log names the file (%r)" % lines[-400:])
        with open(path, "a") as f:
            f.write("linger = 5\n")
        p.send_signal(signal.SIGHUP)
        wait_for(lambda: "changed since sluiced started: its settings apply at the next start"
                 in open(os.path.join(cf, "file.log")).read(),
                 "SIGHUP after the file changed: the log says its settings wait for a restart")
    finally:
        rc = stop(p)
    check(rc == 0, "sluiced --config FILE stops cleanly (exit %s)" % rc)
    with open(path, "w") as f:
        f.write(text)
    p, ready = start_with(cf, ["--ring-slots=32", "--config", path, "--workers", "2"], "over")
    try:
        slots = ring_slots(sock, "fromconf")
        check(ready and slots == 32,
              "--ring-slots=32 on the command line wins over the file's 16, before or after "
              "--config (%s)" % slots)
    finally:
        stop(p)
    other = os.path.join(cf, "other.sock")
    p, ready = start_with(cf, ["--config", path, "--no-config", "--socket", other,
                               "--config-dir", os.path.join(cf, "conf"), "--workers", "1"],
                          "none")
    try:
        slots = ring_slots(other, "fromconf")
        check(ready and slots == 64 and not os.path.exists(sock),
              "--no-config (the last word): no file read, the defaults (%s)" % slots)
    finally:
        stop(p)
    bad = [("workers = 1\nmemory = 64M\n\n# a typo\ncache-memroy = 1G\n",
            '%s:5: unknown key "cache-memroy" (did you mean "cache-memory"?)' % path),
           ("socket = %s\nmemory = 12X\n" % sock, "%s:2: memory: not a number: 12X" % path),
           ("direct-io = maybe\n", "%s:1: direct-io: not true, false, yes, no, 1 or 0: maybe" %
            path),
           ("workers 3\n", '%s:1: expected KEY = VALUE, not "workers 3"' % path),
           ("workers = 1\nworkers = 2\n", "%s:2: workers is set on line 1 already" % path)]
    for body, want in bad:
        with open(path, "w") as f:
            f.write(body)
        r = subprocess.run([os.environ["SLUICED"], "--config", path, "--socket", other],
                           capture_output=True, text=True, timeout=30)
        check(r.returncode == 2 and r.stderr == "sluiced: %s\n" % want,
              "a bad config file: exit 2, %r (%s, %r)" % (want, r.returncode, r.stderr))
    r = subprocess.run([os.environ["SLUICED"], "--config", os.path.join(cf, "nothere.conf")],
                       capture_output=True, text=True, timeout=30)
    check(r.returncode == 2 and "nothere.conf: No such file or directory" in r.stderr,
          "--config of a file that is not there: exit 2, named (%r)" % r.stderr.strip())
    r = subprocess.run([os.environ["SLUICED"], "--cache-memroy", "1G"], capture_output=True,
                       text=True, timeout=30)
    check(r.returncode == 2 and "unknown option --cache-memroy (did you mean --cache-memory?"
          in r.stderr, "an option misspelt: named with the close one (%r)" % r.stderr.strip())
    r = subprocess.run([os.environ["SLUICED"], "--help"], capture_output=True, text=True)
    missing = [o for o in ("config", "no-config", "socket", "memory", "direct-io[=BOOL]",
                           "user-connections") if "--" + o not in r.stdout]
    check(r.returncode == 0 and not missing, "--help lists --config and the settings (%s)" %
          missing)
    example = os.path.join(os.environ["SLUICE_BUILD_DIR"], "daemon", "sluiced.conf")
    if os.path.exists(example):
        p, ready = start_with(cf, ["--config", example, "--socket", other, "--workers", "1"],
                              "example")
        rc = stop(p)
        check(ready and rc == 0, "the example sluiced.conf that meson installs (every line "
              "commented out) is read, sluiced starts (%s)" %
              open(os.path.join(cf, "example.log")).read()[-300:])


def main():
    td.common.start()
    for v in ("SLUICED", "SLUICECTL", "SLUICE_BUILD_DIR"):
        if not os.environ.get(v):
            td.common.skip("[env] %s is not set (run through meson test)" % v)
    td.common.protos()
    test_programs()
    with tempfile.TemporaryDirectory(prefix="sluice-cli-") as tmp:
        os.chmod(tmp, 0o755)  # nobody reads the dataset and the specs
        data = os.path.join(tmp, "data")
        td.write_dataset(data)
        for f in os.listdir(data):
            os.chmod(os.path.join(data, f), 0o644)
        os.chmod(data, 0o755)
        conf = os.path.join(tmp, "conf")
        os.makedirs(conf)
        pub = os.path.join(tmp, "pub")
        os.makedirs(pub)
        os.chmod(pub, 0o755)
        write_spec(os.path.join(conf, "bc.json"), spec(data, name="bc", epochs=1))
        write_spec(os.path.join(conf, "mnist-train.json"),
                   spec(data, name="mnist-train", epochs=None))
        d = Daemon(tmp, conf, ["--linger", "600"])
        check(d.ready, "sluiced is ready")
        try:
            test_list_json(d)
            test_unknown_request(d)
            test_opt_equals(d, tmp)
            test_did_you_mean(d, pub)
            test_list_owner(d)
            test_rm(d, tmp, pub)
            test_events_logged_once(d, tmp)
            test_prometheus(d, tmp)
            test_reload(d, tmp, conf)
        finally:
            rc = d.stop()
        check(rc == 0, "sluiced stops cleanly (exit %s)" % rc)
        test_journal(tmp, data)
        test_config_file(tmp, data)
    td.common.finish()


if __name__ == "__main__":
    sys.exit(main())
