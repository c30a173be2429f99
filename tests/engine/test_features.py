"""The numpy log-mel against transformers' WhisperFeatureExtractor (the reference implementation).

Reference call: ``WhisperFeatureExtractor(feature_size=n_mels)(audio, sampling_rate=16000,
padding="longest", return_tensors="np")``. With one clip ``"longest"`` pads nothing, so the extractor
computes the mel of the exact clip and takes the clamp maximum over that clip, exactly what our front end
promises (stock Whisper pads to 30 s first; that is the ``padding="max_length"`` default, not compared).
"""

from __future__ import annotations

import numpy as np
import pytest

from captioner.engine.features import log_mel, mel_filters, mel_frames, pad_to_frames

transformers = pytest.importorskip("transformers")


def _speechlike(n: int, seed: int) -> np.ndarray:
    """Harmonics with a moving pitch, noise bursts and a silent gap: a wide dynamic range."""
    rng = np.random.default_rng(seed)
    t = np.arange(n) / 16000
    f0 = 120 + 40 * np.sin(2 * np.pi * 0.7 * t)
    phase = 2 * np.pi * np.cumsum(f0) / 16000
    x = sum(np.sin(k * phase) / k for k in range(1, 12)) * (0.5 + 0.5 * np.sin(2 * np.pi * 2.3 * t))
    x = 0.1 * x + 0.02 * rng.standard_normal(n)
    x[n // 3 : n // 3 + 4000] = 0.0
    return x.astype(np.float32)


def _reference(audio: np.ndarray, n_mels: int) -> np.ndarray:
    fe = transformers.WhisperFeatureExtractor(feature_size=n_mels)
    out = fe(audio, sampling_rate=16000, padding="longest", return_tensors="np")
    return out["input_features"][0]


@pytest.mark.parametrize("n_mels", [80, 128])
def test_filterbank_equals_transformers(n_mels: int) -> None:
    from transformers.audio_utils import mel_filter_bank

    ref = mel_filter_bank(201, n_mels, 0.0, 8000.0, 16000, norm="slaney", mel_scale="slaney")
    np.testing.assert_allclose(mel_filters(n_mels), ref.T, rtol=1e-6, atol=1e-9)


@pytest.mark.parametrize(
    ("n_samples", "n_mels", "seed"),
    [(48000, 80, 0), (16000 * 4 + 320 * 7, 80, 1), (16000 * 5 + 123, 128, 2), (16000 * 30, 80, 3), (3200, 80, 4)],
)
def test_log_mel_matches_transformers(n_samples: int, n_mels: int, seed: int) -> None:
    audio = _speechlike(n_samples, seed)
    ours = log_mel(audio, n_mels)
    ref = _reference(audio, n_mels)
    assert ours.dtype == np.float32
    assert ours.shape == (n_mels, n_samples // 160) == ref.shape
    np.testing.assert_allclose(ours[:, :-1], ref[:, :-1], atol=1e-4, rtol=0)
    # the last frame too, in practice (both reflect at the end)
    np.testing.assert_allclose(ours[:, -1], ref[:, -1], atol=1e-4, rtol=0)


def test_clamp_uses_the_clip_maximum_not_30s() -> None:
    audio = _speechlike(48000, 5)
    mel = log_mel(audio)
    assert mel.min() == pytest.approx(mel.max() - 2.0, abs=1e-6)  # 8 log10 units / 4


def test_silence_and_short_input() -> None:
    mel = log_mel(np.zeros(16000, np.float32))
    assert np.all(mel == mel[0, 0])  # log floor everywhere, no NaN
    assert np.isfinite(mel).all()
    assert log_mel(np.ones(160, np.float32)).shape == (80, 1)
    with pytest.raises(ValueError, match="at least 160"):
        log_mel(np.zeros(100, np.float32))
    with pytest.raises(ValueError, match="mono"):
        log_mel(np.zeros((2, 16000), np.float32))


def test_pad_to_frames() -> None:
    mel = log_mel(_speechlike(32000, 6))
    assert mel_frames(32000) == 200
    padded = pad_to_frames(mel, 300)
    assert padded.shape == (1, 80, 300) and padded.dtype == np.float32
    np.testing.assert_array_equal(padded[0, :, :200], mel)
    assert not padded[0, :, 200:].any()
    with pytest.raises(ValueError):
        pad_to_frames(mel, 199)
