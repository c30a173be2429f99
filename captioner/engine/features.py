"""Whisper's log-mel front end in numpy, without the 30 s padding (NPUSPER.md §3.1, §3.4).

The transform is Whisper's (and transformers' ``WhisperFeatureExtractor``'s): periodic Hann window
of 400 samples, hop 160 (10 ms), the signal reflected by 200 samples at both ends (``center=True``,
``pad_mode="reflect"``), power spectrum of the 201 rfft bins, Slaney-normalised mel filterbank on the
Slaney mel scale, the trailing STFT frame dropped, ``log10(max(x, 1e-10))``, clamped to at least
(max of this clip − 8), then ``(x + 4) / 4``.

The one deliberate difference from stock Whisper is the NPUsper one: the clip is **not** padded to
30 s, so the clamp's maximum is that of the clip itself. For an encoder bucket the mel is then padded
with 0.0 in the normalised domain (:func:`pad_to_frames`); the graph masks those frames.
(whisper.cpp, which the reference engine uses, pads the end with zeros instead of reflecting; that
changes at most the last two mel frames, and we follow the Python implementations.)
"""

from __future__ import annotations

import functools

import numpy as np

from captioner.core import SAMPLE_RATE

__all__ = [
    "HOP_LENGTH",
    "N_FFT",
    "log_mel",
    "mel_filters",
    "mel_frames",
    "pad_to_frames",
]

N_FFT = 400  # samples per STFT window (25 ms)
HOP_LENGTH = 160  # samples per mel frame (10 ms)
_LOG_FLOOR = 1e-10
_DYNAMIC_RANGE = 8.0  # log10 units kept below the clip's maximum


def _hz_to_mel(freq: np.ndarray | float) -> np.ndarray:
    """Slaney mel scale: linear below 1 kHz (3 mel per 200 Hz), logarithmic above."""
    freq = np.asarray(freq, dtype=np.float64)
    mels = 3.0 * freq / 200.0
    logstep = 27.0 / np.log(6.4)
    above = freq >= 1000.0
    mels = np.where(above, 15.0 + np.log(np.maximum(freq, 1e-12) / 1000.0) * logstep, mels)
    return mels


def _mel_to_hz(mels: np.ndarray) -> np.ndarray:
    """Inverse of :func:`_hz_to_mel`."""
    mels = np.asarray(mels, dtype=np.float64)
    freq = 200.0 * mels / 3.0
    logstep = np.log(6.4) / 27.0
    return np.where(mels >= 15.0, 1000.0 * np.exp(logstep * (mels - 15.0)), freq)


@functools.cache
def mel_filters(n_mels: int) -> np.ndarray:
    """The Slaney mel filterbank, float64 [n_mels, 201] (read-only, cached per size).

    Equals ``transformers.audio_utils.mel_filter_bank(201, n_mels, 0, 8000, 16000, norm="slaney",
    mel_scale="slaney").T`` (and ``librosa.filters.mel``, which Whisper ships as ``mel_filters.npz``).
    """
    n_bins = N_FFT // 2 + 1
    fft_freqs = np.linspace(0.0, SAMPLE_RATE // 2, n_bins)
    mel_points = np.linspace(_hz_to_mel(0.0), _hz_to_mel(SAMPLE_RATE / 2), n_mels + 2)
    filter_freqs = _mel_to_hz(mel_points)
    widths = np.diff(filter_freqs)  # [n_mels + 1]
    slopes = filter_freqs[None, :] - fft_freqs[:, None]  # [n_bins, n_mels + 2]
    down = -slopes[:, :-2] / widths[:-1]
    up = slopes[:, 2:] / widths[1:]
    bank = np.maximum(0.0, np.minimum(down, up))  # [n_bins, n_mels]
    bank *= 2.0 / (filter_freqs[2 : n_mels + 2] - filter_freqs[:n_mels])  # Slaney area normalisation
    out = np.ascontiguousarray(bank.T)
    out.setflags(write=False)
    return out


@functools.cache
def _hann() -> np.ndarray:
    """Periodic Hann window of N_FFT samples (``torch.hann_window(400)``)."""
    n = np.arange(N_FFT, dtype=np.float64)
    window = 0.5 - 0.5 * np.cos(2.0 * np.pi * n / N_FFT)
    window.setflags(write=False)
    return window


def mel_frames(n_samples: int) -> int:
    """Number of mel frames for ``n_samples`` of audio: ``n_samples // 160``."""
    return int(n_samples) // HOP_LENGTH


def log_mel(audio: np.ndarray, n_mels: int = 80) -> np.ndarray:
    """Normalised log-mel spectrogram of a clip, with no padding to 30 s.

    Args:
        audio: float32/float64 [N] samples at 16 kHz, N ≥ 160; must be finite.
        n_mels: 80, or 128 for large-v3.

    Returns:
        float32 [n_mels, N // 160]; frame t covers samples t·160 − 200 … t·160 + 199.

    Raises:
        ValueError: fewer than 160 samples (no complete frame), or not one-dimensional.
    """
    x = np.asarray(audio, dtype=np.float64)
    if x.ndim != 1:
        raise ValueError(f"log_mel expects mono audio of shape (N,), got {x.shape}")
    n_frames = mel_frames(len(x))
    if n_frames < 1:
        raise ValueError(f"log_mel needs at least {HOP_LENGTH} samples, got {len(x)}")
    half = N_FFT // 2
    padded = np.pad(x, half, mode="reflect")
    frames = np.lib.stride_tricks.sliding_window_view(padded, N_FFT)[::HOP_LENGTH][:n_frames]
    spectrum = np.fft.rfft(frames * _hann(), axis=-1)  # [T, 201] complex128
    power = spectrum.real**2 + spectrum.imag**2
    mel = mel_filters(n_mels) @ power.T  # [n_mels, T]
    log_spec = np.log10(np.maximum(mel, _LOG_FLOOR))
    log_spec = np.maximum(log_spec, log_spec.max() - _DYNAMIC_RANGE)
    return ((log_spec + 4.0) / 4.0).astype(np.float32)


def pad_to_frames(mel: np.ndarray, total_frames: int) -> np.ndarray:
    """``mel`` [n_mels, T] as the encoder's input float32 [1, n_mels, total_frames], 0.0 after T.

    Raises:
        ValueError: ``T > total_frames`` (the clip does not fit the bucket).
    """
    n_mels, n_frames = mel.shape
    if n_frames > total_frames:
        raise ValueError(f"{n_frames} mel frames do not fit {total_frames}")
    out = np.zeros((1, n_mels, total_frames), dtype=np.float32)
    out[0, :, :n_frames] = mel
    return out
