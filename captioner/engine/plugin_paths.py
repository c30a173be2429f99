r"""Folders the QNN plugin can use on Windows: the NPU's compile cache under a user name like "José".

onnxruntime-qnn takes the EP-context path as a UTF-8 session option but turns it into a path with
``std::filesystem::path(std::string)`` and back with ``path::string()`` (qnn_execution_provider.cc,
onnx_ctx_model_helper.cc of onnxruntime/onnxruntime-qnn), which on Windows read and write the
process's ANSI code page (cp1252, cp932, ...), not UTF-8. Under ``C:\Users\José\AppData\Local`` the
plugin wrote its context binaries to a garbled folder that does not exist ("Failed to write
context cache file"), and under a name outside the code page ("Łukasz" on cp1252) the conversion
throws: the compiled model was never kept, and every start compiled it again for minutes. ONNX
Runtime's own conversions of such paths were mended in 2026 (microsoft/onnxruntime#27724, #28390).

Where the process's ANSI code page is UTF-8 the plugin's conversions are exact: the installed app
declares it in its manifest (``activeCodePage``, Windows 10 1903 and later; installer/captioner.manifest).
A Python started otherwise gets the folder's 8.3 short name, plain ASCII, where its volume keeps
short names; else the cache is not used, with the reason.
"""

from __future__ import annotations

import sys
from pathlib import Path

__all__ = ["UTF8_CODE_PAGE", "ansi_code_page", "plugin_folder", "short_path"]

UTF8_CODE_PAGE = 65001


def ansi_code_page() -> int | None:
    """The process's ANSI code page (``GetACP``); None off Windows, where paths are bytes."""
    if sys.platform != "win32":
        return None
    import ctypes

    return int(ctypes.windll.kernel32.GetACP())  # type: ignore[attr-defined]


def short_path(path: Path) -> Path | None:
    """``path``'s 8.3 short form (``GetShortPathNameW``; the folder must exist), None where it has none."""
    if sys.platform != "win32":
        return None
    import ctypes

    size = ctypes.windll.kernel32.GetShortPathNameW(str(path), None, 0)  # type: ignore[attr-defined]
    if not size:
        return None
    buf = ctypes.create_unicode_buffer(size)
    if not ctypes.windll.kernel32.GetShortPathNameW(str(path), buf, size):  # type: ignore[attr-defined]
        return None
    return Path(buf.value)


def plugin_folder(folder: Path) -> tuple[Path | None, str]:
    """``folder`` as the QNN plugin can use it, and "" (module docstring): itself where the plugin's
    conversions are exact (off Windows, a UTF-8 code page, plain ASCII), else its ASCII short form
    (the folder is created for it); (None, why) where there is none."""
    page = ansi_code_page()
    if page is None or page == UTF8_CODE_PAGE or str(folder).isascii():
        return folder, ""
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        return None, exc.strerror or str(exc)
    alias = short_path(folder)
    if alias is not None and str(alias).isascii():
        return alias, ""
    return None, (f"its path has letters that the QNN plugin cannot read under code page {page}, and its disk "
                  "keeps no short name for it (the installed app has no such limit)")
