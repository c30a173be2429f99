"""What Whisper's first decoding step says about a round: its language and whether it is speech.

Whisper reads both at the step that consumes SOT (position 0) and predicts position 1, where the
language token goes: the softmax over the language tokens' logits is the language distribution
(openai-whisper's ``detect_language``), and the probability of ``<|nospeech|>`` in the softmax over
the whole vocabulary is the no-speech probability (its ``no_speech_prob``). The step is causal, so
it depends on SOT and the audio only, never on the tokens forced after it.

The pack's chunk graphs return these logits for the SOT row too, even though the first chunk of a
round batches the prompt (format 5, ``decoder_graph.py``): every round's first chunk carries them,
so a streaming policy reads them with :func:`language_of` and :func:`no_speech_probability` at no
extra cost; :func:`detect_language` runs that one chunk by itself for audio not yet decoded.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from captioner.errors import CaptionerError, ModelError

if TYPE_CHECKING:
    from captioner.engine.model import AcousticModel, ChunkOutput, Encoding
    from captioner.engine.tokens import Vocabulary

__all__ = ["LanguageGuess", "detect_language", "language_of", "no_speech_probability", "parse_languages"]

TOP = 5  # languages kept in LanguageGuess.top


@dataclass(frozen=True, slots=True)
class LanguageGuess:
    """A language distribution from Whisper's SOT step.

    Attributes:
        code: the most probable language (``"de"``); ``"en"`` for an English-only model.
        probability: its probability among the model's languages (softmax over the language logits).
        top: (code, probability) of the most probable languages, best first (at most 5).
    """

    code: str
    probability: float
    top: tuple[tuple[str, float], ...]


ENGLISH_ONLY = LanguageGuess("en", 1.0, (("en", 1.0),))


def parse_languages(text: str) -> tuple[str, tuple[str, ...]]:
    """A language setting as the engine takes it: ``(language, among)``.

    ``"auto"`` → ``("auto", ())`` (detected among every language the model knows); ``"de"`` →
    ``("de", ())``; the languages a person speaks, ``"en, de"`` → ``("auto", ("en", "de"))``
    (detected among those only, the first before anything is heard); a list of one is that language.
    Codes are not checked here (the model's vocabulary does: ``Transcriber.check``).

    Raises:
        CaptionerError: an empty entry, or "auto" in a list.
    """
    codes = [c.strip().lower() for c in text.split(",")]
    if not all(codes) or ("auto" in codes and len(codes) > 1):
        raise CaptionerError(f"language {text!r}: a code (de), auto, or the codes you speak separated by commas (en, de)")
    among = tuple(dict.fromkeys(codes))  # in order, each once
    return (among[0], ()) if len(among) == 1 else ("auto", among)


def language_of(vocab: Vocabulary, first: ChunkOutput, top: int = TOP, among: Sequence[str] = ()) -> LanguageGuess:
    """The language from a round's first chunk (row 0 consumed SOT).

    Args:
        vocab: the model's vocabulary; its ``special.languages`` order is the order of ``lang_logits``.
        first: the output of the chunk that started at position 0.
        top: how many languages to keep in :attr:`LanguageGuess.top`.
        among: the languages to choose from (the ones the user speaks; the probabilities are among
            them); empty: every language of the model.

    Raises:
        ModelError: a multilingual model whose chunks report no language logits (a pack older
            than format 5 would be refused before this; a model that does not implement them).
    """
    if not vocab.multilingual:
        return ENGLISH_ONLY
    if first.lang_logits is None:
        raise ModelError("the model's decoder reports no language logits: rebuild the pack with this captioner")
    logits = np.asarray(first.lang_logits[0], dtype=np.float64)
    codes = tuple(vocab.special.languages)
    if logits.shape != (len(codes),):
        raise ModelError(f"{logits.shape[0]} language logits for the vocabulary's {len(codes)} languages")
    if among:
        allowed = np.isin(np.array(codes), np.array(among))
        if not allowed.any():
            raise ModelError(f"the model knows none of the languages {', '.join(among)}")
        logits = np.where(allowed, logits, -np.inf)
        top = min(top, int(allowed.sum()))
    probs = np.exp(logits - logits.max())
    probs /= probs.sum()
    order = np.argsort(-probs, kind="stable")[:top]
    best = [(codes[i], float(probs[i])) for i in order]
    return LanguageGuess(best[0][0], best[0][1], tuple(best))


def no_speech_probability(first: ChunkOutput) -> float | None:
    """Whisper's no-speech probability from a round's first chunk: softmax(logits at SOT)[<|nospeech|>].

    None when the vocabulary has no ``<|nospeech|>`` token or the model does not report it.
    """
    if first.nospeech_logit is None or first.logsumexp is None:
        return None
    return float(np.exp(np.float64(first.nospeech_logit[0]) - np.float64(first.logsumexp[0])))


def detect_language(model: AcousticModel, encoding: Encoding, top: int = TOP, among: Sequence[str] = ()) -> LanguageGuess:
    """The language of ``encoding``'s audio: one dispatch of the round's first chunk graph.

    The first chunk of the default plan batches the prompt and returns the SOT row's language
    logits; the language slot it is given (English) changes nothing at that row. Costs about one
    decoder step. English-only models answer ``"en"`` without running anything.

    This starts a decoder on ``encoding`` (:meth:`AcousticModel.decoder`), so it supersedes this
    thread's running round: call it between rounds, or read :func:`language_of` from a round's own
    first chunk instead. ``among``: as :func:`language_of`'s.
    """
    vocab = model.vocab
    if not vocab.multilingual:
        return ENGLISH_ONLY
    prompt = vocab.prompt("en", "transcribe")
    start, size = model.chunk_plan(encoding.bucket, False)[0]
    forced = np.full(size - 1, -1, dtype=np.int64)
    given = prompt[1:size]
    forced[: len(given)] = given
    first = model.decoder(encoding).run(start, size, prompt[0], forced)
    return language_of(vocab, first, top, among)
