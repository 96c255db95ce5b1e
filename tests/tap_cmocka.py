# SPDX-License-Identifier: Apache-2.0
"""Runs a cmocka test program and hands meson its cases as TAP (meson's protocol: 'tap').

Usage: tap_cmocka.py [--as-nobody] PROGRAM [ARGS...]

--as-nobody: when run as root, the program runs as the user nobody (setpriv), from a copy in a
directory of its own that nobody may read: the cases that check permissions, which root does
not meet, run in the same CI run as the rest (as another user, they run as they are).

Each case is then a subtest meson counts, skips included, with the reason in its log and in
testlog.junit.xml (tools/test_summary.py reads them there). cmocka 1.1.5 writes TAP itself
(CMOCKA_MESSAGE_OUTPUT=TAP), but reports a skipped case as "not ok N # SKIP name", which TAP
(and meson) reads as a failure; here it becomes "ok N - name # SKIP reason", the reason being
the "# skip: ..." line the case printed before it skipped (tests/unit/skip.h). Lines that are
not TAP become TAP comments. A program that exits 77 without a case (nothing could run) is
"1..0 # SKIP reason"; any other non-zero exit is passed on, and meson reports an error.
"""

import os
import pwd
import re
import shutil
import subprocess
import sys
import tempfile

TAP = re.compile(r"(ok|not ok) (\d+)(?: - (.*?))?(?: # SKIP (.*))?$")
PLAN = re.compile(r"1\.\.\d+$")


def main():
    if len(sys.argv) < 2:
        print("usage: tap_cmocka.py PROGRAM [ARGS...]", file=sys.stderr)
        return 2
    cmd = sys.argv[1:]
    env = dict(os.environ, CMOCKA_MESSAGE_OUTPUT="TAP")
    copy = None
    if cmd[0] == "--as-nobody":
        cmd = cmd[1:]
        if os.geteuid() == 0:
            nobody = pwd.getpwnam("nobody")  # Debian's base-passwd has it
            copy = tempfile.mkdtemp(prefix="sluice-as-nobody-")
            os.chmod(copy, 0o755)
            prog = os.path.join(copy, os.path.basename(cmd[0]))
            shutil.copy2(cmd[0], prog)
            cmd = ["setpriv", "--reuid", str(nobody.pw_uid), "--regid", str(nobody.pw_gid),
                   "--clear-groups", "--", prog] + cmd[1:]
            env["HOME"] = "/nonexistent"
            env["TMPDIR"] = "/tmp"
    try:
        return run(cmd, env)
    finally:
        if copy:
            shutil.rmtree(copy, ignore_errors=True)


def run(cmd, env):
    p = subprocess.Popen(cmd, stdout=subprocess.PIPE, env=env, text=True,
                         errors="replace")
    reason = None  # the last "# skip:" line, for the next skipped case
    cases = 0
    out = sys.stdout
    for line in p.stdout:
        line = line.rstrip("\n")
        m = TAP.match(line)
        if line.startswith("# skip: "):
            reason = line[len("# skip: "):].strip()
            out.write(line + "\n")
        elif m and m.group(4) is not None:
            # cmocka: "not ok N # SKIP name" (the name comes where the reason would)
            name = m.group(4).strip()
            out.write("ok %s - %s # SKIP %s\n" % (
                m.group(2), name, reason or "(the case gave no reason: use SL_SKIP)"))
            reason = None
            cases += 1
        elif m:
            out.write(line + "\n")
            cases += 1
        elif PLAN.match(line):
            out.write(line + "\n")
        else:
            out.write("# " + line + "\n" if line else "#\n")
        out.flush()
    rc = p.wait()
    if rc == 77 and cases == 0:
        out.write("1..0 # SKIP %s\n" % (reason or "the program exited 77 and said no more"))
        return 0
    if rc == 77:
        return 0  # every case skipped, and each said so above
    if rc < 0:
        out.write("Bail out! killed by signal %d\n" % -rc)
        return 1
    return rc


if __name__ == "__main__":
    sys.exit(main())
