"""Enforce the layering of ARCHITECTURE.md §2 by parsing every import in the package.

Data flows one way (audio → engine → words → UI and store); only the composition root (``app``),
``cli``, ``__main__`` and ``commands`` may import every layer, and only the UI side knows Qt.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "captioner"

# layer -> captioner layers it may import (itself always allowed)
ALLOWED: dict[str, set[str]] = {
    "__init__": set(),
    "core": set(),
    "errors": set(),
    "storage": {"core", "errors"},
    "audio": {"core", "errors"},
    "models": {"core", "errors", "storage"},
    "engine": {"core", "errors", "storage", "models"},
    "transcript": {"core", "errors", "storage"},
    "worker": {"core", "errors", "engine", "audio", "transcript", "storage", "models"},
    "ui": {"core", "errors", "storage", "transcript", "models", "__init__"},
    "app": {"*"},
    "cli": {"*"},
    "__main__": {"*"},
    "commands": {"*"},
    "bench": {"core", "errors", "storage", "audio", "models", "engine", "__init__"},
}
QT_ALLOWED = {"ui", "worker", "app", "commands"}
QT_MODULES = ("PySide6", "shiboken6", "PyQt5", "PyQt6")


def layer_of(path: Path) -> str:
    rel = path.relative_to(PACKAGE)
    return rel.parts[0].removesuffix(".py")


def imports_of(path: Path, package: Path = PACKAGE) -> list[tuple[int, str]]:
    """(line, absolute module name) for every import in ``path``, relative ones resolved."""
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    pkg_parts = list(path.relative_to(package.parent).with_suffix("").parts[:-1])
    found: list[tuple[int, str]] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = pkg_parts[: len(pkg_parts) - (node.level - 1)]
                mod = ".".join([*base, node.module] if node.module else base)
            else:
                mod = node.module or ""
            found.append((node.lineno, mod))
            if mod == "captioner":  # from captioner import engine
                found += [(node.lineno, f"captioner.{a.name}") for a in node.names]
    return found


SOURCES = sorted(PACKAGE.rglob("*.py"))


def test_package_has_sources():
    assert len(SOURCES) >= 5


@pytest.mark.parametrize("path", SOURCES, ids=lambda p: str(p.relative_to(PACKAGE)))
def test_imports_follow_layering(path: Path):
    layer = layer_of(path)
    allowed = ALLOWED.get(layer)
    assert allowed is not None, f"{layer} is not a known layer: add it to ARCHITECTURE.md §2 and ALLOWED"
    problems = []
    for lineno, mod in imports_of(path):
        top = mod.split(".")[0]
        if top in QT_MODULES and layer not in QT_ALLOWED:
            problems.append(f"line {lineno}: {layer} must not import Qt ({mod})")
        if top != "captioner" or "*" in allowed:
            continue
        parts = mod.split(".")
        target = parts[1] if len(parts) > 1 else "__init__"
        if target in ("__init__", "__version__"):  # the package root holds only the version
            continue
        if target != layer and target not in allowed:
            problems.append(f"line {lineno}: {layer} must not import captioner.{target}")
    assert not problems, "\n".join(problems)


def test_checker_catches_violations(tmp_path: Path):
    """The parser sees relative, absolute and from-package imports (a rule test that cannot fail is no test)."""
    fake_path = tmp_path / "captioner" / "engine" / "x.py"
    fake_path.parent.mkdir(parents=True)
    fake_path.write_text("from ..ui import caption_bar\nimport PySide6.QtCore\nfrom captioner import audio\n")
    mods = [m for _, m in imports_of(fake_path, tmp_path / "captioner")]
    assert mods == ["captioner.ui", "PySide6.QtCore", "captioner", "captioner.audio"]
