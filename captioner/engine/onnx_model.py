"""The real :class:`~captioner.engine.model.AcousticModel`: a model pack's ONNX graphs on ONNX Runtime.

Per round: pick the smallest encoder bucket that holds the audio, compute the log-mel of the exact
audio (no 30 s padding), pad it with 0.0 to the bucket, run the bucket's encoder with the real frame
count (the graph masks the rest), then hand out a :class:`OnnxChunkRunner` that runs the bucket's
decoder chunk graphs along the pack's schedule (ARCHITECTURE.md §5). On a static-shape provider (the
NPU) a bucket's chunk graphs may be compiled for a longer bucket's frame count
(:meth:`Runtime.static_decoder_frames <captioner.engine.runtime.Runtime.static_decoder_frames>`): the
runner pads the cross-attention K/V and mask to it with masked frames, which changes no output.

KV cache: a runner uses one [L, 1, H, S, D] array for K and one for V (S: the bucket's
``cache_slots``), which are the graphs' ``self_k``/``self_v`` inputs as they are, and the
``self_mask`` [S] that opens the slots filled so far. After a chunk its ``new_k``/``new_v`` are
written into slots p…p+K−1 in place: no allocation and no copy of the old positions. The arrays are
allocated once per cache size and thread and reused by every round (the slots the previous round
filled are zeroed and masked again): rounds allocate no KV memory. Every dispatch goes through
:meth:`Runtime.run <captioner.engine.runtime.Runtime.run>`: a provider failing mid-session is
replaced by the next one and the dispatch runs again on the same host arrays. A runner is therefore valid until
the next :meth:`OnnxAcousticModel.decoder` call on its thread; a superseded runner refuses to run.
"""

from __future__ import annotations

import logging
import threading
import time
from typing import TYPE_CHECKING, cast

import numpy as np

from captioner.core import SAMPLE_RATE
from captioner.engine.features import log_mel, pad_to_frames
from captioner.engine.model import SAMPLES_PER_FRAME, BeamOutput, ChunkOutput, Encoding
from captioner.engine.runtime import Runtime, release_free_heap
from captioner.models.pack import BEAM_OUTPUTS, decoder_outputs, layer_feeds

if TYPE_CHECKING:
    from pathlib import Path

    from captioner.models.pack import Pack

__all__ = ["OnnxAcousticModel", "OnnxBeamStep", "OnnxChunkRunner"]

logger = logging.getLogger(__name__)

MASKED = -100.0  # additive cross-attention bias of padding frames (finite for fp16 NPUs)


def _load_vocabulary(pack: Pack):
    """The pack's :class:`~captioner.engine.tokens.Vocabulary` (tokens.py reads the pack's tables)."""
    from captioner.engine.tokens import Vocabulary

    return Vocabulary.from_pack(pack)


class _KvCache:
    """One thread's self-attention cache for one cache size, reused round after round.

    Attributes:
        k, v: float32 [L, 1, H, S, D]; self_mask: float32 [S] (0 open, ``MASKED`` closed).
        used: slots the current round has written (zeroed again when the next round begins).
        generation: counts the rounds that took this cache, so a superseded runner can tell.
    """

    def __init__(self, shape: tuple[int, ...]) -> None:
        self.k = np.zeros(shape, dtype=np.float32)
        self.v = np.zeros_like(self.k)
        self.self_mask = np.full(shape[3], MASKED, dtype=np.float32)
        self.used = 0
        self.generation = 0

    def take(self) -> int:
        """Reset the slots the last round wrote and return the new round's generation."""
        if self.used:
            self.k[:, :, :, : self.used] = 0.0
            self.v[:, :, :, : self.used] = 0.0
            self.self_mask[: self.used] = MASKED
            self.used = 0
        self.generation += 1
        return self.generation


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
        self.outputs = list(decoder_outputs(pack.special))  # what a chunk graph returns, in order
        self._plans: dict[tuple[int, bool], tuple[tuple[int, int], ...]] = {}
        dims = pack.dims
        self._kv_shape = (dims.decoder_layers, 1, dims.decoder_heads, dims.head_dim)
        self._kv_local = threading.local()  # per thread: cache slots -> _KvCache

    def _kv_cache(self, slots: int) -> _KvCache:
        """This thread's KV cache of ``slots`` positions (created on first use)."""
        caches = self._kv_local.__dict__.setdefault("caches", {})
        if slots not in caches:
            layers, one, heads, head_dim = self._kv_shape
            caches[slots] = _KvCache((layers, one, heads, slots, head_dim))
        return caches[slots]

    @property
    def provider(self) -> str:
        """Label of the execution provider running the graphs (``"CPU"``, ``"QNN-HTP"``, ...)."""
        return self.runtime.provider

    # -- plan ---------------------------------------------------------------------------------
    def chunk_plan(self, bucket: int, prefixed: bool) -> tuple[tuple[int, int], ...]:
        """(start, size) chunks of a round, as the pack plans them (:meth:`Pack.chunk_plan`), cached."""
        key = (int(bucket), bool(prefixed))
        if key not in self._plans:
            self._plans[key] = self.pack.chunk_plan(bucket, prefixed)
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

    def beam_width(self, bucket: int) -> int:
        """Hypotheses of the pack's beam step for ``bucket`` (0: none; closing rounds decode greedily)."""
        found = self.pack.beam(bucket)
        return found[1] if found else 0

    def graphs(self, bucket: int) -> list[Path]:
        """Every graph file of ``bucket``, once: its encoder, then its decoder chunk graphs, its
        verifier and its beam step (where the pack has them)."""
        decoders = dict.fromkeys(self.pack.decoder_file(bucket, s, k) for s, k in self.pack.decoder_chunks(bucket))
        extra = [found[0] for found in (self.pack.verifier(bucket), self.pack.beam(bucket)) if found]
        return [self.pack.encoder_file(bucket), *decoders, *extra]

    def preload(self, bucket: int) -> None:
        """Create the sessions of every graph of ``bucket`` now instead of on first use."""
        encoder, *decoders = self.graphs(bucket)
        self.runtime.session(encoder)
        for graph in decoders:
            self.runtime.session(graph, frames=self.runtime.decoder_frames(bucket))

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
        cross_k, cross_v = self.run_encoder(mel, n_frames, bucket)
        t2 = time.perf_counter()
        mask = np.full(total, MASKED, dtype=np.float32)
        mask[:n_frames] = 0.0
        return Encoding(
            bucket=bucket, n_frames=n_frames, total_frames=total, native_30s=native_30s,
            mel_ms=(t1 - t0) * 1000.0, encoder_ms=(t2 - t1) * 1000.0,
            payload=(cross_k, cross_v, mask),
        )

    def run_encoder(self, mel: np.ndarray, n_frames: int, bucket: int) -> tuple[np.ndarray, np.ndarray]:
        """The encoder graph of ``bucket`` on a log-mel: cross-attention K and V of every decoder layer.

        Args:
            mel: float32 [1, n_mels, 100·bucket], real frames first, then the host's padding
                (:func:`~captioner.engine.features.pad_to_frames`).
            n_frames: real encoder frames (20 ms each); the rest are masked.
            bucket: the encoder bucket in seconds.

        Returns:
            cross_k, cross_v: float32 [layers, 1, heads, head_dim, 50·bucket] each.
        """
        if bucket == self.buckets[-1] and len(self.buckets) > 1:
            release_free_heap()  # the long bucket's buffers do not fit the short rounds' freed blocks
        # runtime.run fails over to the next provider and runs again if the dispatch fails (a lost NPU)
        cross_k, cross_v = self.runtime.run(self.pack.encoder_file(bucket), ["cross_k", "cross_v"],
                                            {"mel": mel, "n_frames": np.array([n_frames], dtype=np.int64)})
        return cross_k, cross_v

    def decoder(self, encoding: Encoding) -> OnnxChunkRunner:
        """A decoder with an empty KV cache over ``encoding`` for one round (it supersedes this
        thread's previous runner, whose cache it reuses)."""
        return OnnxChunkRunner(self, encoding, self.pack.cache_slots[encoding.bucket])

    def close(self) -> None:
        """Release every session."""
        self.runtime.close()


class OnnxChunkRunner:
    """One round's decoder over one encoding; implements :class:`~captioner.engine.model.ChunkRunner`.

    Args:
        model: the model whose graphs to run.
        encoding: the round's encoder output.
        slots: positions the fixed KV cache holds (the bucket's ``cache_slots``).
    """

    def __init__(self, model: OnnxAcousticModel, encoding: Encoding, slots: int) -> None:
        self._model = model
        self._encoding = encoding
        payload = cast(tuple[np.ndarray, np.ndarray, np.ndarray], encoding.payload)  # written by encode()
        self._cross_k, self._cross_v, self._mask = payload
        # a static-shape provider runs the chunk graphs of a group of buckets at one frame count
        # (Runtime.static_decoder_frames): the frames past the bucket's are masked like its padding
        self._frames = max(encoding.total_frames, model.runtime.decoder_frames(encoding.bucket))
        extra = self._frames - encoding.total_frames
        if extra:
            pad = [(0, 0)] * (self._cross_k.ndim - 1) + [(0, extra)]
            self._cross_k, self._cross_v = np.pad(self._cross_k, pad), np.pad(self._cross_v, pad)
            self._mask = np.concatenate([self._mask, np.full(extra, MASKED, dtype=np.float32)])
        self._slots = slots
        self._cache = model._kv_cache(slots)
        self._generation = self._cache.take()
        self._k, self._v, self._self_mask = self._cache.k, self._cache.v, self._cache.self_mask
        # each layer's cache and cross K/V as views: the graph reads them in place, the cache
        # writes below land in them
        self._layer_feeds = layer_feeds(self_k=self._k, self_v=self._v, cross_k=self._cross_k, cross_v=self._cross_v)
        self.consumed = 0  # positions consumed so far

    def run(self, start: int, size: int, token: int, forced: np.ndarray) -> ChunkOutput:
        """Dispatch chunk ``(start, size)``; see :meth:`captioner.engine.model.ChunkRunner.run`.

        Raises:
            ValueError: ``start`` is not the number of positions consumed so far, ``forced`` is not
                [size − 1], a token the graph batches is not given, or the cache cannot hold ``start``.
        """
        if self._cache.generation != self._generation:
            raise RuntimeError("this round's decoder was superseded by a newer one on the same thread")
        if start != self.consumed:
            raise ValueError(f"chunk starts at {start} but {self.consumed} positions were consumed")
        forced = np.asarray(forced, dtype=np.int64).reshape(-1)
        if forced.shape != (size - 1,):
            raise ValueError(f"forced must have {size - 1} entries, got {forced.shape}")
        if start > self._slots:
            raise ValueError(f"chunk ({start}, {size}) starts beyond the {self._slots} cached positions of this round")
        enc = self._encoding
        pack = self._model.pack
        known = pack.decoder_known(enc.bucket, start, size)
        if (forced[: known - 1] < 0).any():
            raise ValueError(f"chunk ({start}, {size}) batches its first {known} steps: their tokens must be given")
        return self._dispatch(pack.decoder_file(enc.bucket, start, size), start, size, token, forced)

    @property
    def verify_size(self) -> int:
        """Tokens :meth:`verify` checks per dispatch; 0 when the pack has no verifier for this bucket."""
        found = self._model.pack.verifier(self._encoding.bucket)
        return found[1] if found else 0

    def verify(self, start: int, token: int, proposal: np.ndarray) -> ChunkOutput:
        """Consume ``token`` at ``start`` and the K − 1 ``proposal`` tokens after it as one batch;
        row s of the output is the model's prediction for position ``start + s + 1`` (every row
        predicts). A rejected proposal is undone with :meth:`rewind`.

        Raises:
            ValueError: no verifier, ``start`` is not the number of positions consumed, or the
                proposal is not K − 1 given tokens.
        """
        if self._cache.generation != self._generation:
            raise RuntimeError("this round's decoder was superseded by a newer one on the same thread")
        found = self._model.pack.verifier(self._encoding.bucket)
        if found is None:
            raise ValueError(f"the pack has no verifier for the {self._encoding.bucket} s bucket")
        graph, size = found
        if start != self.consumed:
            raise ValueError(f"chunk starts at {start} but {self.consumed} positions were consumed")
        proposal = np.asarray(proposal, dtype=np.int64).reshape(-1)
        if proposal.shape != (size - 1,) or (proposal < 0).any():
            raise ValueError(f"a verifier takes {size - 1} given tokens, got {proposal.tolist()}")
        if start > self._slots:
            raise ValueError(f"chunk ({start}, {size}) starts beyond the {self._slots} cached positions of this round")
        return self._dispatch(graph, start, size, token, proposal)

    def beams(self, consumed: int) -> OnnxBeamStep:
        """B hypotheses that continue positions ``0 … consumed − 1`` of this round's cache.

        Raises:
            ValueError: no beam graph, or ``consumed`` is more than the positions consumed.
        """
        if self._cache.generation != self._generation:
            raise RuntimeError("this round's decoder was superseded by a newer one on the same thread")
        found = self._model.pack.beam(self._encoding.bucket)
        if found is None:
            raise ValueError(f"the pack has no beam graph for the {self._encoding.bucket} s bucket")
        if not 0 < consumed <= min(self.consumed, self._slots):
            raise ValueError(f"cannot continue {consumed} positions: {self.consumed} were consumed")
        return OnnxBeamStep(self, found[0], found[1], consumed)

    def rewind(self, consumed: int) -> None:
        """Forget the positions from ``consumed`` on (their cache slots are masked again), e.g. the
        rows of a verifier after its first rejected proposal."""
        if not 0 <= consumed <= self.consumed:
            raise ValueError(f"cannot rewind to {consumed}: {self.consumed} positions were consumed")
        self._self_mask[min(consumed, self._slots) : min(self.consumed, self._slots)] = MASKED
        self.consumed = consumed

    def _dispatch(self, graph: Path, start: int, size: int, token: int, forced: np.ndarray) -> ChunkOutput:
        """Run one chunk graph at ``start`` over this round's cache and write its new K/V there."""
        enc = self._encoding
        t0 = time.perf_counter()
        names = self._model.outputs
        # The feeds are host arrays the run does not change, so a dispatch that fails over to the next
        # provider (runtime.run) runs again on the same cache: the round goes on where it was.
        out = dict(zip(names, self._model.runtime.run(graph, names, {
            "token": np.array([token], dtype=np.int64), "forced": forced,
            "positions": np.arange(start, start + size, dtype=np.int64),
            "self_mask": self._self_mask, "cross_mask": self._mask,
            **self._layer_feeds,
        }, frames=self._frames), strict=True))
        new_k, new_v = out["new_k"], out["new_v"]
        elapsed = (time.perf_counter() - t0) * 1000.0
        end = min(start + size, self._slots)  # the last chunk's keys are never read again
        self._cache.used = max(self._cache.used, end)  # before the writes: the next round zeroes them
        self._k[:, :, :, start:end] = new_k[:, :, :, : end - start]
        self._v[:, :, :, start:end] = new_v[:, :, :, : end - start]
        self._self_mask[start:end] = 0.0
        self.consumed = start + size
        n = enc.n_frames
        return ChunkOutput(
            tokens=out["tokens"], token_logit=out["token_logit"], eot_logit=out["eot_logit"],
            attn_last=np.ascontiguousarray(out["attn_last"][:, :n]),
            attn_align=np.ascontiguousarray(out["attn_align"][:, :n]),
            elapsed_ms=elapsed, logsumexp=out["logsumexp"], nospeech_logit=out.get("nospeech_logit"),
            lang_logits=out.get("lang_logits"),
        )


class OnnxBeamStep:
    """B hypotheses over a pack's beam-step graph; implements :class:`~captioner.engine.model.BeamStep`.

    The caches are [L, 1, S, B, H, D] for K and for V, position-major (position q of hypothesis b at
    [:, :, q, b]), every hypothesis starting as a copy of the round's cache; each layer's graph input
    is the [q·B + b, H, D] view of the filled positions (all S on a static-shape provider, whose
    ``self_mask`` then closes the rest). A reorder copies the filled positions (whisper-base, 40
    positions: ~5 MB).
    """

    def __init__(self, runner: OnnxChunkRunner, graph: Path, size: int, consumed: int) -> None:
        self._runner, self._graph, self.size = runner, graph, size
        slots = self.limit = runner._slots
        layers, _, heads, _, head_dim = runner._k.shape
        self._k = np.zeros((layers, 1, slots, size, heads, head_dim), np.float32)
        self._v = np.zeros_like(self._k)
        self._k[:, :, :consumed] = runner._k[:, :, :, :consumed].transpose(0, 1, 3, 2, 4)[:, :, :, None]
        self._v[:, :, :consumed] = runner._v[:, :, :, :consumed].transpose(0, 1, 3, 2, 4)[:, :, :, None]
        self._mask = np.full((size, slots, size), MASKED, np.float32)  # [row, position, hypothesis]
        for b in range(size):
            self._mask[b, :consumed, b] = 0.0
        flat = (layers, 1, slots * size, heads, head_dim)
        self._k_rows, self._v_rows = self._k.reshape(flat), self._v.reshape(flat)  # views
        self.position = consumed

    def step(self, tokens: np.ndarray) -> BeamOutput:
        """Consume ``tokens[b]`` at :attr:`position` in hypothesis b; see the protocol."""
        tokens = np.asarray(tokens, dtype=np.int64).reshape(-1)
        if tokens.shape != (self.size,):
            raise ValueError(f"a beam step takes {self.size} tokens, got {tokens.tolist()}")
        if self.position >= self.limit:
            raise ValueError(f"the beam caches hold {self.limit} positions")
        runner, p = self._runner, self.position
        model = runner._model
        names = [*model.outputs, *BEAM_OUTPUTS]
        # the filled rows only where shapes are free; a static-shape provider compiled them all
        rows = self._k_rows.shape[2] if model.runtime.static_shapes else p * self.size
        feeds = layer_feeds(self_k=self._k_rows[:, :, :rows], self_v=self._v_rows[:, :, :rows],
                            cross_k=runner._cross_k, cross_v=runner._cross_v)
        mask = np.ascontiguousarray(self._mask.reshape(self.size, -1)[:, :rows])
        t0 = time.perf_counter()
        out = dict(zip(names, model.runtime.run(self._graph, names, {
            "token": tokens[:1], "forced": tokens[1:], "positions": np.full(self.size, p, dtype=np.int64),
            "self_mask": mask, "cross_mask": runner._mask, **feeds,
        }, frames=runner._frames), strict=True))
        elapsed = (time.perf_counter() - t0) * 1000.0
        self._k[:, :, p] = out["new_k"].transpose(0, 1, 3, 2, 4)  # [L, 1, H, B, D] -> [L, 1, B, H, D]
        self._v[:, :, p] = out["new_v"].transpose(0, 1, 3, 2, 4)
        for b in range(self.size):
            self._mask[b, p, b] = 0.0
        self.position = p + 1
        n = runner._encoding.n_frames
        return BeamOutput(top_tokens=out["top_tokens"], top_logits=out["top_logits"], eot_logit=out["eot_logit"],
                          logsumexp=out["logsumexp"], attn_last=np.ascontiguousarray(out["attn_last"][:, :n]),
                          attn_align=np.ascontiguousarray(out["attn_align"][:, :n]), elapsed_ms=elapsed)

    def reorder(self, parents: np.ndarray) -> None:
        """Hypothesis b continues ``parents[b]``: its filled positions are copied over."""
        parents = np.asarray(parents, dtype=np.int64).reshape(-1)
        if parents.shape != (self.size,) or not ((parents >= 0) & (parents < self.size)).all():
            raise ValueError(f"parents must be {self.size} hypothesis indices, got {parents.tolist()}")
        if (parents == np.arange(self.size)).all():
            return
        p = self.position
        self._k[:, :, :p] = self._k[:, :, :p, parents]  # the fancy index copies first
        self._v[:, :, :p] = self._v[:, :, :p, parents]
