"""Tiny random Whisper checkpoints for tests, made with transformers (nothing is downloaded).

:func:`make_checkpoint` writes what a Hugging Face Whisper repo holds: ``config.json``,
``generation_config.json``, ``model.safetensors`` and tokenizer files with a synthetic but realistic
byte-level vocabulary of the real size (GPT-2 byte symbols, English words with and without the
leading-space marker ``Ġ``, punctuation, digits, subword pieces, filler, then Whisper's special
tokens in their exact order), so token ids and classes behave as in a real model.
"""

from __future__ import annotations

import json
from pathlib import Path

from captioner.models.checkpoint import bytes_to_unicode

__all__ = ["LANGUAGES", "make_checkpoint", "special_tokens"]

LANGUAGES = ["en", "zh", "de", "es", "ru", "ko", "fr", "ja", "pt", "tr", "pl", "ca", "nl", "ar", "sv", "it", "id", "hi", "fi", "vi", "he", "uk", "el", "ms", "cs", "ro", "da", "hu", "ta", "no", "th", "ur", "hr", "bg", "lt", "la", "mi", "ml", "cy", "sk", "te", "fa", "lv", "bn", "sr", "az", "sl", "kn", "et", "mk", "br", "eu", "is", "hy", "ne", "mn", "bs", "kk", "sq", "sw", "gl", "mr", "pa", "si", "km", "sn", "yo", "so", "af", "oc", "ka", "be", "tg", "sd", "gu", "am", "yi", "lo", "uz", "fo", "ht", "ps", "tk", "nn", "mt", "sa", "lb", "my", "bo", "tl", "mg", "as", "tt", "haw", "ln", "ha", "ba", "jw", "su", "yue"]

WORDS = ["the", "be", "to", "of", "and", "a", "in", "that", "have", "it", "for", "not", "on", "with", "he", "as", "you", "do", "at", "this", "but", "his", "by", "from", "they", "we", "say", "her", "she", "or", "an", "will", "my", "one", "all", "would", "there", "their", "what", "so", "up", "out", "if", "about", "who", "get", "which", "go", "me", "when", "make", "can", "like", "time", "no", "just", "him", "know", "take", "people", "into", "year", "your", "good", "some", "could", "them", "see", "other", "than", "then", "now", "look", "only", "come", "its", "over", "think", "also", "back", "after", "use", "two", "how", "our", "work", "first", "well", "way", "even", "new", "want", "because", "any", "these", "give", "day", "most", "us", "hello", "world", "caption", "speech", "model", "audio", "voice", "music", "meeting", "video", "window", "room", "quick", "brown", "fox", "jumps", "lazy", "dog", "morning", "evening", "question", "answer", "number", "minute", "second", "hour", "today"]
PUNCT = [".", ",", "?", "!", "...", " -", ":", ";", "'", '"', "(", ")", "'s", "'t", "'re", "'ll", "-", " ("]
PIECES = ["ing", "ed", "er", "ly", "tion", "ment", "ness", "able", "al", "ize", "ous", "ful", "less", "est", "ity", "ism", "ist", "ance", "ence", "un", "re", "pre", "dis"]


def special_tokens(n_languages: int) -> list[str]:
    """Whisper's special tokens after the text vocabulary, in the exact order of the real vocabulary."""
    langs = [f"<|{code}|>" for code in LANGUAGES[:n_languages]]
    stamps = [f"<|{i * 0.02:.2f}|>" for i in range(1501)]
    return ["<|endoftext|>", "<|startoftranscript|>", *langs, "<|translate|>", "<|transcribe|>",
            "<|startoflm|>", "<|startofprev|>", "<|nocaptions|>", "<|notimestamps|>", *stamps]


def _text_vocabulary(size: int) -> list[str]:
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


def make_checkpoint(
    path: Path | str,
    *,
    multilingual: bool = True,
    n_mels: int = 80,
    d_model: int = 64,
    layers: int = 2,
    heads: int = 4,
    ffn: int = 128,
    seed: int = 0,
    n_languages: int = 99,
    alignment_heads: list[tuple[int, int]] | None = ((1, 0), (1, 2)),
    dtype: str = "float32",
    decoder_layers: int | None = None,
) -> Path:
    """Write a tiny random WhisperForConditionalGeneration checkpoint into ``path`` (created).

    Args:
        path: output directory.
        multilingual: 50257 text tokens + specials (51865 with 99 languages, 51866 with 100);
            English-only has 50256 text tokens (51864).
        n_mels: 80 or 128 mel bins.
        d_model, layers, heads, ffn: model size (encoder and decoder alike).
        decoder_layers: decoder depth when it differs from ``layers`` (large-v3-turbo: 32 and 4).
        seed: torch seed of the random weights.
        n_languages: 99 or 100 (large-v3 adds ``yue``).
        alignment_heads: written to generation_config.json; None leaves them out (fallback path).
        dtype: ``"float32"``, ``"float16"`` or ``"bfloat16"`` for the saved weights.

    Returns:
        ``path``.
    """
    import torch
    from transformers import WhisperConfig, WhisperForConditionalGeneration

    path = Path(path)
    path.mkdir(parents=True, exist_ok=True)
    text = _text_vocabulary(50257 if multilingual else 50256)
    specials = special_tokens(n_languages)
    vocab_size = len(text) + len(specials)
    ids = {tok: i for i, tok in enumerate(text + specials)}
    eot, sot = ids["<|endoftext|>"], ids["<|startoftranscript|>"]
    config = WhisperConfig(
        vocab_size=vocab_size, num_mel_bins=n_mels, d_model=d_model,
        encoder_layers=layers, decoder_layers=decoder_layers or layers, encoder_attention_heads=heads, decoder_attention_heads=heads,
        encoder_ffn_dim=ffn, decoder_ffn_dim=ffn, max_source_positions=1500, max_target_positions=448,
        bos_token_id=eot, eos_token_id=eot, decoder_start_token_id=sot,
        # Whisper's pad id is EOT, whose embedding row padding_idx would zero; a random model then has
        # an EOT logit of exactly 0. Pad with the last timestamp instead so EOT behaves like a token.
        pad_token_id=vocab_size - 1,
    )
    torch.manual_seed(seed)
    model = WhisperForConditionalGeneration(config).eval()
    model.to(getattr(torch, dtype))
    model.save_pretrained(path, safe_serialization=True)

    (path / "vocab.json").write_text(json.dumps(dict(zip(text, range(len(text)), strict=True))), encoding="utf-8")
    (path / "added_tokens.json").write_text(
        json.dumps({tok: ids[tok] for tok in specials}), encoding="utf-8")
    (path / "merges.txt").write_text("#version: 0.2\n", encoding="utf-8")
    (path / "tokenizer_config.json").write_text(json.dumps({
        "tokenizer_class": "WhisperTokenizer", "bos_token": "<|endoftext|>", "eos_token": "<|endoftext|>",
        "unk_token": "<|endoftext|>", "model_max_length": 1024}), encoding="utf-8")
    gen = {
        "decoder_start_token_id": sot, "eos_token_id": eot, "pad_token_id": eot, "bos_token_id": eot,
        "no_timestamps_token_id": ids["<|notimestamps|>"], "max_length": 448, "is_multilingual": multilingual,
    }
    if multilingual:
        gen["lang_to_id"] = {f"<|{c}|>": ids[f"<|{c}|>"] for c in LANGUAGES[:n_languages]}
        gen["task_to_id"] = {"translate": ids["<|translate|>"], "transcribe": ids["<|transcribe|>"]}
    if alignment_heads is not None:
        gen["alignment_heads"] = [list(pair) for pair in alignment_heads]
    (path / "generation_config.json").write_text(json.dumps(gen, indent=1), encoding="utf-8")
    return path
