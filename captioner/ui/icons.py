"""The application's icons, loaded from ``captioner/resources`` (SVG, with PNG fallbacks)."""

from __future__ import annotations

from importlib import resources

from PySide6.QtGui import QIcon

__all__ = ["app_icon", "paused_icon"]


def _icon(stem: str) -> QIcon:
    base = resources.files("captioner") / "resources"
    icon = QIcon()
    svg = base / f"{stem}.svg"
    if svg.is_file():
        icon.addFile(str(svg))
    for size in (32, 64, 256):
        png = base / f"{stem}-{size}.png"
        if png.is_file():
            icon.addFile(str(png))
    return icon


def app_icon() -> QIcon:
    """The tray and window icon."""
    return _icon("captioner")


def paused_icon() -> QIcon:
    """The tray icon while captioning is paused."""
    return _icon("captioner-paused")
