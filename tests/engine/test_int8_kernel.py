"""int8 weights fitted to a saturating u8×s8 kernel (captioner/engine/int8_kernel.py).

The kernel itself is the machine's: ONNX Runtime's CPU ``MatMulInteger`` saturates pairs of products
on x86-64 without VNNI and does not elsewhere. The tests hold on both: what the probe says is what
a worst-case product shows, and a fitted weight gives the exact integer product on any machine.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper

from captioner.engine import int8_kernel
from captioner.engine.int8_kernel import PAIR_LIMIT, fit_scale, fit_weight, pair_factors, u8s8_saturates
from captioner.engine.runtime import SharedWeights
from captioner.models.pack import Pack


def _matmul_integer(k: int, n: int) -> ort.InferenceSession:
    """y [r, n] int32 = MatMulInteger(a uint8 [r, k], b int8 [k, n], a zero point)."""
    graph = helper.make_graph(
        [helper.make_node("MatMulInteger", ["a", "b", "az"], ["y"])], "t",
        [helper.make_tensor_value_info("a", TensorProto.UINT8, ["r", k]),
         helper.make_tensor_value_info("b", TensorProto.INT8, [k, n]),
         helper.make_tensor_value_info("az", TensorProto.UINT8, [])],
        [helper.make_tensor_value_info("y", TensorProto.INT32, ["r", n])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 8
    return ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])


def _product(session: ort.InferenceSession, a: np.ndarray, b: np.ndarray, zero: int = 128) -> np.ndarray:
    return session.run(None, {"a": a, "b": b, "az": np.array(zero, np.uint8)})[0]


def _exact(a: np.ndarray, b: np.ndarray, zero: int = 128) -> np.ndarray:
    return (a.astype(np.int64) - zero) @ b.astype(np.int64)


def test_the_probe_graph_is_a_two_by_one_integer_product() -> None:
    model = onnx.load_from_string(int8_kernel.PROBE_MODEL)
    onnx.checker.check_model(model)
    (node,) = model.graph.node
    assert node.op_type == "MatMulInteger" and list(node.input) == ["a", "b"]
    shapes = {v.name: ([d.dim_value for d in v.type.tensor_type.shape.dim], v.type.tensor_type.elem_type)
              for v in [*model.graph.input, *model.graph.output]}
    assert shapes == {"a": ([1, 2], TensorProto.UINT8), "b": ([2, 1], TensorProto.INT8), "y": ([1, 1], TensorProto.INT32)}


def test_the_probe_says_what_a_worst_case_product_shows() -> None:
    """255 · 127 over 64 inputs: exact where the kernel does not saturate, cut where it does."""
    session = _matmul_integer(64, 4)
    a = np.full((1, 64), 255, np.uint8)
    b = np.full((64, 4), 127, np.int8)
    got = _product(session, a, b, 0)
    assert u8s8_saturates() == (not np.array_equal(got, _exact(a, b, 0)))


def test_fitted_pairs_stay_under_the_limit_and_keep_the_weight() -> None:
    rng = np.random.default_rng(7)
    q = np.clip(np.rint(rng.normal(0, 45, (96, 40))), -127, 127).astype(np.int8)
    q[:, 0] = np.resize(np.array([127, 0], np.int8), 96)  # never two large weights in a pair: unchanged
    q[10:12, 1] = (127, -127)  # a saturating pair (|b₁| + |b₂| = 254)
    scale = rng.uniform(0.001, 0.01, 40).astype(np.float32)
    f = pair_factors(q)
    fq, fs = fit_weight(q, f), fit_scale(scale, f)
    pairs = np.abs(fq.astype(np.int16))[0::2] + np.abs(fq.astype(np.int16))[1::2]
    assert pairs.max() <= PAIR_LIMIT
    assert f[0] == 1.0 and np.array_equal(fq[:, 0], q[:, 0]) and fs[0] == scale[0]
    assert f[1] == pytest.approx(127 / 254)
    w, fw = q.astype(np.float32) * scale, fq.astype(np.float32) * fs
    step = fs[None, :]  # the rounding of each fitted weight moves it by at most half its new step
    assert np.all(np.abs(fw - w) <= 0.5 * step + 1e-7)


def test_a_real_fitted_weight_gives_the_exact_product_on_any_machine(real_tiny_en_int8_pack: Pack) -> None:
    """Every int8 weight of the real tiny.en (int8 layers, int8-ranked vocabulary), fitted: ONNX
    Runtime's product equals the exact one for the worst activations (all 255, all 1) and random ones."""
    pack = Pack.load(real_tiny_en_int8_pack.root)
    index = pack.weight_index()
    names = [n for n in index if int8_kernel.scale_name(n) in index]
    assert len(names) > 20  # every layer's linear weights and the vocabulary table
    weights = SharedWeights(pack.weights_file(), index, fit_u8s8=True)
    raw = SharedWeights(pack.weights_file(), index, fit_u8s8=False)
    rng = np.random.default_rng(0)
    raw_exact = []
    for name in names[:12] + [n for n in names if "embed_tokens" in n]:
        q = weights.ortvalue(index[name]).numpy()
        k, n = q.shape
        a = np.concatenate([np.full((1, k), 255, np.uint8), np.full((1, k), 1, np.uint8),
                            rng.integers(1, 256, (3, k)).astype(np.uint8)])
        session = _matmul_integer(k, n)
        assert np.array_equal(_product(session, a, q), _exact(a, q)), name
        unfitted = raw.ortvalue(index[name]).numpy()
        raw_exact.append(np.array_equal(_product(session, a, unfitted), _exact(a, unfitted)))
    # the weights as stored are exact only where the kernel does not saturate
    assert all(raw_exact) == (not u8s8_saturates())
    weights.close()
    raw.close()


def test_shared_weights_fit_a_weight_and_its_scales_in_either_order(real_tiny_en_int8_pack: Pack) -> None:
    pack = Pack.load(real_tiny_en_int8_pack.root)
    index = pack.weight_index()
    q_name = next(n for n in index if n.endswith(".weight_int8_t"))
    s_name = int8_kernel.scale_name(q_name)
    assert s_name is not None
    raw = SharedWeights(pack.weights_file(), index, fit_u8s8=False)
    q, s = raw.ortvalue(index[q_name]).numpy(), raw.ortvalue(index[s_name]).numpy()
    first = SharedWeights(pack.weights_file(), index, fit_u8s8=True)
    fq, fs = first.ortvalue(index[q_name]).numpy(), first.ortvalue(index[s_name]).numpy()
    scales_first = SharedWeights(pack.weights_file(), index, fit_u8s8=True)
    gs, gq = scales_first.ortvalue(index[s_name]).numpy(), scales_first.ortvalue(index[q_name]).numpy()
    assert np.array_equal(fq, gq) and np.array_equal(fs, gs)
    f = pair_factors(q)
    assert np.array_equal(fq, fit_weight(q, f)) and np.array_equal(fs, fit_scale(s, f))
    assert f.min() < 1.0  # real weights have saturating pairs
    rel = np.linalg.norm(fq * fs - q * s) / np.linalg.norm(q * s)
    assert rel < 0.02  # the fitted weight is the same weight, a little coarser
    unlisted = SharedWeights(pack.weights_file(), fit_u8s8=True)  # no index: nothing is fitted
    assert np.array_equal(unlisted.ortvalue(index[q_name]).numpy(), q)
    for w in (raw, first, scales_first, unlisted):
        w.close()


def test_the_runtimes_choice_is_the_closer_to_fp32_on_this_machine(real_tiny_en_pack: Pack,
                                                                  real_tiny_en_int8_pack: Pack) -> None:
    """Real speech through the real tiny.en encoder: with int8 layers as the runtime loads them here
    (fitted only where the kernel saturates), the cross-attention keys are closer to the fp32
    layers' than with the other choice, on either kind of CPU."""
    from captioner.audio.files import load_audio_file
    from captioner.engine import Transcriber

    speech = Path(__file__).resolve().parents[1] / "data" / "speech"
    clips = [load_audio_file(p)[: 5 * 16000] for p in sorted(speech.glob("*.wav"))[:3]]

    def keys(pack: Pack, fit: bool | None) -> list[np.ndarray]:
        engine = Transcriber.from_pack(Pack.load(pack.root), "cpu", threads=1)
        if fit is not None:
            engine.runtime.weights._fit_u8s8 = fit
        try:
            return [np.array(engine.model.encode(np.pad(a, (0, -a.size % 320))).payload[0]) for a in clips]
        finally:
            engine.runtime.close()

    def distance(got: list[np.ndarray], ref: list[np.ndarray]) -> float:
        return float(np.mean([np.linalg.norm(g - r) / np.linalg.norm(r) for g, r in zip(got, ref, strict=True)]))

    fp32 = keys(real_tiny_en_pack, None)
    chosen = distance(keys(real_tiny_en_int8_pack, None), fp32)
    other = distance(keys(real_tiny_en_int8_pack, not u8s8_saturates()), fp32)
    assert chosen < other, (chosen, other)
