"""Entry point: ``captioner`` (GUI script) and ``python -m captioner``.

Logging and the few environment reads happen here and nowhere else.
"""

from __future__ import annotations

import logging
import logging.handlers
import os
import sys

from captioner.storage.paths import AppPaths

__all__ = ["main"]

NOISY_LOGGERS = ("huggingface_hub", "urllib3", "httpx", "filelock", "matplotlib", "PIL")


class _LogFile(logging.handlers.RotatingFileHandler):
    """The rotating log file. One that cannot be written (a full disk) is said once on stderr and
    left alone from then on: logging's own ``handleError`` prints a traceback for every record,
    which buried a command's output under "--- Logging error ---" on a full disk."""

    broken = False

    def emit(self, record: logging.LogRecord) -> None:
        if not self.broken:
            super().emit(record)

    def handleError(self, record: logging.LogRecord) -> None:
        if self.broken:
            return
        self.broken = True
        exc = sys.exc_info()[1]
        reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
        if sys.stderr is not None:
            sys.stderr.write(f"captioner: cannot write the log file {self.baseFilename} ({reason}); "
                             "not logging to it any more\n")


def setup_logging(paths: AppPaths, verbose: bool) -> None:
    """Log to a rotating file in the user log dir, and warnings (or all with -v) to stderr."""
    root = logging.getLogger()
    root.setLevel(logging.DEBUG if verbose else logging.INFO)
    fmt = logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s")
    try:
        paths.logs.mkdir(parents=True, exist_ok=True)
        fileh = _LogFile(paths.logs / "captioner.log", maxBytes=2_000_000, backupCount=3, encoding="utf-8")
        fileh.setFormatter(fmt)
        root.addHandler(fileh)
    except OSError:
        pass  # a read-only home must not stop the app; stderr still gets warnings
    if sys.stderr is not None:  # None under pythonw / the GUI script on Windows
        errh = logging.StreamHandler()
        errh.setLevel(logging.DEBUG if verbose else logging.WARNING)
        errh.setFormatter(logging.Formatter("%(levelname)s: %(message)s"))
        root.addHandler(errh)
    for name in NOISY_LOGGERS:
        logging.getLogger(name).setLevel(logging.WARNING)


def main(argv: list[str] | None = None) -> int:
    """Parse ``argv`` and run the chosen command; returns the process exit code."""
    argv = list(sys.argv[1:] if argv is None else argv)
    if len(argv) == 2 and argv[0] == "--npu-probe-child":  # the NPU's trial load (engine/npu_probe.py)
        from captioner.engine import npu_probe

        return npu_probe.child_main(argv[1])
    from captioner import cli

    paths = AppPaths.default(os.environ.get("CAPTIONER_HOME"))
    setup_logging(paths, verbose="-v" in argv or "--verbose" in argv)
    return cli.run(argv, paths)


if __name__ == "__main__":
    sys.exit(main())
