"""Whisper's vocabulary as the streaming policy sees it: token texts, special ids, token classes.

The token classes are those of the NPUsper reference (NPUSPER.md §6, §4.4), computed on the raw
bytes of each single token (byte-level BPE, so a token may be an incomplete UTF-8 sequence):

* **punctuation**: empty text; or, after removing at most one leading space, nothing left, or a
  remainder of 1 or 2 bytes without an ASCII alphanumeric byte ("..." and a 3-byte dash are *not*
  punctuation — byte length, as in the reference);
* **subword**: does not start with a space and contains an ASCII letter (digit-only continuations
  are not subwords);
* **special**: id ≥ EOT (control tokens and timestamps);
* **content**: none of the three; only content tokens take part in the backward-shift test (§7);
* **word start**: the text begins with a space;
* **garbage** (the EOT runner-up rule, §4.4): special, or no ASCII alphanumeric byte at all.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING

import numpy as np

from captioner.errors import CaptionerError

if TYPE_CHECKING:
    from captioner.models.pack import Pack, SpecialTokens

__all__ = ["TASKS", "Vocabulary", "normalize_word"]

logger = logging.getLogger(__name__)

TASKS = ("transcribe", "translate")
_ALNUM = frozenset(b"abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789")
_ALPHA = frozenset(b"abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ")


def _has_alnum(text: bytes) -> bool:
    return any(b in _ALNUM for b in text)


def _is_punctuation(text: bytes) -> bool:
    if not text:
        return True
    rest = text[1:] if text[:1] == b" " else text
    return not rest or (len(rest) <= 2 and not _has_alnum(rest))


def _is_subword(text: bytes) -> bool:
    return not text.startswith(b" ") and any(b in _ALPHA for b in text)


def normalize_word(text: bytes) -> bytes:
    """The overlap-dedup form of a word (NPUSPER.md §11.8): lowercase ASCII alphanumerics, with
    bytes ≥ 0x80 kept (the ggml variant, so non-English words still compare)."""
    return bytes(b for b in text.lower() if b in _ALNUM or b >= 0x80)


class Vocabulary:
    """Token bytes, special ids and per-id token classes.

    Args:
        token_bytes: id -> raw bytes of that single token (``len`` = n_vocab).
        special: the special ids (``captioner.models.pack.SpecialTokens``).
        multilingual: the model has language and task tokens; default: ``bool(special.languages)``.

    Attributes:
        eot: id of ``<|endoftext|>``; every id ≥ eot is special.
        punctuation, subword, word_start, garbage, content: bool arrays [n_vocab] of the classes
            in the module docstring (ids ≥ eot are never punctuation/subword/content).
    """

    def __init__(self, token_bytes: Sequence[bytes], special: SpecialTokens, *, multilingual: bool | None = None):
        self.token_bytes: tuple[bytes, ...] = tuple(token_bytes)
        self.special = special
        self.eot: int = int(special.eot)
        self.multilingual = bool(special.languages) if multilingual is None else bool(multilingual)
        n = len(self.token_bytes)
        if not 0 < self.eot < n:
            raise CaptionerError(f"EOT id {self.eot} is outside the vocabulary of {n} tokens")
        texts = self.token_bytes
        self.punctuation = np.array([_is_punctuation(t) for t in texts], dtype=bool)
        self.subword = np.array([_is_subword(t) for t in texts], dtype=bool)
        self.word_start = np.array([t.startswith(b" ") for t in texts], dtype=bool)
        has_alnum = np.array([_has_alnum(t) for t in texts], dtype=bool)
        is_special = np.arange(n) >= self.eot
        self.punctuation &= ~is_special
        self.subword &= ~is_special
        self.garbage = is_special | ~has_alnum
        self.content = ~(self.punctuation | self.subword | is_special)

    @classmethod
    def from_pack(cls, pack: Pack) -> Vocabulary:
        """The vocabulary of a loaded model pack."""
        return cls(pack.token_bytes, pack.special, multilingual=pack.multilingual)

    def __len__(self) -> int:
        return len(self.token_bytes)

    def is_special(self, token: int) -> bool:
        """True for ids ≥ EOT (control tokens and timestamps)."""
        return token >= self.eot

    def is_content(self, token: int) -> bool:
        """Neither punctuation, subword nor special: the tokens the backward-shift test looks at."""
        return bool(self.content[token])

    def is_garbage(self, token: int) -> bool:
        """The EOT runner-up is unusable: special, or no ASCII alphanumeric byte (§4.4)."""
        return bool(self.garbage[token])

    def starts_word(self, token: int) -> bool:
        """The token's text begins with a space."""
        return bool(self.word_start[token])

    def text_bytes(self, ids: Iterable[int]) -> bytes:
        """The raw bytes of ``ids`` joined."""
        return b"".join(self.token_bytes[i] for i in ids)

    def decode(self, ids: Iterable[int]) -> str:
        """Text of ``ids``: bytes joined, then UTF-8 with replacement characters for bad sequences."""
        return self.text_bytes(ids).decode("utf-8", errors="replace")

    def languages(self) -> tuple[str, ...]:
        """Language codes the model knows (``("en",)`` for English-only models)."""
        return tuple(self.special.languages) if self.multilingual else ("en",)

    def prompt(self, language: str = "en", task: str = "transcribe") -> tuple[int, ...]:
        """The decoder prompt: ``[SOT, lang, task, notimestamps]`` (multilingual) or
        ``[SOT, notimestamps]`` (English-only).

        ``language="auto"`` gives the English prompt: the stream detects the language and asks again
        with the detected code (:class:`~captioner.engine.stream.Stream`, deviation 19).

        Raises:
            CaptionerError: unknown language or task, or translation asked of an English-only model.
        """
        if task not in TASKS:
            raise CaptionerError(f"unknown task {task!r}; choose one of: {', '.join(TASKS)}")
        sp = self.special
        lang = "en" if language == "auto" else language
        if not self.multilingual:
            if lang != "en":
                raise CaptionerError(f"this model is English-only; language {language!r} is not available (choose: en)")
            if task != "transcribe":
                raise CaptionerError("this model is English-only and cannot translate; use task 'transcribe'")
            return (sp.sot, sp.notimestamps)
        if lang not in sp.languages:
            choices = ", ".join(["auto", *sorted(sp.languages)])
            raise CaptionerError(f"unknown language {language!r}; choose one of: {choices}")
        task_id = sp.transcribe if task == "transcribe" else sp.translate
        if task_id is None:
            raise CaptionerError(f"the model has no {task} token")
        return (sp.sot, int(sp.languages[lang]), int(task_id), sp.notimestamps)
