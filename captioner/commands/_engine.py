"""The engine as the settings and the command line configure it: the app, ``transcribe``, ``listen``.

``--model``, ``--provider``, ``--step``, ``--language``, ``--task``, ``--vocabulary`` default to the
user's settings (``settings.json``), which default to the first installed pack, ``auto``, 2 s,
``auto``, transcribe, no vocabulary (``--vocabulary-file`` reads the list from a file).
The language ``auto`` is detected by a multilingual pack (and shown: :func:`language_summary`); an
English-only pack runs as ``en``.
:func:`open_configured_engine` turns those into a :class:`~captioner.engine.Transcriber` (the
engine's one entry point: pack verified, provider chosen, language checked) and its
:class:`~captioner.engine.StreamConfig`; the app (``commands/gui.py``) and the CLI both use it.
"""

from __future__ import annotations

import argparse
import dataclasses
import logging
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from captioner.core import PROVIDERS, Provider, RoundStats
from captioner.engine import Runtime, StreamConfig, Transcriber
from captioner.engine.language import parse_languages
from captioner.engine.vocabulary import parse_vocabulary, read_vocabulary
from captioner.errors import CaptionerError, ModelError
from captioner.models.install import DEFAULT_MODEL, first_installed_pack, resolve_pack
from captioner.storage.paths import AppPaths
from captioner.storage.settings import EngineConfig, load_settings

__all__ = ["EngineSetup", "add_engine_options", "command_vocabulary", "engine_snapshot", "language_summary", "open_configured_engine",
           "open_engine", "resolve_pack_path", "spoken_languages"]

logger = logging.getLogger(__name__)


def add_engine_options(parser: argparse.ArgumentParser) -> None:
    """Add ``--model --provider --step --language --task --vocabulary --vocabulary-file`` (defaults
    from the settings)."""
    parser.add_argument("--model", metavar="PACK", help="installed pack name or pack directory "
                        "(default: the settings' model, else the first installed pack)")
    parser.add_argument("--provider", choices=PROVIDERS,
                        help="execution provider (default: settings, 'auto' = NPU, then GPU, then CPU)")
    parser.add_argument("--step", type=float, metavar="S", help="seconds of new audio per round, 0.5-3.0")
    parser.add_argument("--language", metavar="L", help="Whisper language code, e.g. en, de, or auto to detect it, "
                        "or the languages you speak to detect among them, e.g. en,de "
                        "(default: settings, auto; an English-only model always uses en)")
    parser.add_argument("--task", choices=("transcribe", "translate"), help="transcribe, or translate to English")
    words = parser.add_mutually_exclusive_group()
    words.add_argument("--vocabulary", metavar="WORDS", help="names and terms to spell right, comma-separated, "
                       "e.g. \"Schoeffer, Gutenberg, missal\" (default: the settings' vocabulary; \"\" = none)")
    words.add_argument("--vocabulary-file", metavar="FILE", type=Path,
                       help="read the vocabulary from FILE (comma- or line-separated, # comments)")


@dataclass(frozen=True, slots=True)
class EngineSetup:
    """What a command needs to stream audio: the engine on its pack and provider, and the stream config."""

    engine: Transcriber
    config: StreamConfig


def _engine_settings(paths: AppPaths) -> EngineConfig:
    settings, problems = load_settings(paths.settings_file)
    for problem in problems:
        logger.warning("settings: %s", problem)
    return settings.engine


def resolve_pack_path(name: str | None, paths: AppPaths, *, install_missing: bool = False) -> Path:
    """The pack directory for ``name`` (pack name or path); None/"" = the first sound installed pack.

    With ``install_missing`` (``transcribe``), the rule of
    :func:`~captioner.models.install.ensure_pack` applies instead: a known model that is not
    installed, or the default model when none is, is installed first (said on stderr).

    Raises:
        ModelError: no such pack, or none installed (or the install failed).
    """
    if install_missing:
        return _ensure_pack(name, paths)
    if name:
        return resolve_pack(name, paths)
    first = first_installed_pack(paths)
    if first is not None:
        return first
    raise ModelError(f"no model pack installed in {paths.packs}; install one with "
                     f"'captioner models install {DEFAULT_MODEL}' or pass --model PACK_DIR")


def _ensure_pack(name: str | None, paths: AppPaths) -> Path:
    """Issue 13: install the model on first use, with the install's lines and progress on stderr."""
    from captioner.commands.models import DownloadProgress, say
    from captioner.models.install import ensure_pack

    return ensure_pack(name, paths, report=say, download_progress=DownloadProgress())


def open_configured_engine(engine: EngineConfig, paths: AppPaths, *, model: str | None = None,
                           provider: Provider | None = None, step_s: float | None = None,
                           language: str | None = None, task: str | None = None,
                           vocabulary: Sequence[str] | None = None,
                           install_missing: bool = False, prepare_npu: bool = True,
                           open_sessions: bool = True) -> EngineSetup:
    """Open the engine the settings (``engine``) describe, each given override winning.

    ``vocabulary``: the entries to use instead of the settings' list (``()``: none).
    ``install_missing``: see :func:`resolve_pack_path`. ``prepare_npu``: compile the NPU's graphs
    now (``Runtime.prepare``, progress on stderr; on the CPU it opens every session, ~3.5 s for
    whisper-base, so that no round waits for one, unless ``open_sessions`` is False: a file
    transcribed as fast as it can be); the app passes False and prepares on a thread of its own, so
    that its window stays responsive.

    Raises:
        CaptionerError: a missing or corrupt pack, an invalid step/language/task/vocabulary.
    """
    words = parse_vocabulary(engine.vocabulary) if vocabulary is None else tuple(vocabulary)
    spoken, among = parse_languages(language or engine.language)
    root = resolve_pack_path(model or engine.model, paths, install_missing=install_missing)
    try:
        config = StreamConfig(
            step_s=float(engine.step_s if step_s is None else step_s),
            language=spoken,
            languages=among,
            task=task or engine.task,
            silence_floor_dbfs=engine.silence_floor_dbfs,
            vocabulary=words,
        )
    except (TypeError, ValueError) as exc:
        raise CaptionerError(f"invalid engine option: {exc}") from exc
    transcriber = Transcriber.open(root, provider or engine.provider, cache_dir=paths.cache)
    if config.language == "auto" and not transcriber.model.vocab.multilingual:
        config = dataclasses.replace(config, language="en", languages=())  # an English-only pack hears English
    try:
        transcriber.check(config)  # an unknown language fails here, clearly
        if prepare_npu:  # the NPU's graphs compiled (once per pack and plugin version), the CPU's opened: not in a round
            runtime = transcriber.runtime
            transcriber.runtime.prepare(progress=lambda done, total: _npu_progress(done, total, npu_when(runtime)),
                                        open_sessions=open_sessions)
    except CaptionerError:
        transcriber.close()
        raise
    return EngineSetup(transcriber, config)


def npu_when(runtime: Runtime) -> str:
    """When the NPU compiles the model: "once for this model", or "at every start" where its compiled
    contexts cannot be kept (a full disk: :attr:`Runtime.cache_problem`)."""
    return "at every start: its cache cannot be written" if runtime.cache_problem else "once for this model"


def _npu_progress(done: int, total: int, when: str) -> None:
    """``Preparing the NPU (once for this model) … 12/35`` on stderr (none in the windowed app: the log
    has the summary)."""
    if sys.stderr is not None:
        end = "\r" if done < total and sys.stderr.isatty() else "\n"  # one line in a terminal
        print(f"Preparing the NPU ({when}) … {done}/{total}", end=end, file=sys.stderr, flush=True)


def open_engine(args: argparse.Namespace, paths: AppPaths, *, install_missing: bool = False,
                open_sessions: bool = True) -> EngineSetup:
    """:func:`open_configured_engine` with the user's settings and the command's engine options
    (``open_sessions``: see there).

    Raises:
        CaptionerError: a missing or corrupt pack, an invalid step/language/task.
    """
    return open_configured_engine(_engine_settings(paths), paths, model=args.model, provider=args.provider,
                                  step_s=args.step, language=args.language, task=args.task,
                                  vocabulary=command_vocabulary(args), install_missing=install_missing,
                                  open_sessions=open_sessions)


def command_vocabulary(args: argparse.Namespace) -> tuple[str, ...] | None:
    """The entries of ``--vocabulary`` or ``--vocabulary-file``; None when neither was given.

    Raises:
        CaptionerError: an unreadable file or an invalid list.
    """
    if getattr(args, "vocabulary_file", None) is not None:
        return read_vocabulary(args.vocabulary_file)
    if getattr(args, "vocabulary", None) is not None:
        return parse_vocabulary(args.vocabulary)
    return None


def engine_snapshot(config: StreamConfig) -> dict[str, dict[str, object]]:
    """The engine part of a session's settings snapshot (the layout of ``settings.json``): what the
    CLI ran with, e.g. ``language: "auto"`` for a language that was detected (``"en, de"``: among those)."""
    language = ", ".join(config.languages) if config.languages else config.language
    return {"engine": {"language": language, "task": config.task, "step_s": config.step_s,
                       "vocabulary": ", ".join(config.vocabulary)}}


def spoken_languages(rounds: Sequence[RoundStats]) -> list[str]:
    """The languages the rounds were decoded in, the most heard (by input seconds) first."""
    heard: dict[str, float] = {}
    for r in rounds:
        if r.bucket > 0 and r.language:
            heard[r.language] = heard.get(r.language, 0.0) + r.input_s
    return sorted(heard, key=lambda code: -heard[code])


def engine_line(setup: EngineSetup) -> str:
    """What captions, said before it starts: ``whisper-base on CPU, language detected among en, de``
    (``detected``, or the language given)."""
    language, among = setup.config.language, setup.config.languages
    said = f"detected among {', '.join(among)}" if among else "detected" if language == "auto" else language
    return f"{setup.engine.name} on {setup.engine.info().chosen}, language {said}"


def language_summary(requested: str, rounds: Sequence[RoundStats], among: Sequence[str] = ()) -> str:
    """``language de (detected)``, ``languages de, en (detected)``, ``language de (detected among
    en, de)`` or ``language en``."""
    heard = spoken_languages(rounds) or [among[0] if among else requested]
    names = ", ".join(heard)
    how = f" (detected among {', '.join(among)})" if among else " (detected)" if requested == "auto" else ""
    return f"language{'s' if len(heard) > 1 else ''} {names}{how}"
