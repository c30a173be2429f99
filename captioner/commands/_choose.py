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
from pathlib import Path

from captioner.audio.files import load_audio_file
from captioner.bench.model_choice import MAX_SHARE, Trial, choose, hears, measure, speech_sample
from captioner.core import PROVIDERS, SAMPLE_RATE, stream_sources
from captioner.engine import StreamConfig, Transcriber
from captioner.errors import CaptionerError, ModelError
from captioner.models.install import DEFAULT_MODEL, first_installed_pack, list_packs
from captioner.storage.paths import AppPaths
from captioner.storage.settings import Settings, load_settings, save_settings

__all__ = ["add_choose"]


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


def _choose(args: argparse.Namespace, paths: AppPaths) -> int:
    settings, _problems = load_settings(paths.settings_file)  # problems are logged (reset to defaults)
    engine = settings.engine
    try:
        config = StreamConfig(step_s=float(args.step if args.step is not None else engine.step_s), language="en")
    except (TypeError, ValueError) as exc:
        raise CaptionerError(f"invalid step: {exc}") from exc
    provider = args.provider or engine.provider
    streams = len(stream_sources(settings.audio.source, settings.audio.mix_both))
    installed = sorted(list_packs(paths), key=lambda item: item.pack.dims.parameters if item.pack else 0)
    if not installed:
        raise ModelError(f"no model pack installed in {paths.packs}; install one with "
                         f"'captioner models install {DEFAULT_MODEL}'")
    audio = load_audio_file(args.audio or speech_sample())
    if not len(audio):
        raise CaptionerError(f"{args.audio} holds no audio")
    trials: list[Trial] = []
    failed: dict[str, str] = {}
    for item in installed:
        if item.pack is None:
            failed[item.name] = f"broken: {item.error}"
            continue
        _say(f"measuring {item.name} ({item.pack.dims.parameters / 1e6:.0f} M parameters): "
             f"{len(audio) / SAMPLE_RATE:.1f} s of speech at real-time pace, a {config.step_s:g} s step …")
        try:
            transcriber = Transcriber.from_pack(item.pack, provider, cache_dir=paths.cache)
        except CaptionerError as exc:
            failed[item.name] = str(exc)
            continue
        try:
            trials.append(measure(transcriber, config, audio, streams=streams))
        except CaptionerError as exc:
            failed[item.name] = str(exc)
        finally:
            transcriber.close()
    _print_table(trials, failed, streams)
    chosen = choose(trials, engine.language, engine.task)
    code = _say_choice(chosen, trials, settings, paths, config.step_s, apply=args.apply)
    if args.json is not None:
        _write_json(args.json, trials, failed, chosen, streams)
    return code


def _say(line: str) -> None:
    print(f"captioner: {line}", file=sys.stderr, flush=True)


def _print_table(trials: list[Trial], failed: dict[str, str], streams: int) -> None:
    sources = "" if streams == 1 else f" ({streams} sources)"
    rows = [("model", "size", "on", f"compute{sources}", "lag max", "words after", "")]
    for t in trials:
        rows.append((t.name, f"{t.parameters / 1e6:.0f} M", t.provider, f"{_percent(t.share)} of real time",
                     f"{t.lag.max_s:.1f} s", f"{t.latency_s:.1f} s", _verdict_text(t)))
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]) - 1)]
    for row in rows:
        print(("  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=False)) + "  " + row[-1]).rstrip())
    for name, why in failed.items():
        print(f"{name}: could not run: {why}")


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


def _say_choice(chosen: Trial | None, trials: list[Trial], settings: Settings, paths: AppPaths, step_s: float,
                *, apply: bool) -> int:
    language = settings.engine.language
    for t in trials:
        larger = chosen is None or t.parameters > chosen.parameters
        if larger and t.verdict == "keeps up" and not hears(t, language, settings.engine.task):
            print(f"{t.name} hears only English; your language setting is {language!r}: passed over")
    if chosen is None:
        print(f"No installed model keeps up here at a {step_s:g} s step with room to spare. Try a longer step "
              f"(captioner models choose --step {min(3.0, 2 * step_s):g}) or a smaller model "
              f"(captioner models install tiny.en, English only).")
        return 1
    print(f"The largest model that keeps up here: {chosen.name} (words shown about {chosen.latency_s:.1f} s after "
          f"they are spoken, the engine busy {_percent(chosen.share)} of the time).")
    current = settings.engine.model or (first.name if (first := first_installed_pack(paths)) else "")
    if current in (chosen.name, str(paths.packs / chosen.name)):
        print("It is your model already.")
    elif apply:
        changed = dataclasses.replace(settings.engine, model=chosen.name)
        save_settings(dataclasses.replace(settings, engine=changed), paths.settings_file)
        print(f"Your model is now {chosen.name} (settings engine.model; a running app uses it once restarted).")
    else:
        print(f"Your model is {current or 'none'}. To use {chosen.name}: captioner models choose --apply "
              f"(or captioner settings set engine.model {chosen.name}).")
    return 0


def _write_json(path: Path, trials: list[Trial], failed: dict[str, str], chosen: Trial | None, streams: int) -> None:
    doc = {"max_share": MAX_SHARE, "streams": streams, "trials": [t.to_json() for t in trials],
           "failed": failed, "chosen": chosen.name if chosen else None}
    try:
        path.write_text(json.dumps(doc, indent=2) + "\n", encoding="utf-8")
    except OSError as exc:
        raise CaptionerError(f"cannot write {path}: {exc.strerror or exc}") from exc
