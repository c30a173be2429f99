"""Tray icon: every menu item emits its intent; state shows in the tooltip; left click toggles."""

from __future__ import annotations

from PySide6.QtWidgets import QSystemTrayIcon

from captioner.ui.icons import app_icon, paused_icon
from captioner.ui.tray import EXPORT_FORMATS, PROVIDERS, SOURCES, TrayIcon


def make_tray(asked=None):
    def ask(fmt, suggested):
        if asked is not None:
            asked.append((fmt, suggested))
        return f"/tmp/out.{fmt}"

    return TrayIcon(app_icon(), paused_icon(), ask_save_path=ask, export_dir="/data/exports")


def test_icons_load_from_resources():
    assert not app_icon().isNull() and not paused_icon().isNull()
    img = app_icon().pixmap(32, 32).toImage()
    assert not img.isNull()
    assert len({img.pixel(x, y) for x in range(32) for y in range(32)}) > 3  # drawn, not empty


def test_simple_items_emit_their_intents(qtbot):
    tray = make_tray()
    for name, signal in [
        ("show", tray.toggle_captions_requested),
        ("copy", tray.copy_requested),
        ("mark", tray.mark_requested),
        ("open_folder", tray.open_folder_requested),
        ("history", tray.history_requested),
        ("settings", tray.settings_requested),
        ("install", tray.install_requested),
        ("quit", tray.quit_requested),
    ]:
        with qtbot.waitSignal(signal, timeout=1000):
            tray.actions[name].trigger()


def test_checkable_items_emit_their_state(qtbot):
    tray = make_tray()
    for name, signal in [("pause", tray.pause_toggled), ("dont_save", tray.dont_save_toggled),
                         ("click_through", tray.click_through_toggled)]:
        with qtbot.waitSignal(signal, timeout=1000) as on:
            tray.actions[name].trigger()
        assert on.args == [True]
        with qtbot.waitSignal(signal, timeout=1000) as off:
            tray.actions[name].trigger()
        assert off.args == [False]


def test_source_and_provider_choices(qtbot):
    tray = make_tray()
    for key in SOURCES:
        with qtbot.waitSignal(tray.source_chosen, timeout=1000) as got:
            tray.actions[f"source:{key}"].trigger()
        assert got.args == [key]
    for key in PROVIDERS:
        with qtbot.waitSignal(tray.provider_chosen, timeout=1000) as got:
            tray.actions[f"provider:{key}"].trigger()
        assert got.args == [key]
    tray.set_source("mic")
    assert tray.actions["source:mic"].isChecked() and not tray.actions["source:system"].isChecked()


def test_model_submenu_lists_packs_and_emits_the_choice(qtbot):
    tray = make_tray()
    tray.set_models(["tiny", "base"], "base")
    assert tray.actions["model:base"].isChecked()
    with qtbot.waitSignal(tray.model_chosen, timeout=1000) as got:
        tray.actions["model:tiny"].trigger()
    assert got.args == ["tiny"]
    tray.set_models([], "")
    assert "model:tiny" not in tray.actions


def test_save_asks_for_a_path_then_emits_format_and_path(qtbot):
    asked = []
    tray = make_tray(asked)
    for fmt in EXPORT_FORMATS:
        with qtbot.waitSignal(tray.save_requested, timeout=1000) as got:
            tray.actions[f"save:{fmt}"].trigger()
        assert got.args == [fmt, f"/tmp/out.{fmt}"]
    assert asked[0] == ("srt", "/data/exports/captions.srt")


def test_cancelled_save_dialog_emits_nothing(qtbot):
    tray = TrayIcon(app_icon(), ask_save_path=lambda fmt, s: None)
    with qtbot.assertNotEmitted(tray.save_requested):
        tray.actions["save:srt"].trigger()


def test_tooltip_shows_state_provider_and_lag():
    tray = make_tray()
    tray.set_status(state="listening", provider="QNN-HTP", lag_s=0.4)
    tip = tray.tray.toolTip()
    assert "Listening" in tip and "QNN-HTP" in tip and "lag 0.4 s" in tip
    assert tray.actions["status"].text() == tray.status_text()
    tray.set_status(lag_s=4.2, lag_state="skipping")
    assert "behind — skipping, lag 4.2 s" in tray.tray.toolTip()
    assert tray.actions["status"].text() == tray.status_text()
    tray.set_status(lag_s=2.3, lag_state="slower", step_s=2.0)  # keeping up with a longer step
    assert "captions every 2 s to keep up, lag 2.3 s" in tray.tray.toolTip()
    tray.set_status(lag_s=2.3, lag_state="ok")  # caught up
    assert "behind" not in tray.tray.toolTip() and "every" not in tray.tray.toolTip()
    assert "lag 2.3 s" in tray.tray.toolTip()


def test_left_click_toggles_captions(qtbot):
    tray = make_tray()
    with qtbot.waitSignal(tray.toggle_captions_requested, timeout=1000):
        tray.tray.activated.emit(QSystemTrayIcon.ActivationReason.Trigger)
    with qtbot.assertNotEmitted(tray.toggle_captions_requested):
        tray.tray.activated.emit(QSystemTrayIcon.ActivationReason.Context)


def test_set_paused_updates_the_item_without_re_emitting(qtbot):
    tray = make_tray()
    with qtbot.assertNotEmitted(tray.pause_toggled):
        tray.set_paused(True)
    assert tray.actions["pause"].isChecked() and tray.actions["pause"].text() == "Resume"
