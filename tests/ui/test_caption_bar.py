"""The caption bar widget on the offscreen platform: words, timers, flags, dragging, throttled painting."""

from __future__ import annotations

import dataclasses
import os
import subprocess
import sys
from pathlib import Path

import pytest
from PySide6.QtCore import QPoint, QRect, Qt
from PySide6.QtGui import QImage
from PySide6.QtTest import QTest

from captioner.core import EngineUpdate, RoundStats, Word
from captioner.storage.settings import CaptionStyle
from captioner.ui.caption_bar import FRAME_MS, CaptionBar
from captioner.ui.geometry import layout_key

REPO = Path(__file__).resolve().parents[2]


class FakeClock:
    """Monotonic seconds that only move when the test says so."""

    def __init__(self) -> None:
        self.t = 100.0

    def __call__(self) -> float:
        return self.t


def ws(text: str, source="system", speculative=False) -> tuple[Word, ...]:
    return tuple(Word(w, i, i + 0.4, source=source, speculative=speculative) for i, w in enumerate(text.split()))


def make_bar(qtbot, clock=None, **style) -> CaptionBar:
    st = CaptionStyle(**{"min_dwell_s": 0.0, **style})
    bar = CaptionBar(st, clock=clock or FakeClock())
    qtbot.addWidget(bar)
    bar.setGeometry(20, 20, 600, bar.bar_height())
    bar.show()
    qtbot.waitExposed(bar)
    return bar


def test_window_flags_frameless_on_top_tool_translucent(qtbot):
    bar = make_bar(qtbot)
    flags = bar.windowFlags()
    for flag in (Qt.WindowType.Tool, Qt.WindowType.FramelessWindowHint, Qt.WindowType.WindowStaysOnTopHint):
        assert flags & flag
    assert not flags & Qt.WindowType.WindowTransparentForInput
    assert bar.testAttribute(Qt.WidgetAttribute.WA_TranslucentBackground)


def test_words_appear_and_speculative_words_are_replaced_in_place(qtbot):
    bar = make_bar(qtbot)
    bar.apply_update(EngineUpdate(0, ws("good morning")))
    bar.apply_update(EngineUpdate(0, ws("every buddy", speculative=True)))
    assert bar.visible_lines() == ["good morning every buddy"]
    spec = [t.speculative for t in bar.visible_pieces()[0]]
    assert spec == [False, False, True, True]
    bar.apply_update(EngineUpdate(2, ws("everybody")))
    assert bar.visible_lines() == ["good morning everybody"]
    assert not any(t.speculative for t in bar.visible_pieces()[0])


def test_stable_only_mode_hides_speculative_words_live(qtbot):
    bar = make_bar(qtbot)
    bar.apply_update(EngineUpdate(0, ws("committed")))
    bar.apply_update(EngineUpdate(0, ws("guess", speculative=True)))
    bar.set_style(dataclasses.replace(bar.style_settings, stable_only=True))
    assert bar.visible_lines() == ["committed"]
    bar.set_style(dataclasses.replace(bar.style_settings, stable_only=False))
    assert bar.visible_lines() == ["committed guess"]


def test_old_lines_scroll_off_and_only_n_lines_show(qtbot):
    bar = make_bar(qtbot, lines=2)
    bar.resize(300, bar.height())
    for i in range(30):
        bar.apply_update(EngineUpdate(0, ws(f"word{i}")))
    lines = bar.visible_lines()
    assert len(lines) == 2
    assert lines[-1].endswith("word29")
    assert "word0" not in " ".join(lines)


def test_minimum_dwell_holds_the_top_line(qtbot):
    clock = FakeClock()
    bar = make_bar(qtbot, clock=clock, lines=1, min_dwell_s=2.0)
    bar.resize(250, bar.height())
    bar.apply_update(EngineUpdate(0, ws("first line here")))
    first = bar.visible_lines()
    bar.apply_update(EngineUpdate(0, ws("and a second line that needs room")))
    clock.t += 1.0
    assert bar.visible_lines() == first  # not yet 2 s on screen
    clock.t += 1.5
    assert bar.visible_lines() != first
    assert "first" not in bar.visible_lines()[0]


def test_clear_after_silence(qtbot):
    bar = make_bar(qtbot, clear_after_silence_s=0.1)
    bar.apply_update(EngineUpdate(0, ws("soon gone")))
    assert bar.visible_lines() == ["soon gone"]
    qtbot.waitUntil(lambda: bar.visible_lines() == [], timeout=3000)


def test_keep_last_line_when_clear_after_is_zero(qtbot):
    bar = make_bar(qtbot, clear_after_silence_s=0.0)
    bar.apply_update(EngineUpdate(0, ws("still here")))
    qtbot.wait(300)
    assert bar.visible_lines() == ["still here"]


def test_repaints_are_coalesced_and_no_timer_runs_when_idle(qtbot):
    bar = make_bar(qtbot)
    qtbot.waitUntil(lambda: not bar._frame.isActive(), timeout=2000)
    before = bar.paint_count
    with qtbot.waitExposed(bar):
        pass
    for i in range(300):  # a burst far faster than 30 Hz
        bar.apply_update(EngineUpdate(0, ws(f"w{i}")))
    qtbot.wait(10 * FRAME_MS)
    painted = bar.paint_count - before
    assert 1 <= painted <= 12, painted  # ~10 frames at most, not 300
    qtbot.waitUntil(lambda: not bar._frame.isActive(), timeout=2000)
    assert not bar._dwell.isActive() and not bar._silence.isActive()


def test_lag_badge_follows_the_workers_lag_state(qtbot):
    bar = make_bar(qtbot)
    bar.set_lag(2.4, "ok")  # a 2 s step keeping up: no badge, whatever the number
    assert not bar.lag_visible and bar.lag_text == ""
    bar.set_lag(3.2, "behind")
    assert bar.lag_visible and bar.lag_text == "behind 3.2 s"
    bar.set_lag(4.1, "skipping")
    assert bar.lag_visible and bar.lag_text == "behind — skipping · 4.1 s"
    bar.set_lag(2.1, "slower")  # keeping up with a longer step: nothing is missed, no badge
    assert not bar.lag_visible
    bar.set_lag(2.1, "ok")  # caught up: the badge clears
    assert not bar.lag_visible
    bar.set_lag(0.0, "starting")  # the worker readies the engine: captions are coming
    assert bar.lag_visible and bar.lag_text == "starting…"


def test_a_notice_shows_on_the_badge_for_a_while_and_gives_way_to_the_lag(qtbot):
    bar = make_bar(qtbot)
    bar.show()
    bar.show_notice("★ marked 0:12:34", ms=300)
    assert bar.notice_text == "★ marked 0:12:34" and not bar.lag_visible
    painted = bar.grab().toImage()
    badge = painted.pixelColor(painted.width() - 8, 10)  # the badge's right padding, top right
    assert badge.green() > badge.red() + 30 and badge.green() > badge.blue() + 30  # its green, not the bar's black
    bar.set_lag(3.2, "behind")  # the lag is the more important news
    assert bar.notice_text == "" and bar.lag_text == "behind 3.2 s"
    bar.set_lag(1.0, "ok")
    assert bar.notice_text == "★ marked 0:12:34"
    qtbot.waitUntil(lambda: bar.notice_text == "", timeout=5000)  # gone after its time


def test_a_gap_shows_a_mark_in_the_captions(qtbot):
    bar = make_bar(qtbot)
    bar.apply_update(EngineUpdate(0, ws("before the")))
    bar.apply_update(EngineUpdate(0, (), gap=(1.0, 4.0)))
    bar.apply_update(EngineUpdate(0, ws("after")))
    assert " ".join(bar.visible_lines()) == "before the […] after"


def test_both_mode_labels_and_colours_sources(qtbot):
    bar = make_bar(qtbot, mic_color="#FFD866", system_color="#FFFFFF")
    bar.set_both_mode(True)
    bar.apply_update(EngineUpdate(0, ws("can you hear me", source="mic"), source="mic"))
    bar.apply_update(EngineUpdate(0, ws("yes fine", source="system"), source="system"))
    text = " ".join(bar.visible_lines())
    assert "You: can you hear me" in text and "Others: yes fine" in text
    tok = bar.visible_pieces()
    colours = {t.source: bar._color_for(t).name().upper() for line in tok for t in line}
    assert colours == {"mic": "#FFD866", "system": "#FFFFFF"}


def test_click_through_sets_transparent_for_input_and_stays_visible(qtbot):
    bar = make_bar(qtbot)
    bar.set_style(dataclasses.replace(bar.style_settings, click_through=True))
    assert bar.windowFlags() & Qt.WindowType.WindowTransparentForInput
    assert bar.isVisible()
    assert bar.windowFlags() & Qt.WindowType.WindowStaysOnTopHint
    bar.set_style(dataclasses.replace(bar.style_settings, click_through=False))
    assert not bar.windowFlags() & Qt.WindowType.WindowTransparentForInput
    assert bar.isVisible()


def drag(qtbot, bar, start: QPoint, delta: QPoint) -> None:
    QTest.mousePress(bar, Qt.MouseButton.LeftButton, Qt.KeyboardModifier.NoModifier, start)
    QTest.mouseMove(bar, start + delta)
    QTest.mouseRelease(bar, Qt.MouseButton.LeftButton, Qt.KeyboardModifier.NoModifier, start + delta)


def test_drag_moves_the_bar_and_undocks_it(qtbot):
    bar = make_bar(qtbot, dock="bottom")
    before = bar.geometry()
    with qtbot.waitSignal(bar.geometry_changed) as moved, qtbot.waitSignal(bar.dock_changed) as docked:
        drag(qtbot, bar, QPoint(200, 10), QPoint(-40, -30))
    assert bar.geometry().topLeft() == before.topLeft() + QPoint(-40, -30)
    assert moved.args[0] == bar.geometry()
    assert docked.args == ["float"]


def test_right_edge_resizes(qtbot):
    bar = make_bar(qtbot)
    w = bar.width()
    drag(qtbot, bar, QPoint(w - 2, 10), QPoint(-100, 0))
    assert bar.width() == w - 100


def test_locked_bar_does_not_move(qtbot):
    bar = make_bar(qtbot, locked=True)
    before = bar.geometry()
    drag(qtbot, bar, QPoint(200, 10), QPoint(-40, -30))
    assert bar.geometry() == before


def test_restore_puts_a_bar_from_a_vanished_monitor_on_an_existing_screen(qtbot):
    bar = make_bar(qtbot, dock="float")
    screen = bar.screen().availableGeometry()
    key = layout_key()
    bar.restore({key: (screen.right() + 2000, 100, 500, 60)})  # saved on a monitor to the right, now gone
    assert screen.intersects(bar.geometry())
    assert screen.contains(bar.geometry())
    inside = QRect(screen.x() + 10, screen.y() + 10, 400, 60)
    bar.restore({key: inside.getRect()})
    assert bar.geometry().topLeft() == inside.topLeft() and bar.width() == 400


def test_docked_bottom_sits_at_the_bottom_of_the_screen(qtbot):
    bar = make_bar(qtbot, dock="bottom")
    bar.restore({})
    screen = bar.screen().availableGeometry()
    assert screen.contains(bar.geometry())
    assert bar.geometry().bottom() > screen.center().y()
    bar.set_style(dataclasses.replace(bar.style_settings, dock="top"))
    assert bar.geometry().top() < screen.center().y()


def test_render_png_is_not_blank(qtbot, tmp_path):
    bar = make_bar(qtbot)
    bar.apply_update(EngineUpdate(0, ws("pixels please")))
    out = tmp_path / "bar.png"
    assert bar.render_png(out)
    img = QImage(str(out))
    assert img.width() == bar.width() * img.devicePixelRatio() or img.width() >= bar.width()
    colours = {img.pixel(x, y) for x in range(0, img.width(), 7) for y in range(0, img.height(), 3)}
    assert len(colours) > 10


SCALE_SCRIPT = r"""
import sys
from PySide6.QtWidgets import QApplication
from captioner.core import EngineUpdate, Word
from captioner.storage.settings import CaptionStyle
from captioner.ui.caption_bar import CaptionBar
app = QApplication(sys.argv)
bar = CaptionBar(CaptionStyle(lines=2, font_size=20))
bar.restore({})
bar.show()
bar.apply_update(EngineUpdate(0, tuple(Word(w, 0, 1) for w in "sharp text at any scale".split())))
screen = bar.screen().availableGeometry()
bar.render_png(sys.argv[1])
print(bar.devicePixelRatioF(), bar.width(), bar.height(), int(screen.contains(bar.geometry())),
      " ".join(bar.visible_lines()))
"""


@pytest.mark.parametrize("scale", ["1", "1.5", "2"])
def test_correct_at_100_to_200_percent_scale(tmp_path, scale, artifacts):
    out = artifacts / f"caption-bar-scale-{scale}.png"
    env = {**os.environ, "QT_QPA_PLATFORM": "offscreen", "QT_SCALE_FACTOR": scale,
           "PYTHONPATH": str(REPO)}
    res = subprocess.run([sys.executable, "-c", SCALE_SCRIPT, str(out)], env=env, capture_output=True,
                         text=True, timeout=60)
    assert res.returncode == 0, res.stderr
    dpr, w, h, on_screen, first = res.stdout.split(maxsplit=4)
    assert float(dpr) == pytest.approx(float(scale))
    assert on_screen == "1"
    assert first.strip() == "sharp text at any scale"  # wrapped at small logical widths, none lost
    img = QImage(str(out))
    # rendered at device resolution (sharp, not upscaled); fractional scales round either way
    assert abs(img.width() - int(w) * float(scale)) <= 1
    assert abs(img.height() - int(h) * float(scale)) <= 1


def test_lag_stats_free_update_is_ignored_gracefully(qtbot):
    bar = make_bar(qtbot)
    bar.apply_update(EngineUpdate(0, (), RoundStats(lag_s=5.0)))
    assert bar.visible_lines() == []
