"""Test helpers: a host loop over a pack's graphs, and the transformers reference (``whisper_reference``).

:class:`PackRunner` drives the pack's graphs the way the engine does, through the engine's own
classes: sessions from a real :class:`~captioner.engine.runtime.Runtime` (CPU unless told
otherwise), the encoder through :meth:`OnnxAcousticModel.run_encoder`, the chunk plan from
:meth:`Pack.chunk_plan`; it then runs the decoder chunk graphs of a schedule itself, writing
``new_k``/``new_v`` into a fixed cache the test can see and teacher-force (which the engine's
:class:`~captioner.engine.onnx_model.OnnxChunkRunner` keeps private).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
import onnxruntime as ort
from whisper_reference import Reference

from captioner.engine.onnx_model import MASKED as MASK
from captioner.engine.onnx_model import OnnxAcousticModel
from captioner.engine.runtime import Runtime
from captioner.models.pack import FRAMES_DIM, Pack, layer_feeds

__all__ = ["Encoded", "PackRunner", "Reference", "random_mel"]



def random_mel(n_mels: int, n_frames: int, bucket: int, seed: int) -> np.ndarray:
    """[1, n_mels, 100·bucket] float32: 2·n_frames random mel frames, then 0.0 padding (host convention)."""
    rng = np.random.default_rng(seed)
    mel = np.zeros((1, n_mels, 100 * bucket), np.float32)
    mel[:, :, : 2 * n_frames] = rng.uniform(-1.0, 1.5, (1, n_mels, 2 * n_frames)).astype(np.float32)
    return mel


@dataclass
class Encoded:
    """Encoder outputs of one round as the decoder chunks consume them."""

    bucket: int
    n_frames: int
    cross_k: np.ndarray
    cross_v: np.ndarray

    @property
    def cross_mask(self) -> np.ndarray:
        mask = np.full(50 * self.bucket, MASK, np.float32)
        mask[: self.n_frames] = 0.0
        return mask


class PackRunner:
    """Runs a pack's graphs with ONNX Runtime: the engine's runtime on the CPU with one thread, or
    sessions from ``make_options() -> (SessionOptions, providers)`` (a QNN test's own options)."""

    def __init__(self, pack: Pack, make_options=None) -> None:
        self.pack = pack
        self.make_options = make_options
        self.runtime = Runtime(pack, "cpu", threads=1)
        self.model = OnnxAcousticModel(pack, self.runtime)
        self._sessions: dict[tuple[Path, int | None], ort.InferenceSession] = {}

    def session(self, path: Path, frames: int | None = None) -> ort.InferenceSession:
        """The session of ``path``; a chunk graph's symbolic ``frames`` fixed when given (as on the NPU)."""
        if self.make_options is None:
            return self.runtime.session(path, frames)
        if (path, frames) not in self._sessions:
            so, providers = self.make_options()
            if frames is not None:
                so.add_free_dimension_override_by_name(FRAMES_DIM, frames)
            self._sessions[(path, frames)] = ort.InferenceSession(str(path), so, providers=providers)
        return self._sessions[(path, frames)]

    def empty_cache(self, bucket: int) -> np.ndarray:
        """A zeroed self-attention cache [L, 1, H, S, hd] of ``bucket``'s graphs."""
        d = self.pack.dims
        return np.zeros((d.decoder_layers, 1, d.decoder_heads, self.pack.cache_slots[bucket], d.head_dim), np.float32)

    def encode(self, mel: np.ndarray, n_frames: int, bucket: int) -> Encoded:
        """The encoder of ``bucket`` on ``mel`` [1, n_mels, 100·bucket] with ``n_frames`` real frames."""
        if self.make_options is None:
            k, v = self.model.run_encoder(mel, n_frames, bucket)
        else:
            k, v = self.session(self.pack.encoder_file(bucket)).run(
                ["cross_k", "cross_v"], {"mel": mel, "n_frames": np.array([n_frames], np.int64)})
        return Encoded(bucket, n_frames, k, v)

    def chunk(self, enc: Encoded, start: int, size: int, token: int, forced: list[int],
              self_k: np.ndarray, self_v: np.ndarray) -> dict[str, np.ndarray]:
        """Run one chunk graph over a cache whose slots < ``start`` are filled; returns its outputs by name."""
        known = self.pack.decoder_known(enc.bucket, start, size)
        assert min(forced[: known - 1], default=0) >= 0, f"chunk ({start}, {size}) batches {known} given tokens"
        sess = self.session(self.pack.decoder_file(enc.bucket, start, size), frames=50 * enc.bucket)
        self_mask = np.full(self_k.shape[3], MASK, np.float32)
        self_mask[:start] = 0.0
        feeds = {"token": np.array([token], np.int64), "forced": np.array(forced, np.int64),
                 "positions": np.arange(start, start + size, dtype=np.int64),
                 "self_mask": self_mask, "cross_mask": enc.cross_mask,
                 **layer_feeds(self_k=self_k, self_v=self_v, cross_k=enc.cross_k, cross_v=enc.cross_v)}
        names = [o.name for o in sess.get_outputs()]
        return dict(zip(names, sess.run(None, feeds), strict=True))

    def plan(self, bucket: int, schedule: str, positions: int | None = None) -> list[tuple[int, int]]:
        """(start, size) of the chunks of ``schedule``, continued with long chunks up to ``positions``
        (the pack's own plan, :meth:`Pack.chunk_plan`, cut there)."""
        full = self.pack.chunk_plan(bucket, schedule == "prefixed")
        head = len(self.pack.schedules[schedule])
        return [*full[:head], *(c for c in full[head:] if positions is not None and c[0] < positions)]

    def greedy(self, enc: Encoded, prompt: list[int], chunks: list[tuple[int, int]],
               forced_override: dict[int, int] | None = None) -> tuple[list[int], list[dict]]:
        """Decode through ``chunks``: positions < len(prompt) are forced, the rest are the model's argmax.

        ``forced_override`` forces given positions to given tokens (teacher forcing). Returns the
        token at every position 0…end and each chunk's outputs.
        """
        forced_at = {i: t for i, t in enumerate(prompt)} | (forced_override or {})
        seq = [prompt[0]]
        self_k, self_v = self.empty_cache(enc.bucket), self.empty_cache(enc.bucket)
        outputs = []
        for start, size in chunks:
            assert len(seq) == start + 1
            forced = [forced_at.get(start + s + 1, -1) for s in range(size - 1)]
            out = self.chunk(enc, start, size, seq[start], forced, self_k, self_v)
            outputs.append(out)
            end = min(start + size, self_k.shape[3])
            self_k[:, :, :, start:end] = out["new_k"][:, :, :, : end - start]
            self_v[:, :, :, start:end] = out["new_v"][:, :, :, : end - start]
            for s in range(size):
                pos = start + s + 1
                seq.append(forced_at.get(pos, int(out["tokens"][s])))
        return seq, outputs
