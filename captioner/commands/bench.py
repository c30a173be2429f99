"""``captioner bench``: measure what NPUsper saves, and the streaming engine's cost, on this machine.

By default the bench builds (once, cached under the user cache directory) a pack from a random
checkpoint with whisper-base's real dimensions — weights do not change what a graph costs — so it
runs offline anywhere; ``--model`` measures a real pack instead. Sections: encoder per bucket,
decoder strategies (controlled unrolling vs a graph per token vs AI Hub's fixed 200-position graph),
tail chunk size K = 3/5/7, and streaming runs over a 5-minute recording at 1 s and 2 s steps. The
``accuracy`` section (not run by default; it needs ``--model`` and ``--manifest``) scores the live
engine against the same pack run offline on real speech (:mod:`captioner.bench.accuracy`). The
Markdown summary goes to stdout (or ``--report``), progress to stderr. The ``soak`` section (not run by
default; ``--model`` and ``--manifest`` or ``--audio``) runs a long session of real speech through the
app's worker into a real store and checks that nothing drifts (:mod:`captioner.bench.soak`).
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
from pathlib import Path

from captioner.audio import load_audio_file
from captioner.bench import accuracy_report
from captioner.bench.accuracy import AccuracyOptions, accuracy_bench, load_manifest
from captioner.bench.jitter import parse_setting
from captioner.bench.joined import join_halves
from captioner.bench.plots import matplotlib_available, write_plots
from captioner.bench.random_pack import RANDOM_DIMS, cached_random_pack
from captioner.bench.report import markdown
from captioner.bench.run import BenchOptions, run_bench
from captioner.commands import described
from captioner.commands._engine import command_vocabulary, resolve_pack_path
from captioner.core import PROVIDERS
from captioner.engine import StreamConfig
from captioner.errors import CaptionerError
from captioner.models.pack import Pack
from captioner.storage.paths import AppPaths
from captioner.transcript.export import atomic_write_text

__all__ = ["register"]

logger = logging.getLogger(__name__)

_SHORT_STREAM_S = 16.0


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add the ``bench`` subcommand."""
    p = subparsers.add_parser("bench", help="measure the engine: buckets, decoder strategies, streaming",
                              description=described(__doc__))
    which = p.add_mutually_exclusive_group()
    which.add_argument("--model", metavar="PACK", help="measure this installed pack or pack directory")
    which.add_argument("--random-dims", choices=RANDOM_DIMS, default=None,
                       help="random weights with these real Whisper dimensions (default: base)")
    p.add_argument("--provider", choices=PROVIDERS, default="cpu", help="execution provider (default: cpu)")
    p.add_argument("--step", type=float, action="append", metavar="S",
                   help="streaming step in seconds (repeatable; default: 1 and 2)")
    p.add_argument("--threads", type=int, default=0, metavar="N", help="intra-op threads (default: the engine's)")
    p.add_argument("--audio", type=Path, metavar="WAV", help="stream this recording instead of synthetic speech")
    p.add_argument("--json", type=Path, metavar="OUT", help="write the full result as JSON")
    p.add_argument("--report", type=Path, metavar="OUT.md", help="write the Markdown summary here (not to stdout)")
    p.add_argument("--plots", type=Path, metavar="DIR", help="write PNG plots into DIR (needs matplotlib)")
    p.add_argument("--short", action="store_true", help="a quick run: 2 repetitions, 16 s of audio (for CI)")
    p.add_argument("--sections", default="encoder,decoder,chunk_sizes,streaming",
                   help="comma-separated subset of encoder,decoder,chunk_sizes,streaming,accuracy,soak")
    acc = p.add_argument_group("accuracy section (real speech; needs --model)")
    acc.add_argument("--manifest", type=Path, action="append", metavar="JSONL",
                     help="speech items with references (the development corpus' manifest.jsonl format); "
                          "repeatable: each manifest is split into the two halves on its own (a speaker keeps the half "
                          "of the first manifest that has them)")
    acc.add_argument("--kinds", metavar="K,K", help="only items of these kinds (comma-separated)")
    acc.add_argument("--limit", type=int, metavar="N", help="at most N items of each kind")
    acc.add_argument("--half", choices=("tune", "check", "both"), default="both",
                     help="only the speakers of one half of the manifest (split by speaker, balanced per kind; "
                          "the report gives both halves apart); default both")
    acc.add_argument("--rotate-halves", action="store_true", help="swap the tuning and checking halves")
    acc.add_argument("--join", type=float, metavar="S",
                     help="continuous speech: each half's English recordings (long-forms left out) cut to their "
                          "speech and joined S seconds apart (2.5 × S at a change of speaker), one recording per half")
    acc.add_argument("--speed", type=float, default=1.0, metavar="F",
                     help="every recording played F times as fast (0.8-1.25; resampled, so the pitch moves with "
                          "it): the corpus's words in new voices, to check that a rule holds beyond its speakers")
    acc.add_argument("--nonspeech-s", type=float, default=60.0, metavar="S",
                     help="seconds of each non-speech signal (silence, white, brown noise, tones); 0: none")
    acc.add_argument("--reference-ct2", type=Path, metavar="DIR",
                     help="CTranslate2 Whisper folder of the same weights: add faster-whisper's scores, "
                          "and the live modes' latency against its word ends (dev extra)")
    acc.add_argument("--set", action="append", default=[], metavar="FIELD=VALUE", dest="settings",
                     help="a StreamConfig field of the live modes (repeatable), e.g. closing_split_s=12: a rule's "
                          "variant measured on both halves, or language=auto: the language detected, as the "
                          "app's default does; recorded in the report")
    acc.add_argument("--paired", action="store_true",
                     help="with --set: every live mode also runs with the engine's defaults, the two in turns "
                          "first item by item, so the variant's latency and RTF are compared in the same minutes")
    words = acc.add_mutually_exclusive_group()
    words.add_argument("--vocabulary", metavar="WORDS", help="the live engine's vocabulary (comma-separated); "
                       "each live mode also reports its listed words recalled and invented")
    words.add_argument("--vocabulary-file", metavar="FILE", type=Path, help="the vocabulary from FILE")
    soak = p.add_argument_group("soak section (a long session through the worker; needs --model)")
    soak.add_argument("--soak-minutes", type=float, default=120.0, metavar="M",
                      help="minutes of speech: --manifest's clips joined, or --audio repeated (default: 120)")
    soak.add_argument("--soak-max-wall-minutes", type=float, metavar="M",
                      help="end the session after M minutes of wall time (the checks cover the audio fed so far)")
    soak.add_argument("--soak-raw", type=Path, metavar="JSON",
                      help="report an earlier run's raw measurements (its raw.json, or partial.json of a run "
                           "stopped early) instead of running one")
    p.set_defaults(func=_run)


def _progress(line: str) -> None:
    sys.stderr.write(f"bench: {line}\n")
    sys.stderr.flush()


def _options(args: argparse.Namespace) -> BenchOptions:
    sections = tuple(s.strip() for s in args.sections.split(",") if s.strip())
    unknown = set(sections) - {*BenchOptions().sections, "accuracy", "soak"}
    if unknown or not sections:
        raise CaptionerError(f"unknown bench section(s) {', '.join(sorted(unknown)) or '(none)'}; "
                             "choose from encoder, decoder, chunk_sizes, streaming, accuracy, soak")
    sections = tuple(s for s in sections if s not in ("accuracy", "soak"))
    steps = tuple(args.step) if args.step else (1.0, 2.0)
    if any(not 0.5 <= s <= 3.0 for s in steps):
        raise CaptionerError(f"step must be between 0.5 and 3.0 seconds, got {', '.join(map(str, steps))}")
    if args.threads < 0:
        raise CaptionerError("--threads must not be negative")
    audio = load_audio_file(args.audio) if args.audio and sections else None
    if audio is not None and len(audio) < 16000 * max(steps):
        raise CaptionerError(f"{args.audio} is shorter than one step")
    if args.short:
        return BenchOptions(provider=args.provider, threads=args.threads, steps=steps, stream_s=_SHORT_STREAM_S,
                            audio=audio, reps=2, warmup=1, sections=sections)
    return BenchOptions(provider=args.provider, threads=args.threads, steps=steps, audio=audio, sections=sections)


def _accuracy_options(args: argparse.Namespace):
    """(items, options) of the accuracy section, checked before any model is loaded."""
    if not args.model:
        raise CaptionerError("the accuracy section needs a real model: pass --model PACK")
    if not args.manifest:
        raise CaptionerError("the accuracy section needs --manifest JSONL (e.g. the development corpus' "
                             "manifest.jsonl)")
    if args.limit is not None and args.limit < 1:
        raise CaptionerError("--limit must be at least 1")
    if args.nonspeech_s < 0:
        raise CaptionerError("--nonspeech-s must not be negative")
    if args.paired and not args.settings:
        raise CaptionerError("--paired compares a --set variant with the engine's defaults: give --set FIELD=VALUE")
    if not 0.8 <= args.speed <= 1.25:
        raise CaptionerError(f"--speed must be between 0.8 and 1.25, got {args.speed}")
    if args.reference_ct2 is not None and not (args.reference_ct2 / "model.bin").is_file() and not any(
            args.reference_ct2.glob("model.bin.part*")):
        raise CaptionerError(f"{args.reference_ct2} is not a CTranslate2 Whisper folder (no model.bin)")
    kinds = [k.strip() for k in args.kinds.split(",") if k.strip()] if args.kinds else None
    items = load_manifest(args.manifest, kinds, args.limit, args.half, args.rotate_halves)
    if args.join is not None:
        items = join_halves(items, args.join)
    steps = tuple(sorted(set(args.step))) if args.step else (1.0, 2.0)
    return items, AccuracyOptions(steps=steps, nonspeech_s=args.nonspeech_s, reference_ct2=args.reference_ct2,
                                  vocabulary=command_vocabulary(args) or (), settings=_settings(args.settings, steps),
                                  speed=args.speed, paired=args.paired)


def _settings(texts: list[str], steps: tuple[float, ...]) -> tuple[tuple[str, object], ...]:
    """``--set FIELD=VALUE`` as typed :class:`StreamConfig` fields, checked by the config itself at
    every step (a bad value fails here, before any model is loaded)."""
    try:
        settings = tuple(dict(parse_setting(t) for t in texts).items())
        if any(key == "step_s" for key, _ in settings):
            raise ValueError("step_s: use --step")
        for step in steps:
            StreamConfig(**{"step_s": step, **dict(settings)})
    except (ValueError, TypeError, CaptionerError) as e:
        raise CaptionerError(f"--set: {e}") from e
    return settings


def _run(args: argparse.Namespace, paths: AppPaths) -> int:
    options = _options(args)
    accuracy = "accuracy" in {s.strip() for s in args.sections.split(",")}
    acc_items, acc_options = _accuracy_options(args) if accuracy else (None, None)
    soak = "soak" in {s.strip() for s in args.sections.split(",")}
    if soak and args.soak_raw is not None:
        raw = json.loads(args.soak_raw.read_text(encoding="utf-8"))
        raw = raw["soak"]["raw"] if "soak" in raw else raw  # --json's file holds it too
        speech = args.soak_raw.parent / "speech.json"
        if "speech" not in raw and speech.is_file():
            raw["speech"] = json.loads(speech.read_text(encoding="utf-8"))
        return _write(args, *_soak_report(args, raw), accuracy=False, sections=False)
    if soak and not args.model:
        raise CaptionerError("the soak section needs a real model: pass --model PACK")
    if soak and not (args.manifest or args.audio):
        raise CaptionerError("the soak section needs speech: --manifest JSONL (its clips are joined) or --audio FILE")
    if soak and not args.audio and args.manifest and len(args.manifest) > 1:
        raise CaptionerError("the soak section joins the clips of one --manifest; give it once")
    if soak and args.soak_minutes <= 0:
        raise CaptionerError("--soak-minutes must be positive")
    if not options.sections and acc_items is None:  # the soak alone: its session opens the pack
        return _write(args, *_soak(args, paths), accuracy=False, sections=False)
    if args.model:
        root = resolve_pack_path(args.model, paths)
        pack = Pack.load(root, verify=True)
        label = root.name
    else:
        dims = args.random_dims or "base"
        pack = cached_random_pack(dims, paths.cache, progress=_progress)
        label = f"random whisper-{dims} (random weights, real dimensions)"
    result: dict = {}
    texts = []
    if options.sections:
        result = run_bench(pack, paths.cache / "bench", options, _progress, pack_label=label)
        texts.append(markdown(result))
    if acc_items is not None and acc_options is not None:
        acc = accuracy_bench(pack, acc_items, acc_options, _progress, provider=args.provider,
                             threads=args.threads, label=label)
        result = {**acc, **result, "accuracy": acc["accuracy"]}
        head = (f"## Accuracy on real speech — {label}\n\ncaptioner {acc['captioner']}, commit {acc['commit']}; "
                f"{acc['provider']}, {acc['threads']} threads; {acc['machine']['cpus']} CPUs"
                + ("; int8 weights fitted to this CPU's saturating u8×s8 kernel (no VNNI)."
                   if acc['machine'].get('u8s8_saturates') else "."))
        texts.append(accuracy_report.markdown(acc["accuracy"], header=head))
    if soak:
        soak_result, soak_texts = _soak(args, paths)
        result.update(soak_result)
        texts += soak_texts
    return _write(args, result, texts, accuracy=accuracy, sections=bool(options.sections))


def _soak(args: argparse.Namespace, paths: AppPaths) -> tuple[dict, list[str]]:
    """Run the soak section: the speech WAV, the session through the worker, the summary and report."""
    from captioner.bench import soak
    from captioner.commands._soak import run_soak_session

    work = paths.cache / "bench" / "soak"
    work.mkdir(parents=True, exist_ok=True)
    wav = work / "speech.wav"
    _progress(f"soak: writing {args.soak_minutes:g} min of speech to {wav}")
    speech = soak.write_speech_wav(wav, args.soak_minutes * 60.0, manifest=None if args.audio else args.manifest[0],
                                   audio=args.audio)
    try:
        step = args.step[0] if args.step else 2.0
        (work / "speech.json").write_text(json.dumps(speech), encoding="utf-8")
        raw = run_soak_session(args.model, wav, work, paths, step_s=step, provider=args.provider,
                               progress=_progress, checkpoint=work / "partial.json",
                               max_wall_s=args.soak_max_wall_minutes * 60 if args.soak_max_wall_minutes else None)
    finally:
        wav.unlink(missing_ok=True)  # up to 0.5 GB for two hours
    raw["speech"] = speech
    atomic_write_text(work / "raw.json", json.dumps(raw))  # kept whatever happens next
    _progress(f"soak: raw measurements in {work / 'raw.json'}")
    return _soak_report(args, raw)


def _soak_report(args: argparse.Namespace, raw: dict) -> tuple[dict, list[str]]:
    """The soak's summary, plot and Markdown from its raw measurements."""
    from captioner.bench import soak

    summary = soak.soak_summary(raw)
    plot = None
    if args.plots and matplotlib_available():
        plot = soak.write_soak_plot(raw, Path(args.plots) / "soak.png")
        _progress(f"wrote {plot}")
        if args.report:
            try:
                plot = plot.resolve().relative_to(Path(args.report).resolve().parent)
            except ValueError:
                plot = plot.resolve()
    return {"soak": {"summary": summary, "raw": raw}}, [soak.markdown(raw, summary, str(plot) if plot else None)]


def _write(args: argparse.Namespace, result: dict, texts: list[str], *, accuracy: bool, sections: bool) -> int:
    """Write the JSON, the plots and the Markdown report (or print it)."""
    text = "\n\n".join(texts)
    if args.json:
        atomic_write_text(args.json, json.dumps(result, indent=1 if sections or accuracy else None))
        _progress(f"wrote {args.json}")
    if args.plots and not matplotlib_available():
        _progress("no plots: matplotlib is not installed (pip install matplotlib; it is a dev dependency)")
    elif args.plots:
        written = write_plots(result, args.plots) if sections else []
        if accuracy:
            written += accuracy_report.write_plots(result["accuracy"], args.plots)
        for path in written:
            _progress(f"wrote {path}")
    if args.report:
        atomic_write_text(args.report, text)
        _progress(f"wrote {args.report}")
    else:
        sys.stdout.write(text + "\n")
    return 0
