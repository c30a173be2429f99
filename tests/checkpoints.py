"""Tiny random Whisper checkpoints for tests, made with transformers (nothing is downloaded).

:func:`make_checkpoint` writes what a Hugging Face Whisper repo holds: ``config.json``,
``generation_config.json``, ``model.safetensors`` and tokenizer files. The synthetic but realistic
byte-level vocabulary of the real size (GPT-2 byte symbols, English words with and without the
leading-space marker ``Ġ``, punctuation, digits, subword pieces, filler, then Whisper's special
tokens in their exact order) is the one of :mod:`captioner.models.random_checkpoint`, which the
bench's numpy-only random checkpoints use too, so it exists once.
"""

from __future__ import annotations

from pathlib import Path

from captioner.models.random_checkpoint import (
    LANGUAGES,
    special_tokens,
    text_vocabulary,
    write_tokenizer_files,
)

__all__ = ["LANGUAGES", "make_checkpoint", "special_tokens"]


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
    n_text = len(text_vocabulary(50257 if multilingual else 50256))
    vocab_size = n_text + len(special_tokens(n_languages))
    eot, sot = n_text, n_text + 1  # the special tokens start with <|endoftext|>, <|startoftranscript|>
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

    ids = write_tokenizer_files(path, multilingual=multilingual, n_languages=n_languages,
                                alignment_heads=alignment_heads)
    assert len(ids) == vocab_size
    return path
