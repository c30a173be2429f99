"""Every request the streaming policy makes, recorded on 48 scenarios, to check that a restatement of
the round policy changes nothing (issue 25: the same 3 634 requests, words, retractions and round
statistics before and after ``rounds.plan_round``).

Usage (from the repository root; packs built with ``captioner models build``, tiny.en with
``--layers fp32`` as the replay fixtures are; the development corpus beside the repository)::

    TINY=/tmp/packs/tiny.en BASE=/tmp/packs/whisper-base .venv/bin/python tests/engine/policy_requests.py before
    ... change the policy ...
    TINY=... BASE=... .venv/bin/python tests/engine/policy_requests.py after
    .venv/bin/python tests/engine/policy_requests.py --compare before after

Each scenario writes ``<out>/<pack>-<name>.json``: the replay recorder's events (encode fingerprints,
decoder runs with their forced ids, verifier dispatches, speech-detector queries), the words, the
retractions and the round statistics."""
import itertools
import json
import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import numpy as np
from record_replay import SCENARIOS, play
from replay import Recorder, Recording, detector_factory

from captioner.audio import load_audio_file
from captioner.core import SAMPLE_RATE
from captioner.engine import OnnxAcousticModel, Runtime
from captioner.engine.stream import Stream, StreamConfig
from captioner.engine.vad import SpeechDetector
from captioner.models.pack import Pack

SPEECH = Path(os.environ.get("CORPUS", Path(__file__).resolve().parents[3] / "shared" / "speech"))
MAN = {json.loads(line)["id"]: json.loads(line) for line in (SPEECH / "manifest.jsonl").read_text().splitlines() if line}


def clip(cid, a=0.0, b=None):
    x = load_audio_file(SPEECH / MAN[cid]["audio"])
    return x[round(a * SAMPLE_RATE): None if b is None else round(b * SAMPLE_RATE)]


def audio_of(parts):
    out = []
    for p in parts:
        if isinstance(p, float):
            out.append(np.zeros(round(p * SAMPLE_RATE), np.float32))
        else:
            out.append(clip(*p) if isinstance(p, tuple) else clip(p))
    return np.concatenate(out).astype(np.float32)


def run_stream(model, audio, step_s, config, hurry_every=0):
    ticks = itertools.count()
    rec = Recording("x")
    recorder = Recorder(model, rec)
    with detector_factory(lambda th, **options: recorder.detector(SpeechDetector(th, **options))):
        stream = Stream(recorder, StreamConfig(step_s=step_s, **config), clock=lambda: float(next(ticks)))
    step = round(step_s * SAMPLE_RATE)
    ups = []
    for k, i in enumerate(range(0, audio.size, step)):
        stream.feed(audio[i: i + step])
        if hurry_every:
            stream.hurry = k % hurry_every == 0
        u = stream.step()
        if u is not None:
            ups.append(u)
    ups.append(stream.finish())
    return rec, stream, ups


EXTRA = {
    "short-LJ2-1s": (["LJ001-0002"], 1.0, {}, 0),
    "short-LJ2-2s": (["LJ001-0002"], 2.0, {}, 0),
    "clean10-0.5s": (["1089-134686-0000"], 0.5, {}, 0),
    "clean10-1s": (["1089-134686-0000"], 1.0, {}, 0),
    "clean10-2s": (["1089-134686-0000"], 2.0, {}, 0),
    "clean10-3s": (["1089-134686-0000"], 3.0, {}, 0),
    "jfk-1s": (["jfk-inaugural-excerpt"], 1.0, {}, 0),
    "jfk-2s-hurry": (["jfk-inaugural-excerpt"], 2.0, {}, 2),
    "jfk-1s-hurry": (["jfk-inaugural-excerpt"], 1.0, {}, 3),
    "noisy-1s": (["vctk-p287_003-noisy"], 1.0, {}, 0),
    "noisy-2s": (["vctk-p287_003-noisy"], 2.0, {}, 0),
    "concat-1s": (["LJ001-0001", 1.5, "cmuarctic-aew-a0001", 0.3, "timit-LDC93S1"], 1.0, {}, 0),
    "concat-2s": (["LJ001-0001", 1.5, "cmuarctic-aew-a0001", 0.3, "timit-LDC93S1"], 2.0, {}, 0),
    "concat-1s-noreplace": (["LJ001-0001", 1.5, "cmuarctic-aew-a0001"], 1.0, {"closing_replaces": False}, 0),
    "concat-1s-nocontext": (["LJ001-0001", 1.5, "cmuarctic-aew-a0001"], 1.0, {"closing_context_s": 0.0}, 0),
    "concat-1s-noopen": (["LJ001-0001", 1.5, "cmuarctic-aew-a0001"], 1.0, {"opening_s": 0.0}, 0),
    "long60-1s": ([("longform-librispeech-test-other-A", 0.0, 60.0)], 1.0, {}, 0),
    "long60-2s": ([("longform-librispeech-test-other-A", 0.0, 60.0)], 2.0, {}, 0),
    "long40-2s-maxin8": ([("longform-librispeech-test-other-A", 60.0, 100.0)], 2.0, {"max_input_s": 8.0, "closing_context_s": 10.0}, 0),
    "other-1s": (["1688-142285-0000"], 1.0, {}, 0),
}


def dump(out, name, rec, ups, vocab):
    words = [[w.text, w.start, w.end, w.emitted_at, w.speculative] for u in ups for w in u.words]
    retr = [u.retract for u in ups]
    stats = [u.stats and {k: getattr(u.stats, k) for k in ("round_index", "input_s", "stop_reason", "closes", "bucket", "chunks", "drafted")} for u in ups]
    (out / f"{name}.json").write_text(json.dumps({"events": rec.events, "words": words, "retract": retr, "stats": stats}, indent=0, default=str))


def main():
    out = Path(sys.argv[1])
    out.mkdir(parents=True, exist_ok=True)
    which = sys.argv[2] if len(sys.argv) > 2 else "all"
    for packname in ("tiny", "base"):
        if which not in (packname, "all"):
            continue
        pack = Pack.load(Path(os.environ["TINY"] if packname == "tiny" else os.environ["BASE"]))
        model = OnnxAcousticModel(pack, Runtime(pack, "cpu"))
        if packname == "tiny":
            for name, recipe in SCENARIOS.items():
                rec = Recording(name)
                recorder = Recorder(model, rec)
                result = play(recorder, lambda th, r=recorder: r.detector(SpeechDetector(th)), recipe)
                ups = result.get("updates", [])
                dump(out, f"tiny-{name}", rec, ups, model.vocab)
                print(name, len(rec.events), flush=True)
        extra = dict(EXTRA)
        if packname == "base":
            extra = {k: v for k, v in EXTRA.items() if not k.startswith("long")}
            extra["de-auto-2s"] = (["picovoice-leopard-de"], 2.0, {"language": "auto"}, 0)
            extra["es-auto-1s"] = (["mls-es-13697_11991_000000"], 1.0, {"language": "auto"}, 0)
        for name, (parts, step, cfg, hurry) in extra.items():
            if not parts:
                continue
            rec, stream, ups = run_stream(model, audio_of(parts), step, cfg, hurry)
            dump(out, f"{packname}-{name}", rec, ups, model.vocab)
            print(packname, name, len(rec.events), " ".join(w.text for w in stream.words)[:100], flush=True)
        model.close()


def compare(a: Path, b: Path) -> int:
    bad = 0
    names = sorted(p.name for p in a.glob("*.json"))
    for n in names:
        x = json.loads((a / n).read_text())
        y = json.loads((b / n).read_text()) if (b / n).exists() else None
        if y is None:
            print("MISSING", n)
            bad += 1
            continue
        ex, ey = x["events"], y["events"]
        diff = None
        for i, (p, q) in enumerate(zip(ex, ey, strict=False)):
            if p != q:
                diff = (i, p, q)
                break
        if diff is None and len(ex) != len(ey):
            diff = (min(len(ex), len(ey)), "len", (len(ex), len(ey)))
        other = [k for k in ("words", "retract", "stats") if x[k] != y[k]]
        if diff or other:
            bad += 1
            print("DIFF", n, "events" if diff else "", other, str(diff)[:400] if diff else "")

    print(f"{len(names)} scenarios, {sum(len(json.loads((a/n).read_text())['events']) for n in names)} requests, {bad} differ")
    return bad


if __name__ == "__main__":
    if sys.argv[1] == "--compare":
        sys.exit(1 if compare(Path(sys.argv[2]), Path(sys.argv[3])) else 0)
    main()
