"""Shared session-scoped fixtures: a tiny random Whisper checkpoint and the pack built from it.

``tiny_checkpoint`` is a multilingual, 80-mel, 2-layer, d_model 64 WhisperForConditionalGeneration
with the real vocabulary size (tests/checkpoints.py). ``tiny_pack`` is built from it through the real
CLI (``captioner models build``: fp32, matmul, all buckets), so every consumer tests against exactly
what users get. Both are built once per test session (a few seconds).
"""

from __future__ import annotations

from pathlib import Path

import pytest
from checkpoints import make_checkpoint

from captioner import cli
from captioner.models.pack import Pack
from captioner.storage.paths import AppPaths


@pytest.fixture(scope="session")
def tiny_checkpoint(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Directory of a tiny random multilingual Whisper checkpoint (80 mel bins, 51865 tokens)."""
    return make_checkpoint(tmp_path_factory.mktemp("checkpoints") / "tiny-whisper")


@pytest.fixture(scope="session")
def tiny_pack(tiny_checkpoint: Path, tmp_path_factory: pytest.TempPathFactory) -> Pack:
    """The pack of ``tiny_checkpoint`` built with ``captioner models build`` (fp32, matmul, buckets 3 4 5 6 30)."""
    out = tmp_path_factory.mktemp("packs") / "tiny-whisper"
    paths = AppPaths.default(tmp_path_factory.mktemp("home"))
    code = cli.run(["models", "build", "--checkpoint", str(tiny_checkpoint), "--out", str(out)], paths)
    assert code == 0, "captioner models build failed for the tiny checkpoint"
    return Pack.load(out)
