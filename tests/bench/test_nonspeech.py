"""The non-speech signals of the accuracy bench: deterministic, the stated levels and spectra."""

from __future__ import annotations

import numpy as np
import pytest

from captioner.bench.nonspeech import KINDS, LEVEL_DBFS, _leaky_integral, dbfs, generate

RATE = 16_000


def _band_db(x: np.ndarray, lo: float, hi: float) -> float:
    power = np.abs(np.fft.rfft(x.astype(np.float64))) ** 2
    freqs = np.fft.rfftfreq(x.size, 1.0 / RATE)
    return float(10 * np.log10(power[(freqs >= lo) & (freqs < hi)].mean()))


@pytest.mark.parametrize("kind", KINDS)
def test_signals_are_deterministic_float32_of_the_asked_length(kind: str) -> None:
    a, b = generate(kind, 3.0, seed=1), generate(kind, 3.0, seed=1)
    assert a.dtype == np.float32 and a.shape == (3 * RATE,)
    assert np.array_equal(a, b)
    assert np.isfinite(a).all() and np.abs(a).max() < 1.0
    if kind != "silence":
        assert not np.array_equal(a, generate(kind, 3.0, seed=2))


def test_levels() -> None:
    assert not generate("silence", 2.0).any()
    for kind in ("white", "brown", "tones"):
        assert dbfs(generate(kind, 5.0)) == pytest.approx(LEVEL_DBFS[kind], abs=0.01)


def test_white_is_flat_and_brown_falls_20_db_per_decade() -> None:
    white, brown = generate("white", 10.0), generate("brown", 10.0)
    assert abs(_band_db(white, 100, 200) - _band_db(white, 1000, 2000)) < 1.0
    assert _band_db(brown, 100, 200) - _band_db(brown, 1000, 2000) == pytest.approx(20.0, abs=2.0)
    assert abs(float(brown.mean())) < 1e-3  # high-passed: no drift


def test_leaky_integral_matches_the_recursion() -> None:
    w = np.random.default_rng(0).standard_normal(1000)
    a = np.exp(-2 * np.pi * 20.0 / RATE)
    expected, y = np.empty_like(w), 0.0
    for k, x in enumerate(w):
        y = a * (y + x)
        expected[k] = y
    assert np.allclose(_leaky_integral(w, block=64), expected, rtol=1e-9, atol=1e-9)


def test_tones_are_harmonic_notes_not_noise() -> None:
    x = generate("tones", 4.0)
    # a melody: the energy sits in a few narrow peaks (notes and their harmonics), unlike noise
    power = np.abs(np.fft.rfft(x.astype(np.float64))) ** 2
    top = np.sort(power)[::-1]
    assert top[: power.size // 100].sum() > 0.9 * power.sum()
    assert _band_db(x, 200, 1000) > _band_db(x, 4000, 8000) + 20


def test_bad_arguments() -> None:
    with pytest.raises(ValueError, match="unknown non-speech kind"):
        generate("pink", 1.0)
    with pytest.raises(ValueError, match="negative"):
        generate("white", -1.0)
