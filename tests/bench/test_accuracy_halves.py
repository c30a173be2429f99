"""The development corpus split by speaker into a tuning and a checking half (issue 25: a rule is
kept only when it helps on both)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from captioner.bench.accuracy import load_manifest, speaker_of, split_halves, summarise
from captioner.errors import CaptionerError

CORPUS = Path(__file__).resolve().parents[3] / "shared" / "speech" / "manifest.jsonl"


def entry(id_: str, kind: str) -> dict:
    return {"id": id_, "audio": f"audio/{id_}.flac", "text": "a b", "language": "en", "kind": kind}


def test_speakers_are_read_from_the_corpus_ids() -> None:
    assert speaker_of(entry("1688-142285-0003", "x")) == "1688"
    assert speaker_of(entry("1272-128104-0004-8k", "x")) == "1272"
    assert speaker_of(entry("LJ001-0011", "x")) == "LJ"
    assert speaker_of(entry("vctk-p287_002-noisy", "x")) == speaker_of(entry("vctk-p287_002-clean", "x"))
    assert speaker_of(entry("cmuarctic-aew-a0002", "x")) == "cmuarctic-aew"
    assert speaker_of(entry("jfk-inaugural-excerpt", "x")) == "jfk-inaugural-excerpt"
    assert speaker_of({**entry("x-1", "k"), "speaker": "anna"}) == "anna"


def test_every_speaker_is_in_one_half_and_the_halves_are_balanced_per_kind() -> None:
    entries = ([entry(f"{s}-1-{i}", "other-kind") for s in (10, 20, 30, 40, 50) for i in range(10)]
               + [entry("vctk-p1_001-clean", "clean"), entry("vctk-p1_001-noisy", "noisy"),
                  entry("vctk-p2_001-clean", "clean")])
    halves = split_halves(entries)
    assert sorted(halves.values()).count("tune") in (3, 4)
    per_kind = {h: sum(1 for e in entries if e["kind"] == "other-kind" and halves[speaker_of(e)] == h)
                for h in ("tune", "check")}
    assert per_kind == {"tune": 30, "check": 20}
    assert halves["vctk-p1"] != halves["vctk-p2"]  # one clean speaker each; p1's noisy clip follows p1
    assert split_halves(entries) == halves  # deterministic
    assert split_halves(entries, rotate=True) == {s: {"tune": "check", "check": "tune"}[h] for s, h in halves.items()}


def test_the_manifest_is_loaded_by_half_and_summarised_per_half(tmp_path) -> None:
    path = tmp_path / "manifest.jsonl"
    entries = [entry(f"{s}-1-{i}", "k") for s in (1, 2) for i in range(2)]
    path.write_text("\n".join(json.dumps(e) for e in entries) + "\n")
    both = load_manifest(path)
    tune = load_manifest(path, half="tune")
    check = load_manifest(path, half="check", kinds=["k"], limit=1)
    assert {i.speaker for i in tune} == {"1"} and [i.id for i in check] == ["2-1-0"]
    assert {i.half for i in both} == {"tune", "check"}
    with pytest.raises(CaptionerError, match="half"):
        load_manifest(path, half="left")
    counts = {"substitutions": 0, "deletions": 1, "insertions": 0, "ref": 2}
    rows = [{"id": i.id, "kind": i.kind, "language": "en", "seconds": 1.0, "half": i.half,
             "modes": {"offline": {"wer": counts, "cer": counts, "stutters": [], "compute_s": 0.1}}} for i in both]
    summ = summarise(rows, ["offline"])
    assert summ["half:tune"]["offline"]["items"] == 2 and summ["check:k"]["offline"]["ref_words"] == 4


@pytest.mark.skipif(not CORPUS.is_file(), reason="the development corpus is not beside the repository")
def test_the_development_corpus_splits_every_kind_between_the_halves() -> None:
    items = load_manifest(CORPUS)
    for kind in ("librispeech-test-other", "librispeech-test-clean", "other"):
        assert {i.half for i in items if i.kind == kind} == {"tune", "check"}
    speakers = {(i.speaker, i.half) for i in items}
    assert len({s for s, _ in speakers}) == len(speakers)  # no speaker in both halves
