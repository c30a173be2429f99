"""The committed-token log's word rules (``captioner/engine/_committed.py``) on the real tiny.en
vocabulary: which words are a round's context, and which re-emitted words keep their first-shown time."""

from __future__ import annotations

import pytest
from replay import load_vocabulary

from captioner.engine._committed import CommittedLog, CommittedToken, keep_first_shown, retracted_words
from captioner.engine.stream import _drafts_after_last_word
from captioner.engine.tokens import Vocabulary

SR = 16000


@pytest.fixture(scope="module")
def vocab() -> Vocabulary:
    return load_vocabulary()


def tok(vocab: Vocabulary, text: str, start_s: float, end_s: float, shown: float = 0.0,
        speculative: bool = False) -> CommittedToken:
    return CommittedToken(vocab.token_bytes.index(text.encode()), round(start_s * SR), round(end_s * SR), shown,
                          speculative)


def test_a_word_collapsed_onto_an_input_start_is_not_context_of_that_input(vocab) -> None:
    """DTW may give the first word of an input a zero-length span at its first sample ("Ask" at
    0.0–0.0 of a noisy clip); that word is part of the input a closing round decodes again, and as
    context it made the repetition guard stop that decode at its first token, losing the utterance."""
    log = CommittedLog(vocab, "system")
    log.extend([tok(vocab, " He", 0.2, 0.5), tok(vocab, " said", 0.5, 0.9),  # the previous utterance
                tok(vocab, " Ask", 2.0, 2.0), tok(vocab, " her", 2.0, 2.4)])  # this one, from 2.0 s
    assert log.words_before(2 * SR, 8) == (b"he", b"said")
    log.extend([tok(vocab, " now", 2.4, 2.6, speculative=True)])
    assert log.words_before(3 * SR, 8) == (b"he", b"said", b"ask", b"her")  # speculative words are not context


def test_a_re_emitted_word_keeps_its_first_shown_time_only_at_the_same_place(vocab) -> None:
    shown = [tok(vocab, " the", 1.0, 1.2, shown=5.0), tok(vocab, " cat", 1.2, 1.6, shown=5.0)]
    retracted = retracted_words(shown, vocab)
    again = [tok(vocab, " the", 1.1, 1.3, shown=9.0), tok(vocab, " cat", 1.3, 1.7, shown=9.0)]
    keep_first_shown(again, retracted, vocab)
    assert [t.emitted_at for t in again] == [5.0, 5.0]  # re-timed by 0.1 s: the same words
    elsewhere = [tok(vocab, " the", 2.5, 2.7, shown=9.0), tok(vocab, " cat", 2.7, 3.0, shown=9.0)]
    keep_first_shown(elsewhere, retracted, vocab)
    assert [t.emitted_at for t in elsewhere] == [9.0, 9.0]  # "the cat" said again 1.5 s later


def test_a_word_stretched_over_a_pause_keeps_its_first_shown_time_where_the_spans_overlap(vocab) -> None:
    """One decode's DTW may stretch a word over the pause after it and another's not (LibriVox "A
    Tale of Two Cities" at 2 s: "belief" 11.26–12.40 s live, 11.28–11.80 s in the closing decode 22 s
    later): the same word, though their ends are 0.6 s apart."""
    shown = [tok(vocab, " belief", 11.26, 12.40, shown=6.0)]
    again = [tok(vocab, " belief", 11.28, 11.80, shown=18.0)]
    keep_first_shown(again, retracted_words(shown, vocab), vocab)
    assert again[0].emitted_at == 6.0
    apart = [tok(vocab, " belief", 12.95, 13.40, shown=18.0)]  # the word said again after the pause
    keep_first_shown(apart, retracted_words(shown, vocab), vocab)
    assert apart[0].emitted_at == 18.0


def test_a_word_collapsed_onto_one_frame_keeps_its_first_shown_time_where_its_round_had_heard_it(vocab) -> None:
    """A live round's last words can collapse onto a pause (LibriVox "A Tale of Two Cities" at 2 s:
    "in both countries" shown by the round whose input ended at 60.0 s, all three timed 58.26–58.26 s);
    the round that decodes them again times them 58.34–60.12 s. Those are the words that were shown,
    since that round had heard where they start; the same words starting after its input's end are not."""
    heard_to = 60 * SR
    shown = [CommittedToken(vocab.token_bytes.index(w.encode()), round(58.26 * SR), round(58.26 * SR), 30.0, False,
                            heard_to) for w in (" in", " both", " countries")]
    again = [tok(vocab, " In", 58.34, 59.42, shown=32.0), tok(vocab, " both", 59.42, 59.86, shown=32.0),
             tok(vocab, " countries", 59.86, 60.12, shown=32.0)]
    keep_first_shown(again, retracted_words(shown, vocab), vocab)
    assert [t.emitted_at for t in again] == [30.0, 30.0, 30.0]
    assert [t.heard_to for t in again] == [heard_to] * 3  # the first showing's input end goes with its time
    later = [tok(vocab, " in", 60.3, 60.5, shown=34.0), tok(vocab, " both", 60.5, 60.9, shown=34.0)]
    keep_first_shown(later, retracted_words(shown, vocab), vocab)
    assert [t.emitted_at for t in later] == [34.0, 34.0]  # said after that round's input: not what it showed
    unknown = [CommittedToken(t.id, t.start, t.end, 30.0, False) for t in shown]  # no input end recorded
    again = [tok(vocab, " in", 59.0, 59.4, shown=32.0)]
    keep_first_shown(again, retracted_words(unknown, vocab), vocab)
    assert again[0].emitted_at == 32.0


def test_a_speculative_word_keeps_its_first_shown_time_wherever_it_is_timed_again(vocab) -> None:
    """A speculative round's DTW was unreliable (words collapsed at the input's start): the round
    that confirms its words times them properly and they keep the time they were first shown (§11.7,
    deviation 10)."""
    shown = [tok(vocab, " He", 0.0, 0.0, shown=1.0, speculative=True)]
    again = [tok(vocab, " He", 0.6, 0.9, shown=2.0)]
    keep_first_shown(again, retracted_words(shown, vocab), vocab)
    assert again[0].emitted_at == 1.0


def test_the_context_carries_where_each_word_ended_and_a_prefix_is_found_where_it_was_heard(vocab) -> None:
    """The repetition guard judges a repeat of the context by where the context ended: the words
    before an input come with their committed ends, and a forced prefix word, said twice in the log
    ("please call stella please call"), is timed at its copy nearest the input's start."""
    log = CommittedLog(vocab, "system")
    words = [(" please", 1.0, 1.3), (" call", 1.3, 1.6), (" Stella", 1.6, 2.1),
             (" please", 2.4, 2.7), (" call", 2.7, 3.0)]
    log.extend([tok(vocab, w, a, b) for w, a, b in words])
    assert log.timed_words_before(round(2.2 * SR), 8) == (
        (b"please", round(1.3 * SR)), (b"call", round(1.6 * SR)), (b"stella", round(2.1 * SR)))
    call = [vocab.token_bytes.index(b" call")]
    assert log.end_of(call, round(1.2 * SR)) == round(1.6 * SR)  # the first "call", at an input from 1.2 s
    assert log.end_of(call, round(2.6 * SR)) == round(3.0 * SR)  # the second
    assert log.end_of([vocab.token_bytes.index(b" her")], 0) is None


def test_a_forced_word_s_context_is_the_log_before_it_whatever_the_times(vocab) -> None:
    """A phrase read again ("it was the epoch of belief, it was the epoch of incredulity", a LibriVox
    reading of Dickens at a 2 s step): DTW timed the committed "it was" after "belief" two seconds
    early, before the next input's start. By their times those words were the repetition guard's
    context, then the forced carry's word "it" and the decode's first word "was" repeated them, and
    every live round stopped at its first token for 12 s. With a forced word the context is the
    committed words before its last run in the log, and the decode goes on."""
    from captioner.engine.validate import WordGuard

    log = CommittedLog(vocab, "system")
    words = [(" It", 9.0, 9.1), (" was", 9.1, 9.3), (" the", 9.3, 9.4), (" epic", 9.4, 9.8), (" of", 9.8, 10.0),
             (" belief", 10.7, 11.9), (",", 11.9, 11.95), (" it", 9.7, 9.92), (" was", 9.92, 10.38)]
    log.extend([tok(vocab, w, a, b) for w, a, b in words])
    start = round(11.86 * SR)
    it = [vocab.token_bytes.index(b" it")]
    by_time = tuple(w for w, _ in log.timed_words_before(start, 12))
    assert by_time[-3:] == (b"belief", b"it", b"was")
    context = tuple(w for w, _ in log.context_before(start, 12, it))
    assert context == (b"it", b"was", b"the", b"epic", b"of", b"belief")
    assert log.context_before(start, 12) == log.timed_words_before(start, 12)  # nothing forced: by times
    epic = [vocab.token_bytes.index(b" epic")]  # a revising round reaching back to "epic" (token 3)
    assert tuple(w for w, _ in log.context_before(start, 12, epic, redo_from=4)) == (b"it", b"was", b"the")

    def stop(context: tuple[bytes, ...]):
        guard = WordGuard(vocab, (*context, b"it"))  # the forced word follows the context
        decoded: list[int] = []
        for text in (" was", " the", " epic", " of"):
            token = vocab.token_bytes.index(text.encode())
            if (found := guard.on_token(decoded, token)) is not None:
                return found
            decoded.append(token)
        return guard.on_token(decoded, None)

    assert stop(by_time) is not None and stop(by_time).reason == "repetition"  # the old context: a loop
    assert stop(context) is None


def test_a_split_keeps_the_drafts_after_the_word_its_decode_ends_with(vocab) -> None:
    """Deviation 48: a round that closes a long utterance at a pause (58.34 s) decodes "… throne of
    France." The drafts "… of France in both countries" had "in both countries" collapsed by DTW onto
    58.26 s, before the pause; kept by their time alone they went from the captions for a round. The
    drafts after the draft word the decode ends with (the same text, starting within 0.5 s of the
    decode's) stand, whatever their times; with no such draft, none do by this rule."""
    drafts = [tok(vocab, " of", 57.14, 57.82), tok(vocab, " France", 57.82, 58.26), tok(vocab, " in", 58.26, 58.26),
              tok(vocab, " both", 58.26, 58.26), tok(vocab, " countries", 58.26, 58.26)]
    decoded = [tok(vocab, " of", 57.6, 57.94), tok(vocab, " France", 57.94, 58.34), tok(vocab, ".", 58.34, 58.34)]
    kept = _drafts_after_last_word(drafts, decoded, vocab)
    assert [vocab.decode([t.id]) for t in kept] == [" in", " both", " countries"]
    assert _drafts_after_last_word(drafts, [tok(vocab, " England", 57.9, 58.3)], vocab) == []
    late = [tok(vocab, " France", 56.0, 56.4), *drafts[2:]]  # a "France" drafted 2 s earlier is another one
    assert _drafts_after_last_word(late, decoded, vocab) == []


def test_a_sealed_log_starts_a_new_word_and_never_retracts_the_last_one(vocab) -> None:
    """After a closed utterance the stream seals the log (``EngineUpdate.settled``): a next token
    without a leading space (a language written without spaces, a decode opening with "-") opens a
    word of its own instead of joining the last final word, which an update would have retracted."""
    open_log = CommittedLog(vocab, "system")
    sealed = CommittedLog(vocab, "system")
    for log in (open_log, sealed):
        log.extend([tok(vocab, " He", 0.2, 0.5), tok(vocab, " said", 0.5, 0.9)])
        assert [w.text for w in log.publish()[1]] == ["He", "said"]
    sealed.seal()
    for log in (open_log, sealed):
        log.extend([tok(vocab, "-", 3.0, 3.1), tok(vocab, " yes", 3.1, 3.5)])
    retract, words = open_log.publish()
    assert retract == 1 and [w.text for w in words] == ["said-", "yes"]  # "said" taken back
    retract, words = sealed.publish()
    assert retract == 0 and [w.text for w in words] == ["-", "yes"]
    sealed.truncate(1)  # the seal's words taken back after all (the stream never does): the seal goes
    sealed.extend([tok(vocab, "-", 4.0, 4.1)])
    retract, words = sealed.publish()
    assert retract == 4 and [w.text for w in words] == ["He-"]  # re-derived from "He" on, as unsealed
