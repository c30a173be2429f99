"""The default bench's pack — random weights with whisper-base's dimensions, hence int8 linear layers
(``layers="auto"`` for widths ≥ 512) — gets its comparison graphs built over its own int8 weights.

An int8 pack stores only the int8 form of its layers; the bench once built its extra decoder chunks
with float layers, found no ``decoder.layers.0.self_attn.q_proj.weight`` and crashed (``captioner
bench`` with its defaults). Here the base-dimension pack (one 3 s bucket to keep it small) gets its
single-step graph and a K = 3 chunk, which must reuse the pack's int8 tensors and compute what the
pack's own chunk graphs compute along one forced token sequence.
"""

from __future__ import annotations

import numpy as np
import onnx
import pytest

from captioner.bench.graphs import ExtraGraphs
from captioner.bench.strategies import schedule_model
from captioner.engine import OnnxAcousticModel, Runtime
from captioner.models.build import BuildOptions, build_pack
from captioner.models.random_checkpoint import write_random_checkpoint

POSITIONS = 12


@pytest.fixture(scope="module")
def base_int8_pack(tmp_path_factory):
    root = tmp_path_factory.mktemp("base-int8")
    ckpt = write_random_checkpoint(root / "ckpt", dims="base")
    pack = build_pack(ckpt, root / "pack", BuildOptions(buckets=(3,)))  # the bench's defaults, one bucket
    assert pack.dims.d_model == 512 and pack.layers == "int8"
    return pack


def _chain(model, encoding, forced: list[int]) -> tuple[np.ndarray, np.ndarray]:
    """Tokens and cross-attention rows of every consumed position with every position forced."""
    runner = model.decoder(encoding)
    tokens, attn = [], []
    for start, size in model.chunk_plan(encoding.bucket, False):
        if start >= POSITIONS:
            break
        out = runner.run(start, size, forced[start], np.array(forced[start + 1 : start + size], np.int64))
        tokens.extend(out.tokens)
        attn.extend(out.attn_align)
    return np.asarray(tokens)[:POSITIONS], np.asarray(attn)[:POSITIONS]


def test_the_default_bench_builds_int8_chunks_over_the_packs_weights(base_int8_pack, tmp_path) -> None:
    pack = base_int8_pack
    runtime = Runtime(pack, "cpu", threads=1)
    try:
        model = OnnxAcousticModel(pack, runtime)
        audio = (np.random.default_rng(1).standard_normal(16000 * 2) * 0.1).astype(np.float32)
        encoding = model.encode(audio)
        graphs = ExtraGraphs(pack, tmp_path)
        rng = np.random.default_rng(2)
        forced = [*model.vocab.prompt("en", "transcribe")]
        forced += [int(t) for t in rng.integers(0, pack.special.eot, POSITIONS + 10 - len(forced))]
        want_tokens, want_attn = _chain(model, encoding, forced)

        index = pack.manifest["weights_index"]
        for sizes in ((1,) * 20, (4, 3, 3, 3, 3, 3)):
            view = schedule_model(pack, runtime, graphs, encoding.bucket, sizes)
            got_tokens, got_attn = _chain(view, encoding, forced)
            first = 3  # rows predicting prompt positions, which the pack's batched first chunk does not
            np.testing.assert_array_equal(got_tokens[first:], want_tokens[first:])
            np.testing.assert_allclose(got_attn, want_attn, rtol=1e-3, atol=1e-4)

        single = onnx.load(str(graphs.chunk(encoding.bucket, 1, pack.cache_slots[encoding.bucket] + 1)),
                           load_external_data=False)
        names = {t.name for t in single.graph.initializer if t.data_location == onnx.TensorProto.EXTERNAL}
        assert any(n.endswith(".weight_int8_t") for n in names)  # int8 layers, as the pack has them
        assert not any(n.endswith(".weight_t") for n in names)  # no float copy of a layer
        assert names <= set(index)
        assert "MatMulInteger" in {n.op_type for n in single.graph.node}
    finally:
        runtime.close()
