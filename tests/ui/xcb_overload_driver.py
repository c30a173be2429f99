"""Runs the real app on a real X display with an engine too slow for real time, and reports what it showed.

Started by ``test_overload_xvfb.py`` as a subprocess. The app is assembled as ``captioner`` assembles it
(``commands.gui`` factories: real FileSource at real-time pace, real engine on the given pack, real
store), except that every encoder dispatch sleeps ``--slow-rtf`` times its audio during the first
``--slow-s`` seconds after the first dispatch (a machine too slow for real time, then the load goes
away; a dispatch still sleeping then ends: an opening round's encoder input is padded to 6 s, and
three times that in one dispatch would outlast the load by far). Every 100 ms the driver records the caption bar's lag badge and the tray's status line;
when the bar first says "skipping" it renders the bar to PNG. When the file has ended it exports the
session as SRT, quits through the tray and prints a JSON report. ``--no-adapt-step``: the lag rule
keeps the settings' step (the skip rule alone, as on a machine too slow even at the longest step).

Usage: python tests/ui/xcb_overload_driver.py --home DIR --pack DIR --wav FILE --out DIR
"""

from __future__ import annotations

import argparse
import faulthandler
import json
import sys
import time
from pathlib import Path

from PySide6.QtCore import QTimer
from PySide6.QtWidgets import QApplication

from captioner.app import CaptionerApp, GuiOptions
from captioner.commands.gui import capture_factory, engine_factory
from captioner.engine import OnnxAcousticModel, overload
from captioner.storage.paths import AppPaths
from captioner.transcript.export import export_session

DEADLINE_MS = 240_000


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--home", type=Path, required=True)
    ap.add_argument("--pack", type=Path, required=True)
    ap.add_argument("--wav", type=Path, required=True)
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--slow-s", type=float, default=6.0)
    ap.add_argument("--slow-rtf", type=float, default=3.0)
    ap.add_argument("--no-adapt-step", action="store_true",
                    help="the lag rule without its longer step (the skip rule alone)")
    args = ap.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    faulthandler.dump_traceback_later(120, exit=False)

    encode = OnnxAcousticModel.encode
    slow_until: list[float] = []

    def slow_encode(self, audio, *, native_30s=False):
        if not slow_until:
            slow_until.append(time.monotonic() + args.slow_s)
        now = time.monotonic()
        if now < slow_until[0]:  # a dispatch still running when the load goes away ends then
            time.sleep(min(args.slow_rtf * audio.size / 16_000, slow_until[0] - now))
        return encode(self, audio, native_30s=native_30s)

    OnnxAcousticModel.encode = slow_encode  # type: ignore[method-assign]
    if args.no_adapt_step:
        governor_init = overload.LagGovernor.__init__

        def fixed_step(self, *a, **kw):
            governor_init(self, *a, **{**kw, "adapt_step": False})

        overload.LagGovernor.__init__ = fixed_step  # type: ignore[method-assign]

    qapp = QApplication(sys.argv[:1])
    qapp.setQuitOnLastWindowClosed(False)
    paths = AppPaths.default(args.home)
    app = CaptionerApp(paths, GuiOptions(source_file=args.wav, model=str(args.pack)),
                       engine_factory=engine_factory, capture_factory=capture_factory(args.wav))
    infos: list[str] = []
    show_info = app.tray.show_info
    app.tray.show_info = lambda title, msg: (infos.append(title), show_info(title, msg))  # type: ignore[method-assign]
    t0 = time.monotonic()
    report: dict = {"platform": qapp.platformName(), "samples": [], "infos": infos}

    def sample() -> None:
        report["samples"].append([round(time.monotonic() - t0, 2), app.bar.lag_visible, app.bar.lag_text,
                                  app.tray.status_text()])
        if "skipping" in app.bar.lag_text and "skipping_shot" not in report:
            report["skipping_shot"] = str(args.out / "caption-bar-skipping.png")
            app.bar.render_png(report["skipping_shot"])

    sampler = QTimer()
    sampler.setInterval(100)
    sampler.timeout.connect(sample)

    def on_status(state: str) -> None:
        if state == "ended":
            QTimer.singleShot(300, after_end)

    def after_end() -> None:
        sample()
        sampler.stop()
        report["slow_until_s"] = round(slow_until[0] - t0, 2) if slow_until else None
        report["session_id"] = app.session_id
        report["gaps"] = [[g.start, g.end] for g in app.store.session_gaps(app.session_id)]
        report["srt"] = str(export_session(app.store, app.session_id, args.out / "overloaded-session.srt"))
        app.tray.actions["quit"].trigger()

    app.state_changed.connect(on_status)
    app.start()
    sampler.start()
    QTimer.singleShot(DEADLINE_MS, lambda: (report.setdefault("error", "deadline"), qapp.exit(3)))
    code = qapp.exec()
    report["exit_code"] = code
    print("REPORT " + json.dumps(report))
    return code


if __name__ == "__main__":
    sys.exit(main())
