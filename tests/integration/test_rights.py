"""Whose rights read a dataset (issue 19): sluiced opens every file of a user's pipeline with
that user's rights, so nobody reads through it what nobody could not open; names belong to
their owners.

Runs as root (it starts clients as `nobody` with setpriv); skipped ([root]) otherwise. A real sluiced,
real files with real modes, the record cache on (it must not hand one user's cached records to
another who could not open the file). Output: TAP, for meson.
"""

import json
import os
import pwd
import shutil
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import test_daemon as td  # noqa: E402
from test_daemon import check, ctl, spec, Daemon  # noqa: E402

ALL = list(range(td.N_FILES * td.PER_FILE))
SECRET_LINE = "root:$6$NOT-TO-BE-QUOTED$"


def drain(d, target, *args, user=None):
    r = ctl(d, "drain", target, "--json", "--values", "id", *args, user=user)
    lines = [json.loads(x) for x in r.stdout.splitlines() if x.strip().startswith("{")]
    return r, lines


def write_spec(path, s):
    with open(path, "w") as f:
        json.dump(s, f)
    os.chmod(path, 0o644)


def setup(tmp):
    """open/: anyone reads; secret/: a 0700 directory; guarded/: a 0755 directory whose data
    files are 0600 (its manifest is readable, so a pattern lists them without opening them)."""
    base = os.path.join(tmp, "data")
    td.write_dataset(base)
    for name, dmode, fmode in (("open", 0o755, 0o644), ("secret", 0o700, 0o644),
                               ("guarded", 0o755, 0o600)):
        p = os.path.join(tmp, name)
        shutil.copytree(base, p)
        for f in os.listdir(p):
            os.chmod(os.path.join(p, f), 0o644 if f == "__manifest__.json" else fmode)
        os.chmod(p, dmode)
    shadow = os.path.join(tmp, "shadow")
    with open(shadow, "w") as f:
        f.write(SECRET_LINE + "\n")
    os.chmod(shadow, 0o600)
    pub = os.path.join(tmp, "pub")
    os.makedirs(pub)
    os.chmod(pub, 0o755)
    return pub, shadow


def test_files(d, tmp, pub, shadow):
    # a 0700 directory, named by a relative path from a spec nobody may read
    p = os.path.join(pub, "secret.json")
    write_spec(p, spec("../secret", batch=10))
    r, lines = drain(d, p, user="nobody")
    check(r.returncode == 1 and not lines and "permission denied" in r.stderr.lower() and
          "secret" in r.stderr,
          "a root-only directory (relative ../secret): nobody gets EACCES naming it, no batch "
          "(%s)" % r.stderr.strip()[-200:])
    # a list file only root may read: refused, and never quoted
    p = os.path.join(pub, "shadow.json")
    write_spec(p, {"type": "independent", "args": dict(
        spec(None, batch=10)["args"],
        dataset={"type": "list", "args": {"manifest_file": "../open/__manifest__.json",
                                          "list_file": shadow}})})
    r, lines = drain(d, p, user="nobody")
    check(r.returncode == 1 and not lines and "permission denied" in r.stderr.lower() and
          "NOT-TO-BE-QUOTED" not in r.stderr,
          "a list_file only root may read: EACCES, its contents never quoted (%s)" %
          r.stderr.strip()[-200:])
    # root's own list file is read (and its bad line quoted: root may read it)
    r, lines = drain(d, p)
    check(r.returncode == 1 and "NOT-TO-BE-QUOTED" in r.stderr,
          "... while root, who may read it, is told what its bad line says (%s)" %
          r.stderr.strip()[-200:])
    # root fills the record cache with guarded/'s files
    p = os.path.join(pub, "guarded-root.json")
    write_spec(p, guarded(10))
    r, lines = drain(d, p)
    check(r.returncode == 0 and sorted(td.ids_of(lines)) == ALL,
          "root reads guarded/ (0600 files) and the cache keeps them (%s)" % r.stderr.strip())
    # the same dataset, another batch size: nobody's own pipeline; the cache must not give it
    # the records of files it cannot open
    p = os.path.join(pub, "guarded-nobody.json")
    write_spec(p, guarded(11))
    r, lines = drain(d, p, user="nobody")
    check(r.returncode == 1 and not td.ids_of(lines) and
          "permission denied" in r.stderr.lower() and "part-" in r.stderr,
          "guarded/ by nobody (cached by root's pipeline): EACCES naming the file, not a "
          "record from the cache (%d ids; %s)" % (len(td.ids_of(lines)), r.stderr.strip()[-200:]))
    # root's very spec from nobody: not root's pipeline (read with root's rights), its own
    p = os.path.join(pub, "guarded-same.json")
    write_spec(p, guarded(10))
    r, lines = drain(d, p, user="nobody")
    check(r.returncode == 1 and not td.ids_of(lines) and "part-" in r.stderr,
          "root's very spec, asked by nobody: a pipeline of nobody's, which cannot open the "
          "files (%s)" % r.stderr.strip()[-200:])
    # what nobody may read, it reads, through the cache too
    p = os.path.join(pub, "open.json")
    write_spec(p, spec("../open", batch=12))
    for k in range(2):
        r, lines = drain(d, p, user="nobody")
        check(r.returncode == 0 and sorted(td.ids_of(lines)) == ALL,
              "nobody reads open/ with its own rights (run %d: %s)" % (k, r.stderr.strip()))
    # root grants nobody its pipeline over guarded/: read with root's rights
    p = os.path.join(pub, "granted.json")
    nb = pwd.getpwnam("nobody")
    write_spec(p, dict(guarded(13, name="granted"),
                       readers={"uids": [nb.pw_uid]}))
    r = ctl(d, "register", p)
    r2, lines = drain(d, "granted", user="nobody")
    check(r.returncode == 0 and r2.returncode == 0 and sorted(td.ids_of(lines)) == ALL,
          "a pipeline root registered with readers [nobody]: nobody reads it by name, with "
          "root's rights, as granted (%s)" % (r.stderr + r2.stderr).strip()[-200:])


def guarded(batch, **kw):
    """A spec over guarded/ whose files a pattern lists (no file is opened to list them)."""
    s = spec("../guarded", batch=batch, **kw)
    s["args"]["dataset"]["args"]["pattern"] = "part-*"
    return s


def batch_size(lines):
    return len(lines[0]["values"]["id"]) if lines else None


def test_names(d, pub):
    mine = os.path.join(pub, "squat.json")
    write_spec(mine, spec("../open", name="prod-train", batch=14, epochs=None))
    r = ctl(d, "register", mine, user="nobody")
    check(r.returncode == 0, "nobody registers prod-train (%s)" % r.stderr.strip())
    root = os.path.join(pub, "prod.json")
    write_spec(root, spec("../open", name="prod-train", batch=15, epochs=None))
    r = ctl(d, "register", root)
    check(r.returncode == 0, "root's own prod-train is not refused by nobody's (%s)" %
          r.stderr.strip())
    r, lines = drain(d, "prod-train", "--batches", "1")
    check(r.returncode == 0 and batch_size(lines) == 15,
          "root attaching by the name reads its own prod-train, not nobody's (batch %s)" %
          batch_size(lines))
    r, lines = drain(d, "prod-train", "--batches", "1", user="nobody")
    check(r.returncode == 0 and batch_size(lines) == 14,
          "nobody attaching by the name reads its own (batch %s)" % batch_size(lines))
    other = os.path.join(pub, "squat2.json")
    write_spec(other, spec("../open", name="prod-train", batch=16, epochs=None))
    r = ctl(d, "register", other, user="nobody")
    check(r.returncode == 1 and "already called" in r.stderr,
          "a user's name is one pipeline: nobody's second prod-train is refused (%s)" %
          r.stderr.strip()[-200:])
    only = os.path.join(pub, "nb-only.json")
    write_spec(only, spec("../open", name="nb-only", batch=17, epochs=None))
    r = ctl(d, "register", only, user="nobody")
    r2, lines = drain(d, "nb-only", "--batches", "1")
    check(r.returncode == 0 and r2.returncode == 1 and not lines and
          "root does not attach to a user's pipeline by name" in r2.stderr and
          "uid %d has one" % pwd.getpwnam("nobody").pw_uid in r2.stderr,
          "root never reaches a user's name by chance, and is told whose it is (%s)" %
          r2.stderr.strip()[-200:])
    pwd.getpwnam("daemon")  # Debian's base-passwd has it: a KeyError fails the test
    r, _ = drain(d, "prod-train", "--batches", "1", user="daemon")
    check(r.returncode == 1 and "permission denied" in r.stderr.lower(),
          "a third user may read neither: EACCES (%s)" % r.stderr.strip()[-200:])


def unnamed_uid():
    """A uid that no user is called (sluicectl list shows its number)."""
    for uid in range(54321, 54421):
        try:
            pwd.getpwuid(uid)
        except KeyError:
            return uid
    return None


def test_owners(d, pub):
    """sluicectl list names each pipeline's owner: the user name, or the uid where it has none
    (root's and nobody's pipelines of test_names, and one of a uid without a name)."""
    nb = pwd.getpwnam("nobody")
    uid = unnamed_uid()
    if uid is None:
        check(False, "a uid without a user name, among 54321..54420")
        return
    p = os.path.join(pub, "anon.json")
    write_spec(p, spec("../open", name="anon-owned", batch=18, epochs=None))
    r = subprocess.run(["setpriv", "--reuid", str(uid), "--regid", str(uid), "--clear-groups",
                        os.environ["SLUICECTL"], "--socket", d.sock, "register", p],
                       capture_output=True, text=True, timeout=60)
    check(r.returncode == 0, "uid %d, which has no name, registers anon-owned (%s)" %
          (uid, r.stderr.strip()))
    r = ctl(d, "list", "--json")
    ps = json.loads(r.stdout)["pipelines"] if r.returncode == 0 else []
    owners = {(p["name"], p.get("owner_uid"), p.get("owner")) for p in ps}
    check(("prod-train", 0, "root") in owners and
          ("prod-train", nb.pw_uid, "nobody") in owners and
          ("nb-only", nb.pw_uid, "nobody") in owners and
          ("anon-owned", uid, str(uid)) in owners,
          "list --json: owner_uid and owner of root's, nobody's and a nameless uid's "
          "pipelines (%s)" % sorted(owners, key=str))
    r = ctl(d, "list")
    rows = [(x[0], x[-1]) for x in (ln.split() for ln in r.stdout.splitlines()) if x]
    check(r.returncode == 0 and rows and rows[0] == ("NAME", "OWNER") and
          ("prod-train", "root") in rows and ("prod-train", "nobody") in rows and
          ("anon-owned", str(uid)) in rows,
          "list: an OWNER column, last, a user's name or a nameless uid's number (%r)" %
          r.stdout)
    r = ctl(d, "list", "--json", user="nobody")
    ps = json.loads(r.stdout)["pipelines"] if r.returncode == 0 else []
    owners = {(p["name"], p.get("owner")) for p in ps}
    check(("prod-train", "nobody") in owners and ("prod-train", "root") not in owners and
          ("granted", "root") in owners,
          "nobody's list: its own prod-train, and root's pipeline that granted it, each with "
          "its owner; not root's prod-train (%s)" % sorted(owners))


def test_unprivileged_daemon(tmp, pub):
    """A daemon without CAP_SETUID serves its own user, and refuses to read for another."""
    run = os.path.join(tmp, "nb-run")
    conf = os.path.join(tmp, "nb-conf")
    for x in (run, conf):
        os.makedirs(x)
        os.chmod(x, 0o777)
    sock = os.path.join(run, "s.sock")
    nb = pwd.getpwnam("nobody")
    log = open(os.path.join(tmp, "nb-sluiced.log"), "w")
    p = subprocess.Popen(["setpriv", "--reuid", str(nb.pw_uid), "--regid", str(nb.pw_gid),
                          "--clear-groups", os.environ["SLUICED"], "--socket", sock,
                          "--config-dir", conf, "--workers", "2", "--pipeline-memory", "8M"],
                         stderr=log)

    class D:
        pass
    d = D()
    d.sock = sock
    try:
        deadline = time.monotonic() + 30
        while ctl(d, "list").returncode != 0 and p.poll() is None and \
                time.monotonic() < deadline:
            time.sleep(0.05)  # polls the condition: the daemon answers
        ok = os.path.join(pub, "open.json")
        r, lines = drain(d, ok, user="nobody")
        check(r.returncode == 0 and sorted(td.ids_of(lines)) == ALL,
              "an unprivileged sluiced reads for its own user (%s)" % r.stderr.strip()[-200:])
        r, lines = drain(d, ok)
        check(r.returncode == 1 and "CAP_SETUID" in r.stderr and not lines,
              "... and refuses another user's spec, saying why (%s)" % r.stderr.strip()[-200:])
    finally:
        p.terminate()
        p.wait(20)


def main():
    for v in ("SLUICED", "SLUICECTL", "SLUICE_BUILD_DIR"):
        if not os.environ.get(v):
            td.common.skip("[env] %s is not set (run through meson test)" % v)
    if os.geteuid() != 0 or not shutil.which("setpriv"):
        td.common.skip("[root] needs root and setpriv to run clients as another user")
    try:
        pwd.getpwnam("nobody")
    except KeyError:
        td.common.skip("[users] no user nobody")
    td.common.protos()
    with tempfile.TemporaryDirectory(prefix="sluice-rights-") as tmp:
        os.chmod(tmp, 0o755)
        pub, shadow = setup(tmp)
        conf = os.path.join(tmp, "conf")
        os.makedirs(conf)
        d = Daemon(tmp, conf, ["--cache-memory", "64M", "--cache-uncompressed"])
        check(d.ready, "sluiced is ready")
        try:
            test_files(d, tmp, pub, shadow)
            test_names(d, pub)
            test_owners(d, pub)
            r = ctl(d, "list")
            check(r.returncode == 0, "the daemon goes on (%s)" % r.stderr.strip())
        finally:
            rc = d.stop()
        check(rc == 0, "sluiced stops cleanly (exit %s)" % rc)
        test_unprivileged_daemon(tmp, pub)
    td.common.finish()


if __name__ == "__main__":
    sys.exit(main())
