"""The history window: recorded sessions, full-text search, a session's transcript, its title,
export, delete.

A search lists the sessions whose title says it, then those where the words were said, each with
the time and words of its first place; the transcript of the one opened has every place
highlighted and is scrolled to the first, and Enter again (or F3) goes to the next; Next mark
(Ctrl+M) does the same with the moments marked, and Note… (Ctrl+Shift+M) writes what the selected
one was (a shortcut pressed mid-meeting leaves none). The transcript of a session this app is
recording follows it, and a session begun meanwhile is listed (every :data:`FOLLOW_MS`; the
transcript kept at the bottom where the reader is at the bottom, left alone while text is
selected). Everything works from the keyboard: Ctrl+F searches, Escape clears the search, F2
renames, Delete deletes (after asking), and each part has a name a screen reader says.

It reads the :class:`~captioner.transcript.store.SessionStore` directly (the store is safe to
share between threads and every query is small) and writes exports with
:func:`~captioner.transcript.export.export_session`; it never touches the engine.
"""

from __future__ import annotations

import datetime as dt
import logging
import re
from collections.abc import Callable, Sequence
from pathlib import Path

from PySide6.QtCore import Qt, QTimer, Signal
from PySide6.QtGui import (
    QColor,
    QHideEvent,
    QKeySequence,
    QShortcut,
    QShowEvent,
    QTextCharFormat,
    QTextCursor,
)
from PySide6.QtWidgets import (
    QFileDialog,
    QHBoxLayout,
    QInputDialog,
    QLabel,
    QLineEdit,
    QMessageBox,
    QPlainTextEdit,
    QPushButton,
    QSplitter,
    QTextEdit,
    QTreeWidget,
    QTreeWidgetItem,
    QVBoxLayout,
    QWidget,
)

from captioner.errors import CaptionerError
from captioner.transcript.cues import CueOptions
from captioner.transcript.export import MARK_TEXT, export_session, length_text, read_session_json, render_txt
from captioner.transcript.store import (
    MAX_NOTE,
    MAX_TITLE,
    SearchHit,
    SessionInfo,
    SessionStore,
    is_store_file,
    phrase_at,
    search_terms,
)
from captioner.ui.tray import ask_save_path_dialog

__all__ = ["FIRST_WORDS", "HistoryWindow", "found_spans", "mark_spans"]

logger = logging.getLogger(__name__)

FIRST_WORDS = 12  # words of a session shown in the list
MAX_LISTED = 500  # sessions listed at most (newest first)
COLUMNS = ("Date", "Duration", "Sources", "Title", "First words")
FOUND_COLUMN = "Where it was said"  # the last column's title while searching
TITLE_WIDTH = 260  # pixels at most of the title column (a long title is elided, whole in its tooltip)
FOLLOW_MS = 2000  # how often the transcript of a session being recorded is read again
HIGHLIGHT = "#ffd54f"  # the background of a searched phrase in the transcript
_STAMP = re.compile(r"\[\d\d:\d\d:\d\d\] ")  # render_txt's paragraph timestamp


def _date(iso: str) -> str:
    try:
        return dt.datetime.fromisoformat(iso).astimezone().strftime("%Y-%m-%d %H:%M")
    except ValueError:
        return iso


def found_spans(text: str, query: str, labels: Sequence[str] = ()) -> list[tuple[int, int]]:
    """Character spans ``[start, end)`` of the places ``query`` was said in ``text``, a transcript
    as :func:`~captioner.transcript.export.render_txt` writes it with timestamps: its words, matched
    by the store's search rule (:func:`~captioner.transcript.store.phrase_at`) within one speaker's
    words across paragraphs, not its timestamps, its source labels (``labels``: "You", "Others")
    or its gaps' and marks' lines."""
    terms = search_terms(query)
    if not terms:
        return []
    runs: list[list[tuple[str, int, int]]] = [[]]  # one per speaker turn: a phrase is one speaker's
    speaker = None
    pos = 0
    for line in text.split("\n"):
        at, body = pos, line
        pos += len(line) + 1
        if stamp := _STAMP.match(body):
            at, body = at + stamp.end(), body[stamp.end():]
        if body.startswith(("[… ", MARK_TEXT)):  # "[… 4.2 s not transcribed]", "★ Marked"
            continue
        label, colon, rest = body.partition(": ")
        if colon and label in labels:
            at, body = at + len(label) + 2, rest
            if label != speaker:
                speaker = label
                runs.append([])
        runs[-1] += [(m.group(), at + m.start(), at + m.end()) for m in re.finditer(r"\S+", body)]
    spans = []
    for words in runs:
        said = [w for w, _, _ in words]
        spans += [(words[i][1], words[i + len(terms) - 1][2]) for i in range(len(words)) if phrase_at(said, i, terms)]
    return spans


def mark_spans(text: str) -> list[tuple[int, int]]:
    """Character spans of the marked moments' lines (``[00:12:34] ★ Marked…``) in a transcript as
    :func:`~captioner.transcript.export.render_txt` writes it with timestamps."""
    spans = []
    pos = 0
    for line in text.split("\n"):
        stamp = _STAMP.match(line)
        if line[stamp.end() if stamp else 0:].startswith(MARK_TEXT):
            spans.append((pos, pos + len(line)))
        pos += len(line) + 1
    return spans


def _duration(ms: int | None, ended: bool, recording: bool) -> str:
    """The length column: h:mm:ss. A session that never ended is recording here, or its process was
    killed (or records it elsewhere), which is all this store can tell: "not ended", with the
    length its words reach."""
    if recording:
        return "recording…"
    length = "" if ms is None else length_text(ms)
    return length if ended else ", ".join(filter(None, [length, "not ended"]))


class HistoryWindow(QWidget):
    """List, search, read, export and delete recorded sessions.

    Args:
        store: the session store.
        cue_options: cue layout and labels for exports.
        ask_save_path: asks where to export (``(fmt, suggested) -> path | None``).
        confirm_delete: asks before deleting (``(SessionInfo) -> bool``); default a message box.
        ask_title: asks for a session's new title (``(current) -> title | None``); default a dialog.
        ask_note: asks for a marked moment's note (``(current) -> note | None``); default a dialog.
        export_dir: folder the save dialog suggests.

    Signals:
        error(CaptionerError): an export or delete failed (the app shows it).
    """

    error = Signal(object)

    def __init__(
        self,
        store: SessionStore,
        *,
        cue_options: CueOptions | None = None,
        ask_save_path: Callable[[str, str], str | None] = ask_save_path_dialog,
        confirm_delete: Callable[[SessionInfo], bool] | None = None,
        ask_title: Callable[[str], str | None] | None = None,
        ask_note: Callable[[str], str | None] | None = None,
        ask_open_paths: Callable[[str], list[str]] | None = None,
        export_dir: Path | str = "",
        parent: QWidget | None = None,
    ) -> None:
        super().__init__(parent)
        self.setWindowTitle("captioner — History")
        self.resize(860, 520)
        self._store = store
        self._cues = cue_options or CueOptions()
        self._ask = ask_save_path
        self._confirm = confirm_delete or self._confirm_dialog
        self._ask_title = ask_title or self._title_dialog
        self._ask_note = ask_note or self._note_dialog
        self._ask_open = ask_open_paths or self._open_dialog
        self._export_dir = Path(export_dir) if export_dir else Path.home()
        self.search_box = QLineEdit(self)
        self.search_box.setPlaceholderText("Search all sessions…")
        self.search_box.setClearButtonEnabled(True)
        self.search_box.setAccessibleName("Search all sessions")
        self.search_box.returnPressed.connect(self._search_or_next)
        self.search_box.textChanged.connect(lambda t: self.refresh() if not t else None)
        self._searched = ""  # the query the list shows the sessions of
        self._found: list[tuple[int, int]] = []  # places of it in the open transcript
        self._at = -1  # the place the transcript shows
        self._kind = "places"  # what the highlighted spans are: a search's "places" or the "marks"
        QShortcut(QKeySequence(QKeySequence.StandardKey.FindNext), self, self.next_found)
        self.list = QTreeWidget(self)
        self.list.setHeaderLabels(list(COLUMNS))
        self.list.setRootIsDecorated(False)
        self.list.setAlternatingRowColors(True)
        self.list.setAccessibleName("Sessions")
        self.list.currentItemChanged.connect(lambda *_: self._show_current())
        self.text = QPlainTextEdit(self)
        self.text.setReadOnly(True)
        self.text.setAccessibleName("Transcript")
        self.found_label = QLabel(self)
        self.found_label.setAccessibleName("Search places")
        self._shown: tuple[int, int] | None = None  # (session, words) the transcript shows
        self._follow = QTimer(self)
        self._follow.setInterval(FOLLOW_MS)
        self._follow.timeout.connect(self.follow_recording)
        self.buttons: dict[str, QPushButton] = {}
        row = QHBoxLayout()
        for fmt in ("srt", "vtt", "txt", "json"):
            b = QPushButton(f"Export {fmt.upper()}…", self)
            b.clicked.connect(lambda _=False, f=fmt: self.export_current(f))
            row.addWidget(b)
            self.buttons[fmt] = b
        row.addStretch(1)
        row.addWidget(self.found_label)
        row.addStretch(1)
        for name, text, tip, key, action, enabled in (
            ("marks", "Next mark", "Go to the moments marked in this session", "Ctrl+M", self.next_mark, False),
            ("note", "Note…", "Write what the selected mark was", "Ctrl+Shift+M", self.note_current_mark, False),
            ("rename", "Rename…", "Give the session a title", "F2", self.rename_current, True),
        ):
            button = QPushButton(text, self)
            button.setToolTip(f"{tip} ({key})")
            button.setEnabled(enabled)
            button.clicked.connect(action)
            row.addWidget(button)
            self.buttons[name] = button
            QShortcut(QKeySequence(key), self, action)
        QShortcut(QKeySequence(QKeySequence.StandardKey.Find), self, self._focus_search)
        QShortcut(QKeySequence(Qt.Key.Key_Escape), self.search_box, self.search_box.clear,
                  context=Qt.ShortcutContext.WidgetShortcut)
        QShortcut(QKeySequence(QKeySequence.StandardKey.Delete), self.list, self.delete_current,
                  context=Qt.ShortcutContext.WidgetShortcut)
        imported = QPushButton("Import…", self)
        imported.setToolTip("Add sessions to the history from JSON exports (one written to a file "
                            "when the history could not take it, or exported on another computer)")
        imported.clicked.connect(self.import_files)
        row.addWidget(imported)
        self.buttons["import"] = imported
        delete = QPushButton("Delete", self)
        delete.clicked.connect(self.delete_current)
        row.addWidget(delete)
        self.buttons["delete"] = delete
        split = QSplitter(Qt.Orientation.Vertical, self)
        split.addWidget(self.list)
        split.addWidget(self.text)
        layout = QVBoxLayout(self)
        layout.addWidget(self.search_box)
        layout.addWidget(split, 1)
        layout.addLayout(row)
        self.refresh()

    # ------------------------------------------------------------ listing
    def refresh(self) -> None:
        """Reload the list (filtered by the search box when it holds text: each session with the
        time and words of the first place it was said)."""
        query = self.search_box.text().strip()
        self._searched = query
        first_hit: dict[int, SearchHit] = {}
        if query:
            titled = self._store.titled(query, limit=MAX_LISTED)
            for hit in self._store.search(query, limit=MAX_LISTED):
                first_hit.setdefault(hit.session_id, hit)
            named = {info.id for info in titled}
            sessions = titled + [self._store.get_session(i) for i in first_hit if i not in named]
        else:
            sessions = self._store.list_sessions(limit=MAX_LISTED)
        self.list.setHeaderLabels([*COLUMNS[:-1], FOUND_COLUMN if query else COLUMNS[-1]])
        self.list.clear()
        for info in sessions:
            if (first := first_hit.get(info.id)) is not None:
                last = f"[{length_text(first.start_ms)}] … {first.context} …"
            elif query:
                last = "(the title)"
            else:
                words = self._store.session_words(info.id, limit=FIRST_WORDS)
                last = " ".join(w.text for w in words) or "(no words)"
            item = QTreeWidgetItem([_date(info.started_at), _duration(info.duration_ms, info.ended_at is not None, self._store.recording(info.id)),
                                    ", ".join(info.sources), info.title, last])
            item.setData(0, Qt.ItemDataRole.UserRole, info.id)
            item.setToolTip(COLUMNS.index("Title"), info.title)
            self.list.addTopLevelItem(item)
        for c in range(len(COLUMNS) - 1):
            self._fit_column(c)
        top = self.list.topLevelItem(0)
        if top is not None:
            self.list.setCurrentItem(top)  # a new item after clear(): shows it, with the new query's places
        else:
            self.text.setPlainText("")
            self._mark([])
            if query:
                self.found_label.setText(f"“{query}” was not found")

    def _fit_column(self, c: int) -> None:
        """Column ``c`` as wide as its texts, a long title elided to :data:`TITLE_WIDTH` pixels."""
        self.list.resizeColumnToContents(c)
        if COLUMNS[c] == "Title" and self.list.columnWidth(c) > TITLE_WIDTH:
            self.list.setColumnWidth(c, TITLE_WIDTH)

    def session_ids(self) -> list[int]:
        """Ids of the listed sessions, in list order."""
        return [item.data(0, Qt.ItemDataRole.UserRole) for item in self._items()]

    def _items(self) -> list[QTreeWidgetItem]:
        return [item for i in range(self.list.topLevelItemCount()) if (item := self.list.topLevelItem(i)) is not None]

    def current_session(self) -> int | None:
        """Id of the selected session, or None."""
        item = self.list.currentItem()
        return None if item is None else int(item.data(0, Qt.ItemDataRole.UserRole))

    def select_session(self, session_id: int) -> None:
        """Select (open) a session in the list."""
        for item in self._items():
            if item.data(0, Qt.ItemDataRole.UserRole) == session_id:
                self.list.setCurrentItem(item)
                return

    def _show_current(self) -> None:
        sid = self.current_session()
        self._shown = None
        if sid is None:
            self.text.setPlainText("")
            for name in ("marks", "note"):
                self.buttons[name].setEnabled(False)
            self._mark([])
            return
        words = self._store.session_words(sid)
        labels = None
        if len({w.source for w in words}) > 1:
            labels = {"mic": self._cues.label_mic, "system": self._cues.label_system}
        marks = self._store.session_marks(sid)
        self.text.setPlainText(render_txt(words, timestamps=True, labels=labels, gaps=self._store.session_gaps(sid),
                                          marks=marks))
        for name in ("marks", "note"):
            self.buttons[name].setEnabled(bool(marks))
        self._shown = (sid, len(words))
        query = self._searched
        self._mark(found_spans(self.text.toPlainText(), query, list((labels or {}).values())) if query else [])

    def follow_recording(self) -> None:
        """List a session begun since (without a search), the one open staying open; read the open
        transcript again when it is a session this store is recording and it has new words: at
        the bottom if the reader was there, else where the reader was; not while text is selected
        (a search's place included), which reading again would lose."""
        if not self._searched:
            newest = self._store.list_sessions(limit=1)
            if newest and newest[0].id not in self.session_ids():
                current = self.current_session()
                self.refresh()
                if current is not None:
                    self.select_session(current)
        sid = self.current_session()
        if sid is None or not self._store.recording(sid) or self.text.textCursor().hasSelection():
            return
        if self._shown == (sid, self._store.get_session(sid).word_count):  # a count, not the words
            return
        bar = self.text.verticalScrollBar()
        at_bottom, value = bar.value() >= bar.maximum(), bar.value()
        self._show_current()
        bar.setValue(bar.maximum() if at_bottom else value)

    def showEvent(self, event: QShowEvent) -> None:
        super().showEvent(event)
        self._follow.start()

    def hideEvent(self, event: QHideEvent) -> None:
        self._follow.stop()
        super().hideEvent(event)

    def _mark(self, spans: list[tuple[int, int]], kind: str = "places") -> None:
        """Highlight ``spans`` in the transcript (a search's places, or the marks) and go to the first."""
        self._found, self._at, self._kind = spans, -1, kind
        marks = []
        for start, end in spans:
            mark = QTextEdit.ExtraSelection()
            fmt = QTextCharFormat()
            fmt.setBackground(QColor(HIGHLIGHT))
            fmt.setForeground(QColor("black"))
            mark.format = fmt  # type: ignore[attr-defined]
            mark.cursor = self._cursor(start, end)  # type: ignore[attr-defined]
            marks.append(mark)
        self.text.setExtraSelections(marks)
        self.found_label.setText("")
        if spans:
            self.next_found()

    def _cursor(self, start: int, end: int) -> QTextCursor:
        cursor = QTextCursor(self.text.document())
        cursor.setPosition(start)
        cursor.setPosition(end, QTextCursor.MoveMode.KeepAnchor)
        return cursor

    def next_found(self) -> None:
        """Show the next place the search found in the open transcript (after the last, the first)."""
        if self._found:
            self._show_found((self._at + 1) % len(self._found))

    def _show_found(self, at: int) -> None:
        """Select the ``at``-th highlighted span, scrolled to the middle, and say which it is."""
        self._at = at
        self.text.setTextCursor(self._cursor(*self._found[self._at]))
        self.text.centerCursor()
        n = len(self._found)
        what = {"places": ("place", "places"), "marks": ("mark", "marks")}[self._kind]
        self.found_label.setText(f"{self._at + 1} of {n} {what[1]} in this session" if n > 1
                                 else f"1 {what[0]} in this session")

    def next_mark(self) -> None:
        """Highlight the open session's marked moments and go to the next (the first, coming from
        a search's places)."""
        if self._kind == "marks" and self._found:
            self.next_found()
        else:
            self._mark(mark_spans(self.text.toPlainText()), kind="marks")

    def note_current_mark(self) -> str | None:
        """Ask for the note of the marked moment selected (by Next mark; with none selected, the
        first), store it and show it on the mark's line, which stays selected; returns the note
        stored (``""``: none)."""
        sid = self.current_session()
        if sid is None or not self.buttons["note"].isEnabled():
            return None
        if not (self._kind == "marks" and self._found):
            self.next_mark()
        index = self._at
        marks = self._store.session_marks(sid)
        if not 0 <= index < len(marks):
            return None
        note = self._ask_note(marks[index].note)
        if note is None:
            return None
        try:
            stored = self._store.set_mark_note(sid, index, note)
        except CaptionerError as exc:
            self.error.emit(exc)
            return None
        self._show_current()
        self._mark(mark_spans(self.text.toPlainText()), kind="marks")
        if index < len(self._found):
            self._show_found(index)  # the same mark, its note now on its line
        return stored.note

    def _note_dialog(self, current: str) -> str | None:
        note, ok = QInputDialog.getText(self, "Note on the mark",
                                        f"What this moment was (at most {MAX_NOTE} characters; empty for none):",
                                        text=current)
        return note if ok else None

    def _focus_search(self) -> None:
        self.search_box.setFocus(Qt.FocusReason.ShortcutFocusReason)
        self.search_box.selectAll()

    def _search_or_next(self) -> None:
        """Enter in the search box: search, or with the query searched already, the next place."""
        if self.search_box.text().strip() == self._searched and self._found and self._kind == "places":
            self.next_found()
        else:
            self.refresh()

    # ------------------------------------------------------------ actions
    def export_current(self, fmt: str) -> Path | None:
        """Export the selected session after asking where; returns the written path."""
        sid = self.current_session()
        if sid is None:
            return None
        path = self._ask(fmt, str(self._export_dir / f"session-{sid}.{fmt}"))
        if not path:
            return None
        try:
            return export_session(self._store, sid, Path(path), fmt,  # type: ignore[arg-type]
                                  options=self._cues)
        except CaptionerError as exc:
            self.error.emit(exc)
            return None

    def rename_current(self) -> str | None:
        """Ask for the selected session's title and store it; returns the title stored (``""``: none)."""
        sid = self.current_session()
        if sid is None:
            return None
        title = self._ask_title(self._store.get_session(sid).title)
        if title is None:
            return None
        try:
            stored = self._store.set_title(sid, title)
        except CaptionerError as exc:
            self.error.emit(exc)
            return None
        item = self.list.currentItem()
        if item is not None:
            item.setText(COLUMNS.index("Title"), stored)
            item.setToolTip(COLUMNS.index("Title"), stored)
            self._fit_column(COLUMNS.index("Title"))
        return stored

    def import_files(self) -> list[int]:
        """Ask for JSON exports or session store files (a damaged history kept aside, a backup) and
        add each one's sessions to the history (a file that is neither, a session there already or
        one a damaged page kept, is said through :attr:`error` and the others go on); the list shows
        the last one imported. Returns the new sessions' ids."""
        added: list[int] = []
        for path in self._ask_open(str(self._export_dir)):
            if is_store_file(Path(path)):
                outcomes = self._store.import_store(Path(path))
                added += [o.session_id for o in outcomes if o.session_id is not None]
                problems = [f"{o.title!r}: {o.problem}" if o.title else o.problem
                            for o in outcomes if o.session_id is None]
                if problems or not outcomes:
                    self.error.emit(CaptionerError(f"{path}: " + ("; ".join(problems) if outcomes else
                                                                  "no session could be read from it")))
                continue
            try:
                doc = read_session_json(Path(path))  # its errors name the file
            except CaptionerError as exc:
                self.error.emit(exc)
                continue
            try:
                added.append(self._store.import_session(doc.session, doc.words, doc.gaps, doc.marks))
            except CaptionerError as exc:
                self.error.emit(CaptionerError(f"{path}: {exc}"))
        if added:
            self.search_box.clear()
            self.refresh()
            self.select_session(added[-1])
        return added

    def _open_dialog(self, folder: str) -> list[str]:
        paths, _ = QFileDialog.getOpenFileNames(self, "Import sessions", folder,
                                                "Session exports and histories (*.json *.sqlite3 *.sqlite3.*)")
        return paths

    def _title_dialog(self, current: str) -> str | None:
        title, ok = QInputDialog.getText(self, "Rename session",
                                         f"Title (at most {MAX_TITLE} characters; empty for none):", text=current)
        return title if ok else None

    def delete_current(self) -> bool:
        """Delete the selected session after confirmation; True when deleted."""
        sid = self.current_session()
        if sid is None:
            return False
        info = self._store.get_session(sid)
        if not self._confirm(info):
            return False
        try:
            self._store.delete_session(sid)
        except CaptionerError as exc:
            self.error.emit(exc)
            return False
        self.refresh()
        return True

    def _confirm_dialog(self, info: SessionInfo) -> bool:
        answer = QMessageBox.question(
            self, "Delete session", f"Delete the session of {_date(info.started_at)}? This cannot be undone."
        )
        return answer == QMessageBox.StandardButton.Yes
