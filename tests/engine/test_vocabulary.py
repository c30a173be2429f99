"""The user's vocabulary (issue 27): the list, Whisper's tokens for it, the cut to a round's room,
and the real tiny.en told about a name it otherwise misspells, which never shows the context."""

from __future__ import annotations

import logging
from pathlib import Path

import numpy as np
import pytest
from tokenizers import Tokenizer

from captioner.audio import load_audio_file
from captioner.engine import StreamConfig, Transcriber
from captioner.engine.decoder import NativeValidator, decode_round
from captioner.engine.model import SAMPLES_PER_FRAME
from captioner.engine.tokens import Vocabulary
from captioner.engine.validate import RoundValidator
from captioner.engine.vocabulary import (
    VocabularyPrompt,
    encode_text,
    parse_vocabulary,
    read_vocabulary,
    speech_frames,
)
from captioner.errors import CaptionerError

SPEECH = Path(__file__).resolve().parents[1] / "data" / "speech"
HESTER = SPEECH / "1221-135766-0002.wav"  # "Yet these thoughts affected Hester Prynne less with hope than apprehension."


def test_the_list_is_split_on_commas_semicolons_and_lines_trimmed_and_kept_once():
    text = " Schoeffer,Gutenberg ;\n\n missal  type, gutenberg,,\r\nNPUsper "
    assert parse_vocabulary(text) == ("Schoeffer", "Gutenberg", "missal type", "NPUsper")
    assert parse_vocabulary("") == () and parse_vocabulary(" , \n") == ()
    with pytest.raises(CaptionerError, match="too long"):
        parse_vocabulary("x" * 61)
    with pytest.raises(CaptionerError, match="at most 200"):
        parse_vocabulary(",".join(f"w{i}" for i in range(201)))


def test_a_vocabulary_file_has_comment_lines(tmp_path: Path):
    path = tmp_path / "words.txt"
    path.write_text("# people\nAda Lovelace\nGrace Hopper, ENIAC\n", encoding="utf-8")
    assert read_vocabulary(path) == ("Ada Lovelace", "Grace Hopper", "ENIAC")
    with pytest.raises(CaptionerError, match="cannot read the vocabulary file"):
        read_vocabulary(tmp_path / "missing.txt")


def test_tokens_are_whisper_tokenizers(real_tiny_en_pack, real_tiny_en_dir: Path):
    vocab = Vocabulary.from_pack(real_tiny_en_pack)
    reference = Tokenizer.from_file(str(real_tiny_en_dir / "tokenizer.json"))
    for text in (" Schoeffer, Gutenberg, Strassburg, missal, Sweynheim and Pannartz.",
                 " ONNX, QNN; Snapdragon X Elite's NPU_v2!! 1234 café Zürich", "  two  spaces\nand a line",
                 " Łódź, Москва, 東京"):
        ids = encode_text(text, vocab)
        assert ids == reference.encode(text, add_special_tokens=False).ids, text
        assert vocab.decode(ids) == text


def test_the_context_is_startofprev_and_whole_entries_cut_to_the_room(real_tiny_en_pack, caplog):
    vocab = Vocabulary.from_pack(real_tiny_en_pack)
    prompt = VocabularyPrompt(("Schoeffer", "Gutenberg", "missal"), vocab)
    pieces = [vocab.decode(p) for p in prompt.pieces]
    assert pieces == [" Schoeffer,", " Gutenberg,", " missal."]
    whole = prompt.tokens(prompt.size)
    assert whole[0] == vocab.special.startofprev and vocab.decode(whole[1:]) == " Schoeffer, Gutenberg, missal."
    assert len(whole) == prompt.size
    cut = prompt.tokens(prompt.size - 1)  # the last entry no longer fits: left out whole
    assert vocab.decode(cut[1:]) == " Schoeffer, Gutenberg,"
    assert prompt.tokens(len(prompt.pieces[0])) == ()  # not even the first entry and <|startofprev|>
    # a round's room: the plan's positions - prompt and prefix - 5 tokens/s of input - the end of text
    assert prompt.for_round(30, 2, 2.0) == prompt.tokens(30 - 2 - 11)
    assert prompt.for_round(30, 2, 6.0) == ()
    assert prompt.for_round(225, 4, 30.0) == whole
    assert VocabularyPrompt((), vocab).tokens(100) == () and VocabularyPrompt((), vocab).size == 0
    assert prompt.listed([b" gutenberg.", b" Gutenberg's", b"type"]) == [True, False, False]
    # a list longer than even the roomiest round (225 positions) takes is a warning naming what is never used
    with caplog.at_level(logging.WARNING, logger="captioner.engine.vocabulary"):
        prompt.check_room(225, 4)
        assert caplog.records == []
        prompt.check_room(prompt.size + 2 + 6 - 1, 2)  # room: positions - forced - 5 (1 s) - 1 = size - 1
    [warning] = [r.getMessage() for r in caplog.records]
    assert "the last 1 of 3 entries are never used: missal" in warning


def _clip(path: Path):
    audio = load_audio_file(path)
    return audio[: audio.size // SAMPLES_PER_FRAME * SAMPLES_PER_FRAME]


@pytest.fixture(scope="module")
def tiny_en(real_tiny_en_pack):
    engine = Transcriber.open(real_tiny_en_pack.root, "cpu")
    yield engine
    engine.close()


def test_the_context_is_forced_before_the_prompt_and_never_decoded(tiny_en):
    model, vocab = tiny_en.model, tiny_en.model.vocab
    encoding = model.encode(_clip(HESTER), native_30s=True)  # a 30 s bucket: a verifier batches the context
    prompt = vocab.prompt("en")
    context = VocabularyPrompt(("Hester Prynne", "apprehension"), vocab).tokens(50)
    plain = decode_round(model, encoding, prompt, (), RoundValidator(vocab, input_s=5.0, closing=True))
    told = decode_round(model, encoding, prompt, (), RoundValidator(vocab, input_s=5.0, closing=True),
                        context=context)
    for result in (plain, told):
        assert not set(result.tokens) & {vocab.special.startofprev, vocab.special.sot}
        assert result.attn_align.shape == (len(result.tokens), encoding.n_frames)
    assert "Prynne" not in vocab.decode(plain.candidates)
    assert "Hester Prynne less with hope" in vocab.decode(told.candidates)
    # its len(context) + 2 forced positions cost a few batched dispatches, not a step each
    assert told.chunks <= plain.chunks + -(-len(context) // 5)


def test_a_stream_told_a_name_spells_it_and_never_shows_the_list(tiny_en):
    audio = _clip(HESTER)
    plain, _ = tiny_en.transcribe(audio, StreamConfig(language="en"))
    told, _ = tiny_en.transcribe(audio, StreamConfig(language="en", vocabulary=("Prynne", "Zanzibar", "Quetzalcoatl")))
    plain_text, told_text = " ".join(w.text for w in plain), " ".join(w.text for w in told)
    assert "Prynne" not in plain_text, plain_text
    assert "Prynne" in told_text, told_text
    assert "Zanzibar" not in told_text and "Quetzalcoatl" not in told_text
    assert len(told) == len(plain)  # the same words, one spelled right


def test_a_listed_word_whose_attention_is_not_on_speech_stops_the_round_before_it(real_tiny_en_pack):
    vocab = Vocabulary.from_pack(real_tiny_en_pack)
    prompt = VocabularyPrompt(("Prynne",), vocab)
    said = encode_text(" Hester Prynne less", vocab)  # " Hester", " Pr", "yn", "ne", " less" (or so)
    speech = np.zeros(100, dtype=bool)
    speech[:40] = True  # speech in the first 0.8 s; the guard reaches 10 frames (0.2 s) beyond it

    def run(peak_of_name: int):
        guard = prompt.guard(NativeValidator(0.0), speech)
        stop = None
        for i, token in enumerate([*said, vocab.eot]):
            if i:  # the attention of the token consumed in this step (the previous one) comes first
                attn = np.zeros(100, np.float32)
                attn[5 * i if vocab.decode([said[i - 1]]).strip() not in "Prynne" else peak_of_name] = 1.0
                guard.on_attention(attn)
            stop = guard.on_prediction(token, 1.0, 2.0 if token == vocab.eot else 0.0)
            if stop is not None:
                break
        return stop, guard

    heard, _ = run(peak_of_name=45)  # within reach of speech
    assert heard is not None and heard.reason == "eot"
    unheard, guard = run(peak_of_name=70)  # on silence: read from the context, not heard
    name_start = len(encode_text(" Hester", vocab))
    assert unheard is not None and unheard.reason == "nonspeech" and unheard.index == name_start
    assert vocab.decode(guard.decoded[: unheard.index]) == " Hester"
    assert prompt.guard(NativeValidator(0.0), None).__class__ is NativeValidator  # no detector: no guard
    assert VocabularyPrompt((), vocab).guard(NativeValidator(0.0), speech).__class__ is NativeValidator


def test_speech_frames_follow_the_detectors_windows():
    probs = np.array([0.1, 0.9, 0.9, 0.2], np.float32)  # 32 ms windows from sample 0
    frames = speech_frames(probs, 0, 8 * SAMPLES_PER_FRAME, 0.5)  # 20 ms frames: 0, 320, 640, ...
    assert frames.tolist() == [False, False, True, True, True, False, False, False]


def test_a_list_whose_words_are_not_said_changes_nothing(tiny_en):
    """Rounds the context gives no listed word are decoded again without it: a list of names that
    are not said costs compute, never words (docs/VOCABULARY.md)."""
    audio = _clip(SPEECH / "LJ001-0011.wav")
    plain, _ = tiny_en.transcribe(audio, StreamConfig(language="en"))
    told, _ = tiny_en.transcribe(audio, StreamConfig(language="en", vocabulary=("Zanzibar", "Quetzalcoatl",
                                                                                 "Whittemore", "Apomorphine")))
    assert [(w.text, w.start, w.end) for w in told] == [(w.text, w.start, w.end) for w in plain]
    prompt = VocabularyPrompt(("Hester Prynne",), tiny_en.model.vocab)
    assert prompt.heard_in(encode_text(" affected Hester Prynne.", tiny_en.model.vocab))
    assert not prompt.heard_in(encode_text(" affected Hester's Prin", tiny_en.model.vocab))  # "hesters", "prin"
