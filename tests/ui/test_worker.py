"""CaptionWorker in a real QThread with a scripted capture and engine: flow, shutdown, pause, errors."""

from __future__ import annotations

import time

from PySide6.QtCore import QThread

from captioner.core import AudioEvent, apply_update
from captioner.errors import AudioDeviceError
from captioner.worker import CaptionWorker
from tests.ui.fakes import FakeCapture, FakeStream, device_lost_event


class Harness:
    """Runs a worker in a thread and records what it emits (in the GUI thread, via queued signals)."""

    def __init__(self, qtbot, capture, streams, *, open_capture=None, **kw) -> None:
        self.capture = capture
        self.streams = streams
        self.worker = CaptionWorker(open_capture or (lambda: capture), streams, read_timeout_s=0.05, **kw)
        self.thread = QThread()
        self.worker.moveToThread(self.thread)
        self.thread.started.connect(self.worker.run)
        self.worker.finished.connect(self.thread.quit)
        self.updates, self.errors, self.statuses, self.events, self.lags = [], [], [], [], []
        self.order = []
        self.worker.update.connect(lambda u: (self.updates.append(u), self.order.append("update")))
        self.worker.error.connect(self.errors.append)
        self.worker.status.connect(self.statuses.append)
        self.worker.audio_event.connect(self.events.append)
        self.worker.lag.connect(self._on_lag)
        self.worker.finished.connect(lambda: self.order.append("finished"))
        self.qtbot = qtbot

    def _on_lag(self, lag: float, state: str) -> None:
        self.lags.append((lag, state))

    def start(self):
        self.thread.start()
        return self

    def stop(self):
        with self.qtbot.waitSignal(self.thread.finished, timeout=5000):
            self.worker.request_stop()

    def words(self, source="system"):
        words = []
        for u in self.updates:
            if u.source == source:
                apply_update(words, u)
        return words


def test_updates_flow_and_stop_commits_the_last_words_before_finished(qtbot):
    h = Harness(qtbot, FakeCapture(n_blocks=5, finite=False), {"system": FakeStream()}).start()
    qtbot.waitUntil(lambda: len(h.updates) >= 5, timeout=5000)
    h.stop()
    words = h.words()
    assert [w.text for w in words] == [f"system{i}" for i in range(5)]
    assert not any(w.speculative for w in words)  # finish() committed the speculative tail
    assert h.order[-1] == "finished" and h.order[-2] == "update"
    assert h.streams["system"].finished
    assert h.capture.stopped >= 1
    assert h.statuses[0] == "listening" and h.statuses[-1] == "stopped"


def test_both_mode_feeds_each_source_its_own_stream(qtbot):
    streams = {"system": FakeStream("system"), "mic": FakeStream("mic")}
    h = Harness(qtbot, FakeCapture(sources=("system", "mic"), n_blocks=3, finite=False), streams).start()
    qtbot.waitUntil(lambda: len(h.updates) >= 6, timeout=5000)
    h.stop()
    assert [w.text for w in h.words("mic")] == ["mic0", "mic1", "mic2"]
    assert [w.text for w in h.words("system")] == ["system0", "system1", "system2"]
    assert {w.source for w in h.words("mic")} == {"mic"}


def test_end_of_file_flushes_and_reports_ended_then_idles(qtbot):
    h = Harness(qtbot, FakeCapture(n_blocks=3, finite=True), {"system": FakeStream()}).start()
    qtbot.waitUntil(lambda: "ended" in h.statuses, timeout=5000)
    assert not any(w.speculative for w in h.words())
    reads = h.capture.reads
    qtbot.wait(200)
    assert h.capture.reads == reads  # idle: blocked on an event, not reading in a loop
    h.stop()
    assert len(h.words()) == 3


def test_pause_stops_the_capture_and_resume_reopens(qtbot):
    captures = []

    def open_capture():
        captures.append(FakeCapture(n_blocks=2, finite=False))
        return captures[-1]

    worker = CaptionWorker(open_capture, {"system": FakeStream()}, read_timeout_s=0.05)
    thread = QThread()
    worker.moveToThread(thread)
    thread.started.connect(worker.run)
    worker.finished.connect(thread.quit)
    statuses = []
    worker.status.connect(statuses.append)
    thread.start()
    qtbot.waitUntil(lambda: "listening" in statuses, timeout=5000)
    worker.set_paused(True)
    qtbot.waitUntil(lambda: "paused" in statuses, timeout=5000)
    assert captures[0].stopped == 1
    reads = captures[0].reads
    qtbot.wait(200)
    assert captures[0].reads == reads and len(captures) == 1
    worker.set_paused(False)
    qtbot.waitUntil(lambda: len(captures) == 2 and statuses[-1] == "listening", timeout=5000)
    with qtbot.waitSignal(thread.finished, timeout=5000):
        worker.request_stop()


def test_device_errors_are_emitted_typed_and_events_forwarded(qtbot):
    cap = FakeCapture(n_blocks=2, finite=False, fail_first_read=True, events=[device_lost_event()])
    h = Harness(qtbot, cap, {"system": FakeStream()}, reopen_wait_s=0.05).start()
    qtbot.waitUntil(lambda: bool(h.errors and h.events), timeout=5000)
    assert isinstance(h.errors[0], AudioDeviceError)
    assert h.events[0].kind == "device_lost"
    h.stop()


def test_a_capture_that_cannot_open_is_retried_and_reported_once_per_outage(qtbot):
    """No sound server: the worker retries every reopen_wait_s but reports the failure once (a
    tray message a second was what a user saw); a different failure, or the same one after the
    capture opened in between, is reported again."""
    failures = [AudioDeviceError("no server")] * 5 + [AudioDeviceError("no device")] * 3
    opened = []

    def open_capture():
        if failures:
            raise failures.pop(0)
        cap = FakeCapture(n_blocks=2, finite=False)
        opened.append(cap)
        return cap

    h = Harness(qtbot, None, {"system": FakeStream()}, open_capture=open_capture, reopen_wait_s=0.01).start()
    qtbot.waitUntil(lambda: bool(opened), timeout=5000)
    h.stop()
    assert not failures  # all eight attempts failed before the ninth opened
    assert [str(e) for e in h.errors] == ["no server", "no device"]


def test_lag_counts_the_drained_backlog_and_no_skip_below_two_steps(qtbot):
    stream = FakeStream(step_s=0.5)  # skip beyond 1 s waiting
    h = Harness(qtbot, FakeCapture(n_blocks=8, finite=False), {"system": stream}).start()
    qtbot.waitUntil(lambda: len(h.updates) >= 8, timeout=5000)
    h.stop()
    assert not stream.skips  # 0.8 s waited at most: under two steps
    lag, state = h.lags[-1]
    assert 0.1 <= lag < 0.8 and state == "ok"  # the last round started with its own block waiting
    report = h.worker.lag_reports()["system"]
    assert report.rounds == 8 and 0.8 <= report.max_s < 1.0 and report.skipped_s == 0.0


def test_a_backlog_beyond_two_steps_is_skipped(qtbot):
    """At the longest step (or without the longer step, as here) a backlog over two steps is
    skipped; with it, the same backlog first makes the step longer, and nothing is skipped."""
    stream = FakeStream(step_s=0.5)
    h = Harness(qtbot, FakeCapture(n_blocks=15, finite=False), {"system": stream}, adapt_step=False).start()
    qtbot.waitUntil(lambda: len(h.updates) >= 1, timeout=5000)
    h.stop()
    assert stream.skips == [0.5]  # 1.5 s drained at once: keep one step
    gaps = [u.gap for u in h.updates if u.gap is not None]
    assert gaps == [(0.0, 1.0)]
    assert [w.text for w in h.words()] == [f"system{i}" for i in range(10, 15)]
    assert any(state == "skipping" for _, state in h.lags)
    longer = FakeStream(step_s=0.5)
    h = Harness(qtbot, FakeCapture(n_blocks=15, finite=False), {"system": longer}).start()
    qtbot.waitUntil(lambda: len(h.updates) >= 15, timeout=5000)
    h.stop()
    assert not longer.skips and longer.config.step_s == 1.0 and h.worker.step_s == 1.0  # 1.5 s < two 1 s steps
    assert all(u.gap is None for u in h.updates) and h.lags[-1][1] == "slower"


def test_a_ring_overflow_becomes_a_gap(qtbot):
    overflow = AudioEvent("overflow", "system", "dropped 1.50 s of system audio", at=16_000, seconds=1.5)
    h = Harness(qtbot, FakeCapture(n_blocks=3, finite=False, events=[overflow]), {"system": FakeStream()}).start()
    qtbot.waitUntil(lambda: any(u.gap for u in h.updates), timeout=5000)
    h.stop()
    assert [u.gap for u in h.updates if u.gap] == [(1.0, 2.5)]
    assert h.events == [overflow]  # still forwarded as an event
    report = h.worker.lag_reports()["system"]
    assert report.skips == 1 and report.skipped_s == 1.5


def test_a_file_read_at_full_speed_is_never_skipped(qtbot):
    stream = FakeStream(step_s=0.5)
    h = Harness(qtbot, FakeCapture(n_blocks=15, finite=True), {"system": stream}, realtime=False).start()
    qtbot.waitUntil(lambda: "ended" in h.statuses, timeout=5000)
    h.stop()
    assert not stream.skips and len(h.words()) == 15


def test_stop_while_paused_ends_promptly(qtbot):
    h = Harness(qtbot, FakeCapture(n_blocks=1, finite=False), {"system": FakeStream()}, paused=True).start()
    qtbot.waitUntil(lambda: "paused" in h.statuses, timeout=5000)
    h.stop()
    assert h.statuses[-1] == "stopped"


def _logged_open(log: list, capture):
    """A capture factory that notes "capture" in ``log`` when the worker opens it."""

    def open_capture():
        log.append("capture")
        return capture

    return open_capture


def test_the_engine_is_readied_once_the_capture_runs_and_what_it_heard_meanwhile_is_decoded(qtbot):
    """The engine's graphs are readied in the worker's thread (status "starting", then "listening")
    once the capture has opened, and the audio it captured meanwhile is decoded, not skipped: run
    beside a capture whose backlog the lag rule judged as usual, the first round waited for them
    while audio piled up, and the rule skipped the session's first seconds."""
    log = []
    capture = FakeCapture(n_blocks=12, finite=False)  # 1.2 s wait when the engine is ready: six steps
    stream = FakeStream(step_s=0.2)
    h = Harness(qtbot, capture, {"system": stream}, open_capture=_logged_open(log, capture),
                prepare=lambda progress: log.append("prepare")).start()
    qtbot.waitUntil(lambda: len(h.words()) >= 12, timeout=5000)
    h.stop()
    assert log == ["capture", "prepare"]
    assert h.statuses[:2] == ["starting", "listening"]
    assert not stream.skips and all(u.gap is None for u in h.updates)
    # the same backlog in an ordinary turn is skipped to one step (the lag rule; without the longer
    # step, which would absorb this one)
    ordinary = FakeStream(step_s=0.2)
    h = Harness(qtbot, FakeCapture(n_blocks=12, finite=False), {"system": ordinary}, adapt_step=False).start()
    qtbot.waitUntil(lambda: bool(ordinary.skips), timeout=5000)
    h.stop()
    assert any(u.gap is not None for u in h.updates)


def test_a_first_npu_start_compiles_before_the_capture_opens_with_progress(qtbot):
    """Where readying the engine compiles it for the NPU (minutes on a first start, more than the
    capture's 20 s ring holds), it runs before the capture opens (status "preparing"), relays the
    graphs compiled, and then listens: nothing captured meanwhile to overflow or skip."""
    log = []
    progress_seen = []
    capture = FakeCapture(n_blocks=2, finite=False)  # what it captures once opened
    stream = FakeStream(step_s=0.2)

    def prepare(progress):
        log.append("prepare")
        for done in (1, 2, 3):
            progress(done, 3)

    h = Harness(qtbot, capture, {"system": stream}, open_capture=_logged_open(log, capture), prepare=prepare,
                prepare_first=True)
    h.worker.progress.connect(lambda done, total: progress_seen.append((done, total)))
    h.start()
    qtbot.waitUntil(lambda: len(h.words()) >= 2, timeout=5000)
    h.stop()
    assert log == ["prepare", "capture"]  # nothing was captured while it compiled
    assert h.statuses[:2] == ["preparing", "listening"] and "starting" not in h.statuses
    assert progress_seen == [(1, 3), (2, 3), (3, 3)]
    assert not stream.skips and all(u.gap is None for u in h.updates)


def test_quitting_during_a_first_npu_start_waits_for_one_graph_not_the_compile(qtbot):
    """A stop asked while the model compiles for the NPU ends it after the graph being compiled
    (the progress callback raises): the thread finishes, no error, the capture never opened."""
    import threading

    log, compiled = [], threading.Event()
    capture = FakeCapture(n_blocks=2, finite=False)

    def prepare(progress):
        for done in range(1, 1000):  # a long compile: one graph each 10 ms
            time.sleep(0.01)
            log.append(done)
            compiled.set()
            progress(done, 999)

    h = Harness(qtbot, capture, {"system": FakeStream()}, open_capture=_logged_open(log, capture), prepare=prepare,
                prepare_first=True).start()
    assert compiled.wait(5)
    h.stop()
    assert "capture" not in log and len(log) < 999 and not h.errors
    assert h.statuses == ["preparing", "stopped"]


def test_an_engine_that_cannot_be_readied_is_an_error_and_the_capture_closes(qtbot):
    from captioner.errors import ProviderError

    def prepare(progress):
        raise ProviderError("no provider could run the pack's first graph")

    capture = FakeCapture()
    h = Harness(qtbot, capture, {"system": FakeStream()}, prepare=prepare)
    with qtbot.waitSignal(h.thread.finished, timeout=5000):
        h.start()
    assert isinstance(h.errors[0], ProviderError) and capture.stopped == 1
    assert h.statuses == ["starting", "stopped"]


def test_the_audio_clock_is_the_audio_fed_and_for_a_live_capture_the_time_since(qtbot):
    """``audio_clock_s`` ("now" for a marked moment): 0 before the capture opens; the end of the
    audio fed, plus the wall time since while a live capture runs; standing still while paused."""
    from tests.ui.fakes import BLOCK

    h = Harness(qtbot, FakeCapture(n_blocks=5, finite=False), {"system": FakeStream()})
    assert h.worker.audio_clock_s() == 0.0
    h.start()
    qtbot.waitUntil(lambda: len(h.updates) >= 5, timeout=5000)
    fed = 5 * BLOCK / 16_000
    first = h.worker.audio_clock_s()
    time.sleep(0.3)
    later = h.worker.audio_clock_s()
    assert fed <= first < later and later - first >= 0.29  # the capture idles: time goes on
    h.worker.set_paused(True)
    qtbot.waitUntil(lambda: h.capture.stopped >= 1, timeout=5000)
    assert h.worker.audio_clock_s() == fed  # paused: the audio fed, standing still
    time.sleep(0.1)
    assert h.worker.audio_clock_s() == fed
    h.stop()


def test_the_audio_clock_stands_at_the_end_of_a_file_that_ran_out(qtbot):
    from tests.ui.fakes import BLOCK

    h = Harness(qtbot, FakeCapture(n_blocks=4, finite=True), {"system": FakeStream()}).start()
    qtbot.waitUntil(lambda: "ended" in h.statuses, timeout=5000)
    time.sleep(0.2)
    assert h.worker.audio_clock_s() == 4 * BLOCK / 16_000  # not the wall time since
    h.stop()
