"""The stop conditions of NPUSPER.md §7–§9 on hand-made attention (:mod:`captioner.engine.validate`)."""

from __future__ import annotations

import numpy as np
import pytest
from oracle import make_vocab

from captioner.engine.validate import (
    RoundValidator,
    exclude_index,
    filtered_difference,
    median_filter,
    moving_average,
    shift_peaks,
)

V = make_vocab()
A, B, C, D = V.word[:4]
COMMA = V.punct[1]
ING = V.subword[0]
N = 100  # frames: a 2 s input


def naive_median(x: np.ndarray, width: int) -> np.ndarray:
    """The reference's loop: whole-sample mirror, then clamp, then the middle of the sorted window."""
    n, half = len(x), width // 2
    out = np.empty_like(x)
    for f in range(n):
        vals = []
        for i in range(f - half, f + half + 1):
            if i < 0:
                i = -i
            if i > n - 1:
                i = 2 * (n - 1) - i
            vals.append(x[min(max(i, 0), n - 1)])
        out[f] = sorted(vals)[half]
    return out


def naive_average(x: np.ndarray, width: int) -> np.ndarray:
    """out[f] = (1/width) · Σ_{k=f−width/2}^{f+width/2−1} x[k], zeros outside."""
    n = len(x)
    return np.array([sum(x[k] for k in range(f - width // 2, f + (width - 1) // 2 + 1) if 0 <= k < n) / width
                     for f in range(n)])


@pytest.mark.parametrize("n", [1, 2, 3, 4, 5, 7, 9, 10, 11, 31, 150])
def test_median_filter_mirrors_edges_like_the_reference(n):
    x = np.random.default_rng(n).standard_normal(n).astype(np.float32)
    np.testing.assert_array_equal(median_filter(x, 7), naive_median(x, 7))
    if n > 3:  # long enough for one reflection: numpy's "reflect" padding is the same rule
        ref = np.median(np.lib.stride_tricks.sliding_window_view(np.pad(x, 3, mode="reflect"), 7), axis=-1)
        np.testing.assert_array_equal(median_filter(x, 7), ref.astype(np.float32))


def test_median_filter_rows_and_width_one():
    x = np.random.default_rng(0).standard_normal((5, 40))
    np.testing.assert_array_equal(median_filter(x, 7), np.stack([naive_median(r, 7) for r in x]))
    assert median_filter(x, 1) is x


@pytest.mark.parametrize("n", [1, 3, 9, 10, 11, 64, 150])
def test_moving_average_zero_edges(n):
    x = np.random.default_rng(n).standard_normal(n)
    np.testing.assert_allclose(moving_average(x, 10), naive_average(x, 10), rtol=0, atol=1e-12)
    if n >= 10:
        np.testing.assert_allclose(moving_average(x, 10), np.convolve(x, np.ones(10) / 10, "same"), atol=1e-12)


def test_filtered_difference_is_average_of_median():
    rng = np.random.default_rng(3)
    a, b = rng.random(80).astype(np.float32), rng.random(80).astype(np.float32)
    np.testing.assert_allclose(filtered_difference(a, b), naive_average(naive_median(a - b, 7), 10), atol=1e-6)


def test_exclude_index_mirrors_cpp_float_division():
    assert exclude_index(0.3, 100) == 15
    assert exclude_index(0.3, 10) == 9  # clamped to the last frame
    assert exclude_index(0.0, 100) == 0


def test_peaks_take_the_first_index_on_ties():
    sig = np.zeros(50, np.float32)
    assert shift_peaks(sig, 15) == (15, 0)
    sig[[20, 30]] = 1.0
    sig[[5, 40]] = -1.0
    assert shift_peaks(sig, 15) == (20, 5)
    sig[10] = 2.0  # larger, but before the exclusion: f+ ignores it, f− searches everything
    assert shift_peaks(sig, 15) == (20, 5)


def box(center: int, width: int = 8, n: int = N) -> np.ndarray:
    """Attention concentrated on ``width`` frames around ``center`` (wide enough to survive median 7)."""
    a = np.full(n, 1e-4, np.float32)
    a[center - width // 2 : center + width // 2] = 1.0
    return a / a.sum()


def feed(v: RoundValidator, tokens, centers, eot_wins=None):
    """Predict then consume each token in order; returns the first stop."""
    for k, (tok, c) in enumerate(zip(tokens, centers, strict=True)):
        stop = v.on_prediction(tok, 1.0, 2.0 if eot_wins and eot_wins[k] else 0.0)
        if stop:
            return stop
        stop = v.on_attention(box(c))
        if stop:
            return stop
    return None


def validator(**kw) -> RoundValidator:
    return RoundValidator(V.vocab, input_s=N * 0.02, **kw)


def test_first_difference_always_passes_then_backward_shift_drops_token_i():
    # B jumps back from A: the first difference of the round, forced valid (f− := 0)
    assert feed(validator(), [A, B], [60, 30]) is None
    v = validator()
    stop = feed(v, [A, B, C, D], [40, 60, 30, 70])
    assert (stop.reason, stop.index, stop.token) == ("backward_shift", 2, C)  # C and after dropped
    assert v.decoded == [A, B, C] and v.last_peak_s == pytest.approx(60 * 0.02, abs=0.1)


def test_same_jump_is_flagged_when_it_is_not_the_first_difference():
    assert feed(validator(), [A, B, C], [20, 60, 30]).reason == "backward_shift"
    assert feed(validator(), [A, B, C], [20, 40, 60]) is None


def test_backward_shift_with_speech_still_to_come_is_not_a_stop():
    # B attends at 1.2 s, C 0.6 s back: a stop, unless the speech goes on at least
    # ``backward_speech_s`` after B's f+ (the decoder has not run out of audio: deviation 46)
    def bs(**kw):
        stop = feed(validator(**kw), [A, B, C, D], [20, 60, 30, 70])
        return None if stop is None else stop.reason

    assert bs(speech_end_s=1.9, backward_speech_s=0.5) is None  # speech to 1.9 s: 0.7 s after B's f+
    assert bs(speech_end_s=1.9, backward_speech_s=1.0) == "backward_shift"
    assert bs(speech_end_s=1.9) == "backward_shift"  # 0: the paper's test
    assert bs(backward_speech_s=0.5) == "backward_shift"  # no speech detector
    assert bs(speech_end_s=1.3, backward_speech_s=0.5) == "backward_shift"  # the speech ends where B attends


def test_punctuation_and_subwords_skip_the_test_and_keep_prev_attention():
    # the comma and "ing" attend far back but are not content tokens; C is compared with B, not them
    assert feed(validator(), [A, B, COMMA, ING, C], [20, 40, 16, 16, 50]) is None


def test_peak_margin_stops_keeping_the_token():
    stop = feed(validator(), [A, B, C, D], [20, 40, 80, 90])
    assert (stop.reason, stop.index) == ("peak_margin", 3)  # f+ = 1.6 s > 2.0 − 0.6: C kept
    assert feed(validator(peak_margin_s=0.0), [A, B, C, D], [20, 40, 80, 90]) is None


def test_first_content_token_cannot_trigger_peak_margin():
    assert feed(validator(), [A], [95]) is None


def test_a_repeated_word_or_token_stops_the_round():
    # one token said three times: the reference's id rule drops all three copies …
    stop = feed(validator(), [A, B, B, B], [20, 40, 40, 40])
    assert (stop.reason, stop.index) == ("repetition", 1)
    # … punctuation too
    stop = feed(validator(), [A, COMMA, COMMA, COMMA], [20, 20, 20, 20])
    assert (stop.reason, stop.index) == ("repetition", 1)
    assert stop.loop  # the decode failed: a live round so stopped is decoded again (stream.py deviation 50)


def test_eot_with_garbage_runner_up_keeps_everything_decoded():
    v = validator()
    stop = feed(v, [A, B, V.punct[0]], [20, 40, 40], eot_wins=[False, False, True])
    assert (stop.reason, stop.index) == ("eot", 2)
    assert v.decoded == [A, B]


def test_eot_with_a_real_runner_up_continues():
    v = validator()
    assert feed(v, [A, B, C], [20, 40, 60], eot_wins=[False, True, False]) is None
    assert v.decoded == [A, B, C]
    # a garbage token only stops when EOT wins
    assert feed(validator(), [A, COMMA, B], [20, 20, 40]) is None


def test_no_more_tokens_after_a_stop():
    v = validator()
    stop = feed(v, [A, B, B, B], [20, 40, 40, 40])
    assert v.on_prediction(C, 1.0, 0.0) is stop and v.on_attention(box(50)) is stop


def test_a_special_token_as_runner_up_is_garbage():
    # the graphs never choose ids >= EOT (deviation 5 of stream.py); if one arrived as the EOT
    # runner-up it would end the round like any garbage runner-up, and never count as content
    v = validator()
    assert feed(v, [A, V.vocab.eot + 3], [20, 40], eot_wins=[False, True]).reason == "eot"
    assert not V.vocab.is_content(V.vocab.eot + 3)


def test_repeated_word_blocks_stop_at_their_second_occurrence() -> None:
    from captioner.engine.validate import repeated_tail

    assert repeated_tail([b"behind", b"on", b"the", b"left", b"on", b"the", b"left"]) == 3
    assert repeated_tail([b"his", b"gospel", b"gospel"]) == 1
    assert repeated_tail([b"it", b"was", b"here", b"that", b"we", b"it", b"was", b"here"]) == 0
    assert repeated_tail([]) == 0


def test_word_guard_stops_multi_token_repeats_and_sound_captions() -> None:
    from captioner.engine.validate import WordGuard, is_annotation

    assert is_annotation(b" (water") and is_annotation(b"[BLANK") and is_annotation(" \u266a".encode())
    assert not is_annotation(b" water")
    # " w000" + "," twice: a two-token word said again stops at its second occurrence
    guard, decoded = WordGuard(V.vocab, context=(b"x",)), []
    stop = None
    for tok in [A, COMMA, A, COMMA, B]:
        stop = guard.on_token(decoded, tok)
        if stop:
            break
        decoded.append(tok)
    assert stop is not None and (stop.reason, stop.index) == ("repetition", 2)


@pytest.mark.parametrize(("again", "stops"), [
    ([250, 270, 290, 310, 330], False),  # said again later in the speech: a real repeat, kept
    ([20, 40, 60, 80, 100], True),  # attending back to the first time: Whisper restarting its sentence
    ([390, 392, 394, 396, 398], True),  # attending to the input's end, the silence after the speech
])
def test_a_sentence_restart_stops_unless_it_attends_to_later_speech(again, stops) -> None:
    """The round's first five words said again as its last: a stop at the restart, unless their
    attention peaks (median) lie ≥ 1 s after the first time's and before the input's last 0.3 s."""
    n = 400  # 8 s of input
    v = RoundValidator(V.vocab, input_s=n * 0.02, closing=True)
    words = list(V.word[:5]) + list(V.word[5:8]) + list(V.word[:5]) + [V.word[9]]
    centers = [20, 40, 60, 80, 100, 140, 180, 220, *again, 360]
    stop = None
    for tok, c in zip(words, centers, strict=True):
        stop = v.on_prediction(tok, 1.0, 0.0) or v.on_attention(box(c, n=n))
        if stop:
            break
    if stops:
        assert stop is not None and (stop.reason, stop.index) == ("repetition", 8)
    else:
        assert stop is None and v.decoded == words


def test_a_syllable_loop_inside_one_word_stops_keeping_its_first_copy() -> None:
    """Real tiny.en on LibriSpeech 1998-15444-0000 looped "Chói-Chi-Chi-Chi-…" to the token limit:
    no word repeats (it is one word) and no id repeats back to back. A block of 2–4 tokens three
    times in a row stops the round; the first copy stays."""
    from captioner.engine.validate import _token_loop

    assert _token_loop([5, 6, 7, 6, 7, 6, 7]) == 2
    assert _token_loop([1, 2, 3, 1, 2, 3, 1, 2, 3]) == 3
    assert _token_loop([6, 7, 6, 7]) == 0 and _token_loop([1, 2, 3, 4]) == 0
    hyphen, chi = V.subword[0], V.subword[1]
    v = validator(closing=True)
    tokens = [A, hyphen, chi, hyphen, chi, hyphen, chi, hyphen]
    stop = feed(v, tokens, [10 + 5 * k for k in range(len(tokens))])
    assert stop is not None and stop.reason == "repetition" and stop.index == 3  # A, -, Chi kept
    assert stop.loop


@pytest.mark.parametrize("closing", [False, True])
def test_a_repeat_heard_in_later_audio_is_speech_not_a_loop(closing) -> None:
    """Issue 25: a phrase said again whose attention moves on through the audio ("tell you, you
    have …") is kept; one that attends back to its first time's audio is a loop and stops. The
    round's first token (spread attention) and peaks in the silence after the input do not count."""
    later = feed(validator(closing=closing), [A, B, A, B, C], [90, 20, 30, 40, 50])  # first token's peak ignored
    assert later is None
    back = validator(closing=True)  # (a live round's backward-shift test may stop a jump back first)
    stop = feed(back, [A, B, A, B, C], [10, 20, 12, 18, 50])
    assert stop is not None and (stop.reason, stop.index) == ("repetition", 2)
    assert not stop.loop  # a phrase said again: the word guard's judgement, not a failed decode
    past_the_input = validator(closing=True)
    stop = feed(past_the_input, [A, B, A, B, C], [10, 20, N + 5, N + 9, 50])
    assert stop is not None and stop.reason == "repetition"


def test_words_said_three_times_are_judged_as_words_not_as_a_token_loop() -> None:
    """ "words, words, words": a two-token block three times in a row that starts a word is left to
    the word guards, which keep it when it moves on through the audio."""
    hyphen = V.subword[0]
    v = validator(closing=True)
    assert feed(v, [A, hyphen, A, hyphen, A, hyphen, C], [5, 10, 20, 25, 35, 40, 50]) is None
    assert v.decoded == [A, hyphen, A, hyphen, A, hyphen, C]


def test_a_repeat_is_judged_on_the_alignment_heads_every_token_later() -> None:
    """Issue 25: where the decoder gives the alignment heads' attention the repetition guard reads it
    (the final layer is a weak aligner: in whisper-base's "I tell you, you have" the second "you"
    peaked 0.02 s after the first on the final layer, 0.32 s on the alignment heads), and every token of
    the repeat must attend 0.2 s later than its first time's (whisper-base heard noisy "brother Bob"
    as "brother's brother's": the repeat's first token 0.4 s later, its "'s" not at all, a loop)."""

    def feed_aligned(v, tokens, last, align):
        for tok, c, a in zip(tokens, last, align, strict=True):
            stop = v.on_prediction(tok, 1.0, 0.0)
            if stop:
                return stop
            v.on_alignment(box(a))
            stop = v.on_attention(box(c))
            if stop:
                return stop
        return None

    you = ([C, A, COMMA, A, D], [10, 47, 47, 48, 56], [9, 33, 40, 49, 56])
    assert feed_aligned(validator(closing=True), *you) is None
    stop = feed(validator(closing=True), you[0], you[1])  # the final layer alone: a loop
    assert stop is not None and stop.reason == "repetition"
    stop = feed_aligned(validator(closing=True), [C, A, ING, A, ING, D], [10, 20, 25, 21, 25, 60],
                        [10, 20, 25, 40, 25, 60])
    assert stop is not None and (stop.reason, stop.index) == ("repetition", 3)


def test_a_repeat_of_the_committed_context_is_judged_by_where_the_context_ended() -> None:
    """Issue 25: "Please call Stella. Please call Stella." read twice; a live round at 1 s forced
    "call" (its prefix) after the committed "please" and decoded "Stella. Please call Stella.": the
    first time begins in the context, which has no attention, so every such round stopped at the
    repeat and the captions froze for 27 s (13 words lost). The repeat of the context's words now
    counts as speech when it attends ≥ 0.2 s after the context's last word ends (its committed time,
    ``context_ends``, seconds from the input's start); without times, or attending at that end, it
    is a loop as before."""
    context = (b"w003", b"w000", b"w001")  # "D A B": committed, the last one forced as the prefix
    tokens, centers = [C, A, B, C, D], [15, 40, 50, 60, 65]  # "C" (own), then "A B C" again, 0.8 s on
    assert feed(validator(context=context, context_ends=(-0.6, -0.3, 0.2)), tokens, centers) is None
    stop = feed(validator(context=context, context_ends=(-0.6, -0.3, 0.7)), tokens, centers)  # at the end
    assert stop is not None and (stop.reason, stop.index) == ("repetition", 1)
    stop = feed(validator(context=context), tokens, centers)  # no times: a loop, as before
    assert stop is not None and (stop.reason, stop.index) == ("repetition", 1)
    back = feed(validator(context=context, context_ends=(-0.6, -0.3, 0.2)), tokens, [15, 12, 50, 60, 65])
    assert back is not None and back.reason == "repetition"  # "A" heard where the context was: a loop


def test_without_the_phrase_guard_repeats_pass_and_sound_captions_still_stop() -> None:
    """``phrases=False`` (a closing decode heard again as offline Whisper decodes it, deviation 37):
    a repeated word block that the phrase guard stops is decoded through; three copies of one token
    still stop it (the id rule is not a word guard). Sound captions are checked before the phrase
    guard (``WordGuard.on_token``) and stop it as before."""
    loop = [A, B, A, B, C]  # "w000 w001" twice, attending back to the first time, then another word
    stop = feed(validator(closing=True), loop, [20, 30, 20, 30, 60])
    assert stop is not None and (stop.reason, stop.index) == ("repetition", 2)  # the guard stops it
    free = validator(closing=True, phrases=False)
    assert feed(free, loop, [20, 30, 20, 30, 60]) is None and free.close() is None
    assert free.decoded == loop
    stop = feed(validator(closing=True, phrases=False), [B, B, B], [20, 40, 60])
    assert stop is not None and (stop.reason, stop.index) == ("repetition", 0)


def test_the_repeat_a_round_was_told_to_keep_passes_once_and_a_later_copy_is_judged() -> None:
    """Deviation 49: ``kept_after`` (the tokens a live round kept before the repeat the guards
    stopped it at, on the same input) lets that repeat after exactly those tokens through, once; the
    same repeat after other tokens, and the next copy of a loop, stop as before."""
    loop = [A, B, A, B, A, B, C]  # "w000 w001" three times, every copy attending back to the first
    centers = [20, 30, 20, 30, 20, 30, 60]
    stop = feed(validator(closing=True), loop, centers)
    assert stop is not None and (stop.reason, stop.index) == ("repetition", 2)
    told = validator(closing=True, kept_after=(A, B))
    stop = feed(told, loop, centers)
    assert stop is not None and (stop.reason, stop.index) == ("repetition", 3)  # "B A" again: a loop
    other = validator(closing=True, kept_after=(A,))  # not the tokens before this repeat
    stop = feed(other, loop, centers)
    assert stop is not None and (stop.reason, stop.index) == ("repetition", 2)
