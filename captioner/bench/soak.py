"""The soak benchmark's measuring half: its audio, the RSS sampler, the analysis, the report, the plot.

The soak runs a long session (two hours of real speech) through the app's own path — the engine
worker with a file capture, recording into a real SQLite store — and checks that nothing drifts:
RSS flat after warm-up, per-round compute flat, lag bounded, every committed word stored once and
in order, and the session's SRT export fast. The session itself (Qt worker, recorder, store) is
composed in :mod:`captioner.commands._soak`, because the bench layer may not import the worker or the
transcript layer; this module only measures and reports (no Qt, no store).

Lag, two ways:

* ``lag_s`` — what the worker emits (``RoundStats.lag_s``): audio fed to the stream but not yet
  processed after a round. The file is read as fast as the engine takes it (accelerated pace), so
  this is the backlog inside the engine, and it must stay below about one step.
* ``live_lag_s`` — the lag a live session on this machine would have had with these rounds' compute
  times: audio arrives in real time, round ``k`` (ending at audio time ``e_k``) starts once its audio
  is there and the previous round is done, ``finish_k = max(e_k, finish_{k-1}) + compute_k`` and
  ``live_lag_k = finish_k − e_k`` (the computation-aware replay). Bounded when the engine keeps up.
"""

from __future__ import annotations

import json
import logging
import os
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from captioner.audio.files import load_audio_file
from captioner.audio.wavfile import WavWriter
from captioner.core import SAMPLE_RATE
from captioner.errors import CaptionerError

__all__ = ["RoundRecord", "RssSampler", "live_lag", "markdown", "rss_bytes", "soak_summary",
           "write_soak_plot", "write_speech_wav"]

logger = logging.getLogger(__name__)

WARMUP_S = 300.0  # audio seconds before RSS must be flat (sessions created, caches reached size)
RSS_FLAT_MB = 30.0  # the issue's bound on RSS after warm-up (max − min)
WINDOW_S = 600.0  # audio seconds per window of the round-time trend
EXPORT_LIMIT_S = 2.0  # the issue's bound on the SRT export of the session
CLIP_GAP_S = 0.8  # silence between joined clips (an utterance closes in it)


def rss_bytes() -> int:
    """Resident set size of this process now, in bytes (Linux ``/proc/self/statm``; 0 elsewhere)."""
    try:
        with open("/proc/self/statm", encoding="ascii") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        return 0


class RssSampler:
    """Samples this process's RSS every ``interval_s`` in a daemon thread.

    ``samples`` is a list of ``(wall_s since start, audio_s, rss_bytes)``; ``audio_s`` comes from
    the ``position`` callable (the audio fed so far), so RSS can be plotted against audio time.
    """

    def __init__(self, position: Callable[[], float], interval_s: float = 2.0) -> None:
        self.samples: list[tuple[float, float, int]] = []
        self._position, self._interval = position, interval_s
        self._stop = threading.Event()
        self._t0 = time.perf_counter()
        self._thread = threading.Thread(target=self._run, name="soak-rss", daemon=True)

    def start(self) -> RssSampler:
        self._t0 = time.perf_counter()
        self._thread.start()
        return self

    def stop(self) -> None:
        """Take a last sample and end the thread."""
        self._stop.set()
        self._thread.join()
        self._sample()

    def _sample(self) -> None:
        self.samples.append((time.perf_counter() - self._t0, self._position(), rss_bytes()))

    def _run(self) -> None:
        while not self._stop.is_set():
            self._sample()
            self._stop.wait(self._interval)


@dataclass(frozen=True, slots=True)
class RoundRecord:
    """One engine round of the soak, as the stream proxy saw it.

    Attributes:
        wall_s: seconds since the session started when the round ended.
        audio_end_s: end of the audio the round processed, on the source's clock (fed − lag).
        compute_ms: the round's ``RoundStats.total_ms``.
        lag_s: ``RoundStats.lag_s`` (fed, not yet processed).
        bucket: encoder bucket in seconds, 0 for a round without a decode.
        skipped_s: audio dropped by an overload skip.
    """

    wall_s: float
    audio_end_s: float
    compute_ms: float
    lag_s: float
    bucket: int
    skipped_s: float = 0.0


def write_speech_wav(out: Path, seconds: float, *, manifest: Path | None = None, audio: Path | None = None,
                     language: str = "en", gap_s: float = CLIP_GAP_S) -> dict[str, Any]:
    """Write ``seconds`` of real speech to ``out`` (16 kHz mono float32 WAV), clip after clip.

    The clips are a manifest's items of ``language`` (long-form files left out: they repeat the
    clips), or the one file ``audio``, joined with ``gap_s`` of silence and repeated until the
    length is reached. Written as it goes: memory holds one clip, never the whole session.

    Returns:
        ``{"seconds", "clips_joined", "distinct_clips", "distinct_s", "source"}``.

    Raises:
        CaptionerError: no usable clip.
    """
    paths: list[Path] = []
    if audio is not None:
        paths = [Path(audio)]
    elif manifest is not None:
        for line in Path(manifest).read_text(encoding="utf-8").splitlines():
            if not line.strip():
                continue
            item = json.loads(line)
            if item.get("language") == language and item.get("kind") != "longform":
                paths.append(Path(manifest).parent / item["audio"])
    if not paths:
        raise CaptionerError("the soak needs speech: pass --manifest JSONL (clips are joined) or --audio FILE")
    clips = [load_audio_file(p) for p in paths]  # a few minutes at most; the session is streamed
    gap = np.zeros(round(gap_s * SAMPLE_RATE), np.float32)
    target = round(seconds * SAMPLE_RATE)
    written = joined = 0
    with WavWriter(out) as w:
        while written < target:
            clip = clips[joined % len(clips)]
            piece = np.concatenate([clip, gap])[: target - written]
            w.write(piece)
            written += len(piece)
            joined += 1
    return {"seconds": written / SAMPLE_RATE, "clips_joined": joined, "distinct_clips": len(clips),
            "distinct_s": round(sum(len(c) for c in clips) / SAMPLE_RATE, 1),
            "source": str(audio if audio is not None else manifest)}


def live_lag(rounds: Sequence[RoundRecord]) -> list[float]:
    """The lag a live session would have had after each round (module docstring), seconds."""
    finish = 0.0
    out = []
    for r in rounds:
        finish = max(r.audio_end_s, finish) + r.compute_ms / 1000.0
        out.append(finish - r.audio_end_s)
    return out


def _pct(values: Iterable[float], q: float) -> float:
    v = list(values)
    return float(np.percentile(v, q)) if v else 0.0


def _slope_per_hour(x_s: Sequence[float], y: Sequence[float]) -> float:
    """Least-squares slope of ``y`` per hour of ``x_s`` (0 with fewer than two points)."""
    if len(x_s) < 2 or max(x_s) - min(x_s) <= 0:
        return 0.0
    return float(np.polyfit(np.asarray(x_s) / 3600.0, np.asarray(y, dtype=np.float64), 1)[0])


def soak_summary(raw: dict[str, Any]) -> dict[str, Any]:
    """The verdicts and headline numbers of a soak run ``raw`` (what :mod:`captioner.commands._soak` returns).

    ``raw`` holds ``audio_s``, ``wall_s``, ``rounds`` (:class:`RoundRecord` as dicts), ``rss`` samples
    ``[wall_s, audio_s, bytes]``, ``words`` (emitted/stored counts and ``equal``), ``export`` (seconds,
    cues), ``skipped_s`` and the setup.
    """
    rounds = [RoundRecord(**r) for r in raw["rounds"]]
    ran = [r for r in rounds if r.bucket > 0]
    audio_s = float(raw["audio_s"])
    warm = min(WARMUP_S, audio_s / 4)
    rss = [(a, b / 2**20) for _, a, b in raw["rss"]]
    after = [m for a, m in rss if a >= warm] or [m for _, m in rss]
    windows: list[dict[str, Any]] = []
    for w0 in np.arange(0.0, max(audio_s, 1e-9), WINDOW_S):
        inside = [r.compute_ms for r in ran if w0 <= r.audio_end_s < w0 + WINDOW_S]
        mem = [m for a, m in rss if w0 <= a < w0 + WINDOW_S and a >= warm]
        if inside:
            windows.append({"from_s": float(w0), "rounds": len(inside), "median_ms": round(_pct(inside, 50), 1),
                            "p95_ms": round(_pct(inside, 95), 1), "mean_ms": round(float(np.mean(inside)), 1),
                            "rss_median_mb": round(_pct(mem, 50), 1) if mem else None,
                            "rss_max_mb": round(max(mem), 1) if mem else None})
    ran_after = [r for r in ran if r.audio_end_s >= warm]
    live = live_lag(rounds)
    lags = [r.lag_s for r in rounds]
    compute_s = sum(r.compute_ms for r in rounds) / 1000.0
    step = float(raw.get("step_s", 2.0))
    rss_range = (max(after) - min(after)) if after else 0.0
    # flat = the level does not drift: the spread of the windows' medians (a round's transient
    # buffers, tens of MB for a 30 s re-inference, show in the max, not in the level)
    levels = [w["rss_median_mb"] for w in windows if w["rss_median_mb"] is not None]
    level_range = (max(levels) - min(levels)) if levels else rss_range
    first, last = (windows[0]["median_ms"], windows[-1]["median_ms"]) if windows else (0.0, 0.0)
    summary: dict[str, Any] = {
        "audio_s": round(audio_s, 1),
        "wall_s": round(float(raw["wall_s"]), 1),
        "compute_rtf": round(compute_s / audio_s, 4) if audio_s else 0.0,
        "wall_rtf": round(float(raw["wall_s"]) / audio_s, 4) if audio_s else 0.0,
        "rounds": len(rounds),
        "decoded_rounds": len(ran),
        "rss_mb": {"start": round(rss[0][1], 1) if rss else 0.0, "end": round(rss[-1][1], 1) if rss else 0.0,
                   "max": round(max(m for _, m in rss), 1) if rss else 0.0,
                   "after_warmup_min": round(min(after), 1) if after else 0.0,
                   "after_warmup_max": round(max(after), 1) if after else 0.0,
                   "after_warmup_range": round(rss_range, 1), "warmup_s": warm,
                   "window_median_range": round(level_range, 1),
                   "slope_mb_per_h": round(_slope_per_hour([a for a, _ in rss if a >= warm],
                                                           [m for a, m in rss if a >= warm]), 2)},
        "round_ms": {"median": round(_pct((r.compute_ms for r in ran), 50), 1),
                     "p95": round(_pct((r.compute_ms for r in ran), 95), 1),
                     "max": round(max((r.compute_ms for r in ran), default=0.0), 1),
                     "slope_ms_per_h": round(_slope_per_hour([r.audio_end_s for r in ran_after],
                                                             [r.compute_ms for r in ran_after]), 2),
                     "first_window_median": first, "last_window_median": last,
                     "windows": windows},
        "lag_s": {"max": round(max(lags, default=0.0), 3), "p95": round(_pct(lags, 95), 3)},
        "live_lag_s": {"max": round(max(live, default=0.0), 3), "p95": round(_pct(live, 95), 3),
                       "end": round(live[-1], 3) if live else 0.0},
        "skipped_s": round(sum(r.skipped_s for r in rounds), 2),
        "words": raw.get("words"),
        "export": raw.get("export"),
        "partial": bool(raw.get("partial")),
    }
    words, export = raw.get("words"), raw.get("export")
    summary["verdicts"] = {
        "rss_flat": level_range <= RSS_FLAT_MB,
        "round_time_flat": bool(windows) and last <= 1.25 * first + 10.0,  # drift beyond machine noise
        "lag_bounded": max(lags, default=0.0) <= step + 0.5
        and max(live, default=0.0) <= 2 * step + max((r.compute_ms for r in ran), default=0.0) / 1000.0,
        "words_stored_once_in_order": None if words is None else bool(words["equal"]),
        "srt_export_fast": None if export is None else float(export["seconds"]) < EXPORT_LIMIT_S and bool(export["parsed"]),
    }
    return summary


def markdown(raw: dict[str, Any], summary: dict[str, Any], plot: str | None = None) -> str:
    """The soak's Markdown report."""
    s, rss, rt, w, ex = summary, summary["rss_mb"], summary["round_ms"], summary["words"], summary["export"]
    ok = {True: "**met**", False: "**not met**", None: "not measured (the run was stopped early)"}
    v = s["verdicts"]
    speech = raw.get("speech") or {"clips_joined": "?", "distinct_clips": "?", "distinct_s": "?", "source": "?"}
    lines = [
        f"## Soak — {s['audio_s'] / 3600:.2f} h of real speech through the worker ({raw['model']}, "
        f"{raw['provider']}, step {raw['step_s']:g} s)",
        "",
        *(["**Partial run**: stopped before the end of the audio; the store and export checks were not reached.", ""]
          if s["partial"] else []),
        *([f"**Stopped early** by its wall-time limit after {s['audio_s'] / 60:.1f} min of the "
           f"{raw.get('file_s', s['audio_s']) / 60:.0f}-min file: the streams were finished and every check covers "
           "the audio fed until then.", ""] if raw.get("stopped_early") else []),
        f"captioner {raw.get('captioner', '?')}, commit {raw.get('commit', '?')}, {raw.get('started', '')}; "
        f"machine: {raw.get('machine', '')}; load average at start {raw.get('load_start', '?')}, "
        f"at end {raw.get('load_end', '?')}.",
        "",
        f"Audio: {speech['clips_joined']} clips joined ({speech['distinct_clips']} distinct, "
        f"{speech['distinct_s']} s) with {CLIP_GAP_S} s gaps, from {speech['source']}. Path: "
        "`CaptionWorker` in a `QThread`, `FileSource` read as fast as the engine takes it, every update through "
        "`SessionRecorder` into a SQLite store on disk, then `export_session` to SRT.",
        "",
        "| check | bound | measured | |",
        "|---|---|---|---|",
        f"| RSS after {rss['warmup_s'] / 60:.0f} min of audio | the 10-min windows' medians within "
        f"{RSS_FLAT_MB:.0f} MB | {rss.get('window_median_range', rss['after_warmup_range']):.1f} MB (every sample: "
        f"{rss['after_warmup_min']:.0f}–{rss['after_warmup_max']:.0f} MB; start {rss['start']:.0f}, end "
        f"{rss['end']:.0f}, max {rss['max']:.0f}; trend {rss['slope_mb_per_h']:+.1f} MB/h) | {ok[v['rss_flat']]} |",
        f"| compute per round | flat (last 10-min window's median ≤ 1.25 × first + 10 ms) | median "
        f"{rt['median']:.0f} ms, p95 {rt['p95']:.0f}, max {rt['max']:.0f}; windows {rt['first_window_median']:.0f} → "
        f"{rt['last_window_median']:.0f} ms; trend {rt['slope_ms_per_h']:+.1f} ms/h | {ok[v['round_time_flat']]} |",
        f"| lag: fed, not processed (the worker's); live-equivalent | ≤ step + 0.5 s; ≤ 2 × step + the longest "
        f"round | max {s['lag_s']['max']:.2f} s, p95 {s['lag_s']['p95']:.2f} s; max {s['live_lag_s']['max']:.2f} s, "
        f"p95 {s['live_lag_s']['p95']:.2f} s, {s['live_lag_s']['end']:.2f} s at the end | {ok[v['lag_bounded']]} |",
        f"| committed words | store = emitted, once, in order | {_words(w)} | {ok[v['words_stored_once_in_order']]} |",
        f"| SRT export of the session | < {EXPORT_LIMIT_S:g} s, parses | {_export(ex)} | {ok[v['srt_export_fast']]} |",
        "",
        f"Engine: {s['rounds']} rounds ({s['decoded_rounds']} decoded), compute RTF {s['compute_rtf']:.3f}, wall "
        f"RTF {s['wall_rtf']:.3f} ({s['wall_s'] / 60:.1f} min); skipped by an overload rule: {s['skipped_s']:.1f} s. "
        "The file is read as fast as the engine takes it, so the worker's lag stays within a step; the "
        "live-equivalent lag is what a live session with these rounds' compute would have shown (audio arriving "
        "in real time, each round starting once its audio is there and the previous round is done).",
        "",
        "| audio window (min) | rounds | round median ms | round p95 ms | RSS median MB | RSS max MB |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    lines += [f"| {x['from_s'] / 60:.0f}–{(x['from_s'] + WINDOW_S) / 60:.0f} | {x['rounds']} | {x['median_ms']:.0f} | "
              f"{x['p95_ms']:.0f} | {_mb(x.get('rss_median_mb'))} | {_mb(x.get('rss_max_mb'))} |" for x in rt["windows"]]
    if plot:
        lines += ["", f"![RSS, compute per round and lag over the session]({plot})"]
    return "\n".join(lines) + "\n"


def _mb(x: float | None) -> str:
    return "–" if x is None else f"{x:.0f}"


def _words(w: dict[str, Any] | None) -> str:
    if w is None:
        return "–"
    diff = "" if w["equal"] else f"; first difference at word {w.get('first_difference')}"
    return f"{w['stored']} stored, {w['emitted']} emitted{diff}"


def _export(ex: dict[str, Any] | None) -> str:
    if ex is None:
        return "–"
    return f"{ex['seconds']:.3f} s, {ex['cues']} cues, {ex['bytes'] / 1024:.0f} KiB, parsed by {ex['parser']}"


def write_soak_plot(raw: dict[str, Any], path: Path) -> Path:
    """``path`` (PNG): RSS, compute per round (with a rolling median) and lag against audio time."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rounds = [RoundRecord(**r) for r in raw["rounds"]]
    ran = [r for r in rounds if r.bucket > 0]
    fig, axes = plt.subplots(3, 1, figsize=(9, 8), sharex=True)
    rss = raw["rss"]
    axes[0].plot([a / 60 for _, a, _ in rss], [b / 2**20 for _, _, b in rss], lw=1)
    axes[0].set_ylabel("RSS (MB)")
    axes[0].set_title(f"Soak: {raw['audio_s'] / 3600:.2f} h of speech, {raw['model']}, step {raw['step_s']:g} s")
    x = np.array([r.audio_end_s / 60 for r in ran])
    y = np.array([r.compute_ms for r in ran])
    axes[1].scatter(x, y, s=2, alpha=0.3, label="round")
    if len(y) >= 25:
        k = 51 if len(y) > 200 else 11
        med = np.array([np.median(y[max(0, i - k // 2): i + k // 2 + 1]) for i in range(len(y))])
        axes[1].plot(x, med, color="C3", lw=1.5, label=f"rolling median ({k} rounds)")
    axes[1].set_ylabel("compute per round (ms)")
    axes[1].legend(fontsize=8, loc="upper right")
    axes[2].plot([r.audio_end_s / 60 for r in rounds], [r.lag_s for r in rounds], lw=0.8,
                 label="fed, not processed (worker)")
    axes[2].plot([r.audio_end_s / 60 for r in rounds], live_lag(rounds), lw=0.8, label="live-equivalent")
    axes[2].set_ylabel("lag (s)")
    axes[2].set_xlabel("audio time (min)")
    axes[2].legend(fontsize=8, loc="upper right")
    fig.tight_layout()
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path
