"""The comparison graphs compute what the pack's chunk graphs compute (same layers, same weights).

A strategy comparison is only fair if the decoders are the same model: the single-step graph
(K = 1), the K = 3/7 chunks, the chunks without the batched prompt and AI Hub's fixed 200-slot graph
are run along one forced token sequence next to the pack's own chunk graphs, and every step's
outputs must agree (the predictions of the prompt rows, which the pack's first chunk batches and
does not predict, excepted).
"""

from __future__ import annotations

import numpy as np
import pytest

from captioner.bench.graphs import ExtraGraphs
from captioner.bench.strategies import FIXED_POSITIONS, schedule_model
from captioner.engine import OnnxAcousticModel, Runtime

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


def _assert_same(got: dict[str, np.ndarray], want: dict[str, np.ndarray]) -> None:
    """Every consumed position's attention; the predictions from the last prompt token on."""
    first = 3  # rows 0-2 predict prompt positions 1-3, which the pack's first chunk does not predict
    np.testing.assert_array_equal(got["tokens"][first:], want["tokens"][first:])
    for key in ("token_logit", "eot_logit"):
        np.testing.assert_allclose(got[key][first:], want[key][first:], rtol=1e-4, atol=1e-5, err_msg=key)
    for key in ("attn_last", "attn_align"):
        np.testing.assert_allclose(got[key], want[key], rtol=1e-4, atol=1e-5, err_msg=key)


def test_single_step_and_other_chunk_sizes_match_the_pack(setup, tiny_pack) -> None:
    model, encoding, graphs, forced = setup
    want = _chain(model, encoding, forced)
    for sizes in ((1,) * 30, (4, 6, 3, 3, 3, 3, 3, 3, 3), (4, 6, 7, 7, 7)):
        view = schedule_model(tiny_pack, model.runtime, graphs, encoding.bucket, sizes)
        _assert_same(_chain(view, encoding, forced), want)


def test_stepwise_prompt_predicts_what_the_batch_skips(setup, tiny_pack) -> None:
    """Without batching, the first chunk also predicts positions 1-3 (which a round then forces)."""
    model, encoding, graphs, forced = setup
    want = _chain(model, encoding, forced)
    stepwise = schedule_model(tiny_pack, model.runtime, graphs, encoding.bucket, tiny_pack.schedules["default"],
                              slots=tiny_pack.cache_slots[encoding.bucket], batch_prompt=False)
    got = _chain(stepwise, encoding, forced)
    _assert_same(got, want)
    np.testing.assert_array_equal(want["tokens"][:3], forced[1:4])  # the batched rows carry the given tokens
    assert not np.array_equal(got["token_logit"][:3], want["token_logit"][:3])  # real predictions here


def test_fixed_200_graph_matches_the_pack(setup, tiny_pack) -> None:
    model, encoding, graphs, forced = setup
    fixed = schedule_model(tiny_pack, model.runtime, graphs, encoding.bucket, (1,) * 30, slots=FIXED_POSITIONS)
    _assert_same(_chain(fixed, encoding, forced), _chain(model, encoding, forced))


def test_extra_graphs_reuse_the_pack_weights(setup, tiny_pack) -> None:
    """No weight is stored anew: every initializer of the new graphs lives in the pack's weight file."""
    import onnx

    _, encoding, graphs, _ = setup
    index = tiny_pack.manifest["weights_index"]
    for path in (graphs.chunk(encoding.bucket, 1, FIXED_POSITIONS), graphs.chunk(encoding.bucket, 12, 20)):
        model = onnx.load(str(path), load_external_data=False)
        external = [t for t in model.graph.initializer if t.data_location == onnx.TensorProto.EXTERNAL]
        assert external
        for tensor in external:
            info = {e.key: e.value for e in tensor.external_data}
            assert info["location"] == "weights.bin"
            assert int(info["offset"]) == index[tensor.name]["offset"]
        assert path.stat().st_size < 200_000  # graph structure and small constants only
