"""``captioner sessions``: list, show, name, export, import, search and delete the recorded sessions.

``captioner sessions list`` · ``show ID`` · ``rename ID TITLE`` · ``mark ID TIME [NOTE]`` · ``export ID --srt F --vtt F
--txt F --json F`` · ``search TEXT`` (the words said, and the titles) · ``delete ID`` ·
``purge --older-than DAYS``. Exports use the cue limits and source labels of the settings
(``transcripts`` section).
"""

from __future__ import annotations

import argparse
import datetime as dt
import re
import sys
from pathlib import Path

from captioner.commands._printer import fit_terminal
from captioner.engine.language import parse_languages
from captioner.errors import CaptionerError, StorageError
from captioner.storage.paths import AppPaths
from captioner.storage.settings import load_settings
from captioner.transcript.cues import CueOptions
from captioner.transcript.export import (
    EXPORT_FORMATS,
    export_session,
    length_text,
    marked_notice,
    read_session_json,
    render_txt,
)
from captioner.transcript.store import SessionInfo, SessionStore, is_store_file

__all__ = ["register", "run"]


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add the ``sessions`` subcommand and its actions."""
    p = subparsers.add_parser(
        "sessions",
        help="list, show, name, export, import, search and delete saved sessions",
        description="Work with the sessions saved in the session store.",
    )
    actions = p.add_subparsers(dest="action", metavar="ACTION", required=True)
    ls = actions.add_parser("list", help="list sessions, newest first")
    ls.add_argument("--limit", type=int, default=None, help="show at most N sessions")
    show = actions.add_parser("show", help="print a session's details and transcript")
    show.add_argument("id", type=int)
    show.add_argument("--no-timestamps", action="store_true", help="no [HH:MM:SS] before paragraphs")
    rename = actions.add_parser("rename", help="give a session a title (none: remove it)")
    rename.add_argument("id", type=int)
    rename.add_argument("title", nargs="*", help="the title (quotes not needed)")
    mark = actions.add_parser("mark", help="mark a moment of a session afterwards (a bookmark in its transcript)")
    mark.add_argument("id", type=int)
    mark.add_argument("time", type=_moment, help="when, on the session's clock: H:MM:SS, M:SS or seconds")
    mark.add_argument("note", nargs="*", help="what the moment was (quotes not needed)")
    exp = actions.add_parser("export", help="write a session as SRT, WebVTT, text or JSON")
    exp.add_argument("id", type=int)
    for fmt, name in (("srt", "SubRip"), ("vtt", "WebVTT"), ("txt", "plain text"), ("json", "JSON words")):
        exp.add_argument(f"--{fmt}", type=Path, metavar="FILE", help=f"write {name} to FILE")
    exp.add_argument("--timestamps", action="store_true", help="plain text: [HH:MM:SS] before paragraphs")
    imp = actions.add_parser("import", help="add sessions from JSON exports to the history (one written to a "
                                            "file when the history could not take it, or exported elsewhere), or "
                                            "every session still readable in a session store file (a damaged one "
                                            "kept aside, a backup)")
    imp.add_argument("files", type=Path, nargs="+", metavar="FILE")
    search = actions.add_parser("search", help="find where words were said (and sessions titled so)")
    search.add_argument("text", nargs="+")
    search.add_argument("--limit", type=int, default=50)
    delete = actions.add_parser("delete", help="delete a session and its words")
    delete.add_argument("id", type=int)
    purge = actions.add_parser("purge", help="delete sessions older than N days")
    purge.add_argument("--older-than", type=int, required=True, metavar="DAYS")
    p.set_defaults(func=run)


def run(args: argparse.Namespace, paths: AppPaths) -> int:
    """Run one ``sessions`` action."""
    action = args.action
    opener = SessionStore.open_for_reading if action in _READING else SessionStore.open  # a full disk: still read
    with opener(paths.sessions_db) as store:  # warnings (a bad file moved aside, read as it stands) are logged
        if action == "list":
            return _list(store, args.limit)
        if action == "show":
            return _show(store, args.id, timestamps=not args.no_timestamps)
        if action == "export":
            return _export(store, args, paths)
        if action == "rename":
            title = store.set_title(args.id, " ".join(args.title))
            print(f"session {args.id} is now titled {title!r}" if title else f"session {args.id} has no title now")
            return 0
        if action == "mark":
            return _mark(store, args.id, args.time, " ".join(args.note))
        if action == "import":
            return _import(store, args.files)
        if action == "search":
            return _search(store, " ".join(args.text), args.limit)
        if action == "delete":
            store.delete_session(args.id)
            print(f"deleted session {args.id}")
            return 0
        if action == "purge":
            n = store.purge_older_than(args.older_than)
            print(f"deleted {n} session(s) older than {args.older_than} days")
            return 0
    raise StorageError(f"unknown sessions action {action!r}")  # argparse prevents this


_READING = ("list", "show", "export", "search")  # the actions that only read the store


def _import(store: SessionStore, files: list[Path]) -> int:
    """Each file's sessions added to the history, said in a line each; 1 when any could not be (said
    why). A file is a JSON export, or a session store (``sessions.sqlite3``, a damaged one kept aside
    as ``….corrupt-…``, a backup): every session still readable in it."""
    failed = 0
    for path in files:
        if is_store_file(path):
            failed += _import_store(store, path)
            continue
        try:
            doc = read_session_json(path)  # its errors name the file
            try:
                sid = store.import_session(doc.session, doc.words, doc.gaps, doc.marks)
            except StorageError as exc:
                raise StorageError(f"{path}: {exc}") from exc
        except StorageError as exc:
            print(f"captioner: {exc}", file=sys.stderr)
            failed += 1
            continue
        print(f"imported {path} as session {sid} ({len(doc.words)} words; captioner sessions show {sid})")
    return 1 if failed else 0


def _import_store(store: SessionStore, path: Path) -> int:
    """The sessions of the store file at ``path``, a line each; how many could not be added."""
    outcomes = store.import_store(path)
    if not outcomes:
        print(f"captioner: {path}: no session could be read from it", file=sys.stderr)
        return 1
    for o in outcomes:
        name = f"{o.title!r}" if o.title else "a session"
        if o.session_id is None:
            print(f"captioner: {path}: {name}: {o.problem}", file=sys.stderr)
        else:
            part = "" if o.whole else ", in part: what was on damaged pages is lost"
            print(f"imported {name} from {path} as session {o.session_id} ({o.words} words{part}; "
                  f"captioner sessions show {o.session_id})")
    return sum(o.session_id is None for o in outcomes)


def _moment(text: str) -> float:
    """A moment on a session's clock, seconds: ``H:MM:SS``, ``M:SS`` (the seconds with a fraction
    or not) or seconds."""
    *whole, last = text.strip().split(":")
    if len(whole) > 2 or not all(re.fullmatch(r"\d+", p) for p in whole) or not re.fullmatch(r"\d+(\.\d+)?", last):
        raise argparse.ArgumentTypeError(f"{text!r} is not a time: write H:MM:SS, M:SS or seconds (0:12:34, 754)")
    values = [*(int(p) for p in whole), float(last)]
    if any(v >= 60 for v in values[1:]):
        raise argparse.ArgumentTypeError(f"{text!r} is not a time: minutes and seconds go up to 59")
    return sum(v * 60**i for i, v in enumerate(reversed(values)))


def _mark(store: SessionStore, session_id: int, at_s: float, note: str) -> int:
    info = store.get_session(session_id)
    if info.duration_ms is not None and at_s * 1000 > info.duration_ms:
        raise StorageError(f"session {session_id} is {length_text(info.duration_ms)} long; "
                           f"{length_text(round(at_s * 1000))} is after its end")
    mark = store.add_mark(session_id, at_s, note)
    print(f"session {session_id}: {marked_notice(mark)}")
    return 0


def _duration(ms: int | None) -> str:
    return "-" if ms is None else length_text(ms)


def _local(iso: str | None) -> str:
    if not iso:
        return "-"
    try:
        return dt.datetime.fromisoformat(iso).astimezone().strftime("%Y-%m-%d %H:%M")
    except ValueError:
        return iso


def _list(store: SessionStore, limit: int | None) -> int:
    sessions = store.list_sessions(limit)
    if not sessions:
        print("no saved sessions")
        return 0
    print(f"{'ID':>5}  {'STARTED':16}  {'LENGTH':>8}  {'SOURCES':11}  {'WORDS':>7}  TITLE / MODEL")
    for s in sessions:
        state = "" if s.ended_at else " (not ended)"
        print(
            f"{s.id:>5}  {_local(s.started_at):16}  {_duration(s.duration_ms):>8}  {','.join(s.sources):11}  "
            f"{s.word_count:>7}  {s.title or s.model or '-'}{state}"
        )
    return 0


def _language(s: SessionInfo) -> str:
    """``de``, or ``de (detected)`` when the session ran with ``auto`` (its settings snapshot says so),
    ``de (detected among en, de)`` with the languages the user speaks."""
    asked = str(s.to_json()["settings"].get("engine", {}).get("language") or "")
    try:
        mode, among = parse_languages(asked)
    except CaptionerError:  # a snapshot without the engine's language (an older session)
        mode, among = asked, ()
    if s.language in ("", "auto") or mode != "auto":
        return s.language or "-"
    return f"{s.language} (detected{' among ' + ', '.join(among) if among else ''})"


def _describe(s: SessionInfo) -> str:
    vocabulary = str(s.to_json()["settings"].get("engine", {}).get("vocabulary") or "")
    return "\n".join(
        [
            f"session {s.id}" + (f": {s.title}" if s.title else ""),
            f"  started   {_local(s.started_at)}   ended {_local(s.ended_at)}   length {_duration(s.duration_ms)}",
            f"  sources   {', '.join(s.sources)}   words {s.word_count}",
            f"  model     {s.model or '-'}   provider {s.provider or '-'}   language {_language(s)}",
            *([f"  vocabulary {' '.join(vocabulary.split())}"] if vocabulary.strip() else []),
        ]
    )


def _show(store: SessionStore, session_id: int, *, timestamps: bool) -> int:
    info = store.get_session(session_id)
    print(_describe(info))
    print()
    text = render_txt(store.session_words(session_id), timestamps=timestamps, gaps=store.session_gaps(session_id),
                      marks=store.session_marks(session_id))
    print(fit_terminal(sys.stdout, text.rstrip("\n")) or "(no words)")  # a terminal: wrapped between words
    return 0


def _export(store: SessionStore, args: argparse.Namespace, paths: AppPaths) -> int:
    targets = [(fmt, getattr(args, fmt)) for fmt in EXPORT_FORMATS if getattr(args, fmt)]
    if not targets:
        raise StorageError("say what to write: --srt FILE, --vtt FILE, --txt FILE and/or --json FILE")
    info = store.get_session(args.id)  # no such session: the error comes before anything is written
    settings, _warnings = load_settings(paths.settings_file)
    options = CueOptions.from_config(settings.transcripts)
    for fmt, target in targets:
        export_session(store, args.id, target, fmt, options=options, timestamps=args.timestamps)
        print(f"wrote {target} ({fmt}, {info.word_count} words)")
    return 0


def _search(store: SessionStore, text: str, limit: int) -> int:
    titled = store.titled(text, limit=limit)
    hits = store.search(text, limit=limit)
    if not hits and not titled:
        print(f"no session contains {text!r}")
        return 0
    for info in titled:
        print(f"session {info.id:>4}  {'title':>8}  {'':6}  {info.title}")
    for hit in hits:
        stamp = _duration(hit.start_ms)
        print(f"session {hit.session_id:>4}  {stamp:>8}  {hit.source:6}  {hit.context}")
    return 0
