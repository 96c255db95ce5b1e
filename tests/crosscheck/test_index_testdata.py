# SPDX-License-Identifier: Apache-2.0
# sluicectl index over the TensorFlow-written files: counts equal inspect's, offsets the framing's.
"""Copies ../shared/testdata's files into a temporary directory (the shared one is never
written), runs `sluicectl index --json --offsets` over them and checks, per file, the record
count against `sluicectl inspect --json` (one line per record; the not_example file, whose
payloads inspect cannot decode, against the framing alone) and every offset against the
pure-Python framing of common.py. Then --check (fresh), a file rewritten to the same size with
its mtime put back (stale, by ctime), and the corrupt file (an error naming file and offset)."""

import json
import os
import shutil
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import common  # noqa: E402

common.start()
ck = common.Checker("test_index_testdata")
common.sluicectl_path()
td = common.testdata_dir()  # skips with [testdata] where ../shared is absent


def files_tsv():
    out = []
    with open(os.path.join(td, "files.tsv")) as f:
        for line in f:
            if line.startswith("#") or not line.strip():
                continue
            name, kind, comp = line.rstrip("\n").split("\t")[:3]
            out.append((name, kind, comp))
    return out


def json_lines(stdout):
    return [json.loads(x) for x in stdout.decode("utf-8").split("\n") if x]


FILES = files_tsv()
tmp = tempfile.mkdtemp(prefix="sluice-index-")
try:
    good = [(n, k, c) for n, k, c in FILES if k != "corrupt"]
    paths = {}
    for name, kind, comp in good:
        paths[name] = os.path.join(tmp, name)
        shutil.copyfile(os.path.join(td, name), paths[name])

    p = common.run(["index", "--json", "--offsets"] + [paths[n] for n, _, _ in good])
    ck.check(p.returncode == 0, "index exits 0 (%d: %s)" % (p.returncode, p.stderr[-300:]))
    lines = json_lines(p.stdout)
    by_path = {x["path"]: x for x in lines if "path" in x}
    ck.check(os.path.isfile(os.path.join(tmp, ".sluice-index")), "DIR/.sluice-index written")
    total = 0
    for name, kind, comp in good:
        got = by_path.get(paths[name])
        if not ck.check(got is not None, "%s: indexed" % name):
            continue
        with open(paths[name], "rb") as f:
            frames = common.read_frames(common.decompress(f.read(), comp))
        want_offsets = [off for off, _ in frames]
        ck.check(got["compression"] == comp, "%s: compression %s (want %s)" % (
            name, got["compression"], comp))
        ck.check(got["records"] == len(frames), "%s: %d records, framing says %d" % (
            name, got["records"], len(frames)))
        ck.check(got["stride"] == 1 and got["offsets"] == want_offsets,
                 "%s: offsets equal the framing's" % name)
        ck.check(got["payload_bytes"] == sum(len(x) for _, x in frames),
                 "%s: payload bytes" % name)
        total += got["records"]
        if kind == "not_example":
            continue  # inspect cannot decode these payloads: the framing above is the oracle
        rc, recs, err, _ = common.inspect_json(paths[name], kind == "sequence")
        ck.check(rc == 0 and len(recs) == got["records"],
                 "%s: %d records, inspect says %d (rc %d)" % (name, got["records"], len(recs),
                                                              rc))
    tot = [x["total"] for x in lines if "total" in x]
    ck.check(tot and tot[0]["records"] == total and tot[0]["files"] == len(good),
             "total line: %r" % (tot,))
    # the files are scanned on several threads (default: the CPUs): one thread says the same,
    # line for line, and writes the same index
    with open(os.path.join(tmp, ".sluice-index"), "rb") as f:
        many = f.read()
    p1 = common.run(["index", "--json", "--offsets", "--threads", "1"] +
                    [paths[n] for n, _, _ in good])
    with open(os.path.join(tmp, ".sluice-index"), "rb") as f:
        one = f.read()
    p4 = common.run(["index", "--json", "--offsets", "--threads", "4"] +
                    [paths[n] for n, _, _ in good])
    ck.check(p1.returncode == 0 and p1.stdout == p.stdout and p4.stdout == p.stdout,
             "index --threads 1 and 4 print what the default printed")
    ck.check(one == many, "index --threads 1 writes the index the threads wrote")

    p = common.run(["index", "--check", "--json"] + [paths[n] for n, _, _ in good])
    st = [x.get("status") for x in json_lines(p.stdout) if "path" in x]
    ck.check(p.returncode == 0 and st == ["fresh"] * len(good),
             "--check: every file fresh (rc %d)" % p.returncode)

    # same size, mtime put back: only ctime tells
    victim = paths[good[0][0]]
    before = os.stat(victim)
    with open(victim, "rb") as f:
        data = bytearray(f.read())
    deadline = time.monotonic() + common.scaled(5)
    while True:
        data[-1] ^= 0x5A
        with open(victim, "r+b") as f:
            f.write(data)
        os.utime(victim, ns=(before.st_atime_ns, before.st_mtime_ns))
        if os.stat(victim).st_ctime_ns != before.st_ctime_ns or time.monotonic() > deadline:
            break
        time.sleep(0.002)  # poll: ctime moves with the kernel's coarse clock
    after = os.stat(victim)
    ck.check(after.st_size == before.st_size and after.st_mtime_ns == before.st_mtime_ns,
             "rewritten file keeps its size and mtime")
    p = common.run(["index", "--check", "--json", victim, paths[good[1][0]]])
    st = {x["path"]: x for x in json_lines(p.stdout) if "path" in x}
    ck.check(p.returncode == 1, "--check after a rewrite exits 1 (%d)" % p.returncode)
    ck.check(st.get(victim, {}).get("status") == "stale" and
             "ctime" in st.get(victim, {}).get("message", ""),
             "rewritten file is stale by ctime: %r" % st.get(victim))
    ck.check(st.get(paths[good[1][0]], {}).get("status") == "fresh", "the other stays fresh")

    # re-indexing one file keeps the others' fresh entries
    p = common.run(["index", victim])
    p = common.run(["index", "--check"] + [paths[n] for n, _, _ in good])
    ck.check(p.returncode == 0, "after re-indexing one file every entry is fresh (%d)" %
             p.returncode)

    # the corrupt file: an error naming the file and the offset
    bad = [(n, k, c) for n, k, c in FILES if k == "corrupt"]
    for name, _, _ in bad:
        path = os.path.join(tmp, name)
        shutil.copyfile(os.path.join(td, name), path)
        p = common.run(["index", path])
        err = p.stderr.decode("utf-8", "replace")
        ck.check(p.returncode == 1 and name in err and "at offset" in err,
                 "%s: exit 1 naming the file and offset (%d: %s)" % (name, p.returncode,
                                                                      err[-200:]))
    ck.check(not os.path.exists(os.path.join(td, ".sluice-index")),
             "the shared testdata directory is not written")
finally:
    shutil.rmtree(tmp, ignore_errors=True)
ck.finish()
