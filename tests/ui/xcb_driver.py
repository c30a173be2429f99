"""Runs the real app in this process on a real X display (Xvfb + trayer) and drives it like a user.

Started by ``test_gui_xvfb.py`` as a subprocess (the pytest process itself uses the offscreen
platform). The app is assembled exactly as ``captioner`` assembles it (``commands.gui`` factories:
real FileSource, real engine on the given pack, real store under ``--home``). The driver then
uses the real tray menu actions (``QAction.trigger()``), fills in the real save-file dialog,
renders caption-bar screenshots, quits through the tray and prints a JSON report on stdout.

Usage: python tests/ui/xcb_driver.py --home DIR --pack DIR --wav FILE --out DIR
"""

from __future__ import annotations

import argparse
import faulthandler
import json
import sys
from pathlib import Path

from PySide6.QtCore import QPoint, QRect, Qt, QTimer
from PySide6.QtGui import QColor, QFont, QImage, QLinearGradient, QPainter, QPixmap
from PySide6.QtWidgets import QApplication, QFileDialog, QSystemTrayIcon

from captioner.app import CaptionerApp, GuiOptions
from captioner.commands.gui import capture_factory, engine_factory, import_function, install_function
from captioner.core import EngineUpdate, Word
from captioner.storage.paths import AppPaths
from captioner.storage.settings import CaptionStyle
from captioner.ui.caption_bar import CaptionBar

DEADLINE_MS = 240_000  # generous: CI machines with 2 busy cores are slow to create sessions

LIGHT = CaptionStyle(text_color="#111111", background_color="#F4F4F4", background_opacity=0.85, theme="light",
                     system_color="#111111", mic_color="#8A4B00")
DARK = CaptionStyle()
SAMPLE = ("and that is why the quarterly numbers look better than we expected, although the "
          "travel budget still needs another look before Friday")


def scripted_words(text: str, source="system", speculative_tail=2) -> tuple[Word, ...]:
    parts = text.split()
    return tuple(Word(w, i * 0.3, i * 0.3 + 0.25, source=source,
                      speculative=i >= len(parts) - speculative_tail) for i, w in enumerate(parts))


def style_shots(out: Path) -> list[str]:
    """Caption bars in light/dark, 2/4 lines and "both" mode, rendered to PNG."""
    made = []
    variants = [("dark-2", DARK, 2, False), ("dark-4", DARK, 4, False), ("light-2", LIGHT, 2, False),
                ("light-4", LIGHT, 4, False), ("both-dark-2", DARK, 2, True), ("both-light-4", LIGHT, 4, True)]
    for name, base, lines, both in variants:
        style = CaptionStyle(**{**_fields(base), "lines": lines, "min_dwell_s": 0.0})
        bar = CaptionBar(style)
        bar.setGeometry(100, 500, 760, bar.bar_height())
        bar.set_both_mode(both)
        bar.show()
        if both:
            bar.apply_update(EngineUpdate(0, scripted_words("can everyone hear me now", "mic", 0), source="mic"))
            bar.apply_update(EngineUpdate(0, scripted_words("yes loud and clear, go ahead", "system", 0)))
            bar.apply_update(EngineUpdate(0, scripted_words("great so first the budget for next year", "mic"),
                                          source="mic"))
        else:
            bar.apply_update(EngineUpdate(0, scripted_words(SAMPLE)))
        QApplication.processEvents()
        path = out / f"caption-bar-{name}.png"
        bar.render_png(path)
        made.append(str(path))
        bar.close()
        bar.deleteLater()
    return made


def _fields(style: CaptionStyle) -> dict:
    return {f: getattr(style, f) for f in style.__dataclass_fields__}


def desktop_shot(path: Path, size=(1280, 720)) -> None:
    """The README picture: a caption bar over a desktop-like background with a video window."""
    w, h = size
    desk = QPixmap(w, h)
    p = QPainter(desk)
    p.setRenderHint(QPainter.RenderHint.Antialiasing)
    grad = QLinearGradient(0, 0, w, h)
    grad.setColorAt(0.0, QColor("#1d3b5a"))
    grad.setColorAt(1.0, QColor("#5b2a4e"))
    p.fillRect(0, 0, w, h, grad)
    p.fillRect(0, h - 40, w, 40, QColor(20, 20, 24, 230))  # taskbar
    win = QRect(150, 70, 980, 560)
    p.fillRect(win, QColor("#2b2f36"))
    p.fillRect(QRect(win.x(), win.y(), win.width(), 34), QColor("#3a3f47"))
    p.setPen(QColor("#d0d4da"))
    p.setFont(QFont("DejaVu Sans", 11))
    p.drawText(win.x() + 14, win.y() + 23, "Weekly sync — video call")
    tiles = [QColor("#44596e"), QColor("#5d4b6b"), QColor("#3f6358"), QColor("#6b5a44")]
    for i, c in enumerate(tiles):
        r = QRect(win.x() + 20 + (i % 2) * 475, win.y() + 50 + (i // 2) * 250, 460, 235)
        p.fillRect(r, c)
        p.setBrush(QColor(255, 255, 255, 60))
        p.setPen(Qt.PenStyle.NoPen)
        p.drawEllipse(r.center() + QPoint(0, -20), 55, 55)
        p.drawRoundedRect(QRect(r.center().x() - 90, r.center().y() + 45, 180, 70), 35, 35)
    style = CaptionStyle(lines=2, font_size=24, min_dwell_s=0.0)
    bar = CaptionBar(style)
    bar.setGeometry(190, 0, 900, bar.bar_height())
    bar.set_both_mode(True)
    bar.show()
    bar.apply_update(EngineUpdate(0, scripted_words("did the new build fix the crash on startup?", "mic", 0),
                                  source="mic"))
    bar.apply_update(EngineUpdate(0, scripted_words("yes, it starts cleanly now and keeps up", "system")))
    QApplication.processEvents()
    bar.settle()
    bar.render(p, QPoint(190, h - 40 - 24 - bar.height()))
    p.end()
    bar.close()
    desk.save(str(path), "PNG")


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--home", type=Path, required=True)
    ap.add_argument("--pack", type=Path, required=True)
    ap.add_argument("--wav", type=Path, required=True)
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--readme-shot", type=Path)
    args = ap.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    faulthandler.dump_traceback_later(90, exit=False)  # where it hangs, if it ever does

    # Qt's own file dialog (a widget the driver can fill in), never a platform or portal dialog
    # that a CI machine might offer instead.
    QApplication.setAttribute(Qt.ApplicationAttribute.AA_DontUseNativeDialogs, True)
    qapp = QApplication(sys.argv[:1])
    qapp.setQuitOnLastWindowClosed(False)
    paths = AppPaths.default(args.home)
    options = GuiOptions(source_file=args.wav, model=str(args.pack))
    app = CaptionerApp(paths, options, engine_factory=engine_factory, capture_factory=capture_factory(args.wav),
                       install_model=install_function(paths), import_model=import_function(paths))
    report: dict = {"platform": qapp.platformName(), "statuses": []}
    srt_path = args.out / "from-tray.srt"
    srt_path.unlink(missing_ok=True)  # else the dialog asks whether to replace it

    def fill_save_dialog() -> None:
        dialogs = [w for w in QApplication.topLevelWidgets() if isinstance(w, QFileDialog) and w.isVisible()]
        if dialogs:
            report["save_dialog"] = type(dialogs[0]).__name__
            dialogs[0].selectFile(str(srt_path))
            dialogs[0].accept()
        else:
            report["save_dialog_polls"] = report.get("save_dialog_polls", 0) + 1
            QTimer.singleShot(50, fill_save_dialog)

    def on_status(state: str) -> None:
        report["statuses"].append(state)
        if state == "ended":  # the file ran out and the engine flushed: save, shoot, quit
            QTimer.singleShot(300, after_end)

    def after_end() -> None:
        report["bar_lines"] = app.bar.visible_lines()
        report["bar_visible"] = app.bar.isVisible()
        report["session_id"] = app.session_id
        report["stored_words"] = [w.text for w in app.store.session_words(app.session_id)]
        report["tray_geometry"] = list(app.tray.tray.geometry().getRect())
        report["tray_visible"] = app.tray.tray.isVisible()
        geo = app.tray.tray.geometry()
        if geo.isValid() and geo.width() > 0:
            shot = app.bar.screen().grabWindow(0, geo.x(), geo.y(), geo.width(), geo.height())
            shot.save(str(args.out / "tray-icon.png"))
        app.bar.render_png(args.out / "caption-bar-real-engine.png")
        QTimer.singleShot(0, fill_save_dialog)
        app.tray.actions["save:srt"].trigger()  # opens the real QFileDialog (filled in above)
        report["srt"] = str(srt_path)
        report["shots"] = style_shots(args.out)
        if args.readme_shot:
            desktop_shot(args.readme_shot)
            report["readme_shot"] = str(args.readme_shot)
        app.tray.actions["quit"].trigger()

    app.state_changed.connect(on_status)
    app.start()
    report["tray_available"] = QSystemTrayIcon.isSystemTrayAvailable()
    QTimer.singleShot(DEADLINE_MS, lambda: (report.setdefault("error", "deadline"), qapp.exit(3)))
    code = qapp.exec()
    report["exit_code"] = code
    report["running_after_quit"] = app.running
    print("REPORT " + json.dumps(report))
    img = QImage(str(args.out / "caption-bar-real-engine.png"))
    return code if not img.isNull() else 4


if __name__ == "__main__":
    sys.exit(main())
