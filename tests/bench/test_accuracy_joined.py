"""Continuous speech in the accuracy bench (``captioner bench --join S``, captioner/bench/joined.py):
the manifest's recordings of each half cut to their speech and joined, on real speech and tiny.en."""

from __future__ import annotations

import itertools
import json
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from captioner import cli
from captioner.audio import load_audio_file
from captioner.bench.accuracy import load_manifest
from captioner.bench.joined import SPEAKER_GAP_FACTOR, join_halves, joined_audio, speech_part
from captioner.core import SAMPLE_RATE
from captioner.engine.vad import SpeechDetector
from captioner.errors import CaptionerError
from captioner.storage.paths import AppPaths

DATA = Path(__file__).resolve().parents[1] / "data" / "speech"
HARD = DATA.parent / "speech-hard"
MANIFEST = DATA / "manifest.jsonl"


def test_each_half_becomes_one_recording_in_manifest_order() -> None:
    items = load_manifest(MANIFEST)
    joined = join_halves(items, 0.2)
    assert sorted(j.half for j in joined) == sorted({it.half for it in items})
    for j in joined:
        mine = [it for it in items if it.half == j.half]
        assert j.id == f"joined-{j.half}" and j.kind == "joined" and j.language == "en"
        assert j.parts == tuple(it.audio for it in mine)
        assert j.text == " ".join(it.text for it in mine)
        want = [0.0] + [0.2 if b.speaker == a.speaker else 0.2 * SPEAKER_GAP_FACTOR for a, b in itertools.pairwise(mine)]
        assert j.gaps_s == pytest.approx(want)


def test_long_forms_and_other_languages_are_left_out_and_bad_gaps_refused() -> None:
    items = load_manifest(MANIFEST)
    extra = [replace(items[0], id="long", kind="longform"), replace(items[0], id="de", language="de")]
    joined = join_halves(items + extra, 0.3)
    assert sum(len(j.parts) for j in joined) == len(items)  # neither extra one was joined
    for gap in (0.0, -1.0, 6.0):
        with pytest.raises(CaptionerError, match="gap"):
            join_halves(items, gap)
    with pytest.raises(CaptionerError, match="English"):
        join_halves(extra, 0.2)


def test_a_recording_is_cut_to_its_speech_and_the_parts_joined_with_their_gaps(tmp_path: Path) -> None:
    clip = load_audio_file(DATA / "1089-134691-0000.wav")
    padded = np.concatenate([np.zeros(SAMPLE_RATE, np.float32), clip, np.zeros(SAMPLE_RATE, np.float32)])
    part = speech_part(padded)
    assert 1.0 * SAMPLE_RATE < part.size < clip.size + 0.5 * SAMPLE_RATE  # the added second either side is gone
    assert np.sqrt(np.mean(part**2)) > np.sqrt(np.mean(padded**2))
    silent = np.zeros(SAMPLE_RATE, np.float32)
    assert speech_part(silent).size == silent.size  # no speech: kept whole
    paths = [DATA / "1089-134691-0000.wav", DATA / "1221-135766-0002.wav"]
    audio = joined_audio(paths, [0.0, 0.5])
    parts = [speech_part(load_audio_file(p)) for p in paths]
    assert audio.size == parts[0].size + SAMPLE_RATE // 2 + parts[1].size
    assert not audio[parts[0].size : parts[0].size + SAMPLE_RATE // 2].any()


def test_radio_speech_that_silero_hardly_rates_stays_in_a_joined_recording() -> None:
    """Apollo 13 (tests/data/speech-hard): Swigert's "Okay, Houston, I believe we've had a problem
    here" (0.3–3.0 s of the first cut) and his "Houston, we've had a problem. We've had a MAIN B BUS
    UNDERVOLT" (from 2.6 s of the second) are rated under 0.1 by Silero; cut to what its threshold
    hears, the joined recording lost them while its reference kept their words."""
    start = load_audio_file(HARD / "radio-a13-houston-problem-start.wav")
    problem = load_audio_file(HARD / "radio-a13-houston-problem.wav")
    for audio, threshold_hears in ((start, (3.0, 4.4)), (problem, (0.0, 1.5))):
        detector = SpeechDetector()
        detector.feed(audio)
        detector.flush()
        span = detector.speech(0, audio.size)
        assert span is not None and threshold_hears[0] * SAMPLE_RATE <= span.start < span.end <= threshold_hears[1] * SAMPLE_RATE
    first = _offset(start, speech_part(start))
    assert first <= 0.4 * SAMPLE_RATE and first + speech_part(start).size >= 4.3 * SAMPLE_RATE  # both lines
    second = _offset(problem, speech_part(problem))
    assert second + speech_part(problem).size >= 6.4 * SAMPLE_RATE  # past "UNDERVOLT" (6.3 s)


def _offset(audio: np.ndarray, part: np.ndarray) -> int:
    """Where ``part``, a slice of ``audio``, starts in it (samples)."""
    for offset in range(audio.size - part.size + 1):
        if np.array_equal(audio[offset : offset + part.size], part):
            return offset
    raise AssertionError("not a slice of the recording")


def test_the_bench_streams_each_joined_half_with_real_whisper(real_tiny_en_pack, tmp_path: Path) -> None:
    out = tmp_path / "joined.json"
    code = cli.run(["bench", "--sections", "accuracy", "--model", str(real_tiny_en_pack.root), "--manifest",
                    str(MANIFEST), "--join", "0.2", "--step", "2", "--nonspeech-s", "0", "--json", str(out),
                    "--report", str(tmp_path / "joined.md")], AppPaths.default(tmp_path / "home"))
    assert code == 0
    items = json.loads(out.read_text(encoding="utf-8"))["accuracy"]["items"]
    assert {it["id"] for it in items} == {f"joined-{h}" for h in {it.half for it in load_manifest(MANIFEST)}}
    for it in items:
        live = it["modes"]["live_2s"]["wer"]
        assert live["ref"] == len(it["reference"].split())
        assert live["rate"] <= 0.25, it["modes"]["live_2s"]["hypothesis"]  # tiny.en: 0–10 % on each clip alone
        assert it["seconds"] < sum(s for s in (2.085, 5.415, 4.825, 4.512))  # cut to speech, 0.2–0.5 s apart
    assert "joined" in (tmp_path / "joined.md").read_text(encoding="utf-8")
