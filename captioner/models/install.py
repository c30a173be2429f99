"""Installed packs: download a checkpoint from Hugging Face, build it into the user data dir, list, remove.

Packs live in ``AppPaths.packs / <pack name>``; the pack name of a repo id is the id with ``/``
replaced by ``--`` (``openai--whisper-base``), plus ``-fp16`` / ``-conv`` when built that way.
Downloads go to a staging folder under the cache dir and are deleted after a successful build; after
a failed download or build they stay, so a retry resumes instead of downloading gigabytes again.
The downloader is injectable so tests install from a local directory; the default one is
``huggingface_hub.snapshot_download`` (which shows its own progress bars).
"""

from __future__ import annotations

import logging
import re
import shutil
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from captioner.errors import ModelError, PackBuildError
from captioner.models.build import BuildOptions, build_pack
from captioner.models.pack import MANIFEST, Pack
from captioner.storage.paths import AppPaths

__all__ = [
    "CHECKPOINT_FILES",
    "DEFAULT_MODEL",
    "Downloader",
    "InstalledPack",
    "hf_download",
    "install_pack",
    "list_packs",
    "pack_name",
    "remove_pack",
    "resolve_pack",
]

logger = logging.getLogger(__name__)

DEFAULT_MODEL = "openai/whisper-base"
CHECKPOINT_FILES = [
    "config.json", "generation_config.json", "model.safetensors", "vocab.json", "added_tokens.json",
    "merges.txt", "tokenizer.json", "tokenizer_config.json", "special_tokens_map.json",
    "normalizer.json", "preprocessor_config.json",
]
_REPO_ID = re.compile(r"^[A-Za-z0-9][\w.-]*/[\w.-]+$")

# (repo id, destination folder, revision) -> the folder holding the checkpoint files
Downloader = Callable[[str, Path, str | None], Path]


def hf_download(repo_id: str, dest: Path, revision: str | None = None) -> Path:
    """Download the files a pack build needs from the Hugging Face Hub into ``dest`` (progress bars shown).

    Raises:
        ModelError: the repo does not exist, is gated, or the network failed.
    """
    try:
        from huggingface_hub import snapshot_download
        from huggingface_hub.errors import HfHubHTTPError, LocalEntryNotFoundError, RepositoryNotFoundError
    except ImportError as exc:  # pragma: no cover - huggingface_hub is a runtime dependency
        raise ModelError("huggingface_hub is not installed: pip install huggingface_hub") from exc
    try:
        folder = snapshot_download(repo_id=repo_id, revision=revision, local_dir=dest,
                                   allow_patterns=CHECKPOINT_FILES)
    except RepositoryNotFoundError as exc:
        raise ModelError(f"no model {repo_id!r} on the Hugging Face Hub (or it needs a login)") from exc
    except (HfHubHTTPError, LocalEntryNotFoundError, OSError) as exc:
        raise ModelError(f"downloading {repo_id} failed: {exc}".splitlines()[0]) from exc
    return Path(folder)


def pack_name(source: str, options: BuildOptions | None = None) -> str:
    """Directory name of the pack built from ``source`` (repo id or local folder) with ``options``."""
    options = options or BuildOptions()
    base = Path(source).name if not _REPO_ID.match(source) else source.replace("/", "--")
    suffix = ("-fp16" if options.precision == "fp16" else "") + ("-conv" if options.linear == "conv" else "")
    if options.tail_chunk != BuildOptions().tail_chunk:
        suffix += f"-k{options.tail_chunk}"
    return base + suffix


def install_pack(
    source: str,
    paths: AppPaths,
    *,
    options: BuildOptions | None = None,
    revision: str | None = None,
    name: str | None = None,
    downloader: Downloader = hf_download,
    progress: Callable[[int, int, str], None] | None = None,
) -> Pack:
    """Get a checkpoint and build it into ``paths.packs``.

    Args:
        source: a Hugging Face repo id (``openai/whisper-base``), or an existing local checkpoint
            directory (then nothing is downloaded).
        paths: the application directories.
        options: build options.
        revision: the Hub revision (branch, tag or commit) to download.
        name: pack directory name; :func:`pack_name` of the source by default.
        downloader: fetches a repo into a folder (tests pass a fake).
        progress: build progress callback, as for :func:`build_pack`.

    Raises:
        ModelError: download failed, or a pack of that name is already installed.
        PackBuildError: the checkpoint is unusable.
    """
    options = options or BuildOptions()
    local = Path(source).expanduser()
    is_local = local.is_dir()
    if not is_local and not _REPO_ID.match(source):
        raise ModelError(f"{source!r} is neither a checkpoint directory nor a Hugging Face repo id (owner/name)")
    target = paths.packs / (name or pack_name(source, options))
    if target.exists():
        raise ModelError(f"a pack named {target.name!r} is already installed ({target}); remove it first")
    paths.packs.mkdir(parents=True, exist_ok=True)
    if is_local:
        return build_pack(local, target, options, name=local.name, revision=revision, progress=progress)
    staging = paths.cache / "downloads" / target.name
    staging.mkdir(parents=True, exist_ok=True)
    logger.info("downloading %s into %s", source, staging)
    try:
        folder = downloader(source, staging, revision)
    except BaseException:
        if not any(staging.iterdir()):
            staging.rmdir()  # a partial download stays: snapshot_download resumes it next time
        raise
    try:
        pack = build_pack(folder, target, options, name=source, revision=revision, progress=progress)
    except PackBuildError:
        logger.warning("build failed; the download stays in %s for inspection", staging)
        raise
    shutil.rmtree(staging, ignore_errors=True)
    return pack


@dataclass(frozen=True, slots=True)
class InstalledPack:
    """One directory under ``packs/``: its pack, or why it could not be loaded."""

    name: str
    path: Path
    pack: Pack | None
    error: str | None = None


def list_packs(paths: AppPaths) -> list[InstalledPack]:
    """Every installed pack, sorted by name; broken ones carry their error instead of a pack."""
    if not paths.packs.is_dir():
        return []
    found = []
    for path in sorted(paths.packs.iterdir()):
        if not path.is_dir() or path.name.startswith("."):
            continue
        try:
            found.append(InstalledPack(path.name, path, Pack.load(path)))
        except ModelError as exc:
            found.append(InstalledPack(path.name, path, None, str(exc)))
    return found


def resolve_pack(name_or_path: str, paths: AppPaths) -> Path:
    """The pack directory for an installed pack name or a path to a pack directory."""
    path = Path(name_or_path).expanduser()
    if (path / MANIFEST).is_file():
        return path
    installed = paths.packs / name_or_path
    if installed.is_dir():
        return installed
    if path.is_dir():
        return path  # not a pack: loading it names the missing manifest
    names = [p.name for p in list_packs(paths)]
    raise ModelError(f"no pack {name_or_path!r}; installed: {', '.join(names) or 'none'}")


def remove_pack(name: str, paths: AppPaths) -> Path:
    """Delete the installed pack ``name`` (a directory under ``paths.packs``, never anything else)."""
    target = (paths.packs / name).resolve()
    if target.parent != paths.packs.resolve() or not target.is_dir():
        names = [p.name for p in list_packs(paths)]
        raise ModelError(f"no installed pack {name!r}; installed: {', '.join(names) or 'none'}")
    shutil.rmtree(target)
    logger.info("removed pack %s", target)
    return target
