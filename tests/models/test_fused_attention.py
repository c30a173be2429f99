"""``--attention fused`` (``BuildOptions.attention``): the encoders' self-attention as ONNX Runtime's
``com.microsoft`` ``MultiHeadAttention`` kernel over the real frames' keys. Its numbers against
transformers are in ``test_fidelity.py``; here: what the pack holds and says, that the padding still
changes nothing, and that QNN, which has no such kernel, is not tried with it.
"""

from __future__ import annotations

import numpy as np
import onnx
import pytest

from captioner.engine.providers import Host, plan_candidates
from captioner.engine.runtime import Runtime
from captioner.models.build import BuildOptions, PackBuildError
from captioner.models.verify import pack_problems
from models.helpers import random_mel


def _nodes(path) -> list[onnx.NodeProto]:
    return list(onnx.load(str(path), load_external_data=False).graph.node)


def test_a_fused_pack_has_one_attention_kernel_a_layer_and_says_so(fused_pack, tiny_pack) -> None:
    layers = fused_pack.dims.encoder_layers
    for bucket in fused_pack.buckets:
        nodes = _nodes(fused_pack.encoder_file(bucket))
        kernels = [n for n in nodes if n.domain == "com.microsoft"]
        assert [n.op_type for n in kernels] == ["MultiHeadAttention"] * layers, bucket
        assert not any(n.op_type == "Softmax" for n in nodes), bucket  # no attention written out beside it
    assert fused_pack.attention == fused_pack.manifest["attention"] == "fused"
    assert fused_pack.description.endswith(", fused attention")
    assert pack_problems(fused_pack.root) == []  # the graph contract holds
    # the default pack stays with standard operators only, which every provider runs
    assert tiny_pack.attention == "standard" and not tiny_pack.description.endswith("attention")
    assert not [n for f in tiny_pack.graph_files() for n in _nodes(f) if n.domain]


@pytest.mark.parametrize("bucket", [3, 30])
def test_the_padding_changes_nothing_with_the_kernel(fused_runner, runner, bucket) -> None:
    """The keys are cut to the real frames instead of masked: garbage in the padded mel frames leaves
    the real frames' outputs as they were, and they equal the standard graph's."""
    n = 50 * bucket // 2 + 3
    mel = random_mel(fused_runner.pack.dims.n_mels, n, bucket, seed=11)
    noisy = mel.copy()
    noisy[:, :, 2 * n:] = np.random.default_rng(12).normal(0, 3, noisy[:, :, 2 * n:].shape)
    clean, dirty, standard = (r.encode(m, n, bucket) for r, m in ((fused_runner, mel), (fused_runner, noisy), (runner, mel)))
    assert np.abs(dirty.cross_k[..., :n] - clean.cross_k[..., :n]).max() <= 1e-6
    assert np.abs(dirty.cross_v[..., :n] - clean.cross_v[..., :n]).max() <= 1e-6
    assert np.abs(clean.cross_k[..., :n] - standard.cross_k[..., :n]).max() <= 1e-4
    assert np.abs(standard.cross_k[..., :n]).max() > 0.1


def test_qnn_is_not_tried_with_a_fused_pack(fused_pack, monkeypatch) -> None:
    """QNN has no contrib attention kernel: the reason names it and the way to an NPU pack."""
    devices = (object(),)
    monkeypatch.setattr("captioner.engine.runtime.plan_candidates", lambda requested: plan_candidates(
        requested, Host("win32", "arm64"), lambda: (devices, "2.7.0", "", ["CPUExecutionProvider"])))
    info = Runtime(fused_pack, "qnn").info()
    assert info.chosen == "CPU"
    reason = info.fallbacks[0].reason
    assert f"the pack {fused_pack.root.name} has int8 vocabulary projection and fused attention, which QNN " \
           "cannot run" in reason and "--layers fp32 --vocab fp32" in reason


def test_attention_is_standard_unless_asked() -> None:
    assert BuildOptions().attention == "standard"
    BuildOptions(attention="fused").validate(448, 1500)
    with pytest.raises(PackBuildError, match="attention must be standard or fused, not 'flash'"):
        BuildOptions(attention="flash").validate(448, 1500)
