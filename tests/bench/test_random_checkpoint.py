"""Random checkpoints written with numpy: a valid safetensors file and a checkpoint the builder accepts."""

from __future__ import annotations

import json

import numpy as np

from captioner.models.checkpoint import load_checkpoint
from captioner.models.random_checkpoint import REAL_DIMS, write_random_checkpoint, write_safetensors
from captioner.models.safetensors_io import SafetensorsFile


def test_safetensors_written_here_reads_back_with_the_reference_library(tmp_path) -> None:
    import safetensors.numpy as safetensors_numpy  # the reference implementation (with transformers, dev)
    tensors = {"a": np.arange(6, dtype=np.float32).reshape(2, 3), "b": np.array([1, -2], np.int64),
               "c.weight": np.ones((1, 1, 5), np.float16)}
    path = tmp_path / "t.safetensors"
    write_safetensors(path, tensors.items(), {"format": "pt"})
    loaded = safetensors_numpy.load_file(str(path))
    assert set(loaded) == set(tensors)
    for name, arr in tensors.items():
        np.testing.assert_array_equal(loaded[name], arr)
        assert loaded[name].dtype == arr.dtype
    ours = SafetensorsFile(path)
    assert ours.metadata == {"format": "pt"}
    np.testing.assert_array_equal(ours["a"], tensors["a"])
    header_len = int.from_bytes(path.read_bytes()[:8], "little")
    assert header_len % 8 == 0


def test_random_checkpoint_has_real_dims_and_loads(tmp_path) -> None:
    root = write_random_checkpoint(tmp_path / "ck", dims="tiny", d_model=64, layers=2, heads=4, ffn=128, seed=1)
    ckpt = load_checkpoint(root)
    assert (ckpt.dims.d_model, ckpt.dims.encoder_layers, ckpt.dims.decoder_heads) == (64, 2, 4)
    assert ckpt.dims.n_vocab == 51865 and ckpt.multilingual and ckpt.tied_output
    assert ckpt.special.eot == 50257 and ckpt.special.sot == 50258 and ckpt.special.languages["en"] == 50259
    assert ckpt.alignment_heads_source == "generation_config"
    w = ckpt.weights["decoder.layers.1.fc1.weight"]
    assert w.shape == (128, 64) and w.dtype == np.float32 and 0.015 < float(np.std(w)) < 0.025
    assert not np.any(ckpt.weights["decoder.layers.0.self_attn.q_proj.bias"])
    np.testing.assert_array_equal(ckpt.weights["encoder.layer_norm.weight"], 1.0)
    assert ckpt.token_bytes[220 + 0] != b""  # a regular text token decodes to bytes
    assert "model.decoder.layers.0.encoder_attn.k_proj.bias" not in SafetensorsFile(root / "model.safetensors")
    config = json.loads((root / "config.json").read_text())
    assert config["model_type"] == "whisper" and config["vocab_size"] == 51865


def test_real_dimension_table_matches_the_released_models() -> None:
    assert {k: (v["d_model"], v["layers"], v["heads"], v["ffn"]) for k, v in REAL_DIMS.items()} == {
        "tiny": (384, 4, 6, 1536), "base": (512, 6, 8, 2048), "small": (768, 12, 12, 3072)}


def test_same_seed_same_weights(tmp_path) -> None:
    a = write_random_checkpoint(tmp_path / "a", dims=None, d_model=32, layers=1, heads=2, ffn=64, seed=4)
    b = write_random_checkpoint(tmp_path / "b", dims=None, d_model=32, layers=1, heads=2, ffn=64, seed=4)
    assert (a / "model.safetensors").read_bytes() == (b / "model.safetensors").read_bytes()
