# SPDX-License-Identifier: Apache-2.0
"""Run pytest files and report each test to meson in TAP (meson's protocol: 'tap').

Usage: run.py [--needs VAR] PYTEST_ARGS...

Every test is a case meson counts: passed, failed, or skipped with pytest's reason (which
starts with its tag, "[gpu] ...": the rule tools/test_summary.py applies to what a machine may
skip). pytest's own report goes to stderr. The whole run is one skipped case when pytest or
numpy is missing ([deps]), when SLUICE_LIBRARY cannot be loaded into this interpreter (a
sanitizer build's library needs the sanitizer runtime preloaded: [sanitizer]), or, with
--needs VAR, when the environment has no VAR ([peer]: an optional peer's venv). A run that
collected no test, or that pytest ended in an error, fails.
"""

import os
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "crosscheck"))
import common  # noqa: E402


def _reason(report):
    r = report.longrepr
    if isinstance(r, tuple) and len(r) == 3:
        r = r[2]
    r = str(r)
    return r[len("Skipped: "):] if r.startswith("Skipped: ") else r


class TapPlugin:
    """A case per test item: not ok if a phase failed, a skip (with pytest's reason) if setup
    or the call skipped, else ok. A collection error is a failed case."""

    def __init__(self):
        self.state = {}
        self.collected = 0

    def pytest_collectreport(self, report):
        if report.failed:
            common.check(False, "collect %s: %s" % (report.nodeid, str(report.longrepr)[-300:]))

    def pytest_collection_modifyitems(self, items):
        self.collected = len(items)

    def pytest_runtest_logreport(self, report):
        st = self.state.setdefault(report.nodeid, {"failed": None, "skipped": None})
        if report.failed and st["failed"] is None:
            st["failed"] = "%s failed" % report.when
        elif report.skipped and st["skipped"] is None:
            if hasattr(report, "wasxfail"):
                st["failed"] = "xfail is not used here: %s" % report.wasxfail
            else:
                st["skipped"] = _reason(report)

    def pytest_runtest_logfinish(self, nodeid, location):
        st = self.state.pop(nodeid, {"failed": None, "skipped": None})
        name = nodeid.split("::", 1)[-1]
        if st["failed"]:
            common.check(False, "%s (%s)" % (name, st["failed"]))
        elif st["skipped"] is not None:
            common.skip_case(name, st["skipped"])
        else:
            common.check(True, name)


def main():
    common.start()
    args = sys.argv[1:]
    if args[:1] == ["--needs"]:
        if not os.environ.get(args[1]):
            common.skip("[peer] %s is not set (tools/peers/venv.sh makes it)" % args[1])
        args = args[2:]
    for mod, pkg in (("pytest", "python3-pytest"), ("numpy", "python3-numpy")):
        try:
            __import__(mod)
        except ImportError:
            common.skip("[deps] %s is not installed (Debian: %s)" % (mod, pkg))
    lib = os.environ.get("SLUICE_LIBRARY")
    if lib:
        # in a child: a sanitizer runtime that is not preloaded aborts the process
        r = subprocess.run([sys.executable, "-c", "import ctypes, sys; ctypes.CDLL(sys.argv[1])",
                            lib], capture_output=True, text=True)
        if r.returncode != 0:
            common.skip("[sanitizer] %s cannot be loaded into this python: %s" % (
                lib, (r.stderr.strip().splitlines() or ["?"])[-1][:300]))
    import pytest
    plugin = TapPlugin()
    rc = pytest.main(args, plugins=[plugin])
    # 0: all passed, 1: some failed (each is a case already); anything else is an error of
    # the run itself (interrupted, internal error, usage, no test collected)
    if rc not in (0, 1):
        common.check(False, "pytest ended with exit status %d (%s)" % (
            rc, {2: "interrupted", 3: "internal error", 4: "usage error",
                 5: "no test was collected"}.get(int(rc), "?")))
    common.finish("pytest " + " ".join(a for a in args if a.endswith(".py")))


if __name__ == "__main__":
    main()
