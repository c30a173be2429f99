"""``captioner bench --sections accuracy --set FIELD=VALUE``: a rule's variant measured without
editing the engine (issue 25's way of working: a variant is kept only when it helps both halves).
Real tiny.en on a real LibriSpeech clip: the setting must reach the live streams, be recorded in the
JSON and the report, and a bad one must fail before any model is loaded."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from captioner import cli
from captioner.storage.paths import AppPaths

CLIP = Path(__file__).resolve().parents[1] / "data" / "speech" / "1089-134691-0001.wav"
TEXT = "FOR A FULL HOUR HE HAD PACED UP AND DOWN WAITING BUT HE COULD WAIT NO LONGER"


def _manifest(tmp_path: Path) -> Path:
    manifest = tmp_path / "manifest.jsonl"
    manifest.write_text(json.dumps({"id": "1089-134691-0001", "audio": str(CLIP), "seconds": 5.415, "text": TEXT,
                                    "language": "en", "kind": "librispeech-test-clean"}) + "\n", encoding="utf-8")
    return manifest


def test_a_setting_reaches_the_live_streams_and_is_recorded(real_tiny_en_pack, tmp_path: Path) -> None:
    out, report = tmp_path / "set.json", tmp_path / "set.md"
    code = cli.run(["bench", "--sections", "accuracy", "--model", str(real_tiny_en_pack.root), "--manifest",
                    str(_manifest(tmp_path)), "--step", "2", "--nonspeech-s", "0", "--set", "max_tokens=1",
                    "--json", str(out), "--report", str(report)], AppPaths.default(tmp_path / "home"))
    assert code == 0
    acc = json.loads(out.read_text(encoding="utf-8"))["accuracy"]
    assert acc["settings"]["stream_config"] == {"max_tokens": 1}
    (item,) = acc["items"]
    offline = item["modes"]["offline"]["hypothesis"].split()
    live = item["modes"]["live_2s"]["hypothesis"].split()
    assert len(offline) >= 14  # the offline reference is not touched by the setting (tiny.en: 16 words)
    assert len(live) <= 6, live  # one token per round: 3 rounds and the last, never the sentence
    assert "`max_tokens=1` (`--set`)" in report.read_text(encoding="utf-8")


@pytest.mark.parametrize(("setting", "why"), [
    ("nosuch=1", "StreamConfig field"),
    ("speech_loud_db", "FIELD=VALUE"),
    ("step_s=1", "use --step"),
    ("max_tokens=many", "invalid literal"),
    ("speech_loud_db=-3", "loud speech must be"),
    ("language=fr", "only number and true/false"),
])
def test_a_bad_setting_is_refused_before_any_model_is_loaded(setting: str, why: str, tmp_path: Path,
                                                              capsys) -> None:
    code = cli.run(["bench", "--sections", "accuracy", "--model", str(tmp_path / "no-such-pack"), "--manifest",
                    str(_manifest(tmp_path)), "--set", setting], AppPaths.default(tmp_path / "home"))
    err = capsys.readouterr().err
    assert code != 0 and "--set" in err and why in err, err
