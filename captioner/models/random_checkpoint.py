"""Random-weight Whisper checkpoints with real dimensions, written with numpy alone (no PyTorch).

Compute cost does not depend on the weights, so a random checkpoint of whisper-base's shape measures
what whisper-base costs, offline and anywhere (``captioner bench``). :func:`write_random_checkpoint`
writes what a Hugging Face Whisper repository holds: ``config.json``, ``generation_config.json``,
``model.safetensors`` (the format written here directly: 8-byte little-endian header length, JSON
header, raw little-endian data) and tokenizer files.

The vocabulary is synthetic but realistic and of the real size (:func:`write_tokenizer_files`):
GPT-2's byte symbols, English words with and without the leading-space marker ``Ġ``, punctuation,
digits, subword pieces, filler, then Whisper's special tokens in their exact order, so token ids and
token classes behave as in a real model. The test checkpoints (``tests/checkpoints.py``) use the same
vocabulary.
"""

from __future__ import annotations

import json
import logging
import struct
from collections.abc import Iterable
from pathlib import Path

import numpy as np

from captioner.models.checkpoint import bytes_to_unicode

__all__ = [
    "LANGUAGES",
    "REAL_DIMS",
    "special_tokens",
    "text_vocabulary",
    "write_random_checkpoint",
    "write_safetensors",
    "write_tokenizer_files",
]

logger = logging.getLogger(__name__)

LANGUAGES = ["en", "zh", "de", "es", "ru", "ko", "fr", "ja", "pt", "tr", "pl", "ca", "nl", "ar", "sv", "it", "id", "hi", "fi", "vi", "he", "uk", "el", "ms", "cs", "ro", "da", "hu", "ta", "no", "th", "ur", "hr", "bg", "lt", "la", "mi", "ml", "cy", "sk", "te", "fa", "lv", "bn", "sr", "az", "sl", "kn", "et", "mk", "br", "eu", "is", "hy", "ne", "mn", "bs", "kk", "sq", "sw", "gl", "mr", "pa", "si", "km", "sn", "yo", "so", "af", "oc", "ka", "be", "tg", "sd", "gu", "am", "yi", "lo", "uz", "fo", "ht", "ps", "tk", "nn", "mt", "sa", "lb", "my", "bo", "tl", "mg", "as", "tt", "haw", "ln", "ha", "ba", "jw", "su", "yue"]

WORDS = ["the", "be", "to", "of", "and", "a", "in", "that", "have", "it", "for", "not", "on", "with", "he", "as", "you", "do", "at", "this", "but", "his", "by", "from", "they", "we", "say", "her", "she", "or", "an", "will", "my", "one", "all", "would", "there", "their", "what", "so", "up", "out", "if", "about", "who", "get", "which", "go", "me", "when", "make", "can", "like", "time", "no", "just", "him", "know", "take", "people", "into", "year", "your", "good", "some", "could", "them", "see", "other", "than", "then", "now", "look", "only", "come", "its", "over", "think", "also", "back", "after", "use", "two", "how", "our", "work", "first", "well", "way", "even", "new", "want", "because", "any", "these", "give", "day", "most", "us", "hello", "world", "caption", "speech", "model", "audio", "voice", "music", "meeting", "video", "window", "room", "quick", "brown", "fox", "jumps", "lazy", "dog", "morning", "evening", "question", "answer", "number", "minute", "second", "hour", "today"]
PUNCT = [".", ",", "?", "!", "...", " -", ":", ";", "'", '"', "(", ")", "'s", "'t", "'re", "'ll", "-", " ("]
PIECES = ["ing", "ed", "er", "ly", "tion", "ment", "ness", "able", "al", "ize", "ous", "ful", "less", "est", "ity",
          "ism", "ist", "ance", "ence", "un", "re", "pre", "dis"]

# Hugging Face config values of the released checkpoints (openai/whisper-<name>): d_model, layers
# (encoder = decoder), heads, ffn width, alignment heads (generation_config.json).
REAL_DIMS: dict[str, dict] = {
    "tiny": {"d_model": 384, "layers": 4, "heads": 6, "ffn": 1536,
             "alignment_heads": [[2, 2], [3, 0], [3, 2], [3, 3], [3, 4], [3, 5]]},
    "base": {"d_model": 512, "layers": 6, "heads": 8, "ffn": 2048,
             "alignment_heads": [[3, 1], [4, 2], [4, 3], [4, 7], [5, 1], [5, 2], [5, 4], [5, 6]]},
    "small": {"d_model": 768, "layers": 12, "heads": 12, "ffn": 3072,
              "alignment_heads": [[5, 3], [5, 9], [8, 0], [8, 4], [8, 7], [8, 8], [9, 0], [9, 7], [9, 9],
                                  [10, 5]]},
}
_INIT_STD = 0.02  # transformers' Whisper init_std


def special_tokens(n_languages: int) -> list[str]:
    """Whisper's special tokens after the text vocabulary, in the exact order of the real vocabulary."""
    langs = [f"<|{code}|>" for code in LANGUAGES[:n_languages]]
    stamps = [f"<|{i * 0.02:.2f}|>" for i in range(1501)]
    return ["<|endoftext|>", "<|startoftranscript|>", *langs, "<|translate|>", "<|transcribe|>",
            "<|startoflm|>", "<|startofprev|>", "<|nocaptions|>", "<|notimestamps|>", *stamps]


def text_vocabulary(size: int) -> list[str]:
    """``size`` distinct byte-level BPE token strings (GPT-2 symbol alphabet)."""
    b2u = bytes_to_unicode()

    def enc(text: str) -> str:
        return "".join(b2u[b] for b in text.encode("utf-8"))

    tokens: list[str] = list(b2u.values())  # GPT-2's order: printable bytes first, id 0 is "!"
    seen = set(tokens)

    def add(text: str) -> None:
        token = enc(text)
        if token not in seen and len(tokens) < size:
            seen.add(token)
            tokens.append(token)

    for word in WORDS:
        for form in (word, word.capitalize()):
            add(" " + form)
            add(form)
    for text in PUNCT + [str(i) for i in range(100)] + [" " + str(i) for i in range(100)]:
        add(text)
    for piece in PIECES:
        add(piece)
    i = 0
    while len(tokens) < size:
        add(f" w{i}" if i % 3 else f"x{i}")
        i += 1
    return tokens


def write_tokenizer_files(path: Path, *, multilingual: bool = True, n_languages: int = 99,
                          alignment_heads: Iterable[Iterable[int]] | None = None) -> dict[str, int]:
    """Write ``vocab.json``, ``added_tokens.json``, ``merges.txt``, ``tokenizer_config.json`` and
    ``generation_config.json`` into ``path``.

    Args:
        path: checkpoint directory (exists).
        multilingual: 50257 text tokens + specials (51865 with 99 languages, 51866 with 100);
            English-only has 50256 text tokens (51864).
        n_languages: 99 or 100 (large-v3 adds ``yue``).
        alignment_heads: (layer, head) pairs for generation_config.json; None leaves them out.

    Returns:
        token text -> id of the whole vocabulary (its length is the model's vocab_size).
    """
    text = text_vocabulary(50257 if multilingual else 50256)
    specials = special_tokens(n_languages)
    ids = {tok: i for i, tok in enumerate(text + specials)}
    eot, sot = ids["<|endoftext|>"], ids["<|startoftranscript|>"]
    (path / "vocab.json").write_text(json.dumps(dict(zip(text, range(len(text)), strict=True))), encoding="utf-8")
    (path / "added_tokens.json").write_text(json.dumps({tok: ids[tok] for tok in specials}), encoding="utf-8")
    (path / "merges.txt").write_text("#version: 0.2\n", encoding="utf-8")
    (path / "tokenizer_config.json").write_text(json.dumps({
        "tokenizer_class": "WhisperTokenizer", "bos_token": "<|endoftext|>", "eos_token": "<|endoftext|>",
        "unk_token": "<|endoftext|>", "model_max_length": 1024}), encoding="utf-8")
    gen: dict = {
        "decoder_start_token_id": sot, "eos_token_id": eot, "pad_token_id": eot, "bos_token_id": eot,
        "no_timestamps_token_id": ids["<|notimestamps|>"], "max_length": 448, "is_multilingual": multilingual,
    }
    if multilingual:
        gen["lang_to_id"] = {f"<|{c}|>": ids[f"<|{c}|>"] for c in LANGUAGES[:n_languages]}
        gen["task_to_id"] = {"translate": ids["<|translate|>"], "transcribe": ids["<|transcribe|>"]}
    if alignment_heads is not None:
        gen["alignment_heads"] = [list(pair) for pair in alignment_heads]
    (path / "generation_config.json").write_text(json.dumps(gen, indent=1), encoding="utf-8")
    return ids


_ST_DTYPES = {np.dtype("<f4"): "F32", np.dtype("<f2"): "F16", np.dtype("<i8"): "I64", np.dtype("<i4"): "I32"}


def write_safetensors(path: Path, tensors: Iterable[tuple[str, np.ndarray]], metadata: dict | None = None) -> None:
    """Write ``(name, array)`` pairs as a safetensors file (arrays stored little-endian, C order).

    The header lists each tensor's dtype, shape and ``[begin, end)`` byte offsets relative to the
    data section; it is padded with spaces to a multiple of 8 bytes, as the reference writer does.
    """
    items = [(name, np.ascontiguousarray(arr, dtype=np.asarray(arr).dtype.newbyteorder("<"))) for name, arr in tensors]
    header: dict = {"__metadata__": {str(k): str(v) for k, v in (metadata or {}).items()}}
    offset = 0
    for name, arr in items:
        if arr.dtype not in _ST_DTYPES:
            raise ValueError(f"tensor {name}: dtype {arr.dtype} not supported")
        header[name] = {"dtype": _ST_DTYPES[arr.dtype], "shape": list(arr.shape),
                        "data_offsets": [offset, offset + arr.nbytes]}
        offset += arr.nbytes
    raw = json.dumps(header, separators=(",", ":")).encode("utf-8")
    raw += b" " * (-len(raw) % 8)
    with open(path, "wb") as fh:
        fh.write(struct.pack("<Q", len(raw)))
        fh.write(raw)
        for _, arr in items:
            fh.write(arr.tobytes())


def _whisper_shapes(d: int, layers: int, decoder_layers: int, ffn: int, n_mels: int,
                    n_vocab: int) -> list[tuple[str, tuple[int, ...]]]:
    """Every parameter of WhisperForConditionalGeneration (tied output projection) and its shape."""
    shapes: list[tuple[str, tuple[int, ...]]] = [
        ("model.encoder.conv1.weight", (d, n_mels, 3)), ("model.encoder.conv1.bias", (d,)),
        ("model.encoder.conv2.weight", (d, d, 3)), ("model.encoder.conv2.bias", (d,)),
        ("model.encoder.embed_positions.weight", (1500, d)),
        ("model.decoder.embed_tokens.weight", (n_vocab, d)), ("model.decoder.embed_positions.weight", (448, d)),
    ]

    def attn(prefix: str) -> list[tuple[str, tuple[int, ...]]]:
        out = [(f"{prefix}.{p}_proj.weight", (d, d)) for p in ("q", "k", "v", "out")]
        return out + [(f"{prefix}.{p}_proj.bias", (d,)) for p in ("q", "v", "out")]  # k has no bias

    def block(prefix: str, cross: bool) -> list[tuple[str, tuple[int, ...]]]:
        out = attn(f"{prefix}.self_attn")
        norms = ["self_attn_layer_norm", "final_layer_norm"]
        if cross:
            out += attn(f"{prefix}.encoder_attn")
            norms.append("encoder_attn_layer_norm")
        out += [(f"{prefix}.fc1.weight", (ffn, d)), (f"{prefix}.fc1.bias", (ffn,)),
                (f"{prefix}.fc2.weight", (d, ffn)), (f"{prefix}.fc2.bias", (d,))]
        return out + [(f"{prefix}.{n}.{p}", (d,)) for n in norms for p in ("weight", "bias")]

    for i in range(layers):
        shapes += block(f"model.encoder.layers.{i}", cross=False)
    for i in range(decoder_layers):
        shapes += block(f"model.decoder.layers.{i}", cross=True)
    shapes += [(f"model.{side}.layer_norm.{p}", (d,)) for side in ("encoder", "decoder") for p in ("weight", "bias")]
    return shapes


def write_random_checkpoint(path: Path | str, *, dims: str | None = "base", d_model: int | None = None,
                            layers: int | None = None, heads: int | None = None, ffn: int | None = None,
                            n_mels: int = 80, multilingual: bool = True, seed: int = 0) -> Path:
    """Write a random Whisper checkpoint into ``path`` (created; files overwritten).

    Args:
        path: output directory.
        dims: ``"tiny"``, ``"base"`` or ``"small"`` (:data:`REAL_DIMS`); the explicit sizes below
            override its entries (``dims=None`` needs all four).
        d_model: model width (encoder and decoder alike).
        layers: layers of the encoder and of the decoder.
        heads: attention heads.
        ffn: MLP width.
        n_mels: 80 (or 128 as large-v3).
        multilingual: 51865 tokens (99 languages) or the English-only 51864.
        seed: numpy seed. Weights ~ N(0, 0.02²), biases 0, layer norms weight 1 / bias 0 (the
            transformers initialisation), all float32.

    Returns:
        ``path``.
    """
    spec = dict(REAL_DIMS[dims]) if dims else {}
    for key, value in (("d_model", d_model), ("layers", layers), ("heads", heads), ("ffn", ffn)):
        if value is not None:
            spec[key] = value
    heads_fit = [[i, h] for i, h in spec.get("alignment_heads", []) if i < spec["layers"] and h < spec["heads"]]
    if not heads_fit:  # custom sizes: openai/whisper's default, the last half of the layers, all heads
        half = spec["layers"] // 2
        heads_fit = [[i, h] for i in range(half, spec["layers"]) for h in range(spec["heads"])]
    spec["alignment_heads"] = heads_fit
    d, n_layers, n_heads, n_ffn = spec["d_model"], spec["layers"], spec["heads"], spec["ffn"]
    path = Path(path)
    path.mkdir(parents=True, exist_ok=True)
    ids = write_tokenizer_files(path, multilingual=multilingual, alignment_heads=spec["alignment_heads"])
    n_vocab = len(ids)
    eot, sot = ids["<|endoftext|>"], ids["<|startoftranscript|>"]
    config = {
        "model_type": "whisper", "architectures": ["WhisperForConditionalGeneration"],
        "vocab_size": n_vocab, "num_mel_bins": n_mels, "d_model": d,
        "encoder_layers": n_layers, "decoder_layers": n_layers,
        "encoder_attention_heads": n_heads, "decoder_attention_heads": n_heads,
        "encoder_ffn_dim": n_ffn, "decoder_ffn_dim": n_ffn,
        "max_source_positions": 1500, "max_target_positions": 448,
        "activation_function": "gelu", "scale_embedding": False, "tie_word_embeddings": True,
        "bos_token_id": eot, "eos_token_id": eot, "decoder_start_token_id": sot, "pad_token_id": n_vocab - 1,
        "torch_dtype": "float32",
    }
    (path / "config.json").write_text(json.dumps(config, indent=1), encoding="utf-8")
    rng = np.random.default_rng(seed)

    def tensors():
        for name, shape in _whisper_shapes(d, n_layers, n_layers, n_ffn, n_mels, n_vocab):
            if "layer_norm" in name and name.endswith(".weight"):
                yield name, np.ones(shape, np.float32)
            elif name.endswith(".bias"):
                yield name, np.zeros(shape, np.float32)
            else:
                yield name, rng.standard_normal(shape, dtype=np.float32) * np.float32(_INIT_STD)

    write_safetensors(path / "model.safetensors", tensors(), {"format": "pt"})
    logger.info("wrote a random %s checkpoint (d_model %d, %d layers) to %s", dims or "custom", d, n_layers, path)
    return path
