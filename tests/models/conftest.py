"""Fixtures of the model-pack tests: the transformers reference and CPU runners of ``tiny_pack`` and its variants."""

from __future__ import annotations

import pytest

from captioner.models.build import BuildOptions, build_pack
from captioner.models.pack import Pack
from models.helpers import PackRunner, Reference


@pytest.fixture(scope="session")
def reference(tiny_checkpoint) -> Reference:
    """transformers' model of the tiny checkpoint (eager attention, so attentions are returned)."""
    return Reference(tiny_checkpoint)


@pytest.fixture(scope="session")
def runner(tiny_pack) -> PackRunner:
    """Runs ``tiny_pack``'s graphs on ONNX Runtime's CPU provider (sessions cached)."""
    return PackRunner(tiny_pack)


@pytest.fixture(scope="session")
def chunk3_runner(chunk3_pack) -> PackRunner:
    """Runs ``chunk3_pack``'s graphs (tail chunk K = 3) on the CPU provider."""
    return PackRunner(chunk3_pack)


@pytest.fixture(scope="session")
def fused_pack(tiny_checkpoint, tmp_path_factory) -> Pack:
    """``tiny_checkpoint`` built with ``--attention fused`` (ONNX Runtime's attention kernel), fp32 layers."""
    return build_pack(tiny_checkpoint, tmp_path_factory.mktemp("fused") / "pack",
                      BuildOptions(layers="fp32", attention="fused"))


@pytest.fixture(scope="session")
def fused_runner(fused_pack) -> PackRunner:
    """Runs ``fused_pack``'s graphs on the CPU provider."""
    return PackRunner(fused_pack)
