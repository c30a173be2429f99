"""Random-weight packs with real Whisper dimensions, built once and cached (``captioner bench``).

Weights do not change what a graph costs, so the bench builds a pack from a random checkpoint of
whisper-tiny/base/small's shape with the project's own builder. It is cached under the user cache
directory, keyed by the dimensions, the build options and a hash of the builder's sources (a change
to the graphs invalidates it); a stale or half-built entry is rebuilt.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import shutil
from collections.abc import Callable
from dataclasses import asdict
from pathlib import Path

from captioner.errors import ModelError
from captioner.models import build as build_module
from captioner.models.build import BuildOptions, build_pack
from captioner.models.pack import Pack
from captioner.models.random_checkpoint import REAL_DIMS, write_random_checkpoint

__all__ = ["RANDOM_DIMS", "cached_random_pack"]

logger = logging.getLogger(__name__)

RANDOM_DIMS = tuple(REAL_DIMS)


def _builder_hash() -> str:
    """sha256 over the sources of the graph builders (the pack's content depends on them)."""
    digest = hashlib.sha256()
    models_dir = Path(build_module.__file__).parent
    for name in ("build.py", "checkpoint.py", "decoder_graph.py", "encoder_graph.py", "graph_ops.py",
                 "pack.py", "random_checkpoint.py"):
        digest.update((models_dir / name).read_bytes())
    return digest.hexdigest()


def cached_random_pack(dims: str, cache_dir: Path, options: BuildOptions | None = None,
                       progress: Callable[[str], None] | None = None) -> Pack:
    """The pack of a random ``dims`` checkpoint (``"tiny"``, ``"base"``, ``"small"``), built if needed.

    Args:
        dims: real Whisper dimensions to use.
        cache_dir: the user cache directory; packs go under ``bench/``.
        options: build options (default: the builder's defaults: fp32, matmul, all buckets).
        progress: receives a line of text per build stage.
    """
    if dims not in REAL_DIMS:
        raise ModelError(f"unknown dimensions {dims!r}; choose one of {', '.join(RANDOM_DIMS)}")
    options = options or BuildOptions()
    key_src = json.dumps({"dims": dims, "options": asdict(options), "builder": _builder_hash()}, sort_keys=True)
    key = hashlib.sha256(key_src.encode()).hexdigest()[:12]
    root = Path(cache_dir) / "bench"
    pack_dir = root / f"random-{dims}-{key}"
    if pack_dir.is_dir():
        try:
            return Pack.load(pack_dir)
        except ModelError as exc:
            logger.warning("cached bench pack %s unusable (%s); rebuilding", pack_dir, exc)
            shutil.rmtree(pack_dir, ignore_errors=True)
    root.mkdir(parents=True, exist_ok=True)
    for stale in root.glob(f"random-{dims}-*"):  # older keys of the same dims
        if stale != pack_dir:
            shutil.rmtree(stale, ignore_errors=True)
    ckpt_dir = root / f".checkpoint-{dims}-{os.getpid()}"
    shutil.rmtree(ckpt_dir, ignore_errors=True)
    say = progress or (lambda _line: None)
    try:
        say(f"writing a random whisper-{dims} checkpoint")
        write_random_checkpoint(ckpt_dir, dims=dims)

        def built(done: int, total: int, file: str) -> None:
            if done == total or done % 10 == 0:
                say(f"building the bench pack: {done}/{total} graphs")

        return build_pack(ckpt_dir, pack_dir, options, name=f"random-whisper-{dims}", progress=built)
    finally:
        shutil.rmtree(ckpt_dir, ignore_errors=True)
