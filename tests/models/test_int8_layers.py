"""int8 linear layers (``BuildOptions.layers``, ``GraphBuilder.linear`` with ``int8``).

The CPU packs store the encoder's and decoder's linear weights as int8 (one scale per output) and
quantise each input row on the fly. Not exact, so shown three ways: one linear layer against numpy
(and a row quantised alone is the same row batched with others, which draft decoding relies on),
the real tiny.en encoder against the same pack with fp32 layers on real speech, and (in
``test_ct2.py``) the real pack's greedy tokens against CTranslate2's float32 decode.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, numpy_helper

from captioner.engine import int8_kernel
from captioner.models.build import BuildOptions, PackBuildError
from captioner.models.graph_ops import GraphBuilder, WeightStore, value_info
from models.ct2_reference import clip_features
from models.helpers import PackRunner

SPEECH = Path(__file__).resolve().parents[1] / "data" / "speech"
CLIPS = [SPEECH / json.loads(line)["audio"]
         for line in (SPEECH / "manifest.jsonl").read_text(encoding="utf-8").splitlines() if line]


def _linear_session(tmp_path: Path, w: np.ndarray, b: np.ndarray, rows: int) -> ort.InferenceSession:
    """One ``GraphBuilder.linear`` with int8 weights on [rows, n_in], as a CPU session."""
    store = WeightStore(tmp_path / "weights.bin", "fp32")
    g = GraphBuilder("linear", store, "matmul", int8=True)
    n_out, n_in = w.shape
    g.op("Identity", [g.linear("x", "layer", lambda: w, lambda: b, rows, n_in, n_out, batch=False)], outputs=["y"])
    model = g.model([value_info("x", TensorProto.FLOAT, [rows, n_in])], [value_info("y", TensorProto.FLOAT, [rows, n_out])])
    store.close()
    if int8_kernel.u8s8_saturates():  # as the runtime loads int8 weights on this CPU (int8_kernel.py)
        tensors = {t.name: t for t in model.graph.initializer}
        for name, q in list(tensors.items()):
            s_name = int8_kernel.scale_name(name)
            if s_name in tensors:
                qa = numpy_helper.to_array(q, base_dir=str(tmp_path))
                sa = numpy_helper.to_array(tensors[s_name], base_dir=str(tmp_path))
                f = int8_kernel.pair_factors(qa)
                q.CopyFrom(numpy_helper.from_array(int8_kernel.fit_weight(qa, f), name))
                tensors[s_name].CopyFrom(numpy_helper.from_array(int8_kernel.fit_scale(sa, f), s_name))
    path = tmp_path / f"linear_{rows}.onnx"
    onnx.save(model, path)
    return ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])


def test_an_int8_linear_is_close_per_row_and_a_row_is_the_same_alone(tmp_path: Path) -> None:
    rng = np.random.default_rng(0)
    w = (rng.standard_normal((96, 64)) * 0.1).astype(np.float32)
    b = rng.standard_normal(96).astype(np.float32)
    x = rng.standard_normal((3, 64)).astype(np.float32)
    x[2, 5] = 200.0  # one row with an outlier (post-norm activations have them)
    exact = x @ w.T + b
    batched = _linear_session(tmp_path, w, b, 3).run(None, {"x": x})[0]
    err = [float(np.abs(batched[r] - exact[r]).max() / np.abs(exact[r] - b).max()) for r in range(3)]
    # per row: the outlier coarsens its own row only (one scale for the tensor would put rows 0 and 1
    # on a grid 200/127 wide: errors near 100 %)
    assert max(err[:2]) < 0.02 and err[2] < 0.05, err
    alone = _linear_session(tmp_path, w, b, 1).run(None, {"x": x[:1]})[0]
    np.testing.assert_array_equal(alone[0], batched[0])


def test_layers_auto_is_int8_for_wide_matmul_models_only() -> None:
    assert BuildOptions().layer_weights(512) == "int8"  # whisper-base
    assert BuildOptions().layer_weights(384) == "fp32"  # tiny: 8 bits cost it WER (BuildOptions.layers)
    assert BuildOptions(layers="int8").layer_weights(384) == "int8"
    assert BuildOptions(linear="conv").layer_weights(512) == "fp32"
    assert BuildOptions(layers="fp32").layer_weights(1024) == "fp32"
    with pytest.raises(PackBuildError, match="matmul"):
        BuildOptions(linear="conv", layers="int8").validate(448, 1500)
    with pytest.raises(PackBuildError, match="layers"):
        BuildOptions(layers="int4").validate(448, 1500)


def test_the_int8_pack_holds_int8_layers_only(real_tiny_en_int8_pack, real_tiny_en_pack) -> None:
    int8, fp32 = real_tiny_en_int8_pack, real_tiny_en_pack
    assert (int8.layers, fp32.layers) == ("int8", "fp32")
    for pack, has in ((int8, True), (fp32, False)):
        for graph in (pack.encoder_file(5), pack.decoder_file(3, 10, 5)):
            ops = {n.op_type for n in onnx.load(str(graph), load_external_data=False).graph.node}
            assert ("MatMulInteger" in ops and "QuantizeLinear" in ops) == has, graph
    index = int8.manifest["weights_index"]
    assert index["encoder.layers.0.fc1.weight_int8_t"]["dtype"] == "int8"
    assert not [name for name in index if name.endswith(".weight_t")]  # no float copy of any layer
    assert int8.weights_file().stat().st_size < 0.75 * fp32.weights_file().stat().st_size


@pytest.mark.parametrize("clip", CLIPS[:2], ids=lambda p: p.stem)
def test_int8_encoder_output_stays_close_on_real_speech(clip, real_tiny_en_int8_pack, real_tiny_en_pack) -> None:
    feats = clip_features(clip)
    a = PackRunner(real_tiny_en_int8_pack).encode(feats, 1500, 30)
    b = PackRunner(real_tiny_en_pack).encode(feats, 1500, 30)
    for got, want in ((a.cross_k, b.cross_k), (a.cross_v, b.cross_v)):
        rel = np.linalg.norm(got - want) / np.linalg.norm(want)
        assert rel < 0.08, rel  # measured 0.03-0.055 on these clips (4 layers of 8-bit rounding)
