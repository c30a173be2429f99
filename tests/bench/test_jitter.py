"""The noise-floor tool (:mod:`captioner.bench.jitter`): settings, grouping, report, and a real run."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from captioner.bench.accuracy import Item
from captioner.bench.jitter import group_counts, main, parse_setting, render
from captioner.bench.scoring import Counts

DATA = Path(__file__).resolve().parents[1] / "data" / "speech"


def test_settings_are_typed_by_the_stream_config_field() -> None:
    assert parse_setting("closing_full_s=30") == ("closing_full_s", 30.0)
    assert parse_setting("closing_retry=false") == ("closing_retry", False)
    assert parse_setting("max_tokens=100") == ("max_tokens", 100)
    assert parse_setting("language=auto") == ("language", "auto")  # the app's default: detected
    for bad in ("closing_full_s", "no_such_field=1", "closing_retry=maybe", "language=de"):
        with pytest.raises(ValueError):
            parse_setting(bad)


def test_counts_are_summed_per_half_and_kind_of_the_english_items() -> None:
    items = [Item("a", Path("a"), "x", "en", "other", 1.0, "s1", "tune"),
             Item("b", Path("b"), "x", "en", "other", 1.0, "s2", "check"),
             Item("c", Path("c"), "x", "en", "noisy", 1.0, "s2", "check"),
             Item("d", Path("d"), "x", "de", "other", 1.0, "s3", "tune")]
    counts = {k: Counts(1, 0, 0, 10) for k in "abcd"}
    groups = group_counts(items, counts)
    assert groups["english"] == Counts(3, 0, 0, 30)
    assert groups["half:tune"] == Counts(1, 0, 0, 10) and groups["half:check"] == Counts(2, 0, 0, 20)
    assert groups["check:noisy"] == Counts(1, 0, 0, 10) and "tune:noisy" not in groups


def test_the_report_gives_every_pads_gap_and_the_variants_paired_difference() -> None:
    result = {"model": "m", "pads": [0.1, 0.2], "steps": [2.0], "variant": {"closing_full_s": 30.0}, "items": 3,
              "elapsed_s": 1.0, "offline": {"english": 10.0, "half:tune": 12.0},
              "runs": {"2": {"base": {"0.1": {"english": 11.0, "half:tune": 12.5},
                                      "0.2": {"english": 9.0, "half:tune": 12.0}},
                             "variant": {"0.1": {"english": 10.0, "half:tune": 13.0},
                                         "0.2": {"english": 9.5, "half:tune": 12.0}}}}}
    md = render(result)
    assert "| english | 10.00 % | +1.00 / -1.00 | +0.00 [-1.00, +1.00] | +0.00 / -0.50 | -1.00 / +0.50 | -0.25 |" in md
    assert "| half:tune | 12.00 % | +0.50 / +0.00 | +0.25 [+0.00, +0.50] |" in md


def test_a_real_run_over_real_speech(real_tiny_en_pack, tmp_path, capsys) -> None:
    """Real tiny.en over the repository's four real clips at two pads, as it is and with the closing
    retry off: every run scored, per item, per pad and per configuration."""
    out = tmp_path / "jitter.json"
    assert main(["--model", str(real_tiny_en_pack.root), "--manifest", str(DATA / "manifest.jsonl"),
                 "--pads", "0.14,0.26", "--set", "closing_retry=false", "--out", str(out)]) == 0
    result = json.loads(out.read_text())
    assert result["items"] == 4 and result["pads"] == [0.14, 0.26]
    runs = result["runs"]["2"]
    for config in ("base", "variant"):
        for pad in ("0.14", "0.26"):
            gap = runs[config][pad]["english"] - result["offline"]["english"]
            assert -20.0 < gap < 20.0  # tiny.en live within 20 points of its offline words on clean clips
    assert len(result["per_item"]) == 4 and all(len(v) == 4 for v in result["per_item"].values())
    assert "## live 2 s" in capsys.readouterr().out
