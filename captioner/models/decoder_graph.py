"""The decoder chunk graph: K greedy decoder steps unrolled in one static graph (ARCHITECTURE.md §5.2).

In:
    ``token`` int64 [1]: the token at position p.
    ``forced`` int64 [K−1]: token to place at position p+s+1 (s = 0…K−2), or −1 for the model's choice.
    ``self_k``, ``self_v`` float32 [L, 1, H, 1+p, hd]: slot 0 is a dummy (always masked with −100),
        slot 1+i holds position i.
    ``cross_k``, ``cross_v`` float32 [L, 1, H, 50·B, hd]: the encoder's outputs.
    ``cross_mask`` float32 [50·B]: 0 for real frames, −100 for padding (added to the scores).
Out (row s belongs to step s, which consumes the token at p+s and predicts position p+s+1):
    ``tokens`` int64 [K]: the model's argmax over ids < EOT (ties → lowest id), even where forced.
    ``token_logit`` float32 [K]: the logit of that argmax. ``eot_logit`` float32 [K]: the EOT logit.
    ``attn_last`` float32 [K, 50·B]: final decoder layer's cross-attention, mean over heads.
    ``attn_align`` float32 [K, 50·B]: mean of the cross-attention of the alignment heads.
    ``new_k``, ``new_v`` float32 [L, 1, H, K, hd]: self-attention K/V of the K consumed tokens.

Step s+1 consumes ``forced[s]`` if it is ≥ 0, else ``tokens[s]``. Self-attention scores are computed
against the input cache and against this chunk's new keys separately and concatenated, so the cache
is never copied. The query scale is folded into the weights, and q/k/v share one fused projection.

The vocabulary projection is a Gemm with ``transB`` on the token embedding itself (Whisper ties
them), so the table is stored once. Measured on ORT 1.32 CPU, one thread, whisper-base's 51865×512
table: Gemm(transB) 7.9 ms per step against 7.0–8.7 ms for MatMul on a stored transposed copy: the
step is memory-bound either way, and the copy would add 106 MB to the pack.
"""

from __future__ import annotations

import numpy as np
from onnx import TensorProto

from captioner.models.checkpoint import Checkpoint
from captioner.models.encoder_graph import MASK_BIAS, qkv_weights
from captioner.models.graph_ops import GraphBuilder, WeightStore, value_info

__all__ = [
    "add_head_sum",
    "alignment_heads_by_layer",
    "build_decoder_chunk",
    "cross_attention_and_mlp",
    "greedy_choice",
    "linear_out",
    "self_attention_qkv",
    "split_per_layer",
]


def split_per_layer(g: GraphBuilder, name: str, n_layers: int, heads: int, length: int, hd: int) -> list[str]:
    """Graph input ``name`` [L, 1, H, length, hd] as one [H, length, hd] tensor per layer."""
    parts = g.op("Split", [name, g.const([1] * n_layers)], outputs=n_layers, axis=0)
    parts = [parts] if n_layers == 1 else parts
    return [g.op("Reshape", [t, g.const([heads, length, hd])]) for t in parts]


def self_attention_qkv(g: GraphBuilder, ckpt: Checkpoint, x: str, pre: str, scale: float,
                       head_split: str) -> tuple[str, str, str]:
    """Layer norm + the fused, query-scaled q/k/v projection of decoder layer ``pre``: [H, 1, hd] each."""
    w, d = ckpt.weights, ckpt.dims.d_model
    h = g.layer_norm(x, f"{pre}.self_attn_layer_norm", w)
    qkv = g.linear(h, f"{pre}.self_attn.qkv", lambda: qkv_weights(w, f"{pre}.self_attn", scale)[0],
                   lambda: qkv_weights(w, f"{pre}.self_attn", scale)[1], 1, d, 3 * d, batch=False)
    q, k, v = (g.op("Reshape", [t, head_split]) for t in g.op("Split", [qkv, g.const([d, d, d])],
                                                               outputs=3, axis=-1))
    return q, k, v


def linear_out(g: GraphBuilder, ckpt: Checkpoint, h: str, name: str, d_in: int, d_out: int) -> str:
    """The linear layer ``name`` (weight + bias from the checkpoint) on a [1, d_in] row."""
    w = ckpt.weights
    return g.linear(h, name, lambda: w[f"{name}.weight"], lambda: w[f"{name}.bias"], 1, d_in, d_out, batch=False)


def cross_attention_and_mlp(g: GraphBuilder, ckpt: Checkpoint, x: str, pre: str, scale: float, cross_kt: str,
                            cross_v: str, head_split: str, row: str) -> tuple[str, str]:
    """The rest of decoder layer ``pre`` after self-attention: cross-attention (with ``cross_mask``)
    and the MLP, each with its residual. Returns (x, cross-attention probabilities [H, 1, T])."""
    w, dims = ckpt.weights, ckpt.dims
    d = dims.d_model
    h = g.layer_norm(x, f"{pre}.encoder_attn_layer_norm", w)
    q = g.linear(h, f"{pre}.encoder_attn.q_proj_scaled",
                 lambda: np.asarray(w[f"{pre}.encoder_attn.q_proj.weight"], np.float32) * np.float32(scale),
                 lambda: np.asarray(w[f"{pre}.encoder_attn.q_proj.bias"], np.float32) * np.float32(scale),
                 1, d, d, batch=False)
    probs = g.op("Softmax", [g.op("Add", [g.op("MatMul", [g.op("Reshape", [q, head_split]), cross_kt]),
                                          "cross_mask"])], axis=-1)  # [H, 1, T]
    o = g.op("Reshape", [g.op("MatMul", [probs, cross_v]), row])
    x = g.op("Add", [x, linear_out(g, ckpt, o, f"{pre}.encoder_attn.out_proj", d, d)])
    h = g.layer_norm(x, f"{pre}.final_layer_norm", w)
    h = g.gelu(linear_out(g, ckpt, h, f"{pre}.fc1", d, dims.decoder_ffn_dim))
    x = g.op("Add", [x, linear_out(g, ckpt, h, f"{pre}.fc2", dims.decoder_ffn_dim, d)])
    return x, probs


def alignment_heads_by_layer(ckpt: Checkpoint) -> dict[int, list[int]]:
    """Decoder layer → its alignment heads."""
    by_layer: dict[int, list[int]] = {}
    for layer, head in ckpt.alignment_heads:
        by_layer.setdefault(layer, []).append(head)
    return by_layer


def add_head_sum(g: GraphBuilder, total: str | None, probs: str, heads: list[int]) -> str:
    """``total`` + the sum over ``heads`` of ``probs`` [H, 1, T] → [1, T]."""
    summed = g.op("ReduceSum", [g.op("Gather", [probs, g.const(heads)], axis=0), g.const([0])], keepdims=0)
    return summed if total is None else g.op("Add", [total, summed])


def greedy_choice(g: GraphBuilder, ckpt: Checkpoint, x: str, proj: str,
                  names: tuple[str, str, str] | None = None) -> tuple[str, str, str]:
    """Final layer norm, logits and the greedy pick below EOT: (argmax [1] int64, its logit [1], EOT logit [1])."""
    eot = ckpt.special.eot
    x = g.layer_norm(x, "decoder.layer_norm", ckpt.weights)
    logits = g.op("Gemm", [x, proj], transB=1)  # [1, V]
    text = g.op("Slice", [logits, g.const([0]), g.const([eot]), g.const([1])])
    kw = [{"outputs": [n]} for n in names] if names else [{}, {}, {}]
    choice = g.op("ArgMax", [text], axis=1, keepdims=0, **kw[0])  # first maximum
    logit = g.op("ReduceMax", [text, g.const([1])], keepdims=0, **kw[1])
    eot_logit = g.op("Reshape", [g.op("Slice", [logits, g.const([eot]), g.const([eot + 1]), g.const([1])]),
                                 g.const([1])], **kw[2])
    return choice, logit, eot_logit


def build_decoder_chunk(ckpt: Checkpoint, store: WeightStore, bucket: int, start: int, size: int, linear: str):
    """The ModelProto of the chunk graph (bucket seconds, start position p, size K ≥ 1).

    Packs use K ≥ 2 (BuildOptions); K = 1 (``forced`` is then an empty, unused input) is the
    one-graph-per-token strategy that ``captioner bench`` compares against.
    """
    dims, w = ckpt.dims, ckpt.weights
    d, heads, hd, n_layers = dims.d_model, dims.decoder_heads, dims.head_dim, dims.decoder_layers
    frames = 50 * bucket
    p, k_steps = start, size
    if k_steps < 1:
        raise ValueError("a decoder chunk runs at least 1 step")
    if p + k_steps > dims.n_text_ctx:
        raise ValueError(f"chunk ({p}, {k_steps}) exceeds the model's {dims.n_text_ctx} positions")
    scale = float(hd) ** -0.5
    g = GraphBuilder(f"decoder_{bucket}s_p{p}_k{k_steps}", store, linear)

    def wt(name: str):
        return lambda: w[name]

    embed = g.weight("decoder.embed_tokens.weight", wt("decoder.embed_tokens.weight"))
    if ckpt.tied_output:
        proj = embed
    else:
        proj = g.weight("proj_out.weight", wt("proj_out.weight"))
    positions = g.weight("decoder.embed_positions.weight", wt("decoder.embed_positions.weight"))

    per_layer = {name: split_per_layer(g, name, n_layers, heads, 1 + p if name.startswith("self") else frames, hd)
                 for name in ("self_k", "self_v", "cross_k", "cross_v")}  # [H, len, hd] per layer
    past_kt = [g.op("Transpose", [t], perm=[0, 2, 1]) for t in per_layer["self_k"]]  # [H, hd, 1+p]
    cross_kt = [g.op("Transpose", [t], perm=[0, 2, 1]) for t in per_layer["cross_k"]]  # [H, hd, T]
    align_by_layer = alignment_heads_by_layer(ckpt)
    n_align = len(ckpt.alignment_heads)

    new_k: list[list[str]] = [[] for _ in range(n_layers)]
    new_v: list[list[str]] = [[] for _ in range(n_layers)]
    outs: dict[str, list[str]] = {"tokens": [], "token_logit": [], "eot_logit": [], "attn_last": [], "attn_align": []}
    token = "token"
    head_split = g.const([heads, 1, hd])
    row = g.const([1, d])
    for s in range(k_steps):
        x = g.op("Add", [g.op("Gather", [embed, token], axis=0),
                         g.op("Gather", [positions, g.const([p + s])], axis=0)])  # [1, d]
        self_bias = np.zeros(1 + p + s + 1, np.float32)
        self_bias[0] = MASK_BIAS  # the dummy slot
        self_bias_c = g.const(self_bias, np.float32)
        align_sum = None
        for i in range(n_layers):
            pre = f"decoder.layers.{i}"
            q, k, v = self_attention_qkv(g, ckpt, x, pre, scale, head_split)
            new_k[i].append(k)
            new_v[i].append(v)
            k_cat = k if s == 0 else g.op("Concat", new_k[i], axis=1)  # [H, s+1, hd]
            v_cat = v if s == 0 else g.op("Concat", new_v[i], axis=1)
            scores = g.op("Concat", [g.op("MatMul", [q, past_kt[i]]),
                                     g.op("MatMul", [q, g.op("Transpose", [k_cat], perm=[0, 2, 1])])], axis=-1)
            probs = g.op("Softmax", [g.op("Add", [scores, self_bias_c])], axis=-1)
            p_past, p_new = g.op("Split", [probs, g.const([1 + p, s + 1])], outputs=2, axis=-1)
            o = g.op("Add", [g.op("MatMul", [p_past, per_layer["self_v"][i]]), g.op("MatMul", [p_new, v_cat])])
            x = g.op("Add", [x, linear_out(g, ckpt, g.op("Reshape", [o, row]), f"{pre}.self_attn.out_proj", d, d)])
            x, probs = cross_attention_and_mlp(g, ckpt, x, pre, scale, cross_kt[i], per_layer["cross_v"][i],
                                               head_split, row)
            if i == n_layers - 1:
                outs["attn_last"].append(g.op("ReduceMean", [probs, g.const([0])], keepdims=0))  # [1, T]
            if i in align_by_layer:
                align_sum = add_head_sum(g, align_sum, probs, align_by_layer[i])
        outs["attn_align"].append(g.op("Mul", [align_sum, g.const([1.0 / n_align], np.float32)]))

        choice, logit, eot_logit = greedy_choice(g, ckpt, x, proj)
        outs["tokens"].append(choice)
        outs["token_logit"].append(logit)
        outs["eot_logit"].append(eot_logit)
        if s < k_steps - 1:
            forced = g.op("Slice", ["forced", g.const([s]), g.const([s + 1])])
            token = g.op("Where", [g.op("GreaterOrEqual", [forced, g.const([0])]), forced, choice])

    for name in ("tokens", "token_logit", "eot_logit", "attn_last", "attn_align"):
        g.op("Concat", outs[name], outputs=[name], axis=0)
    for name, per in (("new_k", new_k), ("new_v", new_v)):
        layers = [g.op("Reshape", [g.op("Concat", steps, axis=1), g.const([1, 1, heads, k_steps, hd])])
                  for steps in per]
        g.op("Concat", layers, outputs=[name], axis=0)

    cache = [n_layers, 1, heads, 1 + p, hd]
    cross = [n_layers, 1, heads, frames, hd]
    f32, i64 = TensorProto.FLOAT, TensorProto.INT64
    return g.model(
        [value_info("token", i64, [1]), value_info("forced", i64, [k_steps - 1]),
         value_info("self_k", f32, cache), value_info("self_v", f32, cache),
         value_info("cross_k", f32, cross), value_info("cross_v", f32, cross),
         value_info("cross_mask", f32, [frames])],
        [value_info("tokens", i64, [k_steps]), value_info("token_logit", f32, [k_steps]),
         value_info("eot_logit", f32, [k_steps]), value_info("attn_last", f32, [k_steps, frames]),
         value_info("attn_align", f32, [k_steps, frames]),
         value_info("new_k", f32, [n_layers, 1, heads, k_steps, hd]),
         value_info("new_v", f32, [n_layers, 1, heads, k_steps, hd])],
    )
