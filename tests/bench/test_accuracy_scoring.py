"""The accuracy bench's scoring maths on hand-made strings: WER/CER counts after Whisper's
normalisers, stutter detection, word matching and latency, and the offline decoder's EOT rule."""

from __future__ import annotations

import math
import sys

import pytest

from captioner.bench.accuracy import OfflineValidator, changed_words, load_manifest
from captioner.bench.scoring import (
    Counts,
    TimedWord,
    find_stutters,
    latency_stats,
    leading_words,
    match_words,
    scorer,
    summary,
)
from captioner.engine.tokens import normalize_word
from captioner.errors import CaptionerError


def _w(text: str) -> list[str]:
    return text.split()


@pytest.fixture(scope="module")
def sc():
    return scorer()


def test_english_normaliser_forgives_case_punctuation_spelling_and_numbers(sc) -> None:
    counts = sc.word_counts("MISTER SMITH SAID TWENTY ONE COLOUR", "Mr. Smith said twenty-one, color!")
    assert counts == Counts(0, 0, 0, 5)  # "twenty one" is one word, "21", on both sides
    assert counts.rate == 0.0


def test_word_counts_split_substitutions_insertions_deletions(sc) -> None:
    assert sc.word_counts("a b c d", "a x c d e") == Counts(substitutions=1, insertions=1, ref=4)
    assert sc.word_counts("a b c d", "a c") == Counts(deletions=2, ref=4)
    assert sc.word_counts("a b", "") == Counts(deletions=2, ref=2)
    empty_ref = sc.word_counts("", "thank you")
    assert empty_ref == Counts(insertions=2) and empty_ref.rate is None


def test_corpus_rate_is_total_errors_over_total_words(sc) -> None:
    total = sc.word_counts("a b c d", "a x c d") + sc.word_counts("e f", "")  # 1 of 4, 2 of 2
    assert (total.errors, total.ref) == (3, 6)
    assert total.rate == pytest.approx(0.5)  # not the mean of item rates (0.625)


def test_other_languages_use_the_basic_normaliser_and_zh_counts_characters(sc) -> None:
    assert sc.word_counts("Grüße aus München", "grüße, aus MÜNCHEN!", "de") == Counts(ref=3)
    assert sc.normalise("你好，世界", "zh") == ["你", "好", "世", "界"]
    assert sc.word_counts("你好世界", "你好世", "zh") == Counts(deletions=1, ref=4)
    assert sc.char_counts("你好世界", "你好世", "zh") == Counts(deletions=1, ref=4)


def test_char_counts_keep_word_boundaries(sc) -> None:
    # "a bc" vs "ab c": 7 reference characters of "a bc d" incl. spaces; the space moves: 2 edits
    assert sc.char_counts("a bc d", "ab c d").errors == 2
    assert sc.char_counts("a bc d", "ab c d").ref == 6


def test_stutter_found_once_as_its_shortest_ngram() -> None:
    hyp = _w("behind the curtain on the left on the left on the left on the left")
    found = find_stutters(hyp, _w("behind the curtain on the left"))
    assert [(s.ngram, s.repeats, s.index) for s in found] == [("on the left", 4, 3)]
    found = find_stutters(_w("he could wait no longer no longer no longer"), _w("he could wait no longer"))
    assert [(s.ngram, s.repeats) for s in found] == [("no longer", 3)]
    found = find_stutters(_w("gospel gospel gospel gospel gospel gospel"), ["gospel"])
    assert [(s.ngram, s.repeats) for s in found] == [("gospel", 6)]  # not also 2-gram ×3


def test_no_stutter_below_three_or_when_the_reference_repeats_too() -> None:
    assert find_stutters(_w("no no said he no no"), []) == []
    assert find_stutters(_w("a b a b"), []) == []
    assert find_stutters(_w("no no no"), _w("he said no no no")) == []
    assert len(find_stutters(_w("no no no"), _w("he said no no"))) == 1
    five = "a b c d e " * 3
    assert find_stutters(_w(five), []) == []  # a 5-gram is beyond n ≤ 4


def test_match_words_pairs_through_normalisation_and_skips_insertions(sc) -> None:
    ref = [TimedWord("Mister", 0.5, 0.9), TimedWord("Smith", 1.0, 1.4), TimedWord("left.", 1.5, 2.0)]
    hyp = [TimedWord("Mr.", 0.5, 0.9), TimedWord("uh", 0.9, 1.0), TimedWord("Smith,", 1.0, 1.4),
           TimedWord("left", 1.6, 2.1)]
    assert match_words(hyp, ref, sc) == [(0, 0), (2, 1), (3, 2)]


def test_latency_and_start_error_against_the_matched_reference_word(sc) -> None:
    ref = [TimedWord("he", 1.0, 1.2), TimedWord("could", 1.2, 1.5), TimedWord("wait", 1.5, 1.9)]
    hyp = [TimedWord("um", 0.0, 0.4, emitted=2.1),  # in leading silence, unmatched
           TimedWord("He", 1.1, 1.2, emitted=2.1),
           TimedWord("could", 1.2, 1.6, emitted=2.1),
           TimedWord("wait.", 1.4, 1.9, emitted=4.2)]
    out = latency_stats(hyp, ref, sc)
    assert out["matched"] == 3
    assert out["latency_s"] == pytest.approx([2.1 - 1.2, 2.1 - 1.5, 4.2 - 1.9])
    assert out["latency_words"] == [1, 2, 3]  # which word of hyp each latency is ("um" has none)
    assert out["start_error_s"] == pytest.approx([0.1, 0.0, 0.1])
    assert latency_stats(hyp, [], sc) == {"latency_s": [], "latency_words": [], "start_error_s": [], "matched": 0}
    assert leading_words(hyp, onset_s=0.95) == 1 and leading_words(hyp, onset_s=1.25) == 2  # "He" at 1.1 too
    assert leading_words(hyp, onset_s=0.05) == 0


def test_summary_median_mean_nearest_rank_p90() -> None:
    s = summary([float(x) for x in range(1, 11)])
    assert (s["median"], s["mean"], s["p90"], s["n"]) == (5.5, 5.5, 9.0, 10)
    assert summary([])["median"] is None


def test_missing_scoring_packages_give_a_clear_error(monkeypatch) -> None:
    monkeypatch.setitem(sys.modules, "jiwer", None)  # import jiwer -> ImportError
    with pytest.raises(CaptionerError, match="install the dev extra"):
        scorer()


def test_offline_validator_stops_at_the_first_winning_eot() -> None:
    v = OfflineValidator()
    assert v.on_prediction(11, 5.0, 1.0) is None
    v.on_attention(None)
    stop = v.on_prediction(12, 1.0, 2.0)  # EOT wins at once: no minimum length
    assert stop is not None and stop.reason == "eot" and stop.index == 1
    assert v.decoded == [11] and v.on_prediction(13, 9.0, 0.0) is stop


def test_manifest_filters_limits_and_reports_bad_lines(tmp_path) -> None:
    lines = [
        '{"id": "a", "audio": "a.flac", "text": "A", "language": "en", "kind": "k1", "seconds": 1.5}',
        '{"id": "b", "audio": "b.flac", "text": "B", "language": "en", "kind": "k1"}',
        '{"id": "c", "audio": "sub/c.flac", "text": "C", "language": "de", "kind": "k2"}',
    ]
    path = tmp_path / "m.jsonl"
    path.write_text("\n".join(lines) + "\n\n", encoding="utf-8")
    items = load_manifest(path)
    assert [i.id for i in items] == ["a", "b", "c"] and items[2].audio == tmp_path / "sub" / "c.flac"
    assert items[0].seconds == 1.5 and math.isclose(items[1].seconds, 0.0)
    assert [i.id for i in load_manifest(path, limit=1)] == ["a", "c"]
    assert [i.id for i in load_manifest(path, kinds=["k2"])] == ["c"]
    with pytest.raises(CaptionerError, match="no items of kind nope"):
        load_manifest(path, kinds=["nope"])
    path.write_text(lines[0] + '\n{"id": "x", "audio": "x"}\n', encoding="utf-8")
    with pytest.raises(CaptionerError, match=r"m.jsonl:2: missing field\(s\) text, language, kind"):
        load_manifest(path)
    path.write_text("{not json\n", encoding="utf-8")
    with pytest.raises(CaptionerError, match=r"m\.jsonl:1: not JSON"):
        load_manifest(path)
    with pytest.raises(CaptionerError, match="cannot read the manifest"):
        load_manifest(tmp_path / "missing.jsonl")


def test_changed_words_count_the_shown_words_that_do_not_come_back() -> None:
    """Caption flicker: a taken-back word shown again the same (after normalisation) is not counted,
    one word put in or taken out does not count the words after it, and a word taken back for good is."""
    def norm(text: str) -> list[bytes]:
        return [normalize_word(w.encode()) for w in text.split()]

    assert changed_words(norm("the cat sat"), norm("The cat, sat.")) == 0
    assert changed_words(norm("the cat sat"), norm("the cats sat down")) == 1
    assert changed_words(norm("a strange change"), norm("'tis a strange change")) == 0
    assert changed_words(norm("however the"), norm("when however the night")) == 0
    assert changed_words(norm("will be over for greater"), norm("will be over forever")) == 2
    assert changed_words(norm("no no no"), []) == 3
    assert changed_words([], norm("new words")) == 0


def test_latency_is_split_by_the_update_that_first_showed_each_word() -> None:
    """The 2 s latency p90 of the development corpus (2.64 s) was mostly words that a recording's last
    update first showed (finish()'s closing decode): the summary and the report say so apart."""
    from captioner.bench.accuracy import summarise
    from captioner.bench.accuracy_report import _fw_latency_lines

    def item(shown: list[float], latencies: list[float], words: list[int]) -> dict:
        row = {"wer": {"substitutions": 0, "deletions": 0, "insertions": 0, "ref": 3, "errors": 0},
               "cer": {"substitutions": 0, "deletions": 0, "insertions": 0, "ref": 9, "errors": 0},
               "stutters": [], "compute_s": 0.1, "info": {},
               "timed_words": [[f"w{i}", i, i + 0.5, t] for i, t in enumerate(shown)],
               "latency_fw_s": latencies, "latency_fw_words": words}
        return {"language": "en", "kind": "other", "seconds": 3.0, "half": "tune", "modes": {"live_2s": row}}

    items = [item([2.1, 2.1, 3.9], [1.0, 0.6, 1.9], [0, 1, 2]),  # the third word: the last update
             item([2.2, float("nan"), 4.0, 4.0], [1.2, 2.5, 3.0], [0, 2, 3])]  # a word never shown, two last
    summ = summarise(items, ["live_2s"])["english"]["live_2s"]
    assert summ["latency_fw_s"]["n"] == 6
    assert summ["latency_fw_last_update_s"]["n"] == 3 and summ["latency_fw_last_update_s"]["median"] == 2.5
    assert summ["latency_fw_before_s"]["n"] == 3 and summ["latency_fw_before_s"]["median"] == 1.0
    text = "\n".join(_fw_latency_lines({"english": {"live_2s": summ}}, ["live_2s"]))
    assert "last update" in text and "live_2s: 2.50 / 3.00 s (3 words) and 1.00 / 1.20 s (3)" in text
