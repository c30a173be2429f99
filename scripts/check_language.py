#!/usr/bin/env python3
"""Hand-run check of language detection on real speech: one row per clip, then the accuracy.

    .venv/bin/python scripts/check_language.py PACK [--corpus ../shared/speech] [--kinds multilingual]
        [--seconds 30] [--step]

PACK is a multilingual pack (``captioner models build --checkpoint <whisper-base CT2 folder>``).
For every clip of the chosen kinds in the corpus manifest (``manifest.jsonl``: id, language,
kind, audio) it encodes the first ``--seconds`` of audio (at most 30) and runs
:func:`captioner.engine.language.detect_language` (one decoder chunk); ``--step`` also runs it
on the first 2, 4 and 6 s, as a live round would see a segment grow. Prints the detected
language, its probability, the runner-up, the no-speech probability and whether it is right.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np

from captioner.audio.files import load_audio_file
from captioner.core import SAMPLE_RATE
from captioner.engine.language import detect_language, language_of, no_speech_probability
from captioner.engine.model import SAMPLES_PER_FRAME
from captioner.engine.onnx_model import OnnxAcousticModel
from captioner.engine.runtime import Runtime
from captioner.models.pack import Pack


def main() -> int:
    """Detect the language of each corpus clip from its first seconds; 0 when every clip of the shortest
    length is heard in its own language."""
    here = Path(__file__).resolve().parents[1]
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("pack", type=Path)
    parser.add_argument("--corpus", type=Path, default=here.parent / "shared" / "speech")
    parser.add_argument("--kinds", nargs="+", default=["multilingual"])
    parser.add_argument("--seconds", type=float, default=30.0)
    parser.add_argument("--step", action="store_true", help="also detect on the first 2, 4 and 6 s")
    args = parser.parse_args()
    pack = Pack.load(args.pack)
    if not pack.multilingual:
        print(f"{args.pack} is English-only: detection always answers 'en'", file=sys.stderr)
    model = OnnxAcousticModel(pack, Runtime(pack, "cpu"))
    items = [json.loads(line) for line in (args.corpus / "manifest.jsonl").read_text().splitlines() if line.strip()]
    items = [i for i in items if i.get("kind") in args.kinds]
    lengths = [min(args.seconds, 30.0)] + ([2.0, 4.0, 6.0] if args.step else [])
    per_length = {s: 0 for s in lengths}
    print(f"{'clip':34} {'ref':4} {'s':>5} {'got':4} {'p':>6}  {'runner-up':12} {'no-speech':>9} {'ms':>6}  ok")
    for item in items:
        audio = load_audio_file(args.corpus / item["audio"])
        for seconds in lengths:
            n = min(len(audio), int(seconds * SAMPLE_RATE)) // SAMPLES_PER_FRAME * SAMPLES_PER_FRAME
            encoding = model.encode(audio[:n])
            t0 = time.perf_counter()
            guess = detect_language(model, encoding)
            ms = (time.perf_counter() - t0) * 1000.0
            # the same chunk, as a round runs it, for the no-speech probability
            runner = model.decoder(encoding)
            start, size = model.chunk_plan(encoding.bucket, False)[0]
            prompt = model.vocab.prompt(guess.code if pack.multilingual else "en")
            forced = np.full(size - 1, -1, np.int64)
            forced[: len(prompt) - 1] = prompt[1:size]
            first = runner.run(start, size, prompt[0], forced)
            assert language_of(model.vocab, first) == guess  # the round's own first chunk says the same
            nospeech = no_speech_probability(first)
            ok = guess.code == item["language"]
            per_length[seconds] += ok
            second = f"{guess.top[1][0]} {guess.top[1][1]:.3f}" if len(guess.top) > 1 else "-"
            print(f"{item['id'][:34]:34} {item['language']:4} {n / SAMPLE_RATE:5.1f} {guess.code:4} "
                  f"{guess.probability:6.3f}  {second:12} {nospeech if nospeech is not None else float('nan'):9.4f} "
                  f"{ms:6.1f}  {'yes' if ok else 'NO'}")
    for seconds in lengths:
        print(f"first {seconds:g} s: {per_length[seconds]}/{len(items)} clips in the right language")
    return 0 if per_length[lengths[0]] == len(items) else 1


if __name__ == "__main__":
    sys.exit(main())
