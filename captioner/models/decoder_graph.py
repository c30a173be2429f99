"""The decoder chunk graph: K greedy decoder steps unrolled in one static graph (ARCHITECTURE.md §5.2).

In:
    ``token`` int64 [1]: the token at position p (the chunk's first consumed position).
    ``forced`` int64 [K−1]: token to place at position p+s+1 (s = 0…K−2), or −1 for the model's choice.
        The first ``known − 1`` entries must be tokens (≥ 0): the graph batches those steps.
    ``positions`` int64 [K]: p, p+1, …, p+K−1 (rows of the position embedding).
    ``self_mask`` float32 [S]: 0 for the slots < p (filled), −100 for the others (added to the scores).
    ``cross_mask`` float32 [T]: 0 for real frames, −100 for padding (added to the scores).
    then per layer i (:func:`~captioner.models.pack.layer_input_names`):
    ``self_k_i``, ``self_v_i`` float32 [H, S, hd]: layer i's fixed cache of S slots; slot j holds position j.
    ``cross_k_i``, ``cross_v_i`` float32 [H, hd, T]: layer i's slice of the encoder's outputs
    (frames last).
    T = 50·B encoder frames of the bucket B, a symbolic dimension named ``frames`` (see below).
Out (row s belongs to step s, which consumes the token at p+s and predicts position p+s+1):
    ``tokens`` int64 [K]: the model's argmax over ids < EOT (ties → lowest id), even where forced;
        rows s < known − 1 predict nothing (their next token is given): ``tokens[s] = forced[s]``.
    ``token_logit`` float32 [K]: the logit of that argmax. ``eot_logit`` float32 [K]: the EOT logit
        (both 0 in the rows that predict nothing).
    ``logsumexp`` float32 [K]: log Σ exp over the whole vocabulary, so logit − logsumexp is the
        log-probability (the average log-probability of openai-whisper's fallback test).
    ``nospeech_logit`` float32 [K]: the logit of ``<|nospeech|>`` (only when the vocabulary has it).
    ``lang_logits`` float32 [K, languages]: the logits of the language tokens in the order of the
        pack's ``special.languages`` (only for multilingual vocabularies).
        These three are given for every row that predicts and for the first row of a batched head
        (the SOT row, where Whisper reads its no-speech probability and the language); the other
        batched rows carry zeros.
    ``attn_last`` float32 [K, T]: final decoder layer's cross-attention, mean over heads.
    ``attn_align`` float32 [K, T]: mean of the cross-attention of the alignment heads.
    ``new_k``, ``new_v`` float32 [L, 1, H, K, hd]: self-attention K/V of the K consumed tokens; the
        host writes them into slots p…p+K−1 of its cache.

A **verifier** (``verify=True``, known = K: ``decoder_s220_k5_j5_v``) batches all K given tokens
and every row predicts (all outputs are per row, none zeroed): the engine checks K proposed tokens
(a closing round's draft words) for about the cost of one sequential step.

One graph per (S, K, known) serves every start position p and every bucket with S cache slots. The
cache has a fixed size and a mask instead of one static length per start position, and the number
of encoder frames T is the symbolic dimension ``frames``: the short buckets (S = 25) share 4 decoder
graphs and the 10 s and 30 s buckets (S = 220) 4 others (a graph per bucket and chunk of the plan was 84 graphs;
one per bucket and chunk size 20). ONNX Runtime keeps ~3–5 KB of private memory per node of every
session whatever the options, so graphs, not weights (which are shared), dominated the memory of a
loaded pack: measured on whisper-base, 84 sessions held ~530 MB, a K = 5 chunk session 6 MB. On the
CPU one session per graph serves every bucket; an NPU needs static shapes, so the runtime creates
a session per bucket there with ``frames`` fixed (``add_free_dimension_override_by_name``), which
compiles exactly the static graph. The price of the fixed cache is that each step attends over S
slots instead of p + 1 (0.4 % of a step's multiply-adds at S = 25 for whisper-base, 3 % at the
30 s bucket's S = 220).

Known steps: the first ``known`` steps consume tokens the host already has (the prompt, and in the
prefixed schedule the first prefix token), so they run as one batch of rows through every layer
(causal within the batch) and only the last of them computes the vocabulary projection. On the CPU a
decoder step is memory-bound (each one streams every decoder weight), so the four prompt positions
cost about one step instead of four.

Each layer's caches and cross K/V are inputs of their own, not slices of one stacked [L, …] input:
ONNX Runtime's Split (and Slice, Gather) copy, so a stacked input was copied on every dispatch:
37 MB of cross K/V per chunk for whisper-base at 30 s, ~40 MB of RSS peak per run and ~2 ms per chunk
(``captioner bench``). The host passes views of its stacked arrays (:func:`~captioner.models.pack.layer_feeds`).

Self-attention scores are computed against the cache and against this chunk's new keys separately
and concatenated, so the cache is never copied inside the graph. The query scale is folded into the
weights, and q/k/v share one fused projection.

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
from captioner.models.pack import (
    BEAM_CACHE_DIM,
    BEAM_OUTPUTS,
    FRAMES_DIM,
    LAYER_INPUTS,
    decoder_outputs,
    layer_input,
)

__all__ = ["build_decoder_chunk", "graph_name"]


def graph_name(slots: int, size: int, known: int = 1, verify: bool = False, beam: bool = False) -> str:
    """File stem of a chunk graph: ``decoder_s25_k5``, ``decoder_s25_k4_j4`` (known steps batched),
    ``decoder_s220_k5_j5_v`` (a verifier: every batched row predicts), ``decoder_s220_b5`` (a beam
    step of 5 hypotheses with 220 cache slots each)."""
    if beam:
        return f"decoder_s{slots}_b{size}"
    return f"decoder_s{slots}_k{size}" + (f"_j{known}" if known > 1 else "") + ("_v" if verify else "")


def _to_heads(g: GraphBuilder, t: str, rows: int, heads: int, hd: int) -> str:
    """[rows, H·hd] → [H, rows, hd] (one row needs no transpose)."""
    if rows == 1:
        return g.op("Reshape", [t, g.const([heads, 1, hd])])
    return g.op("Transpose", [g.op("Reshape", [t, g.const([rows, heads, hd])])], perm=[1, 0, 2])


def _from_heads(g: GraphBuilder, t: str, rows: int, d: int) -> str:
    """[H, rows, hd] → [rows, H·hd]."""
    if rows == 1:
        return g.op("Reshape", [t, g.const([1, d])])
    return g.op("Reshape", [g.op("Transpose", [t], perm=[1, 0, 2]), g.const([rows, d])])


def _linear(g: GraphBuilder, ckpt: Checkpoint, h: str, name: str, rows: int, d_in: int, d_out: int) -> str:
    """The linear layer ``name`` (weight + bias from the checkpoint) on [rows, d_in]."""
    w = ckpt.weights
    return g.linear(h, name, lambda: w[f"{name}.weight"], lambda: w[f"{name}.bias"], rows, d_in, d_out, batch=False)


def _self_qkv(g: GraphBuilder, ckpt: Checkpoint, x: str, pre: str, scale: float, rows: int) -> list[str]:
    """Layer norm + the fused, query-scaled q/k/v projection of decoder layer ``pre``: [H, rows, hd] each."""
    w, dims = ckpt.weights, ckpt.dims
    d = dims.d_model
    h = g.layer_norm(x, f"{pre}.self_attn_layer_norm", w)
    qkv = g.linear(h, f"{pre}.self_attn.qkv", lambda: qkv_weights(w, f"{pre}.self_attn", scale)[0],
                   lambda: qkv_weights(w, f"{pre}.self_attn", scale)[1], rows, d, 3 * d, batch=False)
    return [_to_heads(g, t, rows, dims.decoder_heads, dims.head_dim)
            for t in g.op("Split", [qkv, g.const([d, d, d])], outputs=3, axis=-1)]


def _cross_and_mlp(g: GraphBuilder, ckpt: Checkpoint, x: str, pre: str, scale: float, cross_kt: str,
                   cross_vt: str, rows: int) -> tuple[str, str]:
    """The rest of decoder layer ``pre`` after self-attention: cross-attention (with ``cross_mask``)
    and the MLP, each with its residual. Returns (x [rows, d], cross-attention probabilities [H, rows, T])."""
    w, dims = ckpt.weights, ckpt.dims
    d = dims.d_model
    h = g.layer_norm(x, f"{pre}.encoder_attn_layer_norm", w)
    q = g.linear(h, f"{pre}.encoder_attn.q_proj_scaled",
                 lambda: np.asarray(w[f"{pre}.encoder_attn.q_proj.weight"], np.float32) * np.float32(scale),
                 lambda: np.asarray(w[f"{pre}.encoder_attn.q_proj.bias"], np.float32) * np.float32(scale),
                 rows, d, d, batch=False)
    q = _to_heads(g, q, rows, dims.decoder_heads, dims.head_dim)
    probs = g.op("Softmax", [g.op("Add", [g.op("MatMul", [q, cross_kt]), "cross_mask"])], axis=-1)  # [H, rows, T]
    # o = p·V computed as (Vᵀ·pᵀ)ᵀ on the transposed values; for one row both transposes are reshapes
    heads = dims.decoder_heads
    if rows == 1:
        pt = g.op("Reshape", [probs, g.const([heads, -1, 1])])  # [H, T, 1]
        o = g.op("Reshape", [g.op("MatMul", [cross_vt, pt]), g.const([1, d])])  # [H, hd, 1] -> [1, d]
    else:
        o = g.op("MatMul", [cross_vt, g.op("Transpose", [probs], perm=[0, 2, 1])])  # [H, hd, rows]
        o = _from_heads(g, g.op("Transpose", [o], perm=[0, 2, 1]), rows, d)
    x = g.op("Add", [x, _linear(g, ckpt, o, f"{pre}.encoder_attn.out_proj", rows, d, d)])
    h = g.layer_norm(x, f"{pre}.final_layer_norm", w)
    h = g.gelu(_linear(g, ckpt, h, f"{pre}.fc1", rows, d, dims.decoder_ffn_dim))
    x = g.op("Add", [x, _linear(g, ckpt, h, f"{pre}.fc2", rows, dims.decoder_ffn_dim, d)])
    return x, probs


def _head_sum(g: GraphBuilder, total: str | None, probs: str, heads: list[int]) -> str:
    """``total`` + the sum over ``heads`` of ``probs`` [H, rows, T] → [rows, T]."""
    summed = g.op("ReduceSum", [g.op("Gather", [probs, g.const(heads)], axis=0), g.const([0])], keepdims=0)
    return summed if total is None else g.op("Add", [total, summed])


SHORTLIST = 32  # int8 vocabulary projection: candidates re-scored exactly in fp32


class _Logits:
    """The vocabulary projection of the picked rows ``x`` [r, d] (after the final layer norm).

    ``vocab="fp32"``: one Gemm with ``transB`` on the tied table, [r, V]. ``vocab="int8"``: the
    table as int8 with per-token scales (MatMulInteger on the dynamically quantised rows) ranks the
    vocabulary, and the :data:`SHORTLIST` best text tokens, EOT and the special tokens the outputs
    name are scored again exactly in fp32; only ``logsumexp`` keeps the int8 estimate (off by up to
    0.23 on the real tiny.en clips of the tests; it feeds only the no-speech probability, which the
    streaming policy does not use). A CPU decoder step streams the whole [V, d] table, which is
    ~80 % of it for whisper-base (51865 × 512 fp32 = 106 MB); int8 streams a quarter of that.
    Measured (ORT CPU, 2 threads, one row): 10.3 ms fp32, 2.9 ms int8 + shortlist. The greedy
    choice is the fp32 argmax unless the true best token falls outside the int8 top 32
    (never seen on the development corpus; tested equal on real clips), and exact ties between
    fp32 logits are broken in int8 order instead of by lowest id. ``per_row`` (the rows of a beam
    step): each row quantised with a scale of its own (``GraphBuilder.int8_matmul``), so a
    hypothesis' log-sum-exp estimate does not depend on the other hypotheses in the dispatch.
    """

    def __init__(self, g: GraphBuilder, ckpt: Checkpoint, x: str, proj: str, table_name: str, vocab: str,
                 per_row: int = 0):
        self.g, self.x, self.proj, self.int8 = g, x, proj, vocab == "int8"
        if not self.int8:
            self.full = g.op("Gemm", [x, proj], transB=1)  # [r, V]
            return
        q, scale = g.int8_weight(f"{table_name}.int8_t", f"{table_name}.int8_scale", lambda: ckpt.weights[table_name])
        if per_row:  # a beam step: each hypothesis' row quantised by itself, whatever the other rows
            self.full = g.int8_matmul(x, q, scale, per_row)
            return
        xq, xs, xz = g.op("DynamicQuantizeLinear", [x], outputs=3)
        acc = g.op("Cast", [g.op("MatMulInteger", [xq, q, xz])], to=TensorProto.FLOAT)
        self.full = g.op("Mul", [acc, g.op("Mul", [xs, scale])])  # [r, V], int8 estimate

    def exact(self, ids: str) -> str:
        """Exact fp32 logits [r, n] of the token ids ``ids`` [n]."""
        if not self.int8:
            return self.g.op("Gather", [self.full, ids], axis=1)
        rows = self.g.op("Gather", [self.proj, ids], axis=0)  # [n, d]
        return self.g.op("Gemm", [self.x, rows], transB=1)

    def top_text(self, k: int, eot: int) -> tuple[str, str]:
        """(the ``k`` best tokens [r, k] int64 over ids < ``eot``, best first; their logits [r, k])."""
        g = self.g
        text = g.op("Slice", [self.full, g.const([0]), g.const([eot]), g.const([1])])
        if not self.int8:
            values, idx = g.op("TopK", [text, g.const([k])], outputs=2, axis=1)
            return idx, values
        _, idx = g.op("TopK", [text, g.const([max(k, SHORTLIST)])], outputs=2, axis=1)  # [r, n]
        cand = g.op("Gather", [self.proj, idx], axis=0)  # [r, n, d]
        scores = g.op("Squeeze", [g.op("MatMul", [cand, g.op("Unsqueeze", [self.x, g.const([2])])]),
                                  g.const([2])])  # [r, n], exact
        values, pos = g.op("TopK", [scores, g.const([k])], outputs=2, axis=1)
        return g.op("GatherElements", [idx, pos], axis=1), values

    def best_text(self, row: str | None, eot: int) -> tuple[str, str]:
        """(argmax token [n] int64, its logit [n]) over ids < ``eot``: of row ``row`` ([1] index,
        n = 1), or of every row (None, n = r)."""
        g = self.g
        logits = self.full if row is None else g.op("Gather", [self.full, row], axis=0)  # [n, V]
        text = g.op("Slice", [logits, g.const([0]), g.const([eot]), g.const([1])])
        if not self.int8:
            return (g.op("ArgMax", [text], axis=1, keepdims=0),  # the first maximum
                    g.op("ReduceMax", [text, g.const([1])], keepdims=0))
        _, idx = g.op("TopK", [text, g.const([SHORTLIST])], outputs=2, axis=1)  # [n, k]
        x = self.x if row is None else g.op("Gather", [self.x, row], axis=0)  # [n, d]
        cand = g.op("Gather", [self.proj, idx], axis=0)  # [n, k, d]
        scores = g.op("Squeeze", [g.op("MatMul", [cand, g.op("Unsqueeze", [x, g.const([2])])]),
                                  g.const([2])])  # [n, k]
        pick = g.op("ArgMax", [scores], axis=1, keepdims=1)  # [n, 1]
        return (g.op("Squeeze", [g.op("GatherElements", [idx, pick], axis=1), g.const([1])]),
                g.op("ReduceMax", [scores, g.const([1])], keepdims=0))


def _predict(g: GraphBuilder, ckpt: Checkpoint, x: str, proj: str, rows: int, table_name: str,
             vocab: str = "fp32", every_row: bool = False, top: int = 0) -> dict[str, str]:
    """Final layer norm, logits and what the steps of one pass ``x`` [rows, d] report.

    The greedy pick (``tokens`` [1] int64, ``token_logit`` [1], ``eot_logit`` [1]) is made after the
    last row only. ``logsumexp`` [rows], ``nospeech_logit`` [rows] and ``lang_logits`` [rows, languages]
    (the last two only where :func:`~captioner.models.pack.decoder_outputs` lists them) come for the
    last row and, in a batched pass, for its first row too: the row that consumed SOT, where Whisper
    reads its no-speech probability and the language. The rows between carry zeros. Projecting two
    rows instead of one costs about the same (the step streams the [V, d] table either way).
    Measured on whisper-base (ORT 1.32 CPU, one thread): the statistics take ~0.04 ms per row, the
    head's second projected row ~0.3 ms, against ~7.5 ms for a step's vocabulary projection alone
    (``vocab="int8"``: see :class:`_Logits`). With ``every_row`` (a verifier) every row predicts
    and reports: all outputs are [rows]. ``top`` > 0 (a beam step, every row): also ``top_tokens``
    [rows, top] and ``top_logits`` [rows, top], each row's best text tokens, and the greedy pick is
    their first column.
    """
    special = ckpt.special
    eot = special.eot
    if every_row:
        picked, r = x, rows
    else:
        picked = x if rows == 1 else g.op("Gather", [x, g.const([0, rows - 1])], axis=0)  # [r, d], r = 1 or 2
        r = 1 if rows == 1 else 2
    picked = g.layer_norm(picked, "decoder.layer_norm", ckpt.weights)
    logits = _Logits(g, ckpt, picked, proj, table_name, vocab, r if top else 0)
    best: dict[str, str] = {}
    if top:
        best["top_tokens"], best["top_logits"] = logits.top_text(top, eot)
        first = [g.const([0]), g.const([1]), g.const([1])]
        tokens = g.op("Reshape", [g.op("Slice", [best["top_tokens"], *first]), g.const([r])])
        token_logit = g.op("Reshape", [g.op("Slice", [best["top_logits"], *first]), g.const([r])])
    else:
        tokens, token_logit = logits.best_text(None if r == 1 or every_row else g.const([1]), eot)
    eot_all = logits.exact(g.const([eot]))  # [r, 1]
    last_eot = eot_all if r == 1 or every_row else g.op("Slice", [eot_all, g.const([1]), g.const([2]), g.const([0])])
    out = {"tokens": tokens, "token_logit": token_logit,
           "eot_logit": g.op("Reshape", [last_eot, g.const([r if every_row else 1])]), **best}
    # log-sum-exp as ReduceMax + Exp + ReduceSum + Log (QNN's HTP has no ReduceLogSumExp)
    full = logits.full
    peak = g.op("ReduceMax", [full, g.const([1])], keepdims=1)  # [r, 1]
    total = g.op("ReduceSum", [g.op("Exp", [g.op("Sub", [full, peak])]), g.const([1])], keepdims=0)
    stats = {"logsumexp": g.op("Add", [g.op("Log", [total]), g.op("Reshape", [peak, g.const([r])])])}
    if special.nospeech is not None:
        stats["nospeech_logit"] = g.op("Reshape", [logits.exact(g.const([int(special.nospeech)])), g.const([r])])
    if special.languages:
        stats["lang_logits"] = logits.exact(g.const(list(special.languages.values())))
    for name, value in stats.items():
        if rows > 2 and not every_row:  # first row, zeros for the rows between, last row
            shape = (rows - 2, len(special.languages)) if name == "lang_logits" else (rows - 2,)
            value = g.op("Concat", [g.op("Slice", [value, g.const([0]), g.const([1])]),
                                    g.const(np.zeros(shape), np.float32),
                                    g.op("Slice", [value, g.const([1]), g.const([2])])], axis=0)
        out[name] = value
    return out


def build_decoder_chunk(ckpt: Checkpoint, store: WeightStore, size: int, slots: int, linear: str,
                        known: int = 1, vocab: str = "fp32", verify: bool = False, int8: bool = False,
                        beam: bool = False):
    """The ModelProto of a chunk graph: ``size`` = K steps over a cache of ``slots`` = S positions,
    the first ``known`` steps batched, for any number of encoder frames (see the module docstring).

    K = 1 with S = 200 is Qualcomm AI Hub's fixed-cache single-step decoder, which ``captioner
    bench`` compares against. ``verify`` (with ``known = size``) makes a verifier: the K given
    tokens go through as one batch and every row predicts, so the host checks K proposed tokens
    for about the cost of one step (the step streams the weights once for all rows). ``int8``:
    the layers' linear weights in int8 (``GraphBuilder.linear``).

    ``beam`` (with ``known = size`` = B) makes a beam step: B hypotheses at the same position p, each
    with its own cache of up to ``slots`` positions, seeing only its own new key; every row predicts
    and also reports its B best text tokens (``top_tokens``, ``top_logits`` [B, B]). The caches are
    one input per layer and kind, ``self_k_i`` [C, H, hd] position-major (row q·B + b: position q of
    hypothesis b) with C = ``beam_cache`` symbolic (:data:`~captioner.models.pack.BEAM_CACHE_DIM`),
    and ``self_mask`` [B, C] opens row b's own rows; the host feeds ``positions`` = [p]·B. On the CPU
    the host feeds only the filled rows (C = p·B): the attention reads what was decoded instead of
    B·S slots (whisper-base, p ≈ 40: a step 12 → ~9 ms); a static-shape provider fixes C = B·S.
    The B rows stream the weights once, so a step of five hypotheses costs less than two
    sequential steps on the CPU.
    """
    dims, w = ckpt.dims, ckpt.weights
    d, heads, hd, n_layers = dims.d_model, dims.decoder_heads, dims.head_dim, dims.decoder_layers
    frames = FRAMES_DIM
    if size < 1:
        raise ValueError("a decoder chunk runs at least 1 step")
    if not 1 <= known <= size:
        raise ValueError(f"known steps must be between 1 and the chunk size {size}, not {known}")
    if (verify or beam) and known != size:
        raise ValueError("a verifier or a beam step batches all its steps (known = size)")
    every = verify or beam  # every row predicts
    if slots < 1 or slots + (1 if beam else size) > dims.n_text_ctx:
        raise ValueError(f"a cache of {slots} slots and {size} steps exceeds the model's {dims.n_text_ctx} positions")
    scale = float(hd) ** -0.5
    g = GraphBuilder(graph_name(slots, size, known, verify, beam), store, linear, int8)

    embed = g.weight("decoder.embed_tokens.weight", lambda: w["decoder.embed_tokens.weight"])
    table_name = "decoder.embed_tokens.weight" if ckpt.tied_output else "proj_out.weight"
    proj = embed if ckpt.tied_output else g.weight("proj_out.weight", lambda: w["proj_out.weight"])
    pos_table = g.weight("decoder.embed_positions.weight", lambda: w["decoder.embed_positions.weight"])

    per_layer = {kind: [layer_input(kind, i) for i in range(n_layers)] for kind in LAYER_INPUTS}
    if beam:  # the cache rows are [C, H, hd], position-major (the host feeds the filled ones)
        cache_kt = [g.op("Transpose", [t], perm=[1, 2, 0]) for t in per_layer["self_k"]]  # [H, hd, C]
        cache_v = [g.op("Transpose", [t], perm=[1, 0, 2]) for t in per_layer["self_v"]]  # [H, C, hd]
        n_cache = g.op("Slice", [g.op("Shape", ["self_mask"]), g.const([1]), g.const([2])])  # [1]: C
    else:
        cache_kt = [g.op("Transpose", [t], perm=[0, 2, 1]) for t in per_layer["self_k"]]  # [H, hd, S]
        cache_v = per_layer["self_v"]
    align_by_layer: dict[int, list[int]] = {}
    for layer, head in ckpt.alignment_heads:
        align_by_layer.setdefault(layer, []).append(head)

    groups = [known] + [1] * (size - known)  # rows per pass: the known steps together, then one by one
    pos_rows = g.op("Gather", [pos_table, "positions"], axis=0)  # [K, d]
    pos_parts = [pos_rows] if len(groups) == 1 else g.op("Split", [pos_rows, g.const(groups)],
                                                          outputs=len(groups), axis=0)
    out_names = decoder_outputs(ckpt.special) + (BEAM_OUTPUTS if beam else ())
    outs: dict[str, list[str]] = {name: [] for name in out_names if not name.startswith("new_")}
    token = "token"
    if known > 1:
        given = g.op("Slice", ["forced", g.const([0]), g.const([known - 1])])
        token = g.op("Concat", ["token", given], axis=0)
        if not every:
            zeros = g.const(np.zeros(known - 1), np.float32)
            outs["tokens"].append(given)  # these rows predict nothing: their next token is given
            outs["token_logit"].append(zeros)
            outs["eot_logit"].append(zeros)

    new_k: list[list[str]] = [[] for _ in range(n_layers)]
    new_v: list[list[str]] = [[] for _ in range(n_layers)]
    done = 0
    for rows, pos in zip(groups, pos_parts, strict=True):
        x = g.op("Add", [g.op("Gather", [embed, token], axis=0), pos])  # [rows, d]
        causal = None
        if rows > 1:  # row r of the batch sees the new keys up to its own position (a beam row: its own)
            later = np.arange(rows)[None, :] != np.arange(rows)[:, None] if beam else \
                np.arange(rows)[None, :] > np.arange(rows)[:, None]
            causal = g.const(np.where(later, MASK_BIAS, 0.0), np.float32)
        align_sum = None
        for i in range(n_layers):
            pre = f"decoder.layers.{i}"
            q, k, v = _self_qkv(g, ckpt, x, pre, scale, rows)
            new_k[i].append(k)
            new_v[i].append(v)
            k_new = k if len(new_k[i]) == 1 else g.op("Concat", new_k[i], axis=1)  # [H, done+rows, hd]
            v_new = v if len(new_v[i]) == 1 else g.op("Concat", new_v[i], axis=1)
            s_cache = g.op("Add", [g.op("MatMul", [q, cache_kt[i]]), "self_mask"])  # [H, rows, S]
            s_new = g.op("MatMul", [q, g.op("Transpose", [k_new], perm=[0, 2, 1])])  # [H, rows, done+rows]
            if causal is not None:
                s_new = g.op("Add", [s_new, causal])
            probs = g.op("Softmax", [g.op("Concat", [s_cache, s_new], axis=-1)], axis=-1)
            sizes = g.op("Concat", [n_cache, g.const([done + rows])], axis=0) if beam else g.const([slots, done + rows])
            p_cache, p_new = g.op("Split", [probs, sizes], outputs=2, axis=-1)
            o = g.op("Add", [g.op("MatMul", [p_cache, cache_v[i]]), g.op("MatMul", [p_new, v_new])])
            o = _from_heads(g, o, rows, d)
            x = g.op("Add", [x, _linear(g, ckpt, o, f"{pre}.self_attn.out_proj", rows, d, d)])
            x, probs = _cross_and_mlp(g, ckpt, x, pre, scale, per_layer["cross_k"][i], per_layer["cross_v"][i], rows)
            if i == n_layers - 1:
                outs["attn_last"].append(g.op("ReduceMean", [probs, g.const([0])], keepdims=0))  # [rows, T]
            if i in align_by_layer:
                align_sum = _head_sum(g, align_sum, probs, align_by_layer[i])
        assert align_sum is not None  # the checkpoint loader guarantees alignment heads
        outs["attn_align"].append(g.op("Mul", [align_sum, g.const([1.0 / len(ckpt.alignment_heads)], np.float32)]))

        for name, value in _predict(g, ckpt, x, proj, rows, table_name, vocab, every, size if beam else 0).items():
            outs[name].append(value)
        choice = outs["tokens"][-1]
        done += rows
        if done < size:
            forced = g.op("Slice", ["forced", g.const([done - 1]), g.const([done])])
            token = g.op("Where", [g.op("GreaterOrEqual", [forced, g.const([0])]), forced, choice])

    for name, pieces in outs.items():
        g.op("Concat", pieces, outputs=[name], axis=0)
    for name, per in (("new_k", new_k), ("new_v", new_v)):
        layers = [g.op("Reshape", [g.op("Concat", pieces, axis=1) if len(pieces) > 1 else pieces[0],
                                   g.const([1, 1, heads, size, hd])]) for pieces in per]
        g.op("Concat", layers, outputs=[name], axis=0)

    f32, i64 = TensorProto.FLOAT, TensorProto.INT64
    out_shape: dict[str, tuple[int, list[int | str]]] = {"tokens": (i64, [size]), "token_logit": (f32, [size]), "eot_logit": (f32, [size]),
                 "logsumexp": (f32, [size]), "nospeech_logit": (f32, [size]),
                 "lang_logits": (f32, [size, len(ckpt.special.languages)]),
                 "attn_last": (f32, [size, frames]), "attn_align": (f32, [size, frames]),
                 "new_k": (f32, [n_layers, 1, heads, size, hd]), "new_v": (f32, [n_layers, 1, heads, size, hd]),
                 "top_tokens": (i64, [size, size]), "top_logits": (f32, [size, size])}
    own: list[int | str] = [BEAM_CACHE_DIM, heads, hd] if beam else [heads, slots, hd]
    layer_shape: dict[str, list[int | str]] = {"self_k": own, "self_v": own,
                   "cross_k": [heads, hd, frames], "cross_v": [heads, hd, frames]}  # per LAYER_INPUTS kind
    return g.model(
        [value_info("token", i64, [1]), value_info("forced", i64, [size - 1]), value_info("positions", i64, [size]),
         value_info("self_mask", f32, [size, BEAM_CACHE_DIM] if beam else [slots]),
         value_info("cross_mask", f32, [frames]),
         *[value_info(layer_input(kind, i), f32, layer_shape[kind]) for i in range(n_layers) for kind in LAYER_INPUTS]],
        [value_info(name, *out_shape[name]) for name in out_names],
    )
