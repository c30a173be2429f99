"""Download the files a pack build needs from the Hugging Face Hub, with byte progress for the app.

``huggingface_hub.snapshot_download`` does the work (resume, revisions, auth) and draws its own
bars on a terminal; its progress hooks differ between versions, so the byte count the first-run
dialog shows is measured from the outside instead: the repo's file sizes from the Hub's metadata
(only the files the build needs), and the bytes that have arrived in the destination folder
(``local_dir`` downloads write ``.incomplete`` files there), sampled four times a second.
"""

from __future__ import annotations

import fnmatch
import logging
import threading
from collections.abc import Callable
from pathlib import Path

from captioner.errors import ModelError

__all__ = ["CHECKPOINT_FILES", "hf_download"]

logger = logging.getLogger(__name__)

CHECKPOINT_FILES = [
    "config.json", "generation_config.json", "model.safetensors", "vocab.json", "added_tokens.json",
    "merges.txt", "tokenizer.json", "tokenizer_config.json", "special_tokens_map.json",
    "normalizer.json", "preprocessor_config.json",
    "model.bin", "model.bin.part*", "vocabulary.txt",  # CTranslate2 (faster-whisper)
]
POLL_S = 0.25

Progress = Callable[[int, int, str], None]  # (bytes done, bytes total, what)


def hf_download(repo_id: str, dest: Path, revision: str | None = None, *, progress: Progress | None = None) -> Path:
    """Download the files a pack build needs from the Hugging Face Hub into ``dest``.

    Args:
        repo_id: ``owner/name`` on the Hub.
        dest: the folder to download into.
        revision: branch, tag or commit (default: the main branch).
        progress: called with (bytes in ``dest``, bytes to download, what) while downloading,
            when the Hub tells the sizes; nothing is called when it does not.

    Raises:
        ModelError: the repo does not exist, is gated, or the network failed.
    """
    try:
        from huggingface_hub import snapshot_download
        from huggingface_hub.errors import HfHubHTTPError, LocalEntryNotFoundError, RepositoryNotFoundError
    except ImportError as exc:  # pragma: no cover - huggingface_hub is a runtime dependency
        raise ModelError("huggingface_hub is not installed: pip install huggingface_hub") from exc
    what = f"downloading {repo_id} from the Hugging Face Hub"
    total = _download_size(repo_id, revision) if progress is not None else 0
    watch = _FolderWatch(dest, total, progress, what) if progress is not None and total > 0 else None
    try:
        folder = snapshot_download(repo_id=repo_id, revision=revision, local_dir=dest,
                                   allow_patterns=CHECKPOINT_FILES)
    except RepositoryNotFoundError as exc:
        raise ModelError(f"no model {repo_id!r} on the Hugging Face Hub (or it needs a login)") from exc
    except (HfHubHTTPError, LocalEntryNotFoundError, OSError) as exc:
        raise ModelError(f"downloading {repo_id} failed: {exc}".splitlines()[0]) from exc
    except Exception as exc:  # httpx/requests transport errors that huggingface_hub lets through
        raise ModelError(f"downloading {repo_id} failed: {type(exc).__name__}: {exc}".splitlines()[0]) from exc
    finally:
        if watch is not None:
            watch.stop()
    if watch is not None and progress is not None:
        progress(total, total, what)
    return Path(folder)


def _download_size(repo_id: str, revision: str | None) -> int:
    """Bytes of the repo's files that match :data:`CHECKPOINT_FILES`; 0 when the Hub does not say."""
    try:
        from huggingface_hub import HfApi

        info = HfApi().model_info(repo_id, revision=revision, files_metadata=True)
        return sum(int(s.size or 0) for s in info.siblings or []
                   if any(fnmatch.fnmatch(s.rfilename, p) for p in CHECKPOINT_FILES))
    except Exception as exc:  # offline, unreachable, unknown repo: snapshot_download reports it properly
        logger.debug("no file sizes for %s: %s", repo_id, exc)
        return 0


class _FolderWatch:
    """Reports the bytes under ``folder`` (never decreasing, at most ``total``) from a thread until stopped."""

    def __init__(self, folder: Path, total: int, progress: Progress, what: str) -> None:
        self.folder, self.total, self.progress, self.what = folder, total, progress, what
        self._stop = threading.Event()
        self._done = 0
        self._thread = threading.Thread(target=self._run, name="hub-progress", daemon=True)
        self._thread.start()

    def _size(self) -> int:
        size = 0
        for f in self.folder.rglob("*"):
            try:
                if f.is_file():
                    size += f.stat().st_size
            except OSError:  # renamed or removed while we looked
                pass
        return size

    def _run(self) -> None:
        while not self._stop.wait(POLL_S):
            done = min(max(self._size(), self._done), self.total)
            if done != self._done:
                self._done = done
                try:
                    self.progress(done, self.total, self.what)
                except Exception:  # a cancelled dialog raises here; the download itself is not ours to stop
                    logger.debug("progress callback failed", exc_info=True)
                    return

    def stop(self) -> None:
        self._stop.set()
        self._thread.join()
