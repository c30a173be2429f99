"""The settings dialog: every field of :class:`~captioner.storage.settings.Settings`, in four tabs.

The editors are generated from the settings dataclasses (their ``Literal`` choices and numeric
ranges, via :func:`~captioner.storage.settings.choices` and
:func:`~captioner.storage.settings.limits`), so a new setting appears here without UI code.
Every edit rebuilds the section with the dataclass's own validation: a valid change is emitted
at once as ``settings_changed`` (the app applies it live where it can), an invalid one shows
the validator's message under the tabs and disables OK.
"""

from __future__ import annotations

import dataclasses
import typing
from collections.abc import Sequence
from typing import Any

from PySide6.QtCore import Qt, Signal
from PySide6.QtGui import QColor, QFontDatabase
from PySide6.QtWidgets import (
    QCheckBox,
    QColorDialog,
    QComboBox,
    QDialog,
    QDialogButtonBox,
    QDoubleSpinBox,
    QFileDialog,
    QFontComboBox,
    QFormLayout,
    QHBoxLayout,
    QLabel,
    QLineEdit,
    QPlainTextEdit,
    QPushButton,
    QSpinBox,
    QTabWidget,
    QVBoxLayout,
    QWidget,
)

from captioner.storage.settings import Settings, choices, limits

__all__ = ["SECTIONS", "SettingsDialog"]

SECTIONS = {"captions": "Captions", "audio": "Audio", "engine": "Model", "transcripts": "Transcripts"}

LABELS = {
    "lines": "Lines",
    "font_family": "Font",
    "font_size": "Font size (pt)",
    "text_color": "Text colour",
    "background_color": "Background colour",
    "background_opacity": "Background opacity",
    "outline": "Outline around text",
    "dock": "Position",
    "locked": "Lock position and size",
    "click_through": "Click-through (mouse passes through)",
    "stable_only": "Stable words only (hide the sentence being spoken until it closes)",
    "min_dwell_s": "Minimum time a line stays (s)",
    "clear_after_silence_s": "Clear after silence (s, 0 = keep last line)",
    "show_source_labels": "Label and colour sources in “both” mode",
    "mic_color": "Microphone colour",
    "system_color": "System audio colour",
    "theme": "Theme",
    "source": "Source",
    "mic_device": "Microphone device (empty = default)",
    "mix_both": "Mix both sources into one stream",
    "model": "Model pack",
    "provider": "Provider",
    "language": "Language (code, “auto”, or yours: “en, de”)",
    "task": "Task",
    "step_s": "Step (s of audio per round)",
    "silence_floor_dbfs": "Silence floor (dBFS)",
    "vocabulary": "Vocabulary (names, terms)",
    "save_sessions": "Save sessions",
    "retention_days": "Keep sessions for (days, 0 = forever)",
    "export_dir": "Export folder (empty = default)",
    "live_export": "Live subtitle file",
    "label_mic": "Label for the microphone",
    "label_system": "Label for system audio",
    "max_line_chars": "Characters per subtitle line",
    "max_lines": "Lines per subtitle cue",
}


VOCABULARY_HELP = ("Names, products and terms that are said in your meetings, separated by commas or lines. "
                   "Whisper is told about them before it listens, so that it spells them right. "
                   "Leave empty when there are none: a long list makes every round slower.")


class SettingsDialog(QDialog):
    """Edit a :class:`Settings` value.

    Args:
        settings: the settings to start from.
        models: installed model pack names offered for ``engine.model``.
        parent: parent widget.

        can_measure: offer "Measure on this computer…" beside the model (the app measures: the
            dialog only asks and shows what it hears back).

    Signals:
        settings_changed(Settings): a valid edit (for live application).
        measure_requested(Settings): the user asked to measure the installed models with the
            settings as edited (provider, step, sources); answered by :meth:`show_measuring`, then
            :meth:`show_measured` or :meth:`show_measure_failed`.
    """

    settings_changed = Signal(object)
    measure_requested = Signal(object)

    def __init__(self, settings: Settings, models: Sequence[str] = (), parent: QWidget | None = None, *,
                 can_measure: bool = False) -> None:
        super().__init__(parent)
        self.setWindowTitle("captioner — Settings")
        self._settings = settings
        self._models = list(models)
        self._can_measure = can_measure
        self.measure_button: QPushButton | None = None
        self.measure_table = QLabel("")  # the measurement's table (monospace, its columns aligned)
        self.measure_table.setFont(QFontDatabase.systemFont(QFontDatabase.SystemFont.FixedFont))
        self.measure_report = QLabel("")  # its progress, then its conclusion
        self.measure_report.setWordWrap(True)
        for label in (self.measure_table, self.measure_report):
            label.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
            label.setVisible(False)
        self._getters: dict[tuple[str, str], typing.Callable[[], Any]] = {}
        self.editors: dict[tuple[str, str], QWidget] = {}
        self.tabs = QTabWidget(self)
        for section, title in SECTIONS.items():
            self.tabs.addTab(self._build_section(section), title)
        self.message = QLabel("", self)
        self.message.setWordWrap(True)
        self.message.setStyleSheet("color: #c0392b;")
        self.buttons = QDialogButtonBox(
            QDialogButtonBox.StandardButton.Ok | QDialogButtonBox.StandardButton.Cancel, self
        )
        self.buttons.accepted.connect(self.accept)
        self.buttons.rejected.connect(self.reject)
        layout = QVBoxLayout(self)
        layout.addWidget(self.tabs)
        layout.addWidget(self.message)
        layout.addWidget(self.buttons)

    # ------------------------------------------------------------ public API
    def current_settings(self) -> Settings:
        """The settings as edited so far (the last valid state of every section)."""
        return self._settings

    @property
    def valid(self) -> bool:
        """False while an editor holds a value its section rejects."""
        return not self.message.text()

    def show_measuring(self, line: str) -> None:
        """The measurement's progress (one line: the model being measured)."""
        self._set_measure_report("", f"{line}\nCaptions are paused while the models are measured.", busy=True)

    def show_measured(self, report: str, chosen: str | None) -> None:
        """The measurement's report (its table, a blank line, its conclusion); the chosen pack becomes
        the model (OK keeps it)."""
        table, _, conclusion = report.partition("\n\n")
        if chosen is not None:
            combo = self.editors[("engine", "model")]
            assert isinstance(combo, QComboBox)
            current = combo.currentText() or (self._models[0] if self._models else "")  # "" = the first
            if chosen == current:
                conclusion += " It is your model already."
            else:
                combo.setCurrentText(chosen)
                conclusion += f" {chosen} is now selected: OK captions with it."
        self._set_measure_report(table, conclusion)

    def show_measure_failed(self, message: str) -> None:
        """The measurement could not run (no model installed, a recording it could not read)."""
        self._set_measure_report("", f"Could not measure: {message}")

    def _set_measure_report(self, table: str, text: str, *, busy: bool = False) -> None:
        self.measure_table.setText(table)
        self.measure_table.setVisible(bool(table))
        self.measure_report.setText(text)
        self.measure_report.setVisible(bool(text))
        if self.measure_button is not None:
            self.measure_button.setEnabled(not busy)

    # ------------------------------------------------------------- building
    def _build_section(self, section: str) -> QWidget:
        page = QWidget()
        form = QFormLayout(page)
        value = getattr(self._settings, section)
        for f in dataclasses.fields(value):
            editor, getter = self._editor(section, type(value), f.name, getattr(value, f.name))
            self.editors[(section, f.name)] = editor
            self._getters[(section, f.name)] = getter
            form.addRow(LABELS.get(f.name, f.name.replace("_", " ").capitalize()), editor)
            if (section, f.name) == ("engine", "model") and self._can_measure:
                form.addRow("", self._measure_row())
        return page

    def _measure_row(self) -> QWidget:
        """"Measure on this computer…" and, under it, what the measurement says."""
        box = QWidget()
        column = QVBoxLayout(box)
        column.setContentsMargins(0, 0, 0, 0)
        button = QPushButton("Measure on this computer…")
        button.setToolTip("Caption 23 s of speech live with every installed model, on the provider and step "
                          "chosen here, and select the largest that keeps up (about 25 s per model; captions "
                          "pause meanwhile)")
        button.clicked.connect(lambda: self.measure_requested.emit(self._settings))
        self.measure_button = button
        column.addWidget(button, 0, Qt.AlignmentFlag.AlignLeft)
        column.addWidget(self.measure_table)
        column.addWidget(self.measure_report)
        return box

    def _editor(self, section: str, cls: type, name: str, value: Any) -> tuple[QWidget, Any]:
        hint = typing.get_type_hints(cls)[name]
        changed = self._on_editor_changed
        options = choices(cls, name)
        if section == "engine" and name == "model":
            combo = QComboBox()
            combo.setEditable(True)
            combo.addItem("")  # "" = the first installed pack
            combo.addItems(self._models)
            combo.setCurrentText(value)
            combo.currentTextChanged.connect(changed)
            return combo, combo.currentText
        if options is not None:
            combo = QComboBox()
            combo.addItems(list(options))
            combo.setCurrentText(value)
            combo.currentTextChanged.connect(changed)
            return combo, combo.currentText
        if hint is bool:
            box = QCheckBox()
            box.setChecked(value)
            box.toggled.connect(changed)
            return box, box.isChecked
        if hint is int:
            spin = QSpinBox()
            lo, hi = limits(cls, name) or (-(2**31), 2**31 - 1)
            spin.setRange(int(lo), int(hi))
            spin.setValue(int(value))
            spin.valueChanged.connect(changed)
            return spin, spin.value
        if hint is float:
            dspin = QDoubleSpinBox()
            lo, hi = limits(cls, name) or (-1e9, 1e9)
            dspin.setRange(float(lo), float(hi))
            dspin.setDecimals(2)
            dspin.setSingleStep(0.05 if hi <= 1.0 else 0.5)
            dspin.setValue(float(value))
            dspin.valueChanged.connect(changed)
            return dspin, dspin.value
        if name == "vocabulary":
            return self._vocabulary_editor(value, changed)
        if name == "font_family":
            font = QFontComboBox()
            font.setEditable(True)
            font.setCurrentText(value)
            font.currentTextChanged.connect(changed)
            return font, font.currentText
        line = QLineEdit(value)
        line.textChanged.connect(changed)
        if name.endswith("_color"):
            return self._with_button(line, "…", lambda: self._pick_color(line)), line.text
        if name.endswith("_dir"):
            return self._with_button(line, "Browse…", lambda: self._pick_dir(line)), line.text
        return line, line.text

    def _vocabulary_editor(self, value: str, changed: typing.Callable[..., None]) -> tuple[QWidget, Any]:
        """A few lines of text for the vocabulary, with what it is for."""
        text = QPlainTextEdit(value)
        text.setPlaceholderText("Schoeffer, Gutenberg, missal")
        text.setToolTip(VOCABULARY_HELP)
        text.setFixedHeight(4 * text.fontMetrics().lineSpacing() + 12)
        text.textChanged.connect(changed)
        box = QWidget()
        column = QVBoxLayout(box)
        column.setContentsMargins(0, 0, 0, 0)
        column.addWidget(text)
        help_label = QLabel(VOCABULARY_HELP)
        help_label.setWordWrap(True)
        help_label.setStyleSheet("color: palette(mid);")
        column.addWidget(help_label)
        box.text_edit = text  # type: ignore[attr-defined]  # for tests and accessibility
        return box, text.toPlainText

    def _with_button(self, line: QLineEdit, text: str, slot: typing.Callable[[], None]) -> QWidget:
        box = QWidget()
        row = QHBoxLayout(box)
        row.setContentsMargins(0, 0, 0, 0)
        row.addWidget(line)
        button = QPushButton(text)
        button.clicked.connect(slot)
        row.addWidget(button)
        box.line_edit = line  # type: ignore[attr-defined]  # for tests and accessibility
        return box

    def _pick_color(self, line: QLineEdit) -> None:
        color = QColorDialog.getColor(QColor(line.text()), self, "Choose a colour")
        if color.isValid():
            line.setText(color.name().upper())

    def _pick_dir(self, line: QLineEdit) -> None:
        path = QFileDialog.getExistingDirectory(self, "Export folder", line.text())
        if path:
            line.setText(path)

    # ----------------------------------------------------------- validation
    def _on_editor_changed(self, *_: Any) -> None:
        problems = []
        new = self._settings
        for section in SECTIONS:
            old = getattr(new, section)
            values = {f.name: self._getters[(section, f.name)]() for f in dataclasses.fields(old)}
            try:
                new = dataclasses.replace(new, **{section: dataclasses.replace(old, **values)})
            except ValueError as exc:
                problems.append(_human(str(exc)))
        self.message.setText("\n".join(problems))
        self.buttons.button(QDialogButtonBox.StandardButton.Ok).setEnabled(not problems)
        if new != self._settings:
            self._settings = new
            self.settings_changed.emit(new)


def _human(message: str) -> str:
    """``"CaptionStyle.text_color: 'x' does not match ..."`` → ``"Text colour: 'x' does not match ..."``."""
    where, _, what = message.partition(": ")
    name = where.rpartition(".")[2]
    return f"{LABELS.get(name, name)}: {what}" if what else message
