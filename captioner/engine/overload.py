"""The bounded-lag rule: what a live caller does when the engine falls behind real time.

A live source delivers audio at real-time pace whatever the engine does. When rounds take longer
than the audio they cover (a slow provider, a busy CPU), the audio waiting for the engine grows
without bound, and once the capture's ring is full the device's blocks are replaced by silence:
words are lost and nobody is told. The rule, in one home (:class:`LagGovernor`), used by the app's
worker, ``captioner listen`` and ``captioner transcribe --realtime``:

* the caller first hands the stream *everything* captured so far (it drains the capture with
  non-blocking reads), so the stream's ``lag_s`` is the whole backlog, capture ring included;
* if more than :data:`MAX_LAG_STEPS` steps of audio wait, ``Stream.skip`` drops all but the
  newest :data:`KEEP_STEPS` step undecoded: the transcript gets a gap marker for the dropped span
  (``EngineUpdate.gap``) and the open utterance ends as it stands;
* then the due round runs on what is left; with more than :data:`BEHIND_STEPS` steps waiting it
  runs in a hurry (``Stream.hurry``): a closing round decodes only its own input instead of
  re-decoding the whole utterance, the one round whose cost can exceed the bound by itself;
* once, when a session starts: the audio captured while the engine's graphs were readied (the app's
  worker opens the capture first, then readies them: seconds on a CPU) is decoded, not skipped
  (``catch_up``): that backlog says nothing about the engine's speed;
* **a longer step while the engine cannot keep up** (PRODUCT.md's "longer step when the lag
  grows"): where more than two steps wait (before skipping: the skip is then decided on the
  longer step's bound), after audio the capture dropped, or after :data:`LENGTHEN_AFTER_ROUNDS`
  rounds in a row that started behind, the stream's step is doubled (``Stream.set_step``; the
  user's step, then twice it, and so on up to :data:`MAX_STEP_S`). Rounds then come less often,
  so each round's compute has a longer step to fit in and the skip bound (two steps) is further
  away: captions update less often instead of losing words; only an engine too slow even at
  :data:`MAX_STEP_S` skips. The shorter step is tried again once :data:`SHORTEN_HOLD_S` of wall
  time has passed at the longer one and the rounds that heard speech in the last such span would
  have kept up at it (at least :data:`SHORTEN_MIN_ROUNDS`, none slower than the "behind" bound of
  the shorter step, their mean compute within :data:`SHORTEN_MEAN_SHARE` of it; silence costs
  nothing to decode, so it is no evidence); each time the step must be lengthened again after
  that, the hold doubles (up to :data:`MAX_SHORTEN_HOLD_S`), so a machine that is only sometimes
  fast enough settles on the step it can hold instead of swinging between the two.

So a round never starts with more than ``MAX_LAG_STEPS × step`` seconds waiting (the step in
force), and the words of a round appear at most ``MAX_LAG_STEPS × step`` plus that round's
compute after the oldest audio they cover was captured (the lag bound of issue 16). Why these numbers: a machine that keeps
up starts each round with about one step waiting (plus the last round's compute, under one step),
so twice the step leaves room for jitter and never skips there; keeping one step means the round
after a skip is an ordinary one (it needs no more than ``step_s`` to run) and the engine has
caught up when it ends. Recovery needs nothing: once rounds are faster than real time again the
backlog never reaches the threshold.

The *lag* reported (the caption bar, the tray, the CLI summaries) is that bound measured: per
round, the seconds of audio that waited when it started plus its compute, i.e. how late its
oldest audio's words appear. :class:`LagReport` summarises it over a session (max, p95, seconds
skipped).
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Literal, Protocol

from captioner.core import EngineUpdate
from captioner.errors import CaptionerError

__all__ = [
    "BEHIND_STEPS",
    "KEEP_STEPS",
    "LENGTHEN_AFTER_ROUNDS",
    "MAX_LAG_STEPS",
    "MAX_SHORTEN_HOLD_S",
    "MAX_STEP_S",
    "SHORTEN_HOLD_S",
    "SHORTEN_MEAN_SHARE",
    "SHORTEN_MIN_ROUNDS",
    "SKIPPING_HOLD_STEPS",
    "LagGovernor",
    "LagReport",
    "LagState",
    "SkippableStream",
]

logger = logging.getLogger(__name__)

MAX_LAG_STEPS = 2.0  # skip when more than this many steps of audio wait for the engine ...
KEEP_STEPS = 1.0  # ... keeping the newest this many steps (one ordinary round)
BEHIND_STEPS = 1.5  # a round that starts with more than this many steps waiting is "behind"
SKIPPING_HOLD_STEPS = 5.0  # "skipping" stays on until this many steps (wall time) pass without a skip
MAX_STEP_S = 3.0  # the longest step the rule lengthens to (the longest a StreamConfig allows)
LENGTHEN_AFTER_ROUNDS = 3  # rounds in a row that started behind (or one skip) lengthen the step
SHORTEN_HOLD_S = 30.0  # wall seconds at a longer step before the shorter one is tried again ...
MAX_SHORTEN_HOLD_S = 480.0  # ... doubled at each relapse, up to this
SHORTEN_MIN_ROUNDS = 5  # ... judged on at least this many rounds that heard speech meanwhile
SHORTEN_MEAN_SHARE = 0.6  # ... whose mean compute is within this share of the shorter step

LagState = Literal["ok", "slower", "behind", "skipping"]


class SkippableStream(Protocol):
    """What the rule needs of a stream (``captioner.engine.Stream``)."""

    hurry: bool  # set before each round: more than BEHIND_STEPS steps wait (cheap closing rounds)

    @property
    def lag_s(self) -> float: ...

    def step(self) -> EngineUpdate | None: ...

    def skip(self, keep_s: float) -> EngineUpdate: ...

    def set_step(self, step_s: float) -> None: ...


@dataclass(frozen=True, slots=True)
class LagReport:
    """The lag of a session (seconds; see the module docstring for what lag counts).

    Attributes:
        rounds: rounds measured.
        max_s, p95_s, mean_s: over those rounds (0 when none).
        skipped_s: audio dropped undecoded by the rule.
        skips: how many times the rule skipped.
        step_s: the step in force now; longest_step_s: the longest it was; step_changes: how
            many times the rule lengthened or shortened it (0: the caller's step throughout).
    """

    rounds: int = 0
    max_s: float = 0.0
    p95_s: float = 0.0
    mean_s: float = 0.0
    skipped_s: float = 0.0
    skips: int = 0
    step_s: float = 0.0
    longest_step_s: float = 0.0
    step_changes: int = 0

    def to_json(self) -> dict[str, float | int]:
        """The ``lag`` object of the CLI's ``--json`` stats."""
        return {"rounds": self.rounds, "max_s": round(self.max_s, 3), "p95_s": round(self.p95_s, 3),
                "mean_s": round(self.mean_s, 3), "skipped_s": round(self.skipped_s, 3), "skips": self.skips,
                "step_s": self.step_s, "longest_step_s": self.longest_step_s, "step_changes": self.step_changes}

    def summary(self) -> str:
        """One line for a stderr summary."""
        line = (f"lag max {self.max_s:.2f} s, p95 {self.p95_s:.2f} s over {self.rounds} rounds; "
                f"skipped {self.skipped_s:.1f} s of audio in {self.skips} skips (behind real time)")
        if self.step_changes:
            changes = "1 change" if self.step_changes == 1 else f"{self.step_changes} changes"
            line += f"; step lengthened to {self.longest_step_s:g} s to keep up ({changes}, {self.step_s:g} s at the end)"
        return line


def _p95(values: list[float]) -> float:
    """The 95th percentile (nearest rank) of ``values``; 0 for none."""
    if not values:
        return 0.0
    ordered = sorted(values)
    return ordered[max(0, math.ceil(0.95 * len(ordered)) - 1)]


class LagGovernor:
    """Applies the bounded-lag rule to one live stream and measures its lag.

    Args:
        step_s: the stream's step (``StreamConfig.step_s``), seconds: the step the user chose.
        bounded: apply the rule; False only measures (a file read as fast as it can be is never
            behind real time: its backlog is the rest of the file).
        adapt_step: lengthen the step while the engine cannot keep up (module docstring).
        clock: monotonic seconds (wall time; injectable for tests).

    Call :meth:`run` after feeding the stream everything captured so far. ``step_s`` is the step
    in force (``base_step_s`` the caller's).
    """

    def __init__(self, step_s: float, *, bounded: bool = True, adapt_step: bool = True,
                 clock: Callable[[], float] = time.monotonic) -> None:
        if step_s <= 0:
            raise ValueError(f"step must be positive, got {step_s}")
        self.base_step_s = self.step_s = step_s
        ladder = [step_s]
        while bounded and adapt_step and ladder[-1] < MAX_STEP_S:
            ladder.append(min(MAX_STEP_S, 2 * ladder[-1]))
        self._ladder = ladder  # the steps the rule may choose, shortest (the caller's) first
        self._rung = 0
        self._behind_run = 0  # rounds in a row that started behind
        self._lengthen_due = False  # a skip or dropped audio since the last round
        self._speech_costs: list[tuple[float, float]] = []  # (wall time, compute) of rounds that heard speech
        self._step_since = clock()
        self._relapses = 0  # lengthenings after a shortening: each doubles the hold
        self._shortened = False  # the last change shortened the step
        self._step_changes = 0
        self._longest_step_s = step_s
        self.bounded = bounded
        self._clock = clock
        self._lags: list[float] = []
        self._skipped_s = 0.0
        self._skips = 0
        self._last_skip: float | None = None
        self.last_lag_s = 0.0  # lag of the latest round (or the backlog that made the latest skip)
        self._last_wait = 0.0  # audio that waited when the latest round started

    @property
    def max_wait_s(self) -> float:
        """Audio waiting beyond this is skipped (``MAX_LAG_STEPS × step_s``)."""
        return MAX_LAG_STEPS * self.step_s

    def run(self, stream: SkippableStream, stop: Callable[[], bool] = lambda: False, *,
            catch_up: bool = False) -> Iterator[EngineUpdate]:
        """Apply the rule to ``stream`` (fed up to now), then run its due rounds. ``catch_up``: what
        waits was captured while the engine was being readied (the app's worker), not lost to a slow
        engine: it is decoded, not skipped (the capture's ring bounds it).

        Yields:
            the updates in order, each as soon as it exists: the skip's (with its ``gap``) when the
            rule skipped, then each round's. A generator, so a round that raises (the last provider
            failing, a changed pack) loses none of the updates of the rounds before it.
        """
        waiting = stream.lag_s
        while self.bounded and not catch_up and waiting > self.max_wait_s and self._rung + 1 < len(self._ladder):
            self._set_rung(stream, self._rung + 1)  # a longer step before any audio is lost
        if self.bounded and not catch_up and waiting > self.max_wait_s:
            skipped = stream.skip(KEEP_STEPS * self.step_s)
            if skipped.gap is not None:
                self._skipped_s += skipped.gap[1] - skipped.gap[0]
                self._skips += 1
                self._last_skip = self._clock()
                self._lengthen_due = True
                self.last_lag_s = waiting
                logger.debug("%.1f s waiting (more than %.1f s): skipped", waiting, self.max_wait_s)
            if not skipped.is_empty:
                yield skipped
            waiting = stream.lag_s
        while not stop():
            t0 = self._clock()
            behind = waiting > BEHIND_STEPS * self.step_s
            stream.hurry = self.bounded and behind
            update = stream.step()
            if update is None:
                break
            compute = self._clock() - t0
            self._last_wait = waiting
            self.last_lag_s = waiting + compute
            self._lags.append(self.last_lag_s)
            if not catch_up:  # the readying's backlog says nothing of the engine's speed
                self._behind_run = self._behind_run + 1 if behind else 0
                if update.words and self._rung:  # evidence for a shorter step
                    self._speech_costs.append((self._clock(), compute))
                self._adapt(stream)
            waiting = stream.lag_s
            yield update

    def _adapt(self, stream: SkippableStream) -> None:
        """Lengthen or shorten ``stream``'s step after a round (module docstring)."""
        if self._lengthen_due or self._behind_run >= LENGTHEN_AFTER_ROUNDS:
            self._lengthen_due = False
            if self._rung + 1 < len(self._ladder):
                self._set_rung(stream, self._rung + 1)
            return
        now, hold = self._clock(), self.shorten_hold_s
        if self._rung == 0 or now - self._step_since < hold:
            return
        self._speech_costs = [(t, c) for t, c in self._speech_costs if t >= now - hold]
        shorter = self._ladder[self._rung - 1]
        costs = [c for _, c in self._speech_costs]
        if (len(costs) >= SHORTEN_MIN_ROUNDS and max(costs) <= BEHIND_STEPS * shorter
                and sum(costs) / len(costs) <= SHORTEN_MEAN_SHARE * shorter):
            self._set_rung(stream, self._rung - 1)

    @property
    def shorten_hold_s(self) -> float:
        """Wall seconds at a longer step before the shorter one is tried again."""
        return min(MAX_SHORTEN_HOLD_S, SHORTEN_HOLD_S * 2.0**self._relapses)

    def _set_rung(self, stream: SkippableStream, rung: int) -> None:
        step = self._ladder[rung]
        try:
            stream.set_step(step)
        except CaptionerError as exc:  # a stream whose input cannot hold two such steps: stay
            logger.info("the step stays %.1f s: %s", self.step_s, exc)
            del self._ladder[rung:]
            return
        longer = rung > self._rung
        if longer and self._shortened:
            self._relapses += 1
        self._shortened = not longer
        logger.info("step %s to %.1f s (%s)", "lengthened" if longer else "shortened", step,
                    "the engine is behind real time" if longer else "the engine keeps up again")
        self._rung, self.step_s = rung, step
        self._longest_step_s = max(self._longest_step_s, step)
        self._step_changes += 1
        self._behind_run = 0
        self._speech_costs = []
        self._step_since = self._clock()

    def note_dropped(self, seconds: float) -> None:
        """Audio lost before it reached the stream (the capture's ring overflowed during a round
        longer than the ring): counted as skipped, the state says "skipping", and the step is
        lengthened after the next round."""
        self._skipped_s += seconds
        self._skips += 1
        self._last_skip = self._clock()
        self._lengthen_due = True

    @property
    def state(self) -> LagState:
        """"skipping" until :data:`SKIPPING_HOLD_STEPS` steps (wall time) have passed without a
        skip (sustained overload skips every few rounds: the state must not flicker); "behind" while the last round
        started with more than :data:`BEHIND_STEPS` steps waiting (the round before it took longer
        than the audio it covered); "slower" while the step is longer than the caller's (the engine
        keeps up by updating less often); else "ok"."""
        if self._last_skip is not None and self._clock() - self._last_skip < SKIPPING_HOLD_STEPS * self.step_s:
            return "skipping"
        if self._last_wait > BEHIND_STEPS * self.step_s:
            return "behind"
        return "slower" if self._rung else "ok"

    def report(self) -> LagReport:
        """The lag so far (max, p95, mean over rounds) and what was skipped."""
        lags = self._lags
        return LagReport(len(lags), max(lags, default=0.0), _p95(lags),
                         sum(lags) / len(lags) if lags else 0.0, self._skipped_s, self._skips,
                         self.step_s, self._longest_step_s, self._step_changes)
