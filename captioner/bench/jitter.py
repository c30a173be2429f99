r"""Is a rule's effect bigger than the noise? The accuracy corpus under small shifts of every input.

The live engine's words on a recording move when its utterances' inputs start a frame or two
earlier or later: moving the speech detector's onset back by one 32 ms window turned LibriSpeech
1688-142285-0000's "There's iron" into "Desire and" (issue 25). A rule that shifts inputs therefore
"wins" or "loses" items by chance, and a rule chosen on one corpus carries that chance with it: the
over-fitting issue 25 found on unseen speakers. This tool measures the noise floor and judges a
rule against it: it runs the live modes over the corpus at several onset pads (``onset_pad_s``, the
non-speech heard before detected speech: every utterance's input start moves by the difference,
nothing else changes) for the engine as it is and, with ``--set``, for a variant, and reports per
group (each half, each kind within a half) the gap to offline at each pad (its mean and range: the
noise) and the variant's paired difference at each pad (a rule is worth keeping when that
difference is ≤ 0 at every pad on both halves, not when one run says so).

    python -m captioner.bench.jitter --model PACK --manifest ../shared/speech/manifest.jsonl \
        [--manifest corpus/manifest.jsonl] [--offline BENCH.json] [--step 2] [--pads 0.14,0.2,0.26] \
        [--set closing_full_s=30] --out jitter.json > jitter.md

``--offline`` reuses the offline words of an accuracy bench JSON (``captioner bench --json``) for the
items it holds (the offline decode does not depend on the live engine); other items are decoded
offline here. Dev tool: it runs the whole corpus ``len(pads) × len(steps)`` times (twice with a
variant), about 6 min per pass over the development corpus on 2 cores.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from captioner.audio import load_audio_file
from captioner.bench.accuracy import HALVES, Item, ModeRun, load_manifest, run_live, run_offline
from captioner.bench.scoring import Counts, Scorer, TimedWord
from captioner.engine import StreamConfig

__all__ = ["group_counts", "main", "parse_setting", "render"]

DEFAULT_PADS = (0.14, 0.2, 0.26)


def parse_setting(text: str) -> tuple[str, Any]:
    """``"closing_full_s=30"`` → ``("closing_full_s", 30.0)``, typed by the :class:`StreamConfig` field;
    ``"language=auto"``: the live modes detect the language, as the app's default does, instead of being
    given each recording's.

    Raises:
        ValueError: no ``=``, an unknown field or a value of the wrong type.
    """
    key, sep, value = text.partition("=")
    fields = {f.name: f for f in dataclasses.fields(StreamConfig)}
    if not sep or key not in fields:
        raise ValueError(f"{text!r}: expected FIELD=VALUE with a StreamConfig field")
    default = fields[key].default
    if isinstance(default, bool):
        if value.lower() not in ("true", "false", "1", "0"):
            raise ValueError(f"{text!r}: {key} is true or false")
        return key, value.lower() in ("true", "1")
    if isinstance(default, int | float):
        return key, type(default)(float(value)) if isinstance(default, float) else int(value)
    if key == "language" and value == "auto":
        return key, value
    raise ValueError(f"{text!r}: only number and true/false fields, and language=auto, can be set")


def _groups(item: Item) -> list[str]:
    return ["english", f"half:{item.half}", f"{item.half}:{item.kind}"]


def group_counts(items: Sequence[Item], counts: dict[str, Counts]) -> dict[str, Counts]:
    """Per group (``english``, ``half:tune``/``half:check``, ``tune:<kind>``…) the summed counts of
    the English items (``counts``: item id → its counts)."""
    out: dict[str, Counts] = {}
    for item in items:
        if item.language != "en" or item.id not in counts:
            continue
        for g in _groups(item):
            out[g] = out.get(g, Counts()) + counts[item.id]
    return out


def _offline_words(path: Path | None) -> dict[str, list[TimedWord]]:
    if path is None:
        return {}
    data = json.loads(path.read_text(encoding="utf-8"))
    data = data.get("accuracy", data)
    return {it["id"]: [TimedWord(t, s, e) for t, s, e in it["offline_words"]] for it in data["items"]}


def _rate(c: Counts) -> float:
    return 100.0 * (c.rate or 0.0)


def render(result: dict) -> str:
    """The markdown report of a :func:`main` result: per step, group by group, the gap to offline
    (points) at every pad and its mean, and the variant's paired difference."""
    lines = [f"# Jitter: {result['model']}", "", f"pads {result['pads']} s; variant: {result['variant'] or 'none'}; "
             f"{result['items']} items; {result['elapsed_s']:.0f} s", ""]
    order = ["english", *(f"half:{h}" for h in HALVES)]
    for step in result["steps"]:
        runs = result["runs"][f"{step:g}"]
        groups = [g for g in order if g in result["offline"]] + sorted(g for g in result["offline"] if g not in order)
        head = "| group | offline WER | gap per pad (points) | gap mean [range] |"
        rule = "|---|---|---|---|"
        if result["variant"]:
            head += " variant gap per pad | variant − base per pad | mean |"
            rule += "---|---|---|"
        lines += [f"## live {step:g} s", "", head, rule]
        for g in groups:
            off = result["offline"][g]
            base = [runs["base"][f"{p:g}"][g] - off for p in result["pads"]]
            row = (f"| {g} | {off:.2f} % | {' / '.join(f'{x:+.2f}' for x in base)} | "
                   f"{sum(base) / len(base):+.2f} [{min(base):+.2f}, {max(base):+.2f}] |")
            if result["variant"]:
                var = [runs["variant"][f"{p:g}"][g] - off for p in result["pads"]]
                diff = [v - b for v, b in zip(var, base, strict=True)]
                row += (f" {' / '.join(f'{x:+.2f}' for x in var)} | {' / '.join(f'{x:+.2f}' for x in diff)} | "
                        f"{sum(diff) / len(diff):+.2f} |")
            lines.append(row)
        lines.append("")
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    """The command line (module docstring): the JSON to ``--out``, the markdown report to stdout."""
    ap = argparse.ArgumentParser(prog="python -m captioner.bench.jitter", description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", required=True, type=Path, help="model pack folder")
    ap.add_argument("--manifest", required=True, type=Path, action="append", help="manifest.jsonl (repeatable)")
    ap.add_argument("--kinds", default="", help="comma-separated kinds (default: all)")
    ap.add_argument("--offline", type=Path, help="accuracy bench JSON whose offline words are reused")
    ap.add_argument("--step", type=float, action="append", help="live step, seconds (repeatable; default 2)")
    ap.add_argument("--pads", default=",".join(f"{p:g}" for p in DEFAULT_PADS), help="onset pads, seconds")
    ap.add_argument("--set", action="append", default=[], metavar="FIELD=VALUE", help="the variant's StreamConfig")
    ap.add_argument("--provider", default="cpu")
    ap.add_argument("--out", type=Path, required=True, help="JSON result")
    args = ap.parse_args(argv)
    from captioner.engine import OnnxAcousticModel, Runtime
    from captioner.models.pack import Pack

    try:
        variant = dict(parse_setting(s) for s in args.set)
        pads = [float(p) for p in args.pads.split(",") if p]
    except ValueError as exc:
        ap.error(str(exc))
    steps = args.step or [2.0]
    items = [it for it in load_manifest(args.manifest, [k for k in args.kinds.split(",") if k] or None)
             if it.language == "en"]
    pack = Pack.load(args.model)
    model = OnnxAcousticModel(pack, Runtime(pack, args.provider))
    scorer, known = Scorer(), _offline_words(args.offline)
    configs = {"base": {}, **({"variant": variant} if variant else {})}
    offline: dict[str, Counts] = {}
    live: dict[tuple[str, str, str], dict[str, Counts]] = {}
    t0 = time.perf_counter()
    for n, item in enumerate(items, 1):
        audio = load_audio_file(item.audio)
        words = known.get(item.id)
        off = ModeRun(words, 0.0) if words is not None else run_offline(model, audio, item.language)
        offline[item.id] = scorer.word_counts(item.text, off.text, item.language)
        for step in steps:
            for name, extra in configs.items():
                for pad in pads:
                    run = run_live(model, audio, step, item.language, config={**extra, "onset_pad_s": pad})
                    live.setdefault((f"{step:g}", name, f"{pad:g}"), {})[item.id] = scorer.word_counts(
                        item.text, run.text, item.language)
        print(f"[{n}/{len(items)}] {item.id}", file=sys.stderr, flush=True)
    result: dict[str, Any] = {
        "model": str(args.model), "pads": pads, "steps": steps, "variant": variant, "items": len(items),
        "elapsed_s": time.perf_counter() - t0,
        "offline": {g: _rate(c) for g, c in group_counts(items, offline).items()},
        "runs": {},
        "per_item": {f"{s}/{c}/{p}": {k: v.as_dict() for k, v in counts.items()} for (s, c, p), counts in live.items()},
    }
    for (s, c, p), counts in live.items():
        result["runs"].setdefault(s, {}).setdefault(c, {})[p] = {g: _rate(x) for g, x in group_counts(items, counts).items()}
    args.out.write_text(json.dumps(result, indent=1), encoding="utf-8")
    print(render(result))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
