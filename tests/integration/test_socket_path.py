"""Where sluiced listens and where clients look without --socket (README, "The service").

systemd gives the unit's runtime directories in RUNTIME_DIRECTORY, ':'-separated when there are
several: sluiced listens in the first, and sluicectl (libsluice) finds it there with the same
environment and no --socket. SLUICE_SOCKET comes before both. Exit 0 pass, 1 fail, 77 skip.
"""

import os
import signal
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import test_daemon as td  # noqa: E402
from test_daemon import check  # noqa: E402


def wait_for(path, p, seconds=30):
    deadline = time.monotonic() + seconds
    while not os.path.exists(path) and p.poll() is None and time.monotonic() < deadline:
        time.sleep(0.02)  # polls the condition: the socket file
    return os.path.exists(path)


def ctl_env(env, *args):
    return subprocess.run([os.environ["SLUICECTL"]] + list(args), env=env, capture_output=True,
                          text=True, timeout=60)


def main():
    for v in ("SLUICED", "SLUICECTL"):
        if not os.environ.get(v):
            td.common.skip("%s is not set (run through meson test)" % v)
    with tempfile.TemporaryDirectory(prefix="sluice-sock-") as tmp:
        first, second, conf = (os.path.join(tmp, x) for x in ("run1", "run2", "conf"))
        for x in (first, second, conf):
            os.makedirs(x)
        env = {k: v for k, v in os.environ.items()
               if k not in ("SLUICE_SOCKET", "XDG_RUNTIME_DIR", "NOTIFY_SOCKET")}
        env["RUNTIME_DIRECTORY"] = first + ":" + second
        log = open(os.path.join(tmp, "sluiced.log"), "w")
        p = subprocess.Popen([os.environ["SLUICED"], "--config-dir", conf, "--workers", "1"],
                             env=env, stderr=log)
        try:
            sock = os.path.join(first, "sluice.sock")
            check(wait_for(sock, p), "RUNTIME_DIRECTORY=A:B: sluiced listens on A/sluice.sock")
            check(not os.path.exists(os.path.join(second, "sluice.sock")) and
                  not os.path.exists(first + ":" + second),
                  "... and nowhere else (not on the unsplit list)")
            r = ctl_env(env, "list")
            check(r.returncode == 0, "sluicectl without --socket finds it the same way (%s)" %
                  r.stderr.strip())
            r = ctl_env(dict(env, SLUICE_SOCKET=os.path.join(tmp, "nowhere.sock")), "list")
            check(r.returncode == 1 and "nowhere.sock" in r.stderr,
                  "SLUICE_SOCKET comes first (%s)" % r.stderr.strip()[-200:])
        finally:
            p.send_signal(signal.SIGTERM)
            rc = p.wait(30)
        check(rc == 0 and not os.path.exists(os.path.join(first, "sluice.sock")),
              "SIGTERM: sluiced exits 0 and removes its socket (exit %s)" % rc)
    if td.FAILS:
        print("%d checks failed" % len(td.FAILS))
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
