"""QNN EP contexts of a pack on the HTP (the x86-64 emulator on Linux): one per graph against one
weight-shared context for the whole set, compiled ahead of time.

Compiles the graphs one bucket's rounds need (its encoder, its decoder chunk graphs with the frame
count fixed, its verifier) in one of two ways, each in a fresh process:

* ``separate``: what the runtime did before issue 24: one EP-context model and ``.bin`` per graph
  (``ep.share_ep_contexts=0``);
* ``shared``: one session group (``ep.share_ep_contexts=1`` on every session, ``ep.stop_share_ep_contexts=1``
  on the last): QNN compiles every graph into one context and writes one ``.bin`` that every
  ``*_ctx.onnx`` points to; on x86-64 the plugin also turns on HTP weight sharing, so a weight used
  by several graphs is stored once.

then, in another fresh process, loads every compiled context (the warm-cache start) and runs the
encoder and the first decoder chunk once (the first round's graphs). Prints one JSON line per phase:
context bytes on disk, compile seconds, load seconds, first-run seconds, peak RSS.

Usage::

    nice -n 10 python benchmarks/npu_contexts.py PACK_DIR OUT_DIR --bucket 3 --mode shared --phase compile
    nice -n 10 python benchmarks/npu_contexts.py PACK_DIR OUT_DIR --bucket 3 --mode shared --phase load

The pack must be one the NPU can run (fp32 layers and vocabulary: ``--layers fp32 --vocab fp32``).
"""

from __future__ import annotations

import argparse
import json
import resource
import sys
import time
from pathlib import Path

import numpy as np
import onnxruntime as ort

from captioner.engine.providers import Host, plan_candidates
from captioner.engine.runtime import Runtime
from captioner.models.pack import Pack


def _rss_mb() -> tuple[float, float]:
    """(current, peak) resident set size of this process in MB."""
    current = 0.0
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            current = int(line.split()[1]) / 1024
    return current, resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def main() -> int:
    """The bench (module docstring); returns the exit code."""
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("pack", type=Path)
    p.add_argument("out", type=Path, help="cache folder for the compiled contexts")
    p.add_argument("--bucket", type=int, default=3)
    p.add_argument("--mode", choices=("separate", "shared"), required=True)
    p.add_argument("--phase", choices=("compile", "load"), required=True)
    args = p.parse_args()
    pack = Pack.load(args.pack)
    plan = plan_candidates("qnn", Host.current())
    if plan[0].label != "QNN-HTP":  # type: ignore[union-attr]
        print("no QNN HTP backend here", file=sys.stderr)
        return 1
    cache = args.out / args.mode
    rt = Runtime(pack, "qnn", cache_dir=cache, threads=1, npu_buckets=(args.bucket,),
                 shared_context=args.mode == "shared")
    units = rt.npu_units()
    t0 = time.perf_counter()
    if args.phase == "compile":
        with rt._lock:  # the compile alone, without the session prepare() opens after it
            rt._progress = lambda done, total: print(f"  compiled {done}/{total} "
                                                     f"({time.perf_counter() - t0:.0f} s)", file=sys.stderr)
            rt._compile_ahead(rt._current)
        seconds = time.perf_counter() - t0
        files = [f for f in cache.rglob("*") if f.is_file() and f.parent.name != "src"]  # src: graph copies
        print(json.dumps({
            "mode": args.mode, "phase": "compile", "bucket": args.bucket, "graphs": len(units),
            "compile_s": round(seconds, 1), "bin_files": sum(f.suffix == ".bin" for f in files),
            "context_mb": round(sum(f.stat().st_size for f in files) / 1e6, 1),
            "rss_mb": [round(x) for x in _rss_mb()]}), flush=True)
        return 0
    if args.mode == "shared" and Host.current().qnn_emulated:
        print(json.dumps({"mode": args.mode, "phase": "load", "skipped": "QNN's x86-64 backend cannot load a "
                          "weight-shared context (QNN_COMMON_ERROR_NOT_SUPPORTED); load it on the device"}))
        return 0
    sessions = [rt.session(graph, frames) for graph, frames in units]
    load_s = time.perf_counter() - t0
    t1 = time.perf_counter()
    runs = []
    for sess in (sessions[0], sessions[1]):  # the encoder and the first chunk: a round's first graphs
        feeds = {}
        for i in sess.get_inputs():
            shape = [d if isinstance(d, int) else 1 for d in i.shape]
            dtype = np.int64 if "int64" in i.type else np.int32 if "int32" in i.type else np.float32
            feeds[i.name] = np.zeros(shape, dtype)
        t = time.perf_counter()
        sess.run(None, feeds)
        runs.append(round(time.perf_counter() - t, 2))
    info = rt.info()
    print(json.dumps({
        "mode": args.mode, "phase": "load", "bucket": args.bucket, "graphs": len(units),
        "provider": info.chosen, "load_s": round(load_s, 2), "first_runs_s": runs,
        "start_to_first_round_s": round(load_s + time.perf_counter() - t1, 2),
        "placement": sorted({ep for p in info.placement.values() for ep in p}),
        "rss_mb": [round(x) for x in _rss_mb()], "ort": ort.__version__}), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
