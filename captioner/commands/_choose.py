"""``captioner models choose``: measure every installed model on this computer, pick the largest that keeps up.

Each sound pack captions the bundled recording of real speech (or ``--audio``) live, paced at real
time, on the settings' provider and step (:mod:`captioner.bench.model_choice` has the measurement
and the rule). Progress goes to stderr, the table and the choice to stdout; ``--apply`` makes the
choice the settings' model (``engine.model``), ``--json`` writes every measurement. Exit status 0
when a model keeps up, 1 when none does (the table says how each fell behind).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from captioner.audio.files import load_audio_file
from captioner.bench.model_choice import MAX_SHARE, Trial, choose, hears, measure, room_for, speech_sample
from captioner.commands._engine import npu_when
from captioner.core import PROVIDERS, SAMPLE_RATE, Provider, stream_sources
from captioner.engine import Runtime, StreamConfig, Transcriber
from captioner.errors import CaptionerError, ModelError
from captioner.models.install import DEFAULT_MODEL, first_installed_pack, list_packs
from captioner.storage.paths import AppPaths
from captioner.storage.settings import Settings, load_settings, save_settings

__all__ = ["Choice", "add_choose", "measure_function", "measure_installed"]


def add_choose(sub: argparse._SubParsersAction) -> None:
    """Add ``models choose`` to the ``models`` command's actions."""
    p = sub.add_parser(
        "choose", help="measure the installed models on this computer and pick the largest that keeps up",
        description="Caption real speech live with every installed model, on the provider and at the step of "
        "your settings, and pick the largest model that keeps up with real time with room to spare "
        f"(its compute at most {_percent(MAX_SHARE)} of real time, nothing skipped, the step never lengthened). "
        "Takes as long as the recording for each model (22.8 s with the bundled one).")
    p.add_argument("--step", type=float, metavar="S", help="measure at this step, 0.5-3.0 s (default: the settings')")
    p.add_argument("--provider", choices=PROVIDERS, help="measure on this provider (default: the settings')")
    p.add_argument("--audio", type=Path, metavar="FILE",
                   help="caption this recording instead of the bundled one (22.8 s of read English)")
    p.add_argument("--apply", action="store_true", help="make the chosen model your model (settings engine.model)")
    p.add_argument("--json", type=Path, metavar="FILE", help="write every measurement and the choice as JSON")
    p.set_defaults(func=_choose)


@dataclass(frozen=True, slots=True)
class Choice:
    """Every installed pack measured, and the one chosen.

    Attributes:
        trials: the packs that ran, smallest first.
        failed: pack name -> why it could not run (broken, no provider).
        chosen: the largest that keeps up and hears the settings' language, or None.
        current: the settings' model now (its name; "" when none is installed).
        language, task: the settings' (what the chosen pack must hear).
        step_s: the step measured at.
    """

    trials: list[Trial]
    failed: dict[str, str]
    chosen: Trial | None
    current: str
    language: str
    task: str
    step_s: float

    def table(self) -> list[str]:
        """One line per pack (size, provider, compute, lag, word delay, verdict), a header first."""
        streams = self.trials[0].streams if self.trials else 1
        sources = "" if streams == 1 else f" ({streams} sources)"
        rows = [("model", "size", "on", f"compute{sources}", "lag max", "words after", "")]
        for t in self.trials:
            rows.append((t.name, f"{t.parameters / 1e6:.0f} M", t.provider, f"{_percent(t.share)} of real time",
                         f"{t.lag.max_s:.1f} s", f"{t.latency_s:.1f} s", _verdict_text(t)))
        widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]) - 1)]
        lines = [("  ".join(c.ljust(w) for c, w in zip(row, widths, strict=False)) + "  " + row[-1]).rstrip()
                 for row in rows]
        return lines + [f"{name}: could not run: {why}" for name, why in self.failed.items()]

    def conclusion(self) -> list[str]:
        """What was chosen and why not a larger one (an English-only pack for another language), or why
        none was."""
        lines = [f"{t.name} hears only English; your language setting is {self.language!r}: passed over"
                 for t in self.trials if (self.chosen is None or t.parameters > self.chosen.parameters)
                 and t.verdict == "keeps up" and not hears(t, self.language, self.task)]
        if self.chosen is None:
            return [*lines, f"No installed model keeps up here at a {self.step_s:g} s step with room to spare. Try "
                            f"a longer step (captioner models choose --step {min(3.0, 2 * self.step_s):g}) or a "
                            "smaller model (captioner models install tiny.en, English only)."]
        c = self.chosen
        lines.append(f"The largest model that keeps up here: {c.name} (words shown about {c.latency_s:.1f} s "
                     f"after they are spoken, the engine busy {_percent(c.share)} of the time).")
        room = room_for(c, [t.name for t in self.trials] + list(self.failed), self.language, self.task)
        if room is not None:
            model, share = room
            lines.append(f"There may be room for a larger model: {model.short} ({model.millions} M parameters) would "
                         f"take about {_percent(share)} of real time here if its compute grows with its size (an "
                         f"estimate): captioner models install {model.short}, then measure again.")
        return lines

    def to_json(self) -> dict:
        """Every measurement and the choice (``--json``)."""
        return {"max_share": MAX_SHARE, "step_s": self.step_s, "trials": [t.to_json() for t in self.trials],
                "failed": self.failed, "chosen": self.chosen.name if self.chosen else None}


def measure_installed(paths: AppPaths, settings: Settings, *, step_s: float | None = None,
                      provider: Provider | None = None, audio: Path | None = None,
                      progress: Callable[[str], None] = lambda line: None,
                      stop: Callable[[], bool] = lambda: False) -> Choice:
    """Measure every installed pack live on ``audio`` (default: the bundled sample) with ``settings``'
    provider, step and sources (``step_s`` and ``provider`` override them), and choose.

    Raises:
        ModelError: no pack installed.
        CaptionerError: a bad step, an unreadable recording.
        Cancelled: ``stop()`` turned True (checked after every round).
    """
    engine = settings.engine
    try:
        config = StreamConfig(step_s=float(step_s if step_s is not None else engine.step_s), language="en")
    except (TypeError, ValueError) as exc:
        raise CaptionerError(f"invalid step: {exc}") from exc
    streams = len(stream_sources(settings.audio.source, settings.audio.mix_both))
    installed = sorted(list_packs(paths), key=lambda item: item.pack.dims.parameters if item.pack else 0)
    if not installed:
        raise ModelError(f"no model pack installed in {paths.packs}; install one with "
                         f"'captioner models install {DEFAULT_MODEL}'")
    samples = load_audio_file(audio or speech_sample())
    if not len(samples):
        raise CaptionerError(f"{audio} holds no audio")
    trials: list[Trial] = []
    failed: dict[str, str] = {}
    for item in installed:
        if item.pack is None:
            failed[item.name] = f"broken: {item.error}"
            continue
        progress(f"measuring {item.name} ({item.pack.dims.parameters / 1e6:.0f} M parameters): "
                 f"{len(samples) / SAMPLE_RATE:.1f} s of speech at real-time pace, a {config.step_s:g} s step …")
        try:
            transcriber = Transcriber.from_pack(item.pack, provider or engine.provider, cache_dir=paths.cache)
        except CaptionerError as exc:
            failed[item.name] = str(exc)
            continue
        try:
            trials.append(measure(transcriber, config, samples, streams=streams, stop=stop,
                                  compiled=_compile_progress(item.name, transcriber.runtime, progress)))
        except CaptionerError as exc:
            failed[item.name] = str(exc)
        finally:
            transcriber.close()
    first = first_installed_pack(paths)
    current = engine.model or (first.name if first is not None else "")
    return Choice(trials, failed, choose(trials, engine.language, engine.task), current, engine.language,
                  engine.task, config.step_s)


_Measure = Callable[[Settings, Callable[[str], None], Callable[[], bool]], tuple[str, str | None]]


def measure_function(paths: AppPaths, audio: Path | None = None) -> _Measure:
    """What the app's Settings → Model → Measure runs (on a thread of its own): the settings being
    edited, a progress line callback and a stop flag in; the report (the table, a blank line, the
    conclusion) and the chosen pack's name (None: none keeps up) out. ``audio``: another recording
    than the bundled one."""

    def run(settings: Settings, progress: Callable[[str], None], stop: Callable[[], bool]) -> tuple[str, str | None]:
        choice = measure_installed(paths, settings, audio=audio, progress=progress, stop=stop)
        report = "\n".join(choice.table()) + "\n\n" + " ".join(choice.conclusion())
        return report, choice.chosen.name if choice.chosen else None

    return run


def _choose(args: argparse.Namespace, paths: AppPaths) -> int:
    if args.json is not None and not args.json.parent.is_dir():  # said before a minute of measuring
        raise CaptionerError(f"--json {args.json}: the folder {args.json.parent} does not exist")
    settings, _problems = load_settings(paths.settings_file)  # problems are logged (reset to defaults)
    choice = measure_installed(paths, settings, step_s=args.step, provider=args.provider, audio=args.audio,
                               progress=_say)
    for line in choice.table() + choice.conclusion():
        print(line)
    chosen = choice.chosen
    if chosen is not None:
        if choice.current in (chosen.name, str(paths.packs / chosen.name)):
            print("It is your model already.")
        elif args.apply:
            changed = dataclasses.replace(settings.engine, model=chosen.name)
            save_settings(dataclasses.replace(settings, engine=changed), paths.settings_file)
            print(f"Your model is now {chosen.name} (settings engine.model; a running app uses it once restarted).")
        else:
            print(f"Your model is {choice.current or 'none'}. To use {chosen.name}: captioner models choose --apply "
                  f"(or captioner settings set engine.model {chosen.name}).")
    if args.json is not None:
        _write_json(args.json, choice.to_json())
    return 0 if chosen is not None else 1


def _compile_progress(name: str, runtime: Runtime, progress: Callable[[str], None]) -> Callable[[int, int], None]:
    """``preparing the NPU for whisper-base (once for this model) … 3/22`` as progress lines."""

    def compiled(done: int, total: int) -> None:
        progress(f"preparing the NPU for {name} ({npu_when(runtime)}) … {done}/{total}")

    return compiled


def _say(line: str) -> None:
    print(f"captioner: {line}", file=sys.stderr, flush=True)


def _percent(share: float) -> str:
    return f"{100 * share:.0f} %"


def _verdict_text(t: Trial) -> str:
    if t.verdict == "too slow":
        return f"too slow: {t.lag.skipped_s:.1f} s of speech skipped" if t.lag.skips else "too slow: behind real time"
    if t.verdict == "slower":
        return f"falls behind: kept up only with captions every {t.lag.longest_step_s:g} s"
    if t.verdict == "little room":
        return f"keeps up with little room (over {_percent(MAX_SHARE)})"
    return "keeps up"


def _write_json(path: Path, doc: dict) -> None:
    try:
        path.write_text(json.dumps(doc, indent=2) + "\n", encoding="utf-8")
    except OSError as exc:
        raise CaptionerError(f"cannot write {path}: {exc.strerror or exc}") from exc
