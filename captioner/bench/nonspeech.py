"""Deterministic non-speech signals for the accuracy bench: every word emitted on them is invented.

All are 16 kHz mono float32, seeded, and scaled to stated levels (dB re full scale 1.0, RMS):

* ``silence``: digital zeros;
* ``white``: white Gaussian noise at −30 dBFS;
* ``brown``: brown (random-walk, 1/f²) noise, high-passed at ~20 Hz so it does not drift, at −30 dBFS;
* ``tones``: a melody of harmonic tones (a pentatonic tune, 0.25–0.75 s notes with attack/decay
  envelopes, five harmonics falling 6 dB each, a soft chord under it) at about −20 dBFS: music
  without words, the case where Whisper writes "(crickets chirping)" or "♪".
"""

from __future__ import annotations

import numpy as np

from captioner.core import SAMPLE_RATE

__all__ = ["KINDS", "LEVEL_DBFS", "dbfs", "generate"]

KINDS = ("silence", "white", "brown", "tones")
LEVEL_DBFS = {"silence": float("-inf"), "white": -30.0, "brown": -30.0, "tones": -20.0}
_PENTATONIC = (0, 2, 4, 7, 9, 12, 14, 16)  # semitones above A3 (220 Hz)


def dbfs(x: np.ndarray) -> float:
    """RMS level in dB re full scale 1.0 (−inf for zeros)."""
    ms = float(np.mean(np.square(x, dtype=np.float64))) if x.size else 0.0
    return 10.0 * np.log10(ms) if ms > 0 else float("-inf")


def _scaled(x: np.ndarray, level_dbfs: float) -> np.ndarray:
    x = x - x.mean()
    return (x * (10 ** (level_dbfs / 20.0) / max(1e-12, float(np.sqrt(np.mean(x**2)))))).astype(np.float32)


def _tones(n: int, rng: np.random.Generator) -> np.ndarray:
    out = np.zeros(n, np.float64)
    t = 0
    while t < n:
        dur = int(rng.choice((0.25, 0.5, 0.75)) * SAMPLE_RATE)
        f0 = 220.0 * 2 ** (int(rng.choice(_PENTATONIC)) / 12.0)
        m = min(dur, n - t)
        time = np.arange(m) / SAMPLE_RATE
        env = np.minimum(1.0, time / 0.02) * np.exp(-time * 3.0)  # 20 ms attack, exponential decay
        note = sum(0.5 ** (h - 1) * np.sin(2 * np.pi * h * f0 * time) for h in range(1, 6))
        out[t : t + m] += env * note
        t += dur
    time = np.arange(n) / SAMPLE_RATE
    chord = sum(np.sin(2 * np.pi * f * time) for f in (110.0, 164.8, 220.0)) / 3.0
    return out + 0.15 * chord


def _leaky_integral(w: np.ndarray, corner_hz: float = 20.0, block: int = 256) -> np.ndarray:
    """``y[k] = a·(y[k−1] + w[k])``, ``a = exp(−2π·corner/rate)``: integrated white noise (1/f²
    above the corner) that cannot drift; computed in blocks (a triangular matrix per block)."""
    a = np.exp(-2 * np.pi * corner_hz / SAMPLE_RATE)
    n = w.size
    padded = np.zeros(-(-n // block) * block)
    padded[:n] = w
    lag = np.arange(block)[:, None] - np.arange(block)[None, :]
    tri = np.where(lag >= 0, a ** (np.maximum(lag, 0) + 1), 0.0)  # tri[i, j] = a^(i−j+1), j ≤ i
    local = padded.reshape(-1, block) @ tri.T  # each block as if it started from y = 0
    decay = a ** np.arange(1, block + 1)
    y_prev = 0.0
    for row in local:
        row += decay * y_prev
        y_prev = row[-1]
    return local.reshape(-1)[:n]


def generate(kind: str, seconds: float, seed: int = 0) -> np.ndarray:
    """float32 [seconds·16000] of the non-speech ``kind`` (see module docstring), reproducible by seed.

    Raises:
        ValueError: unknown kind or negative length.
    """
    if kind not in KINDS:
        raise ValueError(f"unknown non-speech kind {kind!r}; choose from {', '.join(KINDS)}")
    if seconds < 0:
        raise ValueError("seconds must not be negative")
    n = round(seconds * SAMPLE_RATE)
    rng = np.random.default_rng([seed, KINDS.index(kind)])
    if kind == "silence" or n == 0:
        return np.zeros(n, np.float32)
    if kind == "white":
        return _scaled(rng.standard_normal(n), LEVEL_DBFS[kind])
    if kind == "brown":
        return _scaled(_leaky_integral(rng.standard_normal(n)), LEVEL_DBFS[kind])
    return _scaled(_tones(n, rng), LEVEL_DBFS[kind])
