"""Fixtures of the model-pack tests: the transformers reference and a CPU runner of ``tiny_pack``."""

from __future__ import annotations

import pytest

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
