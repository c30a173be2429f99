"""LagGovernor: the bounded-lag rule on a scripted stream and clock (the worker test runs it for real)."""

from __future__ import annotations

import pytest

from captioner.core import EngineUpdate, RoundStats, Word
from captioner.engine.overload import (
    KEEP_STEPS,
    MAX_LAG_STEPS,
    MAX_SHORTEN_HOLD_S,
    SHORTEN_HOLD_S,
    SKIPPING_HOLD_STEPS,
    LagGovernor,
    LagReport,
)
from captioner.errors import CaptionerError


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


class ScriptedStream:
    """``pending`` seconds wait; a round takes all of it and costs ``cost`` seconds on the clock
    (and hears a word when ``speech``); ``steps`` records the steps the rule set."""

    def __init__(self, clock: Clock, step_s: float, cost: float, speech: bool = False) -> None:
        self.clock, self.step_s, self.cost, self.speech = clock, step_s, cost, speech
        self.pending = 0.0
        self.processed = 0.0
        self.skips: list[float] = []
        self.steps: list[float] = []

    def set_step(self, step_s: float) -> None:
        self.step_s = step_s
        self.steps.append(step_s)

    @property
    def lag_s(self) -> float:
        return self.pending

    def step(self):
        if self.pending < self.step_s:
            return None
        self.clock.now += self.cost
        start = self.processed
        self.processed += self.pending
        self.pending = 0.0
        words = (Word("word", start, self.processed),) if self.speech else ()
        return EngineUpdate(words=words, stats=RoundStats())

    def skip(self, keep_s):
        self.skips.append(keep_s)
        if self.pending <= keep_s:
            return EngineUpdate()
        start = self.processed
        self.processed += self.pending - keep_s
        self.pending = keep_s
        return EngineUpdate(stats=RoundStats(stop_reason="skipped"), gap=(start, self.processed))


def drive(governor: LagGovernor, stream: ScriptedStream, clock: Clock, seconds: float, block: float = 0.1):
    """Real-time arrival: whatever arrived since the last turn is fed, then the rule runs."""
    arrived = stream.processed + stream.pending
    updates = []
    end = clock.now + seconds
    while clock.now < end:
        clock.now = max(clock.now, arrived + block)  # wait for the next block if none is there
        stream.pending += clock.now - arrived  # everything captured by now is fed
        arrived = clock.now
        updates += governor.run(stream)
    return updates


def test_keeping_up_never_skips_and_reports_step_plus_compute():
    clock = Clock()
    stream = ScriptedStream(clock, 2.0, cost=0.5)
    g = LagGovernor(2.0, clock=clock)
    updates = drive(g, stream, clock, 60.0)
    assert not stream.skips and all(u.gap is None for u in updates)
    report = g.report()
    assert report.rounds >= 25 and report.skipped_s == 0.0 and report.skips == 0
    assert 2.5 <= report.max_s <= 2.0 + 0.1 + 0.5 + 1e-9  # a step (and a block) waited, plus the compute
    assert g.state == "ok"


def test_overload_skips_to_one_step_bounds_the_lag_and_recovers():
    clock = Clock()
    step = 1.0
    stream = ScriptedStream(clock, step, cost=3.0)  # every round takes 3 s: far behind real time
    g = LagGovernor(step, adapt_step=False, clock=clock)  # the skip rule alone, at the caller's step
    updates = drive(g, stream, clock, 30.0)
    gaps = [u.gap for u in updates if u.gap is not None]
    assert gaps and stream.skips and set(stream.skips) == {KEEP_STEPS * step}
    report = g.report()
    assert report.skips == len(gaps)
    assert report.skipped_s == pytest.approx(sum(b - a for a, b in gaps))
    assert report.max_s <= MAX_LAG_STEPS * step + 3.0 + 1e-9  # two steps waiting + one round's compute
    assert g.state == "skipping"
    stream.cost = 0.2  # the load goes away
    drive(g, stream, clock, SKIPPING_HOLD_STEPS * step + 5.0)
    assert g.state == "ok" and g.report().skips <= report.skips + 1  # the backlog of the last slow round


def test_a_slow_round_after_keeping_up_is_behind_before_it_is_skipping():
    clock = Clock()
    stream = ScriptedStream(clock, 2.0, cost=3.5)  # 3.5 s waiting next time: behind, under 4 s
    g = LagGovernor(2.0, clock=clock)
    stream.pending = 2.0
    list(g.run(stream))
    stream.pending = 3.5
    stream.cost = 0.1
    list(g.run(stream))
    assert g.state == "behind" and not stream.skips


def test_audio_captured_while_the_engine_was_readied_is_decoded_not_skipped():
    """``catch_up``: the backlog of a capture that ran while the engine's graphs were readied is
    decoded (not a sign of a slow engine); the rule applies again from the next turn."""
    clock = Clock()
    stream = ScriptedStream(clock, 2.0, cost=1.0)
    g = LagGovernor(2.0, clock=clock)
    stream.pending = 9.6  # a whisper-base start on a 2-core CPU
    updates = list(g.run(stream, catch_up=True))
    assert not stream.skips and all(u.gap is None for u in updates) and stream.processed == 9.6
    assert g.report().skipped_s == 0.0 and g.state == "behind"  # it did start late: the badge says so
    stream.pending = 9.6
    assert any(u.gap is not None for u in g.run(stream)) and stream.skips  # an ordinary turn skips


def test_unbounded_governor_only_measures():
    clock = Clock()
    stream = ScriptedStream(clock, 1.0, cost=0.0)
    stream.pending = 10.0
    g = LagGovernor(1.0, bounded=False, clock=clock)
    assert len(list(g.run(stream))) == 1 and not stream.skips
    assert g.report().max_s == 10.0


def test_report_percentile_and_json():
    clock = Clock()
    g = LagGovernor(1.0, adapt_step=False, clock=clock)
    stream = ScriptedStream(clock, 1.0, cost=0.0)
    for lag in [1.0] * 95 + [1.9] * 5:
        stream.pending = lag
        list(g.run(stream))
    report = g.report()
    assert report.p95_s == 1.0 and report.max_s == 1.9 and report.rounds == 100
    assert report.to_json()["p95_s"] == 1.0
    assert "p95 1.00 s" in report.summary()
    assert LagReport().to_json()["rounds"] == 0
    with pytest.raises(ValueError):
        LagGovernor(0.0)


def test_a_round_that_raises_loses_none_of_the_updates_before_it() -> None:
    """run() yields each update as it exists, so the caller has the skip's and the earlier rounds'
    updates even when a later round raises (the last provider failing, a pack changed on disk)."""

    class Failing(ScriptedStream):
        def __init__(self, clock: Clock) -> None:
            super().__init__(clock, step_s=1.0, cost=0.1)
            self.rounds = 0

        def step(self):
            if self.pending < self.step_s:
                return None
            self.rounds += 1
            if self.rounds == 3:
                raise RuntimeError("the provider died")
            self.processed += self.step_s  # a step's audio arrives while the round runs
            return EngineUpdate(stats=RoundStats(round_index=self.rounds))

    clock = Clock()
    stream = Failing(clock)
    stream.pending = 4.0  # more than MAX_LAG_STEPS steps: a skip first, then the rounds
    got = []
    with pytest.raises(RuntimeError, match="died"):
        for update in LagGovernor(1.0, adapt_step=False, clock=clock).run(stream):
            got.append(update)
    assert got[0].gap is not None
    assert [u.stats.round_index for u in got[1:]] == [1, 2]


def test_a_step_too_short_for_the_engine_is_lengthened_before_anything_is_skipped():
    """Rounds that cost 1.2 s at a 0.5 s step: the first round leaves more than two steps waiting,
    so the step becomes 1 s, where the engine keeps up, and nothing is skipped (the lag bound is two
    of the longer steps); the state says "slower" and the report says which step it took."""
    clock = Clock()
    stream = ScriptedStream(clock, 0.5, cost=1.2, speech=True)
    g = LagGovernor(0.5, clock=clock)
    updates = drive(g, stream, clock, 120.0)
    assert stream.steps == [1.0] and g.step_s == 1.0 and g.base_step_s == 0.5
    assert not stream.skips and all(u.gap is None for u in updates) and g.report().skips == 0
    assert g.state == "slower"
    report = g.report()
    assert (report.step_s, report.longest_step_s, report.step_changes) == (1.0, 1.0, 1)
    assert report.to_json()["step_s"] == 1.0 and "step lengthened to 1 s" in report.summary()
    assert g.last_lag_s <= MAX_LAG_STEPS * 1.0 + 1.2 + 1e-9


def test_rounds_that_start_behind_lengthen_the_step_before_anything_is_skipped():
    """1.7 s rounds at a 1 s step start 1.7–1.8 s behind (over 1.5 steps, under the 2-step skip
    bound): three in a row lengthen the step to 2 s, with nothing lost."""
    clock = Clock()
    stream = ScriptedStream(clock, 1.0, cost=1.7)
    g = LagGovernor(1.0, clock=clock)
    updates = drive(g, stream, clock, 60.0)
    assert stream.steps == [2.0] and not stream.skips and all(u.gap is None for u in updates)
    assert g.state == "slower"


def test_the_shorter_step_comes_back_when_the_load_goes_and_each_relapse_doubles_the_hold():
    clock = Clock()
    stream = ScriptedStream(clock, 1.0, cost=2.5, speech=True)
    g = LagGovernor(1.0, clock=clock)
    drive(g, stream, clock, 20.0)
    assert stream.steps == [2.0]
    stream.cost = 0.2  # the load goes: at 1 s every round of the last 30 s would have kept up
    drive(g, stream, clock, SHORTEN_HOLD_S - 5.0)
    assert stream.steps == [2.0], "not before the hold has passed"
    drive(g, stream, clock, 10.0)
    assert stream.steps == [2.0, 1.0] and g.state == "ok"
    stream.cost = 2.5  # back: a relapse, so the next hold is twice as long
    drive(g, stream, clock, 20.0)
    assert stream.steps == [2.0, 1.0, 2.0] and g.shorten_hold_s == 2 * SHORTEN_HOLD_S
    stream.cost = 0.2
    drive(g, stream, clock, SHORTEN_HOLD_S + 5.0)
    assert stream.steps[-1] == 2.0
    drive(g, stream, clock, SHORTEN_HOLD_S)
    assert stream.steps == [2.0, 1.0, 2.0, 1.0] and g.report().step_changes == 4
    for _ in range(10):  # the hold stops growing
        g._relapses += 1
    assert g.shorten_hold_s == MAX_SHORTEN_HOLD_S


def test_only_rounds_that_heard_speech_bring_the_shorter_step_back():
    """Silence costs nothing to decode: a quiet minute says nothing of whether the next sentence
    would keep up at the shorter step."""
    clock = Clock()
    stream = ScriptedStream(clock, 1.0, cost=2.5)  # no words: silence, or speech not yet read
    g = LagGovernor(1.0, clock=clock)
    drive(g, stream, clock, 20.0)
    stream.cost = 0.05
    drive(g, stream, clock, 120.0)
    assert stream.steps == [2.0] and g.state == "slower"


def test_the_step_grows_to_three_seconds_at_most_and_a_stream_that_refuses_one_keeps_its_own():
    clock = Clock()
    stream = ScriptedStream(clock, 0.5, cost=9.0)  # hopeless: skips at every step
    g = LagGovernor(0.5, clock=clock)
    drive(g, stream, clock, 120.0)
    assert stream.steps == [1.0, 2.0, 3.0] and g.step_s == 3.0 and g.state == "skipping"

    class Refusing(ScriptedStream):
        def set_step(self, step_s: float) -> None:
            if step_s > 1.0:
                raise CaptionerError("maximum input must be in (2 × step, 30] seconds")
            super().set_step(step_s)

    clock = Clock()
    refusing = Refusing(clock, 0.5, cost=9.0)
    g = LagGovernor(0.5, clock=clock)
    drive(g, refusing, clock, 120.0)
    assert refusing.steps == [1.0] and g.step_s == 1.0


def test_the_backlog_of_readying_and_an_unbounded_governor_leave_the_step_alone():
    clock = Clock()
    stream = ScriptedStream(clock, 1.0, cost=1.7)
    g = LagGovernor(1.0, clock=clock)
    for _ in range(5):
        stream.pending = 1.8
        list(g.run(stream, catch_up=True))
    assert not stream.steps
    clock = Clock()
    stream = ScriptedStream(clock, 1.0, cost=3.0)
    g = LagGovernor(1.0, bounded=False, clock=clock)
    drive(g, stream, clock, 30.0)
    assert not stream.steps and g.state != "slower"
