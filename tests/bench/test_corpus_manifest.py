"""The new-speaker corpus (``corpus/``, issue 25) is in the development corpus's format and holds only
new speakers: every entry has the fields, a licence note and a 16 kHz mono audio file whose length is
the one the manifest states, and no speaker of ``../shared/speech`` is in it.

The audio and the manifest are third-party data and stay out of the repository (``corpus/README.md``
says where they come from and how they are rebuilt); these checks run where they are present."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest
from whisper_normalizer.english import EnglishTextNormalizer

from captioner.bench.accuracy import load_manifest, speaker_of

ROOT = Path(__file__).resolve().parents[2]
CORPUS = ROOT / "corpus" / "manifest.jsonl"
DEV = ROOT.parent / "shared" / "speech" / "manifest.jsonl"
FIELDS = ("id", "audio", "seconds", "text", "language", "kind", "speaker", "source_repo", "source_path",
          "license_note", "text_source")
KINDS = {"librispeech-test-clean", "librispeech-dev-clean", "librispeech-test-other", "longform", "multilingual",
         "noisy", "other", "conversational", "short-read"}

NORMALISE = EnglishTextNormalizer()

needs_corpus = pytest.mark.skipif(not CORPUS.is_file(), reason="corpus/ is not built here (see corpus/README.md)")


def entries(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


def probe(path: Path) -> tuple[int, int, float]:
    """(sample rate, channels, seconds) of an audio file, as ffprobe reads its header."""
    out = subprocess.run(["ffprobe", "-v", "error", "-select_streams", "a:0", "-show_entries",
                          "stream=sample_rate,channels:format=duration", "-of", "json", str(path)],
                         capture_output=True, text=True, check=True).stdout
    info = json.loads(out)
    stream = info["streams"][0]
    return int(stream["sample_rate"]), int(stream["channels"]), float(info["format"]["duration"])


@needs_corpus
@pytest.mark.skipif(shutil.which("ffprobe") is None, reason="ffprobe (ffmpeg) reads the FLAC headers")
def test_every_entry_is_complete_16k_mono_and_as_long_as_stated() -> None:
    items = entries(CORPUS)
    assert 20 <= len(items) <= 80
    assert len({e["id"] for e in items}) == len(items)
    for e in items:
        missing = [f for f in FIELDS if not str(e.get(f, "")).strip()]
        assert not missing, f"{e.get('id')}: missing {missing}"
        assert e["kind"] in KINDS, e["id"]
        assert e["language"] == "en", e["id"]
        audio = CORPUS.parent / e["audio"]
        assert audio.is_file() and audio.suffix == ".flac", e["id"]
        rate, channels, seconds = probe(audio)
        assert (rate, channels) == (16000, 1), e["id"]
        assert seconds == pytest.approx(float(e["seconds"]), abs=0.02), e["id"]
        # items are short, but for a few long continuous readings (LibriVox, up to about two minutes)
        assert 1.0 <= seconds <= 180.0, e["id"]
        assert any(w in e["license_note"] for w in ("CC BY", "CC0", "public domain", "BSD-style free licence")), e["id"]
    conversational = [e for e in items if e["kind"] == "conversational"]
    assert 3 * len(conversational) >= len(items)
    assert sum(e["seconds"] for e in items) / 60 < 15
    # the folder stays small enough to travel with a checkout (10.2 MiB with the six one-sentence VCTK speakers)
    assert sum(p.stat().st_size for p in CORPUS.parent.rglob("*") if p.is_file()) < 12 * 1024 * 1024


@needs_corpus
@pytest.mark.skipif(not DEV.is_file(), reason="the development corpus is not beside the repository")
def test_no_speaker_of_the_development_corpus_and_each_kind_in_both_halves() -> None:
    dev = {speaker_of(e) for e in entries(DEV)}
    new = {speaker_of(e) for e in entries(CORPUS)}
    assert len(new) >= 8
    assert not new & dev
    # speaker ids are each corpus's own spelling ("LJ" there, "ljspeech" would be here): no recording of
    # the development corpus comes back under another id, judged by what is said in it and how long it is
    # (speakers of one dataset read the same sentences, VCTK's p225 and the development corpus's p287 among
    # them; a copy of one recording has its length too: LJ001-0001 9.655 s there, 9.66 s copied again)
    said = [(NORMALISE(e["text"]), float(e["seconds"])) for e in entries(DEV)]
    again = [e["id"] for e in entries(CORPUS)
             if any(NORMALISE(e["text"]) == text and abs(float(e["seconds"]) - seconds) < 0.05 for text, seconds in said)]
    assert not again, f"in the development corpus already: {again}"
    # split on its own (as ``--manifest corpus/manifest.jsonl`` does), every kind with more than one
    # speaker has speakers in both halves
    items = load_manifest(CORPUS)
    for kind in {i.kind for i in items}:
        if len({i.speaker for i in items if i.kind == kind}) > 1:
            assert {i.half for i in items if i.kind == kind} == {"tune", "check"}, kind
