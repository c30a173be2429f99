"""Installer fixtures: the Linux one-folder bundle built once per test session from installer/captioner.spec.

PyInstaller cannot cross-build, so the Windows ARM64 bundle is built and smoke-tested by CI on Windows
ARM64 (.github/workflows/windows-arm64.yml). Here the *same spec* builds a Linux bundle, with the QNN
plugin folder included (``-- --qnn yes``; on Linux x86-64 it is the HTP emulator), and the tests run the
frozen executables as a user would: no Python, no repository on the path, the platformdirs folders of a
temporary home. The build time and the bundle's size (and what dominates it) are written to
``test-artifacts/installer/linux-bundle.json``.
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import pytest
from ui.conftest import XServer, xserver  # noqa: F401  (the same Xvfb + trayer fixture as the UI tests)

REPO = Path(__file__).resolve().parents[2]
SPEC = REPO / "installer" / "captioner.spec"
ARTIFACTS = REPO / "test-artifacts" / "installer"
sys.path.insert(0, str(REPO / "installer"))  # bundle_parts: the spec's rules


@dataclass(frozen=True)
class Bundle:
    """A built one-folder bundle (``dist/captioner``)."""

    root: Path
    build_s: float
    with_qnn: bool

    @property
    def cli(self) -> Path:
        return self.root / "captioner-cli"

    @property
    def gui(self) -> Path:
        return self.root / "captioner"

    @property
    def internal(self) -> Path:
        return self.root / "_internal"

    @staticmethod
    def env(home: Path, base: dict[str, str] | None = None) -> dict[str, str]:
        """Environment of a user whose home is ``home``: platformdirs' defaults, nothing of this checkout."""
        env = dict(os.environ if base is None else base)
        for name in ("CAPTIONER_HOME", "PYTHONPATH", "PYTHONHOME", "LD_LIBRARY_PATH", "VIRTUAL_ENV",
                     "XDG_CONFIG_HOME", "XDG_DATA_HOME", "XDG_CACHE_HOME", "XDG_STATE_HOME"):
            env.pop(name, None)
        env["HOME"] = str(home)
        env["PATH"] = "/usr/bin:/bin"
        return env


def directory_size(path: Path) -> int:
    """Bytes of the regular files under ``path`` (symbolic links not counted)."""
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file() and not p.is_symlink())


def size_report(bundle: Bundle) -> dict:
    """Total size, the top-level parts of ``_internal`` by size, and the largest files (MB)."""
    parts: dict[str, int] = {}
    for p in bundle.internal.iterdir():
        parts[p.name] = directory_size(p) if p.is_dir() else (0 if p.is_symlink() else p.stat().st_size)
    files = sorted(((p.stat().st_size, p) for p in bundle.root.rglob("*") if p.is_file() and not p.is_symlink()),
                   reverse=True)
    mb = 1e6
    return {
        "build_s": round(bundle.build_s, 1),
        "with_qnn": bundle.with_qnn,
        "total_mb": round(directory_size(bundle.root) / mb, 1),
        "qnn_plugin_mb": round(directory_size(bundle.internal / "onnxruntime_qnn") / mb, 1) if bundle.with_qnn else 0,
        "parts_mb": {k: round(v / mb, 1) for k, v in sorted(parts.items(), key=lambda kv: -kv[1])[:15]},
        "largest_files_mb": {str(p.relative_to(bundle.root)): round(s / mb, 1) for s, p in files[:12]},
    }


@pytest.fixture(scope="session")
def linux_bundle(tmp_path_factory: pytest.TempPathFactory) -> Bundle:
    """``pyinstaller installer/captioner.spec -- --qnn yes|no`` into a temporary folder, once per session."""
    if sys.platform != "linux":
        pytest.skip("the frozen-app tests build the Linux bundle; Windows ARM64 builds and tests its own in CI")
    with_qnn = importlib.util.find_spec("onnxruntime_qnn") is not None
    work = tmp_path_factory.mktemp("pyinstaller")
    cmd = [sys.executable, "-m", "PyInstaller", "--noconfirm", "--log-level", "WARN", "--distpath", str(work / "dist"),
           "--workpath", str(work / "build"), str(SPEC), "--", "--qnn", "yes" if with_qnn else "no"]
    start = time.monotonic()
    res = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, timeout=1500)
    build_s = time.monotonic() - start
    assert res.returncode == 0, f"pyinstaller failed:\n{res.stdout[-3000:]}\n{res.stderr[-6000:]}"
    bundle = Bundle(work / "dist" / "captioner", build_s, with_qnn)
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    report = size_report(bundle)
    (ARTIFACTS / "linux-bundle.json").write_text(json.dumps(report, indent=2) + "\n")
    print(f"\nLinux bundle: built in {report['build_s']} s, {report['total_mb']} MB "
          f"(QNN plugin {report['qnn_plugin_mb']} MB); see {ARTIFACTS / 'linux-bundle.json'}")
    return bundle
