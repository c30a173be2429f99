"""A Hugging Face Whisper checkpoint directory → what the builder needs (dims, vocabulary, weights).

Reads ``config.json``, ``generation_config.json`` (optional), ``model.safetensors`` and the tokenizer
files (``vocab.json`` + ``added_tokens.json``, and/or ``tokenizer.json`` / ``tokenizer_config.json``).
Every problem is a :class:`PackBuildError` that names the file.
"""

from __future__ import annotations

import json
import logging
import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from captioner.errors import PackBuildError
from captioner.models.pack import Dims, SpecialTokens, file_sha256
from captioner.models.safetensors_io import SafetensorsFile

__all__ = [
    "ALIGNMENT_FALLBACK",
    "Checkpoint",
    "alignment_heads",
    "bytes_to_unicode",
    "check_weights",
    "load_checkpoint",
    "special_tokens",
    "token_bytes_table",
]

logger = logging.getLogger(__name__)

WEIGHTS = "model.safetensors"
ALIGNMENT_FALLBACK = "fallback: the last half of the decoder layers, all heads (openai/whisper's default)"
_LANG_RE = re.compile(r"^<\|([a-z]{2,3}|haw|yue)\|>$")


def bytes_to_unicode() -> dict[int, str]:
    """GPT-2's reversible byte -> printable character map used by byte-level BPE vocabularies."""
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + list(range(ord("®"), ord("ÿ") + 1))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return dict(zip(bs, (chr(c) for c in cs), strict=True))


@dataclass(frozen=True, slots=True)
class Checkpoint:
    """A parsed checkpoint.

    Attributes:
        root: the checkpoint directory.
        dims: model dimensions.
        special: special token ids.
        multilingual: has language/task tokens (``vocab_size >= 51865``, as transformers decides).
        alignment_heads: (decoder layer, head) pairs for DTW.
        alignment_heads_source: ``"generation_config"`` or :data:`ALIGNMENT_FALLBACK`.
        token_bytes: id -> raw bytes of the token (specials as their text; unknown ids empty).
        weights: the memory-mapped tensors (read lazily), names without the ``model.`` prefix.
        tied_output: the output projection is the token embedding (no separate ``proj_out.weight``).
        source: ``{"name", "revision", "sha256"}`` for the manifest.
    """

    root: Path
    dims: Dims
    special: SpecialTokens
    multilingual: bool
    alignment_heads: tuple[tuple[int, int], ...]
    alignment_heads_source: str
    token_bytes: tuple[bytes, ...]
    weights: Mapping[str, np.ndarray]
    tied_output: bool
    source: dict[str, Any]


class _Unprefixed(Mapping[str, np.ndarray]):
    """The checkpoint's tensors under names without ``model.`` (HF names them ``model.encoder...``)."""

    def __init__(self, tensors: SafetensorsFile) -> None:
        self._tensors = tensors
        self._names = {k.removeprefix("model."): k for k in tensors}

    def __getitem__(self, name: str) -> np.ndarray:
        return self._tensors[self._names[name]]

    def __iter__(self) -> Iterator[str]:
        return iter(self._names)

    def __len__(self) -> int:
        return len(self._names)


def _read_json(path: Path, *, required: bool = True) -> Any:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        if required:
            raise PackBuildError(f"{path} is missing: not a Hugging Face Whisper checkpoint directory") from None
        return None
    except (OSError, UnicodeDecodeError, ValueError) as exc:
        raise PackBuildError(f"{path} is unreadable or not valid JSON: {exc}") from exc


def _dims_from_config(cfg: dict, path: Path) -> Dims:
    if not isinstance(cfg, dict):
        raise PackBuildError(f"{path} is not a JSON object")
    if cfg.get("model_type") != "whisper":
        raise PackBuildError(
            f"{path}: model_type is {cfg.get('model_type')!r}, not 'whisper': only Whisper checkpoints can be built"
        )
    act = cfg.get("activation_function", "gelu")
    if act != "gelu":
        raise PackBuildError(f"{path}: activation_function {act!r} is not supported (only 'gelu')")
    if cfg.get("scale_embedding"):
        raise PackBuildError(f"{path}: scale_embedding=true is not supported (no Whisper release uses it)")
    try:
        d = int(cfg["d_model"])
        eh, dh = int(cfg["encoder_attention_heads"]), int(cfg["decoder_attention_heads"])
        if d % eh or d % dh or d // eh != d // dh:
            raise PackBuildError(f"{path}: d_model {d} is not divisible into equal heads ({eh}, {dh})")
        return Dims(
            n_mels=int(cfg["num_mel_bins"]),
            n_audio_ctx=int(cfg["max_source_positions"]),
            d_model=d,
            encoder_layers=int(cfg["encoder_layers"]),
            encoder_heads=eh,
            decoder_layers=int(cfg["decoder_layers"]),
            decoder_heads=dh,
            head_dim=d // dh,
            n_text_ctx=int(cfg["max_target_positions"]),
            n_vocab=int(cfg["vocab_size"]),
            encoder_ffn_dim=int(cfg["encoder_ffn_dim"]),
            decoder_ffn_dim=int(cfg["decoder_ffn_dim"]),
        )
    except (KeyError, TypeError, ValueError) as exc:
        raise PackBuildError(f"{path} lacks or has a malformed Whisper setting: {exc!r}") from exc


def _vocabulary(root: Path, n_vocab: int) -> tuple[dict[str, int], Path]:
    """token text -> id from every tokenizer file present; the first file found names errors."""
    vocab: dict[str, int] = {}
    used: list[Path] = []
    tok_json = _read_json(root / "tokenizer.json", required=False)
    if tok_json is not None:
        used.append(root / "tokenizer.json")
        try:
            vocab.update({str(k): int(v) for k, v in tok_json["model"]["vocab"].items()})
            vocab.update({str(t["content"]): int(t["id"]) for t in tok_json.get("added_tokens", [])})
        except (KeyError, TypeError, ValueError, AttributeError) as exc:
            raise PackBuildError(f"{root / 'tokenizer.json'} is malformed: {exc!r}") from exc
    for name in ("vocab.json", "added_tokens.json"):
        data = _read_json(root / name, required=False)
        if data is None:
            continue
        used.append(root / name)
        if not isinstance(data, dict):
            raise PackBuildError(f"{root / name} is not a JSON object of token -> id")
        try:
            vocab.update({str(k): int(v) for k, v in data.items()})
        except (TypeError, ValueError) as exc:
            raise PackBuildError(f"{root / name} has a non-integer id: {exc}") from exc
    cfg = _read_json(root / "tokenizer_config.json", required=False)
    if isinstance(cfg, dict) and isinstance(cfg.get("added_tokens_decoder"), dict):
        used.append(root / "tokenizer_config.json")
        try:
            vocab.update({str(v["content"]): int(k) for k, v in cfg["added_tokens_decoder"].items()})
        except (KeyError, TypeError, ValueError) as exc:
            raise PackBuildError(f"{root / 'tokenizer_config.json'} has malformed added tokens: {exc!r}") from exc
    if not used or not vocab:
        raise PackBuildError(f"{root / 'vocab.json'} is missing: the checkpoint has no tokenizer files")
    bad = [t for t, i in vocab.items() if not 0 <= i < n_vocab]
    if bad:
        raise PackBuildError(f"{used[0]}: token {bad[0]!r} has an id outside the model's {n_vocab} ids")
    return vocab, used[0]


def token_bytes_table(vocab: dict[str, int], n_vocab: int) -> tuple[bytes, ...]:
    """Each id's raw bytes (byte-level BPE text decoded; specials and plain added tokens as UTF-8)."""
    decoder = {c: b for b, c in bytes_to_unicode().items()}
    table = [b""] * n_vocab
    for text, idx in vocab.items():
        if (text.startswith("<|") and text.endswith("|>")) or any(c not in decoder for c in text):
            table[idx] = text.encode("utf-8")  # special, or an added token stored as plain text
        else:
            table[idx] = bytes(decoder[c] for c in text)
    return tuple(table)


def special_tokens(vocab: dict[str, int], gen: dict, multilingual: bool, path: Path) -> SpecialTokens:
    """The special token ids from the vocabulary (and ``generation_config``'s language table);
    PackBuildError naming ``path`` when one the engine needs is missing."""
    def tok(*names: str) -> int | None:
        for name in names:
            if name in vocab:
                return vocab[name]
        return None

    eot = tok("<|endoftext|>")
    sot = tok("<|startoftranscript|>")
    if sot is None:
        sot = gen.get("decoder_start_token_id")
    notimestamps = tok("<|notimestamps|>")
    if notimestamps is None:
        notimestamps = gen.get("no_timestamps_token_id")
    if eot is None or sot is None or notimestamps is None:
        raise PackBuildError(f"{path} lacks Whisper's special tokens (<|endoftext|>, <|startoftranscript|>, ...)")
    first_ts = tok("<|0.00|>")
    tasks = gen.get("task_to_id") or {}
    languages: dict[str, int] = {}
    if multilingual:
        lang_to_id = gen.get("lang_to_id") or {t: i for t, i in vocab.items() if _LANG_RE.match(t) and i > sot}
        languages = {t.strip("<|>"): int(i) for t, i in sorted(lang_to_id.items(), key=lambda kv: kv[1])}
    return SpecialTokens(
        eot=int(eot),
        sot=int(sot),
        transcribe=(tok("<|transcribe|>") or tasks.get("transcribe")) if multilingual else None,
        translate=(tok("<|translate|>") or tasks.get("translate")) if multilingual else None,
        notimestamps=int(notimestamps),
        first_timestamp=int(first_ts if first_ts is not None else notimestamps + 1),
        startofprev=tok("<|startofprev|>"),
        nospeech=tok("<|nospeech|>", "<|nocaptions|>"),
        languages=languages,
    )


def alignment_heads(gen: dict, dims: Dims, path: Path) -> tuple[tuple[tuple[int, int], ...], str]:
    """(layer, head) pairs for DTW and where they came from: ``generation_config``'s, else the
    last half of the decoder layers, all heads (openai/whisper's fallback)."""
    heads = gen.get("alignment_heads")
    if heads:
        try:
            pairs = tuple((int(l_), int(h)) for l_, h in heads)
        except (TypeError, ValueError) as exc:
            raise PackBuildError(f"{path}: alignment_heads is malformed: {exc}") from exc
        if all(0 <= l_ < dims.decoder_layers and 0 <= h < dims.decoder_heads for l_, h in pairs):
            return pairs, "generation_config"
        logger.warning("%s: alignment_heads do not fit the model; using the fallback", path)
    half = dims.decoder_layers // 2
    pairs = tuple((l_, h) for l_ in range(half, dims.decoder_layers) for h in range(dims.decoder_heads))
    return pairs, ALIGNMENT_FALLBACK


def load_checkpoint(root: Path | str, *, name: str | None = None, revision: str | None = None) -> Checkpoint:
    """Parse the checkpoint directory ``root``.

    Args:
        root: directory with ``config.json``, ``model.safetensors`` and tokenizer files.
        name: source name for the manifest (a Hugging Face repo id); the directory name if None.
        revision: source revision (commit) if known.

    Raises:
        PackBuildError: a missing or malformed file, named in the message.
    """
    root = Path(root)
    if not root.is_dir():
        raise PackBuildError(f"checkpoint directory not found: {root}")
    cfg_path = root / "config.json"
    dims = _dims_from_config(_read_json(cfg_path), cfg_path)
    gen_path = root / "generation_config.json"
    gen = _read_json(gen_path, required=False) or {}
    if not isinstance(gen, dict):
        raise PackBuildError(f"{gen_path} is not a JSON object")
    vocab, vocab_path = _vocabulary(root, dims.n_vocab)
    multilingual = dims.n_vocab >= 51865
    special = special_tokens(vocab, gen, multilingual, vocab_path)
    heads, heads_source = alignment_heads(gen, dims, gen_path)
    weights = _Unprefixed(SafetensorsFile(root / WEIGHTS))
    check_weights(weights, dims, root / WEIGHTS)
    tied = "proj_out.weight" not in weights
    logger.info("checkpoint %s: %s, %s", root, dims, "multilingual" if multilingual else "English-only")
    return Checkpoint(
        root=root,
        dims=dims,
        special=special,
        multilingual=multilingual,
        alignment_heads=heads,
        alignment_heads_source=heads_source,
        token_bytes=token_bytes_table(vocab, dims.n_vocab),
        weights=weights,
        tied_output=tied,
        source={"name": name or root.name, "revision": revision, "sha256": file_sha256(root / WEIGHTS)},
    )


def check_weights(w: Mapping[str, np.ndarray], dims: Dims, path: Path) -> None:
    """Every tensor the graphs need is present with the shape the config implies."""
    d = dims.d_model
    need = {
        "encoder.conv1.weight": (d, dims.n_mels, 3),
        "encoder.conv2.weight": (d, d, 3),
        "encoder.embed_positions.weight": (dims.n_audio_ctx, d),
        "encoder.layer_norm.weight": (d,),
        "decoder.embed_tokens.weight": (dims.n_vocab, d),
        "decoder.embed_positions.weight": (dims.n_text_ctx, d),
        "decoder.layer_norm.weight": (d,),
    }
    for i in range(dims.encoder_layers):
        need[f"encoder.layers.{i}.self_attn.q_proj.weight"] = (d, d)
        need[f"encoder.layers.{i}.fc1.weight"] = (dims.encoder_ffn_dim, d)
    for i in range(dims.decoder_layers):
        need[f"decoder.layers.{i}.encoder_attn.k_proj.weight"] = (d, d)
        need[f"decoder.layers.{i}.fc1.weight"] = (dims.decoder_ffn_dim, d)
    for name, shape in need.items():
        if name not in w:
            raise PackBuildError(f"{path} lacks the tensor {name!r}: not a Whisper checkpoint matching its config")
        if tuple(w[name].shape) != shape:
            raise PackBuildError(f"{path}: tensor {name!r} has shape {tuple(w[name].shape)}, config implies {shape}")
