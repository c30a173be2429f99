"""A CTranslate2 (faster-whisper) Whisper model folder → the same :class:`Checkpoint` a Hugging Face
checkpoint gives, read with numpy alone (no ctranslate2, no torch).

A folder holds ``model.bin`` (or ``model.bin.part1``, ``.part2``, … to be concatenated),
``config.json`` (alignment heads, language ids, suppress ids), ``vocabulary.txt`` (one token per
line, line number = id, timestamps included) and usually ``tokenizer.json``. ``vocabulary.txt`` is
the id → token map used here: the multilingual ``tokenizer.json`` that faster-whisper ships lacks
the first BPE merge and the timestamp tokens, which only matters for encoding text (nothing in the
pack does).

``model.bin`` layout (little-endian): u32 binary version (≥ 5); spec name (u16 length, bytes,
NUL-terminated) and u32 spec revision; u32 variable count; per variable: name, u8 rank, u32 × rank
dims, u8 dtype id (:data:`_DTYPES`), u32 byte count, raw data; then u32 alias count and
(alias, target) name pairs.

CTranslate2 → Hugging Face names: self-attention Q, K, V are fused (``self_attention/linear_0`` =
[q; k; v]), cross-attention K, V too (``attention/linear_1`` = [k; v]); layer norms are
``gamma``/``beta``; the output projection is an alias of the token embedding. CTranslate2 adds an
all-zero key bias that HF Whisper lacks; a key bias adds the same ``q·b`` to every key's score, so
softmax ignores it and it is dropped. No query scaling is folded into the weights (the graph
builders scale as for HF). The encoder's sinusoidal position table is stored rounded to float16
(≈2.4e-4 off), so it is recomputed exactly as openai/whisper does.
"""

from __future__ import annotations

import hashlib
import json
import logging
import re
import struct
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import numpy as np

from captioner.errors import PackBuildError
from captioner.models.checkpoint import (
    Checkpoint,
    alignment_heads,
    check_weights,
    special_tokens,
    token_bytes_table,
)
from captioner.models.pack import Dims

__all__ = ["CT2_WEIGHTS", "is_ct2_folder", "load_ct2_checkpoint", "model_bin_parts", "read_model_bin", "sinusoids"]

logger = logging.getLogger(__name__)

CT2_WEIGHTS = "model.bin"
_BFLOAT16 = 5
_DTYPES: dict[int, np.dtype] = {0: np.dtype(np.float32), 1: np.dtype(np.int8), 2: np.dtype(np.int16),
                                3: np.dtype(np.int32), 4: np.dtype(np.float16), _BFLOAT16: np.dtype(np.uint16)}
_PART = re.compile(r"^model\.bin\.part(\d+)$")
_MIN_BINARY_VERSION = 5  # older files have no spec name/revision; faster-whisper's are version 6


def model_bin_parts(root: Path) -> list[Path]:
    """``[root/model.bin]`` or the split parts in numeric order; empty if neither is there."""
    single = root / CT2_WEIGHTS
    if single.is_file():
        return [single]
    parts = [(int(m.group(1)), p) for p in root.iterdir() if (m := _PART.match(p.name)) and p.is_file()]
    parts.sort()
    if parts and [n for n, _ in parts] != list(range(parts[0][0], parts[0][0] + len(parts))):
        raise PackBuildError(f"{root}: model.bin parts are not consecutive: {[p.name for _, p in parts]}")
    return [p for _, p in parts]


def is_ct2_folder(root: Path) -> bool:
    """True when ``root`` looks like a CTranslate2 model folder (model.bin or its parts)."""
    return root.is_dir() and bool(model_bin_parts(root))


def _load_bytes(parts: list[Path]) -> tuple[np.ndarray, str]:
    """The whole model.bin as a uint8 array (memory-mapped when it is one file) and its sha256."""
    digest = hashlib.sha256()
    if len(parts) == 1:
        data = np.memmap(parts[0], dtype=np.uint8, mode="r")
        with parts[0].open("rb") as fh:
            for block in iter(lambda: fh.read(1 << 22), b""):
                digest.update(block)
        return data, digest.hexdigest()
    sizes = [p.stat().st_size for p in parts]
    joined = np.empty(sum(sizes), np.uint8)
    at = 0
    for part, size in zip(parts, sizes, strict=True):
        with part.open("rb") as fh:
            n = fh.readinto(memoryview(joined.data)[at : at + size])
        if n != size:
            raise PackBuildError(f"{part}: read {n} of {size} bytes")
        digest.update(memoryview(joined.data)[at : at + size])
        at += size
    return joined, digest.hexdigest()


class _Reader:
    def __init__(self, data: np.ndarray, path: Path):
        self.data, self.path, self.at = data, path, 0
        self.raw = memoryview(data.data)

    def unpack(self, fmt: str) -> tuple:
        size = struct.calcsize(fmt)
        if self.at + size > self.data.size:
            raise PackBuildError(f"{self.path} is truncated at byte {self.at}: not a complete CTranslate2 model")
        values = struct.unpack_from(fmt, self.raw, self.at)
        self.at += size
        return values

    def string(self) -> str:
        (n,) = self.unpack("<H")
        if self.at + n > self.data.size:
            raise PackBuildError(f"{self.path} is truncated at byte {self.at}: not a complete CTranslate2 model")
        text = bytes(self.raw[self.at : self.at + n]).rstrip(b"\0")
        self.at += n
        try:
            return text.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise PackBuildError(f"{self.path}: unreadable name at byte {self.at - n}: corrupt file") from exc


def read_model_bin(data: np.ndarray, path: Path) -> tuple[str, dict[str, np.ndarray]]:
    """Parse a CTranslate2 ``model.bin`` held in ``data`` (uint8).

    Returns:
        (spec name, {variable name: array}) with aliases resolved; arrays are views of ``data``
        (bfloat16 is widened to float32).

    Raises:
        PackBuildError: a wrong version, an unknown dtype, a size mismatch or truncation.
    """
    r = _Reader(data, path)
    (version,) = r.unpack("<I")
    if not _MIN_BINARY_VERSION <= version <= 64:
        raise PackBuildError(f"{path}: CTranslate2 binary version {version} is not supported (need ≥ {_MIN_BINARY_VERSION})")
    spec = r.string()
    r.unpack("<I")  # spec revision
    (count,) = r.unpack("<I")
    variables: dict[str, np.ndarray] = {}
    for _ in range(count):
        name = r.string()
        (rank,) = r.unpack("<B")
        dims = r.unpack(f"<{rank}I") if rank else ()
        dtype_id, nbytes = r.unpack("<BI")
        dtype = _DTYPES.get(dtype_id)
        if dtype is None:
            raise PackBuildError(f"{path}: variable {name!r} has unknown dtype id {dtype_id}")
        itemsize = dtype.itemsize
        if nbytes != itemsize * int(np.prod(dims, dtype=np.int64)):
            raise PackBuildError(f"{path}: variable {name!r} of shape {list(dims)} has {nbytes} bytes: corrupt file")
        if r.at + nbytes > data.size:
            raise PackBuildError(f"{path} is truncated inside {name!r}: not a complete CTranslate2 model")
        raw = data[r.at : r.at + nbytes]
        r.at += nbytes
        if dtype_id == _BFLOAT16:  # the high half of a float32
            array = (raw.view(np.uint16).astype(np.uint32) << 16).view(np.float32)
        else:
            array = raw.view(dtype)
        variables[name] = array.reshape(dims)
    (aliases,) = r.unpack("<I")
    for _ in range(aliases):
        alias, target = r.string(), r.string()
        if target not in variables:
            raise PackBuildError(f"{path}: alias {alias!r} points at a missing variable {target!r}")
        variables[alias] = variables[target]
    return spec, variables


def sinusoids(length: int, channels: int) -> np.ndarray:
    """float32 [length, channels]: openai/whisper's encoder position table (sin | cos halves)."""
    increment = np.log(10000) / (channels // 2 - 1)
    inv = np.exp(-increment * np.arange(channels // 2))
    scaled = np.arange(length)[:, None] * inv[None, :]
    return np.concatenate([np.sin(scaled), np.cos(scaled)], axis=1).astype(np.float32)


def _hf_names(v: Mapping[str, np.ndarray], n_enc: int, n_dec: int, d: int) -> dict[str, Any]:
    """Hugging Face tensor name → a zero-argument function slicing the CTranslate2 variable."""
    names: dict[str, Any] = {}

    def put(hf: str, ct2: str, part: int | None = None, parts: int = 1) -> None:
        def get(ct2=ct2, part=part, parts=parts):
            x = v[ct2]
            if part is None:
                return x
            size = x.shape[0] // parts
            return x[part * size : (part + 1) * size]

        names[hf] = get

    def norm(hf: str, ct2: str) -> None:
        put(f"{hf}.weight", f"{ct2}/gamma")
        put(f"{hf}.bias", f"{ct2}/beta")

    def linear(hf: str, ct2: str, part: int | None = None, parts: int = 1, bias: bool = True) -> None:
        put(f"{hf}.weight", f"{ct2}/weight", part, parts)
        if bias:
            put(f"{hf}.bias", f"{ct2}/bias", part, parts)

    def block(hf: str, ct2: str) -> None:
        norm(f"{hf}.self_attn_layer_norm", f"{ct2}/self_attention/layer_norm")
        for k, proj in enumerate("qkv"):
            linear(f"{hf}.self_attn.{proj}_proj", f"{ct2}/self_attention/linear_0", k, 3, bias=proj != "k")
        linear(f"{hf}.self_attn.out_proj", f"{ct2}/self_attention/linear_1")
        norm(f"{hf}.final_layer_norm", f"{ct2}/ffn/layer_norm")
        linear(f"{hf}.fc1", f"{ct2}/ffn/linear_0")
        linear(f"{hf}.fc2", f"{ct2}/ffn/linear_1")

    for conv in ("conv1", "conv2"):
        linear(f"encoder.{conv}", f"encoder/{conv}")
    names["encoder.embed_positions.weight"] = lambda: sinusoids(
        v["encoder/position_encodings/encodings"].shape[0], d
    )
    for i in range(n_enc):
        block(f"encoder.layers.{i}", f"encoder/layer_{i}")
    norm("encoder.layer_norm", "encoder/layer_norm")
    put("decoder.embed_tokens.weight", "decoder/embeddings/weight")
    put("decoder.embed_positions.weight", "decoder/position_encodings/encodings")
    for i in range(n_dec):
        hf, ct2 = f"decoder.layers.{i}", f"decoder/layer_{i}"
        block(hf, ct2)
        norm(f"{hf}.encoder_attn_layer_norm", f"{ct2}/attention/layer_norm")
        linear(f"{hf}.encoder_attn.q_proj", f"{ct2}/attention/linear_0")
        linear(f"{hf}.encoder_attn.k_proj", f"{ct2}/attention/linear_1", 0, 2, bias=False)
        linear(f"{hf}.encoder_attn.v_proj", f"{ct2}/attention/linear_1", 1, 2)
        linear(f"{hf}.encoder_attn.out_proj", f"{ct2}/attention/linear_2")
    norm("decoder.layer_norm", "decoder/layer_norm")
    return names


class _HfView(Mapping[str, np.ndarray]):
    """The CTranslate2 variables under Hugging Face Whisper names (sliced lazily, nothing copied)."""

    def __init__(self, getters: dict[str, Any], path: Path):
        self._getters, self._path = getters, path

    def __getitem__(self, name: str) -> np.ndarray:
        try:
            return self._getters[name]()
        except KeyError as exc:
            if name in self._getters:
                raise PackBuildError(f"{self._path} lacks the variable {exc.args[0]!r} (for {name!r})") from None
            raise

    def __iter__(self) -> Iterator[str]:
        return iter(self._getters)

    def __len__(self) -> int:
        return len(self._getters)


def _count_layers(v: Mapping[str, np.ndarray], side: str) -> int:
    found = {int(m.group(1)) for k in v if (m := re.match(rf"^{side}/layer_(\d+)/", k))}
    if not found or found != set(range(len(found))):
        raise PackBuildError(f"{side} layers are missing or not numbered 0…n−1: {sorted(found)}")
    return len(found)


def _dims(v: Mapping[str, np.ndarray], path: Path) -> Dims:
    try:
        n_vocab, d = (int(x) for x in v["decoder/embeddings/weight"].shape)
        heads = int(np.asarray(v["decoder/num_heads"]).reshape(-1)[0])
        enc_heads = int(np.asarray(v["encoder/num_heads"]).reshape(-1)[0]) if "encoder/num_heads" in v else heads
        n_enc, n_dec = _count_layers(v, "encoder"), _count_layers(v, "decoder")
        if heads <= 0 or d % heads or enc_heads != heads:
            raise PackBuildError(f"{path}: {heads} decoder / {enc_heads} encoder heads do not divide d_model {d}")
        return Dims(
            n_mels=int(v["encoder/conv1/weight"].shape[1]),
            n_audio_ctx=int(v["encoder/position_encodings/encodings"].shape[0]),
            d_model=d,
            encoder_layers=n_enc,
            encoder_heads=enc_heads,
            decoder_layers=n_dec,
            decoder_heads=heads,
            head_dim=d // heads,
            n_text_ctx=int(v["decoder/position_encodings/encodings"].shape[0]),
            n_vocab=n_vocab,
            encoder_ffn_dim=int(v["encoder/layer_0/ffn/linear_0/weight"].shape[0]),
            decoder_ffn_dim=int(v["decoder/layer_0/ffn/linear_0/weight"].shape[0]),
        )
    except KeyError as exc:
        raise PackBuildError(f"{path} lacks the variable {exc.args[0]!r}: not a CTranslate2 Whisper model") from None
    except (PackBuildError, ValueError) as exc:
        raise PackBuildError(f"{path}: {exc}") from exc


def _vocabulary(root: Path, n_vocab: int) -> dict[str, int]:
    path = root / "vocabulary.txt"
    if path.is_file():
        try:
            lines = path.read_text(encoding="utf-8").split("\n")
        except (OSError, UnicodeDecodeError) as exc:
            raise PackBuildError(f"{path} is unreadable: {exc}") from exc
        if lines and lines[-1] == "":
            lines.pop()
        if len(lines) != n_vocab:
            raise PackBuildError(f"{path} has {len(lines)} tokens, the model has {n_vocab}")
        return {tok: i for i, tok in enumerate(lines) if tok}
    tok_json = root / "tokenizer.json"
    if not tok_json.is_file():
        raise PackBuildError(f"{path} is missing (and no tokenizer.json): the model has no vocabulary")
    try:
        data = json.loads(tok_json.read_text(encoding="utf-8"))
        vocab = {str(k): int(i) for k, i in data["model"]["vocab"].items()}
        vocab.update({str(t["content"]): int(t["id"]) for t in data.get("added_tokens", [])})
    except (OSError, ValueError, KeyError, TypeError, AttributeError) as exc:
        raise PackBuildError(f"{tok_json} is malformed: {exc!r}") from exc
    return {t: i for t, i in vocab.items() if 0 <= i < n_vocab}


def load_ct2_checkpoint(root: Path | str, *, name: str | None = None, revision: str | None = None) -> Checkpoint:
    """Parse the CTranslate2 Whisper folder ``root`` into a :class:`Checkpoint`.

    Raises:
        PackBuildError: a missing, truncated or malformed file, named in the message.
    """
    root = Path(root)
    parts = model_bin_parts(root) if root.is_dir() else []
    if not parts:
        raise PackBuildError(f"{root / CT2_WEIGHTS} is missing: not a CTranslate2 model folder")
    data, sha256 = _load_bytes(parts)
    spec, variables = read_model_bin(data, parts[0])
    if spec != "WhisperSpec":
        raise PackBuildError(f"{parts[0]} holds a {spec or 'nameless'} model, not Whisper (WhisperSpec)")
    dims = _dims(variables, parts[0])
    cfg_path = root / "config.json"
    try:
        cfg = json.loads(cfg_path.read_text(encoding="utf-8")) if cfg_path.is_file() else {}
    except (OSError, UnicodeDecodeError, ValueError) as exc:
        raise PackBuildError(f"{cfg_path} is unreadable or not valid JSON: {exc}") from exc
    if not isinstance(cfg, dict):
        raise PackBuildError(f"{cfg_path} is not a JSON object")
    vocab = _vocabulary(root, dims.n_vocab)
    multilingual = dims.n_vocab >= 51865
    gen: dict[str, Any] = {"alignment_heads": cfg.get("alignment_heads")}
    if multilingual and cfg.get("lang_ids"):
        by_id = {i: t for t, i in vocab.items()}
        try:
            gen["lang_to_id"] = {by_id[int(i)]: int(i) for i in cfg["lang_ids"] if int(i) in by_id}
        except (TypeError, ValueError) as exc:
            raise PackBuildError(f"{cfg_path}: lang_ids is malformed: {exc}") from exc
    special = special_tokens(vocab, gen, multilingual, root / "vocabulary.txt")
    heads, heads_source = alignment_heads(gen, dims, cfg_path)
    weights = _HfView(_hf_names(variables, dims.encoder_layers, dims.decoder_layers, dims.d_model), parts[0])
    check_weights(weights, dims, parts[0])
    logger.info("CTranslate2 model %s: %s, %s", root, dims, "multilingual" if multilingual else "English-only")
    return Checkpoint(
        root=root,
        dims=dims,
        special=special,
        multilingual=multilingual,
        alignment_heads=heads,
        alignment_heads_source=heads_source if heads_source != "generation_config" else "ctranslate2_config",
        token_bytes=token_bytes_table(vocab, dims.n_vocab),
        weights=weights,
        tied_output=True,
        source={"name": name or root.name, "revision": revision, "sha256": sha256, "format": "ctranslate2"},
    )
