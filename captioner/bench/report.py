"""The bench result as readable Markdown tables, with the issue's targets checked where they apply."""

from __future__ import annotations

from captioner.models.pack import describe_computation

__all__ = ["TARGETS", "check_targets", "markdown"]

MB = 1024 * 1024

# name -> (description, limit); see issue 7 ("Targets")
TARGETS = {
    "encoder_3s": ("encoder 3 s bucket / 30 s graph", 0.15),
    "encoder_6s": ("encoder 6 s bucket / 30 s graph", 0.25),
    "rtf_2s": ("streaming RTF at a 2 s step", 0.10),
    "rtf_1s": ("streaming RTF at a 1 s step", 0.20),
    "python_overhead_ms": ("Python bookkeeping per round, ms (median of other_ms)", 10.0),
    "first_round_s": ("first round after start, s (process start)", 3.0),
}


def check_targets(result: dict) -> list[dict]:
    """One row per target that the result can answer: value, limit, met."""
    rows = []

    def add(key: str, value: float | None, limit: float | None = None) -> None:
        if value is None:
            return
        desc, default = TARGETS.get(key, (key, None))
        lim = default if limit is None else limit
        if lim is None:
            return
        rows.append({"target": key, "what": desc, "value": value, "limit": lim, "met": value <= lim})

    enc = {b["bucket_s"]: b["ratio_to_full"] for b in result.get("encoder", {}).get("buckets", [])}
    add("encoder_3s", enc.get(3))
    add("encoder_6s", enc.get(6))
    dec = result.get("decoder", {}).get("strategies", {})
    for t in ("10", "20", "30"):
        if t in dec.get("unrolled", {}):
            best_other = min(dec[s][t]["ratio_to_unrolled"] for s in ("per_token", "fixed200") if s in dec)
            rows.append({"target": f"unrolled_fastest_T{t}", "what": f"unrolled fastest at T = {t} "
                         "(best other / unrolled)", "value": best_other, "limit": 1.0, "met": best_other >= 1.0})
    cs = result.get("chunk_sizes")
    if cs and "tail_chunk" in result.get("pack", {}):
        built = result["pack"]["tail_chunk"]
        rows.append({"target": "default_chunk", "what": f"the pack's tail chunk K = {built} is the one this "
                     f"run chose (K = {cs['chosen']})", "value": built, "limit": cs["chosen"],
                     "met": built == cs["chosen"]})
    for run in result.get("streaming", []):
        key = {1.0: "rtf_1s", 2.0: "rtf_2s"}.get(run["step_s"])
        if key:
            add(key, run["rtf"])
    runs = result.get("streaming", [])
    if runs:
        add("python_overhead_ms", max(r["per_round_ms"]["other_ms"]["median"] for r in runs if "per_round_ms" in r))
        add("first_round_s", max(r["first_round_from_process_start_s"] for r in runs))
        weights = result["pack"]["weights_bytes"]
        limit = (1.3 * weights + 200 * MB) / MB
        rows.append({"target": "peak_rss_mb", "what": "peak RSS with the whole pack loaded, MB "
                     "(≤ 1.3 × fp32 weights + 200 MB)", "value": max(r["peak_rss_bytes"] for r in runs) / MB,
                     "limit": limit, "met": max(r["peak_rss_bytes"] for r in runs) / MB <= limit})
        lazy = max(r.get("peak_rss_streaming_bytes", 0) for r in runs) / MB
        if lazy:
            rows.append({"target": "peak_rss_streaming_mb", "what": "peak RSS while streaming (sessions created "
                         "lazily, as the app does), MB", "value": lazy, "limit": limit, "met": lazy <= limit})
    return rows


def _f(x: float, digits: int = 1) -> str:
    return f"{x:.{digits}f}"


def markdown(result: dict) -> str:
    """The whole result as Markdown."""
    p = result["pack"]
    d = p["dims"]
    lines = [
        f"# captioner bench — {p['label']}",
        "",
        f"d_model {d['d_model']}, {d['encoder_layers']}+{d['decoder_layers']} layers, {d['decoder_heads']} heads, "
        f"{describe_computation(p.get('layers', 'fp32'), p['precision'], p['linear'], p.get('vocab', 'fp32'), p.get('attention', 'standard'))}; "
        f"weights {p['weights_bytes'] / MB:.0f} MB. "
        f"Provider {result.get('providers', {}).get('summary', '?')}, {result['settings']['threads']} threads; "
        f"{result['machine']['cpus']} CPUs, ONNX Runtime {result['machine']['onnxruntime']}. "
        f"Medians of {result['settings']['reps']} repetitions after {result['settings']['warmup']} warm-up calls.",
        "",
    ]
    if "encoder" in result:
        lines += ["## Encoder per bucket", "", "| bucket (s) | encoder ms | ratio to 30 s | log-mel ms |",
                  "|---:|---:|---:|---:|"]
        for b in result["encoder"]["buckets"]:
            lines.append(f"| {b['bucket_s']} | {_f(b['encoder_ms'])} | {_f(b['ratio_to_full'], 3)} | {_f(b['mel_ms'], 2)} |")
        lines.append("")
    if "decoder" in result:
        dec = result["decoder"]
        ts = [str(t) for t in dec["t_values"]]
        lines += [f"## Decoder strategies ({dec['bucket_s']} s bucket; T = positions decoded, prompt included)", "",
                  "| strategy | " + " | ".join(f"T={t} ms (×unrolled, dispatches)" for t in ts) + " |",
                  "|---|" + "---:|" * len(ts)]
        for name, rows in dec["strategies"].items():
            cells = [f"{_f(rows[t]['ms'])} (×{_f(rows[t]['ratio_to_unrolled'], 2)}, {rows[t]['dispatches']})" for t in ts]
            lines.append(f"| {name} | " + " | ".join(cells) + " |")
        ratio = dec["self_attention_mac_ratio_fixed_vs_unrolled"]
        lines += ["", f"Self-attention multiply-adds per step, fixed-200 / unrolled: {_f(ratio)}× (the chunk graphs "
                  f"attend over the bucket's {dec['cache_slots']} cache slots; the paper's growing cache gives "
                  "2M/(T+1), M = 200). `unrolled_stepwise` runs the same chunks without batching the prompt.", ""]
    if "chunk_sizes" in result:
        cs = result["chunk_sizes"]
        ts = [str(t) for t in cs["t_values"]]
        lines += [f"## Tail chunk size K (paper Table 8; {cs['bucket_s']} s bucket)", "",
                  "| K | schedule | " + " | ".join(f"T={t}" for t in ts)
                  + " | mean ms T=5..30 | faster than K=5 in (mean gain, 95 % lower bound) | calls/round | extra positions | graphs in a pack |",
                  "|---:|---|" + "---:|" * (len(ts) + 5)]
        for k, row in cs["sizes"].items():
            cells = [_f(row["by_t"][t]["ms"]) for t in ts]
            lines.append(f"| {k} | {row['schedule']} | " + " | ".join(cells)
                         + f" | {_f(row['mean_ms_t5_30'])} | {row.get('faster_than_paper_reps', '–')}/"
                         f"{cs.get('reps', '–')} reps, {_f(100 * row.get('paired_gain', 0.0))} % "
                         f"(≥ {_f(100 * row.get('paired_gain_lower', 0.0))} %, t = {_f(row.get('paired_t', 0.0), 1)})"
                         f" | {_f(row['calls_mean_t5_30'], 2)} | "
                         f"{_f(row['extra_positions_mean_t5_30'], 2)} | {row.get('graphs_per_pack', '–')} |")
        lines += ["", f"Fastest: K = {cs['fastest']}; chosen: K = {cs['chosen']} ({cs['rule']}).", ""]
    if result.get("streaming"):
        lines += ["## Streaming", "",
                  "| step | RTF | RTF (no decoder) | RTF (2 chunks/round) | rounds | tokens/round | chunks/round "
                  "| mel | encoder | decoder | validation | DTW | other Python | host total | round | first round "
                  "(s, from process start) | RSS loaded / peak (MB) |",
                  "|---:|" + "---:|" * 16]
        for r in result["streaming"]:
            st = r.get("per_round_ms", {})

            def med(key: str, st=st) -> str:
                return _f(st[key]["median"]) if key in st else "–"

            lines.append(
                f"| {r['step_s']:g} s | {_f(r['rtf'], 3)} | {_f(r['rtf_without_decoder'], 3)} | "
                f"{_f(r.get('rtf_two_chunks', 0.0), 3)} | {r['decoded_rounds']}/{r['rounds']} | "
                f"{_f(r.get('tokens_per_round', 0.0))} | {_f(r.get('chunks_per_round', 0.0), 2)} | {med('mel_ms')} | "
                f"{med('encoder_ms')} | {med('decoder_ms')} | {med('validation_ms')} | {med('dtw_ms')} | "
                f"{med('other_ms')} | {med('host_ms')} | {med('total_ms')} | {_f(r['first_round_s'], 2)} "
                f"({_f(r['first_round_from_process_start_s'], 2)}) | {r['rss_loaded_bytes'] / MB:.0f} / "
                f"{r['peak_rss_bytes'] / MB:.0f} |")
        lines += ["", "RSS: " + "; ".join(
            f"{r['step_s']:g} s step: {r.get('peak_rss_streaming_bytes', 0) / MB:.0f} MB peak while streaming with "
            f"{r.get('sessions_streaming', '?')} sessions created lazily, {r['rss_loaded_bytes'] / MB:.0f} MB with "
            f"all {r['sessions']} graphs of the pack loaded" for r in result["streaming"]) + "."]
        lines += ["", "Per-round stage columns are medians in ms over decoded rounds. RTF = engine compute (the rounds' "
                  "time) / audio time, rounds fed as fast as possible. 'RTF (2 chunks/round)' replaces each round's decoder time by "
                  "two chunks at the measured cost per chunk, i.e. a round that stops after ~6 tokens, as real "
                  "speech does; random weights rarely stop early.", ""]
        typical = [f"{r['step_s']:g} s step: {_f(r['typical_round']['round_ms'])} ms per round, RTF "
                   f"{_f(r['typical_round']['rtf'], 3)} ({r['typical_round']['bucket_s']} s bucket, 2 chunks)"
                   for r in result["streaming"] if "typical_round" in r]
        if typical:
            lines += ["Typical round (input = step + 1 s carry, 2 chunks, this run's costs): " + "; ".join(typical)
                      + ".", ""]
        stops = "; ".join(f"{r['step_s']:g} s: " + ", ".join(f"{k} {v}" for k, v in r.get("stop_reasons", {}).items())
                          for r in result["streaming"])
        lines += [f"Stop reasons — {stops}.", ""]
    if "providers" in result:
        counts: dict[str, int] = {}
        for ep in result["providers"]["graphs"].values():
            counts[ep] = counts.get(ep, 0) + 1
        lines += ["## Providers", "", f"{result['providers']['summary']}; graphs per execution provider "
                  "(graph-assignment info): " + ", ".join(f"{ep}: {n}" for ep, n in counts.items()) + ".", ""]
    targets = check_targets(result)
    if targets:
        lines += ["## Targets (issue 7)", "", "| target | value | limit | met |", "|---|---:|---:|:---:|"]
        for t in targets:
            lines.append(f"| {t['what']} | {_f(t['value'], 3)} | {_f(t['limit'], 3)} | {'yes' if t['met'] else 'no'} |")
        lines.append("")
    return "\n".join(lines)
