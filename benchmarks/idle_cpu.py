"""Idle CPU of the app: must stay under 2 % of one core when nothing is being captioned.

Runs the real app in this process (the same parts ``captioner`` assembles: FileSource, the engine
on the given pack, the session store in a temporary ``CAPTIONER_HOME``, caption bar and tray),
lets it caption a short WAV file, then measures this process's CPU time (user + system, all
threads) over a window in two idle states:

* ``paused``: the user paused from the tray (capture stopped, worker asleep);
* ``ended``: the audio ran out (worker idle, the last caption still on the bar).

Usage::

    python benchmarks/idle_cpu.py --model PACK_DIR [--wav FILE] [--seconds 10]

Without a display it uses Qt's offscreen platform. Prints one line per state and exits non-zero
if any state is at or above the limit.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import wave
from pathlib import Path

import numpy as np
import psutil

LIMIT_PERCENT = 2.0  # of one core


def write_tone_wav(path: Path, seconds: float = 3.0) -> Path:
    """A short 16 kHz test signal (a gliding tone), when no WAV is given."""
    t = np.arange(int(16000 * seconds)) / 16000
    x = 0.3 * np.sin(2 * np.pi * (200 + 100 * t) * t)
    with wave.open(str(path), "wb") as w:
        w.setnchannels(1)
        w.setsampwidth(2)
        w.setframerate(16000)
        w.writeframes((x * 32767).astype("<i2").tobytes())
    return path


def main() -> int:
    """Caption the audio, then measure each idle state; 0 when every state is under the limit."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", required=True, help="model pack directory or installed pack name")
    ap.add_argument("--wav", type=Path, help="audio to caption before idling (default: a 3 s tone)")
    ap.add_argument("--seconds", type=float, default=10.0, help="measurement window per state")
    args = ap.parse_args()
    if not os.environ.get("DISPLAY") and not os.environ.get("WAYLAND_DISPLAY"):
        os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")

    from PySide6.QtCore import QTimer
    from PySide6.QtWidgets import QApplication

    from captioner.app import CaptionerApp, GuiOptions
    from captioner.commands.gui import capture_factory, engine_factory
    from captioner.storage.paths import AppPaths

    tmp = Path(tempfile.mkdtemp(prefix="captioner-idle-"))
    wav = args.wav or write_tone_wav(tmp / "tone.wav")
    qapp = QApplication(sys.argv[:1])
    qapp.setQuitOnLastWindowClosed(False)
    paths = AppPaths.default(tmp / "home")
    paths.config.mkdir(parents=True)  # 1 s rounds: more rounds, so the tiny test packs show words too
    (paths.config / "settings.json").write_text('{"engine": {"step_s": 1.0}}')
    app = CaptionerApp(paths, GuiOptions(source_file=wav, model=args.model),
                       engine_factory=engine_factory, capture_factory=capture_factory(wav))
    proc = psutil.Process()
    results: dict[str, float] = {}
    window_ms = int(args.seconds * 1000)

    def measure(name: str, then) -> None:
        start_cpu = sum(proc.cpu_times()[:2])
        start_wall = _now()

        def done() -> None:
            cpu = sum(proc.cpu_times()[:2]) - start_cpu
            wall = _now() - start_wall
            results[name] = 100.0 * cpu / wall
            print(f"{name:7s} idle CPU {results[name]:.2f} % of one core over {wall:.1f} s "
                  f"({cpu * 1000:.0f} ms CPU; words on the bar {len(' '.join(app.bar.visible_lines()).split())}, "
                  f"bar paints so far {app.bar.paint_count})")
            then()

        QTimer.singleShot(window_ms, done)

    def on_state(state: str) -> None:
        if state == "ended" and "ended" not in results:
            QTimer.singleShot(1000, lambda: measure("ended", pause_then_measure))

    def pause_then_measure() -> None:
        app.set_paused(True)
        QTimer.singleShot(1000, lambda: measure("paused", app.quit))

    app.state_changed.connect(on_state)
    app.start()
    qapp.exec()
    worst = max(results.values(), default=float("inf"))
    print(f"limit {LIMIT_PERCENT} %: {'OK' if worst < LIMIT_PERCENT else 'TOO HIGH'}")
    return 0 if len(results) == 2 and worst < LIMIT_PERCENT else 1


def _now() -> float:
    import time

    return time.monotonic()


if __name__ == "__main__":
    sys.exit(main())
