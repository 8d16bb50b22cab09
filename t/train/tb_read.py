"""Reads a TensorBoard log folder with TensorBoard's own EventAccumulator
and compares its scalars with a JSON Lines metrics file: every number of
every record except "step" and "time" must be a scalar of that tag, at the
record's step (else the previous record's), with the value as a float32 (within one float32 step of the file's 9 digits),
in the same order; nothing else. The first "hparams" record must be the
hparams plugin's session-start record, value for value (a run's folder
may hold several, one per restart; the reader keeps the first). A copy
of an event file cut short inside its last record (a crash mid-write)
reads as the file without that record. Prints TAP lines (7 of them),
numbered from 1, no plan.

    python3 t/train/tb_read.py METRICS.jsonl LOGDIR
"""
import json
import math
import os
import shutil
import struct
import sys
import tempfile

from tensorboard.backend.event_processing import event_accumulator


def f32(x):
    return struct.unpack("<f", struct.pack("<f", x))[0]


def ulp_close(got, want):
    """got is want as float32, or its neighbour: the JSON file holds 9
    significant digits of the double, TensorBoard the double rounded to
    float32, and the two roundings can land on adjacent floats."""
    if math.isnan(got) or math.isnan(want):
        return math.isnan(got) and math.isnan(want)
    if got == want:
        return True
    bits = struct.unpack("<i", struct.pack("<f", want))[0]
    near = [struct.unpack("<f", struct.pack("<i", bits + d))[0] for d in (-1, 1)]
    return got in near


N = [0]


def ok(cond, what):
    N[0] += 1
    print(("ok %d" if cond else "not ok %d") % N[0] + " - " + what)
    return cond


def counts(logdir):
    acc = event_accumulator.EventAccumulator(logdir, size_guidance={event_accumulator.SCALARS: 0})
    acc.Reload()
    return {t: len(acc.Scalars(t)) for t in acc.Tags()["scalars"]}


def truncated(logdir):
    """The first event file alone, then cut 5 bytes short: the counts must
    drop by the last record's scalars and nothing else."""
    from tensorboard.backend.event_processing import event_file_loader
    name = sorted(f for f in os.listdir(logdir) if "tfevents" in f)[0]
    path = os.path.join(logdir, name)
    events = list(event_file_loader.LegacyEventFileLoader(path).Load())
    last = [v.tag for v in events[-1].summary.value if v.HasField("simple_value")]
    tmp = tempfile.mkdtemp()
    try:
        os.mkdir(os.path.join(tmp, "full"))
        os.mkdir(os.path.join(tmp, "cut"))
        shutil.copy(path, os.path.join(tmp, "full", name))
        data = open(path, "rb").read()
        open(os.path.join(tmp, "cut", name), "wb").write(data[:-5])
        full, cut = counts(os.path.join(tmp, "full")), counts(os.path.join(tmp, "cut"))
    finally:
        shutil.rmtree(tmp)
    want = {t: n - last.count(t) for t, n in full.items()}
    want = {t: n for t, n in want.items() if n}
    ok(last and cut == want, "a file cut inside its last record (%s) reads as the file without it" % ",".join(last))


def main(metrics, logdir):
    want = {}  # tag -> [(step, value)]
    hparams = None
    step = 0
    times = []
    steps = []
    with open(metrics) as f:
        for line in f:
            rec = json.loads(line)
            times.append(rec["time"])
            if "hparams" in rec and hparams is None:
                hparams = rec["hparams"]
            if "step" in rec:
                step = rec["step"]
                steps.append(step)
            for k, v in rec.items():
                if k in ("time", "step", "hparams") or isinstance(v, bool):
                    continue
                if v is None:
                    v = float("nan")
                if isinstance(v, (int, float)):
                    want.setdefault(k, []).append((step, f32(float(v))))
    acc = event_accumulator.EventAccumulator(logdir, size_guidance={event_accumulator.SCALARS: 0})
    acc.Reload()
    tags = sorted(acc.Tags()["scalars"])
    ok(tags == sorted(want), "tags %s equal the metrics file's numeric keys %s" % (tags, sorted(want)))
    got = {t: [(e.step, e.value) for e in acc.Scalars(t)] for t in tags}
    n = sum(len(v) for v in want.values())
    same = all(
        len(got.get(t, [])) == len(w)
        and all(gs == ws and ulp_close(gv, wv) for (gs, gv), (ws, wv) in zip(got[t], w))
        for t, w in want.items()
    )
    if not ok(same and n > 0, "%d scalars: every step and value equals the metrics file's (as float32)" % n):
        for t, w in want.items():
            g = got.get(t, [])
            bad = [(i, a, b) for i, (a, b) in enumerate(zip(g, w)) if a[0] != b[0] or not ulp_close(a[1], b[1])]
            print("# %s: %d read, %d expected, first differences %s" % (t, len(g), len(w), bad[:3]))
    wall = [e.wall_time for t in tags for e in acc.Scalars(t)]
    ok(wall and all(w > 1.5e9 for w in wall), "wall_time is seconds since the epoch")
    ok(all(b >= a for a, b in zip(times, times[1:])), "the metrics file's time never goes back (%d records)" % len(times))
    from tensorboard.plugins.hparams import plugin_data_pb2

    try:
        content = acc.PluginTagToContent("hparams").get("_hparams_/session_start_info")
    except KeyError:  # no hparams record at all
        content = None
    got_hp = {}
    if content is not None:
        ssi = plugin_data_pb2.HParamsPluginData.FromString(content).session_start_info
        for k, v in ssi.hparams.items():
            got_hp[k] = v.string_value if v.WhichOneof("kind") == "string_value" else v.number_value
    ok(hparams is not None and got_hp == hparams,
       "hparams: the session-start record holds the metrics file's %s" % sorted(hparams or {}))
    if got_hp != hparams:
        print("# read %s" % got_hp)
    ok(all(b >= a for a, b in zip(steps, steps[1:])),
       "the metrics file's steps never go back (%s .. %s)" % (steps[:1], steps[-1:]))


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
    truncated(sys.argv[2])
