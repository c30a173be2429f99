"""Token classes, decoding and prompts of :mod:`captioner.engine.tokens` (NPUSPER.md §4.1, §4.4, §6)."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from captioner.engine.tokens import Vocabulary, normalize_word
from captioner.errors import CaptionerError
from captioner.models.pack import SpecialTokens

TEXTS = [
    b"",  # 0 empty -> punctuation
    b" ",  # 1 a lone space -> punctuation
    b".",  # 2
    b" ,",  # 3 space + 1 byte
    b"?!",  # 4 two bytes, no alnum
    b"...",  # 5 three bytes: NOT punctuation (byte length)
    b"\xe2\x80\x94",  # 6 em dash, 3 bytes: not punctuation, but garbage
    b" the",  # 7 content, word start
    b"ing",  # 8 subword
    b"12",  # 9 digit-only continuation: not a subword, content
    b" a",  # 10 space + 1 alnum byte: content
    b"\xc3",  # 11 first byte of "é": 1 byte without ASCII alnum -> punctuation, as in the reference
    b"\xa9",  # 12 second byte of "é": likewise
    b"a1",  # 13 two bytes with alnum: subword (has a letter)
    b" 7",  # 14 word start, digit
]


def make(multilingual: bool = True) -> Vocabulary:
    texts = [*TEXTS, b"<|endoftext|>", b"<|startoftranscript|>", b"<|en|>", b"<|de|>", b"<|translate|>",
             b"<|transcribe|>", b"<|notimestamps|>", b"<|0.00|>"]
    eot = len(TEXTS)
    special = SpecialTokens(
        eot=eot, sot=eot + 1,
        transcribe=eot + 5 if multilingual else None, translate=eot + 4 if multilingual else None,
        notimestamps=eot + 6, first_timestamp=eot + 7, startofprev=None, nospeech=None,
        languages={"en": eot + 2, "de": eot + 3} if multilingual else {},
    )
    return Vocabulary(texts, special)


def test_punctuation_is_by_byte_length_and_ascii_alnum():
    v = make()
    punct = {i for i in range(len(TEXTS)) if v.punctuation[i]}
    assert punct == {0, 1, 2, 3, 4, 11, 12}
    assert not v.punctuation[5] and not v.punctuation[6]


def test_subword_needs_no_leading_space_and_a_letter():
    v = make()
    assert {i for i in range(len(TEXTS)) if v.subword[i]} == {8, 13}
    assert not v.subword[9]  # digits only


def test_special_content_word_start_and_garbage():
    v = make()
    eot = v.eot
    assert v.is_special(eot) and v.is_special(eot + 7) and not v.is_special(eot - 1)
    assert not v.content[eot] and not v.punctuation[eot + 3] and not v.subword[eot + 3]
    assert [i for i in range(len(TEXTS)) if v.is_content(i)] == [5, 6, 7, 9, 10, 14]
    assert [i for i in range(len(TEXTS)) if v.starts_word(i)] == [1, 3, 7, 10, 14]
    # garbage runner-up (§4.4): special, or no ASCII alphanumeric byte at all
    assert [i for i in range(len(TEXTS)) if v.is_garbage(i)] == [0, 1, 2, 3, 4, 5, 6, 11, 12]
    assert v.is_garbage(eot) and v.is_garbage(eot + 5)


def test_decode_joins_bytes_before_utf8():
    v = make()
    assert v.decode([7, 10, 11, 12]) == " the aé"
    assert v.decode([11]) == "\ufffd"  # incomplete sequence -> replacement, never an exception
    assert normalize_word(b" The,") == b"the"
    assert normalize_word(b" Caf\xc3\xa9!") == b"caf\xc3\xa9"  # bytes >= 0x80 kept (ggml)


def test_prompt_multilingual_language_and_task():
    v = make()
    eot = v.eot
    assert v.prompt() == (eot + 1, eot + 2, eot + 5, eot + 6)
    assert v.prompt("de", "translate") == (eot + 1, eot + 3, eot + 4, eot + 6)
    assert v.prompt("auto") == v.prompt("en")  # no detection pass yet: auto means English
    with pytest.raises(CaptionerError, match="unknown language 'xx'; choose one of: auto, de, en"):
        v.prompt("xx")
    with pytest.raises(CaptionerError, match="unknown task"):
        v.prompt("en", "summarise")


def test_prompt_english_only():
    v = make(multilingual=False)
    assert v.prompt() == (v.eot + 1, v.eot + 6)
    assert v.languages() == ("en",)
    with pytest.raises(CaptionerError, match="English-only"):
        v.prompt("de")
    with pytest.raises(CaptionerError, match="cannot translate"):
        v.prompt("en", "translate")


def test_from_pack_uses_the_packs_tables():
    v0 = make()
    pack = SimpleNamespace(token_bytes=v0.token_bytes, special=v0.special, multilingual=False)
    v = Vocabulary.from_pack(pack)
    assert v.token_bytes == v0.token_bytes and not v.multilingual and len(v) == len(v0)


def test_eot_outside_vocabulary_is_an_error():
    with pytest.raises(CaptionerError, match="outside the vocabulary"):
        Vocabulary([b"a"], SpecialTokens(5, 6, None, None, 7, 8, None, None))
