"""Transcript files: SRT, WebVTT, plain text and JSON, written atomically.

Every writer renders the whole file in memory and hands it to :func:`atomic_write_text`, which
writes a temporary file next to the target, fsyncs it and renames it over the target. A read-only
folder or a full disk gives a :class:`StorageError` and leaves the target as it was (no temporary
file behind either). Speculative words are never written.

Text handling: whitespace runs inside words (newlines too) become one space, so no word can end a
cue block early. WebVTT forbids ``-->`` in cue text: it is written ``--&gt;`` (shown as ``-->``),
and ``<``, ``>``, ``&`` are escaped as entities. SRT has no escapes; readers (the ``srt`` package,
ffmpeg) take ``-->`` inside text as text, so it is kept, except in a line that would itself look
like a timing line (``00:00:01,000 --> ...``), where it becomes ``→``. Right-to-left scripts and
emoji are written as they are, in UTF-8 without a BOM.

Gaps (audio the engine skipped because it fell behind real time, :class:`~captioner.transcript.cues.Gap`)
are shown, never hidden: a ``[…]`` cue in SRT/WebVTT, a paragraph ``[… 4.2 s not transcribed]`` in
plain text, and a ``"gaps"`` list in JSON. Marked moments (:class:`~captioner.transcript.cues.Mark`)
are a line of their own in plain text (``★ Marked at 00:12:34``), a ``"marks"`` list in JSON and a
``NOTE`` comment in WebVTT.
"""

from __future__ import annotations

import json
import logging
import math
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from captioner.core import SOURCES, Source, Word
from captioner.errors import StorageError
from captioner.storage.atomic import replace_atomically
from captioner.transcript.cues import (
    Cue,
    CueOptions,
    Gap,
    Mark,
    build_cues,
    ends_sentence,
    merge_with_gaps,
    normalize_text,
)
from captioner.transcript.store import SessionStore

__all__ = [
    "EXPORT_FORMATS",
    "MARK_TEXT",
    "ExportFormat",
    "SessionDocument",
    "atomic_write_text",
    "export_session",
    "export_words",
    "format_from_path",
    "gap_to_json",
    "length_text",
    "mark_line",
    "mark_to_json",
    "marked_notice",
    "read_session_json",
    "render_json",
    "render_srt",
    "render_txt",
    "render_vtt",
    "srt_cue",
    "srt_time",
    "vtt_cue",
    "vtt_note",
    "vtt_time",
    "word_to_json",
]

logger = logging.getLogger(__name__)

ExportFormat = Literal["srt", "vtt", "txt", "json"]
EXPORT_FORMATS: tuple[ExportFormat, ...] = ("srt", "vtt", "txt", "json")
PARAGRAPH_PAUSE_MS = 2000  # a silence this long starts a new paragraph in plain text
PARAGRAPH_LONG_MS = 30_000  # a paragraph this long ends at a sentence end followed by a breath ...
PARAGRAPH_BREATH_MS = 500  # ... a pause at least this long
PARAGRAPH_MAX_MS = 45_000  # a paragraph this long ends at the next sentence end
VTT_HEADER = "WEBVTT\n\n"
MARK_TEXT = "★ Marked"  # a marked moment in text transcripts and WebVTT notes


def _clock(ms: int, sep: str) -> str:
    hours, rest = divmod(max(0, int(ms)), 3_600_000)
    minutes, rest = divmod(rest, 60_000)
    seconds, millis = divmod(rest, 1000)
    return f"{hours:02d}:{minutes:02d}:{seconds:02d}{sep}{millis:03d}"


def length_text(ms: int) -> str:
    """``h:mm:ss`` of a session's length in milliseconds (the sessions list, the history window)."""
    s = max(0, int(ms)) // 1000
    return f"{s // 3600}:{s // 60 % 60:02d}:{s % 60:02d}"


def srt_time(ms: int) -> str:
    """``HH:MM:SS,mmm`` for an audio-clock time in milliseconds."""
    return _clock(ms, ",")


def vtt_time(ms: int) -> str:
    """``HH:MM:SS.mmm`` for an audio-clock time in milliseconds."""
    return _clock(ms, ".")


_TIMING_LIKE = re.compile(r"^\s*\d+:\d+:\d+[,.]\d+\s*-->")


def _srt_text(text: str) -> str:
    return text.replace("-->", "→") if _TIMING_LIKE.match(text) else text


def _vtt_text(text: str) -> str:
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def srt_cue(index: int, cue: Cue) -> str:
    """One SRT block (``index`` counts from 1), ending with the blank separator line."""
    lines = [_srt_text(line) for line in cue.lines]
    if cue.label:
        lines[0] = f"{_srt_text(cue.label)}: {lines[0]}"
    body = "\n".join(lines)
    return f"{index}\n{srt_time(cue.start_ms)} --> {srt_time(cue.end_ms)}\n{body}\n\n"


def vtt_cue(cue: Cue) -> str:
    """One WebVTT cue block; the label becomes a voice span (``<v You>``)."""
    body = "\n".join(_vtt_text(line) for line in cue.lines)
    if cue.label:
        body = f"<v {_vtt_text(cue.label)}>{body}"
    return f"{vtt_time(cue.start_ms)} --> {vtt_time(cue.end_ms)}\n{body}\n\n"


def render_srt(cues: Iterable[Cue]) -> str:
    """A complete SRT file."""
    return "".join(srt_cue(i, cue) for i, cue in enumerate(cues, start=1))


def render_vtt(cues: Iterable[Cue], marks: Iterable[Mark] = ()) -> str:
    """A complete WebVTT file; each marked moment a ``NOTE`` block (a comment: players show
    nothing, a reader of the file sees it) before the first cue that starts after it."""
    pending = sorted(marks, key=lambda m: m.at)
    blocks = [VTT_HEADER]
    for cue in cues:
        while pending and round(pending[0].at * 1000) < cue.start_ms:
            blocks.append(vtt_note(pending.pop(0)))
        blocks.append(vtt_cue(cue))
    return "".join(blocks + [vtt_note(m) for m in pending])


def vtt_note(mark: Mark) -> str:
    """A marked moment as a WebVTT comment block (no ``-->`` and no blank line inside, as a NOTE
    must not have)."""
    note = f": {normalize_text(mark.note).replace('-->', '->')}" if mark.note else ""
    return f"NOTE {MARK_TEXT} at {vtt_time(round(mark.at * 1000))}{note}\n\n"


def render_txt(
    words: Iterable[Word],
    *,
    timestamps: bool = False,
    labels: Mapping[str, str] | None = None,
    gaps: Iterable[Gap] = (),
    marks: Iterable[Mark] = (),
) -> str:
    """Plain text in paragraphs: a new paragraph after a silence of 2 s or a change of source, and
    in continuous speech after a sentence once the paragraph is 30 s long and the speaker breathes
    (a pause of 0.5 s), or at the first sentence end after 45 s (a two-minute reading is not one
    block of text, and the History window's timestamps stay close together).

    Args:
        words: the session's words (speculative ones are skipped).
        timestamps: start each paragraph with ``[HH:MM:SS]`` (audio clock).
        labels: source -> label; None = label only when there are two sources ("You"/"Others").
        gaps: skipped audio; each is a paragraph of its own, ``[… 4.2 s not transcribed]``.
        marks: moments the user marked; each is a line of its own after the paragraph it falls in
            (a sentence is not cut in two): :func:`mark_line`.
    """
    items = merge_with_gaps((w for w in words if not w.speculative), gaps)
    merged = [w for w in items if isinstance(w, Word)]
    if labels is None:
        sources = {w.source for w in merged}
        opts = CueOptions()
        labels = {s: opts.label(s) for s in sources} if len(sources) > 1 else {}
    paragraphs: list[tuple[float, str]] = []  # (start, text)
    para: list[str] = []
    para_start = 0.0
    prev: Word | None = None
    first: Word | None = None  # the paragraph's first word
    for word in items:
        if isinstance(word, Gap):
            if para:
                paragraphs.append((para_start, " ".join(para)))
            stamp = f"[{_clock(round(word.start * 1000), ',')[:8]}] " if timestamps else ""
            paragraphs.append((word.start, f"{stamp}[… {word.seconds:.1f} s not transcribed]"))
            para, prev = [], None
            continue
        text = normalize_text(word.text)
        if not text:
            continue
        if prev is None or word.source != prev.source or _new_paragraph(first, prev, word):
            first = word
            if para:
                paragraphs.append((para_start, " ".join(para)))
            para, para_start = ([f"[{_clock(round(word.start * 1000), ',')[:8]}]"] if timestamps else []), word.start
            if labels.get(word.source):
                para.append(f"{labels[word.source]}:")
        para.append(text)
        prev = word
    if para:
        paragraphs.append((para_start, " ".join(para)))
    out: list[str] = []
    pending = sorted(marks, key=lambda m: m.at)
    for i, (_, text) in enumerate(paragraphs):
        if i == 0:  # marks before any speech
            while pending and pending[0].at < paragraphs[0][0]:
                out.append(mark_line(pending.pop(0), timestamps))
        out.append(text)
        after = paragraphs[i + 1][0] if i + 1 < len(paragraphs) else math.inf
        while pending and pending[0].at < after:
            out.append(mark_line(pending.pop(0), timestamps))
    out += [mark_line(m, timestamps) for m in pending]
    return "\n\n".join(out) + ("\n" if out else "")


def mark_line(mark: Mark, timestamps: bool = False) -> str:
    """A marked moment as the text transcript shows it: ``[00:12:34] ★ Marked`` (or ``★ Marked at
    00:12:34`` without timestamps), its note after a colon."""
    clock = _clock(round(mark.at * 1000), ",")[:8]
    note = f": {mark.note}" if mark.note else ""
    return f"[{clock}] {MARK_TEXT}{note}" if timestamps else f"{MARK_TEXT} at {clock}{note}"


def marked_notice(mark: Mark, *, note: bool = True) -> str:
    """What is said when a moment is marked: ``★ marked 0:12:34``, its note after a colon (the
    caption bar's badge leaves it out: the badge is a few words)."""
    said = f"{MARK_TEXT.lower()} {length_text(round(mark.at * 1000))}"
    return f"{said}: {mark.note}" if note and mark.note else said


def _new_paragraph(first: Word | None, prev: Word, word: Word) -> bool:
    """Whether ``word`` starts a new paragraph of the same source (:func:`render_txt`'s rules)."""
    pause_ms = (word.start - prev.end) * 1000
    if pause_ms >= PARAGRAPH_PAUSE_MS:
        return True
    if first is None or not ends_sentence(prev.text):
        return False
    length_ms = (word.start - first.start) * 1000
    return length_ms >= PARAGRAPH_MAX_MS or (length_ms >= PARAGRAPH_LONG_MS and pause_ms >= PARAGRAPH_BREATH_MS)


def word_to_json(word: Word) -> dict[str, Any]:
    """The word shape shared with ``captioner transcribe --json``: seconds on the audio clock."""
    return {
        "text": word.text,
        "start": round(word.start, 3),
        "end": round(word.end, 3),
        "emitted_at": round(word.emitted_at, 3),
        "source": word.source,
    }


def mark_to_json(mark: Mark) -> dict[str, Any]:
    """A marked moment as in JSON exports: seconds on the audio clock, and its note."""
    return {"at": round(mark.at, 3), "note": mark.note}


def gap_to_json(gap: Gap) -> dict[str, Any]:
    """A gap (skipped audio) as in JSON exports and ``captioner transcribe --json``."""
    return {"start": round(gap.start, 3), "end": round(gap.end, 3), "source": gap.source}


def render_json(words: Iterable[Word], session: Mapping[str, Any] | None = None, gaps: Iterable[Gap] = (),
                marks: Iterable[Mark] = ()) -> str:
    """``{"version": 1, "session": {...}, "words": [...], "gaps": [...], "marks": [...]}``; committed
    words only, in time order; ``gaps`` the audio skipped because the engine fell behind (placed as
    in the cues); ``marks`` the moments the user marked, in time order."""
    items = merge_with_gaps((w for w in words if not w.speculative), gaps)
    doc: dict[str, Any] = {"version": 1}
    if session is not None:
        doc["session"] = dict(session)
    doc["words"] = [word_to_json(w) for w in items if isinstance(w, Word)]
    doc["gaps"] = [gap_to_json(g) for g in items if isinstance(g, Gap)]
    doc["marks"] = [mark_to_json(m) for m in sorted(marks, key=lambda m: m.at)]
    return json.dumps(doc, ensure_ascii=False, indent=1) + "\n"


@dataclass(frozen=True, slots=True)
class SessionDocument:
    """A JSON export read back (:func:`read_session_json`): what :func:`render_json` wrote.

    Attributes:
        session: its ``session`` object (``{}`` where the file has none).
        words, gaps, marks: as in the file, in time order.
    """

    session: Mapping[str, Any]
    words: tuple[Word, ...]
    gaps: tuple[Gap, ...]
    marks: tuple[Mark, ...]


def read_session_json(path: Path) -> SessionDocument:
    """Read a session written by a JSON export (``sessions export --json``, ``transcribe --json``,
    the file a session goes to when the store cannot take it).

    Raises:
        StorageError: the file cannot be read, is not JSON, or is not such a document (the first
            thing wrong is named).
    """
    try:
        doc = json.loads(Path(path).read_text(encoding="utf-8"))
    except OSError as exc:
        raise StorageError(f"cannot read {path}: {exc.strerror or exc}") from exc
    except ValueError as exc:
        raise StorageError(f"{path} is not JSON: {exc}") from exc
    try:
        if not isinstance(doc, dict) or doc.get("version") != 1 or not isinstance(doc.get("words"), list):
            raise ValueError("not a captioner session (version 1 with a list of words)")
        session = doc.get("session") or {}
        if not isinstance(session, dict):
            raise ValueError("its session is not an object")
        words = tuple(_word_from_json(w) for w in doc["words"])
        gaps = tuple(Gap(float(g["start"]), float(g["end"]), _source(g.get("source", "system")))
                     for g in doc.get("gaps") or ())
        marks = tuple(Mark(float(m["at"]), str(m.get("note", ""))) for m in doc.get("marks") or ())
    except (TypeError, KeyError, ValueError) as exc:
        raise StorageError(f"{path} is not a session export: {exc}") from exc
    return SessionDocument(session, words, gaps, marks)


def _word_from_json(item: Mapping[str, Any]) -> Word:
    """The reverse of :func:`word_to_json`."""
    start, end = float(item["start"]), float(item["end"])
    if not (math.isfinite(start) and math.isfinite(end)) or end < start or start < 0:
        raise ValueError(f"a word's times are not a span: {item!r}")
    return Word(str(item["text"]), start, end, float(item.get("emitted_at", 0.0)), _source(item.get("source", "system")))


def _source(value: Any) -> Source:
    if value not in SOURCES:
        raise ValueError(f"unknown source {value!r}")
    return value  # type: ignore[no-any-return]


def format_from_path(path: Path) -> ExportFormat:
    """The export format named by the file's suffix (``.srt``, ``.vtt``, ``.txt``, ``.json``)."""
    suffix = Path(path).suffix.lower().lstrip(".")
    if suffix in EXPORT_FORMATS:
        return suffix  # type: ignore[return-value]
    raise StorageError(
        f"cannot tell the export format of {path}: use one of {', '.join('.' + f for f in EXPORT_FORMATS)}"
    )


def export_words(
    words: Sequence[Word],
    path: Path,
    fmt: ExportFormat | None = None,
    *,
    options: CueOptions | None = None,
    timestamps: bool = False,
    session: Mapping[str, Any] | None = None,
    gaps: Sequence[Gap] = (),
    marks: Sequence[Mark] = (),
) -> Path:
    """Write ``words`` to ``path`` in ``fmt`` (default: from the suffix), atomically.

    Args:
        words: the session's words, each source in emission order (``SessionStore.session_words``).
        path: target file; its folder must exist.
        fmt: "srt", "vtt", "txt" or "json".
        options: cue limits and labels (SRT/VTT; labels for TXT too).
        timestamps: TXT only: a timestamp before each paragraph.
        session: JSON only: metadata to include under ``"session"``.
        gaps: audio the engine skipped (``SessionStore.session_gaps``), shown in every format.
        marks: moments the user marked (``SessionStore.session_marks``): a line in text, a list in
            JSON, a ``NOTE`` in WebVTT; SRT, which has no comments, leaves them out (a subtitle
            file is for watching).

    Raises:
        StorageError: the file cannot be written (the target is left as it was).
    """
    fmt = fmt or format_from_path(path)
    if fmt == "srt":
        text = render_srt(build_cues(words, options, gaps=gaps))
    elif fmt == "vtt":
        text = render_vtt(build_cues(words, options, gaps=gaps), marks)
    elif fmt == "txt":
        labels = None
        if options is not None and len({w.source for w in words if not w.speculative}) > 1:
            labels = {"mic": options.label("mic"), "system": options.label("system")}
        text = render_txt(words, timestamps=timestamps, labels=labels, gaps=gaps, marks=marks)
    elif fmt == "json":
        text = render_json(words, session, gaps, marks)
    else:
        raise StorageError(f"unknown export format {fmt!r}: use one of {', '.join(EXPORT_FORMATS)}")
    atomic_write_text(Path(path), text)
    logger.info("exported %d words to %s (%s)", len(words), path, fmt)
    return Path(path)


def export_session(
    store: SessionStore,
    session_id: int,
    path: Path,
    fmt: ExportFormat | None = None,
    *,
    options: CueOptions | None = None,
    timestamps: bool = False,
) -> Path:
    """Write one stored session to ``path``: its words as it stands (final words; for a session that
    never ended, the words its captions showed last: :meth:`SessionStore.session_words`), gaps and
    marks, and its details in JSON.

    The one export of a recorded session, used by the app's tray, the history window and
    ``captioner sessions export``; arguments as for :func:`export_words`.

    Raises:
        StorageError: no such session, or the file cannot be written (the target is left as it was).
    """
    info = store.get_session(session_id)
    return export_words(store.session_words(session_id), path, fmt, options=options,
                        timestamps=timestamps, session=info.to_json(), gaps=store.session_gaps(session_id),
                        marks=store.session_marks(session_id))


def atomic_write_text(path: Path, text: str) -> None:
    """Replace ``path`` with ``text`` (UTF-8) so that readers see the old or the new file, never half.

    The temporary file is created in the target's folder (same file system, so the rename is
    atomic) with user-only permissions, fsynced, then renamed; the folder is fsynced after.

    Raises:
        StorageError: the folder is missing or read-only, the disk is full, or the target is a
            folder; the target is untouched and the temporary file removed.
    """
    path = Path(path)
    try:
        replace_atomically(path, text.encode("utf-8"))
    except OSError as exc:
        reason = exc.strerror or str(exc)
        raise StorageError(f"cannot write {path}: {reason}; nothing was written") from exc
