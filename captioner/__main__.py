"""Entry point: ``captioner`` (GUI script) and ``python -m captioner``.

Logging and the few environment reads happen here and nowhere else.
"""

from __future__ import annotations

import codecs
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

    def doRollover(self) -> None:
        """Rotate; where Windows refuses to rename a log file another captioner holds open (the app and
        a command, each logging here), go on in the same file, no longer rotating in this process,
        rather than stop logging."""
        try:
            super().doRollover()
        except PermissionError:
            self.maxBytes = 0  # no more tries: each would close, fail and reopen the file
            if self.stream is None:
                self.stream = self._open()

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


def utf8_output() -> None:
    """Write stdout and stderr in UTF-8 whatever the locale says. On Windows a redirected stream (``>
    out.txt``, a pipe) takes the ANSI code page (cp1252, cp932, ...), where a caption in Chinese, a mark's
    "★" or ``listen``'s "←" raised UnicodeEncodeError and ended the command with its words unprinted;
    Python 3.15 makes UTF-8 the default (PEP 686). A Windows console, which Python writes in UTF-16,
    already says utf-8 and is left as it is."""
    for stream in (sys.stdout, sys.stderr):
        encoding = getattr(stream, "encoding", None) or "ascii"
        if stream is not None and hasattr(stream, "reconfigure") and codecs.lookup(encoding).name != "utf-8":
            stream.reconfigure(encoding="utf-8")


def main(argv: list[str] | None = None) -> int:
    """Parse ``argv`` and run the chosen command; returns the process exit code."""
    argv = list(sys.argv[1:] if argv is None else argv)
    utf8_output()
    if len(argv) == 2 and argv[0] == "--npu-probe-child":  # the NPU's trial load (engine/npu_probe.py)
        from captioner.engine import npu_probe

        return npu_probe.child_main(argv[1])
    from captioner import cli
    from captioner.commands._stop import stop_as_ctrl_c

    stop_as_ctrl_c()  # SIGTERM and SIGHUP stop a command as Ctrl-C does: its words kept
    paths = AppPaths.default(os.environ.get("CAPTIONER_HOME"))
    setup_logging(paths, verbose="-v" in argv or "--verbose" in argv)
    return cli.run(argv, paths)


if __name__ == "__main__":
    sys.exit(main())
