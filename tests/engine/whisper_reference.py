"""Transformers' Whisper run on the exact audio length: the reference for the engine's graphs.

``WhisperEncoder.forward`` insists on 3000 mel frames (30 s), so :func:`hf_encode` runs the same
modules (convolutions, positional rows ``0…T/2−1``, layers, final norm) on the exact-length mel; that is
what our bucketed, masked encoder promises to equal on the real frames. :func:`hf_greedy` is greedy
decoding with every id ≥ EOT suppressed, recomputing the full sequence each step (tiny models only).
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
