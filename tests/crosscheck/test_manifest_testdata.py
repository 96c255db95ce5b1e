# SPDX-License-Identifier: Apache-2.0
# Cross-check: sluicectl manifest on the real TensorFlow-written files vs google.protobuf.
"""For every file of $SLUICE_SHARED_DIR/testdata/files.tsv whose records are Examples or
SequenceExamples: `sluicectl manifest FILE` succeeds; its compression, record type, kinds and
shapes equal an independent inference over the same records (inferref.py, google.protobuf);
what it leaves out is named on stderr; and `sluicectl validate MANIFEST LIST` accepts every
record of the file with it. Skipped, saying so, without the testdata.
"""

import json
import os
import re
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import common  # noqa: E402
import inferref  # noqa: E402

ck = common.Checker("test_manifest_testdata")
TD = common.testdata_dir()
common.protos()
common.sluicectl_path()


def load_tsv():
    rows = []
    with open(os.path.join(TD, "files.tsv")) as f:
        for line in f:
            if line.startswith("#") or not line.strip():
                continue
            name, kind, comp = line.rstrip("\n").split("\t")[:3]
            rows.append((name, kind, comp))
    return rows


def records_scanned(err):
    m = re.search(r"(\d+) records scanned", err)
    return int(m.group(1)) if m else -1


def check_file(tmp, name, kind, comp):
    path = os.path.join(TD, name)
    p = common.run(["manifest", path])
    err = p.stderr.decode("utf-8", "replace")
    if not ck.check(p.returncode == 0, "%s: manifest exit %d: %s" % (name, p.returncode, err)):
        return
    man = json.loads(p.stdout)
    with open(path, "rb") as f:
        frames = common.read_frames(common.decompress(f.read(), comp))
    n = records_scanned(err)
    ck.check(0 < n <= len(frames), "%s: %d records scanned of %d" % (name, n, len(frames)))
    want = inferref.infer([payload for _, payload in frames[:n]])
    ck.check((man["compression"] or "none") == comp,
             "%s: compression %r, want %s" % (name, man["compression"], comp))
    ck.check(man["allow_var_len"] == (kind == "sequence") == want["sequence"],
             "%s: allow_var_len %r (files.tsv: %s)" % (name, man["allow_var_len"], kind))
    got = inferref.manifest_view(man)
    for fname in sorted(set(got) | set(want["features"])):
        ck.check(got.get(fname) == want["features"].get(fname),
                 "%s: feature %r: sluicectl %r, google.protobuf %r"
                 % (name, fname, got.get(fname), want["features"].get(fname)))
    names = [f["name"] for f in man["features"]]
    ck.check(names == sorted(names, key=lambda s: s.encode()), "%s: features sorted" % name)
    for fname, is_list in want["left_out"]:
        ck.check(("left out %s%s:" % ("feature list " if is_list else "", json.dumps(fname)))
                 in err, "%s: %r is named on stderr as left out: %s" % (name, fname, err))
    fixed = sum(1 for f in man["features"] if not f["var_len"] and f["shape"][:1] != [-1])
    var = sum(1 for f in man["features"] if f["shape"][:1] == [-1])
    lists = sum(1 for f in man["features"] if f["var_len"])
    print("%s\t%d\t%d\t%d\t%d\t%d" % (name, n, fixed, var, lists, len(want["left_out"])))

    # validate MANIFEST LIST: every record of the file with the inferred manifest
    mpath = os.path.join(tmp, "m.json")
    lpath = os.path.join(tmp, "list.txt")
    with open(mpath, "wb") as f:
        f.write(p.stdout)
    with open(lpath, "w") as f:
        f.write(path + "\n")
    v = common.run(["validate", mpath, lpath, "--threads", "2"])
    out = v.stdout.decode("utf-8", "replace")
    ck.check(v.returncode == 0 and "result: valid" in out,
             "%s: validate with the inferred manifest: exit %d\n%s%s"
             % (name, v.returncode, out, v.stderr.decode("utf-8", "replace")))


def main():
    rows = load_tsv()
    print("file\trecords\tfixed\tvar\tlists\tleft_out")
    with tempfile.TemporaryDirectory(prefix="sluice-manifest-") as tmp:
        for name, kind, comp in rows:
            if kind not in ("example", "sequence"):
                continue  # corrupt framing, or a payload that is not an Example
            if not os.path.exists(os.path.join(TD, name)):
                ck.check(False, "%s: listed in files.tsv but missing" % name)
                continue
            check_file(tmp, name, kind, comp)
    ck.finish()


main()
