#!/usr/bin/python3
# SPDX-License-Identifier: Apache-2.0
"""sluice against tf.data, DALI and the tfrecord reader: the same pipelines on the same files,
an epoch each into a Python loop (issue 17). Run by tools/bench/peers.sh, which makes the
peers' venv and builds nothing; by hand:

    /usr/bin/python3 tools/bench/peers.py --build build-rel --venv-python VENV/bin/python
        --tfrecord-path DIR [--quick] [--repeat N] [--only ctr,image,seq,imagenet]
        [--peers tfdata,dali,tfrecord] [--data-root DIR]

Pipelines (one epoch, the same batch size, shuffle buffer and files on every side; datasets
from `sluicectl gen`, cached under --data-root):
- ctr: `gen ctr` (13 float + 26 int64 + label), batches of 1024, record shuffle.
- image: `gen image` (SequenceExamples: ~16 KB bytes + label in the context, boxes [-1, 4] as
  a feature list), batches of 64, shuffle.
- seq: `gen seq` (SequenceExamples: length and id in the context, tokens [-1, 4] and weights
  [-1] as feature lists), batches of 32, shuffle.
- imagenet: `gen jpeg`, the ResNet-50 training recipe (decode, random resized crop 224, flip,
  normalize to float32), batches of 64, shuffle. Against tf.data sluice decodes with the fast
  IDCT and writes HWC, as tf.data does; against DALI and Pillow the accurate IDCT and CHW.

Systems, each run in processes of its own, alternated run by run (tools/bench/peers_child.py):
sluice (a fresh sluiced started when the Python reader has its imports done; CPU: the reader's
and the daemon's), tf.data (the performance guide's program: interleave, shuffle, batch,
vectorized parse, prefetch, all AUTOTUNE; images decoded in a map before batching), DALI
(fn.readers.tfrecord with tfrecord2idx's index, CPU only, num_threads = cores), the tfrecord
package's MultiTFRecordDataset under a DataLoader (num_workers = cores, each worker half the
shuffle buffer). Every side delivers every tensor as numpy; each run's records and its rows and
elements per tensor are checked against the epoch and against sluice's (a mismatch stops the
benchmark).

Prints `bench=peer_run ...` per run, per pair the medians (ranges in brackets in the table)

    bench=peer pipeline=P peer=X sluice_per_s=... peer_per_s=... speedup=...
        sluice_cpu_us=... peer_cpu_us=... cpu_ratio=...

(speedup: records/s sluice / peer; cpu_ratio: CPU µs per record peer / sluice, i.e. sluice's
records per CPU-second over the peer's; also the median start-up, `*_first_batch_s`, and the same
spec in process, `sluicectl run`: `sluice_inproc_per_s`, `sluice_inproc_cpu_us`), `bench=peer ... status=unsupported reason=...` where a
peer cannot express a pipeline (`status=unavailable` where it could not be imported here), and a table at the end.
"""

import argparse
import json
import os
import shutil
import statistics
import resource
import subprocess
import sys
import tempfile
import time

from pyharness import run_child, run_sluice, train_steps

HERE = os.path.dirname(os.path.abspath(__file__))
CTR = (["dense%d" % i for i in range(13)] + ["sparse%d" % i for i in range(26)] + ["label"])

# name: gen kind, batch, (records, shuffle buffer) full and --quick, features (from, to),
# the peers that cannot express it and why
PIPELINES = {
    "ctr": {"gen": "ctr", "batch": 1024, "full": (300000, 100000), "quick": (20000, 5000),
            "features": [(n, n) for n in CTR]},
    "image": {"gen": "image", "batch": 64, "full": (200000, 10000), "quick": (4000, 1000),
              "features": [("image", "image"), ("label", "label"), ("bbox", "bbox")]},
    "seq": {"gen": "seq", "batch": 32, "full": (200000, 10000), "quick": (10000, 1000),
            "features": [("length", "length"), ("id", "id"), ("tokens", "tokens"),
                         ("weights", "weights")],
            "cannot": {"dali": "DALI's TFRecord reader parses tf.Example only: no "
                               "SequenceExample feature lists"}},
    "imagenet": {"gen": "jpeg", "batch": 64, "full": (3000, 1000), "quick": (256, 100),
                 "features": [("image/encoded", "image"), ("image/class/label", "label")]},
}
# what a peer delivers where it cannot deliver all (sluice then delivers the same)
PARTIAL = {("image", "dali"): (["image", "label"], "image + label only: the boxes are a "
                                                   "SequenceExample feature list, which DALI "
                                                   "cannot read")}
SEED = 7


def gen_data(ctl, venv_python, root, kind, records, files):
    """The dataset and its tfrecord2idx index, made once and kept under root."""
    d = os.path.join(root, "%s-%d-f%d-s%d" % (kind, records, files, SEED))
    idx = d + ".idx"
    if not os.path.exists(os.path.join(d, "__manifest__.json")):
        tmp = d + ".tmp"
        shutil.rmtree(tmp, ignore_errors=True)
        subprocess.run([ctl, "gen", kind, tmp, "--files", str(files), "--records", str(records),
                        "--seed", str(SEED)], check=True, stdout=subprocess.DEVNULL)
        shutil.rmtree(d, ignore_errors=True)
        os.rename(tmp, d)
        shutil.rmtree(idx, ignore_errors=True)
    names = sorted(f for f in os.listdir(d) if f.endswith(".tfrecords"))
    if not os.path.isdir(idx):
        tmp = idx + ".tmp"
        shutil.rmtree(tmp, ignore_errors=True)
        os.makedirs(tmp)
        t2i = os.path.join(os.path.dirname(venv_python), "tfrecord2idx")  # DALI's
        for n in names:
            subprocess.run([t2i, os.path.join(d, n), os.path.join(tmp, n[:-10] + ".idx")],
                           check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        os.rename(tmp, idx)
    paths = [os.path.join(d, n) for n in names]
    for path in paths:  # into the page cache: whoever runs first must not read it from disk
        with open(path, "rb") as f:
            while f.read(1 << 24):
                pass
    return d, paths, [os.path.join(idx, n[:-10] + ".idx") for n in names]


def sluice_spec(name, p, data, nfiles, shuffle, features, variant, knobs="fixed"):
    feats = [(f, t) for f, t in p["features"] if t in features]
    spec = {"name": name, "type": "independent", "args": {
        "dataset": {"type": "dir", "args": {"data_dir": data}},
        "target_batch_size": p["batch"], "drop_remainder": False, "epochs": 1,
        "num_parallel_reads": nfiles, "num_parallel_parses": "auto",
        "num_read_buffer_bytes": 1 << 20, "num_prefetch": 8,
        "shuffle": True, "num_shuffle_buffer_elements": shuffle,
        "num_filenames_shuffle_buffer": nfiles, "num_mix_files": nfiles, "seed": SEED,
        "primary_features": [{"from_name": f, "to_name": t} for f, t in feats]}}
    if p["gen"] == "jpeg":
        if variant == "tfdata":  # tf.io.decode_jpeg's fast IDCT, images HWC as TensorFlow's
            steps = train_steps(dct_method="fast", layout="HWC")
        else:  # Pillow's and DALI's accurate IDCT, CHW as torchvision's and DALI's
            steps = train_steps()
        spec["args"]["processing_steps"] = steps
        spec["args"]["num_prefetch"] = 2  # batches of 64 float images are 38.5 MB
    if knobs == "auto":  # sluiced's tuner sets them, as AUTOTUNE does tf.data's (issue 20)
        spec["args"]["num_prefetch"] = spec["args"]["num_read_buffer_bytes"] = "auto"
    return spec


def run_inproc(ctl, tmp, spec):
    """The same spec in process, without a daemon or Python: `sluicectl run` (the engine on
    its pool, every batch's layout checked, a line per batch). Wall and CPU of the process,
    its start included."""
    path = os.path.join(tmp, "inproc.json")
    with open(path, "w") as f:
        json.dump(spec, f)
    c0, t0 = children_cpu(), time.perf_counter()
    r = subprocess.run([ctl, "run", path], capture_output=True, text=True)
    wall, cpu = time.perf_counter() - t0, children_cpu() - c0
    if r.returncode != 0:
        raise SystemExit("peers: sluicectl run failed: %s" % r.stderr[-2000:])
    total = dict(kv.split("=", 1) for kv in r.stdout.strip().splitlines()[-1].split()[1:])
    return {"records": int(total["rows"]), "wall_s": wall, "cpu_s": cpu}


def children_cpu():
    c = resource.getrusage(resource.RUSAGE_CHILDREN)  # the processes run and reaped so far
    return c.ru_utime + c.ru_stime


def check(what, out, records, want_tensors=None):
    if out["records"] != records:
        raise SystemExit("peers: %s delivered %d records, the epoch has %d" % (
            what, out["records"], records))
    if want_tensors is not None and out["tensors"] != want_tensors:
        raise SystemExit("peers: %s delivered tensors (rows, elements) %s, sluice %s" % (
            what, json.dumps(out["tensors"], sort_keys=True),
            json.dumps(want_tensors, sort_keys=True)))
    for name, (rows, _) in out.get("tensors", {}).items():
        if rows != records:
            raise SystemExit("peers: %s: tensor %s has %d rows in the epoch, not %d" % (
                what, name, rows, records))


def med_range(xs):
    return statistics.median(xs), min(xs), max(xs)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--build", default="build-rel")
    ap.add_argument("--venv-python", required=True, help="the peers' venv python (tf, DALI)")
    ap.add_argument("--tfrecord-path", required=True,
                    help="a directory holding the tfrecord package (and crc32c) alone, for "
                         "Debian's python with its torch")
    ap.add_argument("--data-root", default=os.path.join(
        os.environ.get("XDG_CACHE_HOME", os.path.expanduser("~/.cache")), "sluice",
        "bench-peers"))
    ap.add_argument("--quick", action="store_true", help="small datasets, one run each")
    ap.add_argument("--repeat", type=int, help="alternated runs per pair (default 3, --quick 1)")
    ap.add_argument("--only", default=",".join(PIPELINES), help="pipelines, comma-separated")
    ap.add_argument("--peers", default="tfdata,dali,tfrecord", help="peers, comma-separated")
    ap.add_argument("--unavailable", action="append", default=[], metavar="PEER=WHY",
                    help="a peer that cannot run here and why (peers.sh: an import failed)")
    ap.add_argument("--sluice-knobs", choices=("fixed", "auto"), default="fixed",
                    help="sluice's num_prefetch and num_read_buffer_bytes: the hand-picked "
                    "values (default), or \"auto\", tuned by sluiced while the epoch runs")
    args = ap.parse_args()
    repeat = args.repeat or (1 if args.quick else 3)
    build = os.path.abspath(args.build)
    ctl = os.path.join(build, "tools", "sluicectl")
    for exe in (ctl, os.path.join(build, "daemon", "sluiced")):
        if not os.access(exe, os.X_OK):
            raise SystemExit("peers: build %s first (meson setup, ninja)" % build)
    cores = len(os.sched_getaffinity(0))
    nfiles = 4 if args.quick else 8
    env = dict(os.environ, SLUICE_LIBRARY=os.path.join(build, "libclient", "libsluice.so"),
               TF_CPP_MIN_LOG_LEVEL="2")
    tf_env = dict(env, PYTHONPATH=args.tfrecord_path)
    peers = args.peers.split(",")
    absent = dict(x.split("=", 1) for x in args.unavailable)
    tmp = tempfile.mkdtemp(prefix="sluice-peers-")
    rows = []
    try:
        for pname in args.only.split(","):
            p = PIPELINES[pname]
            records, shuffle = p["quick" if args.quick else "full"]
            data, files, index = gen_data(ctl, args.venv_python, args.data_root, p["gen"],
                                          records, nfiles)
            print("bench=peer_data pipeline=%s records=%d files=%d shuffle=%d batch=%d "
                  "cores=%d dir=%s" % (pname, records, nfiles, shuffle, p["batch"], cores,
                                       data), flush=True)
            todo = []
            for peer in peers:
                why = p.get("cannot", {}).get(peer)
                status = "unsupported"
                if peer in absent:
                    why, status = absent[peer], "unavailable"
                if why:
                    print("bench=peer pipeline=%s peer=%s status=%s reason=%s" % (
                        pname, peer, status, json.dumps(why)), flush=True)
                    rows.append((pname, peer, None, ("cannot express it: " if status ==
                                                     "unsupported" else "not run here: ") + why))
                    continue
                todo.append(peer)
            res = {peer: {"sluice": [], "peer": []} for peer in todo}
            keys = {}
            want = {}  # sluice's tensors per peer's variant
            inproc = {}  # sluicectl run's figures per variant
            for rep in range(repeat):
                for peer in todo:
                    feats, _ = PARTIAL.get((pname, peer), ([t for _, t in p["features"]], ""))
                    variant = "tfdata" if p["gen"] == "jpeg" and peer == "tfdata" else "all"
                    spec = sluice_spec("peers-" + pname, p, data, nfiles, shuffle, feats,
                                       variant, args.sluice_knobs)
                    s = run_sluice(build, tmp, spec, env, what="peers")
                    check("sluice (%s, against %s)" % (pname, peer), s, records)
                    key = (variant, tuple(feats))
                    if key in want:
                        check("sluice (%s, against %s)" % (pname, peer), s, records, want[key])
                    want[key] = s["tensors"]
                    if len(inproc.setdefault(key, [])) <= rep:  # once per variant and run
                        i = run_inproc(ctl, tmp, spec)
                        check("sluicectl run (%s, against %s)" % (pname, peer), i, records)
                        i["records_per_s"] = i["records"] / i["wall_s"]
                        i["cpu_us_per_record"] = i["cpu_s"] * 1e6 / i["records"]
                        inproc[key].append(i)
                        print("bench=peer_run pipeline=%s system=sluice_inproc against=%s %s" % (
                            pname, peer, " ".join("%s=%.4g" % (k, v)
                                                  for k, v in sorted(i.items()))), flush=True)
                    keys[peer] = key
                    cfg = {"system": peer, "pipeline": pname, "files": files, "index": index,
                           "batch": p["batch"], "shuffle": shuffle, "threads": cores,
                           "seed": SEED, "features": feats}
                    cpath = os.path.join(tmp, "cfg.json")
                    with open(cpath, "w") as f:
                        json.dump(cfg, f)
                    child = os.path.join(HERE, "peers_child.py")
                    if peer == "tfrecord":  # Debian's python and torch, the package on the path
                        o = run_child([cpath], tf_env, python=sys.executable, script=child,
                                      what="peers")
                    else:
                        o = run_child([cpath], env, python=args.venv_python, script=child,
                                      what="peers")
                    check("%s (%s)" % (peer, pname), o, records, s["tensors"])
                    for system, out in (("sluice", s), (peer, o)):
                        out["records_per_s"] = out["records"] / out["wall_s"]
                        out["cpu_us_per_record"] = out["cpu_s"] * 1e6 / out["records"]
                        res[peer]["sluice" if system == "sluice" else "peer"].append(out)
                        print("bench=peer_run pipeline=%s system=%s against=%s %s" % (
                            pname, system, peer, " ".join(
                                "%s=%.4g" % (k, v) for k, v in sorted(out.items())
                                if isinstance(v, (int, float)))), flush=True)
            for peer in todo:
                r = res[peer]
                sp = med_range([x["records_per_s"] for x in r["sluice"]])
                pp = med_range([x["records_per_s"] for x in r["peer"]])
                sc = med_range([x["cpu_us_per_record"] for x in r["sluice"]])
                pc = med_range([x["cpu_us_per_record"] for x in r["peer"]])
                note = PARTIAL.get((pname, peer), (None, ""))[1]
                sf = statistics.median(x["first_batch_s"] for x in r["sluice"])
                pf = statistics.median(x["first_batch_s"] for x in r["peer"])
                ip = med_range([x["records_per_s"] for x in inproc[keys[peer]]])
                ic = med_range([x["cpu_us_per_record"] for x in inproc[keys[peer]]])
                print("bench=peer pipeline=%s peer=%s sluice_per_s=%.0f peer_per_s=%.0f "
                      "speedup=%.2f sluice_cpu_us=%.2f peer_cpu_us=%.2f cpu_ratio=%.2f "
                      "sluice_per_s_range=%.0f-%.0f peer_per_s_range=%.0f-%.0f "
                      "sluice_cpu_us_range=%.2f-%.2f peer_cpu_us_range=%.2f-%.2f runs=%d "
                      "records=%d sluice_first_batch_s=%.3f peer_first_batch_s=%.3f "
                      "sluice_inproc_per_s=%.0f sluice_inproc_cpu_us=%.2f%s" % (
                          pname, peer, sp[0], pp[0], sp[0] / pp[0], sc[0], pc[0], pc[0] / sc[0],
                          sp[1], sp[2], pp[1], pp[2], sc[1], sc[2], pc[1], pc[2], len(r["peer"]),
                          records, sf, pf, ip[0], ic[0], (" note=" + json.dumps(note)) if note else ""),
                      flush=True)
                rows.append((pname, peer, (sp, pp, sc, pc, ip, ic), note))
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    print()
    print("| pipeline | peer | sluice records/s | peer records/s | speedup | "
          "sluice CPU µs/record | peer CPU µs/record | records per CPU-s, sluice/peer | "
          "sluice in process: records/s, CPU µs/record |")
    print("|---|---|---|---|---|---|---|---|---|")
    for pname, peer, m, note in rows:
        if m is None:
            print("| %s | %s | %s | | | | | | |" % (pname, peer, note))
            continue
        sp, pp, sc, pc, ip, ic = m

        def f(x, fmt):
            return (fmt + " (" + fmt + " – " + fmt + ")") % x if x[1] != x[2] else fmt % x[0]
        print("| %s | %s%s | %s | %s | **%.2f×** | %s | %s | **%.2f×** | %s, %s |" % (
            pname, peer, (" (" + note + ")") if note else "", f(sp, "%.0f"), f(pp, "%.0f"),
            sp[0] / pp[0], f(sc, "%.2f"), f(pc, "%.2f"), pc[0] / sc[0], f(ip, "%.0f"),
            f(ic, "%.2f")))


if __name__ == "__main__":
    sys.exit(main())
