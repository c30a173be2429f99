"""The real :class:`~captioner.engine.model.AcousticModel`: a model pack's ONNX graphs on ONNX Runtime.

Per round: pick the smallest encoder bucket that holds the audio, compute the log-mel of the exact
audio (no 30 s padding), pad it with 0.0 to the bucket, run the bucket's encoder with the real frame
count (the graph masks the rest), then hand out a :class:`OnnxChunkRunner` that runs the bucket's
decoder chunk graphs along the pack's schedule (ARCHITECTURE.md §5).

KV cache: each runner owns two preallocated flat buffers per K and V, each large enough for the
bucket's longest chain. The cache of ``1 + p`` positions is a contiguous view
``buf[:L·H·(1+p)·D].reshape(L, 1, H, 1+p, D)`` — exactly the graph's ``self_k`` input, no copy on the
way in. After a chunk the next view (``1+p+K`` positions) is written into the other buffer (old rows
plus ``new_k``) and the two swap: one copy of the cache per chunk and no allocation. Slot 0 is the
graph's dummy position and holds zeros.
"""

from __future__ import annotations

import logging
import time
from typing import TYPE_CHECKING

import numpy as np

from captioner.engine.features import log_mel, pad_to_frames
from captioner.engine.model import SAMPLES_PER_FRAME, ChunkOutput, Encoding
from captioner.engine.runtime import Runtime

if TYPE_CHECKING:
    from pathlib import Path

    from captioner.models.pack import Pack

__all__ = ["OnnxAcousticModel", "OnnxChunkRunner"]

logger = logging.getLogger(__name__)

SAMPLE_RATE = 16_000
MASKED = -100.0  # additive cross-attention bias of padding frames (finite for fp16 NPUs)
_OUTPUTS = ("tokens", "token_logit", "eot_logit", "attn_last", "attn_align", "new_k", "new_v")


def _load_vocabulary(pack: Pack):
    """The pack's :class:`~captioner.engine.tokens.Vocabulary` (tokens.py reads the pack's tables)."""
    from captioner.engine.tokens import Vocabulary

    return Vocabulary.from_pack(pack)


class OnnxAcousticModel:
    """Whisper from a model pack, run by ONNX Runtime.

    Args:
        pack: the loaded pack.
        runtime: sessions and providers for ``pack`` (default: ``Runtime(pack)``, provider auto).

    Attributes:
        vocab: the pack's vocabulary.
        buckets: encoder buckets in seconds, ascending.
    """

    def __init__(self, pack: Pack, runtime: Runtime | None = None) -> None:
        self.pack = pack
        self.runtime = runtime or Runtime(pack)
        self.buckets: tuple[int, ...] = tuple(pack.buckets)
        self.vocab = _load_vocabulary(pack)
        self._plans: dict[tuple[int, bool], tuple[tuple[int, int], ...]] = {}
        dims = pack.dims
        self._kv_shape = (dims.decoder_layers, 1, dims.decoder_heads, dims.head_dim)

    @property
    def provider(self) -> str:
        """Label of the execution provider running the graphs (``"CPU"``, ``"QNN-HTP"``, ...)."""
        return self.runtime.provider

    # -- plan ---------------------------------------------------------------------------------
    def chunk_plan(self, bucket: int, prefixed: bool) -> tuple[tuple[int, int], ...]:
        """(start, size) chunks of a round: the pack's schedule, then for the longest bucket the
        chunks of ``long_chunk`` steps that the pack provides, up to its ``max_positions``."""
        key = (int(bucket), bool(prefixed))
        if key not in self._plans:
            sizes = self.pack.schedules["prefixed" if prefixed else "default"]
            available = set(self.pack.decoder_chunks(bucket))
            plan: list[tuple[int, int]] = []
            start = 0
            for size in sizes:
                plan.append((start, size))
                start += size
            while (start, self.pack.long_chunk) in available:
                plan.append((start, self.pack.long_chunk))
                start += self.pack.long_chunk
            missing = [c for c in plan if c not in available]
            if missing:
                from captioner.errors import ModelError

                raise ModelError(f"pack {self.pack.root} lacks decoder chunks {missing} of bucket {bucket} s")
            self._plans[key] = tuple(plan)
        return self._plans[key]

    def bucket_for(self, n_samples: int) -> int:
        """Smallest bucket (seconds) that holds ``n_samples`` of 16 kHz audio.

        Raises:
            ValueError: longer than the longest bucket.
        """
        for bucket in self.buckets:
            if n_samples <= bucket * SAMPLE_RATE:
                return bucket
        raise ValueError(f"{n_samples / SAMPLE_RATE:.2f} s of audio exceed the longest bucket ({self.buckets[-1]} s)")

    def graphs(self, bucket: int) -> list[Path]:
        """Every graph file of ``bucket``: its encoder, then its decoder chunks."""
        return [self.pack.encoder_file(bucket)] + [self.pack.decoder_file(bucket, s, k)
                                                   for s, k in self.pack.decoder_chunks(bucket)]

    def preload(self, bucket: int) -> None:
        """Create the sessions of every graph of ``bucket`` now instead of on first use."""
        for graph in self.graphs(bucket):
            self.runtime.session(graph)

    # -- encoder ------------------------------------------------------------------------------
    def encode(self, audio: np.ndarray, *, native_30s: bool = False) -> Encoding:
        """Log-mel + encoder for ``audio`` (float32 [N], N a positive multiple of 320, N ≤ 30 s).

        With ``native_30s`` the audio itself is zero-padded to 30 s and its mel computed over the
        padded clip, as stock Whisper does; every frame is real (no mask).

        Raises:
            ValueError: N not a positive multiple of 320, or longer than the longest bucket.
        """
        audio = np.asarray(audio, dtype=np.float32)
        n = len(audio)
        if audio.ndim != 1 or n == 0 or n % SAMPLES_PER_FRAME:
            raise ValueError(f"encode needs mono audio of whole 20 ms frames, got shape {audio.shape}")
        t0 = time.perf_counter()
        if native_30s:
            bucket = self.buckets[-1]
            total = 50 * bucket
            if n > bucket * SAMPLE_RATE:
                raise ValueError(f"{n / SAMPLE_RATE:.2f} s of audio exceed {bucket} s")
            padded = np.zeros(bucket * SAMPLE_RATE, dtype=np.float32)
            padded[:n] = audio
            mel = pad_to_frames(log_mel(padded, self.pack.dims.n_mels), 2 * total)
            n_frames = total
        else:
            bucket = self.bucket_for(n)
            total = 50 * bucket
            n_frames = n // SAMPLES_PER_FRAME
            mel = pad_to_frames(log_mel(audio, self.pack.dims.n_mels), 2 * total)
        t1 = time.perf_counter()
        sess = self.runtime.session(self.pack.encoder_file(bucket))
        cross_k, cross_v = sess.run(["cross_k", "cross_v"],
                                    {"mel": mel, "n_frames": np.array([n_frames], dtype=np.int64)})
        t2 = time.perf_counter()
        mask = np.full(total, MASKED, dtype=np.float32)
        mask[:n_frames] = 0.0
        return Encoding(
            bucket=bucket, n_frames=n_frames, total_frames=total, native_30s=native_30s,
            mel_ms=(t1 - t0) * 1000.0, encoder_ms=(t2 - t1) * 1000.0,
            payload=(cross_k, cross_v, mask),
        )

    def decoder(self, encoding: Encoding) -> OnnxChunkRunner:
        """A fresh decoder (empty KV cache) over ``encoding`` for one round."""
        plan = self.chunk_plan(encoding.bucket, False) + self.chunk_plan(encoding.bucket, True)
        capacity = 1 + max(start + size for start, size in plan)
        return OnnxChunkRunner(self, encoding, capacity)

    def close(self) -> None:
        """Release every session."""
        self.runtime.close()


class OnnxChunkRunner:
    """One round's decoder over one encoding; implements :class:`~captioner.engine.model.ChunkRunner`.

    Args:
        model: the model whose graphs to run.
        encoding: the round's encoder output.
        capacity: KV positions to preallocate, dummy slot included.
    """

    def __init__(self, model: OnnxAcousticModel, encoding: Encoding, capacity: int) -> None:
        self._model = model
        self._encoding = encoding
        self._cross_k, self._cross_v, self._mask = encoding.payload
        layers, _, heads, head_dim = model._kv_shape
        self._row = layers * heads * head_dim  # floats per position
        self._capacity = capacity
        self._bufs = [np.empty(self._row * capacity, dtype=np.float32) for _ in range(4)]
        self._k, self._v = self._view(0, 1), self._view(1, 1)
        self._k.fill(0.0)  # slot 0: the dummy position, masked in the graph
        self._v.fill(0.0)
        self._live, self._spare = (0, 1), (2, 3)  # buffer indices of the current and the next K/V
        self.consumed = 0  # positions consumed so far

    def _view(self, index: int, positions: int) -> np.ndarray:
        layers, one, heads, head_dim = self._model._kv_shape
        return self._bufs[index][: self._row * positions].reshape(layers, one, heads, positions, head_dim)

    def run(self, start: int, size: int, token: int, forced: np.ndarray) -> ChunkOutput:
        """Dispatch chunk ``(start, size)``; see :meth:`captioner.engine.model.ChunkRunner.run`.

        Raises:
            ValueError: ``start`` is not the number of positions consumed so far, ``forced`` is not
                [size − 1], or the chunk would overflow the cache.
        """
        if start != self.consumed:
            raise ValueError(f"chunk starts at {start} but {self.consumed} positions were consumed")
        forced = np.asarray(forced, dtype=np.int64).reshape(-1)
        if forced.shape != (size - 1,):
            raise ValueError(f"forced must have {size - 1} entries, got {forced.shape}")
        if 1 + start + size > self._capacity:
            raise ValueError(f"chunk ({start}, {size}) exceeds the {self._capacity - 1} positions of this round")
        enc = self._encoding
        graph = self._model.pack.decoder_file(enc.bucket, start, size)
        sess = self._model.runtime.session(graph)
        t0 = time.perf_counter()
        tokens, token_logit, eot_logit, attn_last, attn_align, new_k, new_v = sess.run(_OUTPUTS, {
            "token": np.array([token], dtype=np.int64), "forced": forced,
            "self_k": self._k, "self_v": self._v,
            "cross_k": self._cross_k, "cross_v": self._cross_v, "cross_mask": self._mask,
        })
        elapsed = (time.perf_counter() - t0) * 1000.0
        self._append(new_k, new_v, start, size)
        n = enc.n_frames
        return ChunkOutput(
            tokens=tokens, token_logit=token_logit, eot_logit=eot_logit,
            attn_last=np.ascontiguousarray(attn_last[:, :n]), attn_align=np.ascontiguousarray(attn_align[:, :n]),
            elapsed_ms=elapsed,
        )

    def _append(self, new_k: np.ndarray, new_v: np.ndarray, start: int, size: int) -> None:
        """Write the cache of ``1 + start + size`` positions into the spare buffers and swap."""
        old = 1 + start
        (ki, vi), current = self._spare, self._live
        k, v = self._view(ki, old + size), self._view(vi, old + size)
        k[:, :, :, :old] = self._k
        k[:, :, :, old:] = new_k
        v[:, :, :, :old] = self._v
        v[:, :, :, old:] = new_v
        self._k, self._v = k, v
        self._live, self._spare = (ki, vi), current
        self.consumed = start + size
