"""Real speech in, the right words out: ``captioner transcribe`` with the real tiny.en on vendored clips.

Word error rate after Whisper's English text normaliser (``whisper_normalizer``), scored by ``jiwer``,
corpus-wide (total errors / total reference words) over the clips of ``tests/data/speech`` (three
LibriSpeech test-clean utterances and one LJ Speech sentence, 16.8 s, 48 reference words).

Two numbers, so a failure says which part broke:
- offline: the pack's own greedy decode of each clip padded to 30 s (what stock Whisper does, and
  token for token what CTranslate2 gives: tests/models/test_ct2.py). Measured 2/48 = 4.2 % ("Prynne"
  → "Prin", "in form" → "and form"); bound 10 %.
- live: the streaming engine through the CLI at the default 2 s step. Measured 8/48 = 16.7 % on
  2026-11-23 with the engine as committed at f96ad89 (invented trailing words such as "… no
  longer. I hate", "find informed" for "fine in form", "has to print" for "Hester Prynne"): the
  engine's known accuracy bugs (issue 17); with the engine at 606ab10 (closing rounds), 2/48 = 4.2 %,
  the offline result. The bound, :data:`LIVE_WER_BOUND`, is the first measurement with a margin,
  to be tightened as the engine settles.
"""

from __future__ import annotations

import json
from pathlib import Path

import jiwer
import pytest
from models.ct2_reference import clip_features, pack_greedy, prompt_of
from models.helpers import PackRunner
from whisper_normalizer.english import EnglishTextNormalizer

from captioner import cli
from captioner.storage.paths import AppPaths

SPEECH = Path(__file__).resolve().parents[1] / "data" / "speech"
ITEMS = [json.loads(line) for line in (SPEECH / "manifest.jsonl").read_text(encoding="utf-8").splitlines()]
OFFLINE_WER_BOUND = 0.10
LIVE_WER_BOUND = 0.10  # measured 0.167 at f96ad89 (before issue 17), 0.042 since 606ab10, as offline
CLIP_WER_BOUND = 0.25  # no single clip may be mostly wrong

normalise = EnglishTextNormalizer()


def _wer(refs: list[str], hyps: list[str]) -> float:
    return jiwer.wer([normalise(r) for r in refs], [normalise(h) for h in hyps])


@pytest.fixture(scope="module")
def live(real_tiny_en_pack, tmp_path_factory) -> list[str]:
    """What ``captioner transcribe`` prints for each clip (its --json words, joined)."""
    home = tmp_path_factory.mktemp("home")
    texts = []
    for item in ITEMS:
        out = home / f"{item['id']}.json"
        code = cli.run(["transcribe", str(SPEECH / item["audio"]), "--model", str(real_tiny_en_pack.root),
                        "--provider", "cpu", "--no-save", "--json", str(out)], AppPaths.default(home))
        assert code == 0, item["id"]
        texts.append(" ".join(w["text"] for w in json.loads(out.read_text(encoding="utf-8"))["words"]))
    return texts


def test_the_clips_are_the_vendored_real_speech() -> None:
    assert len(ITEMS) == 4 and all((SPEECH / it["audio"]).is_file() for it in ITEMS)
    assert sum(len(normalise(it["text"]).split()) for it in ITEMS) == 48
    assert any(it["kind"] == "librispeech-test-clean" for it in ITEMS)


def test_offline_decoding_of_the_pack_gets_the_words_right(real_tiny_en_pack) -> None:
    runner = PackRunner(real_tiny_en_pack)
    prompt = prompt_of(real_tiny_en_pack)
    hyps = []
    for item in ITEMS:
        tokens = pack_greedy(runner, clip_features(SPEECH / item["audio"]), prompt)
        hyps.append(b"".join(real_tiny_en_pack.token_bytes[t] for t in tokens).decode("utf-8"))
    wer = _wer([it["text"] for it in ITEMS], hyps)
    print(f"offline WER {wer:.3f}:", hyps)
    assert wer <= OFFLINE_WER_BOUND
    assert normalise(hyps[0]) == normalise(ITEMS[0]["text"])  # "He could wait no longer."


def test_live_transcription_is_within_the_stated_word_error_rate(live) -> None:
    refs = [it["text"] for it in ITEMS]
    per_clip = [_wer([r], [h]) for r, h in zip(refs, live, strict=True)]
    wer = _wer(refs, live)
    print(f"live WER {wer:.3f}; per clip", [f"{w:.2f}" for w in per_clip], live)
    assert wer <= LIVE_WER_BOUND
    assert max(per_clip) <= CLIP_WER_BOUND
    assert "could wait no longer" in normalise(live[1])  # the long test-clean clip's words, in order
