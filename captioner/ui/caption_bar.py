"""The caption bar: a frameless, always-on-top, translucent window that shows the live words.

Committed words are drawn solid, speculative ones dimmed; an update that retracts words replaces
them where they stood. Painting is coalesced: updates only mark the bar dirty, and a 30 Hz frame
timer (running only while something changed or a scroll animation is under way, so an idle bar
costs nothing) re-wraps and repaints. Old lines scroll up smoothly when new ones arrive; a line
stays on the bar at least ``min_dwell_s`` unless the backlog grows past :data:`MAX_BACKLOG_LINES`.

Intents the bar cannot settle itself go out as signals: ``geometry_changed`` after the user
moved or resized it, ``dock_changed`` when dragging undocks it.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from pathlib import Path

from PySide6.QtCore import QPoint, QPointF, QRect, QRectF, Qt, QTimer, Signal
from PySide6.QtGui import (
    QColor,
    QContextMenuEvent,
    QFont,
    QFontMetricsF,
    QGuiApplication,
    QMouseEvent,
    QPainter,
    QPainterPath,
    QPaintEvent,
    QPen,
)
from PySide6.QtWidgets import QMenu, QWidget

from captioner.core import EngineUpdate
from captioner.storage.settings import CaptionStyle
from captioner.ui.caption_text import CaptionText, LinePiece
from captioner.ui.geometry import layout_key, restore_rect, screen_rects

__all__ = ["FRAME_MS", "MAX_BACKLOG_LINES", "CaptionBar"]

logger = logging.getLogger(__name__)

FRAME_MS = 33  # repaint at most ~30 Hz
SCROLL_MS = 220  # duration of the scroll animation when lines leave the top
MAX_BACKLOG_LINES = 3  # lines waiting beyond this many screens' worth skip the dwell time
SPECULATIVE_ALPHA = 0.55  # opacity of speculative words relative to committed ones
EDGE_PX = 8  # logical px at the left/right edge that resize instead of move
DEFAULT_WIDTH_FRACTION = 0.6  # of the screen width, when no geometry was saved
MIN_WIDTH = 160  # logical px
NOTICE_MS = 2500  # how long a notice stays on the badge


class CaptionBar(QWidget):
    """The floating caption window.

    Args:
        style: look and behaviour (lines, font, colours, dock, lock, click-through, dwell...).
        labels: source labels for "both" mode, e.g. ``{"mic": "You", "system": "Others"}``.
        clock: monotonic seconds (injectable for tests of the dwell logic).

    Signals:
        geometry_changed(QRect): the user finished moving or resizing the bar.
        dock_changed(str): dragging turned a docked bar into a floating one (``"float"``).
    """

    geometry_changed = Signal(QRect)
    dock_changed = Signal(str)

    def __init__(
        self,
        style: CaptionStyle,
        labels: dict[str, str] | None = None,
        parent: QWidget | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        super().__init__(parent)
        self._clock = clock
        self._style = style
        self._labels = dict(labels or {"mic": "You", "system": "Others"})
        self._both = False
        self._lag_s = 0.0
        self._lag_state = "ok"
        self._prepared: tuple[int, int] | None = None  # graphs compiled of all, while "preparing"
        self._notice = ""  # a short message on the badge (a moment marked), while no lag is shown
        self._font = QFont()
        self._metrics = QFontMetricsF(self._font)
        self._text = CaptionText(self._measure)
        self._lines: list[list[LinePiece]] = []  # visible lines, top first
        self._leaving: list[list[LinePiece]] = []  # lines scrolling out during the animation
        self._scroll_px = 0.0  # current downward offset of the animation
        self._scroll_from = 0.0
        self._scroll_t0 = 0.0
        self._line_since: dict[int, float] = {}  # entry id of a line's first piece -> shown since
        self._dirty = False
        self.paint_count = 0  # paint events so far (for the throttling test and diagnostics)
        self._drag: tuple[str, QPoint, QRect] | None = None  # (mode, press pos, start geometry)

        self._frame = QTimer(self)
        self._frame.setInterval(FRAME_MS)
        self._frame.timeout.connect(self._on_frame_timeout)
        self._dwell = QTimer(self)
        self._dwell.setSingleShot(True)
        self._dwell.timeout.connect(self._request_frame)
        self._silence = QTimer(self)
        self._silence.setSingleShot(True)
        self._silence.timeout.connect(self.clear)
        self._notice_timer = QTimer(self)
        self._notice_timer.setSingleShot(True)
        self._notice_timer.timeout.connect(lambda: self.show_notice(""))

        self.setAttribute(Qt.WidgetAttribute.WA_TranslucentBackground, True)
        self.setAttribute(Qt.WidgetAttribute.WA_ShowWithoutActivating, True)
        self.setAttribute(Qt.WidgetAttribute.WA_AlwaysShowToolTips, True)  # the bar never takes focus
        self._menu: QMenu | None = None
        self.setWindowTitle("captioner")
        self.setMouseTracking(True)
        self._apply_flags()
        self.set_style(style)

    # ----------------------------------------------------------------- public API
    @property
    def style_settings(self) -> CaptionStyle:
        """The style in effect."""
        return self._style

    def set_style(self, style: CaptionStyle) -> None:
        """Apply a new style live (font, colours, lines, flags, timers)."""
        old = self._style
        self._style = style
        font = QFont(style.font_family) if style.font_family else QGuiApplication.font()
        font.setPointSizeF(float(style.font_size))
        self._font = font
        self._metrics = QFontMetricsF(font)
        self._text.set_measure(self._measure)
        if (old.click_through, old.locked) != (style.click_through, style.locked):
            self._apply_flags()
        self.setCursor(Qt.CursorShape.ArrowCursor if style.locked else Qt.CursorShape.OpenHandCursor)
        self.setMinimumWidth(MIN_WIDTH)
        self.setFixedHeight(self.bar_height())
        if style.clear_after_silence_s <= 0:
            self._silence.stop()
        if old.dock != style.dock and style.dock != "float" and self.isVisible():
            self.place(self.geometry())
        self._line_since.clear()
        self._request_frame()

    def set_labels(self, labels: dict[str, str]) -> None:
        """Change the source labels used in "both" mode."""
        self._labels = dict(labels)
        self._request_frame()

    def set_both_mode(self, both: bool) -> None:
        """Colour and label words by source (two sources are captured)."""
        self._both = both
        self._request_frame()

    def apply_update(self, update: EngineUpdate) -> None:
        """Take one engine update (from the worker, via a queued signal); paints on the next frame."""
        if not self._text.apply(update):
            return
        if update.words and self._style.clear_after_silence_s > 0:
            self._silence.start(int(self._style.clear_after_silence_s * 1000))
        self._request_frame()

    def clear(self) -> None:
        """Blank the bar (also what "clear after N s of silence" does)."""
        self._text.clear()
        self._lines = []
        self._leaving = []
        self._line_since.clear()
        self._request_frame()

    def set_lag(self, lag_s: float, state: str) -> None:
        """Show the lag badge while the engine is "behind" or "skipping" (the worker's lag state,
        :class:`~captioner.engine.overload.LagGovernor`), "starting" while the worker readies the
        engine (seconds: the captions are coming, the audio is being kept) or "preparing" while it
        compiles the model for the NPU before listening (minutes on a first start with a model,
        :meth:`set_preparing`); "ok" and "slower" (the engine keeps up with a longer step: the
        captions come in larger pieces, nothing is missed) hide it."""
        if state != "preparing":
            self._prepared = None
        shown_before = self.lag_visible
        changed = abs(lag_s - self._lag_s) >= 0.1 or state != self._lag_state
        self._lag_s, self._lag_state = lag_s, state
        if shown_before != self.lag_visible or (changed and self.lag_visible):
            self._request_frame()

    def show_notice(self, text: str, ms: int = NOTICE_MS) -> None:
        """Show ``text`` on the badge for ``ms`` ("★ marked 12:34": a shortcut pressed in another
        window gets its answer where the eyes are); a lag badge shown meanwhile has priority;
        ``""`` hides it."""
        self._notice = text
        if text:
            self._notice_timer.start(ms)
        self._request_frame()

    @property
    def notice_text(self) -> str:
        """The notice on the badge now ("" when none or while the lag badge is shown)."""
        return "" if self.lag_visible else self._notice

    def set_preparing(self, done: int, total: int) -> None:
        """``done`` of ``total`` graphs compiled for the NPU: on the "preparing" badge."""
        self._prepared = (done, total)
        self.set_lag(0.0, "preparing")
        self._request_frame()

    @property
    def lag_visible(self) -> bool:
        """True while the lag badge is shown."""
        return self._lag_state in ("behind", "skipping", "starting", "preparing")

    @property
    def lag_text(self) -> str:
        """The badge's text ("" while hidden)."""
        if self._lag_state == "starting":
            return "starting…"
        if self._lag_state == "preparing":
            done = f" · {self._prepared[0]} of {self._prepared[1]}" if self._prepared else ""
            return f"preparing the NPU (first start){done}…"
        if self._lag_state == "skipping":
            return f"behind — skipping · {self._lag_s:.1f} s"
        if self._lag_state == "behind":
            return f"behind {self._lag_s:.1f} s"
        return ""

    def visible_lines(self) -> list[str]:
        """The text of the lines on the bar now, top first (labels included)."""
        self._relayout()
        return [" ".join(t.text for t in line) for line in self._lines]

    def visible_pieces(self) -> list[list[LinePiece]]:
        """The pieces on the bar now, top first."""
        self._relayout()
        return [list(line) for line in self._lines]

    def bar_height(self) -> int:
        """Height in logical px for the style's line count and font."""
        pad = self._pad()
        return round(self._style.lines * self._metrics.lineSpacing() + 2 * pad.y())

    def place(self, saved: QRect | None = None) -> None:
        """Put the bar where ``saved`` says, docked as the style says, on a connected screen."""
        rects = screen_rects()
        if not rects:
            return
        default_w = max(MIN_WIDTH, int(rects[0].width() * DEFAULT_WIDTH_FRACTION))
        self.setGeometry(restore_rect(saved, self.bar_height(), self._style.dock, rects, default_w))

    def restore(self, window: dict[str, tuple[int, int, int, int]]) -> str:
        """Place the bar from the geometry saved for the current screen layout; returns its key."""
        key = layout_key()
        rect = window.get(key)
        self.place(QRect(*rect) if rect else None)
        return key

    def settle(self) -> None:
        """Lay out now and end any scroll animation (before rendering a still picture)."""
        self._dirty = False
        self._relayout()
        self._finish_scroll()

    def render_png(self, path: Path | str) -> bool:
        """Render the bar (with its translucent background) to a PNG file; True on success."""
        self.settle()
        return self.grab().save(str(path), "PNG")

    # ------------------------------------------------------------- frame handling
    def _request_frame(self) -> None:
        self._dirty = True
        if not self._frame.isActive():
            self._frame.start()

    def _on_frame_timeout(self) -> None:
        animating = self._scroll_px > 0.0
        if not self._dirty and not animating:
            self._frame.stop()  # idle: no timer runs
            return
        if self._dirty:
            self._dirty = False
            self._relayout()
        if self._scroll_px > 0.0:
            progress = min(1.0, (time.monotonic() - self._scroll_t0) * 1000.0 / SCROLL_MS)
            self._scroll_px = self._scroll_from * (1.0 - progress) ** 2
            if progress >= 1.0:
                self._finish_scroll()
        self.update()

    def _finish_scroll(self) -> None:
        self._scroll_px = 0.0
        self._leaving = []

    def _relayout(self) -> None:
        """Re-wrap, and scroll when the text no longer fits and the top line has dwelt enough."""
        n = self._style.lines
        labels = self._labels if (self._both and self._style.show_source_labels) else None
        width = max(1.0, self.width() - 2 * self._pad().x())

        def wrap() -> list[list[LinePiece]]:
            return self._text.wrap(width, stable_only=self._style.stable_only, labels=labels)

        lines = wrap()
        now = self._clock()
        for line in lines[:n]:
            self._line_since.setdefault(line[0].entry_id, now)
        if len(lines) > n:
            overflow = len(lines) - n
            movable = 0
            for line in lines[:overflow]:
                if now - self._line_since.get(line[0].entry_id, now) >= self._style.min_dwell_s:
                    movable += 1
                else:
                    break
            movable = max(movable, overflow - MAX_BACKLOG_LINES * n)  # never fall far behind
            if movable:
                leaving = lines[:movable]
                self._text.drop_lines(leaving)
                lines = wrap()  # from the new top line (a source label restarts there)
                for line in lines[:n]:
                    self._line_since.setdefault(line[0].entry_id, now)
                self._start_scroll(leaving[-n:], min(n, len(leaving)))
            if len(lines) > n:
                wait = self._style.min_dwell_s - (now - self._line_since.get(lines[0][0].entry_id, now))
                self._dwell.start(max(1, int(wait * 1000) + 1))
        live = {line[0].entry_id for line in lines[:n]}
        self._line_since = {k: v for k, v in self._line_since.items() if k in live}
        self._lines = lines[:n]

    def _start_scroll(self, leaving: list[list[LinePiece]], count: int) -> None:
        if not self.isVisible():
            return
        self._leaving = leaving
        self._scroll_from = count * self._metrics.lineSpacing()
        self._scroll_px = self._scroll_from
        self._scroll_t0 = time.monotonic()  # animation runs on real time, dwell on self._clock

    # ------------------------------------------------------------------ painting
    def _measure(self, text: str) -> float:
        return self._metrics.horizontalAdvance(text)

    def _pad(self) -> QPointF:
        spacing = self._metrics.lineSpacing()
        return QPointF(round(spacing * 0.5), round(spacing * 0.25))

    def paintEvent(self, event: QPaintEvent) -> None:
        """Draw the background, the visible lines (and those scrolling out) and the lag badge."""
        self.paint_count += 1
        if self._dirty:  # painted before the next frame tick (e.g. render()): lay out first
            self._dirty = False
            self._relayout()
        st = self._style
        p = QPainter(self)
        p.setRenderHint(QPainter.RenderHint.Antialiasing, True)
        p.setRenderHint(QPainter.RenderHint.TextAntialiasing, True)
        bg = QColor(st.background_color)
        bg.setAlphaF(st.background_opacity)
        radius = min(12.0, self.height() / 4)
        p.setPen(Qt.PenStyle.NoPen)
        p.setBrush(bg)
        p.drawRoundedRect(QRectF(self.rect()), radius, radius)

        pad = self._pad()
        spacing = self._metrics.lineSpacing()
        content = QRectF(pad.x() / 2, pad.y(), self.width() - pad.x(), st.lines * spacing)
        p.setClipRect(content)
        top = pad.y() + self._scroll_px
        ascent = self._metrics.ascent()
        k = len(self._leaving)
        for i, line in enumerate(self._leaving):
            self._draw_line(p, line, pad.x(), top + (i - k) * spacing + ascent)
        for i, line in enumerate(self._lines):
            self._draw_line(p, line, pad.x(), top + i * spacing + ascent)
        p.setClipping(False)
        if self.lag_visible or self.notice_text:
            self._draw_badge(p)
        p.end()

    def _color_for(self, tok: LinePiece) -> QColor:
        st = self._style
        if self._both and st.show_source_labels:
            return QColor(st.mic_color if tok.source == "mic" else st.system_color)
        return QColor(st.text_color)

    def _draw_line(self, p: QPainter, line: list[LinePiece], x: float, baseline: float) -> None:
        space = self._measure(" ")
        outline = QColor(0, 0, 0) if QColor(self._style.text_color).lightness() > 110 else QColor(255, 255, 255)
        pen_w = max(1.5, self._metrics.height() / 9)
        for tok in line:
            font = QFont(self._font)
            if tok.label:
                font.setBold(True)
            path = QPainterPath()
            path.addText(QPointF(x, baseline), font, tok.text)
            color = self._color_for(tok)
            edge = QColor(outline)
            if tok.speculative:
                color.setAlphaF(SPECULATIVE_ALPHA)
                edge.setAlphaF(SPECULATIVE_ALPHA * 0.6)
            if self._style.outline:
                p.strokePath(path, QPen(edge, pen_w, Qt.PenStyle.SolidLine, Qt.PenCapStyle.RoundCap,
                                        Qt.PenJoinStyle.RoundJoin))
            p.fillPath(path, color)
            x += QFontMetricsF(font).horizontalAdvance(tok.text) + space

    def _draw_badge(self, p: QPainter) -> None:
        font = QFont(self._font)
        font.setPointSizeF(max(7.0, self._font.pointSizeF() * 0.45))
        text = self.lag_text or self.notice_text
        fm = QFontMetricsF(font)
        w, h = fm.horizontalAdvance(text) + 10, fm.height() + 4
        box = QRectF(self.width() - w - 6, 4, w, h)
        p.setPen(Qt.PenStyle.NoPen)
        if not self.lag_visible:  # a notice
            p.setBrush(QColor(60, 120, 70, 220))
        elif self._lag_state in ("starting", "preparing"):
            p.setBrush(QColor(70, 100, 150, 220))
        else:
            p.setBrush(QColor(200, 60, 40, 220))
        p.drawRoundedRect(box, 4, 4)
        p.setPen(QColor(255, 255, 255))
        p.setFont(font)
        p.drawText(box, Qt.AlignmentFlag.AlignCenter, text)

    # ------------------------------------------------------------ window flags
    def _apply_flags(self) -> None:
        """Set the window flags; changing them re-creates the native window, so re-show it."""
        visible = self.isVisible()
        flags = (
            Qt.WindowType.Tool
            | Qt.WindowType.FramelessWindowHint
            | Qt.WindowType.WindowStaysOnTopHint
            | Qt.WindowType.WindowDoesNotAcceptFocus
        )
        if self._style.click_through:
            flags |= Qt.WindowType.WindowTransparentForInput
        self.setWindowFlags(flags)
        if visible:
            self.show()

    # ------------------------------------------------------------ context menu
    def set_menu(self, menu: QMenu | None) -> None:
        """The menu a right click on the bar opens (the tray's: the app is usable without a tray)."""
        self._menu = menu

    def contextMenuEvent(self, event: QContextMenuEvent) -> None:
        """Right click: open the app's menu where the pointer is."""
        if self._menu is None:
            event.ignore()
            return
        self._menu.popup(event.globalPos())
        event.accept()

    # ------------------------------------------------------------ move / resize
    def _edge_at(self, pos: QPoint) -> str:
        if pos.x() <= EDGE_PX:
            return "left"
        if pos.x() >= self.width() - EDGE_PX:
            return "right"
        return "move"

    def mousePressEvent(self, event: QMouseEvent) -> None:
        """Start moving (or resizing at the left/right edge) unless the bar is locked."""
        if self._style.locked or event.button() != Qt.MouseButton.LeftButton:
            event.ignore()
            return
        pos = event.position().toPoint()
        self._drag = (self._edge_at(pos), event.globalPosition().toPoint(), self.geometry())
        event.accept()

    def mouseMoveEvent(self, event: QMouseEvent) -> None:
        """Move or resize while dragging; otherwise show the matching cursor."""
        if self._drag is None:
            if not self._style.locked:
                edge = self._edge_at(event.position().toPoint())
                self.setCursor(
                    Qt.CursorShape.SizeHorCursor if edge != "move" else Qt.CursorShape.OpenHandCursor
                )
            return
        mode, start, geom = self._drag
        delta = event.globalPosition().toPoint() - start
        if mode == "move":
            self.move(geom.topLeft() + delta)
        elif mode == "right":
            self.resize(max(MIN_WIDTH, geom.width() + delta.x()), self.height())
        else:
            w = max(MIN_WIDTH, geom.width() - delta.x())
            self.setGeometry(geom.right() + 1 - w, geom.y(), w, self.height())
        self._request_frame()

    def mouseReleaseEvent(self, event: QMouseEvent) -> None:
        """Finish a drag: report the new geometry (and undocking, if it was moved)."""
        if self._drag is None:
            return
        mode = self._drag[0]
        self._drag = None
        if mode == "move" and self._style.dock != "float":
            self.dock_changed.emit("float")
        self.geometry_changed.emit(self.geometry())

    def resizeEvent(self, event) -> None:
        """Re-wrap at the new width."""
        super().resizeEvent(event)
        self._request_frame()
