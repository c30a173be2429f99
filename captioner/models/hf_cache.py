"""faster-whisper (CTranslate2) models already in the user's Hugging Face cache: installable with no download.

faster-whisper's ``WhisperModel("base")`` downloads ``Systran/faster-whisper-base`` into the
Hugging Face cache (``~/.cache/huggingface/hub``, or ``$HF_HUB_CACHE`` / ``$HF_HOME``). Any cached
model snapshot with a complete ``model.bin`` (or its parts) and a vocabulary is offered; the cache
is listed with ``huggingface_hub.scan_cache_dir``, so its layout is not ours to parse.
"""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass
from pathlib import Path

from captioner.models.ct2 import model_bin_parts

__all__ = ["CachedModel", "cached_ct2_models", "find_cached"]

logger = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class CachedModel:
    """One cached snapshot: repo id, commit hash, folder, and the size of its files in bytes."""

    repo_id: str
    commit: str
    path: Path
    size: int


def _is_ct2_whisper(folder: Path) -> bool:
    try:
        parts = model_bin_parts(folder)
    except Exception:  # unreadable or inconsistent parts: not offered
        return False
    vocab = (folder / "vocabulary.txt").is_file() or (folder / "tokenizer.json").is_file()
    return bool(parts) and vocab and (folder / "config.json").is_file()


def _cache_dir() -> str | None:
    """The cache folder from the environment now (huggingface_hub reads it once, at import)."""
    if os.environ.get("HF_HUB_CACHE"):
        return os.environ["HF_HUB_CACHE"]
    if os.environ.get("HF_HOME"):
        return str(Path(os.environ["HF_HOME"]) / "hub")
    return None


def cached_ct2_models(cache_dir: str | Path | None = None) -> list[CachedModel]:
    """Every CTranslate2 model snapshot in the Hugging Face cache, newest snapshot per repo, by repo id.

    Returns [] when there is no cache (or it cannot be read: logged).
    """
    try:
        from huggingface_hub import scan_cache_dir
        from huggingface_hub.errors import CacheNotFound
    except ImportError:  # pragma: no cover - huggingface_hub is a runtime dependency
        return []
    try:
        info = scan_cache_dir(cache_dir or _cache_dir())
    except CacheNotFound:
        return []
    except (OSError, ValueError) as exc:
        logger.warning("cannot read the Hugging Face cache: %s", exc)
        return []
    found = []
    for repo in info.repos:
        if repo.repo_type != "model":
            continue
        for rev in sorted(repo.revisions, key=lambda r: r.last_modified, reverse=True):
            if _is_ct2_whisper(Path(rev.snapshot_path)):
                size = sum(f.size_on_disk for f in rev.files)
                found.append(CachedModel(repo.repo_id, rev.commit_hash, Path(rev.snapshot_path), size))
                break
    return sorted(found, key=lambda m: m.repo_id.lower())


def find_cached(repo_id: str, cache_dir: str | Path | None = None) -> CachedModel | None:
    """The cached snapshot of ``repo_id`` (a CTranslate2 model), or None."""
    return next((m for m in cached_ct2_models(cache_dir) if m.repo_id == repo_id), None)
