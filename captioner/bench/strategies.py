"""Micro-benchmarks on one pack: encoder buckets, decoder strategies, tail chunk sizes.

Timing protocol (the machines are noisy, so ratios are what we report): every measured call is
warmed up first (sessions created, caches filled), then repeated ``reps`` times; within a repetition
the candidates run in an order rotated by one each time, so a slow spell hits all of them alike; the
figure is the median.

Decoder strategies, all on the same weights and the same encoder output (one bucket), for a decode
of T positions (the four prompt tokens included: T positions consumed, T − 3 tokens generated and
each generated token but the last consumed once, as a round needs):

* ``unrolled``: our chunk graphs along the pack's schedule ``[4, 6, 5, 5, 5, 5]`` (the engine's own
  runner), dispatching chunks until T positions are consumed; a chunk is run whole, so positions
  beyond T inside the last chunk are computed too (that is the design's cost, counted here);
* ``per_token``: one single-step graph per position (K = 1), a dispatch per position;
* ``fixed200``: AI Hub's single-step graph over a fixed 200-slot cache with a mask, T dispatches.

Chunk sizes: the schedule ``[4, 6, K, K, …]`` for K = 3, 5, 7 (paper Table 8) over the same T values,
plus the mean over T = 5 … 30 (a round that stops uniformly anywhere in the plan).
"""

from __future__ import annotations

import logging
import math
import statistics
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from types import MappingProxyType

import numpy as np

from captioner.bench.graphs import ExtraGraphs
from captioner.engine.model import Encoding
from captioner.engine.onnx_model import OnnxAcousticModel
from captioner.engine.runtime import Runtime
from captioner.models.fixed_decoder_graph import FIXED_POSITIONS
from captioner.models.pack import Pack

__all__ = ["DecodeStrategy", "chunk_sizes", "decoder_strategies", "encoder_buckets", "schedule_model"]

logger = logging.getLogger(__name__)

DECODE_T = (5, 10, 20, 30)
CHUNK_T = (5, 10, 15, 20, 25, 30)
TAIL_SIZES = (3, 5, 7)
_TAIL_POSITIONS = 20
# Two means closer than this are a tie: the run-to-run spread of one K's mean on the 2-core CI machine
# was 4 % (whisper-base, three runs), so a smaller gap is not a measured difference.
_TIE = 0.05


def _median_times(candidates: Mapping[str, Callable[[], float]], reps: int, warmup: int) -> dict[str, float]:
    """Median ms of each candidate (a callable returning its own elapsed ms), rotated order."""
    names = list(candidates)
    for _ in range(warmup):
        for name in names:
            candidates[name]()
    samples: dict[str, list[float]] = {n: [] for n in names}
    for rep in range(reps):
        k = rep % len(names)
        for name in names[k:] + names[:k]:
            samples[name].append(candidates[name]())
    return {n: statistics.median(v) for n, v in samples.items()}


def _audio(seconds: float, seed: int = 0) -> np.ndarray:
    """Noise at −20 dBFS, ``seconds`` long (a whole number of 20 ms frames)."""
    n = round(seconds * 50) * 320
    return (np.random.default_rng(seed).standard_normal(n) * 0.1).astype(np.float32)


def encoder_buckets(model: OnnxAcousticModel, reps: int, warmup: int,
                    progress: Callable[[str], None]) -> dict:
    """Encoder ms per bucket (audio filling the bucket), mel ms, and the ratio to the longest bucket."""
    buckets = model.buckets
    clips = {b: _audio(b, seed=b) for b in buckets}
    mel: dict[int, list[float]] = {b: [] for b in buckets}

    def timer(bucket: int) -> Callable[[], float]:
        def run() -> float:
            enc = model.encode(clips[bucket])
            mel[bucket].append(enc.mel_ms)
            return enc.encoder_ms
        return run

    progress(f"encoder: buckets {', '.join(map(str, buckets))} s, {reps} repetitions")
    med = _median_times({str(b): timer(b) for b in buckets}, reps, warmup)
    full = med[str(buckets[-1])]
    return {
        "reference_bucket_s": buckets[-1],
        "buckets": [{"bucket_s": b, "encoder_ms": med[str(b)], "mel_ms": statistics.median(mel[b]),
                     "ratio_to_full": med[str(b)] / full} for b in buckets],
    }


class _PackView:
    """A pack whose decoder chunks and schedules come from elsewhere (same weights, same runtime)."""

    def __init__(self, pack: Pack, files: Mapping[tuple[int, int], Path], bucket: int,
                 schedules: Mapping[str, tuple[int, ...]]) -> None:
        self._pack, self._files, self._bucket = pack, dict(files), bucket
        self.schedules = MappingProxyType(dict(schedules))
        self.long_chunk = 0  # no continuation beyond the schedule

    def __getattr__(self, name: str):
        return getattr(self._pack, name)

    def decoder_file(self, bucket: int, start: int, size: int) -> Path:
        return self._files[(start, size)]

    def decoder_chunks(self, bucket: int) -> list[tuple[int, int]]:
        return sorted(self._files) if bucket == self._bucket else []


def schedule_model(pack: Pack, runtime: Runtime, graphs: ExtraGraphs, bucket: int,
                   sizes: Sequence[int]) -> OnnxAcousticModel:
    """An :class:`OnnxAcousticModel` on ``runtime`` whose plan in ``bucket`` is ``sizes`` (both
    schedules), with chunk graphs from the pack or built over its weights."""
    plan, start = [], 0
    for size in sizes:
        plan.append((start, size))
        start += size
    view = _PackView(pack, graphs.chunks(bucket, plan), bucket, {"default": tuple(sizes), "prefixed": tuple(sizes)})
    return OnnxAcousticModel(view, runtime)  # type: ignore[arg-type]  # duck-typed Pack


def tail_schedule(pack: Pack, tail: int) -> tuple[int, ...]:
    """The default schedule's head followed by chunks of ``tail`` covering 20 positions."""
    head = pack.schedules["default"][:2]
    return (*head, *(tail,) * math.ceil(_TAIL_POSITIONS / tail))


class DecodeStrategy:
    """Decodes T positions of one encoding with one strategy; ``run(T)`` returns (ms, dispatches, positions)."""

    def __init__(self, name: str, run: Callable[[int], tuple[float, int, int]]) -> None:
        self.name, self.run = name, run


def _chain_strategy(name: str, model: OnnxAcousticModel, encoding: Encoding, prompt: Sequence[int]) -> DecodeStrategy:
    plan = model.chunk_plan(encoding.bucket, False)

    def run(positions: int) -> tuple[float, int, int]:
        t0 = time.perf_counter()
        runner = model.decoder(encoding)  # a fresh cache, as every round allocates
        seq = list(prompt)
        dispatches = done = 0
        for start, size in plan:
            if done >= positions:
                break
            forced = np.array([seq[q] if q < len(prompt) else -1 for q in range(start + 1, start + size)], np.int64)
            out = runner.run(start, size, seq[start], forced)
            seq.extend(int(t) for t in out.tokens[max(0, len(prompt) - 1 - start):])
            dispatches += 1
            done = start + size
        return (time.perf_counter() - t0) * 1000.0, dispatches, done

    return DecodeStrategy(name, run)


def _fixed_strategy(runtime: Runtime, graph: Path, encoding: Encoding, prompt: Sequence[int],
                    kv_shape: tuple[int, int, int, int]) -> DecodeStrategy:
    layers, one, heads, head_dim = kv_shape
    cross_k, cross_v, cross_mask = encoding.payload
    cache_k = np.zeros((layers, one, heads, FIXED_POSITIONS, head_dim), np.float32)
    cache_v = np.zeros_like(cache_k)
    mask = np.empty(FIXED_POSITIONS, np.float32)
    names = ["tokens", "new_k", "new_v"]

    def run(positions: int) -> tuple[float, int, int]:
        t0 = time.perf_counter()
        sess = runtime.session(graph)
        mask.fill(-100.0)  # the cache is reused: stale slots stay masked
        seq = list(prompt)
        for p in range(positions):
            tokens, new_k, new_v = sess.run(names, {
                "token": np.array([seq[p]], np.int64), "position": np.array([p], np.int64),
                "self_k": cache_k, "self_v": cache_v, "self_mask": mask,
                "cross_k": cross_k, "cross_v": cross_v, "cross_mask": cross_mask})
            cache_k[:, :, :, p] = new_k[:, :, :, 0]
            cache_v[:, :, :, p] = new_v[:, :, :, 0]
            mask[p] = 0.0
            if p + 1 >= len(prompt):
                seq.append(int(tokens[0]))
        return (time.perf_counter() - t0) * 1000.0, positions, positions

    return DecodeStrategy("fixed200", run)


def _measure(strategies: Sequence[DecodeStrategy], t_values: Sequence[int], reps: int, warmup: int) -> dict:
    """{strategy: {T: {ms, dispatches, positions}}} with medians over rotated repetitions."""
    extra: dict[tuple[str, int], tuple[int, int]] = {}
    candidates = {}
    for strat in strategies:
        for t in t_values:
            def call(strat=strat, t=t) -> float:
                ms, dispatches, positions = strat.run(t)
                extra[(strat.name, t)] = (dispatches, positions)
                return ms
            candidates[f"{strat.name}@{t}"] = call
    med = _median_times(candidates, reps, warmup)
    return {s.name: {str(t): {"ms": med[f"{s.name}@{t}"], "dispatches": extra[(s.name, t)][0],
                              "positions": extra[(s.name, t)][1]} for t in t_values} for s in strategies}


def decoder_strategies(model: OnnxAcousticModel, graphs: ExtraGraphs, bucket: int, reps: int, warmup: int,
                       progress: Callable[[str], None], t_values: Sequence[int] = DECODE_T) -> dict:
    """Unrolled vs per-token vs fixed-200 for each T; ratios relative to ``unrolled``."""
    pack, runtime = model.pack, model.runtime
    encoding = model.encode(_audio(bucket - 0.5, seed=7))
    prompt = model.vocab.prompt("en", "transcribe")
    longest = max(t_values)
    progress(f"decoder strategies: bucket {bucket} s, T = {', '.join(map(str, t_values))}, building graphs")
    per_token = schedule_model(pack, runtime, graphs, encoding.bucket, (1,) * longest)
    strategies = [
        _chain_strategy("unrolled", model, encoding, prompt),
        _chain_strategy("per_token", per_token, encoding, prompt),
        _fixed_strategy(runtime, graphs.fixed(encoding.bucket), encoding, prompt, model._kv_shape),
    ]
    progress(f"decoder strategies: timing ({reps} repetitions)")
    table = _measure(strategies, t_values, reps, warmup)
    for t in map(str, t_values):
        base = table["unrolled"][t]["ms"]
        for name in table:
            table[name][t]["ratio_to_unrolled"] = table[name][t]["ms"] / base
    mac = {str(t): 2 * FIXED_POSITIONS / (t + 1) for t in t_values}
    return {"bucket_s": encoding.bucket, "t_values": list(t_values), "schedule": list(pack.schedules["default"]),
            "fixed_positions": FIXED_POSITIONS, "self_attention_mac_ratio_fixed_vs_unrolled": mac,
            "strategies": table}


def chunk_sizes(model: OnnxAcousticModel, graphs: ExtraGraphs, bucket: int, reps: int, warmup: int,
                progress: Callable[[str], None], t_values: Sequence[int] = CHUNK_T,
                tails: Sequence[int] = TAIL_SIZES) -> dict:
    """Decode ms for the schedules ``[4, 6, K, …]``, K in ``tails``.

    Each schedule is timed at its chunk boundaries (1, 2, … chunks dispatched), which gives the cost of
    every T exactly (a T inside a chunk costs the whole chunk); the mean over T = 5 … 30, a round that
    stops uniformly anywhere in the plan, picks K.
    """
    pack, runtime = model.pack, model.runtime
    encoding = model.encode(_audio(bucket - 0.5, seed=11))
    prompt = model.vocab.prompt("en", "transcribe")
    progress(f"chunk sizes K = {', '.join(map(str, tails))}: building graphs")
    strategies, schedules = [], {}
    for k in tails:
        sizes = tail_schedule(pack, k)
        schedules[k] = sizes
        model_k = schedule_model(pack, runtime, graphs, encoding.bucket, sizes)
        strategies.append((k, _chain_strategy(f"K={k}", model_k, encoding, prompt)))
    progress(f"chunk sizes: timing ({reps} repetitions)")
    candidates = {}
    for k, strat in strategies:
        for n in range(1, len(schedules[k]) + 1):
            positions = sum(schedules[k][:n])
            candidates[f"{k}:{n}"] = (lambda strat=strat, t=positions: strat.run(t)[0])
    med = _median_times(candidates, reps, warmup)
    lo, hi = min(t_values), max(t_values)
    out = {}
    for k in tails:
        sizes = schedules[k]
        cost = {t: med[f"{k}:{_chunks_for(sizes, t)}"] for t in range(lo, hi + 1)}
        out[str(k)] = {
            "schedule": list(sizes),
            "by_t": {str(t): {"ms": cost[t], "dispatches": _chunks_for(sizes, t),
                              "positions": sum(sizes[:_chunks_for(sizes, t)])} for t in t_values},
            "mean_ms_t5_30": statistics.fmean(cost.values()),
            "calls_mean_t5_30": statistics.fmean(_chunks_for(sizes, t) for t in cost),
            "extra_positions_mean_t5_30": statistics.fmean(sum(sizes[:_chunks_for(sizes, t)]) - t for t in cost),
            "graphs_per_pack": _graphs_per_pack(pack, k),
        }
    best = min(out, key=lambda k: out[k]["mean_ms_t5_30"])
    paper = "5" if "5" in out else best
    tie = out[paper]["mean_ms_t5_30"] <= out[best]["mean_ms_t5_30"] * (1.0 + _TIE)
    return {"bucket_s": encoding.bucket, "t_values": list(t_values), "sizes": out,
            "fastest": int(best), "chosen": int(paper if tie else best),
            "rule": f"the fastest mean over T = 5..30; the paper's 5 when within {_TIE:.0%}"}


def _graphs_per_pack(pack: Pack, tail: int) -> int:
    """Graphs a pack with this pack's buckets and heads would have with tail chunks of ``tail``."""
    from captioner.models.build import BuildOptions, chunk_plan

    heads = {name: tuple(sizes[:2]) for name, sizes in pack.schedules.items()}
    options = BuildOptions(buckets=tuple(pack.buckets), heads=heads, tail_chunk=tail,
                           max_positions=pack.max_positions)
    plan = chunk_plan(options, full_window=pack.dims.n_audio_ctx // 50)
    return len(plan) + sum(len(chunks) for chunks in plan.values())


def _chunks_for(sizes: Sequence[int], positions: int) -> int:
    """Chunks of ``sizes`` needed to consume ``positions``."""
    done = n = 0
    for size in sizes:
        if done >= positions:
            break
        done += size
        n += 1
    return n
