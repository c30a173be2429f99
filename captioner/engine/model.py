"""The seam between the streaming policy and the graphs that run Whisper.

``stream.py`` and ``decoder.py`` drive an :class:`AcousticModel`; the real one runs the pack's
ONNX graphs (``onnx_model.py``), a scripted oracle stands in for it in the policy tests. Nothing
here knows about ONNX Runtime.

Conventions (ARCHITECTURE.md §5, NPUSPER.md §3–§5):

* Audio is 16 kHz mono float32 whose length is a whole number of 20 ms encoder frames
  (a multiple of :data:`SAMPLES_PER_FRAME`); the stream keeps any remainder for the next round.
* Positions: a round's decoder sequence is ``prompt + generated``; position ``p`` holds token
  ``p``. A chunk ``(start, size)`` consumes positions ``start … start+size−1`` and predicts
  ``start+1 … start+size``.
* The attention reported for a step belongs to the token that step **consumed** (NPUSPER.md §5),
  cropped to the real (unpadded) encoder frames.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Protocol, runtime_checkable

import numpy as np

if TYPE_CHECKING:
    from captioner.engine.tokens import Vocabulary

__all__ = [
    "FRAME_S",
    "SAMPLES_PER_FRAME",
    "AcousticModel",
    "BeamOutput",
    "BeamRunner",
    "BeamStep",
    "ChunkOutput",
    "ChunkRunner",
    "Encoding",
    "SearchingModel",
    "VerifyingRunner",
]

SAMPLES_PER_FRAME = 320  # one encoder frame = 2 mel hops of 160 samples = 20 ms at 16 kHz
FRAME_S = 0.02  # seconds per encoder frame


@dataclass(frozen=True, slots=True)
class Encoding:
    """The encoder's result for one round's audio.

    Attributes:
        bucket: encoder bucket in seconds (3, 4, 5, 6, 10 or 30).
        n_frames: real encoder frames (audio samples / 320); attention vectors have this length.
        total_frames: frames of the bucket (50 · bucket); the rest are masked padding.
        native_30s: True for the re-inference fallback: audio zero-padded to 30 s and encoded
            without a mask, as stock Whisper sees it (NPUSPER.md §11.3).
        mel_ms: time spent computing the log-mel, milliseconds.
        encoder_ms: time spent in the encoder graph, milliseconds.
        payload: model-specific data for the decoder (the cross-attention K/V).
    """

    bucket: int
    n_frames: int
    total_frames: int
    native_30s: bool = False
    mel_ms: float = 0.0
    encoder_ms: float = 0.0
    payload: object = field(default=None, repr=False, compare=False)


@dataclass(frozen=True, slots=True)
class ChunkOutput:
    """What one decoder chunk graph returns for ``size`` = K steps.

    Attributes:
        tokens: int64 [K]; ``tokens[s]`` is the model's argmax over ids < EOT for position
            ``start+s+1`` (ties → lowest id), reported even where that position was forced, except
            in the rows a chunk graph batches (the first ``known − 1`` rows of a chunk whose head
            consumes given tokens, e.g. the prompt): they predict nothing and carry the forced id.
        token_logit: float32 [K], the logit of ``tokens[s]``.
        eot_logit: float32 [K], the EOT logit of the same step; EOT "wins" the unrestricted
            argmax exactly when ``eot_logit[s] > token_logit[s]`` (NPUSPER.md §4.4).
        attn_last: float32 [K, n_frames], final decoder layer cross-attention, mean over heads,
            of the pass that consumed position ``start+s``; cropped to the real frames.
        attn_align: float32 [K, n_frames], mean over the alignment heads, same pass, cropped.
        elapsed_ms: wall time of the dispatch, milliseconds.
        logsumexp: float32 [K], log Σ exp of the step's logits over the whole vocabulary:
            ``token_logit − logsumexp`` is the token's log-probability. None when the model does
            not report it (the scripted oracle).
        nospeech_logit: float32 [K], the ``<|nospeech|>`` logit; None without such a token.
            Whisper's no-speech probability is ``exp(nospeech_logit[0] − logsumexp[0])`` of a
            round's first chunk (the step that consumed SOT).
        lang_logits: float32 [K, languages], the language tokens' logits in the order of
            ``vocab.special.languages``; None for English-only models. Row 0 of a round's first
            chunk is the language detection step (:mod:`captioner.engine.language`).
        In the rows a chunk graph batches, these three are given for the first row (SOT) only;
        the rows after it carry zeros.
    """

    tokens: np.ndarray
    token_logit: np.ndarray
    eot_logit: np.ndarray
    attn_last: np.ndarray
    attn_align: np.ndarray
    elapsed_ms: float = 0.0
    logsumexp: np.ndarray | None = None
    nospeech_logit: np.ndarray | None = None
    lang_logits: np.ndarray | None = None


class ChunkRunner(Protocol):
    """One round's decoder: owns the self-attention KV cache, appends each chunk's new K/V."""

    def run(self, start: int, size: int, token: int, forced: np.ndarray) -> ChunkOutput:
        """Dispatch the chunk graph ``(start, size)``.

        Args:
            start: first position consumed; must equal the number of positions already consumed.
            size: K, number of steps (must be a chunk the plan offers).
            token: token id at position ``start``.
            forced: int64 [K−1]; id to place at position ``start+s+1``, or −1 for the model's choice.
        """
        ...


@runtime_checkable
class VerifyingRunner(ChunkRunner, Protocol):
    """A :class:`ChunkRunner` that can also check proposed tokens in one batched dispatch (a pack's
    verifier graph) and forget positions: what a closing round's draft decoding needs."""

    @property
    def verify_size(self) -> int:
        """K, tokens one :meth:`verify` dispatch checks (0: no verifier for this round's bucket)."""
        ...

    def verify(self, start: int, token: int, proposal: np.ndarray) -> ChunkOutput:
        """Consume ``token`` at ``start`` and the K − 1 ``proposal`` tokens after it as one batch; row
        s predicts position ``start + s + 1``."""
        ...

    def rewind(self, consumed: int) -> None:
        """Forget the positions from ``consumed`` on."""
        ...


@dataclass(frozen=True, slots=True)
class BeamOutput:
    """What one beam step returns for its B hypotheses (row b: hypothesis b).

    Attributes:
        top_tokens: int64 [B, B], each row's B best tokens over ids < EOT, best first.
        top_logits: float32 [B, B], their logits.
        eot_logit: float32 [B], the EOT logit of each row.
        logsumexp: float32 [B], log Σ exp over the vocabulary (logit − logsumexp = log-probability).
        attn_last, attn_align: float32 [B, n_frames], as :class:`ChunkOutput`'s, of the token each
            row consumed.
        elapsed_ms: wall time of the dispatch, milliseconds.
    """

    top_tokens: np.ndarray
    top_logits: np.ndarray
    eot_logit: np.ndarray
    logsumexp: np.ndarray
    attn_last: np.ndarray
    attn_align: np.ndarray
    elapsed_ms: float = 0.0


class BeamStep(Protocol):
    """B hypotheses decoded one position at a time, each over its own copy of the KV cache."""

    size: int  # B
    position: int  # the position the next step consumes
    limit: int  # positions the caches hold: steps run while ``position < limit``

    def step(self, tokens: np.ndarray) -> BeamOutput:
        """Consume ``tokens[b]`` (int64 [B]) at :attr:`position` in hypothesis b."""
        ...

    def reorder(self, parents: np.ndarray) -> None:
        """Hypothesis b continues hypothesis ``parents[b]`` (its cache is copied over)."""
        ...


@runtime_checkable
class BeamRunner(ChunkRunner, Protocol):
    """A :class:`ChunkRunner` whose consumed positions can be continued by B hypotheses (a pack's
    beam-step graph): what a closing round's beam search needs (B: the model's
    :meth:`SearchingModel.beam_width`)."""

    def beams(self, consumed: int) -> BeamStep:
        """B hypotheses that continue positions ``0 … consumed − 1`` of this runner's cache."""
        ...

    def rewind(self, consumed: int) -> None:
        """Forget the positions from ``consumed`` on."""
        ...


@runtime_checkable
class SearchingModel(Protocol):
    """An :class:`AcousticModel` whose decoders can search (:class:`BeamRunner`) in some buckets."""

    def beam_width(self, bucket: int) -> int:
        """Hypotheses a decoder of ``bucket`` searches with (0: none, it decodes greedily only)."""
        ...


class AcousticModel(Protocol):
    """Whisper as the streaming policy sees it: encode a round's audio, then decode it in chunks.

    Attributes:
        vocab: token texts, special ids and token classes.
        provider: the execution provider that actually runs the graphs ("QNN-HTP", "CPU", ...).
        buckets: available encoder buckets in seconds, ascending (e.g. (3, 4, 5, 6, 10, 20, 30)).
    """

    vocab: Vocabulary
    buckets: tuple[int, ...]

    @property
    def provider(self) -> str:
        """The execution provider that runs the graphs ("QNN-HTP", "CPU", ...)."""
        ...

    def chunk_plan(self, bucket: int, prefixed: bool) -> tuple[tuple[int, int], ...]:
        """The (start, size) chunks of a round, in order: [4,6,5,5,5,5] or, with a carried
        prefix, [5,5,5,5,5,5] (30 positions; other tail chunk sizes K: [4,6,K,…]); the buckets
        over 6 s (10 and 30 s) continue in chunks of K to 224 positions."""
        ...

    def encode(self, audio: np.ndarray, *, native_30s: bool = False) -> Encoding:
        """Log-mel + encoder for ``audio`` (float32 [N], N a multiple of 320, N ≤ 30 s).

        Picks the smallest bucket that holds the audio; ``native_30s`` zero-pads the audio itself
        to 30 s and encodes every frame unmasked (the re-inference fallback).
        """
        ...

    def decoder(self, encoding: Encoding) -> ChunkRunner:
        """A fresh decoder (empty KV cache) over ``encoding`` for one round."""
        ...
