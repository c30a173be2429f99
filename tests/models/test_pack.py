"""The pack format: manifest keys, the Pack API, chunk plans, weight sharing, loading errors, verify."""

from __future__ import annotations

import json
import shutil

import numpy as np
import onnx
import pytest

from captioner.errors import ModelError, PackBuildError
from captioner.models.build import (
    BuildOptions,
    cache_slots,
    chunk_plan,
    known_steps,
    parse_buckets,
    prompt_length,
)
from captioner.models.checkpoint import bytes_to_unicode, load_checkpoint
from captioner.models.pack import Pack, file_sha256
from captioner.models.verify import pack_problems, verify_pack

DEFAULT_CHUNKS = [(0, 4), (0, 5), (4, 6), (5, 5), (10, 5), (15, 5), (20, 5), (25, 5)]


def test_manifest_has_the_contract_keys(tiny_pack, tiny_checkpoint):
    m = tiny_pack.manifest
    assert m["format"] == "captioner-pack" and m["format_version"] == 5
    assert set(m["source"]) == {"name", "revision", "sha256"}
    assert m["source"]["name"] == "tiny-whisper"
    assert m["source"]["sha256"] == file_sha256(tiny_checkpoint / "model.safetensors")
    assert m["encoders"] == {str(b): f"encoder_{b}s.onnx" for b in (3, 4, 5, 6, 10, 20, 30)}
    assert {"bucket", "start", "size", "known", "file"} == set(m["decoders"][0])
    assert m["cache_slots"] == {"3": 25, "4": 25, "5": 25, "6": 25, "10": 220, "20": 220, "30": 220}
    assert m["schedules"] == {"default": [4, 6, 5, 5, 5, 5], "prefixed": [5, 5, 5, 5, 5, 5]}
    assert m["long_chunk"] == 5 and m["max_positions"] == 224
    assert m["precision"] == "fp32" and m["linear"] == "matmul"
    assert m["alignment_heads"] == [[1, 0], [1, 2]] and m["alignment_heads_source"] == "generation_config"
    assert m["vocabulary"] == "tokens.json" and m["weights"] == "weights.bin"
    assert m["builder"]["onnx_opset"] >= 17
    on_disk = {p.name for p in tiny_pack.root.iterdir()} - {"manifest.json"}
    assert set(m["files"]) == on_disk
    for name, digest in list(m["files"].items())[:5]:
        assert file_sha256(tiny_pack.root / name) == digest


def test_pack_api(tiny_pack):
    p = tiny_pack
    assert p.buckets == (3, 4, 5, 6, 10, 20, 30)
    assert p.dims.n_vocab == 51865 and p.dims.head_dim == 16 and p.dims.n_mels == 80
    assert p.special.eot == 50257 and p.special.sot == 50258 and p.special.languages["en"] == 50259
    assert p.special.translate == 50358 and p.special.transcribe == 50359
    assert p.special.startofprev == 50361 and p.special.nospeech == 50362
    assert p.special.notimestamps == 50363 and p.special.first_timestamp == 50364
    assert p.multilingual and p.alignment_heads == ((1, 0), (1, 2))
    assert p.schedules["default"] == (4, 6, 5, 5, 5, 5)
    assert p.decoder_chunks(3) == DEFAULT_CHUNKS
    long = p.decoder_chunks(30)
    assert long[: len(DEFAULT_CHUNKS)] == DEFAULT_CHUNKS and long[-1] == (220, 5) and len(long) == 8 + 39
    assert p.encoder_file(5).name == "encoder_5s.onnx" and p.encoder_file(5).is_file()
    # one graph per (cache slots, size, known steps), whatever the start position and the bucket
    assert p.decoder_file(30, 35, 5).name == p.decoder_file(30, 220, 5).name == "decoder_s220_k5.onnx"
    # the 10 s bucket (speculative rounds' long inputs) decodes as far as the 30 s one, on its graphs
    assert p.decoder_chunks(10) == long and p.cache_slots[10] == 220
    assert {p.decoder_file(10, s, k) for s, k in long} == {p.decoder_file(30, s, k) for s, k in long}
    assert p.decoder_file(3, 0, 4).name == "decoder_s25_k4_j4.onnx" and p.decoder_known(3, 0, 4) == 4
    assert p.decoder_file(3, 5, 5).name == "decoder_s25_k5.onnx" and p.decoder_known(3, 5, 5) == 1
    assert p.decoder_file(3, 0, 5).name == "decoder_s25_k5_j5.onnx" and p.decoder_known(3, 0, 5) == 5
    assert p.decoder_file(3, 4, 6).name == "decoder_s25_k6.onnx"
    assert {p.decoder_file(b, 4, 6) for b in (3, 4, 5, 6)} == {p.decoder_file(3, 4, 6)}  # shared by the short buckets
    assert p.cache_slots[3] == 25 and p.cache_slots[30] == 220
    assert len(p.graph_files()) == 7 + 4 + 4 + 2  # + a verifier per cache
    assert p.verifier(3)[0].name == "decoder_s25_k5_j5_v.onnx" and p.verifier(30)[0].name == "decoder_s220_k5_j5_v.onnx"
    assert p.beam(10) is None and p.manifest["beams"] == {}  # no beam step unless built with --beam
    assert p.weights_file().name == "weights.bin"
    assert len(p.pack_hash) == 64 and p.pack_hash == file_sha256(p.root / "manifest.json")
    with pytest.raises(ModelError, match="no 7 s encoder"):
        p.encoder_file(7)
    with pytest.raises(ModelError, match="no decoder chunk"):
        p.decoder_file(3, 10, 7)  # no graph of 7 steps
    # a chunk graph serves any start: off the plan (a draft decode's chunk), the sequential one of that size
    assert p.decoder_file(30, 37, 5) == p.decoder_file(30, 35, 5) and p.decoder_known(30, 37, 5) == 1


def test_token_bytes_decode_byte_level_bpe(tiny_pack):
    tb = tiny_pack.token_bytes
    assert len(tb) == 51865
    b2u = bytes_to_unicode()
    assert tb[0] == b"!" and tb[ord("A") - ord("!")] == b"A"
    assert [tb[i] for i in range(256)] == [bytes([b]) for b in b2u]  # GPT-2's byte tokens, GPT-2's order
    assert b" the" in tb and b"the" in tb and b"." in tb and b" -" in tb
    assert tb[tiny_pack.special.eot] == b"<|endoftext|>"
    assert tb[tiny_pack.special.first_timestamp] == b"<|0.00|>"
    assert tb[-1] == b"<|30.00|>"


def test_graphs_share_weights_by_name_and_offset(tiny_pack, tiny_checkpoint):
    seen: dict[str, tuple[str, str]] = {}
    index = tiny_pack.manifest["weights_index"]
    for path in tiny_pack.graph_files():
        model = onnx.load(str(path), load_external_data=False)
        for init in model.graph.initializer:
            if init.data_location != onnx.TensorProto.EXTERNAL:
                assert init.ByteSize() < 64 * 1024, f"{path.name}: big inline constant {init.name}"
                continue
            ext = {e.key: e.value for e in init.external_data}
            assert ext["location"] == "weights.bin"
            where = (ext["offset"], ext["length"])
            assert seen.setdefault(init.name, where) == where, init.name
            assert int(ext["offset"]) == index[init.name]["offset"]
    assert set(seen) == set(index)  # every stored tensor is used, each is stored once
    weights = tiny_pack.weights_file().stat().st_size
    ckpt = (tiny_checkpoint / "model.safetensors").stat().st_size
    total = sum(f.stat().st_size for f in tiny_pack.root.iterdir())
    # the int8 vocabulary projection adds its table (one byte per entry) and a scale per token
    extra = (tiny_pack.dims.n_vocab * (tiny_pack.dims.d_model + 4)) if tiny_pack.vocab == "int8" else 0
    assert weights < 1.1 * ckpt + extra and total < 1.5 * ckpt + extra, (weights, total, ckpt, extra)
    data = np.memmap(tiny_pack.weights_file(), np.uint8, mode="r")
    info = index["decoder.embed_tokens.weight"]
    table = data[info["offset"] : info["offset"] + info["length"]].view(np.float32).reshape(info["shape"])
    np.testing.assert_array_equal(table, load_checkpoint(tiny_checkpoint).weights["decoder.embed_tokens.weight"])


def test_graph_io_contract(tiny_pack):
    enc = onnx.load(str(tiny_pack.encoder_file(4)), load_external_data=False).graph
    assert [i.name for i in enc.input] == ["mel", "n_frames"]
    assert [o.name for o in enc.output] == ["cross_k", "cross_v"]
    assert [d.dim_value for d in enc.output[0].type.tensor_type.shape.dim] == [2, 1, 4, 16, 200]  # frames last
    dec = onnx.load(str(tiny_pack.decoder_file(4, 10, 5)), load_external_data=False).graph
    assert [i.name for i in dec.input] == ["token", "forced", "positions", "self_mask", "cross_mask",
                                           "self_k_0", "self_v_0", "cross_k_0", "cross_v_0",
                                           "self_k_1", "self_v_1", "cross_k_1", "cross_v_1"]
    assert [o.name for o in dec.output] == ["tokens", "token_logit", "eot_logit", "logsumexp", "nospeech_logit",
                                            "lang_logits", "attn_last", "attn_align", "new_k", "new_v"]
    shapes = {v.name: [d.dim_param or d.dim_value for d in v.type.tensor_type.shape.dim]
              for v in [*dec.input, *dec.output]}
    assert shapes["self_k_0"] == [4, 25, 16] and shapes["self_mask"] == [25] and shapes["positions"] == [5]
    assert shapes["cross_v_1"] == [4, 16, "frames"]  # frames last, as the encoder writes them
    assert shapes["forced"] == [4] and shapes["attn_last"] == [5, "frames"]
    assert shapes["logsumexp"] == shapes["nospeech_logit"] == [5] and shapes["lang_logits"] == [5, 99]
    # static but for the encoder frames, which the NPU runtime fixes per bucket
    assert all(d == "frames" or d > 0 for s in shapes.values() for d in s)
    assert pack_problems(tiny_pack.root, checksums=False) == []


def test_chunk_plan_parameters():
    plan = chunk_plan(BuildOptions(buckets=(3, 6, 7, 30), tail_chunk=3))
    assert BuildOptions(tail_chunk=3).schedules() == {"default": (4, 6, 3, 3, 3, 3, 3, 3, 3),
                                                      "prefixed": (5, 5, 3, 3, 3, 3, 3, 3, 3)}
    assert (28, 3) in plan[3] and (31, 3) in plan[30] and (31, 3) not in plan[3]
    assert plan[6] == plan[3] and plan[7] == plan[30]  # buckets over 6 s decode as far as the 30 s one
    assert max(s + k - 1 for s, k in plan[30]) <= 224
    assert known_steps(BuildOptions(), prompt_length(True)) == {(0, 4): 4, (0, 5): 5}
    assert known_steps(BuildOptions(), prompt_length(False)) == {(0, 4): 2, (0, 5): 3}
    assert known_steps(BuildOptions(heads={"default": (3, 7), "prefixed": (3, 7)}), 4) == {(0, 3): 3}
    assert cache_slots(plan[3]) == 28 and cache_slots([(0, 4)]) == 1
    assert parse_buckets(["3,4", "30"]) == (3, 4, 30)
    with pytest.raises(PackBuildError):
        parse_buckets(["three"])
    with pytest.raises(PackBuildError):
        BuildOptions(buckets=(31,)).validate(448, 1500)
    with pytest.raises(PackBuildError):
        BuildOptions(tail_chunk=1).validate(448, 1500)


def test_load_errors_name_the_file(tiny_pack, tmp_path):
    with pytest.raises(ModelError, match="not found"):
        Pack.load(tmp_path / "nope")
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(ModelError, match=r"manifest\.json is missing"):
        Pack.load(empty)
    copy = tmp_path / "copy"
    shutil.copytree(tiny_pack.root, copy)
    (copy / "encoder_3s.onnx").unlink()
    with pytest.raises(ModelError, match=r"encoder_3s\.onnx is missing"):
        Pack.load(copy)
    manifest = json.loads((copy / "manifest.json").read_text())
    for older_or_newer in (4, 99):  # 4: before the chunk graphs returned logsumexp and language logits
        manifest["format_version"] = older_or_newer
        (copy / "manifest.json").write_text(json.dumps(manifest))
        with pytest.raises(ModelError, match=r"format_version.*rebuild the pack"):
            Pack.load(copy)


def test_each_graph_lists_its_weights_in_the_manifest(tiny_pack, tmp_path):
    """``graph_weights`` is exactly each graph's external initializers, so the runtime needs no onnx."""
    for graph in tiny_pack.graph_files():
        model = onnx.load(str(graph), load_external_data=False)
        external = {t.name: t for t in model.graph.initializer if t.data_location == onnx.TensorProto.EXTERNAL}
        refs = tiny_pack.graph_weights(graph)
        assert refs and {r.name for r in refs} == set(external), graph.name
        for ref in refs:
            info = {e.key: e.value for e in external[ref.name].external_data}
            assert (ref.offset, ref.length, ref.shape) == (int(info["offset"]), int(info["length"]),
                                                          tuple(external[ref.name].dims))
    assert tiny_pack.graph_weights(tmp_path / "decoder_s25_k5.onnx") is None  # not this pack's file

    copy = tmp_path / "copy"
    shutil.copytree(tiny_pack.root, copy)
    manifest = json.loads((copy / "manifest.json").read_text())
    manifest["graph_weights"]["encoder_3s.onnx"] = manifest["graph_weights"]["encoder_3s.onnx"][1:]
    (copy / "manifest.json").write_text(json.dumps(manifest))
    assert any("encoder_3s.onnx: its weights differ" in p for p in pack_problems(copy, checksums=False))
    del manifest["graph_weights"]["decoder_s25_k6.onnx"]
    (copy / "manifest.json").write_text(json.dumps(manifest))
    with pytest.raises(ModelError, match=r"graph_weights does not list decoder_s25_k6\.onnx"):
        Pack.load(copy)
    manifest["weights_index"]["encoder.conv1.weight"]["length"] += 4
    (copy / "manifest.json").write_text(json.dumps(manifest))
    with pytest.raises(ModelError, match=r"encoder\.conv1\.weight is inconsistent"):
        Pack.load(copy)


def test_verify_names_a_corrupt_weight_file(tiny_pack, tmp_path):
    copy = tmp_path / "copy"
    shutil.copytree(tiny_pack.root, copy)
    assert verify_pack(copy).root == copy
    with open(copy / "weights.bin", "r+b") as fh:
        fh.seek(1000)
        fh.write(b"\x01\x02\x03")
    with pytest.raises(ModelError, match=r"weights\.bin is corrupt"):
        verify_pack(copy)
    with pytest.raises(ModelError, match="corrupt"):
        Pack.load(copy, verify=True)
    (copy / "stray.onnx").write_bytes(b"")
    assert any("stray.onnx is not listed" in p for p in pack_problems(copy))


def test_tokenizer_json_alone_gives_the_same_vocabulary(tiny_checkpoint, tmp_path):
    """Checkpoints that ship only tokenizer.json (+ tokenizer_config.json added tokens) parse identically."""
    ckpt = tmp_path / "ckpt"
    shutil.copytree(tiny_checkpoint, ckpt)
    vocab = json.loads((ckpt / "vocab.json").read_text())
    added = json.loads((ckpt / "added_tokens.json").read_text())
    (ckpt / "tokenizer.json").write_text(json.dumps({
        "model": {"type": "BPE", "vocab": vocab, "merges": []},
        "added_tokens": [{"id": i, "content": t, "special": True} for t, i in list(added.items())[:10]],
    }))
    (ckpt / "tokenizer_config.json").write_text(json.dumps({
        "added_tokens_decoder": {str(i): {"content": t, "special": True} for t, i in added.items()}}))
    (ckpt / "vocab.json").unlink()
    (ckpt / "added_tokens.json").unlink()
    parsed = load_checkpoint(ckpt)
    original = load_checkpoint(tiny_checkpoint)
    assert parsed.token_bytes == original.token_bytes
    assert parsed.special == original.special


def test_a_chunk_3_pack_decodes_in_chunks_of_three(chunk3_pack):
    """``captioner models build --chunk 3``: the CPU's fastest tail chunk (captioner bench)."""
    p = chunk3_pack
    assert p.schedules == {"default": (4, 6, 3, 3, 3, 3, 3, 3, 3), "prefixed": (5, 5, 3, 3, 3, 3, 3, 3, 3)}
    assert p.long_chunk == 3 and p.cache_slots[3] == 28 and p.cache_slots[10] == p.cache_slots[30] == 220
    assert p.decoder_chunks(30)[-1] == (220, 3)  # the last chunk of 3 that ends by max_positions + 1
    assert p.decoder_file(3, 10, 3).name == "decoder_s28_k3.onnx"
    assert p.decoder_file(3, 5, 5).name == "decoder_s28_k5.onnx"  # the prefixed head's second chunk
    # 7 encoders; per cache size: k4 (batched prompt), k6, k5 (batched), k5, k3
    assert len(p.graph_files()) == 7 + 5 + 5 + 2  # + a verifier per cache
    assert pack_problems(p.root, checksums=False) == []
    assert BuildOptions().tail_chunk == BuildOptions(linear="conv").tail_chunk == 5  # the paper's
