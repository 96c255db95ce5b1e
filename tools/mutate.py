#!/usr/bin/python3
# SPDX-License-Identifier: Apache-2.0
"""Mutation checks (issue 35): three hand-picked mutations per module, each tried once.

Each mutation is one exact snippet of a source file and its replacement: a flipped comparison,
a dropped check or an off-by-one in an index or a length. For each, the script applies it in a
copy of the source tree (never in the tree it was given), rebuilds that copy, runs the tests
meant to catch it (the module's suite first, then wider ones while it is still not caught),
puts the file back and prints one line:

    ID MODULE KIND CAUGHT|MISSED|ERROR TEST -- first failure

Usage:
    /usr/bin/python3 tools/mutate.py [--source DIR] [--build DIR] [--list] [--no-baseline]
                                     [--timeout S] [--jobs N] [ID...]

  ID             mutations to try (default: all); --list shows them with file:line
  --source DIR   the tree to mutate a copy of (default: the checkout holding this script)
  --build DIR    keep the copy (DIR/src) and its build (DIR/build) here, so that a later run
                 rebuilds only what changed; default: a temporary directory, removed at exit
  --no-baseline  skip building and testing the unmutated copy first
  --timeout S    limit of one `meson test` run (default 900); running past it counts as
                 caught ("timeout")
  --jobs N       parallel tests for `meson test` (default: meson's own)

Logs: DIR/mutate.log (every command and its output) and, per mutation and stage, meson's
DIR/build/meson-logs/mutate-ID-STAGE.txt (each test's output).

Exit status: 1 when a mutation was MISSED; otherwise 2 when something could not be checked
(a snippet not found exactly once, a mutant or the baseline that does not build, a baseline
test that fails); 0 when every mutation was caught.
"""

import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time

# Stages of `meson test` arguments, run in order until one fails. The last stage of most is
# every test but the slow ones (and the module's own, already run).
WIDE = ["--no-suite", "slow"]
CTL_TESTS = ["libclient_sluicectl", "test_inspect_cli", "test_manifest_cli",
             "test_gen_validate", "test_cli", "test_pipeline"]


def wide(*suites):
    args = list(WIDE)
    for s in suites:
        args += ["--no-suite", s]
    return args


# id, module, file, kind, original snippet, replacement, description, [meson test args...]
MUTATIONS = [
    # ---- io ----
    ("io-cmp", "io", "io/tfr.c", "flipped comparison",
     "if (len > r->opts.max_record_len)",
     "if (len >= r->opts.max_record_len)",
     "a record exactly max_record_len long is refused (> to >=)",
     [["--suite", "io"], wide("io")]),
    ("io-drop", "io", "io/tfr.c", "dropped check",
     "if (want != stored)",
     "if (0)",
     "the header CRC (masked CRC-32C of the length field) is never checked",
     [["--suite", "io"], wide("io")]),
    ("io-off", "io", "io/tfr.c", "off-by-one",
     "left - len < TFR_FOOTER_LEN)",
     "left - len < TFR_FOOTER_LEN - 1)",
     "a file cut 1 byte into the last record's footer passes the known-size check",
     [["--suite", "io"], wide("io")]),
    # ---- sched ----
    ("sched-cmp", "sched", "sched/parallel_for.c", "flipped comparison",
     "if (begin >= end)",
     "if (begin > end)",
     "parallel_for over an empty range [n, n) calls the body once (>= to >)",
     [["--suite", "sched"], wide("sched")]),
    ("sched-drop", "sched", "sched/pool.c", "dropped check",
     "\t\tif (pool_state(pool) >= SCHED_POOL_CANCELLING)\n\t\t\treturn -ESHUTDOWN;\n",
     "",
     "a task spawning from a worker of a cancelling pool is not refused with -ESHUTDOWN",
     [["--suite", "sched"], wide("sched")]),
    ("sched-off", "sched", "sched/deque.c", "off-by-one",
     "if (b - t > a->mask) {",
     "if (b - t > a->mask + 1) {",
     "the deque grows one push too late: the push into a full array overwrites slot t",
     [["--suite", "sched"], wide("sched")]),
    # ---- ipc ----
    ("ipc-cmp", "ipc", "ipc/batch.c", "flipped comparison",
     "if (cur < prev)",
     "if (cur <= prev)",
     "a batch whose splits/offsets repeat a value (an empty row or string) is refused",
     [["--suite", "ipc"], wide("ipc")]),
    ("ipc-drop", "ipc", "ipc/ctl_msg.c", "dropped check",
     "if (fld->len > k)",
     "if (0)",
     "the decoder's length limit of a string/bytes field (at most max, max-1 for strings)",
     [["--suite", "ipc"], wide("ipc")]),
    ("ipc-off", "ipc", "ipc/ctl_msg.c", "off-by-one",
     "k = f->kind == K_STR ? (uint32_t)(f->max - 1) : (uint32_t)f->max;",
     "k = f->kind == K_STR ? (uint32_t)f->max : (uint32_t)f->max;",
     "a string field of exactly max bytes (no room for its NUL) is accepted",
     [["--suite", "ipc"], wide("ipc")]),
    # ---- libclient ----
    ("lc-cmp", "libclient", "libclient/sluice.c", "flipped comparison",
     "if (v.seq < r->skip_below)",
     "if (v.seq <= r->skip_below)",
     "the batch at seq skip_below (seq 0 on a first attach) is given back unread (< to <=)",
     [["--suite", "libclient"], wide("libclient"), ["py_restart"]]),
    ("lc-drop", "libclient", "libclient/batch.c", "dropped check",
     "\tif (i >= b->ring->n_schema)\n\t\treturn -ENOENT;\n",
     "",
     "sluice_batch_tensor_at(b, i) with i >= the tensor count reads past the schema",
     [["--suite", "libclient"], wide("libclient")]),
    ("lc-off", "libclient", "libclient/sluice.c", "off-by-one",
     "r->next_seq = v.seq + 1;",
     "r->next_seq = v.seq;",
     "the reader's next seq (its saved position) lags the last batch taken by one",
     [["--suite", "libclient"], wide("libclient"), ["py_restart"]]),
    # ---- daemon ----
    ("dm-cmp", "daemon", "daemon/budget.c", "flipped comparison",
     "n >= d->cfg.user_pipelines",
     "n > d->cfg.user_pipelines",
     "--user-pipelines N lets a user run N+1 pipelines (>= to >)",
     [["--suite", "daemon"], wide("daemon")]),
    ("dm-drop", "daemon", "daemon/positions.c", "dropped check",
     "if (rs->rec.owner != (uid_t)-1 && rs->rec.owner != who->uid) {",
     "if (0) {",
     "a reader of another uid resuming by name re-creates the owner's pipeline itself",
     [["--suite", "daemon"], wide("daemon"), ["py_restart"]]),
    ("dm-off", "daemon", "daemon/keep.c", "off-by-one",
     "for (int i = 0; i < 8; i++)\n\t\tr->run = r->run << 8 | rb[i];",
     "for (int i = 0; i < 7; i++)\n\t\tr->run = r->run << 8 | rb[i];",
     "a kept position's run id is read from 7 of its 8 bytes",
     [["--suite", "daemon"], wide("daemon"), ["py_restart"]]),
    # ---- daemon/pipeline ----
    ("pl-cmp", "daemon/pipeline", "daemon/pipeline/window.c", "flipped comparison",
     "while (w->total < w->p + w->len) {",
     "while (w->total <= w->p + w->len) {",
     "a window waits for one record more than it covers: a file's last window is lost",
     [["--suite", "pipeline"], wide("pipeline")]),
    ("pl-drop", "daemon/pipeline", "daemon/pipeline/rowparse.c", "dropped check",
     "if (__builtin_expect(f->kind != PBEX_KIND_NONE && f->kind != want, 0)) {",
     "if (0) {",
     "a feature of the wrong list kind (int64 for float...) is parsed as the manifest's",
     [["--suite", "pipeline"], wide("pipeline")]),
    ("pl-off", "daemon/pipeline", "daemon/pipeline/shuffle.c", "off-by-one",
     "elem_copy(at, slot_at(sh, --sh->len), compact);",
     "elem_copy(at, slot_at(sh, sh->len--), compact);",
     "draining the shuffle buffer moves the slot past the last one into the hole",
     [["--suite", "pipeline"], wide("pipeline")]),
    # ---- tools/sluicectl ----
    ("ctl-cmp", "tools/sluicectl", "tools/sluicectl/client.c", "flipped comparison",
     "o->ao.rank_index >= o->ao.rank_count",
     "o->ao.rank_index > o->ao.rank_count",
     "sluicectl drain --mode rank --index N --count N is not a usage error",
     [CTL_TESTS, wide()]),
    ("ctl-drop", "tools/sluicectl", "tools/sluicectl/inspect.c", "dropped check",
     "if (cli_parse_u64(optarg, UINT64_MAX, &v) || v < 1 ||",
     "if (cli_parse_u64(optarg, UINT64_MAX, &v) ||",
     "sluicectl inspect --chunk-size 0 is accepted",
     [CTL_TESTS, wide()]),
    ("ctl-off", "tools/sluicectl", "tools/sluicectl/run.c", "off-by-one",
     "tj_int64s(j, t->splits, rows + 1);",
     "tj_int64s(j, t->splits, rows);",
     "sluicectl run --json --values prints a ragged tensor's row_splits without its last",
     [CTL_TESTS, wide()]),
]

EXCLUDE_TOP = (".git",)


def excluded(rel):
    top = rel.split(os.sep, 1)[0]
    return top.startswith("build") or top in EXCLUDE_TOP


def tree_files(root):
    out = set()
    for d, dirs, files in os.walk(root):
        rel_d = os.path.relpath(d, root)
        if rel_d != "." and excluded(rel_d):
            dirs[:] = []
            continue
        dirs[:] = [x for x in dirs if not (rel_d == "." and excluded(x))]
        for f in files:
            rel = os.path.normpath(os.path.join(rel_d, f))
            if not excluded(rel):
                out.add(rel)
    return out


def same_file(a, b):
    try:
        if os.path.islink(a) or os.path.islink(b):
            return os.path.islink(a) and os.path.islink(b) and os.readlink(a) == os.readlink(b)
        if os.path.getsize(a) != os.path.getsize(b):
            return False
        with open(a, "rb") as fa, open(b, "rb") as fb:
            return fa.read() == fb.read()
    except OSError:
        return False


def write_now(path, data):
    """Write data to path with a fresh mtime (so that ninja rebuilds what uses it)."""
    with open(path, "wb") as f:
        f.write(data)
    now = time.time()
    os.utime(path, (now, now))


def sync_tree(src, dst):
    """Make dst hold src's files (build dirs and .git aside); a changed file gets a new mtime."""
    os.makedirs(dst, exist_ok=True)
    want = tree_files(src)
    for rel in tree_files(dst) - want:
        os.unlink(os.path.join(dst, rel))
    for rel in sorted(want):
        s, d = os.path.join(src, rel), os.path.join(dst, rel)
        if os.path.lexists(d) and same_file(s, d):
            continue
        os.makedirs(os.path.dirname(d), exist_ok=True)
        if os.path.lexists(d):
            os.unlink(d)
        if os.path.islink(s):
            os.symlink(os.readlink(s), d)
        else:
            with open(s, "rb") as f:
                write_now(d, f.read())
            shutil.copymode(s, d)


def line_of(text, snippet):
    return text[:text.index(snippet)].count("\n") + 1


def run_logged(cmd, log, timeout):
    """Run cmd (its own process group), its output appended to log; (rc, timed_out)."""
    with open(log, "ab") as f:
        f.write(("\n$ " + " ".join(cmd) + "\n").encode())
        f.flush()
        p = subprocess.Popen(cmd, stdout=f, stderr=subprocess.STDOUT, start_new_session=True)
        try:
            return p.wait(timeout=timeout), False
        except subprocess.TimeoutExpired:
            os.killpg(p.pid, signal.SIGKILL)
            p.wait()
            return -1, True


def first_failure(stdout):
    """What a failed test's output says first failed: its first "not ok" case with the
    diagnostics under it (cmocka's values and file:line), else the first line that looks like
    an error."""
    lines = stdout.splitlines()
    for i, ln in enumerate(lines):
        if ln.startswith("not ok"):
            out = [ln.strip()]
            for near in lines[i + 1:i + 4]:
                if not near.startswith("#") or near.startswith("# skip"):
                    break
                out.append(near.lstrip("# ").strip())
            return " | ".join(x for x in out if x)[:400]
    keys = ("[  ERROR   ]", "[   LINE   ]", "AssertionError", "Assertion", "FAIL", "Error",
            "error:", "E   ", "Traceback", "Segmentation", "Aborted", "timed out")
    for k in keys:
        for ln in lines:
            if k in ln:
                return ln.strip()[:400]
    return (lines[-1].strip() if lines else "")[:400]


def meson_test(build, args, logbase, log, timeout, jobs):
    """Run `meson test`; (failed [(name, detail)], timed_out, ran_any)."""
    cmd = ["meson", "test", "-C", build, "--logbase", logbase] + args
    if jobs:
        cmd += ["--num-processes", str(jobs)]
    rc, timed_out = run_logged(cmd, log, timeout)
    failed, ran = [], 0
    path = os.path.join(build, "meson-logs", logbase + ".json")
    if os.path.exists(path):
        with open(path) as f:
            for ln in f:
                try:
                    t = json.loads(ln)
                except ValueError:
                    continue
                ran += 1
                if t.get("result") in ("FAIL", "TIMEOUT", "ERROR", "UNEXPECTEDPASS"):
                    out = t.get("stdout") or ""
                    if t["result"] == "TIMEOUT":
                        detail = "timeout after %.0fs" % t.get("duration", 0)
                    elif "\nnot ok" in "\n" + out:
                        detail = first_failure(out)
                    else:  # died without a failed case: a crash, an abort
                        rc_t = t.get("returncode")
                        detail = ("killed by signal %d" % -rc_t if isinstance(rc_t, int)
                                  and rc_t < 0 else "exit status %s" % rc_t)
                        last = [x for x in out.splitlines() if x.strip()]
                        detail += " after: " + (last[-1].strip()[:200] if last else "")
                    failed.append((t.get("name", "?"), detail))
        os.unlink(path)
    if timed_out:
        failed.append(("(meson test)", "timeout after %ds" % timeout))
    elif rc != 0 and not failed:
        failed.append(("(meson test)", "exit status %d, see %s" % (rc, log)))
    return failed, timed_out, ran


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter,
                                 epilog="\n".join(__doc__.split("\n")[2:]))
    here = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    ap.add_argument("--source", default=here)
    ap.add_argument("--build", default=None)
    ap.add_argument("--list", action="store_true")
    ap.add_argument("--no-baseline", action="store_true")
    ap.add_argument("--timeout", type=int, default=900)
    ap.add_argument("--jobs", type=int, default=0)
    ap.add_argument("ids", nargs="*", metavar="ID")
    o = ap.parse_args()

    src = os.path.abspath(o.source)
    by_id = {m[0]: m for m in MUTATIONS}
    bad = [i for i in o.ids if i not in by_id]
    if bad:
        print("mutate: unknown mutation %s (see --list)" % ", ".join(bad), file=sys.stderr)
        return 2
    todo = [by_id[i] for i in o.ids] if o.ids else MUTATIONS

    # Every snippet must occur exactly once in the tree it is given.
    status = 0
    texts = {}
    for m in todo:
        mid, _, path, _, orig, _, _, _ = m
        with open(os.path.join(src, path)) as f:
            texts[path] = f.read()
        n = texts[path].count(orig)
        if n != 1:
            print("%s: the snippet occurs %d times in %s (expected once): %r"
                  % (mid, n, path, orig), file=sys.stderr)
            status = 2
    if status:
        return status
    if o.list:
        for mid, mod, path, kind, orig, repl, desc, stages in todo:
            where = "%s:%d" % (path, line_of(texts[path], orig))
            print("%-10s %-15s %-30s %-18s %s" % (mid, mod, where, kind, desc))
            print("%10s %r -> %r" % ("", orig, repl))
            for s in stages:
                print("%10s meson test %s" % ("", " ".join(s)))
        return 0

    t0 = time.time()
    work = os.path.abspath(o.build) if o.build else tempfile.mkdtemp(prefix="sluice-mutate-")
    copy, build = os.path.join(work, "src"), os.path.join(work, "build")
    log = os.path.join(work, "mutate.log")
    print("mutate: %s -> %s (log %s)" % (src, work, log), flush=True)
    missed = errors = 0
    try:
        sync_tree(src, copy)
        if not os.path.exists(os.path.join(build, "build.ninja")):
            rc, _ = run_logged(["meson", "setup", build, copy, "-Dbuildtype=debugoptimized"],
                               log, None)
            if rc != 0:
                print("mutate: meson setup failed (see %s)" % log, file=sys.stderr)
                return 2
        rc, _ = run_logged(["ninja", "-C", build], log, None)
        if rc != 0:
            print("mutate: the unmutated copy does not build (see %s)" % log, file=sys.stderr)
            return 2
        if not o.no_baseline:
            seen = []
            for m in todo:
                if m[7][0] not in seen:
                    seen.append(m[7][0])
            for k, args in enumerate(seen):
                failed, _, _ = meson_test(build, args, "mutate-baseline-%d" % k, log,
                                          o.timeout, o.jobs)
                if failed:
                    print("mutate: baseline `meson test %s` fails: %s -- %s (see %s)"
                          % (" ".join(args), failed[0][0], failed[0][1], log), file=sys.stderr)
                    return 2
            print("mutate: baseline passes (%.0fs)" % (time.time() - t0), flush=True)

        for mid, mod, path, kind, orig, repl, desc, stages in todo:
            t1 = time.time()
            target = os.path.join(copy, path)
            with open(target, "rb") as f:
                pristine = f.read()
            text = pristine.decode()
            where = "%s:%d" % (path, line_of(text, orig))
            result, detail = "MISSED", ""
            try:
                write_now(target, text.replace(orig, repl, 1).encode())
                rc, _ = run_logged(["ninja", "-C", build], log, None)
                if rc != 0:
                    result, detail = "ERROR", "the mutant does not build (see %s)" % log
                else:
                    for k, args in enumerate(stages):
                        failed, _, ran = meson_test(build, args, "mutate-%s-%d" % (mid, k),
                                                    log, o.timeout, o.jobs)
                        if failed:
                            result = "CAUGHT"
                            detail = "%s -- %s" % (failed[0][0], failed[0][1])
                            if len(failed) > 1:
                                detail += " (+%d more: %s)" % (
                                    len(failed) - 1, ", ".join(n for n, _ in failed[1:6]))
                            detail += " [stage %d: meson test %s]" % (k + 1, " ".join(args))
                            break
                    else:
                        detail = "no test failed (%s)" % "; ".join(
                            "meson test " + " ".join(s) for s in stages)
            finally:
                write_now(target, pristine)
            if result == "MISSED":
                missed += 1
            elif result == "ERROR":
                errors += 1
            print("%s %s %s %s %s  [%s, %.0fs]" % (mid, mod, kind.replace(" ", "-"), result,
                                                  detail, where, time.time() - t1), flush=True)
        # leave the build matching the tree again
        run_logged(["ninja", "-C", build], log, None)
    finally:
        if not o.build:
            shutil.rmtree(work, ignore_errors=True)
    print("mutate: %d tried, %d missed, %d not checked, %.0fs"
          % (len(todo), missed, errors, time.time() - t0), flush=True)
    return 1 if missed else 2 if errors else 0


if __name__ == "__main__":
    sys.exit(main())
