"""installer/captioner.nsi compiles with makensis (as on CI) against a staged folder, and says what it does.

The staged folder here is a small fake of PyInstaller's output (two executables and ``_internal``); the
script is the real one. 7-Zip reads the compiled setup program back (an independent NSIS parser) to
check that every staged file and the uninstaller are in it. Running the setup program needs Windows:
CI installs, runs and uninstalls it on Windows ARM64 (.github/workflows/windows-arm64.yml).
"""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path, PureWindowsPath

import bundle_parts
import pytest

from .conftest import REPO

NSI = REPO / "installer" / "captioner.nsi"
VERSION = bundle_parts.read_version(REPO / "captioner" / "__init__.py")


def makensis(*args: str) -> subprocess.CompletedProcess:
    if shutil.which("makensis") is None:
        pytest.skip("needs makensis (Debian package nsis; scripts/setup --dev installs it)")
    return subprocess.run(["makensis", "-V2", "-WX", *args, str(NSI)], capture_output=True, text=True, timeout=300)


def stage(root: Path) -> list[str]:
    """A small stand-in for dist/captioner; returns its files relative to ``root`` (POSIX separators)."""
    files = {"captioner.exe": b"MZ gui", "captioner-cli.exe": b"MZ console", "_internal/base_library.zip": b"PK",
             "_internal/onnxruntime_qnn/libQnnHtpV73Skel.so": b"\x7fELF", "_internal/onnxruntime_qnn/libqnnhtpv73.cat": b"0",
             "_internal/captioner/resources/captioner.svg": b"<svg/>"}
    for rel, data in files.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_bytes(data)
    return sorted(files)


def test_makensis_compiles_the_installer_and_it_holds_the_staged_folder(tmp_path: Path):
    staged = stage(tmp_path / "captioner")
    out = tmp_path / f"captioner-{VERSION}-win-arm64-setup.exe"
    res = makensis(f"-DVERSION={VERSION}", f"-DSTAGE={tmp_path / 'captioner'}", f"-DOUTFILE={out}")
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-3000:]  # -WX: no warning either
    data = out.read_bytes()
    assert data[:2] == b"MZ" and b"Nullsoft" in data
    if shutil.which("7zz") is None:
        pytest.skip("needs 7zz (Debian package 7zip; scripts/setup --dev installs it) to read the installer back")
    listing = subprocess.run(["7zz", "l", "-slt", str(out)], capture_output=True, text=True, timeout=120)
    assert listing.returncode == 0, listing.stderr
    assert "SubType = NSIS-3 Unicode" in listing.stdout
    paths = {line.split(" = ", 1)[1].replace("\\", "/") for line in listing.stdout.splitlines()
             if line.startswith("Path = ")}
    assert set(staged) <= paths, set(staged) - paths
    assert "uninstall.exe" in paths


def test_makensis_refuses_to_build_without_a_version(tmp_path: Path):
    stage(tmp_path / "captioner")
    res = makensis(f"-DSTAGE={tmp_path / 'captioner'}", f"-DOUTFILE={tmp_path / 'setup-x.exe'}")
    assert res.returncode != 0
    assert "pass the version" in res.stdout + res.stderr


def nsi_defines() -> dict[str, str]:
    return dict(re.findall(r'^!define (\w+) "([^"]*)"', NSI.read_text(), re.M))


def test_uninstaller_data_folder_is_where_captioner_keeps_its_data_on_windows(monkeypatch):
    """The "Remove my data" folder is platformdirs' Windows folder for every one of captioner's paths."""
    from platformdirs.windows import Windows

    local = r"C:\Users\ada\AppData\Local"
    monkeypatch.setenv("WIN_PD_OVERRIDE_LOCAL_APPDATA", local)
    dirs = Windows("captioner", appauthor=False)  # as captioner/storage/paths.py asks for them
    defines = nsi_defines()
    data_dir = PureWindowsPath(defines["DATA_DIR"].replace("$LOCALAPPDATA", local).replace("${APP}", defines["APP"]))
    for path in (dirs.user_data_dir, dirs.user_config_dir, dirs.user_cache_dir, dirs.user_log_dir):
        path = PureWindowsPath(path.replace("/", "\\"))
        assert path == data_dir or data_dir in path.parents, (path, data_dir)
    install_dir = PureWindowsPath(re.search(r'^InstallDir "([^"]+)"', NSI.read_text(), re.M).group(1)
                                  .replace("$LOCALAPPDATA", local).replace("${APP}", defines["APP"]))
    assert install_dir == PureWindowsPath(local, "Programs", "captioner")
    assert data_dir not in install_dir.parents and install_dir not in data_dir.parents  # uninstall keeps data apart


def test_installer_is_per_user_and_keeps_data_unless_asked():
    text = NSI.read_text()
    assert re.search(r"^RequestExecutionLevel user$", text, re.M)
    assert "HKLM" not in text and "$PROGRAMFILES" not in text  # nothing needs administrator rights
    assert re.search(r'^Section /o "un\.Remove my data', text, re.M)  # unticked unless the user ticks it
    assert re.search(r'^Section /o "Start captioner with Windows"', text, re.M)  # opt-in
