"""``captioner bench --sections accuracy --set FIELD=VALUE``: a rule's variant measured without
editing the engine (issue 25's way of working: a variant is kept only when it helps both halves).
Real tiny.en on a real LibriSpeech clip: the setting must reach the live streams, be recorded in the
JSON and the report, and a bad one must fail before any model is loaded."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
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


def _bench(pack, tmp_path: Path, *options: str) -> tuple[dict, str]:
    """One accuracy run of ``pack`` on the clip at a 2 s step: (its JSON's accuracy part, its report)."""
    out, report = tmp_path / "run.json", tmp_path / "run.md"
    code = cli.run(["bench", "--sections", "accuracy", "--model", str(pack.root), "--manifest", str(_manifest(tmp_path)),
                    "--step", "2", "--nonspeech-s", "0", *options, "--json", str(out), "--report", str(report)],
                   AppPaths.default(tmp_path / "home"))
    assert code == 0
    return json.loads(out.read_text(encoding="utf-8"))["accuracy"], report.read_text(encoding="utf-8")


def test_a_setting_reaches_the_live_streams_and_is_recorded(real_tiny_en_pack, tmp_path: Path) -> None:
    acc, report = _bench(real_tiny_en_pack, tmp_path, "--set", "max_tokens=1")
    assert acc["settings"]["stream_config"] == {"max_tokens": 1}
    (item,) = acc["items"]
    offline = item["modes"]["offline"]["hypothesis"].split()
    live = item["modes"]["live_2s"]["hypothesis"].split()
    assert len(offline) >= 14  # the offline reference is not touched by the setting (tiny.en: 16 words)
    assert len(live) <= 6, live  # one token per round: 3 rounds and the last, never the sentence
    assert "`max_tokens=1` (`--set`)" in report


def test_the_live_modes_can_detect_the_language_as_the_app_does(real_tiny_en_pack, tmp_path: Path) -> None:
    """``--set language=auto``: the live streams are not given the recording's language (the app's
    default); on an English-only pack that is English, so the words are those given "en"."""
    (tmp_path / "given").mkdir()
    (tmp_path / "auto").mkdir()
    given, _ = _bench(real_tiny_en_pack, tmp_path / "given")
    acc, report = _bench(real_tiny_en_pack, tmp_path / "auto", "--set", "language=auto")
    assert acc["settings"]["stream_config"] == {"language": "auto"}
    assert "`language=auto` (`--set`)" in report
    (item,), (given_item,) = acc["items"], given["items"]
    assert item["modes"]["live_2s"]["hypothesis"] == given_item["modes"]["live_2s"]["hypothesis"]


def test_speed_plays_every_recording_faster_or_slower_and_is_recorded(real_tiny_en_pack, tmp_path: Path) -> None:
    """``--speed 0.9``: the clip is played 0.9 times as fast (5.415 s → 6.017 s), its voice lower;
    offline and live decode the same slower audio, and the result and the report say so."""
    from captioner.audio import load_audio_file
    from captioner.bench.accuracy import speed_perturbed

    clip = load_audio_file(CLIP)
    slow, fast = speed_perturbed(clip, 0.9), speed_perturbed(clip, 1.1)
    assert abs(slow.size - clip.size / 0.9) <= 2 and abs(fast.size - clip.size / 1.1) <= 2
    assert speed_perturbed(clip, 1.0) is clip

    def pitch_hz(x):  # the strongest frequency of the voice (the spectrum's peak, 80-400 Hz)
        spectrum = np.abs(np.fft.rfft(x * np.hanning(x.size)))
        freqs = np.fft.rfftfreq(x.size, 1 / 16000)
        band = (freqs >= 80) & (freqs <= 400)
        return freqs[band][np.argmax(spectrum[band])]

    assert pitch_hz(slow) < pitch_hz(clip) < pitch_hz(fast)
    acc, report = _bench(real_tiny_en_pack, tmp_path, "--speed", "0.9")
    assert acc["settings"]["speed"] == 0.9
    (item,) = acc["items"]
    assert abs(item["seconds"] - 5.415 / 0.9) < 0.01
    assert item["modes"]["offline"]["words"] >= 14 and item["modes"]["live_2s"]["words"] >= 14  # still the sentence
    assert "played at 0.9× speed" in report


@pytest.mark.parametrize("speed", ["0.5", "1.5"])
def test_a_speed_out_of_range_is_refused_before_any_model_is_loaded(speed: str, tmp_path: Path, capsys) -> None:
    code = cli.run(["bench", "--sections", "accuracy", "--model", str(tmp_path / "no-such-pack"), "--manifest",
                    str(_manifest(tmp_path)), "--speed", speed], AppPaths.default(tmp_path / "home"))
    err = capsys.readouterr().err
    assert code != 0 and "--speed must be between 0.8 and 1.25" in err, err


@pytest.mark.parametrize(("setting", "why"), [
    ("nosuch=1", "StreamConfig field"),
    ("speech_loud_db", "FIELD=VALUE"),
    ("step_s=1", "use --step"),
    ("max_tokens=many", "invalid literal"),
    ("speech_loud_db=-3", "loud speech must be"),
    ("language=fr", "only number and true/false fields, and language=auto"),
])
def test_a_bad_setting_is_refused_before_any_model_is_loaded(setting: str, why: str, tmp_path: Path,
                                                              capsys) -> None:
    code = cli.run(["bench", "--sections", "accuracy", "--model", str(tmp_path / "no-such-pack"), "--manifest",
                    str(_manifest(tmp_path)), "--set", setting], AppPaths.default(tmp_path / "home"))
    err = capsys.readouterr().err
    assert code != 0 and "--set" in err and why in err, err


def test_paired_runs_the_variant_beside_the_defaults_in_turns(real_tiny_en_pack, tmp_path: Path) -> None:
    """``--paired --set max_tokens=1``: each live mode runs twice, with the engine's defaults
    (``live_2s``: the sentence) and with the setting (``live_2s_set``: a token per round), both scored
    and timed, and the report says which is which; the two go first in turns from item to item."""
    from captioner.bench.accuracy import AccuracyOptions

    acc, report = _bench(real_tiny_en_pack, tmp_path, "--set", "max_tokens=1", "--paired")
    assert acc["settings"]["modes"] == ["offline", "live_2s", "live_2s_set"] and acc["settings"]["paired"]
    (item,) = acc["items"]
    assert item["modes"]["live_2s"]["words"] >= 14  # the defaults: the sentence (tiny.en: 16 words)
    assert item["modes"]["live_2s_set"]["words"] <= 6  # one token per round
    assert all("latency_s" in item["modes"][m] and item["modes"][m]["compute_s"] > 0 for m in ("live_2s", "live_2s_set"))
    assert acc["summary"]["english"]["live_2s_set"]["errors"] > acc["summary"]["english"]["live_2s"]["errors"]
    assert "Paired (`--paired`): the `_set` live modes ran with `max_tokens=1`" in report
    options = AccuracyOptions(settings=(("max_tokens", 1),), paired=True)
    assert options.live_runs(1) == [("", {}), ("_set", {"max_tokens": 1})]
    assert options.live_runs(2) == [("_set", {"max_tokens": 1}), ("", {})]
    assert AccuracyOptions(settings=(("max_tokens", 1),)).live_runs(2) == [("", {"max_tokens": 1})]


def test_paired_without_a_setting_is_refused_before_any_model_is_loaded(tmp_path: Path, capsys) -> None:
    code = cli.run(["bench", "--sections", "accuracy", "--model", str(tmp_path / "no-such-pack"), "--manifest",
                    str(_manifest(tmp_path)), "--paired"], AppPaths.default(tmp_path / "home"))
    err = capsys.readouterr().err
    assert code != 0 and "--paired compares a --set variant" in err, err
