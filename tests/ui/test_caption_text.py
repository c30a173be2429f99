"""CaptionText: the caption bar's word model (retraction in place, wrap, scroll-off), without Qt."""

from __future__ import annotations

import dataclasses

from captioner.core import EngineUpdate, Word
from captioner.ui.caption_text import GAP_MARK, CaptionText, wrap_pieces


def words(text: str, source="system", speculative=False, t0=0.0) -> tuple[Word, ...]:
    return tuple(Word(w, t0 + i, t0 + i + 0.5, source=source, speculative=speculative)
                 for i, w in enumerate(text.split()))


def texts(ct: CaptionText) -> list[str]:
    return [w.text for w in ct.words]


def test_append_then_retract_replaces_the_last_words():
    ct = CaptionText(len)
    assert ct.apply(EngineUpdate(0, words("hello there")))
    assert ct.apply(EngineUpdate(0, words("genre al", speculative=True)))
    assert texts(ct) == ["hello", "there", "genre", "al"]
    ct.apply(EngineUpdate(2, words("general kenobi")))
    assert texts(ct) == ["hello", "there", "general", "kenobi"]
    assert not any(w.speculative for w in ct.words)


def test_retraction_of_one_source_replaces_in_place_not_at_the_end():
    ct = CaptionText(len)
    ct.apply(EngineUpdate(0, words("we will meet", source="mic", speculative=True), source="mic"))
    ct.apply(EngineUpdate(0, words("sounds good", source="system"), source="system"))
    ct.apply(EngineUpdate(2, words("meet tomorrow", source="mic"), source="mic"))
    assert texts(ct) == ["we", "meet", "tomorrow", "sounds", "good"]


def test_empty_update_changes_nothing_and_over_retraction_appends():
    ct = CaptionText(len)
    assert not ct.apply(EngineUpdate(0, ()))
    ct.apply(EngineUpdate(0, words("a b")))
    ct.drop_through(ct.pieces()[-1].entry_id)  # both scrolled off
    ct.apply(EngineUpdate(2, words("c d")))  # retracts words no longer held: appended
    assert texts(ct) == ["c", "d"]


def test_wrap_is_greedy_and_never_wider_than_the_line():
    ct = CaptionText(len)
    ct.apply(EngineUpdate(0, words("aa bbb c dddd ee f")))
    lines = ct.wrap(8)
    assert [" ".join(t.text for t in line) for line in lines] == ["aa bbb c", "dddd ee", "f"]
    assert all(len(" ".join(t.text for t in line)) <= 8 for line in lines)


def test_a_word_longer_than_the_line_gets_its_own_line():
    tokens = CaptionText(len)
    tokens.apply(EngineUpdate(0, words("a extraordinarily b")))
    assert [[t.text for t in line] for line in tokens.wrap(5)] == [["a"], ["extraordinarily"], ["b"]]


def test_stable_only_hides_drafts_and_shows_a_closed_sentence_dimmed():
    """A closed sentence's words that a second reading may still change (deviation 53) are shown in
    stable mode, dimmed as in the streaming mode; drafts are not."""
    ct = CaptionText(len)
    ct.apply(EngineUpdate(0, words("solid")))
    ct.apply(EngineUpdate(0, tuple(dataclasses.replace(w, rereadable=True) for w in words("closed", speculative=True))))
    ct.apply(EngineUpdate(0, words("maybe", speculative=True)))
    assert [(t.text, t.speculative) for t in ct.pieces(stable_only=True)] == [("solid", False), ("closed", True)]
    assert [t.text for t in ct.pieces()] == ["solid", "closed", "maybe"]


def test_labels_start_each_change_of_source():
    ct = CaptionText(len)
    ct.apply(EngineUpdate(0, words("hi all", source="mic"), source="mic"))
    ct.apply(EngineUpdate(0, words("hello", source="system"), source="system"))
    ct.apply(EngineUpdate(0, words("so", source="mic"), source="mic"))
    toks = ct.pieces(labels={"mic": "You", "system": "Others"})
    assert [t.text for t in toks] == ["You:", "hi", "all", "Others:", "hello", "You:", "so"]
    assert [t.label for t in toks].count(True) == 3


def test_drop_lines_forgets_the_words_that_scrolled_off_even_after_in_place_replacement():
    ct = CaptionText(len)
    ct.apply(EngineUpdate(0, words("one two", source="mic", speculative=True), source="mic"))
    ct.apply(EngineUpdate(0, words("three four", source="system"), source="system"))
    ct.apply(EngineUpdate(1, words("TWO", source="mic"), source="mic"))  # new id, old position
    lines = ct.wrap(7)
    assert [[t.text for t in line] for line in lines] == [["one", "TWO"], ["three"], ["four"]]
    ct.drop_lines(lines[:1])
    assert texts(ct) == ["three", "four"]


def test_drop_lines_keeps_a_label_that_ends_a_line_with_its_word():
    tokens = CaptionText(len)
    tokens.apply(EngineUpdate(0, words("abc", source="mic"), source="mic"))
    tokens.apply(EngineUpdate(0, words("longword", source="system"), source="system"))
    lines = tokens.wrap(14, labels={"mic": "You", "system": "Them"})
    assert [[t.text for t in line] for line in lines] == [["You:", "abc", "Them:"], ["longword"]]
    tokens.drop_lines(lines[:1])
    assert texts(tokens) == ["longword"]


def test_wrap_tokens_empty():
    assert wrap_pieces([], 10, len) == []


def test_a_gap_adds_a_mark_that_retractions_never_count():
    ct = CaptionText(len)
    ct.apply(EngineUpdate(0, words("one two", speculative=True)))
    ct.apply(EngineUpdate(2, words("one two"), gap=(2.0, 6.0)))  # the skip: confirmed, then the gap
    assert texts(ct) == ["one", "two", GAP_MARK]
    ct.apply(EngineUpdate(0, words("thre", speculative=True, t0=6.0)))
    ct.apply(EngineUpdate(1, words("three", t0=6.0)))  # retract 1: "thre", not the mark
    assert texts(ct) == ["one", "two", GAP_MARK, "three"]
    ct.apply(EngineUpdate(2, words("two three")))  # 2 words back: the mark is not one of them, it stays
    assert texts(ct).count(GAP_MARK) == 1 and texts(ct)[0] == "one" and len(ct) == 4
