"""int8 layers on x86-64 CPUs whose u8×s8 kernel saturates (AVX2 without VNNI).

A pack's int8 layers (``BuildOptions.layers``) run as ONNX Runtime ``MatMulInteger`` with uint8
activations and int8 weights [K, N]. Without VNNI, ONNX Runtime's x86-64 kernel multiplies them
with AVX2's ``vpmaddubsw``, which adds the two products of weights ``2i`` and ``2i + 1`` of a
column into a *saturating* int16: ``|a₁·b₁ + a₂·b₂|`` above 32 767 is cut there (ONNX Runtime's
quantization documentation: "reduce_range … better accuracy on non-VNNI CPUs"). Our activations
are uint8 around 128 (1…255) and our weights use the full ±127 of each output column, so pairs
overflow: measured on an AMD EPYC without AVX-512/VNNI, 64 products of 255 × 127 gave 1 048 544
instead of 2 072 640, and whisper-base's offline WER on the development corpus went 11.2 → 12.2 %
(long-form 15.5 → 18.5 %) against a VNNI machine with the same pack (ARM64's kernels do not saturate).

The fix keeps the fast kernel: where :func:`u8s8_saturates` (a one-off probe of the real kernel)
says so, every int8 weight column is scaled down just enough that each pair's ``|b₁| + |b₂|`` is at
most 128 (255 · 128 = 32 640 ≤ 32 767), and its float scale up by the same factor
(:func:`pair_factors`): on average ×0.80 (7.7 bits) for whisper-base, instead of ×0.5 for ONNX
Runtime's 7-bit ``reduce_range``. The pack is not changed; the runtime applies it as it reads the
weights (:class:`~captioner.engine.runtime.SharedWeights`), once per weight: ~0.5 s for all of
whisper-base's on that machine (0.2 s of it the vocabulary table).
"""

from __future__ import annotations

import base64
import functools
import logging

import numpy as np

__all__ = ["PAIR_LIMIT", "fit_scale", "fit_weight", "pair_factors", "scale_name", "u8s8_saturates", "weight_name"]

logger = logging.getLogger(__name__)

PAIR_LIMIT = 128  # max |b₁| + |b₂| of a weight pair: 255 · 128 = 32 640 fits a saturating int16
_Q_SUFFIX, _SCALE_SUFFIX = "int8_t", "int8_scale"  # names of GraphBuilder.int8_weight's two tensors


def scale_name(q_name: str) -> str | None:
    """The name of the scales [N] of the int8 weight ``q_name`` [K, N]; None for another tensor."""
    return q_name[: -len(_Q_SUFFIX)] + _SCALE_SUFFIX if q_name.endswith(_Q_SUFFIX) else None


def weight_name(s_name: str) -> str | None:
    """The int8 weight whose scales are ``s_name``; None for another tensor."""
    return s_name[: -len(_SCALE_SUFFIX)] + _Q_SUFFIX if s_name.endswith(_SCALE_SUFFIX) else None


# The probe graph: y[1, 1] = MatMulInteger(a uint8 [1, 2], b int8 [2, 1]), opset 13, serialised
# once (tests/engine/test_int8_kernel.py parses it with onnx and checks its one node and shapes), so
# the app does not import the onnx package for it.
PROBE_MODEL = base64.b64decode(
    "CAgSCWNhcHRpb25lcjplChgKAWEKAWISAXkiDU1hdE11bEludGVnZXISCnU4czhfcHJvYmVaEwoBYRIOCgwIAhIICgIIAQoCCAJa"
    "EwoBYhIOCgwIAxIICgIIAgoCCAFiEwoBeRIOCgwIBhIICgIIAQoCCAFCBAoAEA0=")


@functools.cache
def u8s8_saturates() -> bool:
    """Whether ONNX Runtime's CPU ``MatMulInteger`` (uint8 × int8) saturates pairs of products here:
    one run of :data:`PROBE_MODEL` on 255 · 127 twice (64 770, above int16). Cached for the process."""
    import onnxruntime as ort

    so = ort.SessionOptions()
    so.intra_op_num_threads = 1
    session = ort.InferenceSession(PROBE_MODEL, so, providers=["CPUExecutionProvider"])
    got = int(session.run(None, {"a": np.full((1, 2), 255, np.uint8), "b": np.full((2, 1), 127, np.int8)})[0][0, 0])
    saturates = got != 2 * 255 * 127
    if saturates:
        logger.info("this CPU's u8×s8 kernel saturates (no VNNI: %d for %d): int8 weights are fitted to it",
                    got, 2 * 255 * 127)
    return saturates


def pair_factors(q: np.ndarray) -> np.ndarray:
    """Per column of the int8 weight ``q`` [K, N]: the factor ≤ 1 that brings every pair
    ``|q[2i]| + |q[2i+1]|`` to at most :data:`PAIR_LIMIT` − 1 before rounding (so ≤ 128 after)."""
    mag = np.abs(q.astype(np.int16))
    if mag.shape[0] % 2:
        mag = np.concatenate([mag, np.zeros((1, mag.shape[1]), np.int16)])
    pairs = (mag[0::2] + mag[1::2]).max(axis=0).astype(np.float32)
    return np.minimum(np.float32(1.0), np.float32(PAIR_LIMIT - 1) / np.maximum(pairs, np.float32(1.0)))


def fit_weight(q: np.ndarray, factors: np.ndarray) -> np.ndarray:
    """The int8 weight ``q`` [K, N] scaled per column by ``factors`` [N] and rounded (C order).
    Row blocks keep the float temporary small (the vocabulary table is 512 × 51 865)."""
    out = np.empty(q.shape, np.int8)
    rows = max(1, (1 << 20) // max(1, q.shape[1]))
    for i in range(0, q.shape[0], rows):
        out[i : i + rows] = np.rint(q[i : i + rows].astype(np.float32) * factors[None, :])
    return out


def fit_scale(scale: np.ndarray, factors: np.ndarray) -> np.ndarray:
    """The float scales [N] of a weight fitted by :func:`fit_weight`: ``q' · scale' ≈ q · scale``."""
    return (np.asarray(scale, np.float32) / factors).astype(np.float32)
