"""CTranslate2 (faster-whisper) models: the real tiny.en ``model.bin`` parsed with numpy, the mapping to
Hugging Face names checked against the file, broken files refused with a clear message, and the pack
built from it checked against CTranslate2 itself and against transformers on real speech.
"""

from __future__ import annotations

import json
import struct
from pathlib import Path

import numpy as np
import pytest

from captioner.errors import PackBuildError
from captioner.models.build import BuildOptions, build_pack
from captioner.models.catalog import KNOWN_MODELS
from captioner.models.ct2 import load_ct2_checkpoint, read_model_bin, sinusoids
from captioner.models.pack import Pack
from models.ct2_reference import clip_features, ct2_greedy, pack_greedy, prompt_of
from models.helpers import PackRunner, Reference

SPEECH = Path(__file__).resolve().parents[1] / "data" / "speech"
CLIPS = sorted(SPEECH.glob("*.wav"))
TINY_SHA256 = KNOWN_MODELS["tiny.en"].model_sha256


# ----------------------------------------------------------------------------- the real file
@pytest.fixture(scope="module")
def real_vars(real_tiny_en_dir) -> tuple[str, dict[str, np.ndarray]]:
    path = real_tiny_en_dir / "model.bin"
    return read_model_bin(np.memmap(path, dtype=np.uint8, mode="r"), path)


def test_the_real_model_bin_parses(real_tiny_en_dir, real_vars) -> None:
    spec, variables = real_vars
    head = (real_tiny_en_dir / "model.bin").read_bytes()[:64]  # the header, read independently
    version, = struct.unpack_from("<I", head, 0)
    (n,) = struct.unpack_from("<H", head, 4)
    name = head[6 : 6 + n]
    _revision, count = struct.unpack_from("<II", head, 6 + n)
    assert (version, name, spec) == (6, b"WhisperSpec\0", "WhisperSpec")
    assert count == 148 and len(variables) == count + 1  # + the output projection, an alias
    assert variables["decoder/projection/weight"] is variables["decoder/embeddings/weight"]
    emb = variables["decoder/embeddings/weight"]
    assert emb.dtype == np.float16 and emb.shape == (51864, 384)  # tiny.en: English-only vocabulary, d 384
    assert variables["encoder/conv1/weight"].shape == (384, 80, 3)
    assert sum(k.startswith("encoder/layer_") and k.endswith("ffn/linear_0/weight") for k in variables) == 4


def test_fused_projections_split_into_the_hugging_face_ones(real_tiny_en_dir, real_vars) -> None:
    _, v = real_vars
    w = load_ct2_checkpoint(real_tiny_en_dir).weights
    for side, layer in (("encoder", 2), ("decoder", 1)):
        hf, ct = f"{side}.layers.{layer}.self_attn", f"{side}/layer_{layer}/self_attention/linear_0"
        qkv = np.concatenate([w[f"{hf}.{p}_proj.weight"] for p in "qkv"])
        assert np.array_equal(qkv, v[f"{ct}/weight"])
        bias = v[f"{ct}/bias"]
        assert not bias[384:768].any()  # CTranslate2's inserted key bias is all zero: dropping it is exact
        assert np.array_equal(np.concatenate([w[f"{hf}.q_proj.bias"], w[f"{hf}.v_proj.bias"]]),
                              np.concatenate([bias[:384], bias[768:]]))
        assert f"{hf}.k_proj.bias" not in w
    kv = np.concatenate([w["decoder.layers.3.encoder_attn.k_proj.weight"], w["decoder.layers.3.encoder_attn.v_proj.weight"]])
    assert np.array_equal(kv, v["decoder/layer_3/attention/linear_1/weight"])
    assert np.array_equal(w["decoder.layers.0.final_layer_norm.weight"], v["decoder/layer_0/ffn/layer_norm/gamma"])


def test_encoder_positions_are_recomputed(real_tiny_en_dir, real_vars) -> None:
    _, v = real_vars
    stored = v["encoder/position_encodings/encodings"].astype(np.float32)
    exact = load_ct2_checkpoint(real_tiny_en_dir).weights["encoder.embed_positions.weight"]
    assert exact.dtype == np.float32 and exact.shape == stored.shape == (1500, 384)
    assert np.array_equal(exact, sinusoids(1500, 384))
    gap = np.abs(exact - stored).max()
    assert 0 < gap < 1e-3  # the file holds them rounded to float16


def _copy_folder(src: Path, dst: Path, *, skip: tuple[str, ...] = ("model.bin",)) -> Path:
    dst.mkdir(parents=True)
    for f in src.iterdir():
        if f.name not in skip and f.suffix != ".py":
            (dst / f.name).symlink_to(f)
    return dst


def test_split_parts_give_the_same_model(real_tiny_en_dir, real_tiny_en_pack, tmp_path) -> None:
    folder = _copy_folder(real_tiny_en_dir, tmp_path / "split")
    data = (real_tiny_en_dir / "model.bin").read_bytes()
    cut = 12_345_677  # anywhere, even inside a tensor
    (folder / "model.bin.part1").write_bytes(data[:cut])
    (folder / "model.bin.part2").write_bytes(data[cut:])
    joined = load_ct2_checkpoint(folder)
    assert joined.source["sha256"] == TINY_SHA256 == real_tiny_en_pack.manifest["source"]["sha256"]
    single = load_ct2_checkpoint(real_tiny_en_dir)
    for name in ("encoder.conv1.weight", "decoder.layers.2.fc1.weight", "decoder.embed_tokens.weight"):
        assert np.array_equal(joined.weights[name], single.weights[name])


# ----------------------------------------------------------------------------- broken files
def _str(text: str) -> bytes:
    raw = text.encode() + b"\0"
    return struct.pack("<H", len(raw)) + raw


def model_bin(variables: list[tuple[str, np.ndarray, int]], *, spec: str = "WhisperSpec", version: int = 6,
              nbytes_delta: int = 0) -> bytes:
    """A CTranslate2 model.bin of ``variables`` (name, array, dtype id), written by the documented layout."""
    out = struct.pack("<I", version) + _str(spec) + struct.pack("<II", 3, len(variables))
    for name, arr, dtype_id in variables:
        out += _str(name) + struct.pack("<B", arr.ndim) + struct.pack(f"<{arr.ndim}I", *arr.shape)
        out += struct.pack("<BI", dtype_id, arr.nbytes + nbytes_delta) + arr.tobytes()
    return out + struct.pack("<I", 0)


def _folder_with(tmp_path: Path, data: bytes, real_dir: Path) -> Path:
    folder = _copy_folder(real_dir, tmp_path / "broken")
    (folder / "model.bin").write_bytes(data)
    return folder


ONE = [("encoder/conv1/bias", np.zeros(4, np.float16), 4)]


@pytest.mark.parametrize(("data", "message"), [
    (model_bin(ONE, spec="TransformerSpec"), r"holds a TransformerSpec model, not Whisper"),
    (model_bin(ONE, version=3), r"binary version 3 is not supported"),
    (model_bin([("encoder/conv1/bias", np.zeros(4, np.float16), 9)]), r"'encoder/conv1/bias' has unknown dtype id 9"),
    (model_bin(ONE, nbytes_delta=2), r"'encoder/conv1/bias' of shape \[4\] has 10 bytes: corrupt file"),
    (model_bin(ONE)[:-12], r"truncated inside 'encoder/conv1/bias'"),
    (model_bin(ONE)[:7], r"truncated at byte"),
    (model_bin(ONE), r"lacks the variable 'decoder/embeddings/weight': not a CTranslate2 Whisper model"),
], ids=["wrong-spec", "old-version", "unknown-dtype", "size-mismatch", "truncated-data", "truncated-header",
        "not-whisper-variables"])
def test_broken_model_bin_is_a_clear_error(data, message, real_tiny_en_dir, tmp_path) -> None:
    folder = _folder_with(tmp_path, data, real_tiny_en_dir)
    with pytest.raises(PackBuildError, match=message) as err:
        load_ct2_checkpoint(folder)
    assert str(folder / "model.bin") in str(err.value)  # the file is named


def test_a_truncated_real_file_and_bad_parts_are_refused(real_tiny_en_dir, tmp_path) -> None:
    with (real_tiny_en_dir / "model.bin").open("rb") as fh:
        head = fh.read(5_000_000)
    folder = _folder_with(tmp_path, head, real_tiny_en_dir)
    with pytest.raises(PackBuildError, match=r"model\.bin is truncated inside '.+': not a complete CTranslate2 model"):
        load_ct2_checkpoint(folder)
    gap = _copy_folder(real_tiny_en_dir, tmp_path / "gap")
    (gap / "model.bin.part1").write_bytes(head)
    (gap / "model.bin.part3").write_bytes(head)
    with pytest.raises(PackBuildError, match="not consecutive"):
        load_ct2_checkpoint(gap)
    bare = tmp_path / "bare"
    bare.mkdir()
    (bare / "model.bin").symlink_to(real_tiny_en_dir / "model.bin")
    with pytest.raises(PackBuildError, match=r"vocabulary\.txt is missing \(and no tokenizer\.json\)"):
        load_ct2_checkpoint(bare)


# ------------------------------------------------------------------- against CTranslate2 itself
def _two_threads():
    import onnxruntime as ort

    so = ort.SessionOptions()
    so.log_severity_level = 3
    so.intra_op_num_threads = 2
    return so, ["CPUExecutionProvider"]


@pytest.fixture(scope="module")
def tiny_runner(real_tiny_en_pack) -> PackRunner:
    return PackRunner(real_tiny_en_pack, _two_threads)


@pytest.fixture(scope="module")
def int8_runner(real_tiny_en_int8_pack) -> PackRunner:
    """The pack with int8 layers (whisper-base's default)."""
    return PackRunner(real_tiny_en_int8_pack, _two_threads)


@pytest.fixture(scope="module")
def ct2_model(real_tiny_en_dir):
    import ctranslate2

    return ctranslate2.models.Whisper(str(real_tiny_en_dir), device="cpu", compute_type="float32", intra_threads=2)


@pytest.mark.parametrize("layers", ["int8", "fp32"])
@pytest.mark.parametrize("clip", CLIPS, ids=lambda p: p.stem)
def test_greedy_tokens_equal_ctranslate2s(clip, layers, ct2_model, tiny_runner, int8_runner) -> None:
    """CTranslate2's float32 greedy decode; int8 layers give the same tokens on these clips too."""
    runner = int8_runner if layers == "int8" else tiny_runner
    assert runner.pack.layers == layers
    pack = runner.pack
    feats = clip_features(clip)
    prompt = prompt_of(pack)
    ref = ct2_greedy(ct2_model, feats, prompt, pack.special.eot, pack.dims.n_vocab)
    ours = pack_greedy(runner, feats, prompt)
    assert len(ref) >= 4 and ours == ref


# ------------------------------------------------------- the same model as a safetensors checkpoint
def hf_checkpoint_from_ct2(ct2_dir: Path, out: Path) -> Path:
    """The CTranslate2 weights as a Hugging Face checkpoint, written by transformers itself
    (WhisperForConditionalGeneration.save_pretrained) plus vocab.json and generation_config.json."""
    import torch
    from transformers import WhisperConfig, WhisperForConditionalGeneration

    ckpt = load_ct2_checkpoint(ct2_dir)
    d, sp = ckpt.dims, ckpt.special
    config = WhisperConfig(
        vocab_size=d.n_vocab, num_mel_bins=d.n_mels, d_model=d.d_model, encoder_layers=d.encoder_layers,
        decoder_layers=d.decoder_layers, encoder_attention_heads=d.encoder_heads,
        decoder_attention_heads=d.decoder_heads, encoder_ffn_dim=d.encoder_ffn_dim, decoder_ffn_dim=d.decoder_ffn_dim,
        max_source_positions=d.n_audio_ctx, max_target_positions=d.n_text_ctx, bos_token_id=sp.eot,
        eos_token_id=sp.eot, pad_token_id=sp.eot, decoder_start_token_id=sp.sot, tie_word_embeddings=True,
    )
    with torch.device("meta"):  # no random init: every weight is assigned below
        model = WhisperForConditionalGeneration(config).eval()
    state = {f"model.{k}": torch.from_numpy(np.asarray(ckpt.weights[k], dtype=np.float32)) for k in ckpt.weights}
    missing, unexpected = model.load_state_dict(state, strict=False, assign=True)
    assert not unexpected and set(missing) <= {"proj_out.weight"}, (missing, unexpected)  # proj_out is tied
    model.tie_weights()
    assert model.proj_out.weight.data_ptr() == model.model.decoder.embed_tokens.weight.data_ptr()
    model.save_pretrained(out, safe_serialization=True)
    lines = (ct2_dir / "vocabulary.txt").read_text(encoding="utf-8").split("\n")[: d.n_vocab]
    (out / "vocab.json").write_text(json.dumps({t: i for i, t in enumerate(lines)}), encoding="utf-8")
    heads = json.loads((ct2_dir / "config.json").read_text())["alignment_heads"]
    (out / "generation_config.json").write_text(json.dumps({
        "alignment_heads": heads, "decoder_start_token_id": sp.sot, "eos_token_id": sp.eot,
        "no_timestamps_token_id": sp.notimestamps, "is_multilingual": False}), encoding="utf-8")
    return out


@pytest.fixture(scope="module")
def hf_tiny_en(real_tiny_en_dir, tmp_path_factory) -> Path:
    return hf_checkpoint_from_ct2(real_tiny_en_dir, tmp_path_factory.mktemp("hf") / "tiny.en")


@pytest.fixture(scope="module")
def hf_tiny_en_pack(hf_tiny_en, tmp_path_factory) -> Pack:
    return build_pack(hf_tiny_en, tmp_path_factory.mktemp("hfpack") / "tiny.en", BuildOptions())


def test_the_safetensors_checkpoint_builds_the_same_pack(hf_tiny_en_pack, real_tiny_en_pack) -> None:
    """Byte for byte: every graph, weights.bin and tokens.json; the manifests differ only in where the
    weights came from (so the greedy tokens and encoder outputs are the same by construction)."""
    a, b = hf_tiny_en_pack.manifest, real_tiny_en_pack.manifest
    assert len(a["files"]) == len(b["files"]) >= 10 and a["files"] == b["files"]  # name -> sha256
    differ = {k for k in a.keys() | b.keys() if a.get(k) != b.get(k)}
    assert differ == {"source", "alignment_heads_source"}
    assert (a["alignment_heads_source"], b["alignment_heads_source"]) == ("generation_config", "ctranslate2_config")
    assert b["source"]["format"] == "ctranslate2" and "format" not in a["source"]


def test_transformers_agrees_with_the_ct2_pack(hf_tiny_en, tiny_runner) -> None:
    """transformers' own Whisper on the converted checkpoint: the same encoder K/V and greedy tokens
    as the pack (fp32 layers: compared at float tolerance)."""
    fp32_runner = tiny_runner
    assert fp32_runner.pack.layers == "fp32"
    ref = Reference(hf_tiny_en)
    feats = clip_features(CLIPS[1])
    enc_out = ref.encode(feats)
    ref_k, ref_v = ref.cross_kv(enc_out)
    ours = fp32_runner.encode(feats, 1500, 30)
    scale = np.abs(ref_k).max()
    assert np.abs(ours.cross_k - ref_k).max() <= 1e-4 * scale and np.abs(ours.cross_v - ref_v).max() <= 1e-4 * scale
    prompt = prompt_of(fp32_runner.pack)
    tokens = pack_greedy(fp32_runner, feats, prompt)
    assert ref.greedy(enc_out, prompt, len(prompt) + len(tokens) - 1)[len(prompt):] == tokens
