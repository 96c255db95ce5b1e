# SPDX-License-Identifier: Apache-2.0
"""Kept state that cannot be forged (issue 37 item 3; daemon/keep.h).

A record sluiced keeps in its state directory says whose rights a pipeline is made again with,
so nothing anyone else wrote may be believed: a state directory another user could write (or
whose key others may read) is not used; a record edited since it was written, or copied from
another state directory, does not carry this directory's MAC and is ignored (the reader gets
ESTALE, as for a lost position, never data read with rights it did not have); the untouched
record resumes the reader exactly (the control).
"""

import errno
import json
import os
import pwd
import shutil
import signal
import stat

import pytest

from conftest import image_spec, read_labels, run_reference, shuffled, test_daemon, wait_for

import sluice

OPTS = ["--ring-slots", "8"]


def _spec(data):
    return image_spec(data, name="kept", epochs=2, batch=2, **shuffled(9))  # 60 batches


def _records(sd):
    return sorted(f for f in os.listdir(sd) if f.endswith(".pos"))


def _log(tmp):
    with open(os.path.join(tmp, "sluiced.log")) as f:
        return f.read()


def _kill_mid_stream(tmp_path, data, sd, tamper):
    """A reader mid-stream, sluiced killed (-9), tamper(sd) while it is down, sluiced again:
    (what the reader read before, after or the error it got, the reference)."""
    spec = _spec(data)
    want = [(b["seq"], b["tensors"]["label"]["values"], False)
            for b in run_reference(tmp_path, spec, "label")]
    tmp, conf = str(tmp_path), str(tmp_path / "conf")
    os.makedirs(conf, exist_ok=True)
    d = test_daemon.Daemon(tmp, conf, OPTS + ["--state-dir", sd])
    d2 = None
    try:
        with sluice.attach(spec=spec, socket=d.sock) as r:
            head = read_labels(r, 20)
            wait_for("a kept record", lambda: _records(sd))
            d.stop(signal.SIGKILL)
            tamper(sd)
            d2 = test_daemon.Daemon(tmp, conf, OPTS + ["--state-dir", sd])
            seen = []
            try:
                read_labels(r, out=seen)
                err = None
            except sluice.SluiceError as e:
                err = e
    finally:
        if d2:
            d2.stop()
    return head, seen, err, want


def test_untouched_record_resumes(tmp_path, data):
    sd = str(tmp_path / "state")
    head, tail, err, want = _kill_mid_stream(tmp_path, data, sd, lambda sd: None)
    assert err is None and head + tail == want
    st = os.stat(os.path.join(sd, "key"))
    assert stat.S_IMODE(st.st_mode) == 0o600 and st.st_size == 32


def _edit_owner(sd):
    """What a forger would do: the record's owner set to -1 (the daemon's own rights)."""
    for f in _records(sd):
        p = os.path.join(sd, f)
        with open(p) as fh:
            rec_line, mac_line = fh.read().splitlines()
        rec = json.loads(rec_line)
        rec["owner"] = -1
        with open(p, "w") as fh:
            fh.write(json.dumps(rec, separators=(",", ":")) + "\n" + mac_line + "\n")


def test_edited_record_is_ignored(tmp_path, data):
    sd = str(tmp_path / "state")
    head, seen, err, want = _kill_mid_stream(tmp_path, data, sd, _edit_owner)
    assert err is not None and err.errno == errno.ESTALE, err
    assert head + seen == want[:len(head) + len(seen)]  # nothing again, nothing made up
    log = _log(str(tmp_path))
    assert "its MAC does not check" in log
    assert "made again from its kept record" not in log


def test_record_of_another_state_dir_is_ignored(tmp_path, data):
    other, empty = str(tmp_path / "other"), str(tmp_path / "conf-empty")
    os.mkdir(other, 0o700)
    os.mkdir(empty)
    # another state directory, with a key of its own: a record it wrote is not believed here
    d = test_daemon.Daemon(str(tmp_path), empty, ["--state-dir", other])
    d.stop()
    assert os.path.exists(os.path.join(other, "key"))

    def plant(sd):
        for f in _records(sd):
            shutil.copyfile(os.path.join(sd, f), os.path.join(other, f))
            os.chmod(os.path.join(other, f), 0o600)
            os.unlink(os.path.join(sd, f))
        shutil.copyfile(os.path.join(other, "key"), os.path.join(sd, "key.theirs"))
    sd = str(tmp_path / "state")
    head, seen, err, want = _kill_mid_stream(tmp_path, data, sd, plant)
    assert err is not None and err.errno == errno.ESTALE, err  # its own record was taken away
    # the records moved to the other directory: that sluiced ignores them (another key)
    d = test_daemon.Daemon(str(tmp_path), empty, ["--state-dir", other])
    d.stop()
    log = _log(str(tmp_path))
    assert log.count("its MAC does not check") >= 1 and not _records(other)


@pytest.mark.parametrize("how", ["group-writable", "owned-by-nobody", "key-readable"])
def test_state_dir_others_could_write_is_not_used(tmp_path, how):
    sd = str(tmp_path / "state")
    os.mkdir(sd, 0o700)
    if how == "group-writable":
        os.chmod(sd, 0o770)
        want = "with mode 0770: another user could write"
    elif how == "owned-by-nobody":
        if os.geteuid() != 0:
            pytest.skip("[nonroot] chown to another user needs root")
        os.chown(sd, pwd.getpwnam("nobody").pw_uid, -1)
        want = "is owned by uid %d" % pwd.getpwnam("nobody").pw_uid
    else:
        with open(os.path.join(sd, "key"), "wb") as f:
            f.write(os.urandom(32))
        os.chmod(os.path.join(sd, "key"), 0o644)
        want = "key: not a file of 32 bytes that sluiced's uid"
    conf = str(tmp_path / "conf")
    os.makedirs(conf)
    d = test_daemon.Daemon(str(tmp_path), conf, ["--state-dir", sd])
    d.stop()
    log = _log(str(tmp_path))
    assert "state directory %s: not used:" % sd in log and want in log, log
    if how != "key-readable":
        assert not os.path.exists(os.path.join(sd, "key"))
