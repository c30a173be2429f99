"""The comparison graphs compute what the pack's chunk graphs compute (same layers, same weights).

A strategy comparison is only fair if the three decoders are the same model: the single-step
graphs (K = 1), the K = 3/7 chunks and AI Hub's fixed 200-slot graph are run along one forced token
sequence next to the pack's own chunk graphs, and every step's outputs must agree.
"""

from __future__ import annotations

import numpy as np
import pytest

from captioner.bench.graphs import ExtraGraphs
from captioner.bench.strategies import schedule_model
from captioner.engine import OnnxAcousticModel, Runtime
from captioner.models.fixed_decoder_graph import FIXED_POSITIONS

POSITIONS = 20


@pytest.fixture(scope="module")
def setup(tiny_pack, tmp_path_factory):
    runtime = Runtime(tiny_pack, "cpu", threads=1)
    model = OnnxAcousticModel(tiny_pack, runtime)
    audio = (np.random.default_rng(3).standard_normal(16000 * 2 + 320 * 7) * 0.1).astype(np.float32)
    encoding = model.encode(audio)  # 3 s bucket, 107 real frames of 150
    graphs = ExtraGraphs(tiny_pack, tmp_path_factory.mktemp("extra"))
    rng = np.random.default_rng(5)
    forced = [*model.vocab.prompt("en", "transcribe")]
    forced += [int(t) for t in rng.integers(0, tiny_pack.special.eot, POSITIONS + 10 - len(forced))]
    return model, encoding, graphs, forced


def _chain(model: OnnxAcousticModel, encoding, forced: list[int]) -> dict[str, np.ndarray]:
    """Run the model's plan with every position forced; outputs stacked per consumed position."""
    runner = model.decoder(encoding)
    rows: dict[str, list] = {"tokens": [], "token_logit": [], "eot_logit": [], "attn_last": [], "attn_align": []}
    for start, size in model.chunk_plan(encoding.bucket, False):
        if start >= POSITIONS:
            break
        out = runner.run(start, size, forced[start], np.array(forced[start + 1 : start + size], np.int64))
        for key in rows:
            rows[key].extend(getattr(out, key))
    return {k: np.asarray(v)[:POSITIONS] for k, v in rows.items()}


def _fixed(model: OnnxAcousticModel, encoding, graphs: ExtraGraphs, forced: list[int]) -> dict[str, np.ndarray]:
    sess = model.runtime.session(graphs.fixed(encoding.bucket))
    layers, one, heads, hd = model._kv_shape
    cross_k, cross_v, mask = encoding.payload
    cache_k = np.zeros((layers, one, heads, FIXED_POSITIONS, hd), np.float32)
    cache_v = np.zeros_like(cache_k)
    self_mask = np.full(FIXED_POSITIONS, -100.0, np.float32)
    names = ["tokens", "token_logit", "eot_logit", "attn_last", "attn_align", "new_k", "new_v"]
    rows: dict[str, list] = {k: [] for k in names[:5]}
    for p in range(POSITIONS):
        out = dict(zip(names, sess.run(names, {
            "token": np.array([forced[p]]), "position": np.array([p]), "self_k": cache_k, "self_v": cache_v,
            "self_mask": self_mask, "cross_k": cross_k, "cross_v": cross_v, "cross_mask": mask}), strict=True))
        cache_k[:, :, :, p] = out["new_k"][:, :, :, 0]
        cache_v[:, :, :, p] = out["new_v"][:, :, :, 0]
        self_mask[p] = 0.0
        for key in rows:
            rows[key].append(out[key][0])
    n = encoding.n_frames
    res = {k: np.asarray(v) for k, v in rows.items()}
    res["attn_last"], res["attn_align"] = res["attn_last"][:, :n], res["attn_align"][:, :n]
    return res


def _assert_same(got: dict[str, np.ndarray], want: dict[str, np.ndarray]) -> None:
    np.testing.assert_array_equal(got["tokens"], want["tokens"])
    for key in ("token_logit", "eot_logit", "attn_last", "attn_align"):
        np.testing.assert_allclose(got[key], want[key], rtol=1e-4, atol=1e-5, err_msg=key)


def test_single_step_and_other_chunk_sizes_match_the_pack(setup, tiny_pack) -> None:
    model, encoding, graphs, forced = setup
    want = _chain(model, encoding, forced)
    for sizes in ((1,) * 30, (4, 6, 3, 3, 3, 3, 3, 3, 3), (4, 6, 7, 7, 7)):
        view = schedule_model(tiny_pack, model.runtime, graphs, encoding.bucket, sizes)
        _assert_same(_chain(view, encoding, forced), want)


def test_fixed_200_graph_matches_the_pack(setup) -> None:
    model, encoding, graphs, forced = setup
    _assert_same(_fixed(model, encoding, graphs, forced), _chain(model, encoding, forced))


def test_extra_graphs_reuse_the_pack_weights(setup, tiny_pack) -> None:
    """No weight is stored anew: every initializer of the new graphs lives in the pack's weight file."""
    import onnx

    _, encoding, graphs, _ = setup
    index = tiny_pack.manifest["weights_index"]
    for path in (graphs.fixed(encoding.bucket), graphs.chunk(encoding.bucket, 12, 1)):
        model = onnx.load(str(path), load_external_data=False)
        external = [t for t in model.graph.initializer if t.data_location == onnx.TensorProto.EXTERNAL]
        assert external
        for tensor in external:
            info = {e.key: e.value for e in tensor.external_data}
            assert info["location"] == "weights.bin"
            assert int(info["offset"]) == index[tensor.name]["offset"]
        assert path.stat().st_size < 200_000  # graph structure and small constants only
