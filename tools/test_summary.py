#!/usr/bin/python3
# SPDX-License-Identifier: Apache-2.0
"""What the test runs of tools/test.sh ran: every case, every skip with its reason, and
whether this machine should have needed each skip.

Usage: tools/test_summary.py [--ci] [--peer-missing] RUN...
  RUN: LABEL=LOG[:TAG,...]  a meson testlog (meson-logs/testlog-LABEL.json), with the tags
       that run may skip beside the machine's (the sanitizer runs: "sanitizer")

Every test speaks TAP to meson (docs/testing.md): a case is an "ok"/"not ok" line, a skip
"ok N - name # SKIP [tag] reason", a test that could run nothing "1..0 # SKIP [tag] reason"; a
test that speaks no TAP (exit-code tests: the fuzz corpora, the headers) is one case. A skip
is allowed only when its tag names something this machine lacks (the rule, below); any other
skip fails the summary, and so the run. Prints a line per run, the skips grouped by reason,
and last "sluice: N passed, N failed, N skipped".

The rule, tag by tag (a tag not listed is never allowed: a missing Debian package the setup
installs [deps], an unset test variable [env], a missing user [users], no tag at all):
  testdata     ../shared/testdata is absent, and this is not CI (CI has it: --ci)
  io_uring     the kernel refuses io_uring_setup here
  affinity     sched_setaffinity is refused here
  cpu          the CPU lacks an instruction a case needs (SSE4.2's crc32)
  cuda         no CUDA toolkit runtime under /usr/local/cuda
  gpu          no NVIDIA device; gpu-present: there is one (the fake runtime's cases)
  root         not running as root; nonroot: running as root (tests/tap_cmocka.py
               --as-nobody runs those cases as nobody in the same run)
  peer         the peers' venv could not be made (--peer-missing)
  sanitizer    only in the runs given the tag (a sanitizer's libsluice.so in python)
"""

import collections
import ctypes
import glob
import json
import os
import re
import sys

TAP = re.compile(r"((?:not )?ok)\b\s*(\d+)?\s*(?:- )?([^#]*?)\s*(?:#\s*SKIP\S*\s*(.*))?$")
PLAN_SKIP = re.compile(r"1\.\.0\s*#\s*SKIP\S*\s*(.*)$")
TAG = re.compile(r"\[([a-z_-]+)\]")


def io_uring_works():
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        params = ctypes.create_string_buffer(120)
        fd = libc.syscall(425, 1, params)  # io_uring_setup (the same number on every arch)
        if fd >= 0:
            os.close(fd)
            return True
    except OSError:
        pass
    return False


def affinity_works():
    try:
        cpus = os.sched_getaffinity(0)
        os.sched_setaffinity(0, {min(cpus)})
        os.sched_setaffinity(0, cpus)
        return True
    except OSError:
        return False


def has_sse42():
    try:
        with open("/proc/cpuinfo") as f:
            flags = f.read()
    except OSError:
        return True
    return "sse4_2" in flags or not re.search(r"^flags\s*:", flags, re.M)


def testdata_present():
    shared = os.environ.get("SLUICE_SHARED_DIR") or os.path.join(
        os.path.dirname(os.path.abspath(__file__)), "..", "..", "shared")
    return os.path.isfile(os.path.join(shared, "testdata", "files.tsv"))


def machine_allows(ci, peer_missing):
    """The tags this machine may skip, each with why."""
    gpu = bool(glob.glob("/dev/nvidia[0-9]*"))
    allow = {}
    if not ci and not testdata_present():
        allow["testdata"] = "no ../shared/testdata"
    if not io_uring_works():
        allow["io_uring"] = "io_uring_setup is refused"
    if not affinity_works():
        allow["affinity"] = "sched_setaffinity is refused"
    if not has_sse42():
        allow["cpu"] = "no SSE4.2"
    if not os.path.exists("/usr/local/cuda/lib64/libcudart.so"):
        allow["cuda"] = "no CUDA toolkit"
    allow["gpu-present" if gpu else "gpu"] = "an NVIDIA device" if gpu else "no NVIDIA device"
    if os.geteuid() == 0:
        allow["nonroot"] = "root: those cases run as nobody too"
    else:
        allow["root"] = "not root"
    if peer_missing:
        allow["peer"] = "the peers' venv could not be made"
    return allow


def read_run(path):
    """[(test name, meson result, [(kind, case name, reason)])]: kind ok, fail, skip."""
    tests = []
    with open(path) as f:
        for line in f:
            t = json.loads(line)
            cases = []
            tap = False
            for ln in (t.get("stdout") or "").splitlines():
                ln = ln.rstrip()
                m = PLAN_SKIP.match(ln)
                if m:
                    cases.append(("skip", "(all)", m.group(1).strip()))
                    tap = True
                    continue
                m = TAP.match(ln)
                if not m:
                    continue
                tap = True
                if m.group(1) == "not ok":
                    cases.append(("fail", m.group(3), None))
                elif m.group(4) is not None:
                    cases.append(("skip", m.group(3), m.group(4).strip()))
                else:
                    cases.append(("ok", m.group(3), None))
            res = t["result"]
            if not tap:
                # an exit-code test: one case; a meson skip (exit 77) says why on stdout
                why = next((ln.split(":", 1)[-1].strip() for ln in (t.get("stdout") or "")
                            .splitlines() if ln.upper().startswith("SKIP")), "")
                kind = {"OK": "ok", "SKIP": "skip"}.get(res, "fail")
                cases = [(kind, "(all)", why if kind == "skip" else None)]
            elif res not in ("OK", "SKIP") and not any(k == "fail" for k, _, _ in cases):
                cases.append(("fail", "(the test itself: %s)" % res, None))
            tests.append((t["name"].split(" / ")[-1], res, cases))
    return tests


def main():
    args = sys.argv[1:]
    ci = "--ci" in args
    peer_missing = "--peer-missing" in args
    runs = [a for a in args if not a.startswith("--")]
    if not runs:
        print(__doc__, file=sys.stderr)
        return 2
    allow = machine_allows(ci, peer_missing)
    totals = collections.Counter()
    skips = collections.defaultdict(list)  # reason -> ["label: test", ...]
    bad = []
    print("\n==== what ran")
    for run in runs:
        label, _, rest = run.partition("=")
        path, _, extra = rest.partition(":")
        run_allow = dict(allow)
        for tag in filter(None, extra.split(",")):
            run_allow[tag] = "this run (%s)" % label
        if not os.path.exists(path):
            print("%s: no test log at %s" % (label, path))
            bad.append("%s: no test log" % label)
            totals["failed"] += 1
            continue
        tests = read_run(path)
        c = collections.Counter(k for _, _, cases in tests for k, _, _ in cases)
        mres = collections.Counter(r for _, r, _ in tests)
        print("%-8s %d tests (%s); %d cases: %d passed, %d failed, %d skipped" % (
            label, len(tests), ", ".join("%d %s" % (n, r) for r, n in sorted(mres.items())),
            sum(c.values()), c["ok"], c["fail"], c["skip"]))
        totals["passed"] += c["ok"]
        totals["failed"] += c["fail"]
        totals["skipped"] += c["skip"]
        for name, _, cases in tests:
            for kind, case, why in cases:
                if kind == "fail":
                    print("  FAILED %s: %s" % (name, case))
                if kind != "skip":
                    continue
                skips[why or "(no reason given)"].append("%s: %s" % (label, name))
                m = TAG.match(why or "")
                tag = m.group(1) if m else None
                if tag not in run_allow:
                    bad.append("%s: %s: %s: %s" % (label, name, case, why or "(no reason)"))
    if skips:
        print("\n==== skipped, by reason")
        for why, where in sorted(skips.items(), key=lambda kv: -len(kv[1])):
            n = collections.Counter(where)
            print("%4d  %s\n      in %s" % (len(where), why, ", ".join(
                "%s (%d)" % (w, k) if k > 1 else w for w, k in sorted(n.items()))))
    print("\nthis machine may skip: %s" % (", ".join(
        "[%s] %s" % kv for kv in sorted(allow.items())) or "nothing"))
    if bad:
        print("\n==== skips this machine should not need (tools/test_summary.py says the rule)")
        for b in bad[:50]:
            print("  " + b)
        if len(bad) > 50:
            print("  ... and %d more" % (len(bad) - 50))
    print("\nsluice: %d passed, %d failed, %d skipped" % (
        totals["passed"], totals["failed"], totals["skipped"]))
    return 1 if bad or totals["failed"] else 0


if __name__ == "__main__":
    sys.exit(main())
