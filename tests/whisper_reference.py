"""Transformers' Whisper run on the exact audio length: the one reference for the pack's graphs.

``WhisperEncoder.forward`` insists on 3000 mel frames (30 s), so :func:`hf_encode` runs the same
modules (convolutions, positional rows ``0…T/2−1``, layers, final norm) on the exact-length mel; that is
what our bucketed, masked encoder promises to equal on the real frames. :func:`hf_greedy` is greedy
decoding with every id ≥ EOT suppressed, recomputing the full sequence each step (tiny models only).
:class:`Reference` wraps the same model for the graph-level tests (cross/self K and V, logits,
attention, greedy with transformers' own KV cache). Used by tests/engine and tests/models alike.
"""

from __future__ import annotations

import numpy as np
import torch
from torch import nn


@torch.no_grad()
def hf_encode(model, mel: np.ndarray) -> torch.Tensor:
    """Encoder hidden states [1, T/2, d_model] for a mel float32 [n_mels, T] (T even, no padding)."""
    enc = model.model.encoder
    x = torch.from_numpy(np.ascontiguousarray(mel))[None]
    x = nn.functional.gelu(enc.conv1(x))
    x = nn.functional.gelu(enc.conv2(x)).permute(0, 2, 1)
    x = x + enc.embed_positions.weight[: x.shape[1]]
    for layer in enc.layers:
        x = layer(x, None)
        x = x[0] if isinstance(x, tuple) else x
    return enc.layer_norm(x)


@torch.no_grad()
def hf_greedy(model, mel: np.ndarray, prompt: list[int], last_position: int, eot: int) -> list[int]:
    """Greedy ids for positions ``len(prompt) … last_position`` (ids ≥ ``eot`` never chosen)."""
    hidden = hf_encode(model, mel)
    ids = list(prompt)
    while len(ids) <= last_position:
        out = model.model.decoder(input_ids=torch.tensor([ids]), encoder_hidden_states=hidden)
        logits = model.proj_out(out.last_hidden_state[0, -1])
        ids.append(int(torch.argmax(logits[:eot])))
    return ids[len(prompt):]


def load_reference(checkpoint) -> object:
    """The checkpoint as a float32 ``WhisperForConditionalGeneration`` (eager attention, so it can
    return attention weights) in eval mode."""
    from transformers import WhisperForConditionalGeneration

    return WhisperForConditionalGeneration.from_pretrained(
        checkpoint, dtype=torch.float32, attn_implementation="eager").eval()


class Reference:
    """:func:`load_reference` of ``checkpoint`` with the graph-level views the model tests compare against."""

    def __init__(self, checkpoint) -> None:
        self.model = load_reference(checkpoint)
        self.eot = int(self.model.config.eos_token_id)

    def encode(self, mel: np.ndarray) -> torch.Tensor:
        """Encoder output [1, n, d] of exactly the mel frames given ([1, n_mels, 2n])."""
        return hf_encode(self.model, mel[0])

    @torch.no_grad()
    def cross_kv(self, enc_out: torch.Tensor) -> tuple[np.ndarray, np.ndarray]:
        """Every decoder layer's encoder_attn k_proj/v_proj of ``enc_out``, laid out as the pack's encoder
        returns them (frames last): [L, 1, H, hd, n] each."""
        ks, vs = [], []
        for layer in self.model.model.decoder.layers:
            attn = layer.encoder_attn
            shape = (1, enc_out.shape[1], attn.num_heads, attn.head_dim)
            ks.append(attn.k_proj(enc_out).reshape(shape).permute(0, 2, 3, 1).numpy())
            vs.append(attn.v_proj(enc_out).reshape(shape).permute(0, 2, 3, 1).numpy())
        return np.stack(ks), np.stack(vs)

    @torch.no_grad()
    def decode(self, enc_out: torch.Tensor, tokens: list[int]) -> tuple[np.ndarray, list[np.ndarray]]:
        """Logits [S, V] and per-layer cross-attention [H, S, n] for the token sequence."""
        out = self.model(decoder_input_ids=torch.tensor([tokens]), encoder_outputs=(enc_out,),
                         output_attentions=True, use_cache=False)
        return out.logits[0].numpy(), [a[0].numpy() for a in out.cross_attentions]

    @torch.no_grad()
    def self_kv(self, enc_out: torch.Tensor, tokens: list[int]) -> tuple[np.ndarray, np.ndarray]:
        """Self-attention keys and values of every decoder layer for ``tokens``: [L, 1, H, S, hd] each."""
        out = self.model(decoder_input_ids=torch.tensor([tokens]), encoder_outputs=(enc_out,),
                         output_hidden_states=True, use_cache=False)
        ks, vs = [], []
        for layer, hidden in zip(self.model.model.decoder.layers, out.decoder_hidden_states, strict=False):
            attn = layer.self_attn
            h = layer.self_attn_layer_norm(hidden)
            shape = (1, len(tokens), attn.num_heads, attn.head_dim)
            ks.append(attn.k_proj(h).reshape(shape).permute(0, 2, 1, 3).numpy())
            vs.append(attn.v_proj(h).reshape(shape).permute(0, 2, 1, 3).numpy())
        return np.stack(ks), np.stack(vs)

    @torch.no_grad()
    def greedy(self, enc_out: torch.Tensor, prompt: list[int], positions: int) -> list[int]:
        """Tokens at positions 0…positions: the prompt, then argmax over ids < EOT at each free position.

        The prompt is run as one prefill; each further token is one cached step (transformers' own KV cache,
        passed back as ``cache``: the name since transformers 5.24, where ``past_key_values`` is deprecated).
        """
        seq = list(prompt)
        out = self.model(decoder_input_ids=torch.tensor([seq]), encoder_outputs=(enc_out,), use_cache=True)
        while len(seq) <= positions:
            seq.append(int(np.argmax(out.logits[0, -1, : self.eot].numpy())))
            if len(seq) <= positions:
                out = self.model(decoder_input_ids=torch.tensor([seq[-1:]]), encoder_outputs=(enc_out,),
                                 cache=out.cache, use_cache=True)
        return seq
