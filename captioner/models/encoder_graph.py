"""The encoder graph of one bucket (ARCHITECTURE.md §5.1).

In: ``mel`` float32 [1, n_mels, 100·B] (2·n_frames real mel frames, then 0.0 padding in the
normalised log-mel domain), ``n_frames`` int64 [1] (real encoder frames). Out: ``cross_k``,
``cross_v`` float32 [decoder_layers, 1, heads, head_dim, 50·B], every decoder layer's cross-attention
keys and values of the encoder output (values with their bias; keys have none in Whisper),
*transposed*: frames last. That is the layout the decoder's products want (q·Kᵀ takes Kᵀ; the
values are applied as Vᵀ·pᵀ), and it falls out of one product ``W·xᵀ`` per kind with no transpose
of the [L·d, T] result, so neither the encoder (two copies of 18 MB at 30 s for whisper-base) nor
every decoder chunk (a copy of each layer's keys per dispatch) moves them again.

Masking makes the real frames' outputs equal the encoder run on exactly the real length, whatever
the padding holds: the mel input and conv1's output are zeroed beyond 2·n_frames (so both
convolutions see the same zero padding as the exact run), and the
self-attention adds −100 to the scores of keys at or beyond n_frames (finite, for fp16 NPUs).
The attention scale head_dim^-0.5 is folded into the query weights at build time.

Buckets longer than ``LONG_FRAMES`` (the 10 s and 30 s graphs) run in blocks of frames, the same arithmetic
with smaller intermediates: self-attention in blocks of ``QUERY_BLOCK`` queries and the MLP in blocks
of ``ROW_BLOCK`` rows. The full score matrix of the 30 s graph is [8, 1500, 1500] floats, 72 MB for
whisper-base, and the add, softmax and product each held one, so one run peaked ~150 MB above the
rest of the process; the MLP's [1500, 2048] hidden activations are 12 MB per op. Measured on
whisper-base (one run's RSS peak above the process before it, its 37 MB of outputs included):
~180 MB unblocked, ~90 MB with 300-query blocks, ~55 MB with 150-query attention blocks and 300-row
MLP blocks, at the same speed (690–720 ms). An NPU's on-chip memory prefers small tensors too.
The short buckets (≤ 6 s, 300 frames) run unblocked.

With ``fused_attention`` (``models build --attention fused``) the self-attention is ONNX Runtime's
``com.microsoft`` ``MultiHeadAttention`` kernel instead, over keys and values cut to the real
frames: the same result without a mask (the masked keys' weights, e^-100 of the rest, are zero in
float32 too) and no attention computed against the padding, but the whole score matrix held at
once (one 30 s run's peak 103 → 164 MB above the process). whisper-base, int8 layers, 2 threads of an AMD EPYC with VNNI, a 30 s run:
394 → 349 ms with every frame real, 382 → 254 ms with 12 s of them (the self-attention 243 → 160 ms
of the 30 s run in ORT's profiler). Not the default: the int8 rows after it round otherwise, and the
live words moved for the worse on both corpora (``BuildOptions.attention``). QNN has no such kernel.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

import numpy as np
from onnx import TensorProto

from captioner.models.checkpoint import Checkpoint
from captioner.models.graph_ops import MS_DOMAIN, GraphBuilder, WeightStore, value_info

__all__ = ["MASK_BIAS", "build_encoder", "fused_qkv", "qkv_weights"]

MASK_BIAS = -100.0  # additive attention bias of masked positions (paper's NPU choice)
LONG_FRAMES = 300  # buckets with more encoder frames than this run in blocks (the 10 s and 30 s graphs)
QUERY_BLOCK = 150  # query frames per self-attention block of a long bucket
ROW_BLOCK = 300  # frames per MLP block of a long bucket


def fused_qkv(w: Mapping[str, np.ndarray], prefix: str, scale: float) -> tuple[Callable[[], np.ndarray],
                                                                               Callable[[], np.ndarray]]:
    """:func:`qkv_weights`' weight and bias as the lazy makers ``GraphBuilder.linear`` takes."""
    return (lambda: qkv_weights(w, prefix, scale)[0]), (lambda: qkv_weights(w, prefix, scale)[1])


def qkv_weights(w: Mapping[str, np.ndarray], prefix: str, scale: float) -> tuple[np.ndarray, np.ndarray]:
    """Fused [3d, d] weight and [3d] bias of q (pre-multiplied by ``scale``), k (no bias) and v.

    ``prefix`` names the attention block, e.g. ``encoder.layers.0.self_attn``.
    """
    def f32(name: str) -> np.ndarray:
        return np.asarray(w[name], dtype=np.float32)  # fp16/bf16 checkpoints: scale in fp32

    d = w[f"{prefix}.q_proj.weight"].shape[0]
    weight = np.concatenate([f32(f"{prefix}.q_proj.weight") * np.float32(scale), f32(f"{prefix}.k_proj.weight"),
                             f32(f"{prefix}.v_proj.weight")])
    k_bias = f32(f"{prefix}.k_proj.bias") if f"{prefix}.k_proj.bias" in w else np.zeros(d, np.float32)
    bias = np.concatenate([f32(f"{prefix}.q_proj.bias") * np.float32(scale), k_bias, f32(f"{prefix}.v_proj.bias")])
    return weight, bias


def _blocks(frames: int, block: int) -> list[int]:
    """Sizes of the blocks ``frames`` is computed in: one block unless the bucket is long."""
    if frames <= LONG_FRAMES:
        return [frames]
    return [min(block, frames - start) for start in range(0, frames, block)]


def _key_bias(g: GraphBuilder, n_real: str, frames: int) -> str:
    """−100 on the keys at or beyond ``n_real`` frames (float32 [1]), 0 elsewhere: [T], broadcast
    over [heads, T(query), T(key)] by the standard attention."""
    frame_pos = g.const(np.arange(frames), np.float32)
    return g.op("Mul", [g.op("Cast", [g.op("Not", [g.op("Less", [frame_pos, n_real])])], to=TensorProto.FLOAT),
                        g.const([MASK_BIAS], np.float32)])


def _blocked_attention(g: GraphBuilder, q: str, k: str, v: str, key_bias: str, heads: int, hd: int,
                       frames: int, d: int) -> str:
    """Self-attention of ``q``, ``k``, ``v`` [1, T, d] as standard ops: [1, T, d] before the output
    projection; the keys at or beyond n_frames masked by ``key_bias``, a long bucket's queries in
    blocks of :data:`QUERY_BLOCK` (module docstring)."""
    split_heads = g.const([frames, heads, hd])
    q = g.op("Transpose", [g.op("Reshape", [q, split_heads])], perm=[1, 0, 2])  # [H, T, hd]
    kt = g.op("Transpose", [g.op("Reshape", [k, split_heads])], perm=[1, 2, 0])  # [H, hd, T]
    v = g.op("Transpose", [g.op("Reshape", [v, split_heads])], perm=[1, 0, 2])
    blocks = _blocks(frames, QUERY_BLOCK)
    q_blocks = [q] if len(blocks) == 1 else g.op("Split", [q, g.const(blocks)], outputs=len(blocks), axis=1)
    o_blocks = [g.op("MatMul", [g.op("Softmax", [g.op("Add", [g.op("MatMul", [qb, kt]), key_bias])], axis=-1), v])
                for qb in q_blocks]  # [H, block, hd] each
    o = o_blocks[0] if len(blocks) == 1 else g.op("Concat", o_blocks, axis=1)
    o = g.op("Transpose", [o], perm=[1, 0, 2])  # [T, H, hd]
    return g.op("Reshape", [o, g.const([1, frames, d])])


def _fused_attention(g: GraphBuilder, q: str, k: str, v: str, heads: int) -> str:
    """Self-attention of ``q``, ``k``, ``v`` [1, T, d] as ONNX Runtime's ``MultiHeadAttention``:
    [1, T, d] before the output projection. The keys and values are cut to the first n_frames
    frames (what the mask leaves), so the kernel needs no mask."""
    real = [g.const([0]), "n_frames", g.const([1])]
    k, v = (g.op("Slice", [t, *real]) for t in (k, v))  # [1, n_frames, d]
    return g.op("MultiHeadAttention", [q, k, v], domain=MS_DOMAIN, num_heads=heads, scale=1.0)


def build_encoder(ckpt: Checkpoint, store: WeightStore, bucket: int, linear: str, int8: bool = False,
                  fused_attention: bool = False):
    """The encoder ModelProto for ``bucket`` seconds (see module docstring for the I/O contract);
    ``int8``: the layers' linear weights in int8 (``GraphBuilder.linear``); ``fused_attention``: the
    self-attention as ONNX Runtime's fused kernel over the real frames' keys (module docstring)."""
    dims, w = ckpt.dims, ckpt.weights
    d, heads, hd = dims.d_model, dims.encoder_heads, dims.head_dim
    n_mel_frames, frames = 100 * bucket, 50 * bucket
    if frames > dims.n_audio_ctx:
        raise ValueError(f"bucket {bucket} s exceeds the model's {dims.n_audio_ctx // 50} s window")
    scale = float(hd) ** -0.5
    g = GraphBuilder(f"encoder_{bucket}s", store, linear, int8)

    def wt(name: str):
        return lambda: w[name]

    # conv1 + GELU, zeroed beyond the real mel frames
    n_real = g.op("Cast", ["n_frames"], to=TensorProto.FLOAT)
    mel_pos = g.const(np.arange(n_mel_frames), np.float32)
    keep_mel = g.op("Cast", [g.op("Less", [mel_pos, g.op("Mul", [n_real, g.const([2.0], np.float32)])])],
                    to=TensorProto.FLOAT)
    mel = g.op("Mul", ["mel", keep_mel])  # whatever the host padded with, the graph sees 0.0
    c1 = g.op("Conv", [mel, g.weight("encoder.conv1.weight", wt("encoder.conv1.weight")),
                       g.weight("encoder.conv1.bias", wt("encoder.conv1.bias"))], pads=[1, 1], kernel_shape=[3])
    c1 = g.op("Mul", [g.gelu(c1), keep_mel])
    c2 = g.op("Conv", [c1, g.weight("encoder.conv2.weight", wt("encoder.conv2.weight")),
                       g.weight("encoder.conv2.bias", wt("encoder.conv2.bias"))],
              pads=[1, 1], kernel_shape=[3], strides=[2])
    x = g.op("Transpose", [g.gelu(c2)], perm=[0, 2, 1])  # [1, T, d]
    pos = g.weight("encoder.embed_positions.weight", wt("encoder.embed_positions.weight"))
    x = g.op("Add", [x, g.op("Slice", [pos, g.const([0]), g.const([frames]), g.const([0])])])

    key_bias = None if fused_attention else _key_bias(g, n_real, frames)

    for i in range(dims.encoder_layers):
        p = f"encoder.layers.{i}"
        h = g.layer_norm(x, f"{p}.self_attn_layer_norm", w)
        qkv = g.linear(h, f"{p}.self_attn.qkv", *fused_qkv(w, f"{p}.self_attn", scale), frames, d, 3 * d, batch=True)
        q, k, v = g.op("Split", [qkv, g.const([d, d, d])], outputs=3, axis=-1)
        if key_bias is None:
            o = _fused_attention(g, q, k, v, heads)
        else:
            o = _blocked_attention(g, q, k, v, key_bias, heads, hd, frames, d)
        o = g.linear(o, f"{p}.self_attn.out_proj", wt(f"{p}.self_attn.out_proj.weight"),
                     wt(f"{p}.self_attn.out_proj.bias"), frames, d, d, batch=True)
        x = g.op("Add", [x, o])
        rows = _blocks(frames, ROW_BLOCK)
        x_blocks = [x] if len(rows) == 1 else g.op("Split", [x, g.const(rows)], outputs=len(rows), axis=1)
        mlp_out = []
        for xb, n in zip(x_blocks, rows, strict=True):  # the MLP with its residual, per block of rows
            h = g.layer_norm(xb, f"{p}.final_layer_norm", w)
            h = g.gelu(g.linear(h, f"{p}.fc1", wt(f"{p}.fc1.weight"), wt(f"{p}.fc1.bias"),
                                n, d, dims.encoder_ffn_dim, batch=True))
            h = g.linear(h, f"{p}.fc2", wt(f"{p}.fc2.weight"), wt(f"{p}.fc2.bias"),
                         n, dims.encoder_ffn_dim, d, batch=True)
            mlp_out.append(g.op("Add", [xb, h]))
        x = mlp_out[0] if len(mlp_out) == 1 else g.op("Concat", mlp_out, axis=1)
    x = g.layer_norm(x, "encoder.layer_norm", w)

    n_layers = dims.decoder_layers
    xt = g.op("Transpose", [g.op("Reshape", [x, g.const([frames, d])])], perm=[1, 0])  # [d, T]
    for kind, has_bias in (("k", False), ("v", True)):
        names = [f"decoder.layers.{j}.encoder_attn.{kind}_proj" for j in range(n_layers)]

        def weight(names=names):
            return np.concatenate([w[f"{n}.weight"] for n in names])  # [L·d, d]

        def bias(names=names):
            return np.concatenate([w[f"{n}.bias"] for n in names])[:, None]  # [L·d, 1]

        y = g.op("MatMul", [g.weight(f"decoder.cross_attn.{kind}_proj_all.weight", weight), xt])  # [L·d, T]
        if has_bias:
            y = g.op("Add", [y, g.weight(f"decoder.cross_attn.{kind}_proj_all.bias_col", bias)])
        g.op("Reshape", [y, g.const([n_layers, 1, heads, hd, frames])], outputs=[f"cross_{kind}"])
    return g.model(
        [value_info("mel", TensorProto.FLOAT, [1, dims.n_mels, n_mel_frames]),
         value_info("n_frames", TensorProto.INT64, [1])],
        [value_info(f"cross_{kind}", TensorProto.FLOAT, [n_layers, 1, heads, hd, frames]) for kind in ("k", "v")],
    )
