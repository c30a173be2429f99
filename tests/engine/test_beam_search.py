"""Beam search for closing decodes (``engine/beam.py``) over the pack's beam-step graph, on the real
tiny.en and real speech: each row of a beam step is the sequential decoder step of its own
hypothesis (before and after the hypotheses are reordered), the search keeps the model's own
log-probabilities of what it chose, the round's validator still stops it, and a model without a
beam graph is left to the greedy decode.
"""

from __future__ import annotations

import numpy as np
import pytest
from speech_clips import CLIPS

from captioner.engine.beam import FEWER_WORDS, SKIP_WORDS, decode_beam, repeated_block, skipped_words
from captioner.engine.decoder import NativeValidator, decode_round
from captioner.engine.tokens import normalize_word
from captioner.engine.validate import Stop

_LOGIT_TOLERANCE = 1e-3  # a batched row against the same step alone, fp32 layers: float rounding
_INT8_LOGIT_TOLERANCE = 0.3  # int8 layers: see _logit_tolerance
_LSE_TOLERANCE = 0.3  # the int8-ranked projection's log-sum-exp is the int8 estimate of the row (test_draft_decoding)


def _logit_tolerance(model) -> float:
    """fp32 layers: float rounding. int8 layers: each row's activations are quantised by themselves,
    but where the CPU's kernels round a batched row's float parts differently from a row alone
    (seen on an Intel Xeon with AVX-512 VNNI: of five identical rows, four 0.21 above the step
    alone and one equal to it; an AMD EPYC with AVX2 gave the step alone's logits), an activation
    can land one 8-bit step away and the logits move by a quarter of a unit, as the int8-ranked
    vocabulary's log-sum-exp estimate does (_LSE_TOLERANCE)."""
    return _LOGIT_TOLERANCE if model.pack.layers == "fp32" else _INT8_LOGIT_TOLERANCE


def _attention_tolerance(model) -> float:
    """fp32 layers: float rounding; int8 layers: a row batched with others can move one activation
    across an 8-bit step (as a verifier's rows, test_draft_decoding)."""
    return 1e-4 if model.pack.layers == "fp32" else 1e-2


@pytest.fixture(scope="module")
def model(tiny_en):
    return tiny_en


@pytest.fixture(scope="module")
def heard(closing_inputs):
    return closing_inputs


def _prompt(model) -> list[int]:
    return list(model.vocab.prompt("en", "transcribe"))


def test_a_pack_built_with_beam_5_has_a_beam_step_for_the_long_buckets(beam_packs, real_tiny_en_pack) -> None:
    pack = beam_packs["fp32"]
    path, size = pack.beam(10)
    assert path.name == "decoder_s220_b5.onnx" and size == 5 and pack.beam(30) == (path, size)
    assert pack.beam(3) is None and pack.manifest["beams"] == {"220": {"file": path.name, "size": 5}}
    assert real_tiny_en_pack.beam(10) is None  # the default build has none


def _sequential(model, encoding, seq: list[int], given: list[int]):
    """The sequential chunk of 5 steps at ``len(seq)`` − 1 after ``seq`` (the head run by the plan),
    with ``given`` forced after it: row ``len(given)`` is the step that consumes ``given[-1]``."""
    runner = model.decoder(encoding)
    head = model.chunk_plan(encoding.bucket, prefixed=False)[0][1]
    runner.run(0, head, seq[0], np.array(seq[1:head], np.int64))
    runner.rewind(len(seq) - 1)
    forced = np.array(given + [-1] * (4 - len(given)), np.int64)
    return runner.run(len(seq) - 1, 5, seq[-1], forced)


def test_each_beam_row_is_the_sequential_step_of_its_hypothesis(model, heard) -> None:
    encoding, input_s = heard[1]
    greedy = decode_round(model, encoding, _prompt(model), (), NativeValidator(input_s, model.vocab))
    seq = _prompt(model) + list(greedy.tokens)
    head = model.chunk_plan(encoding.bucket, prefixed=False)[0][1]
    seq = seq[: head + 1]  # the head consumes positions 0 … head − 1; the beams continue at head
    runner = model.decoder(encoding)
    runner.run(0, head, seq[0], np.array(seq[1:head], np.int64))
    beams = runner.beams(head)
    width = beams.size
    assert width == 5 and beams.position == head

    def check(row, out, sequential, s):
        assert int(out.top_tokens[row, 0]) == int(sequential.tokens[s])
        assert abs(float(out.top_logits[row, 0]) - float(sequential.token_logit[s])) < _logit_tolerance(model)
        assert abs(float(out.eot_logit[row]) - float(sequential.eot_logit[s])) < _logit_tolerance(model)
        assert abs(float(out.logsumexp[row]) - float(sequential.logsumexp[s])) < _LSE_TOLERANCE + _logit_tolerance(model)
        assert np.abs(out.attn_align[row] - sequential.attn_align[s]).max() < _attention_tolerance(model)
        assert np.abs(out.attn_last[row] - sequential.attn_last[s]).max() < _attention_tolerance(model)

    # every hypothesis the same: every row is the greedy step, its best token greedy's next token
    first = beams.step(np.full(width, seq[head], np.int64))
    alone = _sequential(model, encoding, seq, [])
    for row in range(width):
        check(row, first, alone, 0)
        assert np.array_equal(first.top_tokens[row], first.top_tokens[0])  # the B best, best first
        assert (np.diff(first.top_logits[row]) <= 0).all()
    assert int(first.top_tokens[0, 0]) == greedy.tokens[head + 1 - len(_prompt(model))]
    # row b consumes the b-th best token: each row is its own hypothesis' step
    nxt = [int(t) for t in first.top_tokens[0]]
    second = beams.step(np.array(nxt, np.int64))
    for row in range(width):
        check(row, second, _sequential(model, encoding, seq, [nxt[row]]), 1)
    # reordered: hypothesis b continues parents[b] (its cache copied over), each with its best token
    parents = [3, 3, 0, 4, 1]
    beams.reorder(np.array(parents, np.int64))
    then = [int(second.top_tokens[p, 0]) for p in parents]
    third = beams.step(np.array(then, np.int64))
    for row, p in enumerate(parents):
        check(row, third, _sequential(model, encoding, seq, [nxt[p], then[row]]), 2)


class _Forced:
    """A validator that records what it reads (and stops on the ``stop_at``-th token's attention)."""

    def __init__(self, inner: NativeValidator, stop_at: int | None = None) -> None:
        self.inner, self.stop_at = inner, stop_at
        self.read: list[str] = []

    def __getattr__(self, name):
        return getattr(self.inner, name)

    def on_prediction(self, token, token_logit, eot_logit):
        self.read.append("eot" if eot_logit > token_logit else "token")
        return self.inner.on_prediction(token, token_logit, eot_logit)

    def on_attention(self, attn_last):
        self.read.append("attention")
        if self.stop_at is not None and self.inner.checked == self.stop_at:
            self.inner.stop = Stop("repetition", self.stop_at)
            return self.inner.stop
        return self.inner.on_attention(attn_last)


@pytest.mark.parametrize("index", range(len(CLIPS)))
def test_the_search_keeps_the_model_s_log_probabilities_of_its_choice(model, heard, index) -> None:
    """The chosen hypothesis forced through fresh beams (all rows the same, no reorder) is predicted
    with the log-probabilities the search recorded: the reorders kept each hypothesis' cache."""
    encoding, input_s = heard[index]
    validator = _Forced(NativeValidator(input_s, model.vocab))
    result = decode_beam(model, encoding, _prompt(model), (), validator)
    assert result is not None and result.stop_reason == "eot" and result.eot_logprob is not None
    tokens = list(result.tokens)
    assert len(tokens) > 3 and len(result.logprobs) == len(tokens) and result.attn_align.shape == (
        len(tokens), encoding.n_frames)
    # the validator read it as a greedy decode: a prediction, then its attention, token by token; EOT last
    assert validator.read == ["token", "attention"] * len(tokens) + ["eot"]
    prompt = _prompt(model)
    runner = model.decoder(encoding)
    head = model.chunk_plan(encoding.bucket, prefixed=False)[0][1]
    runner.run(0, head, prompt[0], np.array(prompt[1:] + [-1] * (head - len(prompt)), np.int64))
    runner.rewind(len(prompt) - 1)
    beams = runner.beams(len(prompt) - 1)
    consumed = prompt[-1]
    for i, token in enumerate([*tokens, model.vocab.eot]):
        out = beams.step(np.full(beams.size, consumed, np.int64))
        lse = float(out.logsumexp[0])
        if token == model.vocab.eot:
            assert abs(float(out.eot_logit[0]) - lse - result.eot_logprob) < 1e-3
            break
        assert i == 0 or np.abs(out.attn_align[0] - result.attn_align[i - 1]).max() < 1e-5
        chosen = [int(t) for t in out.top_tokens[0]]
        assert token in chosen  # the search takes each hypothesis' B best tokens
        assert abs(float(out.top_logits[0, chosen.index(token)]) - lse - result.logprobs[i]) < 1e-3
        consumed = token


def test_the_round_s_validator_still_stops_the_chosen_hypothesis(model, heard) -> None:
    encoding, input_s = heard[1]
    full = decode_beam(model, encoding, _prompt(model), (), NativeValidator(input_s, model.vocab))
    stopped = decode_beam(model, encoding, _prompt(model), (), _Forced(NativeValidator(input_s, model.vocab), 4))
    assert stopped.stop_reason == "repetition" and stopped.stop.index == 4
    assert stopped.tokens == full.tokens[:4] and stopped.candidates == full.tokens[:4]
    assert stopped.eot_logprob is None and np.array_equal(stopped.attn_align, full.attn_align[:4])


def test_real_speech_by_beam_search(model, heard) -> None:
    """The clips that greedy tiny.en transcribes word for word, the search does too."""
    for clip, (encoding, input_s) in zip(CLIPS, heard, strict=True):
        greedy = decode_round(model, encoding, _prompt(model), (), NativeValidator(input_s, model.vocab))
        searched = decode_beam(model, encoding, _prompt(model), (), NativeValidator(input_s, model.vocab))
        words = [normalize_word(w.encode()) for w in model.vocab.decode(searched.tokens).split()]
        reference = [normalize_word(w.encode()) for w in clip["text"].split()]
        if [normalize_word(w.encode()) for w in model.vocab.decode(greedy.tokens).split()] == reference:
            assert words == reference, clip["id"]
        assert searched.stop_reason == "eot" and searched.avg_logprob > -1.0


def test_a_model_without_a_beam_step_is_left_to_the_greedy_decode(model, heard, real_tiny_en_pack) -> None:
    """A pack built without the beam step (and a model that cannot search at all: the scripted
    oracle, a replay) is answered None before a decoder is made, so the greedy decode's requests are
    the round's only ones; a stream over such a pack closes its utterances greedily."""
    from captioner.engine import OnnxAcousticModel, Runtime

    class Greedy:
        """A model without ``beam_width``: counts the decoders asked of it."""

        def __init__(self, inner) -> None:
            self.inner, self.decoders = inner, 0

        def __getattr__(self, name):
            if name == "beam_width":
                raise AttributeError(name)
            return getattr(self.inner, name)

        def decoder(self, encoding):
            self.decoders += 1
            return self.inner.decoder(encoding)

    encoding, input_s = heard[0]
    greedy = Greedy(model)
    assert decode_beam(greedy, encoding, _prompt(model), (), NativeValidator(input_s, model.vocab)) is None
    assert greedy.decoders == 0
    pack = real_tiny_en_pack  # the default build
    assert pack.beam(10) is None and "decoder_s220_b5.onnx" not in {p.name for p in pack.graph_files()}
    plain = OnnxAcousticModel(pack, Runtime(pack, "cpu"))
    assert plain.beam_width(10) == 0
    assert decode_beam(plain, plain.encode(np.zeros(10 * 16000, np.float32)), _prompt(model), (),
                       NativeValidator(10.0, model.vocab)) is None


def _clips_apart(n: int) -> np.ndarray:
    """The first ``n`` speech clips, each followed by 2 s of silence."""
    from speech_clips import DATA

    from captioner.audio import load_audio_file

    pause = np.zeros(2 * 16000, np.float32)
    return np.concatenate([x for clip in CLIPS[:n] for x in (load_audio_file(DATA / clip["audio"]), pause)])


def _streamed(model, audio: np.ndarray, **config) -> list[bytes]:
    """The normalised words a 2 s-step stream shows at its end for ``audio`` fed 2 s at a time; a later
    clip's closing input is its own (deviation 52 off: the doctored searches count words from it)."""
    from captioner.core import apply_update
    from captioner.engine.stream import Stream, StreamConfig

    config.setdefault("closing_before_s", 0.0)
    stream = Stream(model, StreamConfig(step_s=2.0, language="en", **config))
    shown: list = []
    for i in range(0, audio.size, 32000):
        stream.feed(audio[i:i + 32000])
        while (update := stream.step()) is not None:
            apply_update(shown, update)
    apply_update(shown, stream.finish())
    return [normalize_word(w.text.encode()) for w in shown]


def test_a_stream_searches_in_the_closing_rounds_of_its_later_utterances(model, monkeypatch) -> None:
    """``closing_beam`` on real speech: three clips 2 s apart at a 2 s step; the first utterance is
    the whole-recording decode (greedy, deviation 27), every later closing round searches (and the
    greedy stream's none), and the words are the reference's where the greedy stream's are; under a
    ``closing_beam_rate`` that the first search spends, fewer closing rounds search (but one does)."""

    from captioner.engine.onnx_model import OnnxChunkRunner

    searched: list[int] = []
    beams = OnnxChunkRunner.beams

    def counted(runner, consumed):
        searched.append(consumed)
        return beams(runner, consumed)

    monkeypatch.setattr(OnnxChunkRunner, "beams", counted)
    audio = _clips_apart(3)

    greedy = _streamed(model, audio)
    assert searched == []
    found = _streamed(model, audio, closing_beam=True)
    assert len(searched) >= 2  # the second and the third clip's closing rounds (and their retries)
    reference = [normalize_word(w.encode()) for clip in CLIPS[:3] for w in clip["text"].split()]
    two = sum(len(clip["text"].split()) for clip in CLIPS[:2])  # tiny.en hears the third's name wrong either way
    assert greedy[:two] == found[:two] == reference[:two]
    assert found[two:][-4:] == reference[-4:] and abs(len(found) - len(reference)) <= 2
    every = len(searched)
    searched.clear()
    _streamed(model, audio, closing_beam=True, closing_beam_rate=0.5)  # a budget the first search spends
    assert 1 <= len(searched) < every


@pytest.mark.parametrize(("chosen", "skipped"), [
    ("the cat sat on the mat", 0),
    ("the dog sat on a mat", 0),  # words changed one for one: substitutions
    ("the cat sat on the mat today", 0),  # a word added
    ("the cat mat", 3),  # "sat on the" left out
    ("the cat sat", 3),  # ended three words early
    ("the cat sat on", 2),
    ("a mat", 4),  # "the cat sat on the" read as "a": five words as one
])
def test_skipped_words_is_the_longest_run_of_the_greedy_reading_left_out(chosen, skipped) -> None:
    reference = [b"the", b"cat", b"sat", b"on", b"the", b"mat"]
    assert skipped_words([w.encode() for w in chosen.split()], reference) == skipped


def test_a_reading_that_ends_early_skips_nothing_when_its_end_is_not_counted() -> None:
    """``trailing=False``: the words after where a reading ends (a guard's stop, whose rest is
    decoded again) are not counted; a run left out before that end is."""
    drafts = [b"the", b"cat", b"sat", b"on", b"the", b"mat", b"all", b"day"]
    assert skipped_words([b"the", b"cat", b"sat"], drafts) == 5
    assert skipped_words([b"the", b"cat", b"sat"], drafts, trailing=False) == 0
    assert skipped_words([b"the", b"mat", b"all"], drafts, trailing=False) == 4


def _doctored_search(model, monkeypatch, first_word: int, n_words: int, new: tuple[int, ...] = (),
                     logprob: float | None = None) -> list[tuple[int, ...]]:
    """The stream's searches return the real search's result with its words ``first_word`` …
    ``first_word + n_words − 1`` replaced by the tokens ``new`` (each with log-probability
    ``logprob``, the attention of the first word left out); the replaced tokens of each doctored
    search are appended to the returned list."""
    from dataclasses import replace

    from captioner.engine import stream as stream_module
    from captioner.engine.align import split_words

    real = stream_module.decode_beam
    doctored: list[tuple[int, ...]] = []

    def search(*args, **kwargs):
        result = real(*args, **kwargs)
        if result is None:
            return None
        words = split_words(result.candidates, model.vocab)
        if len(words) < first_word + n_words + 1:
            return result
        first, end = words[first_word][0], words[first_word + n_words][0]
        doctored.append(result.tokens[first:end])
        tokens = result.tokens[:first] + new + result.tokens[end:]
        attn = np.concatenate([result.attn_align[:first], result.attn_align[first:first + len(new)],
                               result.attn_align[end:]])
        moved = len(new) - (end - first)
        stop = None if result.stop is None else replace(result.stop, index=max(0, result.stop.index + moved))
        logprobs = result.logprobs[:first] + (logprob,) * len(new) + result.logprobs[end:] if result.logprobs else ()
        return replace(result, tokens=tokens, attn_align=attn, stop=stop, logprobs=logprobs)

    monkeypatch.setattr(stream_module, "decode_beam", search)
    return doctored


def test_a_search_that_skips_live_words_gives_way_to_the_greedy_reading(model, monkeypatch) -> None:
    """A closing search that leaves out ``SKIP_WORDS`` consecutive words of the live drafts is read
    greedily too, and the greedy reading is kept (``closing_beam_skips``); without the rule the
    skipped words are lost. The real search's result on real speech, with a run of words cut out of
    it, stands for a search that jumped over a sentence."""
    cut = _doctored_search(model, monkeypatch, 1, SKIP_WORDS)
    audio = _clips_apart(2)

    greedy = _streamed(model, audio)
    assert cut == []
    kept = _streamed(model, audio, closing_beam=True)
    assert cut  # the second clip's closing round searched and its search skipped words
    lost = _streamed(model, audio, closing_beam=True, closing_beam_skips=False)
    reference = [normalize_word(w.encode()) for clip in CLIPS[:2] for w in clip["text"].split()]
    assert greedy == reference == kept
    assert len(lost) <= len(reference) - SKIP_WORDS


def test_with_the_greedy_rival_the_likelier_reading_is_kept(model, monkeypatch) -> None:
    """``closing_beam_rival``: a search whose reading is less likely per token than the greedy
    reading (one word changed to a token the model gives −8) gives way to it; without the rival the
    changed word stands (a substitution is not a skip)."""
    banana = model.vocab.token_bytes.index(b" banana")
    changed = _doctored_search(model, monkeypatch, 1, 1, (banana,), -8.0)
    audio = _clips_apart(2)
    reference = [normalize_word(w.encode()) for clip in CLIPS[:2] for w in clip["text"].split()]
    assert _streamed(model, audio, closing_beam=True, closing_beam_rival=True) == reference
    assert changed
    stands = _streamed(model, audio, closing_beam=True)
    assert b"banana" in stands and len(stands) == len(reference)


def test_with_a_floor_only_speech_whisper_is_sure_of_is_searched(model, monkeypatch) -> None:
    """``closing_beam_floor``: a closing input is read greedily first and searched only where that
    reading's average log-probability reaches the floor. Above every reading (0) nothing is searched
    and the stream is greedy's; below every reading (−10) the search runs and its reading stands (one
    word changed to " banana": a substitution, which neither guard reads as skipped speech)."""
    banana = model.vocab.token_bytes.index(b" banana")
    changed = _doctored_search(model, monkeypatch, 1, 1, (banana,), -8.0)
    audio = _clips_apart(2)
    greedy = _streamed(model, audio)
    assert _streamed(model, audio, closing_beam=True, closing_beam_floor=0.0) == greedy
    assert changed == []  # no search ran
    searched = _streamed(model, audio, closing_beam=True, closing_beam_floor=-10.0)
    assert changed and b"banana" in searched and len(searched) == len(greedy)


def test_a_search_that_reads_fewer_words_than_the_greedy_reading_gives_way_to_it(model, monkeypatch) -> None:
    """``closing_beam_skips``: a search that reads ``FEWER_WORDS`` words fewer than the greedy
    reading of the same input (here two words cut out, a run too short for ``SKIP_WORDS``: a repeat
    or a filler that the search found less likely) gives way to the greedy reading (the floor reads
    every input greedily first); without the guard the words are lost."""
    assert FEWER_WORDS < SKIP_WORDS
    cut = _doctored_search(model, monkeypatch, 1, FEWER_WORDS)
    audio = _clips_apart(2)
    reference = [normalize_word(w.encode()) for clip in CLIPS[:2] for w in clip["text"].split()]
    assert _streamed(model, audio, closing_beam=True, closing_beam_floor=-10.0) == reference
    assert cut
    lost = _streamed(model, audio, closing_beam=True, closing_beam_floor=-10.0, closing_beam_skips=False)
    assert len(lost) == len(reference) - FEWER_WORDS


@pytest.mark.parametrize(("words", "block"), [
    ("give me a kiss come on give me a kiss", 0),  # twice is speech
    ("why do you meet this why do you meet this why do you meet this you can", 5),
    ("words words words", 1),
    ("no no", 0),
    ("a b a b a b a b", 2),
    ("", 0),
])
def test_repeated_block_is_the_longest_block_said_three_times_in_a_row(words, block) -> None:
    assert repeated_block([w.encode() for w in words.split()]) == block


def test_a_search_that_repeats_a_block_the_greedy_reading_does_not_gives_way_to_it(model, monkeypatch) -> None:
    """``closing_beam_skips``: a search that says a block three times in a row where the greedy
    reading of the same input does not (here a word replaced by " banana" three times: no word of the
    greedy reading is left out, so neither skip test sees it) gives way to the greedy reading; without
    the guard the copies stand (thirty-seventh round: a searched decode of spontaneous speech read a
    phrase three times over words it did not hear)."""
    banana = model.vocab.token_bytes.index(b" banana")
    looped = _doctored_search(model, monkeypatch, 1, 1, (banana,) * 3, -1.0)
    audio = _clips_apart(2)
    reference = [normalize_word(w.encode()) for clip in CLIPS[:2] for w in clip["text"].split()]
    assert _streamed(model, audio, closing_beam=True) == reference
    assert looped
    stands = _streamed(model, audio, closing_beam=True, closing_beam_skips=False)
    assert stands.count(b"banana") == 3 and len(stands) == len(reference) + 2
