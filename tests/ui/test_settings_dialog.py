"""Settings dialog: every field has an editor, edits round-trip, invalid input is explained."""

from __future__ import annotations

import dataclasses

from PySide6.QtWidgets import QDialogButtonBox, QLabel

from captioner.storage.settings import (
    AudioConfig,
    CaptionStyle,
    EngineConfig,
    Settings,
    TranscriptConfig,
    load_settings,
    save_settings,
)
from captioner.ui.settings_dialog import SECTIONS, SettingsDialog


def test_every_setting_has_an_editor_grouped_in_four_tabs(qtbot):
    d = SettingsDialog(Settings(), ["tiny"])
    qtbot.addWidget(d)
    assert [d.tabs.tabText(i) for i in range(d.tabs.count())] == ["Captions", "Audio", "Model", "Transcripts"]
    for section in SECTIONS:
        for f in dataclasses.fields(getattr(Settings(), section)):
            assert (section, f.name) in d.editors


def test_untouched_dialog_returns_the_same_settings(qtbot):
    start = Settings(captions=CaptionStyle(lines=4, font_size=30, dock="top"), window={"k": (1, 2, 3, 4)})
    d = SettingsDialog(start)
    qtbot.addWidget(d)
    assert d.current_settings() == start


def test_edits_round_trip_through_the_file(qtbot, tmp_path):
    d = SettingsDialog(Settings(), ["tiny", "base"])
    qtbot.addWidget(d)
    e = d.editors
    with qtbot.waitSignal(d.settings_changed):
        e[("captions", "lines")].setValue(4)
    e[("captions", "background_opacity")].setValue(0.35)
    e[("captions", "stable_only")].setChecked(True)
    e[("captions", "dock")].setCurrentText("float")
    e[("captions", "text_color")].line_edit.setText("#112233")
    e[("audio", "source")].setCurrentText("both")
    e[("engine", "model")].setCurrentText("base")
    e[("engine", "provider")].setCurrentText("cpu")
    e[("engine", "language")].setText("de")
    e[("transcripts", "label_mic")].setText("Me")
    e[("transcripts", "retention_days")].setValue(30)
    expected = Settings(
        captions=CaptionStyle(lines=4, background_opacity=0.35, stable_only=True, dock="float",
                              text_color="#112233"),
        audio=AudioConfig(source="both"),
        engine=EngineConfig(model="base", provider="cpu", language="de"),
        transcripts=TranscriptConfig(label_mic="Me", retention_days=30),
    )
    got = d.current_settings()
    assert got == expected
    save_settings(got, tmp_path / "settings.json")
    assert load_settings(tmp_path / "settings.json") == (expected, [])


def test_invalid_values_are_explained_and_block_ok(qtbot):
    d = SettingsDialog(Settings())
    qtbot.addWidget(d)
    ok = d.buttons.button(QDialogButtonBox.StandardButton.Ok)
    d.editors[("captions", "text_color")].line_edit.setText("white")
    assert not d.valid and not ok.isEnabled()
    assert "Text colour" in d.message.text()
    assert d.current_settings().captions.text_color == "#FFFFFF"  # last valid value kept
    d.editors[("transcripts", "label_system")].setText("  ")
    assert "Label for system audio" in d.message.text()
    d.editors[("captions", "text_color")].line_edit.setText("#ABCDEF")
    d.editors[("transcripts", "label_system")].setText("Them")
    assert d.valid and ok.isEnabled()
    assert d.current_settings().captions.text_color == "#ABCDEF"


def test_spin_boxes_carry_the_setting_ranges(qtbot):
    d = SettingsDialog(Settings())
    qtbot.addWidget(d)
    lines = d.editors[("captions", "lines")]
    assert (lines.minimum(), lines.maximum()) == (1, 6)
    step = d.editors[("engine", "step_s")]
    assert (step.minimum(), step.maximum()) == (0.5, 3.0)


def test_the_vocabulary_is_a_few_lines_of_text_with_what_it_is_for(qtbot):
    d = SettingsDialog(Settings())
    qtbot.addWidget(d)
    box = d.editors[("engine", "vocabulary")]
    assert "separated by commas or lines" in box.text_edit.toolTip()
    assert "spells them right" in " ".join(label.text() for label in box.findChildren(QLabel))
    with qtbot.waitSignal(d.settings_changed) as changed:
        box.text_edit.setPlainText("Schoeffer, Gutenberg\nmissal")
    assert changed.args[0].engine.vocabulary == "Schoeffer, Gutenberg\nmissal"
    box.text_edit.setPlainText("x" * 4001)
    assert not d.valid and "Vocabulary (names, terms)" in d.message.text()
    assert d.current_settings().engine.vocabulary == "Schoeffer, Gutenberg\nmissal"


def test_measure_asks_the_app_and_selects_the_model_it_chose(qtbot):
    assert SettingsDialog(Settings(), ["base", "tiny.en"]).measure_button is None  # the app measures: none to ask
    d = SettingsDialog(Settings(), ["base", "tiny.en"], can_measure=True)
    qtbot.addWidget(d)
    d.editors[("engine", "step_s")].setValue(1.0)
    with qtbot.waitSignal(d.measure_requested) as asked:
        d.measure_button.click()
    assert asked.args[0].engine.step_s == 1.0  # the settings as edited
    d.show_measuring("Measuring tiny.en (38 M parameters) …")
    assert not d.measure_button.isEnabled() and "Captions are paused" in d.measure_report.text()
    report = "model  size\ntiny.en  38 M  keeps up\n\nThe largest model that keeps up here: tiny.en (…)."
    with qtbot.waitSignal(d.settings_changed) as changed:
        d.show_measured(report, "tiny.en")
    assert changed.args[0].engine.model == "tiny.en" and d.current_settings().engine.model == "tiny.en"
    assert d.measure_table.text() == "model  size\ntiny.en  38 M  keeps up" and d.measure_button.isEnabled()
    assert d.measure_report.text().endswith("tiny.en is now selected: OK captions with it.")
    d.show_measured(report, "tiny.en")
    assert d.measure_report.text().endswith("It is your model already.")
    d.editors[("engine", "model")].setCurrentText("")  # "" = the first installed
    d.show_measured(report.replace("tiny.en", "base"), "base")
    assert d.measure_report.text().endswith("It is your model already.")
    assert d.current_settings().engine.model == ""
    d.show_measured("table\n\nNo installed model keeps up here.", None)
    assert d.current_settings().engine.model == "" and d.measure_report.text() == "No installed model keeps up here."
    d.show_measure_failed("no model pack installed")
    assert d.measure_report.text() == "Could not measure: no model pack installed" and not d.measure_table.isVisible()
