"""The user's vocabulary: names and terms Whisper is told about as its previous context.

Whisper reads text given before ``<|startoftranscript|>`` after ``<|startofprev|>`` as what was said
before (openai-whisper's ``initial_prompt``, faster-whisper's ``hotwords``), and that biases its
decoding toward those spellings: "Schoeffer" instead of "chauffeur". A round's decoder sequence is
then ``[<|startofprev|>, ␣Name1, ",", ␣Name2, ".", SOT, lang, task, notimestamps, prefix…,
generated…]``: the context tokens are forced positions like the prompt
(:func:`~captioner.engine.decoder.decode_round`), so they never reach the output, the validator or
the word timing (DTW reads the rows of generated tokens only).

Room: the pack's chunk graphs have a fixed number of positions per round (30 in the short buckets,
225 in the 10–30 s ones, ``AcousticModel.chunk_plan``), and every context token takes one of them.
:meth:`VocabularyPrompt.for_round` keeps the listed entries, first ones first, that fit in what the
round leaves: the plan's positions minus the prompt and the prefix minus what the round's audio
may need (:data:`TOKENS_PER_S` per second of input, and the end-of-text). Whole entries only: half
a name would teach a wrong spelling. The short live rounds (30 positions) take the first entries
that fit, often none (logged at debug level; the closing rounds, which decide the final words,
have room for ~200 tokens); a list longer than even the roomiest round can take is said once per
stream as a warning naming the entries never used (:meth:`VocabularyPrompt.check_room`).

Tokens: Whisper's byte-level BPE, as tiktoken runs it (the ranks are the token ids; the pair whose
merged bytes have the lowest rank is merged first), after GPT-2's pre-tokenisation (words with
their leading space, numbers, punctuation runs). :func:`encode_text` is checked against the
Hugging Face tokenizer in the tests.
"""

from __future__ import annotations

import logging
import math
import re
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from captioner.engine.model import SAMPLES_PER_FRAME
from captioner.engine.tokens import Vocabulary, normalize_word
from captioner.engine.vad import VAD_WINDOW
from captioner.engine.validate import Stop
from captioner.errors import CaptionerError

if TYPE_CHECKING:
    from captioner.engine.decoder import TokenValidator

__all__ = ["MAX_ENTRIES", "TOKENS_PER_S", "ListedWordGuard", "VocabularyPrompt", "encode_text", "parse_vocabulary",
           "read_vocabulary", "speech_frames"]

logger = logging.getLogger(__name__)

TOKENS_PER_S = 5.0  # room kept for the round's own words: fast speech is ~4 tokens/s with punctuation
MAX_ENTRIES = 200  # a longer list is an error, not a vocabulary (and could never fit a round)
_MAX_ENTRY_CHARS = 60

# GPT-2's pre-tokeniser with Python's ``re``: [^\W\d_] is a Unicode letter, \d a digit
_PRE = re.compile(r"""'s|'t|'re|'ve|'m|'ll|'d| ?[^\W\d_]+| ?\d+| ?(?:[^\s\w]|_)+|\s+(?!\S)|\s+""")
_SPLIT = re.compile(r"[,;\n\r]+")


def parse_vocabulary(text: str) -> tuple[str, ...]:
    """The entries of a comma-, semicolon- or line-separated list: stripped, inner whitespace
    collapsed, empty ones dropped, repeats (ignoring case) kept once, in the user's order.

    Raises:
        CaptionerError: an entry longer than 60 characters or more than :data:`MAX_ENTRIES` entries.
    """
    seen: set[str] = set()
    entries: list[str] = []
    for raw in _SPLIT.split(text or ""):
        entry = " ".join(raw.split())
        if not entry or entry.casefold() in seen:
            continue
        if len(entry) > _MAX_ENTRY_CHARS:
            raise CaptionerError(f"vocabulary entry too long ({len(entry)} characters, at most "
                                 f"{_MAX_ENTRY_CHARS}): {entry[:40]!r}…; separate entries with commas or lines")
        seen.add(entry.casefold())
        entries.append(entry)
    if len(entries) > MAX_ENTRIES:
        raise CaptionerError(f"the vocabulary has {len(entries)} entries; at most {MAX_ENTRIES} are allowed")
    return tuple(entries)


def read_vocabulary(path: Path | str) -> tuple[str, ...]:
    """The entries of a vocabulary file (UTF-8, comma- or line-separated; ``#`` starts a comment line).

    Raises:
        CaptionerError: the file cannot be read or its entries are invalid (:func:`parse_vocabulary`).
    """
    try:
        text = Path(path).read_text(encoding="utf-8-sig")
    except (OSError, UnicodeDecodeError) as exc:
        raise CaptionerError(f"cannot read the vocabulary file {path}: {exc}") from exc
    return parse_vocabulary("\n".join(line for line in text.splitlines() if not line.lstrip().startswith("#")))


def encode_text(text: str, vocab: Vocabulary, _ranks: dict[bytes, int] | None = None) -> list[int]:
    """Whisper's tokens for ``text`` (byte-level BPE; module docstring)."""
    ranks = _ranks if _ranks is not None else _bpe_ranks(vocab)
    tokens: list[int] = []
    for piece in _PRE.findall(text):
        tokens.extend(_bpe(piece.encode("utf-8"), ranks))
    return tokens


def _bpe_ranks(vocab: Vocabulary) -> dict[bytes, int]:
    """Merge rank of every ordinary token's bytes (its id)."""
    return {b: i for i, b in enumerate(vocab.token_bytes[: vocab.eot]) if b}


def _bpe(piece: bytes, ranks: dict[bytes, int]) -> list[int]:
    """tiktoken's merge loop on one pre-token: merge the adjacent pair of lowest rank until none is
    a token."""
    parts = [piece[i : i + 1] for i in range(len(piece))]
    while len(parts) > 1:
        best, at = None, -1
        for i in range(len(parts) - 1):
            rank = ranks.get(parts[i] + parts[i + 1])
            if rank is not None and (best is None or rank < best):
                best, at = rank, i
        if best is None:
            break
        parts[at : at + 2] = [parts[at] + parts[at + 1]]
    try:
        return [ranks[p] for p in parts]
    except KeyError as exc:  # every single byte is a token of a byte-level vocabulary
        raise CaptionerError(f"the model's vocabulary has no token for the byte {exc.args[0]!r}") from exc


class VocabularyPrompt:
    """The previous-context tokens of a vocabulary, cut per round to the room the chunk plan has.

    Args:
        entries: the vocabulary (:func:`parse_vocabulary`); empty: no context at all.
        vocab: the model's vocabulary.

    Attributes:
        entries: the entries, in order.
        pieces: per entry its tokens (``" Name,"``; the last entry ends with ``"."``).
        words: the normalised words of the entries (what :meth:`listed` matches).
    """

    def __init__(self, entries: Sequence[str], vocab: Vocabulary) -> None:
        self.entries = tuple(entries)
        self._start = vocab.special.startofprev
        if self.entries and self._start is None:
            raise CaptionerError("this model has no <|startofprev|> token and cannot take a vocabulary")
        ranks = _bpe_ranks(vocab)
        n = len(self.entries)
        self.pieces = tuple(tuple(encode_text(f" {e}{'.' if i == n - 1 else ','}", vocab, ranks))
                            for i, e in enumerate(self.entries))
        self.words = frozenset(w for e in self.entries for w in (normalize_word(x.encode()) for x in e.split()) if w)
        self.vocab_bytes = vocab.text_bytes
        self.word_starts = vocab.starts_word
        self._noted: set[int] = set()

    @property
    def size(self) -> int:
        """Tokens of the whole context: ``<|startofprev|>`` and every entry."""
        return 1 + sum(map(len, self.pieces)) if self.entries else 0

    def tokens(self, room: int) -> tuple[int, ...]:
        """The context of at most ``room`` tokens: the first entries that fit whole; ``()`` when not
        even one fits."""
        kept = self._fitting(room)
        if kept < len(self.entries):
            self._note_cut(kept, room)
        return (int(self._start or 0), *(t for piece in self.pieces[:kept] for t in piece)) if kept else ()

    def for_round(self, positions: int, forced: int, input_s: float) -> tuple[int, ...]:
        """The context of a round whose chunk plan has ``positions`` positions, ``forced`` of them
        taken by the prompt and the prefix, decoding ``input_s`` seconds of audio (module docstring)."""
        return self.tokens(_room(positions, forced, input_s))

    def check_room(self, positions: int, forced: int) -> None:
        """Warn when even the roomiest round (a plan of ``positions``, ``forced`` of them taken, and a
        second of audio) cannot take the whole list, naming the entries that are never used."""
        room = _room(positions, forced, 1.0)
        kept = self._fitting(room)
        if kept < len(self.entries):
            logger.warning("vocabulary: %d tokens, but a round has room for at most %d: the last %d of %d entries "
                           "are never used: %s", self.size, room, len(self.entries) - kept, len(self.entries),
                           ", ".join(self.entries[kept:]))

    def _fitting(self, room: int) -> int:
        """How many entries, first ones first, fit whole in ``room`` tokens after ``<|startofprev|>``."""
        used = 1
        for kept, piece in enumerate(self.pieces):
            used += len(piece)
            if used > room:
                return kept
        return len(self.pieces)

    def heard_in(self, tokens: Sequence[int]) -> bool:
        """Whether a round's decoded ``tokens`` hold one of the vocabulary's words."""
        words: list[list[int]] = []
        for token in tokens:
            if not words or self.word_starts(token):
                words.append([])
            words[-1].append(token)
        return any(self.listed(self.vocab_bytes(w) for w in words))

    def listed(self, words: Iterable[bytes]) -> list[bool]:
        """Per word (raw bytes): its normalised form is one of the vocabulary's words."""
        return [bool(w) and w in self.words for w in (normalize_word(x) for x in words)]

    def guard(self, validator: TokenValidator, speech: np.ndarray | None) -> TokenValidator:
        """``validator`` behind a :class:`ListedWordGuard` over ``speech``; ``validator`` itself
        without a vocabulary or a speech mask."""
        if not self.words or speech is None:
            return validator
        return ListedWordGuard(validator, self, speech)

    def _note_cut(self, kept: int, room: int) -> None:
        """Rounds with little room (the short live rounds: 30 positions for their prompt, prefix and
        words) take the first entries that fit; said once per size at debug level."""
        if kept in self._noted:
            return
        self._noted.add(kept)
        logger.debug("vocabulary: %d of %d entries fit the %d positions a round has left for them (of %d tokens); "
                     "left out of such rounds: %s", kept, len(self.entries), max(0, room), self.size,
                     ", ".join(self.entries[kept:]))


GUARD_REACH_FRAMES = 10  # a listed word's attention may peak this close to speech (0.2 s)


class ListedWordGuard:
    """A round's validator that also checks every listed word it decodes against the speech detector:
    a word of the vocabulary whose tokens' cross-attention (the final layer's, as the validator
    sees it) all peak more than :data:`GUARD_REACH_FRAMES` frames away from speech was not heard,
    it was read from the context: the round stops before it, as at a sound annotation
    (``"nonspeech"``). Everything else is the wrapped validator's.

    Args:
        inner: the round's validator (:class:`~captioner.engine.decoder.TokenValidator`).
        prompt: the vocabulary (its :attr:`VocabularyPrompt.words`).
        speech: bool [frames]: the round's input frames (20 ms) that hold speech.
    """

    def __init__(self, inner: TokenValidator, prompt: VocabularyPrompt, speech: np.ndarray) -> None:
        self._inner = inner
        self._prompt = prompt
        self._vocab_bytes = prompt.vocab_bytes
        self._starts = prompt.word_starts
        self._near = _dilate(np.asarray(speech, dtype=bool), GUARD_REACH_FRAMES)
        self._peaks: list[int] = []  # per consumed token: its attention's peak frame
        self.heard_stops = 0

    @property
    def decoded(self) -> list[int]:
        return self._inner.decoded

    @decoded.setter
    def decoded(self, value: list[int]) -> None:
        self._inner.decoded = value

    @property
    def checked(self) -> int:
        return self._inner.checked

    @checked.setter
    def checked(self, value: int) -> None:
        self._inner.checked = value

    @property
    def last_peak_s(self) -> float:
        return self._inner.last_peak_s

    @last_peak_s.setter
    def last_peak_s(self, value: float) -> None:
        self._inner.last_peak_s = value

    def on_alignment(self, attn_align: np.ndarray) -> None:
        note = getattr(self._inner, "on_alignment", None)
        if note is not None:
            note(attn_align)

    def on_attention(self, attn_last: np.ndarray) -> Stop | None:
        self._peaks.append(int(np.argmax(attn_last)) if attn_last.size else -1)
        return self._inner.on_attention(attn_last)

    def on_prediction(self, token: int, token_logit: float, eot_logit: float) -> Stop | None:
        stop = self._inner.on_prediction(token, token_logit, eot_logit)
        decoded = self._inner.decoded
        if stop is None and decoded and self._starts(decoded[-1]):  # the token just predicted starts a word
            end = len(decoded) - 1
        elif stop is not None and stop.reason == "eot":
            end = len(decoded)
        else:
            return stop
        unheard = self._unheard(decoded, end)
        return Stop("nonspeech", unheard) if unheard is not None else stop

    def close(self) -> Stop | None:
        return self._inner.close()

    def _unheard(self, decoded: list[int], end: int) -> int | None:
        """The first token of the word that ends at ``end`` when it is listed and not heard, else None."""
        if end <= 0 or end > len(self._peaks):
            return None
        begin = end - 1
        while begin > 0 and not self._starts(decoded[begin]):
            begin -= 1
        word = self._vocab_bytes(decoded[begin:end])
        if not self._prompt.listed([word])[0]:
            return None
        peaks = [p for p in self._peaks[begin:end] if 0 <= p < self._near.size]
        return None if any(self._near[p] for p in peaks) else begin


def speech_frames(probabilities: np.ndarray, start: int, n_samples: int, threshold: float) -> np.ndarray:
    """bool [frames]: the 20 ms frames of the input ``[start, start + n_samples)`` that the speech
    detector's 32 ms windows (``probabilities`` from the window holding ``start`` on) call speech."""
    frames = np.arange(n_samples // SAMPLES_PER_FRAME)
    windows = (start + frames * SAMPLES_PER_FRAME) // VAD_WINDOW - start // VAD_WINDOW
    speech = np.zeros(frames.size, dtype=bool)
    known = windows < probabilities.size
    speech[known] = probabilities[windows[known]] >= threshold
    return speech


def _room(positions: int, forced: int, input_s: float) -> int:
    """Positions left for the context: the plan's, less the forced ones, :data:`TOKENS_PER_S` per
    second of input and the end of text."""
    return positions - forced - math.ceil(TOKENS_PER_S * input_s) - 1


def _dilate(mask: np.ndarray, reach: int) -> np.ndarray:
    """``mask`` with every True spread ``reach`` entries both ways."""
    if not mask.any() or reach <= 0:
        return mask
    kernel = np.ones(2 * reach + 1, dtype=int)
    return np.convolve(mask.astype(int), kernel, mode="same") > 0
