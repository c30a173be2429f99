"""The bounded-lag rule through the real CaptionWorker, with a real Stream and a real-time file capture.

The model is the scripted oracle (tests/engine/oracle.py) wrapped so that, while "slow", every
encoder dispatch sleeps 2 × its audio: a machine twice too slow, whose backlog would grow
geometrically without the rule. The audio is the oracle's script written to a WAV file and replayed
by :class:`~captioner.audio.files.FileSource` at real-time pace. The test measures the backlog from
outside the worker (audio due by the wall clock minus audio the stream has taken) and checks: it
stays within two steps (plus a block and scheduling slack) while slow, gaps are emitted for the
skipped audio, and once the slowness stops the engine keeps up again with no more skips.
"""

from __future__ import annotations

import itertools
import random
import threading
import time

from PySide6.QtCore import QThread

from captioner.audio.files import FileSource
from captioner.audio.wavfile import WavWriter
from captioner.core import apply_update
from captioner.engine.overload import MAX_LAG_STEPS
from captioner.engine.stream import Stream, StreamConfig
from captioner.worker import CaptionWorker
from tests.engine.oracle import SR, OracleModel, make_vocab, random_script

STEP_S = 0.5
SLOW_S = 4.5  # wall seconds of overload from the start of the replay
SLOW_RTF = 2.0  # while slow, each encoder dispatch sleeps this × its audio
SLACK_S = 0.1 + 0.4  # a capture block (0.1 s) + scheduling on a busy 2-core machine


class SlowModel:
    """The oracle, slowed down per encoder dispatch while ``slow`` is set: by ``rtf`` × its audio,
    or by ``fixed_s`` whatever its audio (a busy machine whose every round costs about the same)."""

    def __init__(self, inner: OracleModel, rtf: float = SLOW_RTF, fixed_s: float = 0.0) -> None:
        self.inner = inner
        self.vocab = inner.vocab
        self.buckets = inner.buckets
        self.provider = "oracle-slow"
        self.rtf, self.fixed_s = rtf, fixed_s
        self.slow = threading.Event()
        self.slow.set()

    def chunk_plan(self, bucket, prefixed):
        return self.inner.chunk_plan(bucket, prefixed)

    def encode(self, audio, *, native_30s=False):
        if self.slow.is_set():
            time.sleep(self.fixed_s + self.rtf * audio.size / SR)
        return self.inner.encode(audio, native_30s=native_30s)

    def decoder(self, encoding):
        return self.inner.decoder(encoding)


class MeasuredStream:
    """Delegates to the real Stream; records the backlog (audio due by now − audio taken) at the
    start of every round, measured against the replay's wall clock."""

    def __init__(self, stream: Stream, due) -> None:
        self.stream = stream
        self.config = stream.config
        self._due = due
        self.backlogs: list[tuple[float, float]] = []  # (seconds since the replay began, backlog s)
        self.steps: list[tuple[float, float]] = []  # (seconds since the replay began, the step set)

    @property
    def lag_s(self) -> float:
        return self.stream.lag_s

    def feed(self, samples) -> None:
        self.stream.feed(samples)

    def skip(self, keep_s):
        return self.stream.skip(keep_s)

    def set_step(self, step_s) -> None:
        self.stream.set_step(step_s)
        self.config = self.stream.config
        self.steps.append((self._due()[0], step_s))

    def step(self):
        t, due = self._due()
        before = self.stream.processed_s
        update = self.stream.step()
        if update is not None:
            self.backlogs.append((t, due - before))
        return update

    def finish(self):
        return self.stream.finish()


def _replay(qtbot, tmp_path, *, slow_for_s: float | None, adapt_step: bool, **slowness):
    """The oracle's script replayed at real pace through a real CaptionWorker and Stream, the
    model slowed down for the first ``slow_for_s`` wall seconds (None: throughout).

    Returns:
        (duration s, the measured stream, updates, lags as (t, lag s, state), the worker).
    """
    v = make_vocab()
    script = random_script(v, random.Random(5), n_words=19, rate=1.0, pauses=0.05)
    duration = script.audio.size / SR
    assert duration > SLOW_S + 3.0
    wav = tmp_path / "speech.wav"
    with WavWriter(wav) as w:
        w.write(script.audio)
    model = SlowModel(OracleModel(script, v), **slowness)
    stream = Stream(model, StreamConfig(step_s=STEP_S, vad=False, closing_context_s=0.0))
    t0: list[float] = []

    def due():
        t = time.monotonic() - t0[0]
        return t, min(duration, t)

    measured = MeasuredStream(stream, due)

    def open_capture():
        t0.append(time.monotonic())  # before FileSource.start(): "due" is never underestimated
        if slow_for_s is not None:
            timer = threading.Timer(slow_for_s, model.slow.clear)
            timer.daemon = True
            timer.start()
        return FileSource(wav, realtime=True)

    worker = CaptionWorker(open_capture, {"system": measured}, read_timeout_s=0.05, adapt_step=adapt_step)
    thread = QThread()
    worker.moveToThread(thread)
    thread.started.connect(worker.run)
    worker.finished.connect(thread.quit)
    updates, lags, statuses = [], [], []
    worker.update.connect(updates.append)
    worker.lag.connect(lambda lag, state: lags.append((time.monotonic() - t0[0], lag, state)))
    worker.status.connect(statuses.append)
    thread.start()
    try:
        qtbot.waitUntil(lambda: "ended" in statuses, timeout=int((duration + 20) * 1000))
    finally:
        with qtbot.waitSignal(thread.finished, timeout=10_000):
            worker.request_stop()
    return duration, measured, updates, lags, worker


def test_slow_engine_skips_with_gaps_keeps_lag_bounded_and_recovers(qtbot, tmp_path):
    """The skip rule alone (the caller's step throughout)."""
    duration, measured, updates, lags, worker = _replay(qtbot, tmp_path, slow_for_s=SLOW_S, adapt_step=False)

    # the overload was real: the engine skipped, and every skip reached the transcript as a gap
    gaps = [u for u in updates if u.gap is not None]
    assert gaps, "a twice-too-slow engine must have skipped"
    assert all(u.stats is not None and u.stats.stop_reason == "skipped" for u in gaps)
    report = worker.lag_reports()["system"]
    assert report.skips == len(gaps)
    assert abs(report.skipped_s - sum(b - a for a, b in (u.gap for u in gaps))) < 1e-6
    spans = sorted(u.gap for u in gaps)
    assert all(a < b for a, b in spans) and all(p[1] <= q[0] + 1e-9 for p, q in itertools.pairwise(spans))

    # bounded: no round ever started with more than two steps of audio waiting, capture included
    slow_backlogs = [b for t, b in measured.backlogs if t <= SLOW_S]
    assert slow_backlogs and max(b for _, b in measured.backlogs) <= MAX_LAG_STEPS * STEP_S + SLACK_S
    assert any(state == "skipping" for _, _, state in lags)

    # recovery: once the slowness stopped, no more skips and the last rounds are ordinary ones
    settle = SLOW_S + SLOW_RTF * MAX_LAG_STEPS * STEP_S + SLACK_S  # the round running at SLOW_S ends
    assert all(u.gap[0] <= settle for u in gaps)
    late = [(t, lag, state) for t, lag, state in lags if t > duration - 1.0]
    assert late and all(state == "ok" for _, _, state in late)
    assert all(lag <= STEP_S + SLACK_S for _, lag, _ in late)

    # the words around the gaps are on the audio clock, in order, none after a gap starting in it
    words: list = []
    for u in updates:
        apply_update(words, u)
    assert words and not any(w.speculative for w in words)
    starts = [w.start for w in words]
    assert starts == sorted(starts)
    for a, b in spans:  # nothing was decoded inside a skipped span
        assert not any(a + 1e-6 < w.start < b - 1e-6 for w in words)


def test_an_engine_too_slow_for_the_step_gets_a_longer_one_and_stops_skipping(qtbot, tmp_path):
    """Every encoder dispatch costs 0.85 s throughout (a busy machine), the step is 0.5 s: the rule
    lengthens the step (0.5 → 1 s, where 0.85 s rounds keep up) on the real Stream, the skips
    stop once it has, the words go on, and the state says "slower" to the end."""
    _duration, measured, updates, lags, worker = _replay(qtbot, tmp_path, slow_for_s=None,
                                                        adapt_step=True, rtf=0.0, fixed_s=0.85)
    report = worker.lag_reports()["system"]
    assert measured.steps and report.longest_step_s >= 1.0 and report.step_s >= 1.0
    assert measured.config.step_s == report.step_s  # the real Stream runs at the step the rule set
    settled = measured.steps[-1][0]
    gaps = [u.gap for u in updates if u.gap is not None]
    assert report.skips == len(gaps) and all(a <= settled + 1.0 for a, _ in gaps)
    assert lags[-1][2] == "slower"
    words: list = []
    for u in updates:
        apply_update(words, u)
    assert [w for w in words if w.start > settled + 2.0], "words go on after the step was lengthened"
    rounds_after = [t for t, _ in measured.backlogs if t > settled + 1.0]
    spacing = [b - a for a, b in itertools.pairwise(rounds_after)]
    assert spacing and min(spacing) >= 0.75 * report.step_s  # a longer step apart (not 0.5 s; a block of slack)

