"""The accuracy result (:func:`captioner.bench.accuracy.run_accuracy`) as Markdown tables and plots."""

from __future__ import annotations

from pathlib import Path

__all__ = ["compare", "markdown", "merge", "write_plots"]

_WORST = 6
_TEXT_CHARS = 400


def _pct(x: float | None) -> str:
    return "–" if x is None else f"{100 * x:.1f} %"


def _num(x: float | None, fmt: str = ".2f") -> str:
    return "–" if x is None else format(x, fmt)


def _gap(row: dict, base: dict) -> str:
    if not row or not base or row.get("wer") is None or base.get("wer") is None:
        return "–"
    return f"{100 * (row['wer'] - base['wer']):+.1f}"


def _clip(text: str) -> str:
    text = text.replace("|", "\\|")
    return text if len(text) <= _TEXT_CHARS else text[:_TEXT_CHARS] + " …"


def _split_lines(english: dict, modes: list[str]) -> list[str]:
    """Where each live mode's compute went (English items): encoder and decoder, closing rounds, and
    rounds heard in the 30 s window, as shares of the mode's compute."""
    lines = []
    for mode in modes:
        row = english.get(mode, {})
        split, total = row.get("compute_split"), row.get("compute_s")
        if not split or not total:
            continue
        share = {k: 100.0 * v / total for k, v in split.items()}
        lines.append(f"- {mode}: encoder (log-mel included) {share['encoder_s']:.0f} %, decoder {share['decoder_s']:.0f} % "
                     f"of the compute; closing rounds {share['closing_s']:.0f} %, rounds in the 30 s window "
                     f"{share['full_window_s']:.0f} %.")
    return ["Where the live compute went:", "", *lines, ""] if lines else []


def _changed_lines(english: dict, modes: list[str]) -> list[str]:
    """How much the live captions flicker (English items): shown words that a later update took back
    and did not show again the same (``changed_words``), in all and per audio minute."""
    cells = []
    for mode in modes:
        row = english.get(mode, {})
        if "changed_words" in row and row.get("seconds"):
            n = row["changed_words"]
            cells.append(f"{mode} {n} ({60.0 * n / row['seconds']:.1f} per audio minute)")
    if not cells:
        return []
    return ["Shown words changed later (taken back by a later update and not shown again the same; a "
            "reader sees them flicker): " + "; ".join(cells) + ".", ""]


def _fw_latency_lines(summ: dict, modes: list[str]) -> list[str]:
    """The live modes' latency against faster-whisper's word ends (``--reference-ct2``), English
    items, each half and each kind; nothing without that reference."""
    live = [m for m in modes if m.startswith("live")]
    rows = []
    for group, by_mode in summ.items():
        if group.startswith("language:"):
            continue
        cells = [by_mode.get(m, {}).get("latency_fw_s") or {} for m in live]
        if any(c.get("n") for c in cells):
            rows.append(f"| {group} | " + " | ".join(
                f"{c['median']:.2f} / {c['p90']:.2f} ({c['n']})" if c.get("n") else "–" for c in cells) + " |")
    if not rows:
        return []
    english = summ.get("english", {})
    split = []
    for m in live:
        last, rest = (english.get(m, {}).get(k) or {} for k in ("latency_fw_last_update_s", "latency_fw_before_s"))
        if last.get("n") and rest.get("n"):
            split.append(f"{m}: {last['median']:.2f} / {last['p90']:.2f} s ({last['n']} words) and "
                         f"{rest['median']:.2f} / {rest['p90']:.2f} s ({rest['n']})")
    return ["### Latency against faster-whisper's word ends", "",
            "Emission − the end of the same word in faster-whisper's default decoding (word timestamps), "
            "an independent time reference: median / p90 in seconds (matched words).", "",
            "| group | " + " | ".join(live) + " |", "|---|" + "---|" * len(live), *rows, "",
            *([("English items, the words first shown by a recording's last update (`finish()`'s closing "
                "decode: words it corrected, words spoken after the last round) and the rest: " + "; ".join(split)
                + "."), ""] if split else [])]


# issue 25's bound on a live mode's deleted words: offline's + 10 % per kind
DELETION_BOUND = 1.10


def _deletion_lines(summ: dict, modes: list[str]) -> list[str]:
    """The deleted words (reference words a mode left out) per group and mode, and each live mode's
    ratio to offline's, starred where it is over :data:`DELETION_BOUND` (issue 25's target)."""
    live = [m for m in modes if m.startswith("live")]
    if not live:
        return []
    lines = ["### Deleted words by kind", "",
             f"Reference words each mode left out (after the normaliser); a live mode's ratio to offline's, "
             f"\\* where it is over {DELETION_BOUND:.2f} (issue 25's bound: offline's + 10 %). Where offline "
             "loops (insertions) it deletes little, so a ratio there says little.", "",
             "| group | " + " | ".join(modes) + " | " + " | ".join(f"{m} / offline" for m in live) + " |",
             "|---|" + "---|" * (len(modes) + len(live))]
    for group, by_mode in summ.items():
        base = by_mode.get("offline", {})
        if "deletions" not in base:
            continue
        cells = [str(by_mode.get(m, {}).get("deletions", "–")) for m in modes]
        ratios = []
        for m in live:
            d = by_mode.get(m, {}).get("deletions")
            if d is None:
                ratios.append("–")
            elif base["deletions"] == 0:
                ratios.append("–" if d == 0 else f"+{d} \\*")
            else:
                r = d / base["deletions"]
                ratios.append(f"{r:.2f}" + (" \\*" if r > DELETION_BOUND else ""))
        lines.append(f"| {group} | " + " | ".join(cells) + " | " + " | ".join(ratios) + " |")
    return [*lines, ""]


def _vocabulary_lines(acc: dict, modes: list[str]) -> list[str]:
    """The listed words of a ``--vocabulary`` run, per live mode: recalled of those in the references,
    and invented (said by the engine, not in the reference); nothing without a vocabulary."""
    vocabulary = acc["settings"].get("vocabulary") or []
    if not vocabulary:
        return []
    lines = [f"### Vocabulary ({len(vocabulary)} entries: {', '.join(vocabulary)})", "",
             "| mode | listed words in the references | recalled | invented |", "|---|---|---|---|"]
    for mode in modes:
        counts = [row["modes"][mode]["listed"] for row in acc["items"] if "listed" in row["modes"].get(mode, {})]
        if counts:
            lines.append(f"| {mode} | {sum(c['in_reference'] for c in counts)} | "
                         f"{sum(c['recalled'] for c in counts)} | {sum(c['invented'] for c in counts)} |")
    return [*lines, ""]


def markdown(acc: dict, header: str = "") -> str:
    """Summary per mode, WER by kind, non-speech words, stutters and the worst items."""
    modes = acc["settings"]["modes"]
    summ = acc["summary"]
    lines = [header or "## Accuracy on real speech", ""]
    variant = acc["settings"].get("stream_config") or {}
    settings = ", ".join(f"`{k}={v}`" for k, v in variant.items())
    if variant and acc["settings"].get("paired"):
        lines += [f"Paired (`--paired`): the `_set` live modes ran with {settings} (`--set`), the others with the "
                  "engine's defaults, the two in turns first from item to item, so their latency and RTF "
                  "were measured in the same minutes of the machine.", ""]
    elif variant:
        lines += [f"The live modes ran with {settings} (`--set`); the engine's defaults otherwise.", ""]
    speed = acc["settings"].get("speed", 1.0)
    if speed != 1.0:
        lines += [f"Every recording played at {speed:g}× speed (`--speed`: resampled, its pitch moving with its "
                  "tempo), the references as they are.", ""]
    english = summ.get("english", {})
    noise = acc.get("nonspeech", {})
    lines += ["| mode | English WER | gap vs offline (points) | CER | latency median / mean / p90 (s) | "
              "start error median (s) | first word start − speech onset, median (s) | words in leading silence | "
              "stutters | non-speech words | RTF |",
              "|---|---|---|---|---|---|---|---|---|---|---|"]
    base = english.get("offline", {})
    for mode in modes:
        row = english.get(mode, {})
        if not row:
            continue
        lat, se = row.get("latency_s"), row.get("start_error_s")
        lat_s = "–" if not lat or lat["n"] == 0 else f"{lat['median']:.2f} / {lat['mean']:.2f} / {lat['p90']:.2f}"
        se_s = "–" if not se or se["n"] == 0 else f"{se['median']:.2f}"
        first = row.get("first_start_minus_onset_s") or {}
        first_s = f"{first['median']:+.2f}" if first.get("n") else "–"
        ns = sum(k["modes"][mode]["words"] for k in noise.values() if mode in k["modes"]) if noise else None
        gap = "–" if mode == "offline" else _gap(row, base)
        lines.append(f"| {mode} | {_pct(row['wer'])} | {gap} | {_pct(row['cer'])} | {lat_s} | {se_s} | {first_s} | "
                     f"{row.get('leading_words', '–')} | {row['stutters']} | {'–' if ns is None else ns} | "
                     f"{_num(row['rtf'], '.3f')} |")
    n_items = english.get("offline", {}).get("items", 0)
    secs = english.get("offline", {}).get("seconds", 0.0)
    lines += ["", f"English corpus: {n_items} items, {secs / 60:.1f} min. WER/CER after Whisper's English "
              "normaliser, corpus rate = errors ÷ reference words. Latency: emission (simulated real time: "
              "round start + its compute) − the offline word's end; start error: |start − offline start|. "
              "Speech onset: Silero VAD (no padding); leading-silence words start > 0.1 s before it. "
              "RTF: compute ÷ audio seconds, same run.", ""]
    lines += _split_lines(english, modes)
    lines += _changed_lines(english, modes)
    lines += _fw_latency_lines(summ, modes)

    lines += _vocabulary_lines(acc, modes)
    lines += ["### WER by kind", "", "| group | items | min | " + " | ".join(modes) + " | " +
              " | ".join(f"gap {m}" for m in modes if m.startswith("live")) + " |",
              "|---|---|---|" + "---|" * (len(modes) + sum(m.startswith("live") for m in modes))]
    for group, by_mode in summ.items():
        base = by_mode.get("offline", {})
        if not base:
            continue
        measure = "cer" if group == "language:zh" else "wer"
        cells = [_pct(by_mode.get(m, {}).get(measure)) for m in modes]
        gaps = [_gap(by_mode.get(m, {}), base) for m in modes if m.startswith("live")]
        label = group + (" (CER)" if measure == "cer" else "")
        lines.append(f"| {label} | {base['items']} | {base['seconds'] / 60:.1f} | " + " | ".join(cells) + " | "
                     + " | ".join(gaps) + " |")
    lines.append("")
    lines += _deletion_lines(summ, modes)

    lines += ["### Every measure by group and mode", "",
              "| group | mode | WER | CER | gap (points) | latency median / p90 (s) | start error median (s) | "
              "leading-silence words | stutters | RTF |", "|---|---|---|---|---|---|---|---|---|---|"]
    for group, by_mode in summ.items():
        base = by_mode.get("offline", {})
        for mode in modes:
            row = by_mode.get(mode, {})
            if not row:
                continue
            lat, se = row.get("latency_s") or {}, row.get("start_error_s") or {}
            lat_s = f"{lat['median']:.2f} / {lat['p90']:.2f}" if lat.get("n") else "–"
            se_s = f"{se['median']:.2f}" if se.get("n") else "–"
            gap = "–" if mode == "offline" else _gap(row, base)
            lines.append(f"| {group} | {mode} | {_pct(row['wer'])} | {_pct(row['cer'])} | {gap} | {lat_s} | {se_s} | "
                         f"{row.get('leading_words', '–')} | {row['stutters']} | {_num(row['rtf'], '.3f')} |")
    lines.append("")

    if noise:
        lines += ["### Words on non-speech", "", "| signal | level | " + " | ".join(modes) + " |",
                  "|---|---|" + "---|" * len(modes)]
        for kind, row in noise.items():
            level = "digital zero" if row["level_dbfs"] == float("-inf") else f"{row['level_dbfs']:g} dBFS"
            cells = [str(row["modes"][m]["words"]) if m in row["modes"] else "–" for m in modes]
            lines.append(f"| {kind} ({row['seconds']:g} s) | {level} | " + " | ".join(cells) + " |")
        lines.append("")
        texts = [(k, m, r["text"]) for k, row in noise.items() for m, r in row["modes"].items() if r["text"]]
        if texts:
            lines += ["What was emitted:", ""] + [f"- {k}, {m}: “{_clip(t)}”" for k, m, t in texts] + [""]

    stutters = [(it["id"], m, s) for it in acc["items"] for m, r in it["modes"].items() for s in r["stutters"]]
    if stutters:
        lines += ["### Stutters", "", "| item | mode | n-gram × repeats |", "|---|---|---|"]
        lines += [f"| {i} | {m} | “{_clip(s['ngram'])}” × {s['repeats']} |" for i, m, s in stutters[:40]]
        if len(stutters) > 40:
            lines.append(f"| … | | {len(stutters) - 40} more (JSON) |")
        lines.append("")

    for mode in (m for m in modes if m != "offline"):
        rows = [it for it in acc["items"] if mode in it["modes"]]
        rows.sort(key=lambda it: it["modes"][mode]["wer"]["errors"] - it["modes"]["offline"]["wer"]["errors"],
                  reverse=True)
        worst = [it for it in rows[:_WORST]
                 if it["modes"][mode]["wer"]["errors"] > it["modes"]["offline"]["wer"]["errors"]]
        if not worst:
            continue
        lines += [f"### Worst items, {mode} (most errors over offline)", ""]
        for it in worst:
            r, o = it["modes"][mode], it["modes"]["offline"]
            lines += [f"- **{it['id']}** ({it['kind']}, {it['seconds']:.1f} s): {mode} {r['wer']['errors']} errors, "
                      f"offline {o['wer']['errors']} of {o['wer']['ref']} words",
                      f"  - reference: {_clip(it['reference'])}", f"  - offline: {_clip(o['hypothesis'])}",
                      f"  - {mode}: {_clip(r['hypothesis'])}"]
        lines.append("")
    if acc.get("skipped"):
        lines += [f"Skipped {len(acc['skipped'])} item(s): " +
                  "; ".join(f"{s['id']} ({s['why']})" for s in acc["skipped"][:10]), ""]
    return "\n".join(lines)


def write_plots(acc: dict, out_dir: Path) -> list[Path]:
    """``accuracy_wer.png`` (WER by group and mode) and ``accuracy_latency.png`` (latency
    distribution per live mode) into ``out_dir``; returns the files written."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    modes = acc["settings"]["modes"]
    written: list[Path] = []
    groups = [g for g, by in acc["summary"].items() if by.get("offline")]
    if groups:
        fig, ax = plt.subplots(figsize=(max(6, 1.4 * len(groups)), 4))
        width = 0.8 / len(modes)
        x = np.arange(len(groups))
        for k, mode in enumerate(modes):
            vals = [100 * (acc["summary"][g].get(mode, {}).get("wer") or 0.0) for g in groups]
            ax.bar(x + k * width, vals, width, label=mode)
        ax.set_xticks(x + width * (len(modes) - 1) / 2, groups, rotation=20, ha="right", fontsize=8)
        ax.set_ylabel("WER %")
        ax.set_title("WER by group: offline vs live")
        ax.legend(fontsize=8)
        fig.tight_layout()
        path = out_dir / "accuracy_wer.png"
        fig.savefig(path, dpi=110)
        plt.close(fig)
        written.append(path)
    live = [m for m in modes if m.startswith("live")]
    data = {m: [x for it in acc["items"] if it["language"] == "en" for x in it["modes"].get(m, {}).get("latency_s", [])]
            for m in live}
    if any(data.values()):
        fig, ax = plt.subplots(figsize=(6, 4))
        for mode, values in data.items():
            if values:
                ax.hist(values, bins=60, range=(-2, 6), histtype="step", label=f"{mode} (n={len(values)})")
        ax.set_xlabel("emission − offline word end, s")
        ax.set_ylabel("words")
        ax.set_title("Per-word latency (English items)")
        ax.legend(fontsize=8)
        fig.tight_layout()
        path = out_dir / "accuracy_latency.png"
        fig.savefig(path, dpi=110)
        plt.close(fig)
        written.append(path)
    return written


def compare(before: dict, after: dict, labels: tuple[str, str] = ("before", "after")) -> str:
    """Two accuracy results (the ``accuracy`` objects of two runs) side by side: WER per group and
    mode, then latency, stutters and non-speech words per mode; for before/after tables."""
    modes = [m for m in after["settings"]["modes"] if m in before["settings"]["modes"]]
    a, b = labels
    lines = [f"| group | mode | WER {a} | WER {b} | change (points) |", "|---|---|---|---|---|"]
    for group, by_mode in after["summary"].items():
        for mode in modes:
            old = before["summary"].get(group, {}).get(mode, {})
            new = by_mode.get(mode, {})
            if not old or not new:
                continue
            change = "–" if old.get("wer") is None or new.get("wer") is None else f"{100 * (new['wer'] - old['wer']):+.1f}"
            lines.append(f"| {group} | {mode} | {_pct(old.get('wer'))} | {_pct(new.get('wer'))} | {change} |")
    lines += ["", f"| mode | latency median / p90 {a} | {b} | stutters {a} | {b} | non-speech words {a} | {b} | "
              f"RTF {a} | {b} |", "|---|---|---|---|---|---|---|---|---|"]

    def lat(acc: dict, mode: str) -> str:
        s = acc["summary"].get("english", {}).get(mode, {}).get("latency_s") or {}
        return f"{s['median']:.2f} / {s['p90']:.2f}" if s.get("n") else "–"

    def ns(acc: dict, mode: str) -> str:
        rows = [k["modes"][mode]["words"] for k in acc.get("nonspeech", {}).values() if mode in k["modes"]]
        return str(sum(rows)) if rows else "–"

    def eng(acc: dict, mode: str, key: str):
        return acc["summary"].get("english", {}).get(mode, {}).get(key)

    for mode in modes:
        lines.append(f"| {mode} | {lat(before, mode)} | {lat(after, mode)} | {eng(before, mode, 'stutters')} | "
                     f"{eng(after, mode, 'stutters')} | {ns(before, mode)} | {ns(after, mode)} | "
                     f"{_num(eng(before, mode, 'rtf'), '.3f')} | {_num(eng(after, mode, 'rtf'), '.3f')} |")
    return "\n".join(lines)


def merge(results: list[dict]) -> dict:
    """One result from runs of the same pack and modes over disjoint items (e.g. ``--kinds`` split
    over parallel processes): items and non-speech joined, summaries recomputed; the first run's
    header facts, the longest elapsed time.

    Raises:
        ValueError: the runs' modes differ or an item id occurs twice.
    """
    from captioner.bench.accuracy import summarise

    accs = [r.get("accuracy", r) for r in results]
    modes = accs[0]["settings"]["modes"]
    if any(a["settings"]["modes"] != modes for a in accs):
        raise ValueError("the runs measured different modes")
    items = [it for a in accs for it in a["items"]]
    ids = [it["id"] for it in items]
    if len(set(ids)) != len(ids):
        raise ValueError("an item occurs in more than one run")
    acc = {**accs[0], "items": items, "skipped": [s for a in accs for s in a.get("skipped", [])],
           "nonspeech": {k: v for a in accs for k, v in a.get("nonspeech", {}).items()},
           "summary": summarise(items, modes), "elapsed_s": max(a["elapsed_s"] for a in accs),
           "merged_runs": len(accs)}
    return {**results[0], "accuracy": acc} if "accuracy" in results[0] else acc


def main(argv: list[str] | None = None) -> int:
    """``python -m captioner.bench.accuracy_report BEFORE.json AFTER.json``: the comparison table
    (or, with one file, its report again) on stdout; ``--merge OUT.json A.json B.json …`` joins runs
    over disjoint items into one result (and prints its report)."""
    import argparse
    import json
    import sys

    parser = argparse.ArgumentParser(description="Compare two accuracy bench JSON results, or re-render one.")
    parser.add_argument("json", nargs="+", type=Path, help="one or two --json outputs of the accuracy bench")
    parser.add_argument("--merge", type=Path, metavar="OUT.json", help="merge the runs (disjoint items) into OUT")
    args = parser.parse_args(argv)
    runs = [json.loads(p.read_text(encoding="utf-8")) for p in args.json]
    if args.merge:
        merged = merge(runs)
        args.merge.write_text(json.dumps(merged, indent=1), encoding="utf-8")
        sys.stdout.write(markdown(merged.get("accuracy", merged)) + "\n")
        return 0
    if len(args.json) > 2:
        parser.error("give one or two JSON files")
    runs = [r.get("accuracy", r) for r in runs]
    if len(runs) == 1:
        sys.stdout.write(markdown(runs[0]) + "\n")
    else:
        sys.stdout.write(compare(runs[0], runs[1], (args.json[0].stem, args.json[1].stem)) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
