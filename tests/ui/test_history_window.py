"""History window over a real SessionStore: list, search, open, export (parsed back), delete."""

from __future__ import annotations

import srt
from PySide6.QtCore import Qt

from captioner.core import EngineUpdate, Word
from captioner.transcript.cues import Gap
from captioner.transcript.export import export_session, render_txt
from captioner.transcript.store import SessionStore
from captioner.ui.history_window import HistoryWindow, found_spans, mark_spans


def record(store: SessionStore, text: str, sources=("system",), started_at=None) -> int:
    sid = store.begin_session(sources=sources, model="tiny", provider="CPU", language="en",
                              started_at=started_at)
    words = tuple(Word(w, i * 0.5, i * 0.5 + 0.4) for i, w in enumerate(text.split()))
    store.apply(sid, EngineUpdate(0, words))
    store.end_session(sid)
    return sid


def make_store(tmp_path):
    store = SessionStore.open(tmp_path / "sessions.sqlite3")
    a = record(store, "the budget meeting starts now", started_at="2026-01-05T09:00:00+00:00")
    b = record(store, "a lecture about whales and krill", started_at="2026-02-07T14:30:00+00:00")
    return store, a, b


def test_lists_sessions_with_date_duration_sources_and_first_words(qtbot, tmp_path):
    store, a, b = make_store(tmp_path)
    win = HistoryWindow(store, ask_save_path=lambda f, s: None)
    qtbot.addWidget(win)
    assert win.session_ids() == [b, a]  # newest first
    row = win.list.topLevelItem(0)
    assert row.text(0).startswith("2026-02-07")
    assert row.text(1) == "0:00:02"
    assert row.text(2) == "system"
    assert row.text(3) == ""  # no title
    assert row.text(4).startswith("a lecture about whales")


def test_search_filters_and_clearing_shows_all(qtbot, tmp_path):
    store, a, b = make_store(tmp_path)
    win = HistoryWindow(store)
    qtbot.addWidget(win)
    win.search_box.setText("budget meeting")
    win.refresh()
    assert win.session_ids() == [a]
    win.search_box.setText("")
    assert win.session_ids() == [b, a]


def test_opening_a_session_shows_its_transcript(qtbot, tmp_path):
    store, a, _ = make_store(tmp_path)
    win = HistoryWindow(store)
    qtbot.addWidget(win)
    win.select_session(a)
    assert "the budget meeting starts now" in win.text.toPlainText()


def test_export_writes_a_file_an_srt_parser_reads(qtbot, tmp_path):
    store, a, _ = make_store(tmp_path)
    out = tmp_path / "exported.srt"
    win = HistoryWindow(store, ask_save_path=lambda fmt, suggested: str(out))
    qtbot.addWidget(win)
    win.select_session(a)
    assert win.export_current("srt") == out
    subs = list(srt.parse(out.read_text(encoding="utf-8")))
    assert " ".join(s.content.replace("\n", " ") for s in subs) == "the budget meeting starts now"


def test_import_adds_exported_sessions_and_says_what_it_could_not(qtbot, tmp_path):
    """Import… with the JSON export of a session of another history and a file that is not one: the
    session is added and shown, the other file is said on ``error`` by name; the same export again is
    refused with the session it is."""
    other, a, _ = make_store(tmp_path / "other")
    exported = tmp_path / "budget.json"
    export_session(other, a, exported, "json")
    bad = tmp_path / "notes.json"
    bad.write_text("{}", encoding="utf-8")
    store = SessionStore.open(tmp_path / "mine.sqlite3")
    record(store, "mine alone")
    asked: list[str] = []
    win = HistoryWindow(store, export_dir=tmp_path,
                        ask_open_paths=lambda folder: asked.append(folder) or [str(exported), str(bad)])
    qtbot.addWidget(win)
    errors: list = []
    win.error.connect(errors.append)
    (sid,) = win.import_files()
    assert asked == [str(tmp_path)] and win.current_session() == sid and len(win.session_ids()) == 2
    assert "the budget meeting starts now" in win.text.toPlainText()
    assert [str(e) for e in errors] == [f"{bad} is not a session export: not a captioner session "
                                        "(version 1 with a list of words)"]
    win._ask_open = lambda folder: [str(exported)]
    assert win.import_files() == []
    assert str(errors[-1]) == f"{exported}: this session is in the history already: session {sid} " \
                              f"(captioner sessions show {sid})"


def test_import_adds_the_sessions_of_another_history_file(qtbot, tmp_path):
    """Import… with a session store file (a damaged history kept aside, a backup; here another
    history whose first page, its header, was torn): its sessions are added and shown; imported
    again, each is said to be there already, in one line."""
    other, _, _ = make_store(tmp_path / "other")
    other.close()
    kept = tmp_path / "other" / "sessions.sqlite3"
    with open(kept, "r+b") as f:
        f.write(b"\x00" * 4096)  # no header: known by its name
    store = SessionStore.open(tmp_path / "mine.sqlite3")
    record(store, "mine alone")
    win = HistoryWindow(store, export_dir=tmp_path, ask_open_paths=lambda folder: [str(kept)])
    qtbot.addWidget(win)
    errors: list = []
    win.error.connect(errors.append)
    added = win.import_files()
    assert len(added) == 2 and errors == [] and len(win.session_ids()) == 3
    assert win.current_session() == added[-1] and "a lecture about whales and krill" in win.text.toPlainText()
    assert win.import_files() == []
    (error,) = errors
    assert str(error).startswith(f"{kept}: ") and str(error).count("this session is in the history already") == 2


def test_delete_asks_first_and_removes_the_session(qtbot, tmp_path):
    store, a, b = make_store(tmp_path)
    answers = [False, True]
    win = HistoryWindow(store, confirm_delete=lambda info: answers.pop(0))
    qtbot.addWidget(win)
    win.select_session(a)
    assert not win.delete_current()
    assert a in win.session_ids()
    win.select_session(a)
    assert win.delete_current()
    assert win.session_ids() == [b]
    assert [s.id for s in store.list_sessions()] == [b]


def test_a_session_cut_off_by_a_crash_shows_the_words_its_captions_showed_last(qtbot, tmp_path):
    """A session whose process was killed (never ended, recorded by no store now) lists as "not ended"
    with the length its words reach and its last, speculative words, and its transcript has them; one recording here lists as
    recording, with its final words only."""
    db = tmp_path / "sessions.sqlite3"
    with SessionStore.open(db) as killed:
        cut = killed.begin_session(started_at="2026-03-01T10:00:00+00:00")
        killed.apply(cut, EngineUpdate(0, (Word("closed", 40, 40.4), Word("sentence", 40.5, 41.9, speculative=True))))
    store = SessionStore.open(db)
    live = store.begin_session(started_at="2026-03-02T10:00:00+00:00")
    store.apply(live, EngineUpdate(0, (Word("final", 0, 0.4), Word("draft", 0.5, 0.9, speculative=True))))
    win = HistoryWindow(store)
    qtbot.addWidget(win)
    assert win.session_ids() == [live, cut]
    rows = [win.list.topLevelItem(i) for i in range(2)]
    assert [(r.text(1), r.text(4)) for r in rows] == [("recording…", "final"), ("0:00:41, not ended", "closed sentence")]
    win.select_session(cut)
    assert "closed sentence" in win.text.toPlainText()


def test_a_search_highlights_every_place_in_the_transcript_and_enter_goes_to_the_next(qtbot, tmp_path):
    """The list says when and in what words each session said it; the open transcript has each
    place highlighted, scrolled to; Enter again (or F3) goes on to the next, then back to the first."""
    store, a, b = make_store(tmp_path)
    filler = " ".join(f"word{i}" for i in range(400))
    c = record(store, f"first the Budget, meeting. {filler} and later the budget meeting again",
               started_at="2026-03-01T09:00:00+00:00")
    win = HistoryWindow(store)
    qtbot.addWidget(win)
    win.resize(600, 200)
    win.show()
    win.activateWindow()
    qtbot.waitUntil(win.isActiveWindow)
    qtbot.keyClicks(win.search_box, "budget meeting")
    qtbot.keyClick(win.search_box, Qt.Key.Key_Return)
    assert win.session_ids() == [c, a]
    assert win.list.headerItem().text(4) == "Where it was said"
    assert win.list.topLevelItem(0).text(4) == "[0:00:01] … first the Budget, meeting. word0 word1 word2 word3 word4 …"
    assert win.list.topLevelItem(1).text(4).startswith("[0:00:00] … the budget meeting starts now")
    marks = win.text.extraSelections()
    assert [m.cursor.selectedText() for m in marks] == ["Budget, meeting.", "budget meeting"]
    assert win.found_label.text() == "1 of 2 places in this session"
    assert win.text.textCursor().selectedText() == "Budget, meeting."
    top = win.text.verticalScrollBar().value()
    qtbot.keyClick(win.search_box, Qt.Key.Key_Return)  # the same query again: the next place
    assert win.found_label.text() == "2 of 2 places in this session"
    assert win.text.textCursor().selectedText() == "budget meeting"
    assert win.text.verticalScrollBar().value() > top  # the second place is 400 words further down
    qtbot.keyClick(win.search_box, Qt.Key.Key_F3)
    assert win.found_label.text() == "1 of 2 places in this session"
    win.select_session(a)
    assert [m.cursor.selectedText() for m in win.text.extraSelections()] == ["budget meeting"]
    assert win.found_label.text() == "1 place in this session"
    win.search_box.setText("krill")
    qtbot.keyClick(win.search_box, Qt.Key.Key_Return)
    assert win.session_ids() == [b]
    assert [m.cursor.selectedText() for m in win.text.extraSelections()] == ["krill"]
    win.search_box.setText("zebra")
    qtbot.keyClick(win.search_box, Qt.Key.Key_Return)
    assert win.session_ids() == [] and win.found_label.text() == "“zebra” was not found"
    win.search_box.setText("")
    assert win.session_ids() == [c, b, a]
    assert win.list.headerItem().text(4) == "First words"
    assert win.text.extraSelections() == [] and win.found_label.text() == ""


def test_found_spans_are_the_words_said_not_the_timestamps_labels_or_gap_notes():
    words = [Word("Thank", 0.0, 0.3, source="mic"), Word("you.", 0.3, 0.6, source="mic"),
             Word("You", 1.0, 1.2, source="system"), Word("bet,", 1.2, 1.5, source="system"),
             Word("not", 9.0, 9.2, source="system"), Word("now.", 9.2, 9.5, source="system")]
    text = render_txt(words, timestamps=True, labels={"mic": "You", "system": "Others"},
                      gaps=[Gap(2.0, 6.2)])
    assert text.splitlines()[0] == "[00:00:00] You: Thank you."
    said = [text[a:b] for a, b in found_spans(text, "you", ["You", "Others"])]
    assert said == ["you.", "You"]  # the mic's word and the system's, not the "You:" label
    assert found_spans(text, "00", ["You", "Others"]) == []  # timestamps are not words
    assert [text[a:b] for a, b in found_spans(text, "not", ["You", "Others"])] == ["not"]  # not the gap's note
    assert found_spans(text, "you you bet", ["You", "Others"]) == []  # two speakers: as the store's search
    assert [text[a:b] for a, b in found_spans(text, "bet not", ["You", "Others"])] == ["bet,\n\n[00:00:02] [… 4.2 s not transcribed]\n\n[00:00:09] Others: not"]
    assert found_spans(text, " ,. ", ["You"]) == []


def test_rename_gives_a_session_a_title_that_the_list_shows_and_a_search_finds(qtbot, tmp_path):
    """Rename… (or F2) asks for the title, stores it as one line, shows it in the list; a search
    lists the sessions whose title says it first; an over-long title is refused with the reason
    and the old one kept; an empty one removes it."""
    store, a, b = make_store(tmp_path)
    answers: list[str | None] = ["  Budget\n review  ", None, "x" * 201, ""]
    asked: list[str] = []
    errors: list[Exception] = []

    def ask(current: str) -> str | None:
        asked.append(current)
        return answers.pop(0)

    win = HistoryWindow(store, ask_title=ask)
    win.error.connect(errors.append)
    qtbot.addWidget(win)
    win.show()
    win.activateWindow()
    qtbot.waitUntil(win.isActiveWindow)
    win.select_session(b)
    win.buttons["rename"].click()
    assert store.get_session(b).title == "Budget review"
    assert win.list.currentItem().text(3) == "Budget review"
    assert win.list.currentItem().toolTip(3) == "Budget review"
    qtbot.keyClick(win.list, Qt.Key.Key_F2)  # cancelled: nothing changes
    assert asked == ["", "Budget review"] and store.get_session(b).title == "Budget review"
    win.search_box.setText("budget")
    qtbot.keyClick(win.search_box, Qt.Key.Key_Return)
    assert win.session_ids() == [b, a]  # b by its title, a by its words
    assert [win.list.topLevelItem(i).text(4) for i in range(2)] == [
        "(the title)", "[0:00:00] … the budget meeting starts now …"]
    win.select_session(b)
    answers.insert(0, "a title much longer than the column may be wide, " * 3)
    assert len(win.rename_current()) > 100
    win.search_box.setText("")  # the whole list again
    assert win.list.columnWidth(3) <= 260  # elided; whole in the tooltip
    win.select_session(b)
    assert win.rename_current() is None  # 201 characters
    assert "at most 200 characters" in str(errors[0])
    assert store.get_session(b).title.startswith("a title much longer")
    assert win.rename_current() == ""
    assert store.get_session(b).title == "" and win.list.currentItem().text(3) == ""


def test_the_transcript_of_a_session_being_recorded_follows_it(qtbot, tmp_path):
    """While this store records the open session, its transcript is read again when words come: the
    reader at the bottom stays at the bottom, one scrolled up stays where they were, and a selection
    (copying a phrase) is left alone; the timer runs only while the window is shown."""
    store = SessionStore.open(tmp_path / "sessions.sqlite3")
    sid = store.begin_session(started_at="2026-03-02T10:00:00+00:00")

    def say(first: int, n: int) -> None:
        store.apply(sid, EngineUpdate(0, tuple(Word(f"w{i}.", i * 3.0, i * 3.0 + 0.4) for i in range(first, first + n))))

    say(0, 60)  # 60 paragraphs (3 s apart)
    win = HistoryWindow(store)
    qtbot.addWidget(win)
    win.resize(500, 300)
    win.show()
    assert win._follow.isActive()
    bar = win.text.verticalScrollBar()
    bar.setValue(bar.maximum())
    say(60, 5)
    win.follow_recording()
    assert "w64." in win.text.toPlainText()
    assert bar.value() == bar.maximum() > 0  # still at the bottom, where the new words are
    bar.setValue(10)
    say(65, 5)
    win.follow_recording()
    assert "w69." in win.text.toPlainText() and bar.value() == 10  # the reader scrolled up stays there
    cursor = win.text.textCursor()
    cursor.setPosition(0)
    cursor.setPosition(5, cursor.MoveMode.KeepAnchor)
    win.text.setTextCursor(cursor)
    say(70, 1)
    win.follow_recording()
    assert "w70." not in win.text.toPlainText()  # a selection is not lost
    win.text.moveCursor(win.text.textCursor().MoveOperation.End)
    qtbot.waitUntil(lambda: "w70." in win.text.toPlainText(), timeout=15_000)  # the timer reads it
    other = store.begin_session(started_at="2026-03-02T11:00:00+00:00")  # the app starts another
    win.follow_recording()
    assert win.session_ids() == [other, sid] and win.current_session() == sid  # listed; the open one stays
    win.hide()
    assert not win._follow.isActive()


def test_the_history_works_from_the_keyboard_and_names_its_parts(qtbot, tmp_path):
    """Ctrl+F searches, Enter finds, Escape clears, Delete on the list deletes after asking; the
    search box, the list and the transcript have accessible names."""
    from PySide6.QtWidgets import QApplication

    store, a, b = make_store(tmp_path)
    asked: list[int] = []
    win = HistoryWindow(store, confirm_delete=lambda info: asked.append(info.id) or True)
    qtbot.addWidget(win)
    win.show()
    win.activateWindow()
    qtbot.waitUntil(win.isActiveWindow)
    assert (win.search_box.accessibleName(), win.list.accessibleName(), win.text.accessibleName()) == (
        "Search all sessions", "Sessions", "Transcript")
    win.list.setFocus()
    qtbot.keyClick(win.list, Qt.Key.Key_F, Qt.KeyboardModifier.ControlModifier)
    assert QApplication.focusWidget() is win.search_box
    qtbot.keyClicks(win.search_box, "krill")
    qtbot.keyClick(win.search_box, Qt.Key.Key_Return)
    assert win.session_ids() == [b]
    qtbot.keyClick(win.search_box, Qt.Key.Key_Escape)
    assert win.search_box.text() == "" and win.session_ids() == [b, a]
    win.list.setFocus()
    win.select_session(a)
    qtbot.keyClick(win.list, Qt.Key.Key_Delete)
    assert asked == [a] and win.session_ids() == [b]


def test_next_mark_goes_through_the_moments_marked(qtbot, tmp_path):
    """Next mark (or Ctrl+M) highlights the marked moments' lines and goes to each in turn; it is
    enabled only for a session with marks; after it, Enter in the search box searches again."""
    store, a, b = make_store(tmp_path)
    store.add_mark(b, 0.7)
    store.add_mark(b, 2.6, "krill")
    win = HistoryWindow(store)
    qtbot.addWidget(win)
    win.show()
    win.activateWindow()
    qtbot.waitUntil(win.isActiveWindow)
    win.select_session(a)
    assert not win.buttons["marks"].isEnabled()
    win.select_session(b)
    assert win.buttons["marks"].isEnabled()
    text = win.text.toPlainText()
    assert [text[x:y] for x, y in mark_spans(text)] == ["[00:00:00] ★ Marked", "[00:00:02] ★ Marked: krill"]
    win.buttons["marks"].click()
    assert win.found_label.text() == "1 of 2 marks in this session"
    assert win.text.textCursor().selectedText() == "[00:00:00] ★ Marked"
    qtbot.keyClick(win.text, Qt.Key.Key_M, Qt.KeyboardModifier.ControlModifier)
    assert win.found_label.text() == "2 of 2 marks in this session"
    assert win.text.textCursor().selectedText() == "[00:00:02] ★ Marked: krill"
    win.search_box.setText("whales")
    qtbot.keyClick(win.search_box, Qt.Key.Key_Return)
    assert win.found_label.text() == "1 place in this session"  # the words, not the mark's note


def test_note_writes_what_the_selected_mark_was(qtbot, tmp_path):
    """Note… (or Ctrl+Shift+M) on the mark Next mark selected asks with its note, stores the new
    one and shows it on the mark's line, which stays selected; with no mark selected it is the
    first; a note too long is refused (the error signal) and the old one kept; enabled only where
    there are marks."""
    store, a, b = make_store(tmp_path)
    store.add_mark(b, 0.7)
    store.add_mark(b, 2.6, "krill")
    answers, asked = ["whales first", "the krill part", "x" * 501], []

    def ask(current):
        asked.append(current)
        return answers.pop(0)

    win = HistoryWindow(store, ask_note=ask)
    qtbot.addWidget(win)
    win.show()
    win.activateWindow()
    qtbot.waitUntil(win.isActiveWindow)
    win.select_session(a)
    assert not win.buttons["note"].isEnabled() and win.note_current_mark() is None
    win.select_session(b)
    assert win.buttons["note"].isEnabled()
    win.buttons["note"].click()  # nothing selected yet: the first mark
    assert asked == [""] and store.session_marks(b)[0].note == "whales first"
    assert win.text.textCursor().selectedText() == "[00:00:00] ★ Marked: whales first"
    win.next_mark()
    qtbot.keyClick(win.text, Qt.Key.Key_M, Qt.KeyboardModifier.ControlModifier | Qt.KeyboardModifier.ShiftModifier)
    assert asked[-1] == "krill" and store.session_marks(b)[1].note == "the krill part"
    assert win.text.textCursor().selectedText() == "[00:00:02] ★ Marked: the krill part"
    assert win.found_label.text() == "2 of 2 marks in this session"
    with qtbot.waitSignal(win.error) as refused:
        assert win.note_current_mark() is None
    assert "at most 500 characters" in str(refused.args[0])
    assert store.session_marks(b)[1].note == "the krill part"
