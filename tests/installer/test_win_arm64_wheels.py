"""Every runtime dependency has a wheel for the target (Windows ARM64, CPython 3.12), and those wheels hold
what installer/captioner.spec collects from them.

The runtime requirements come from pyproject.toml, their markers evaluated for the target. pip's
``--platform`` does not evaluate markers for the target (it uses this machine's), so the closure is
resolved here: ``pip download --no-deps --only-binary=:all: --platform win_arm64 --python-version 3.12``
round by round, each new wheel's ``Requires-Dist`` evaluated for Windows ARM64 and checked against the
versions already fetched. Needs PyPI (pip's own cache keeps repeat runs short).
"""

from __future__ import annotations

import email.parser
import subprocess
import sys
import tomllib
import zipfile
from pathlib import Path, PurePosixPath

import bundle_parts
import pytest
from packaging.markers import default_environment
from packaging.requirements import Requirement
from packaging.specifiers import SpecifierSet
from packaging.utils import canonicalize_name, parse_wheel_filename

from .conftest import REPO

TARGET = {**default_environment(), "sys_platform": "win32", "platform_machine": "ARM64", "platform_system": "Windows",
          "os_name": "nt", "python_version": "3.12", "python_full_version": "3.12.10", "implementation_name": "cpython",
          "platform_python_implementation": "CPython", "platform_release": "", "platform_version": "", "extra": ""}
PIP_TARGET = ["--only-binary=:all:", "--platform", "win_arm64", "--python-version", "3.12", "--implementation", "cp"]


def runtime_requirements() -> list[Requirement]:
    """``[project] dependencies`` of pyproject.toml that apply on Windows ARM64, markers dropped."""
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    reqs = [Requirement(r) for r in project["dependencies"]]
    return [r for r in reqs if r.marker is None or r.marker.evaluate(TARGET)]


def wheel_requirements(wheel: Path) -> list[Requirement]:
    """The wheel's ``Requires-Dist`` that apply on the target (no extras requested)."""
    with zipfile.ZipFile(wheel) as zf:
        meta = next(n for n in zf.namelist() if n.endswith(".dist-info/METADATA") and n.count("/") == 1)
        msg = email.parser.Parser().parsestr(zf.read(meta).decode("utf-8"))
    reqs = [Requirement(r) for r in msg.get_all("Requires-Dist") or []]
    return [r for r in reqs if r.marker is None or r.marker.evaluate(TARGET)]


def resolve_for_target(dest: Path) -> dict[str, Path]:
    """Download the runtime closure for the target into ``dest``; returns canonical name -> wheel."""
    have: dict[str, Path] = {}
    pending = runtime_requirements()
    for _round in range(12):
        wanted: dict[str, SpecifierSet] = {}
        for req in pending:
            name = canonicalize_name(req.name)
            if name in have:
                version = parse_wheel_filename(have[name].name)[1]
                assert req.specifier.contains(version, prereleases=True), (
                    f"{req} conflicts with the {version} already chosen for the target")
                continue
            wanted[name] = wanted.get(name, SpecifierSet()) & req.specifier
        if not wanted:
            return have
        specs = [f"{name}{spec}" for name, spec in sorted(wanted.items())]
        res = subprocess.run([sys.executable, "-m", "pip", "download", "--no-deps", "--quiet", *PIP_TARGET,
                              "--dest", str(dest), *specs], capture_output=True, text=True, timeout=900)
        assert res.returncode == 0, f"no win_arm64/cp312 wheel for some of {specs}:\n{res.stderr[-3000:]}"
        pending = []
        for wheel in dest.glob("*.whl"):
            name = canonicalize_name(parse_wheel_filename(wheel.name)[0])
            if name in wanted and name not in have:
                have[name] = wheel
                pending += wheel_requirements(wheel)
        missing = set(wanted) - set(have)
        assert not missing, f"pip fetched no wheel for {missing}"
    raise AssertionError("the dependency closure did not settle in 12 rounds")


@pytest.fixture(scope="module")
def target_wheels(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    return resolve_for_target(tmp_path_factory.mktemp("win_arm64-wheels"))


def test_every_runtime_dependency_has_a_win_arm64_cp312_wheel(target_wheels: dict[str, Path]):
    for wheel in target_wheels.values():
        tags = parse_wheel_filename(wheel.name)[3]
        assert any(t.platform in ("win_arm64", "any") for t in tags), wheel.name
        assert any(t.interpreter in ("cp312", "py3", "py312") or t.abi == "abi3" for t in tags), wheel.name
    # the NPU path, the GUI and both audio back ends are there, and plain onnxruntime (not another build)
    assert {"onnxruntime", "onnxruntime-qnn", "pyside6-essentials", "shiboken6", "sounddevice", "soundcard", "numpy",
            "cffi"} <= set(target_wheels)
    assert not {"onnxruntime-directml", "onnxruntime-windowsml"} & set(target_wheels)


def test_qnn_plugin_wheel_holds_what_the_spec_collects(target_wheels: dict[str, Path], tmp_path: Path):
    wheel = target_wheels["onnxruntime-qnn"]
    with zipfile.ZipFile(wheel) as zf:
        members = [n for n in zf.namelist() if n.startswith("onnxruntime_qnn/")]
        zf.extractall(tmp_path, members)
    pkg = tmp_path / "onnxruntime_qnn"
    binaries, datas = bundle_parts.qnn_plugin_files(pkg)
    bin_names = {Path(src).name for src, _ in binaries}
    data_names = {Path(src).name for src, _ in datas}
    skels = {PurePosixPath(n).name for n in members if PurePosixPath(n).name.startswith("libQnnHtpV")
             and n.endswith("Skel.so")}
    cats = {PurePosixPath(n).name for n in members if n.endswith(".cat")}
    dlls = {PurePosixPath(n).name for n in members if n.endswith(".dll")}
    # what the NPU needs on a Snapdragon X (HTP v73) is in the wheel ...
    assert set(bundle_parts.SNAPDRAGON_QNN_FILES) <= skels | cats | dlls, members
    assert {"libQnnHtpV73Skel.so", "libQnnHtpV68Skel.so", "libQnnHtpV81Skel.so"} <= skels, members
    # ... and the spec takes all of it: DLLs as binaries, skeletons and catalogs verbatim as data
    assert bin_names == dlls
    assert skels | cats <= data_names
    every_file = {PurePosixPath(n).name for n in members if not n.endswith((".py", "/"))}
    assert bin_names | data_names == every_file
    assert all(dest == "onnxruntime_qnn" for _, dest in binaries + datas)


def test_pyside6_wheel_holds_the_qt_plugins_the_spec_keeps(target_wheels: dict[str, Path]):
    with zipfile.ZipFile(target_wheels["pyside6-essentials"]) as zf:
        names = zf.namelist()
    plugins = [n for n in names if n.startswith("PySide6/plugins/") and n.endswith(".dll")]
    kept = {n.removeprefix("PySide6/plugins/") for n in plugins if bundle_parts.keep_bundle_entry(n)}
    assert {"platforms/qwindows.dll", "imageformats/qsvg.dll", "imageformats/qico.dll", "iconengines/qsvgicon.dll",
            "styles/qmodernwindowsstyle.dll"} <= kept, kept
    assert not {k for k in kept if k.startswith(("qmltooling/", "designer/", "sqldrivers/", "tls/",
                                                 "platforminputcontexts/", "vectorimageformats/"))}, kept
    qt_dlls = {PurePosixPath(n).name for n in names if n.count("/") == 1 and n.startswith("PySide6/Qt6")}
    for needed in ("Qt6Core.dll", "Qt6Gui.dll", "Qt6Widgets.dll", "Qt6Network.dll", "Qt6Svg.dll"):
        assert needed in qt_dlls and bundle_parts.keep_bundle_entry(f"PySide6/{needed}"), needed
    assert not bundle_parts.keep_bundle_entry("PySide6/Qt6Quick.dll")
    assert not bundle_parts.keep_bundle_entry("PySide6/Qt6Qml.dll")


def test_sounddevice_wheel_brings_the_arm64_portaudio(target_wheels: dict[str, Path]):
    with zipfile.ZipFile(target_wheels["sounddevice"]) as zf:
        names = {PurePosixPath(n).name for n in zf.namelist()}
    # sounddevice picks libportaudioarm64.dll on ARM64; PyInstaller's hook collects libportaudio*.*
    assert "libportaudioarm64.dll" in names
