"""The streaming part of the bench: the real engine over a long recording, in a fresh process.

Each step size runs in its own child process (``python -m captioner.bench.streaming``) so that peak
RSS and the start-up time belong to the engine alone, not to the bench that built packs before.
The child:

1. opens the pack and the runtime and feeds the first ``step`` of audio: **first round** is the time
   from the process start (imports included) and from opening the pack to that round's update,
   its sessions created as it needs them (the worst case: the app opens them all on a thread of
   its own meanwhile, ``Runtime.prepare``);
2. streams the whole recording through a fresh :class:`~captioner.engine.Stream`, one step at a time
   as fast as possible, keeping every round's :class:`~captioner.core.RoundStats` (sessions still
   created as rounds need them: the 30 s bucket only if a round needs it); notes the RSS;
3. creates the sessions of every graph of the pack (the whole pack loaded) and notes the RSS again;
4. reports the real-time factors (``rtf``: engine compute ÷ audio, ``wall_rtf``: wall ÷ audio, as
   :mod:`captioner.engine.transcriber` defines them), per-round stage costs, tokens and chunks per round, peak RSS and the
   provider that ran each graph, as one JSON line on stdout.

Speech-like audio (:func:`speech_like`): without a TTS at run time the bench synthesises voiced
"syllables" (a 90–220 Hz harmonic source through three formant resonances, plus breath noise) grouped
into words and phrases with pauses, at conversational level; only the shape of the load matters.
"""

from __future__ import annotations

import json
import logging
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

from captioner.core import SAMPLE_RATE, Provider

__all__ = ["peak_rss_bytes", "run_child", "speech_like", "summarise_rounds"]

logger = logging.getLogger(__name__)

STAGES = ("mel_ms", "encoder_ms", "decoder_ms", "validation_ms", "dtw_ms")


def speech_like(seconds: float, seed: int = 0) -> np.ndarray:
    """float32 [seconds·16000] of speech-shaped sound: phrases of 2–12 words, 0.3–1.2 s pauses."""
    rng = np.random.default_rng(seed)
    n = int(seconds * SAMPLE_RATE)
    envelope = np.zeros(n, np.float32)
    pitch = np.full(n, 120.0, np.float32)
    t = 0.3
    while t < seconds:
        for _ in range(int(rng.integers(2, 13))):  # a phrase
            for _ in range(int(rng.integers(1, 4))):  # a word of 1–3 syllables
                dur = float(rng.uniform(0.12, 0.28))
                a, b = int(t * SAMPLE_RATE), min(n, int((t + dur) * SAMPLE_RATE))
                if b <= a:
                    break
                envelope[a:b] = np.maximum(envelope[a:b], np.hanning(b - a) * rng.uniform(0.5, 1.0))
                pitch[a:b] = rng.uniform(90.0, 220.0) * np.linspace(1.05, 0.95, b - a)
                t += dur * 0.9
            t += float(rng.uniform(0.03, 0.12))
        t += float(rng.uniform(0.3, 1.2))
    phase = 2 * np.pi * np.cumsum(pitch) / SAMPLE_RATE
    harmonics = np.zeros(n)
    for h in range(1, 25):
        harmonics += np.sin(h * phase) / h
    source = harmonics.astype(np.float32)
    source += 0.3 * rng.standard_normal(n).astype(np.float32)
    spectrum = np.fft.rfft(source)
    freqs = np.fft.rfftfreq(n, 1.0 / SAMPLE_RATE)
    shape = sum(np.exp(-0.5 * ((freqs - f) / w) ** 2) for f, w in ((500, 150), (1500, 250), (2500, 300)))
    voiced = np.fft.irfft(spectrum * (0.05 + shape), n).astype(np.float32)
    out = voiced * envelope
    out *= 0.1 / max(1e-9, float(np.sqrt(np.mean(out**2))))  # ≈ −20 dBFS RMS
    return (out + 0.001 * rng.standard_normal(n)).astype(np.float32)  # room noise at −60 dBFS


def peak_rss_bytes() -> int:
    """Peak resident set size of this process in bytes."""
    try:
        import resource

        peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        return int(peak if sys.platform == "darwin" else peak * 1024)
    except ImportError:  # Windows
        import psutil

        info = psutil.Process().memory_info()
        return int(getattr(info, "peak_wset", info.rss))


def _rss_bytes() -> int:
    import psutil

    return int(psutil.Process().memory_info().rss)


def summarise_rounds(rounds: list[dict], audio_s: float, wall_s: float) -> dict:
    """Stage medians/means per decoded round, tokens and chunks per round, RTF (``rtf`` compute, ``wall_rtf``).

    ``ort_ms`` is the time inside ONNX Runtime runs (encoder + decoder); ``host_ms`` the round's wall
    time minus that (mel, validation, DTW and bookkeeping, all Python/numpy); ``other_ms`` what is
    left after the named host stages (the engine's own Python bookkeeping).
    """
    from captioner.engine.transcriber import real_time_factor  # here: the child times its imports

    decoded = [r for r in rounds if r["bucket"]]
    compute_s = sum(r["total_ms"] for r in rounds) / 1000.0
    out: dict = {"rounds": len(rounds), "decoded_rounds": len(decoded), "audio_s": audio_s, "wall_s": wall_s,
                 "rtf": real_time_factor(compute_s, audio_s), "wall_rtf": real_time_factor(wall_s, audio_s)}
    if not decoded:
        return out
    for r in decoded:
        r["ort_ms"] = r["encoder_ms"] + r["decoder_ms"]
        r["host_ms"] = r["total_ms"] - r["ort_ms"]
        r["other_ms"] = r["total_ms"] - sum(r[s] for s in STAGES)
    stages = {}
    for key in (*STAGES, "ort_ms", "host_ms", "other_ms", "total_ms"):
        values = [r[key] for r in decoded]
        stages[key] = {"median": statistics.median(values), "mean": statistics.fmean(values), "max": max(values)}
    out["per_round_ms"] = stages
    out["tokens_per_round"] = statistics.fmean(r["tokens"] for r in decoded)
    out["chunks_per_round"] = statistics.fmean(r["chunks"] for r in decoded)
    chunk_ms = sum(r["decoder_ms"] for r in decoded) / max(1, sum(r["chunks"] for r in decoded))
    out["decoder_ms_per_chunk"] = chunk_ms
    non_decoder = sum(r["total_ms"] - r["decoder_ms"] for r in rounds) / 1000.0
    out["rtf_without_decoder"] = real_time_factor(non_decoder, audio_s)
    # Decode-cost normalised: as if every decoded round had stopped after its first two chunks (the
    # prompt + ~6 tokens, a typical 2 s of speech), with the chunk cost measured here.
    out["rtf_two_chunks"] = real_time_factor(non_decoder + len(decoded) * 2 * chunk_ms / 1000.0, audio_s)
    buckets: dict[str, int] = {}
    stops: dict[str, int] = {}
    for r in rounds:
        buckets[str(r["bucket"])] = buckets.get(str(r["bucket"]), 0) + 1
        stops[str(r["stop_reason"])] = stops.get(str(r["stop_reason"]), 0) + 1
    out["buckets"], out["stop_reasons"] = buckets, stops
    out["reinferred_rounds"] = sum(1 for r in rounds if r["reinferred"])
    return out


def _child(pack_dir: str, audio_path: str, step_s: float, provider: Provider, threads: int) -> dict:
    """Steps 1–4 of the module docstring; returns the JSON-able result."""
    import psutil

    t_process = psutil.Process().create_time()
    t_open = time.perf_counter()
    from captioner.engine import StreamConfig, Transcriber

    engine = Transcriber.open(Path(pack_dir), provider, threads=threads or None, verify=False)
    runtime, model = engine.runtime, engine.model
    audio = np.load(audio_path)
    config = StreamConfig(step_s=step_s, language="en")
    step_n = round(step_s * SAMPLE_RATE)
    probe = engine.stream(config)
    probe.feed(audio[:step_n])
    probe.step()
    first_round_s = time.perf_counter() - t_open
    first_round_process_s = time.time() - t_process
    stream = engine.stream(config)
    rounds: list[dict] = []
    t0 = time.perf_counter()
    for pos in range(0, len(audio), step_n):
        stream.feed(audio[pos : pos + step_n])
        update = stream.step()
        if update is not None and update.stats is not None:
            rounds.append(_stats(update.stats))
    final = stream.finish()
    if final.stats is not None:
        rounds.append(_stats(final.stats))
    wall_s = time.perf_counter() - t0
    sessions_used = len(runtime.loaded())
    rss_streaming, peak_streaming = _rss_bytes(), peak_rss_bytes()
    for bucket in model.buckets:  # the whole pack loaded
        model.preload(bucket)
    info = runtime.info()
    result = summarise_rounds(rounds, len(audio) / SAMPLE_RATE, wall_s)
    result.update(
        step_s=step_s, threads=runtime.threads, provider=info.chosen, provider_summary=info.summary(),
        first_round_s=first_round_s, first_round_from_process_start_s=first_round_process_s,
        rss_streaming_bytes=rss_streaming, peak_rss_streaming_bytes=peak_streaming, sessions_streaming=sessions_used,
        rss_loaded_bytes=_rss_bytes(), peak_rss_bytes=peak_rss_bytes(),
        weights_bytes=runtime.weights.nbytes, sessions=len(runtime.loaded()),
        placement={name: dict(counts) for name, counts in info.placement.items()},
        words=len(stream.words),
    )
    return result


def _stats(stats) -> dict:
    return {k: getattr(stats, k) for k in ("bucket", "input_s", "tokens", "chunks", "mel_ms", "encoder_ms",
                                           "decoder_ms", "validation_ms", "dtw_ms", "total_ms", "stop_reason",
                                           "reinferred")}


def run_child(pack_dir: Path, audio_path: Path, step_s: float, provider: Provider, threads: int,
              timeout_s: float = 3600.0) -> dict:
    """Run the streaming measurement in a fresh interpreter and return its result.

    Raises:
        RuntimeError: the child failed (its stderr tail is in the message).
    """
    cmd = [sys.executable, "-m", "captioner.bench.streaming", str(pack_dir), str(audio_path), str(step_s),
           provider, str(threads)]
    env = dict(os.environ)
    root = str(Path(__file__).resolve().parents[2])
    env["PYTHONPATH"] = root + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout_s, env=env, check=False)
    if proc.returncode != 0:
        raise RuntimeError(f"streaming run failed (exit {proc.returncode}): {proc.stderr.strip()[-800:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def main(argv: list[str]) -> int:
    """Child entry point: ``PACK AUDIO.npy STEP PROVIDER THREADS`` → one JSON line on stdout."""
    pack_dir, audio_path, step_s, provider, threads = argv
    result = _child(pack_dir, audio_path, float(step_s), provider, int(threads))  # type: ignore[arg-type]
    sys.stdout.write(json.dumps(result) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
