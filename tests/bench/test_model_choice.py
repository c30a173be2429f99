"""The device-measured model choice (PRODUCT.md): the rule on its own, and the measurement with the real
tiny.en on real speech, live at real-time pace, as fast as this machine runs it and slowed down."""

from __future__ import annotations

import time
from pathlib import Path

import numpy as np
import pytest

from captioner.audio.files import load_audio_file
from captioner.bench.model_choice import MAX_SHARE, Trial, choose, hears, measure, room_for, speech_sample
from captioner.core import SAMPLE_RATE
from captioner.engine import StreamConfig, Transcriber
from captioner.engine.overload import LagReport
from captioner.engine.vad import SpeechDetector
from captioner.models.pack import Dims

SPEECH = Path(__file__).resolve().parents[1] / "data" / "speech"


def trial(name: str, millions: float, rtf: float, *, multilingual: bool = True, streams: int = 1,
          skips: int = 0, step_changes: int = 0) -> Trial:
    lag = LagReport(rounds=10, max_s=2.2, skipped_s=2.0 * skips, skips=skips, step_s=2.0,
                    longest_step_s=4.0 if step_changes else 2.0, step_changes=step_changes)
    return Trial(name, int(millions * 1e6), multilingual, "CPU", 2.0, streams, 22.8, rtf, lag, 1.0, 56)


def test_the_largest_pack_that_keeps_up_with_room_is_chosen() -> None:
    tiny, base, small = trial("tiny", 38, 0.08), trial("base", 73, 0.12), trial("small", 241, 0.42)
    assert choose([tiny, base, small], "auto") is small
    # over half of real time is too little room; two unmixed sources double the share
    assert choose([tiny, base, trial("small", 241, MAX_SHARE + 0.01)], "auto") is base
    two = [trial("base", 73, 0.2, streams=2), trial("small", 241, 0.3, streams=2)]
    assert [t.verdict for t in two] == ["keeps up", "little room"] and choose(two, "de") is two[0]
    # kept up only by lengthening the step, or by skipping: not chosen
    slower, skipping = trial("small", 241, 0.3, step_changes=1), trial("medium", 763, 0.9, skips=2)
    behind = trial("small", 241, 1.1)  # slower than real time on a recording too short for the rule to act
    assert (slower.verdict, skipping.verdict, behind.verdict) == ("slower", "too slow", "too slow")
    assert choose([base, slower, skipping], "en") is base
    assert choose([slower, skipping], "en") is None
    # the same size twice (an int8 and an fp32 build): the lighter compute
    light = trial("base-int8", 73, 0.09)
    assert choose([base, light], "en") is light


def test_an_english_only_pack_is_chosen_only_for_english() -> None:
    tiny_en, base = trial("tiny.en", 38, 0.05, multilingual=False), trial("base", 73, 0.6)
    assert hears(tiny_en, "en") and not hears(tiny_en, "auto") and not hears(tiny_en, "de")
    assert not hears(tiny_en, "en", "translate") and hears(base, "de", "translate")
    assert choose([tiny_en, base], "en") is tiny_en  # base has too little room
    assert choose([tiny_en, base], "auto") is None


def test_a_larger_model_not_installed_is_suggested_when_it_would_likely_keep_up() -> None:
    base = trial("whisper-base", 73, 0.10)
    model, share = room_for(base, ["whisper-base"], "auto")
    assert (model.short, model.millions) == ("small", 244) and share == pytest.approx(0.10 * 244 / 73)
    assert room_for(base, ["whisper-base"], "en")[0].short == "small.en"  # English: the .en one
    assert room_for(base, ["whisper-base", "whisper-small"], "de") is None  # medium: 10 × 769 / 73 % > half
    assert room_for(trial("whisper-base", 73, 0.2), ["whisper-base"], "auto") is None  # 67 %: no room
    tiny_en = trial("whisper-tiny.en", 38, 0.08, multilingual=False)
    assert room_for(tiny_en, ["whisper-tiny.en"], "en")[0].short == "base.en"
    faster = trial("whisper-tiny.en", 38, 0.06, multilingual=False)  # installed base(.en) aside: small.en at 39 %
    assert room_for(faster, ["whisper-tiny.en", "whisper-base.en", "whisper-base"], "en")[0].short == "small.en"
    assert room_for(tiny_en, ["whisper-tiny.en", "whisper-base.en", "whisper-base"], "en") is None  # 51 %


def test_sizes_are_whispers_published_sizes() -> None:
    """tiny 39 M, base 74 M, small 244 M, medium 769 M (biases and norms, up to 4 %, not counted)."""
    for (d, layers, published) in ((384, 4, 39), (512, 6, 74), (768, 12, 244), (1024, 24, 769)):
        dims = Dims(80, 1500, d, layers, d // 64, layers, d // 64, 64, 448, 51865, 4 * d, 4 * d)
        assert published * 0.96 <= dims.parameters / 1e6 <= published


def test_the_bundled_sample_is_three_sentences_of_real_speech() -> None:
    audio = load_audio_file(speech_sample())
    assert len(audio) == 364249  # 22.77 s at 16 kHz
    detector = SpeechDetector()
    detector.feed(audio)
    detector.flush()
    speech = detector.probabilities(0, len(audio)) >= 0.5
    starts = np.flatnonzero(speech[1:] & ~speech[:-1])
    assert speech.mean() > 0.7 and len(starts) >= 3  # three utterances (or more, at breaths)


@pytest.fixture(scope="module")
def clip() -> np.ndarray:
    return load_audio_file(SPEECH / "1089-134691-0001.wav")  # 5.4 s: "for a full hour he had paced ..."


def test_measured_live_with_the_real_tiny_en(real_tiny_en_pack, clip) -> None:
    engine = Transcriber.from_pack(real_tiny_en_pack, "cpu")
    try:
        t0 = time.perf_counter()
        result = measure(engine, StreamConfig(step_s=1.0, language="de"), clip)
        wall = time.perf_counter() - t0
    finally:
        engine.close()
    assert wall >= len(clip) / SAMPLE_RATE  # paced at real time, as a live source
    assert (result.name, result.provider, result.multilingual, result.step_s) == ("tiny.en", "CPU", False, 1.0)
    assert result.audio_s == pytest.approx(len(clip) / SAMPLE_RATE, abs=0.01)
    assert result.words >= 12 and result.lag.rounds >= 5  # heard in English ("de" ignored), every step a round
    assert 0 < result.compute_rtf < 1 and 0 < result.latency_s < 5
    assert result.parameters == real_tiny_en_pack.dims.parameters
    assert result.to_json()["verdict"] == result.verdict


class SlowEncoder:
    """The real model whose every encoder dispatch takes 1.2 s more: a machine too slow for this pack at a
    1 s step."""

    def __init__(self, inner) -> None:
        self._inner = inner

    def __getattr__(self, name):
        return getattr(self._inner, name)

    def encode(self, audio, **kwargs):
        time.sleep(1.2)
        return self._inner.encode(audio, **kwargs)


def test_a_pack_too_slow_for_this_machine_is_not_chosen(real_tiny_en_pack, clip) -> None:
    engine = Transcriber.from_pack(real_tiny_en_pack, "cpu")
    slow = Transcriber(SlowEncoder(engine.model), engine.runtime, "tiny.en-slow")  # type: ignore[arg-type]
    try:
        result = measure(slow, StreamConfig(step_s=1.0, language="en"), clip)
    finally:
        engine.close()
    assert result.compute_rtf > 1.0 and result.verdict == "too slow"  # whatever the rule had time to do
    assert result.lag.max_s > 2.0  # behind: more than two steps late
    assert choose([result], "en") is None
