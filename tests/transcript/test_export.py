"""Exports: parsed back by independent readers (srt, webvtt-py, ffmpeg), escaping, atomic writes."""

from __future__ import annotations

import errno
import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest
import srt
import webvtt

from captioner.core import Word
from captioner.errors import StorageError
from captioner.storage import atomic as atomic_mod
from captioner.transcript.cues import CueOptions, build_cues, normalize_text
from captioner.transcript.export import (
    atomic_write_text,
    export_words,
    format_from_path,
    length_text,
    render_json,
    render_srt,
    render_txt,
    render_vtt,
    srt_time,
    vtt_time,
)

TRICKY = [
    Word("Hello", 0.0, 0.4),
    Word("a-->b", 0.5, 0.9),
    Word("<i>not", 1.0, 1.3),
    Word("italic</i>", 1.3, 1.6),
    Word("&", 1.6, 1.7),
    Word("two\nlines", 1.7, 2.0),
    Word("\n\n", 2.0, 2.1),
    Word("שלום", 2.2, 2.6),
    Word("עולם.", 2.6, 3.0),
    Word("مرحبا", 3.5, 3.9),
    Word("بالعالم", 3.9, 4.2),
    Word("😀👍🏽.", 4.2, 4.5),
    Word("00:00:09,000", 4.6, 4.9),
    Word("-->", 4.9, 5.0),
    Word("00:00:10,000.", 5.0, 5.3),
    Word("maybe", 5.4, 5.8, speculative=True),
]


def committed_text(words: list[Word]) -> list[str]:
    return [t for t in (normalize_text(w.text) for w in words if not w.speculative) if t]


def test_clock_formats() -> None:
    assert srt_time(0) == "00:00:00,000" and vtt_time(0) == "00:00:00.000"
    assert srt_time(36_000_000 + 61_001) == "10:01:01,001"
    assert vtt_time(3_600_000 * 123 + 5) == "123:00:00.005"


def test_srt_parses_and_keeps_the_text(tmp_path: Path) -> None:
    path = export_words(TRICKY, tmp_path / "out.srt")
    text = path.read_text(encoding="utf-8")
    assert not text.startswith("\ufeff")
    subs = list(srt.parse(text))
    cues = build_cues(TRICKY)
    assert len(subs) == len(cues) >= 2
    assert [s.index for s in subs] == list(range(1, len(subs) + 1))
    for sub, cue in zip(subs, cues, strict=True):
        assert round(sub.start.total_seconds() * 1000) == cue.start_ms
        assert round(sub.end.total_seconds() * 1000) == cue.end_ms
    joined = " ".join(s.content.replace("\n", " ") for s in subs)
    assert "a-->b" in joined and "<i>not italic</i>" in joined and "שלום עולם." in joined
    assert "مرحبا بالعالم" in joined and "😀👍🏽" in joined and "maybe" not in joined
    # a line that would look like a timing line loses its arrow, nothing else does
    assert "00:00:09,000 → 00:00:10,000." in joined
    assert joined.replace("→", "-->").split() == " ".join(committed_text(TRICKY)).split()


def test_vtt_parses_with_escapes_and_voices(tmp_path: Path) -> None:
    mic = [
        Word("is", 0.0, 0.3, source="mic"),
        Word("it", 0.3, 0.5, source="mic"),
        Word("a-->b?", 0.5, 0.9, source="mic"),
    ]
    words = mic + [Word(w.text, w.start + 1.0, w.end + 1.0) for w in TRICKY]
    path = export_words(words, tmp_path / "out.vtt")
    text = path.read_text(encoding="utf-8")
    assert text.startswith("WEBVTT\n\n")
    body = text.split("\n\n", 1)[1]
    assert "-->" not in "".join(
        line for line in body.splitlines() if "--> " not in line[:20]
    )  # only timing lines
    captions = webvtt.from_string(text)
    cues = build_cues(words)
    assert len(captions) == len(cues)
    assert [c.voice for c in captions] == [c.label for c in cues]
    assert captions[0].voice == "You" and "Others" in {c.voice for c in captions}
    for cap, cue in zip(captions, cues, strict=True):
        assert cap.start == vtt_time(cue.start_ms) and cap.end == vtt_time(cue.end_ms)
    raw = " ".join(c.raw_text for c in captions)
    assert (
        "a--&gt;b?" in raw and "&lt;i&gt;not" in raw and "&amp;" in raw and "שלום" in raw and "😀👍🏽" in raw
    )


@pytest.mark.skipif(shutil.which("ffmpeg") is None, reason="ffmpeg is not installed")
@pytest.mark.parametrize("fmt", ["srt", "vtt"])
def test_ffmpeg_converts_to_ass(tmp_path: Path, fmt: str) -> None:
    words = [
        Word(f"word{i}{'.' if i % 7 == 6 else ''}", i * 0.35, i * 0.35 + 0.3) for i in range(60)
    ] + TRICKY
    words = sorted(words, key=lambda w: w.start)
    src = export_words(words, tmp_path / f"out.{fmt}")
    out = tmp_path / "out.ass"
    result = subprocess.run(
        ["ffmpeg", "-nostdin", "-loglevel", "error", "-y", "-i", str(src), str(out)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 0, result.stderr
    dialogue = [line for line in out.read_text(encoding="utf-8").splitlines() if line.startswith("Dialogue:")]
    assert len(dialogue) == len(build_cues(words))
    assert any("שלום" in line for line in dialogue) and any("😀👍🏽" in line for line in dialogue)


def test_txt_paragraphs_labels_and_timestamps() -> None:
    words = [
        Word("Hello", 0.0, 0.4, source="mic"),
        Word("there.", 0.5, 0.9, source="mic"),
        Word("Hi!", 1.2, 1.5),
        Word("Later", 10.0, 10.5),
        Word("on.", 10.5, 11.0),
        Word("ignored", 11.0, 11.5, speculative=True),
    ]
    assert render_txt(words) == "You: Hello there.\n\nOthers: Hi!\n\nOthers: Later on.\n"
    assert render_txt(words, timestamps=True, labels={}) == (
        "[00:00:00] Hello there.\n\n[00:00:01] Hi!\n\n[00:00:10] Later on.\n"
    )
    assert render_txt([]) == ""


def test_txt_breaks_continuous_speech_into_paragraphs_at_sentences() -> None:
    """Seen in `captioner sessions show` of a LibriVox reading (A Tale of Two Cities, 124 s, pauses
    under 2 s): one paragraph of 329 words under one timestamp. Continuous speech now breaks after a
    sentence once a paragraph is 30 s long and the speaker pauses 0.5 s, or at the first sentence
    end after 45 s; never inside a sentence, nor after a title's full stop."""
    def sentence(start: float, text: str, pause: float = 0.0) -> list[Word]:
        tokens = text.split()
        words = [Word(t, start + 0.4 * i, start + 0.4 * i + 0.35) for i, t in enumerate(tokens)]
        return words if pause == 0.0 else [*words[:-1], Word(tokens[-1], words[-1].start, words[-1].end - pause)]

    def stamps(words: list[Word]) -> list[str]:
        return [p[:10] for p in render_txt(words, timestamps=True).strip().split("\n\n")]

    long = "this sentence has exactly ten words in it to read."  # 4 s
    breathing = [w for k in range(12) for w in sentence(4.0 * k, long, pause=0.6)]  # a 0.6 s breath after each
    assert stamps(breathing) == ["[00:00:00]", "[00:00:32]"]  # the first sentence end after 30 s
    running = [w for k in range(14) for w in sentence(4.0 * k, long)]  # no pause at all
    assert stamps(running) == ["[00:00:00]", "[00:00:48]"]  # the first sentence end after 45 s
    titled = [w for k in range(14) for w in sentence(4.0 * k, long.replace("read.", "Mrs."))]
    assert stamps(titled) == ["[00:00:00]"]  # "Mrs." ends no sentence
    text = render_txt(running)
    assert text.count("\n\n") == 1 and text.split("\n\n")[0].endswith("read.")


def test_json_has_the_transcribe_word_shape() -> None:
    doc = json.loads(render_json(TRICKY, {"id": 3}))
    assert doc["version"] == 1 and doc["session"] == {"id": 3}
    assert doc["words"][0] == {
        "text": "Hello",
        "start": 0.0,
        "end": 0.4,
        "emitted_at": 0.0,
        "source": "system",
    }
    assert [w["text"] for w in doc["words"]] == [w.text for w in TRICKY if not w.speculative]  # raw text kept
    assert doc["words"][5]["text"] == "two\nlines"


def test_format_from_path() -> None:
    assert format_from_path(Path("a.SRT")) == "srt"
    with pytest.raises(StorageError, match=r"\.srt, \.vtt, \.txt, \.json"):
        format_from_path(Path("a.doc"))


def test_labels_from_options_and_line_limits(tmp_path: Path) -> None:
    words = [
        Word("x" * 5, i * 0.3, i * 0.3 + 0.2, source="mic" if i % 9 < 4 else "system") for i in range(40)
    ]
    opts = CueOptions(max_line_chars=30, label_mic="Me", label_system="Them")
    text = render_srt(build_cues(words, opts))
    for sub in srt.parse(text):
        assert sub.content.split(": ", 1)[0] in {"Me", "Them"}
        assert all(len(line) <= 30 for line in sub.content.split("\n"))
    assert render_vtt([]) == "WEBVTT\n\n" and render_srt([]) == ""


# -- failures: nothing half-written ----------------------------------------------------------------


@pytest.fixture
def tiny_disk(small_disk) -> Path:
    """A real 64 KiB tmpfs (needs root); skipped elsewhere, where the injected ENOSPC test still runs."""
    return small_disk.mount("64k", "mode=0700")


def big_words(n: int = 20_000) -> list[Word]:
    return [Word(f"word{i}", i * 0.3, i * 0.3 + 0.25) for i in range(n)]


def test_full_disk_on_a_real_tmpfs(tiny_disk: Path) -> None:
    target = tiny_disk / "out.srt"
    target.write_text("previous export\n", encoding="utf-8")
    with pytest.raises(StorageError, match="No space left on device; nothing was written"):
        export_words(big_words(), target)
    assert target.read_text(encoding="utf-8") == "previous export\n"
    assert sorted(p.name for p in tiny_disk.iterdir()) == ["out.srt"]


def test_full_disk_injected_at_the_write_seam(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    target = tmp_path / "out.vtt"
    target.write_text("previous export\n", encoding="utf-8")
    calls = []

    def write_then_fail(fd: int, data: bytes) -> None:
        os.write(fd, data[: len(data) // 2])  # half of it really lands in the temp file first
        calls.append(len(data))
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(atomic_mod, "_write_all", write_then_fail)
    with pytest.raises(StorageError, match="No space left on device"):
        export_words(big_words(200), target)
    assert calls and target.read_text(encoding="utf-8") == "previous export\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out.vtt"]


def test_read_only_target(tmp_path: Path, small_disk) -> None:
    if os.geteuid() == 0:  # a chmod'ed folder does not stop root: a read-only file system does
        ro = small_disk.mount("64k", "ro")
    else:
        ro = tmp_path / "ro"
        ro.mkdir()
        ro.chmod(0o500)
    try:
        with pytest.raises(
            StorageError, match=r"cannot write .*out\.srt: (Read-only file system|Permission denied)"
        ):
            export_words(big_words(10), ro / "out.srt")
        assert list(ro.iterdir()) == []
    finally:
        if os.geteuid() != 0:
            ro.chmod(0o700)


def test_missing_folder_and_folder_target(tmp_path: Path) -> None:
    with pytest.raises(StorageError, match="No such file or directory"):
        atomic_write_text(tmp_path / "nope" / "out.txt", "x")
    (tmp_path / "dir.srt").mkdir()
    with pytest.raises(StorageError, match="Is a directory"):
        export_words(big_words(3), tmp_path / "dir.srt")


def test_atomic_write_replaces(tmp_path: Path) -> None:
    target = tmp_path / "t.txt"
    atomic_write_text(target, "one")
    atomic_write_text(target, "two ✓")
    assert target.read_text(encoding="utf-8") == "two ✓"
    assert [p.name for p in tmp_path.iterdir()] == ["t.txt"]


def test_a_sessions_length_reads_as_hours_minutes_seconds() -> None:
    """The sessions list's and the history window's length column (one home for both)."""
    assert [length_text(ms) for ms in (0, 999, 59_999, 3_723_456, 36_000_000)] == [
        "0:00:00", "0:00:00", "0:00:59", "1:02:03", "10:00:00"]
