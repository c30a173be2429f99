"""Qualcomm AI Hub's decoder design, for comparison: one step per call over a fixed-length self-KV cache.

AI Hub's Whisper keeps a static self-attention cache of M = 200 positions; every call runs one
decoder step, attends over all M slots with a mask that opens the slots filled so far, and takes the
position id as an input (NPUSPER.md §14.2, paper §3.2). Its self-attention cost per step is that of
M positions whatever the step, against ``1 + p`` in our chunk graphs (paper Eq. 5).

In:
    ``token`` int64 [1]: the token consumed at this step. ``position`` int64 [1]: its position p.
    ``self_k``, ``self_v`` float32 [L, 1, H, M, hd]: slot i holds position i (slots ≥ p unused).
    ``self_mask`` float32 [M]: 0 for the slots < p, −100 for the others.
    ``cross_k``, ``cross_v`` float32 [L, 1, H, 50·B, hd]; ``cross_mask`` float32 [50·B].
Out (as one step of a chunk graph): ``tokens``, ``token_logit``, ``eot_logit`` [1];
    ``attn_last``, ``attn_align`` [1, 50·B]; ``new_k``, ``new_v`` [L, 1, H, 1, hd], which the host
    writes into slot p (AI Hub's graph returns the whole shifted cache instead; returning only the
    new slot is the cheaper variant, so the comparison does not handicap this design).

The layers, weight names and weight layouts are those of the chunk graphs
(:mod:`captioner.models.decoder_graph`), so a graph built with the pack's weight store reads the
pack's own ``weights.bin``.
"""

from __future__ import annotations

import numpy as np
from onnx import TensorProto

from captioner.models.checkpoint import Checkpoint
from captioner.models.decoder_graph import (
    add_head_sum,
    alignment_heads_by_layer,
    cross_attention_and_mlp,
    greedy_choice,
    linear_out,
    self_attention_qkv,
    split_per_layer,
)
from captioner.models.graph_ops import GraphBuilder, WeightStore, value_info

__all__ = ["FIXED_POSITIONS", "build_fixed_decoder"]

FIXED_POSITIONS = 200  # AI Hub's maximum decode length M


def build_fixed_decoder(ckpt: Checkpoint, store: WeightStore, bucket: int, linear: str,
                        positions: int = FIXED_POSITIONS):
    """The ModelProto of the fixed-cache single-step decoder for ``bucket`` seconds."""
    dims, w = ckpt.dims, ckpt.weights
    d, heads, hd, n_layers = dims.d_model, dims.decoder_heads, dims.head_dim, dims.decoder_layers
    frames, m = 50 * bucket, positions
    if m > dims.n_text_ctx:
        raise ValueError(f"{m} cache positions exceed the model's {dims.n_text_ctx}")
    scale = float(hd) ** -0.5
    g = GraphBuilder(f"decoder_fixed{m}_{bucket}s", store, linear)

    def wt(name: str):
        return lambda: w[name]

    embed = g.weight("decoder.embed_tokens.weight", wt("decoder.embed_tokens.weight"))
    proj = embed if ckpt.tied_output else g.weight("proj_out.weight", wt("proj_out.weight"))
    pos_table = g.weight("decoder.embed_positions.weight", wt("decoder.embed_positions.weight"))

    per_layer = {name: split_per_layer(g, name, n_layers, heads, m if name.startswith("self") else frames, hd)
                 for name in ("self_k", "self_v", "cross_k", "cross_v")}  # [H, len, hd] per layer
    self_kt = [g.op("Transpose", [t], perm=[0, 2, 1]) for t in per_layer["self_k"]]  # [H, hd, M]
    cross_kt = [g.op("Transpose", [t], perm=[0, 2, 1]) for t in per_layer["cross_k"]]
    bias = g.op("Concat", ["self_mask", g.const([0.0], np.float32)], axis=0)  # [M + 1]: cache slots, then self
    align_by_layer = alignment_heads_by_layer(ckpt)

    head_split, row = g.const([heads, 1, hd]), g.const([1, d])
    x = g.op("Add", [g.op("Gather", [embed, "token"], axis=0), g.op("Gather", [pos_table, "position"], axis=0)])
    new_k, new_v, align_sum, attn_last = [], [], None, None
    for i in range(n_layers):
        pre = f"decoder.layers.{i}"
        q, k, v = self_attention_qkv(g, ckpt, x, pre, scale, head_split)
        new_k.append(k)
        new_v.append(v)
        scores = g.op("Concat", [g.op("MatMul", [q, self_kt[i]]),
                                 g.op("MatMul", [q, g.op("Transpose", [k], perm=[0, 2, 1])])], axis=-1)
        probs = g.op("Softmax", [g.op("Add", [scores, bias])], axis=-1)  # [H, 1, M + 1]
        p_cache, p_self = g.op("Split", [probs, g.const([m, 1])], outputs=2, axis=-1)
        o = g.op("Add", [g.op("MatMul", [p_cache, per_layer["self_v"][i]]), g.op("Mul", [p_self, v])])
        x = g.op("Add", [x, linear_out(g, ckpt, g.op("Reshape", [o, row]), f"{pre}.self_attn.out_proj", d, d)])
        x, probs = cross_attention_and_mlp(g, ckpt, x, pre, scale, cross_kt[i], per_layer["cross_v"][i],
                                           head_split, row)
        if i == n_layers - 1:
            attn_last = g.op("ReduceMean", [probs, g.const([0])], keepdims=0, outputs=["attn_last"])
        if i in align_by_layer:
            align_sum = add_head_sum(g, align_sum, probs, align_by_layer[i])
    assert attn_last is not None and align_sum is not None
    g.op("Mul", [align_sum, g.const([1.0 / len(ckpt.alignment_heads)], np.float32)], outputs=["attn_align"])
    greedy_choice(g, ckpt, x, proj, names=("tokens", "token_logit", "eot_logit"))
    for name, per in (("new_k", new_k), ("new_v", new_v)):
        layers = [g.op("Reshape", [t, g.const([1, 1, heads, 1, hd])]) for t in per]
        g.op("Concat", layers, outputs=[name], axis=0)

    cache, cross = [n_layers, 1, heads, m, hd], [n_layers, 1, heads, frames, hd]
    f32, i64 = TensorProto.FLOAT, TensorProto.INT64
    return g.model(
        [value_info("token", i64, [1]), value_info("position", i64, [1]),
         value_info("self_k", f32, cache), value_info("self_v", f32, cache), value_info("self_mask", f32, [m]),
         value_info("cross_k", f32, cross), value_info("cross_v", f32, cross), value_info("cross_mask", f32, [frames])],
        [value_info("tokens", i64, [1]), value_info("token_logit", f32, [1]), value_info("eot_logit", f32, [1]),
         value_info("attn_last", f32, [1, frames]), value_info("attn_align", f32, [1, frames]),
         value_info("new_k", f32, [n_layers, 1, heads, 1, hd]), value_info("new_v", f32, [n_layers, 1, heads, 1, hd])],
    )
