"""Runs every section of ``captioner bench`` and returns one JSON-able result.

Sections: ``encoder`` (per bucket), ``decoder`` (three strategies), ``chunk_sizes`` (K = 3/5/7),
``streaming`` (one entry per step size), ``providers`` (the provider each graph ran on, from the
sessions' graph-assignment info), ``machine`` and ``settings``.
"""

from __future__ import annotations

import logging
import os
import platform
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np
import onnxruntime as ort

from captioner import __version__
from captioner.bench.graphs import ExtraGraphs
from captioner.bench.strategies import chunk_sizes, decoder_strategies, encoder_buckets
from captioner.bench.streaming import run_child, speech_like
from captioner.core import SAMPLE_RATE, Provider
from captioner.engine.transcriber import Transcriber
from captioner.models.pack import Pack

__all__ = ["BenchOptions", "run_bench"]

logger = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class BenchOptions:
    """What to measure and how long.

    Attributes:
        provider: ``"auto"``, ``"qnn"``, ``"gpu"`` or ``"cpu"``.
        threads: intra-op threads (0: the runtime's default).
        steps: step sizes of the streaming runs, seconds.
        stream_s: length of the synthetic recording, seconds (ignored with ``audio``).
        audio: a 16 kHz mono recording to stream instead of the synthetic one.
        reps, warmup: repetitions (median) and warm-up calls of the micro-benchmarks.
        decoder_bucket: bucket (seconds) of the decoder comparisons.
        sections: the sections to run.
    """

    provider: Provider = "cpu"
    threads: int = 0
    steps: tuple[float, ...] = (1.0, 2.0)
    stream_s: float = 300.0
    audio: np.ndarray | None = None
    reps: int = 7
    warmup: int = 2
    decoder_bucket: int = 4
    sections: tuple[str, ...] = ("encoder", "decoder", "chunk_sizes", "streaming")


def _placements(info_placement) -> dict[str, str]:
    """graph file -> the EP that ran (most of) its nodes, e.g. ``CPUExecutionProvider``."""
    out = {}
    for name, counts in info_placement.items():
        out[name] = "+".join(ep for ep, _ in sorted(counts.items(), key=lambda kv: -kv[1])) if counts else "?"
    return out


def run_bench(pack: Pack, work_dir: Path, options: BenchOptions, progress: Callable[[str], None],
              pack_label: str = "") -> dict:
    """Measure ``pack`` (see module docstring); extra graphs are written under ``work_dir``."""
    t_start = time.perf_counter()
    result: dict = {
        "captioner": __version__,
        "pack": {"label": pack_label or pack.root.name, "path": str(pack.root), "dims": asdict(pack.dims),
                 "precision": pack.precision, "linear": pack.linear, "layers": pack.layers,
                 "vocab": pack.vocab, "attention": pack.attention, "tail_chunk": pack.long_chunk,
                 "schedules": {k: list(v) for k, v in pack.schedules.items()},
                 "weights_bytes": pack.weights_file().stat().st_size},
        "machine": {"platform": platform.platform(), "python": platform.python_version(), "onnxruntime":
                    ort.__version__, "cpus": os.cpu_count(), "processor": platform.processor() or platform.machine()},
        "settings": {"provider": options.provider, "reps": options.reps, "warmup": options.warmup,
                     "steps": list(options.steps), "decoder_bucket_s": options.decoder_bucket},
    }
    engine = Transcriber.from_pack(pack, options.provider, threads=options.threads or None)
    runtime, model = engine.runtime, engine.model
    result["settings"]["threads"] = runtime.threads
    graphs = ExtraGraphs(pack, work_dir)
    bucket = min((b for b in pack.buckets if b >= options.decoder_bucket), default=pack.buckets[-1])
    if "encoder" in options.sections:
        result["encoder"] = encoder_buckets(model, options.reps, options.warmup, progress)
    if "decoder" in options.sections:
        result["decoder"] = decoder_strategies(model, graphs, bucket, options.reps, options.warmup, progress)
    if "chunk_sizes" in options.sections:
        result["chunk_sizes"] = chunk_sizes(model, graphs, bucket, options.reps, options.warmup, progress)
    info = runtime.info()
    result["providers"] = {"requested": info.requested, "chosen": info.chosen, "summary": info.summary(),
                           "graphs": _placements(info.placement)}
    runtime.close()
    del model, runtime
    if "streaming" in options.sections:
        result["streaming"] = _streaming(pack, options, progress)
        for run in result["streaming"]:
            result["providers"]["graphs"].update(_placements(run.pop("placement", {})))
            if "encoder" in result and "per_round_ms" in run:
                run["typical_round"] = _typical_round(pack, run, result["encoder"])
    result["elapsed_s"] = time.perf_counter() - t_start
    return result


def _typical_round(pack: Pack, run: dict, encoder: dict) -> dict:
    """A round as real speech would run it, from this run's own costs: input = step + 1 s of carry
    (the bucket that holds it), two decoder chunks (prompt + ~6 tokens), the measured host time.

    Random weights hallucinate, so their rounds carry the longest input the policy allows and
    stop by chance; this normalised figure is what the RTF would be with typical rounds.
    """
    step = run["step_s"]
    bucket = min((b for b in pack.buckets if b >= step + 1.0), default=pack.buckets[-1])
    enc = {b["bucket_s"]: b for b in encoder["buckets"]}[bucket]
    st = run["per_round_ms"]
    ms = enc["encoder_ms"] + enc["mel_ms"] + 2 * run["decoder_ms_per_chunk"] + st["host_ms"]["median"] - st["mel_ms"]["median"]
    return {"bucket_s": bucket, "chunks": 2, "round_ms": ms, "rtf": ms / 1000.0 / step}


def _streaming(pack: Pack, options: BenchOptions, progress: Callable[[str], None]) -> list[dict]:
    audio = options.audio if options.audio is not None else speech_like(options.stream_s)
    runs = []
    with tempfile.TemporaryDirectory(prefix="captioner-bench-") as tmp:
        path = Path(tmp) / "audio.npy"
        np.save(path, audio.astype(np.float32))
        for step in _ordered(options.steps):
            progress(f"streaming {len(audio) / SAMPLE_RATE:.0f} s of audio at a {step:g} s step (fresh process)")
            runs.append(run_child(pack.root, path, step, options.provider, options.threads))
    return runs


def _ordered(steps: Sequence[float]) -> list[float]:
    return sorted(set(float(s) for s in steps))
