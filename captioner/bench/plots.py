"""PNG plots of a bench result (matplotlib, a development dependency; absent → no plots, said so)."""

from __future__ import annotations

import logging
from pathlib import Path

__all__ = ["matplotlib_available", "write_plots"]

logger = logging.getLogger(__name__)

_STAGES = (("mel_ms", "log-mel"), ("encoder_ms", "encoder"), ("decoder_ms", "decoder"),
           ("validation_ms", "validation"), ("dtw_ms", "DTW"), ("other_ms", "other Python"))


def matplotlib_available() -> bool:
    """True when matplotlib can be imported."""
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        return False
    return True


def write_plots(result: dict, out_dir: Path) -> list[Path]:
    """Write ``stages.png`` (per-round ms by stage and step), ``decoder.png`` (strategies vs T),
    ``chunk_sizes.png`` and ``encoder.png`` into ``out_dir``; returns the files written."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    written: list[Path] = []

    def save(fig, name: str) -> None:
        path = out_dir / name
        fig.tight_layout()
        fig.savefig(path, dpi=110)
        plt.close(fig)
        written.append(path)

    runs = [r for r in result.get("streaming", []) if "per_round_ms" in r]
    if runs:
        fig, ax = plt.subplots(figsize=(6, 4))
        labels = [f"{r['step_s']:g} s step" for r in runs]
        bottom = [0.0] * len(runs)
        for key, label in _STAGES:
            values = [max(0.0, r["per_round_ms"][key]["mean"]) for r in runs]
            ax.bar(labels, values, bottom=bottom, label=label)
            bottom = [b + v for b, v in zip(bottom, values, strict=True)]
        ax.set_ylabel("ms per round (mean)")
        ax.set_title("Streaming: cost per round by stage")
        ax.legend(fontsize=8)
        save(fig, "stages.png")
    dec = result.get("decoder")
    if dec:
        fig, ax = plt.subplots(figsize=(6, 4))
        ts = dec["t_values"]
        for name, rows in dec["strategies"].items():
            ax.plot(ts, [rows[str(t)]["ms"] for t in ts], marker="o", label=name)
        ax.set_xlabel("positions decoded T")
        ax.set_ylabel("ms")
        ax.set_title(f"Decoder strategies ({dec['bucket_s']} s bucket)")
        ax.legend()
        save(fig, "decoder.png")
    cs = result.get("chunk_sizes")
    if cs:
        fig, ax = plt.subplots(figsize=(6, 4))
        ts = cs["t_values"]
        for k, row in cs["sizes"].items():
            ax.step(ts, [row["by_t"][str(t)]["ms"] for t in ts], where="mid", marker="o", label=f"K = {k}")
        ax.set_xlabel("positions decoded T")
        ax.set_ylabel("ms")
        ax.set_title("Tail chunk size (paper Table 8)")
        ax.legend()
        save(fig, "chunk_sizes.png")
    enc = result.get("encoder")
    if enc:
        fig, ax = plt.subplots(figsize=(6, 4))
        rows = enc["buckets"]
        ax.bar([f"{b['bucket_s']} s" for b in rows], [b["encoder_ms"] for b in rows])
        ax.set_ylabel("ms")
        ax.set_title("Encoder per bucket")
        save(fig, "encoder.png")
    return written
