"""The 16 kHz resampler: passband accuracy, anti-aliasing, block continuity, no clock shift."""

from __future__ import annotations

import numpy as np
import pytest

from captioner.audio.resample import Resampler, downmix, resample


def _db(x: np.ndarray) -> float:
    return float(20 * np.log10(np.sqrt(np.mean(np.square(x, dtype=np.float64))) + 1e-30))


@pytest.mark.parametrize("rate", [44_100, 48_000])
def test_1khz_tone_level_within_0_1_db(rate: int) -> None:
    t = np.arange(rate * 2) / rate
    x = (0.5 * np.sin(2 * np.pi * 1000 * t)).astype(np.float32)
    y = resample(x, rate)
    steady = y[1600:-1600]  # away from the zero-padded edges
    assert abs(_db(steady) - _db(x)) < 0.1
    # and it is still a 1 kHz tone: the spectral peak sits at 1 kHz
    spec = np.abs(np.fft.rfft(steady * np.hanning(len(steady))))
    peak_hz = np.argmax(spec) * 16_000 / len(steady)
    assert abs(peak_hz - 1000) < 2


@pytest.mark.parametrize("rate", [44_100, 48_000])
def test_12khz_tone_is_60_db_down(rate: int) -> None:
    t = np.arange(rate * 2) / rate
    x = (0.5 * np.sin(2 * np.pi * 12_000 * t)).astype(np.float32)
    y = resample(x, rate)
    # naive decimation would alias it to 4 kHz at full level
    assert _db(y[1600:-1600]) - _db(x) <= -60


@pytest.mark.parametrize("rate", [8_000, 22_050, 44_100, 48_000])
def test_random_blocks_equal_one_go(rate: int) -> None:
    rng = np.random.default_rng(rate)
    x = rng.standard_normal(rate // 2).astype(np.float32) * 0.3
    whole = resample(x, rate)
    r = Resampler(rate)
    parts, i = [], 0
    while i < len(x):
        k = int(rng.integers(0, 1500))  # zero-length blocks too
        parts.append(r.process(x[i : i + k]))
        i += k
    parts.append(r.flush())
    blocks = np.concatenate(parts)
    assert len(blocks) == len(whole) == -(-len(x) * 16_000 // rate)
    np.testing.assert_allclose(blocks, whole, rtol=0, atol=1e-6)


@pytest.mark.parametrize("rate", [44_100, 48_000])
def test_zero_phase_keeps_the_clock(rate: int) -> None:
    """An impulse at input time t comes out at output index t * 16000 (no filter delay)."""
    x = np.zeros(rate, dtype=np.float32)
    at_s = 0.4
    x[round(at_s * rate)] = 1.0
    y = resample(x, rate)
    assert abs(int(np.argmax(y)) - at_s * 16_000) <= 1


def test_identity_and_downmix() -> None:
    x = np.linspace(-1, 1, 1000, dtype=np.float32)
    np.testing.assert_array_equal(resample(x, 16_000), x)
    stereo = np.stack([x, -x], axis=1)
    np.testing.assert_allclose(downmix(stereo), 0.0, atol=1e-7)
    assert downmix(stereo[:, :1]).shape == (1000,)
    with pytest.raises(ValueError):
        Resampler(0)
