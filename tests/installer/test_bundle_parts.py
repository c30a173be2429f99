"""The spec's rules (installer/bundle_parts.py) on small inputs; the real bundle and wheels are tested beside."""

from __future__ import annotations

from pathlib import Path

import bundle_parts
import pytest
from PIL import Image

import captioner

from .conftest import REPO

RESOURCES = REPO / "captioner" / "resources"


def test_version_is_read_without_importing_the_package(tmp_path: Path):
    assert bundle_parts.read_version(REPO / "captioner" / "__init__.py") == captioner.__version__
    bad = tmp_path / "__init__.py"
    bad.write_text('"""no version here"""\n')
    with pytest.raises(ValueError, match="no __version__"):
        bundle_parts.read_version(bad)


def test_icon_holds_the_app_pngs_and_pillow_reads_it(tmp_path: Path):
    ico = bundle_parts.write_ico([RESOURCES / f"captioner-{n}.png" for n in (32, 64, 256)], tmp_path / "c.ico")
    with Image.open(ico) as img:  # an independent ICO parser
        assert img.format == "ICO"
        assert img.info["sizes"] == {(32, 32), (64, 64), (256, 256)}
        img.size = (256, 256)
        img.load()
        assert img.getbbox() is not None  # not blank
    with pytest.raises(ValueError, match="not a PNG"):
        bundle_parts.write_ico([RESOURCES / "captioner.svg"], tmp_path / "x.ico")


@pytest.mark.parametrize(("dest", "kept"), [
    # Linux layout (Qt under PySide6/Qt, libraries also linked at the top)
    ("PySide6/Qt/plugins/platforms/libqxcb.so", True),
    ("PySide6/Qt/plugins/platforms/libqwayland.so", False),
    ("PySide6/Qt/plugins/platformthemes/libqgtk3.so", False),
    ("PySide6/Qt/plugins/imageformats/libqsvg.so", True),
    ("PySide6/Qt/plugins/imageformats/libqjpeg.so", False),
    ("PySide6/Qt/plugins/qmltooling/libqmldbg_tcp.so", False),
    ("PySide6/Qt/lib/libQt6Widgets.so.6", True),
    ("PySide6/Qt/lib/libQt6Quick.so.6", False),
    ("libQt6WaylandClient.so.6", False),
    ("PySide6/Qt/translations/qtbase_de.qm", False),
    # Windows layout (Qt DLLs and plugins right under PySide6)
    ("PySide6\\plugins\\platforms\\qwindows.dll", True),
    ("PySide6\\plugins\\platforms\\qdirect2d.dll", False),
    ("PySide6\\plugins\\styles\\qmodernwindowsstyle.dll", True),
    ("PySide6\\plugins\\platforminputcontexts\\qtvirtualkeyboardplugin.dll", False),
    ("PySide6\\Qt6Svg.dll", True),
    ("PySide6\\Qt6Pdf.dll", False),
    ("PySide6\\opengl32sw.dll", False),
    # everything that is not Qt stays
    ("onnxruntime_qnn/libQnnHtpV73Skel.so", True),
    ("_sounddevice_data/portaudio-binaries/libportaudioarm64.dll", True),
])
def test_keep_bundle_entry(dest: str, kept: bool):
    assert bundle_parts.keep_bundle_entry(dest) is kept


def test_qnn_plugin_files_split_host_libraries_from_dsp_code_and_catalogs(tmp_path: Path):
    pkg = tmp_path / "onnxruntime_qnn"
    (pkg / "__pycache__").mkdir(parents=True)
    for name in ("__init__.py", "__pycache__/__init__.cpython-312.pyc", "QnnHtp.dll", "libQnnHtp.so",
                 "libQnnHtpV73Skel.so", "libqnnhtpv73.cat", "LICENSE"):
        (pkg / name).write_bytes(b"x")
    binaries, datas = bundle_parts.qnn_plugin_files(pkg)
    assert sorted(Path(s).name for s, _ in binaries) == ["QnnHtp.dll", "libQnnHtp.so"]
    assert sorted(Path(s).name for s, _ in datas) == ["LICENSE", "libQnnHtpV73Skel.so", "libqnnhtpv73.cat"]
    assert {d for _, d in binaries + datas} == {"onnxruntime_qnn"}
