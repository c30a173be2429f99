"""Where the caption bar goes: screen-layout keys, docking and restoring a saved position on screen.

Positions are saved per *screen layout* (the set of connected monitors), so a laptop that is
docked at the office and undocked on the train remembers both places. A saved rectangle is used
only while enough of it lies on a connected screen; otherwise (the monitor it was on is gone)
the bar comes back docked on the primary screen with its saved width clamped to that screen.
All rectangles are in logical (device-independent) pixels, so the same numbers hold at 100–200 %
scaling.
"""

from __future__ import annotations

from collections.abc import Sequence

from PySide6.QtCore import QRect
from PySide6.QtGui import QGuiApplication, QScreen

__all__ = [
    "DOCK_MARGIN",
    "MIN_VISIBLE_FRACTION",
    "docked_rect",
    "layout_key",
    "restore_rect",
    "screen_rects",
]

DOCK_MARGIN = 24  # logical px between a docked bar and the screen edge (taskbar side)
MIN_VISIBLE_FRACTION = 0.5  # a saved rect is kept if at least half of it is on one screen


def screen_rects(screens: Sequence[QScreen] | None = None) -> list[QRect]:
    """Available geometry (without taskbars) of each connected screen, primary first."""
    if screens is None:
        primary = QGuiApplication.primaryScreen()
        screens = [primary, *[s for s in QGuiApplication.screens() if s is not primary]]
    return [s.availableGeometry() for s in screens if s is not None]


def layout_key(screens: Sequence[QScreen] | None = None) -> str:
    """A stable name for the current monitor layout, e.g. ``"eDP-1:1920x1200+0+0|HDMI-1:..."``."""
    if screens is None:
        screens = QGuiApplication.screens()
    parts = []
    for s in screens:
        g = s.geometry()
        parts.append(f"{s.name() or 'screen'}:{g.width()}x{g.height()}+{g.x()}+{g.y()}")
    return "|".join(sorted(parts)) or "none"


def docked_rect(screen: QRect, width: int, height: int, dock: str, x: int | None = None) -> QRect:
    """The bar's rectangle docked at the ``"top"`` or ``"bottom"`` of ``screen``.

    ``width`` is clamped to the screen; ``x`` (the bar's current left edge) is kept when the
    bar still fits there, else the bar is centred.
    """
    w = max(1, min(width, screen.width()))
    h = max(1, min(height, screen.height()))
    if x is None or x < screen.left() or x + w > screen.right() + 1:
        x = screen.left() + (screen.width() - w) // 2
    if dock == "top":
        y = screen.top() + DOCK_MARGIN
    else:
        y = screen.bottom() + 1 - h - DOCK_MARGIN
    y = max(screen.top(), y)
    return QRect(x, y, w, h)


def _visible_fraction(rect: QRect, screens: Sequence[QRect]) -> float:
    area = rect.width() * rect.height()
    if area <= 0:
        return 0.0
    best = 0
    for s in screens:
        inter = rect.intersected(s)
        best = max(best, inter.width() * inter.height())
    return best / area


def restore_rect(saved: QRect | None, height: int, dock: str, screens: Sequence[QRect], default_width: int) -> QRect:
    """Where to put the bar at start or when the screens change.

    Args:
        saved: the rectangle saved for the current screen layout, or None.
        height: the bar's height for its current font and line count (logical px).
        dock: ``"top"``, ``"bottom"`` or ``"float"``.
        screens: available geometry of each connected screen, primary first (non-empty).
        default_width: width used when nothing was saved.

    Returns:
        A rectangle at least :data:`MIN_VISIBLE_FRACTION` on a connected screen. A docked bar is
        docked on the screen holding most of ``saved`` (the primary one when none does).
    """
    if not screens:
        raise ValueError("restore_rect needs at least one screen")
    width = saved.width() if saved is not None else default_width
    candidate = QRect(saved.x(), saved.y(), width, height) if saved is not None else None
    on_screen = candidate is not None and _visible_fraction(candidate, screens) >= MIN_VISIBLE_FRACTION
    if on_screen and dock == "float":
        return candidate  # type: ignore[return-value]
    target = screens[0]
    if on_screen:
        target = max(screens, key=lambda s: _area(candidate.intersected(s)))  # type: ignore[union-attr]
    x = candidate.x() if on_screen else None  # type: ignore[union-attr]
    return docked_rect(target, width, height, "top" if dock == "top" else "bottom", x)


def _area(r: QRect) -> int:
    return max(0, r.width()) * max(0, r.height())
