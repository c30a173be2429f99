"""Real weights on the HTP: greedy tokens of real clips on QNN HTP against the CPU provider, and WER.

On Linux x86-64 the HTP is Qualcomm's emulator: correct, slow (a real tiny.en decoder chunk compiles
in 1–2 minutes on the 2-core CI machine), so this is a bench, not a test; the CI test
(``tests/models/test_qnn_real_weights.py``) runs one clip's encoder and first chunk. Each clip is
encoded and decoded greedily (without timestamps, no prefix, up to ``max_tokens``) on both providers
with the pack's own chunk plan; the report gives per clip the tokens' agreement (equal, or the first
position where they differ), their texts, and the WER of each provider's greedy text against the
reference transcript (Whisper's English normaliser), the text cut to the reference's word count: the
bucket's padding is masked, so a greedy decode seldom ends in EOT and goes on repeating itself (the
live engine ends utterances from the attention; it is not used here because its opening rounds pad
to the 6 s bucket, whose graphs would have to be compiled too).

Usage::

    nice -n 10 python -m captioner.bench.htp --model PACK [--manifest M.jsonl] [--max-seconds 3]
        [--limit 8] [--cache DIR] [--json OUT]

The pack must run on QNN: fp32 layers and vocabulary (``models build --layers fp32 --vocab fp32``).
Only clips of at most ``--max-seconds`` (default: the pack's shortest bucket) are taken, so that the
NPU compiles one bucket's graphs (``Runtime.prepare``).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np

from captioner.audio.files import load_audio_file
from captioner.engine.model import Encoding
from captioner.engine.onnx_model import OnnxAcousticModel
from captioner.engine.runtime import Runtime
from captioner.models.pack import Pack

__all__ = ["decode_greedy", "greedy", "main"]

SAMPLES_PER_FRAME = 320


def greedy(model: OnnxAcousticModel, audio: np.ndarray, max_tokens: int = 16) -> list[int]:
    """The greedy English tokens of ``audio`` (16 kHz float32, ≤ the longest bucket) in one bucket:
    :func:`decode_greedy` of its encoding."""
    audio = np.asarray(audio, dtype=np.float32)
    return decode_greedy(model, model.encode(np.pad(audio, (0, -len(audio) % SAMPLES_PER_FRAME))), max_tokens)


def decode_greedy(model: OnnxAcousticModel, encoding: Encoding, max_tokens: int = 16) -> list[int]:
    """The English prompt, then the argmax at each position (EOT when its logit beats the best
    token's) until EOT or ``max_tokens`` new tokens, along the pack's default chunk plan, over
    ``encoding`` (which may come from another provider's encoder); the prompt and EOT excluded.
    The bucket's padding is masked, so the model does not hear the audio end and rarely says EOT
    (the engine ends an utterance from the attention instead): compare a fixed number of tokens."""
    run = model.decoder(encoding)
    eot = model.pack.special.eot
    seq = list(model.vocab.prompt("en"))
    n_prompt = len(seq)
    for start, size in model.chunk_plan(encoding.bucket, False):
        # chunk (start, size) consumes positions start … start+size−1; row s predicts position
        # start+s+1; a position not yet decided is −1 and the graph feeds its own argmax there
        forced = np.array([seq[p] if p < len(seq) else -1 for p in range(start + 1, start + size)], np.int64)
        out = run.run(start, size, seq[start], forced)
        for s in range(size):
            if start + s + 1 < len(seq):
                continue  # a given token's position
            token = eot if out.eot_logit[s] > out.token_logit[s] else int(out.tokens[s])
            if token == eot or len(seq) - n_prompt >= max_tokens:
                return seq[n_prompt:]
            seq.append(token)
    return seq[n_prompt:]


def _clips(manifest: Path, max_seconds: float, limit: int) -> list[dict]:
    items = [json.loads(line) for line in manifest.read_text().splitlines() if line.strip()]
    short = [i for i in items if i.get("language", "en") == "en" and i["seconds"] <= max_seconds]
    return sorted(short, key=lambda i: i["id"])[:limit]


def main(argv: list[str] | None = None) -> int:
    """The bench (module docstring); returns the exit code."""
    p = argparse.ArgumentParser(prog="python -m captioner.bench.htp", description=__doc__.splitlines()[0])
    p.add_argument("--model", type=Path, required=True, help="pack directory (fp32 layers and vocabulary)")
    p.add_argument("--manifest", type=Path, default=Path("../shared/speech/manifest.jsonl"))
    p.add_argument("--max-seconds", type=float, default=0.0, help="longest clip (default: the shortest bucket)")
    p.add_argument("--limit", type=int, default=8)
    p.add_argument("--cache", type=Path, default=Path("/tmp/captioner-htp-cache"), help="EP-context cache")
    p.add_argument("--json", type=Path)
    args = p.parse_args(argv)
    from captioner.bench.scoring import scorer

    sc = scorer()
    pack = Pack.load(args.model)
    max_s = args.max_seconds or float(pack.buckets[0])
    bucket = next(b for b in pack.buckets if b >= max_s)
    clips = _clips(args.manifest, max_s, args.limit)
    cpu = OnnxAcousticModel(pack, Runtime(pack, "cpu"))
    rt = Runtime(pack, "qnn", cache_dir=args.cache, npu_buckets=(bucket,))
    t0 = time.perf_counter()
    rt.prepare(progress=lambda d, n: print(f"  compiled {d}/{n} ({time.perf_counter() - t0:.0f} s)", file=sys.stderr))
    prepare_s = time.perf_counter() - t0
    htp = OnnxAcousticModel(pack, rt)
    if rt.provider != "QNN-HTP":
        print(f"QNN HTP is not available: {rt.info().summary()}", file=sys.stderr)
        return 1
    rows, totals = [], {"cpu": [0, 0], "htp": [0, 0]}
    for item in clips:
        audio = load_audio_file(args.manifest.parent / item["audio"])
        t = time.perf_counter()
        ref_tokens = greedy(cpu, audio)
        cpu_s = time.perf_counter() - t
        t = time.perf_counter()
        htp_tokens = greedy(htp, audio)
        htp_s = time.perf_counter() - t
        first_diff = next((i for i, (a, b) in enumerate(zip(ref_tokens, htp_tokens, strict=False)) if a != b),
                          None if len(ref_tokens) == len(htp_tokens) else min(len(ref_tokens), len(htp_tokens)))
        # the greedy text, cut to the reference's word count (the masked bucket seldom ends in EOT)
        n_ref = len(sc.normalise(item["text"]))
        texts = {name: " ".join(sc.normalise(htp.vocab.decode(tokens))[:n_ref])
                 for name, tokens in (("cpu", ref_tokens), ("htp", htp_tokens))}
        row = {"id": item["id"], "seconds": item["seconds"], "tokens_equal": first_diff is None,
               "first_difference": first_diff, "n_tokens": len(ref_tokens), "reference": item["text"],
               "greedy": texts, "cpu_s": round(cpu_s, 2), "htp_s": round(htp_s, 2)}
        for name in ("cpu", "htp"):
            c = sc.word_counts(item["text"], texts[name])
            totals[name][0] += c.substitutions + c.deletions + c.insertions
            totals[name][1] += c.ref
        rows.append(row)
        print(f"{item['id']:<24} tokens {'=' if first_diff is None else f'≠@{first_diff}'}  cpu: {texts['cpu']!r}  "
              f"htp: {texts['htp']!r}  (greedy {htp_s:.0f} s on the HTP)", flush=True)
    wer = {k: round(100 * e / max(1, n), 2) for k, (e, n) in totals.items()}
    summary = {"pack": pack.root.name, "bucket": bucket, "clips": len(rows),
               "tokens_equal": sum(r["tokens_equal"] for r in rows), "wer_cpu_%": wer["cpu"], "wer_htp_%": wer["htp"],
               "prepare_s": round(prepare_s, 1), "htp_rounds_s": round(sum(r["htp_s"] for r in rows), 1)}
    print(json.dumps(summary))
    if args.json:
        args.json.write_text(json.dumps({"summary": summary, "clips": rows}, indent=1))
    htp.close()
    cpu.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
