"""The accuracy bench's ``--vocabulary`` (issue 27): listed words recalled and invented per live mode."""

from __future__ import annotations

import argparse
from pathlib import Path

import pytest

from captioner.bench.accuracy import listed_words
from captioner.commands import bench
from captioner.errors import CaptionerError


def test_listed_words_are_counted_against_the_reference():
    counts = listed_words("Yet these thoughts affected Hester Prynne less.", "Yet these thoughts affected Hester Prin "
                          "less, Prynne Gutenberg.", ["Hester Prynne", "Gutenberg", "missal"])
    assert counts == {"in_reference": 2, "recalled": 2, "invented": 1}  # Gutenberg was never said
    assert listed_words("a b", "a b", []) == {"in_reference": 0, "recalled": 0, "invented": 0}


def test_the_bench_reads_the_vocabulary_option(tmp_path: Path):
    manifest = tmp_path / "m.jsonl"
    manifest.write_text('{"id": "x", "audio": "x.wav", "text": "hi", "language": "en", "kind": "k"}\n',
                        encoding="utf-8")
    parser = argparse.ArgumentParser()
    bench.register(parser.add_subparsers())
    base = ["bench", "--sections", "accuracy", "--model", "base", "--manifest", str(manifest), "--nonspeech-s", "0"]
    args = parser.parse_args([*base, "--vocabulary", "Prynne, Gutenberg"])
    _items, options = bench._accuracy_options(args)
    assert options.vocabulary == ("Prynne", "Gutenberg")
    args = parser.parse_args([*base, "--vocabulary-file", str(tmp_path / "missing.txt")])
    with pytest.raises(CaptionerError, match="cannot read the vocabulary file"):
        bench._accuracy_options(args)


def test_the_report_has_the_listed_words_per_live_mode():
    from captioner.bench import accuracy_report

    def row(listed):
        return {"modes": {"offline": {}, "live_2s": {"listed": listed}}}

    acc = {"settings": {"modes": ["offline", "live_2s"], "vocabulary": ["Hester Prynne", "Gutenberg"]},
           "items": [row({"in_reference": 2, "recalled": 1, "invented": 0}),
                     row({"in_reference": 3, "recalled": 3, "invented": 1})]}
    assert accuracy_report._vocabulary_lines(acc, ["offline", "live_2s"])[4] == "| live_2s | 5 | 4 | 1 |"
    assert accuracy_report._vocabulary_lines({"settings": {"vocabulary": []}, "items": []}, ["offline"]) == []
