"""Settings → Model → "Measure on this computer…" in the app, with the real measurement behind it
(``captioner models choose``'s, the real tiny.en pack on a real clip)."""

from __future__ import annotations

from pathlib import Path

from captioner import cli
from captioner.app import CaptionerApp, EngineRun, GuiOptions
from captioner.bench import model_choice
from captioner.commands._choose import measure_function
from captioner.storage.paths import AppPaths
from captioner.ui.settings_dialog import SettingsDialog
from tests.ui.fakes import FakeCapture, FakeStream

CLIP = Path(__file__).resolve().parents[1] / "data" / "speech" / "1089-134691-0001.wav"  # 5.4 s


def test_the_apps_measure_button_runs_the_same_measurement(qtbot, tmp_path, monkeypatch, real_tiny_en_pack) -> None:
    monkeypatch.setattr(model_choice, "MAX_SHARE", 0.95)  # the machine's margin: any compute under real time
    paths = AppPaths.default(tmp_path / "home")
    paths.packs.mkdir(parents=True)
    (paths.packs / "tiny.en").symlink_to(real_tiny_en_pack.root, target_is_directory=True)
    assert cli.run(["settings", "set", "engine.language", "en"], paths) == 0
    app = CaptionerApp(paths, GuiOptions(provider="cpu"),
                       engine_factory=lambda s, sources, p: EngineRun({"system": FakeStream("system")}, "FAKE", "FAKE", "x"),
                       capture_factory=lambda s: ((lambda: FakeCapture(finite=False)), ("system",)),
                       measure_models=measure_function(paths, audio=CLIP))
    qtbot.addWidget(app.bar)
    app.start()
    app.tray.actions["settings"].trigger()
    dialog = app._settings_dialog
    assert isinstance(dialog, SettingsDialog) and dialog.isVisible()
    dialog.editors[("engine", "model")].setCurrentText("")
    dialog.measure_button.click()
    qtbot.waitUntil(lambda: "Measuring tiny.en (38 M parameters)" in dialog.measure_report.text(), timeout=10_000)
    assert app.paused
    qtbot.waitUntil(lambda: dialog.measure_button.isEnabled(), timeout=60_000)
    table = dialog.measure_table.text().splitlines()
    assert table[0].startswith("model") and table[1].startswith("tiny.en") and table[1].endswith("keeps up")
    assert dialog.measure_report.text().startswith("The largest model that keeps up here: tiny.en")
    assert dialog.measure_report.text().endswith("It is your model already.")  # "" = the first installed
    qtbot.waitUntil(lambda: not app.paused, timeout=5000)
    dialog.reject()
    app.tray.actions["quit"].trigger()
    qtbot.waitUntil(lambda: not app.running, timeout=10_000)
