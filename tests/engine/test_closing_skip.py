"""Deviation 29's test of a skipped start (``Stream._skipped_drafts``), on the words of a real case.

A closing decode that begins four or more drafted words in skipped the start of its input, and the
drafts before stand. Where it begins a word in and its first words are also said later in the drafts,
the later copy is not where it begins: the new speakers' checking half joined 0.2 s apart at a 2 s
step, Justice Scalia's "… the going rate of interest if the other person doesn't want to loan it …
if the other fellow doesn't want to lend it …": the closing decode began "If the other person",
matched "if the other" at "fellow", 24 words in, and kept 24 drafts beside its own reading of them.
"""

from __future__ import annotations

from types import SimpleNamespace

from replay import load_vocabulary

from captioner.engine._committed import CommittedLog, CommittedToken
from captioner.engine.stream import Stream
from captioner.engine.tokens import normalize_word
from captioner.engine.vad import SpeechSpan

SR = 16000
# the drafts (whisper-base's live rounds), words that tiny.en's vocabulary splits in two left out
DRAFTS_TEXT = ("interest if the other person want to be on the statute here a simply says if you will the money you "
               "vote if the other fellow want to lend it to you")
DRAFTS = DRAFTS_TEXT.split(" ")


class HearsSpeech:
    """A speech detector that hears speech everywhere."""

    def speech(self, start: int, end: int, *, min_s: float = 0.1) -> SpeechSpan | None:
        return SpeechSpan(start, end) if end - start >= min_s * SR else None


def _stream(words: list[str]) -> SimpleNamespace:
    """What ``_skipped_drafts`` reads of a stream: ``words`` drafted 0.3 s apart, each one token."""
    vocab = load_vocabulary()
    log = CommittedLog(vocab, "system")
    ids = []
    for w in words:
        text = (" " + w).encode()
        assert text in vocab.token_bytes, text  # one token per word keeps the test simple
        ids.append(vocab.token_bytes.index(text))
    log.extend([CommittedToken(t, round(i * 0.3 * SR), round((i + 1) * 0.3 * SR), 0.0, True)
                for i, t in enumerate(ids)])
    return SimpleNamespace(_vad=HearsSpeech(), _log=log)


def _decoded(text: str) -> list[bytes]:
    return [w for w in (normalize_word(t.encode()) for t in text.split()) if w]


def test_a_decode_that_begins_a_word_in_replaces_the_drafts_though_its_first_words_recur() -> None:
    stream = _stream(DRAFTS)
    decoded = _decoded("If the other person want to loan it. The statue here simply says if you owe the money")
    assert Stream._skipped_drafts(stream, 0, decoded) == 0  # not from the later "if the other"


def test_a_decode_that_begins_four_or_more_drafts_in_still_leaves_them() -> None:
    stream = _stream(DRAFTS)
    decoded = _decoded("if the other fellow want to lend it to you")
    k = next(i for i in range(len(DRAFTS)) if DRAFTS[i : i + 4] == ["if", "the", "other", "fellow"])
    assert k >= 4 and Stream._skipped_drafts(stream, 0, decoded) == k  # the drafts before it stand
