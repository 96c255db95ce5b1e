"""sluiced as systemd runs it: where it listens and where clients look without --socket
(README, "The service"), and the notifications its unit relies on (Type=notify, WatchdogSec=).

systemd gives the unit's runtime directories in RUNTIME_DIRECTORY, ':'-separated when there are
several: sluiced listens in the first, and sluicectl (libsluice) finds it there with the same
environment and no --socket. SLUICE_SOCKET comes before both. Output: TAP, for meson.
"""

import os
import signal
import socket
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


def notifications(tmp, conf, extra_env, want_watchdogs):
    """sluiced with NOTIFY_SOCKET and WATCHDOG_USEC=200 ms: what it says, in order, until
    want_watchdogs pings came (or, want_watchdogs 0, for one second: 5 periods), then SIGTERM."""
    path = os.path.join(tmp, "notify")
    if os.path.exists(path):
        os.unlink(path)
    ns = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    ns.bind(path)
    env = dict(os.environ, NOTIFY_SOCKET=path, WATCHDOG_USEC="200000", **extra_env)
    p = subprocess.Popen([os.environ["SLUICED"], "--no-config", "--socket", os.path.join(tmp, "wd.sock"),
                          "--config-dir", conf, "--workers", "1"], env=env,
                         stderr=subprocess.DEVNULL)
    got, pings = [], 0
    try:
        ns.settimeout(10)
        deadline = time.monotonic() + (10 if want_watchdogs else 1.0)
        while time.monotonic() < deadline and (not want_watchdogs or pings < want_watchdogs):
            ns.settimeout(max(0.01, deadline - time.monotonic()))
            try:
                msg = ns.recv(4096).decode()
            except socket.timeout:
                break
            got.append(msg)
            pings += msg == "WATCHDOG=1"
    finally:
        p.send_signal(signal.SIGTERM)
        p.wait(30)
        ns.settimeout(5)
        try:
            got.append(ns.recv(4096).decode())
        except socket.timeout:
            pass
        ns.close()
    return got, pings


def main():
    for v in ("SLUICED", "SLUICECTL"):
        if not os.environ.get(v):
            td.common.skip("[env] %s is not set (run through meson test)" % v)
    with tempfile.TemporaryDirectory(prefix="sluice-sock-") as tmp:
        first, second, conf = (os.path.join(tmp, x) for x in ("run1", "run2", "conf"))
        for x in (first, second, conf):
            os.makedirs(x)
        env = {k: v for k, v in os.environ.items()
               if k not in ("SLUICE_SOCKET", "XDG_RUNTIME_DIR", "NOTIFY_SOCKET")}
        env["RUNTIME_DIRECTORY"] = first + ":" + second
        log = open(os.path.join(tmp, "sluiced.log"), "w")
        p = subprocess.Popen([os.environ["SLUICED"], "--no-config", "--config-dir", conf, "--workers", "1"],
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
        got, pings = notifications(tmp, conf, {}, 3)
        check(got[:1] and got[0].startswith("READY=1") and pings >= 3 and
              got[-1] == "STOPPING=1",
              "notify: READY=1, then WATCHDOG=1 every half period, STOPPING=1 at SIGTERM (%s)" %
              (got[:3] + got[-1:]))
        got, pings = notifications(tmp, conf, {"WATCHDOG_PID": "1"}, 0)
        check(got[:1] and got[0].startswith("READY=1") and pings == 0,
              "notify: no WATCHDOG=1 when WATCHDOG_PID names another process (%s)" % got)
    td.common.finish()


if __name__ == "__main__":
    sys.exit(main())
