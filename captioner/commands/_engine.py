"""Engine options shared by the commands that run the model (``transcribe``, ``listen``, ``bench``).

``--model``, ``--provider``, ``--step``, ``--language``, ``--task`` default to the user's settings
(``settings.json``), which default to the first installed pack, ``auto``, 2 s, ``en``, transcribe.
"""

from __future__ import annotations

import argparse
import logging
from dataclasses import dataclass

from captioner.engine import PROVIDER_CHOICES, OnnxAcousticModel, Runtime, StreamConfig
from captioner.errors import CaptionerError, ModelError
from captioner.models.install import DEFAULT_MODEL, list_packs, resolve_pack
from captioner.models.pack import Pack
from captioner.storage.paths import AppPaths
from captioner.storage.settings import EngineConfig, load_settings

__all__ = ["EngineSetup", "add_engine_options", "open_engine", "resolve_pack_path"]

logger = logging.getLogger(__name__)


def add_engine_options(parser: argparse.ArgumentParser) -> None:
    """Add ``--model --provider --step --language --task`` (defaults from the settings)."""
    parser.add_argument("--model", metavar="PACK", help="installed pack name or pack directory "
                        "(default: the settings' model, else the first installed pack)")
    parser.add_argument("--provider", choices=PROVIDER_CHOICES,
                        help="execution provider (default: settings, 'auto' = NPU, then GPU, then CPU)")
    parser.add_argument("--step", type=float, metavar="S", help="seconds of new audio per round, 0.5-3.0")
    parser.add_argument("--language", metavar="L", help="Whisper language code, e.g. en, de (default: settings)")
    parser.add_argument("--task", choices=("transcribe", "translate"), help="transcribe, or translate to English")


@dataclass(frozen=True, slots=True)
class EngineSetup:
    """What a command needs to stream audio: the pack, the model on its runtime, the stream config."""

    pack: Pack
    model: OnnxAcousticModel
    config: StreamConfig
    pack_name: str


def _engine_settings(paths: AppPaths) -> EngineConfig:
    settings, problems = load_settings(paths.settings_file)
    for problem in problems:
        logger.warning("settings: %s", problem)
    return settings.engine


def resolve_pack_path(name: str | None, paths: AppPaths, *, install_missing: bool = False):
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
    for item in list_packs(paths):
        if item.pack is not None:
            return item.path
    raise ModelError(f"no model pack installed in {paths.packs}; install one with "
                     f"'captioner models install {DEFAULT_MODEL}' or pass --model PACK_DIR")


def _ensure_pack(name: str | None, paths: AppPaths):
    """Issue 13: install the model on first use, with the install's lines and progress on stderr."""
    from captioner.commands.models import DownloadProgress, say
    from captioner.models.install import ensure_pack

    return ensure_pack(name, paths, report=say, download_progress=DownloadProgress())


def open_engine(args: argparse.Namespace, paths: AppPaths, *, verify: bool = True,
                install_missing: bool = False) -> EngineSetup:
    """Load and verify the pack, create the runtime on the chosen provider, build the stream config.

    ``install_missing``: see :func:`resolve_pack_path`.

    Raises:
        CaptionerError: a missing or corrupt pack, an invalid step/language/task.
    """
    engine = _engine_settings(paths)
    root = resolve_pack_path(args.model or engine.model, paths, install_missing=install_missing)
    pack = Pack.load(root, verify=verify)
    step = engine.step_s if args.step is None else args.step
    try:
        config = StreamConfig(
            step_s=float(step),
            language=args.language or engine.language,
            task=args.task or engine.task,
            silence_floor_dbfs=engine.silence_floor_dbfs,
        )
    except (TypeError, ValueError) as exc:
        raise CaptionerError(f"invalid engine option: {exc}") from exc
    runtime = Runtime(pack, args.provider or engine.provider, cache_dir=paths.cache)
    model = OnnxAcousticModel(pack, runtime)
    model.vocab.prompt(config.language, config.task)  # an unknown language fails here, clearly
    return EngineSetup(pack, model, config, root.name)
