"""Streaming polyphase resampling to 16 kHz with a Kaiser-windowed sinc anti-aliasing filter.

Pure numpy (no scipy at run time). The filter state is carried across blocks, so resampling a
signal in blocks of any sizes gives the same samples as resampling it in one go (no clicks at
block boundaries). The filter is centred (zero phase): output sample ``n`` is the input signal
evaluated at input time ``n * rate_in / rate_out``, so resampling does not shift the audio clock.
"""

from __future__ import annotations

import math
from math import gcd

import numpy as np

from captioner.core import SAMPLE_RATE

__all__ = ["Resampler", "downmix", "resample"]

STOPBAND_DB = 90.0  # attenuation of everything above the output Nyquist frequency
PASS_FRACTION = 0.82  # passband edge as a fraction of the lower Nyquist frequency (6.56 kHz at 16 kHz)
STOP_FRACTION = 1.0  # stopband starts at the lower Nyquist frequency (8 kHz at 16 kHz)
_CHUNK = 4096  # output samples computed per vectorised step (bounds the gather memory to ~3 MB)


def downmix(block: np.ndarray) -> np.ndarray:
    """Average the channels of ``block`` (frames, channels) into a float32 vector (frames,)."""
    if block.ndim == 1:
        return block.astype(np.float32, copy=False)
    if block.shape[1] == 1:
        return block[:, 0].astype(np.float32, copy=True)
    return block.mean(axis=1, dtype=np.float32)


def _design(rate_in: int, rate_out: int) -> tuple[int, int, int, np.ndarray]:
    """Polyphase filter bank for ``rate_in`` → ``rate_out``.

    Returns:
        ``(up, down, half, bank)``: the reduced ratio ``up/down``, the half-length ``half`` of the
        filter in input samples and ``bank`` of shape ``(up, 2 * half + 1)`` float32, where
        ``bank[p]`` dotted with input samples ``x[i - half .. i + half]`` gives the output whose
        input position is ``i + p / up``.
    """
    g = gcd(rate_in, rate_out)
    up, down = rate_out // g, rate_in // g
    nyquist = min(rate_in, rate_out) / 2.0
    f_pass, f_stop = PASS_FRACTION * nyquist, STOP_FRACTION * nyquist
    cutoff = (f_pass + f_stop) / 2.0
    fs_up = float(rate_in * up)
    # Kaiser's formulas: length for the attenuation and transition width, beta for the attenuation.
    width = 2.0 * math.pi * (f_stop - f_pass) / fs_up
    taps_up = math.ceil((STOPBAND_DB - 7.95) / (2.285 * width)) + 1
    half = max(1, math.ceil(taps_up / (2 * up)))
    beta = 0.1102 * (STOPBAND_DB - 8.7)
    m = np.arange(-half * up, half * up + 1, dtype=np.float64)  # taps at the upsampled rate
    proto = (2 * cutoff / fs_up) * np.sinc(2 * cutoff / fs_up * m) * np.kaiser(len(m), beta)
    proto = np.concatenate([proto, np.zeros(up - 1)])  # length (2 * half + 1) * up
    # proto[q * up + p] multiplies x[i + half - q]; reverse q so the bank dots a forward window.
    bank = proto.reshape(2 * half + 1, up).T[:, ::-1]
    bank = bank / bank.sum(axis=1, keepdims=True)  # unit DC gain in every phase
    return up, down, half, np.ascontiguousarray(bank, dtype=np.float32)


class Resampler:
    """Resample a mono float32 stream from ``rate_in`` to ``rate_out`` Hz, block by block.

    ``process(x)`` returns every output sample whose filter window is complete; ``flush()`` pads
    the end with zeros and returns the rest, after which the total output length is
    ``ceil(n_in * rate_out / rate_in)``. Not thread-safe: one consumer owns it.
    """

    def __init__(self, rate_in: int, rate_out: int = SAMPLE_RATE) -> None:
        if rate_in <= 0 or rate_out <= 0:
            raise ValueError(f"sample rates must be positive, got {rate_in} → {rate_out}")
        self.rate_in, self.rate_out = int(rate_in), int(rate_out)
        self._identity = self.rate_in == self.rate_out
        if not self._identity:
            self._up, self._down, self._half, self._bank = _design(self.rate_in, self.rate_out)
        else:
            self._up = self._down = 1
            self._half = 0
        # Input samples from absolute index _buf_start on; the signal is zero before index 0.
        self._buf = np.zeros(self._half, dtype=np.float32)
        self._buf_start = -self._half
        self._n_in = 0  # input samples received
        self._n_out = 0  # output samples produced
        self._flushed = False

    @property
    def samples_in(self) -> int:
        """Input samples received so far."""
        return self._n_in

    @property
    def samples_out(self) -> int:
        """Output samples produced so far."""
        return self._n_out

    def process(self, x: np.ndarray) -> np.ndarray:
        """Feed mono samples ``x`` (n,) and return the newly completed output samples (m,) float32."""
        if self._flushed:
            raise RuntimeError("Resampler.process after flush()")
        x = np.asarray(x, dtype=np.float32).reshape(-1)
        self._n_in += len(x)
        if self._identity:
            self._n_out += len(x)
            return x.copy()
        self._buf = np.concatenate([self._buf, x]) if len(self._buf) else x.copy()
        return self._run(self._n_in - 1)

    def flush(self) -> np.ndarray:
        """Pad the end with silence and return the remaining output samples."""
        if self._flushed or self._identity:
            self._flushed = True
            return np.zeros(0, dtype=np.float32)
        self._buf = np.concatenate([self._buf, np.zeros(self._half, dtype=np.float32)])
        last = self._n_in - 1 + self._half  # the padded signal is known up to here
        out = self._run(last, limit=-(-self._n_in * self._up // self._down))
        self._flushed = True
        return out

    def _run(self, last_known: int, limit: int | None = None) -> np.ndarray:
        """Produce outputs whose windows end at or before input index ``last_known``."""
        up, down, half = self._up, self._down, self._half
        # Output n needs input up to (n * down) // up + half.
        n_end = ((last_known - half + 1) * up + down - 1) // down if last_known - half + 1 > 0 else 0
        if limit is not None:
            n_end = min(n_end, limit)
        n0 = self._n_out
        if n_end <= n0:
            return np.zeros(0, dtype=np.float32)
        windows = np.lib.stride_tricks.sliding_window_view(self._buf, 2 * half + 1)
        pieces = []
        for a in range(n0, n_end, _CHUNK):
            n = np.arange(a, min(a + _CHUNK, n_end), dtype=np.int64)
            pos = n * down
            rows = windows[pos // up - half - self._buf_start]
            pieces.append(np.einsum("nk,nk->n", rows, self._bank[pos % up]))
        out = np.concatenate(pieces).astype(np.float32, copy=False)
        self._n_out = n_end
        # Keep only the input that later outputs still need.
        keep_from = (n_end * down) // up - half
        drop = max(0, keep_from - self._buf_start)
        if drop:
            self._buf = self._buf[drop:].copy()
            self._buf_start += drop
        return out


def resample(x: np.ndarray, rate_in: int, rate_out: int = SAMPLE_RATE) -> np.ndarray:
    """Resample a whole mono signal ``x`` (n,) in one go; returns float32 (ceil(n * out / in),)."""
    r = Resampler(rate_in, rate_out)
    head = r.process(x)
    return np.concatenate([head, r.flush()])
