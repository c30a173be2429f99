"""Build a model pack from a Whisper checkpoint folder, with the ``onnx`` package only.

The folder is a Hugging Face checkpoint (``model.safetensors``) or a CTranslate2/faster-whisper
model (``model.bin`` or its parts, :mod:`captioner.models.ct2`); both parse into one
:class:`~captioner.models.checkpoint.Checkpoint`, so every graph is built the same way.

:func:`build_pack` parses the checkpoint, writes every graph of the chunk plan plus the shared
``weights.bin`` and ``tokens.json`` into a temporary directory next to the output, writes
``manifest.json`` last and renames the directory into place, so a half-written pack never exists
under the output name.
"""

from __future__ import annotations

import json
import logging
import math
import os
import platform
import shutil
import sys
from collections.abc import Callable, Iterable
from dataclasses import asdict, dataclass, field
from pathlib import Path

import onnx

from captioner import __version__
from captioner.errors import PackBuildError
from captioner.models.checkpoint import WEIGHTS, Checkpoint, load_checkpoint
from captioner.models.ct2 import is_ct2_folder, load_ct2_checkpoint
from captioner.models.decoder_graph import build_decoder_chunk, graph_name
from captioner.models.encoder_graph import build_encoder
from captioner.models.graph_ops import OPSET, WeightStore
from captioner.models.pack import FORMAT, FORMAT_VERSION, MANIFEST, Pack, file_sha256, schedule_chunks
from captioner.storage.atomic import replace_file
from captioner.storage.disk import write_problem

__all__ = ["BUCKETS", "INT8_MIN_WIDTH", "SHORT_MAX_S", "BuildOptions", "build_pack", "cache_slots", "chunk_plan",
           "known_steps", "load_any_checkpoint", "parse_buckets", "prompt_length"]

logger = logging.getLogger(__name__)

# Encoder buckets in seconds: the paper's (NPUSPER.md §3.4) plus 10 s. A normal round's input is at
# most carry 2 × step + step = 6 s (2 s step); a speculative round carries its whole input (§11.7), so
# its input grows by a step per round, and without a bucket between 6 and 30 s each of those rounds
# ran the 30 s encoder (whisper-base, this CPU: ~690 ms against ~170 ms at 10 s; 6 of 151 rounds of
# a 2 s-step bench run, 8–12 s each, were 16 % of its wall time). Results do not depend on the
# bucket (the padding is masked), and the 10 s bucket shares the 30 s bucket's decoder graphs, so it
# costs one encoder graph (and, on a static-shape provider, its own compiled sessions). The 20 s
# bucket is for the closing rounds (stream.py deviation 18), which pad an utterance of 10–20 s with
# silence to 20 s instead of 30 s: on the development corpus (whisper-base, 2 s step, 24 clips) the
# same words for 12 % less compute (the 30 s encoder is ~4× the 10 s one: attention is quadratic).
BUCKETS = (3, 4, 5, 6, 10, 20, 30)
SHORT_MAX_S = 6  # buckets up to this decode the round's 30 positions; longer ones up to max_positions
WEIGHTS_FILE = "weights.bin"
VOCAB_FILE = "tokens.json"
CPU_PREFIX = "cpu_"  # file names of the CPU variant's graphs (BuildOptions.cpu_variant)
INT8_MIN_WIDTH = 512  # d_model from which ``layers="auto"`` gives int8 layers (base and up; tiny keeps fp32)


@dataclass(frozen=True, slots=True)
class BuildOptions:
    """What to build.

    Attributes:
        precision: ``"fp32"`` or ``"fp16"``: type of the stored weights. fp16 halves the pack;
            the graphs cast each weight to float32 where it is used, so compute and I/O stay fp32
            (ORT's CPU provider has no complete fp16 kernel set; the QNN HTP runs float graphs in
            fp16 anyway). Meant for the NPU and for download size: on the CPU provider ORT
            constant-folds each Cast into an fp32 copy per session, so CPU should use fp32 packs.
        linear: ``"matmul"`` or ``"conv"`` (linear layers as 1×1 Conv, the QNN-friendly lowering).
        buckets: encoder buckets in seconds.
        heads: the first chunks of each schedule (they differ; everything after is shared). The
            paper's prefixed head is (6, 4); ours is (5, 5): its first chunk batches the prompt and
            the first prefix token (5 given tokens) and the second is the 5-step tail graph when
            K = 5, so the prefixed schedule needs one small graph of its own instead of two (6 and
            4 steps) for the same 5 sequential steps to position 10 (with K = 3, two).
        tail_chunk: size K of the shared chunks after the heads (and of the long buckets' tail).
            The paper's 5: measured best on the Snapdragon HTP (Table 8). On the CPU
            (``captioner bench``, whisper-base, 2 cores) K = 3 decodes a round that stops anywhere
            in 5..30 positions ~4 % faster (fewer positions past the stop; a CPU dispatch costs
            only ~1 ms), but that is within the bench's 5 % margin, and with K = 3 unrolling stops
            beating one dispatch per token at T = 20 (22 positions computed: ×0.98).
        tail_positions: positions the shared chunks cover after the heads (20: 30 per round).
        max_positions: the last decoder position the longest bucket's chunks consume (224).
        verify_chunk: tokens a verifier graph checks per dispatch (each cache gets one: a closing
            round and a live round that revises an utterance's drafts propose the drafts to it,
            ``engine/decoder.py``).
        beam_size: hypotheses of the long buckets' beam-step graph (closing rounds' beam search,
            ``engine/beam.py``, with ``StreamConfig.closing_beam``); 0 (the default) or 1: none.
            Measured and not kept as the default (deviation 43 in docs/accuracy/deviations.md):
            it won words on long read speech and lost some on radio calls and on a joined half.
        vocab: the decoder's vocabulary projection: ``"int8"`` (an int8 copy of the table ranks
            the vocabulary, the best 32 text tokens and the special tokens are scored exactly in
            fp32: ~3.5× faster decoder steps on the CPU, same greedy tokens; see
            ``decoder_graph._Logits``), ``"fp32"``, or ``"auto"``: fp32 for the Conv lowering and
            on Windows ARM64 (the packs the NPU runs: QNN's HTP has no MatMulInteger, and a graph
            it cannot run whole would be split with the CPU), int8 otherwise.
        cpu_variant: a second set of graphs for the CPU in the same pack (manifest ``cpu_variant``),
            over the same ``weights.bin``: ``"int8"`` (int8 vocabulary ranking and int8 layers),
            ``"none"``, or ``"auto"``: where the main graphs are the NPU's (Windows ARM64, fp32:
            QNN has no int8 MatMul), the graphs a CPU pack gets there (``vocab``/``layers``
            ``"auto"`` off the NPU host: int8 vocabulary, int8 layers from
            :data:`INT8_MIN_WIDTH`), so a CPU fallback or ``--provider cpu`` keeps the int8
            speed-up; none elsewhere. No variant is written when it would equal the main graphs.
        layers: the weights of the encoder's and decoder's linear layers: ``"int8"`` (one scale
            per output; each input row quantised on the fly, ``GraphBuilder.linear``), ``"fp32"``,
            or ``"auto"``: as ``vocab`` for models at least :data:`INT8_MIN_WIDTH` wide, fp32 for
            narrower ones. Measured on whisper-base, ORT CPU, 2 threads: a 5 s encoder run 95 →
            57 ms, a 5-step decoder chunk 46 → 36 ms, live RTF at a 2 s step −35 %, and the same
            WER (whole English corpus, live 2 s: 9.9 % fp32, 9.5 % int8). Not for tiny (d 384):
            there 8-bit layers cost 1.6 points on test-other and dev-clean (12.95 → 14.60 % live,
            encoder and decoder each part of it) for 15 % of a model that is cheap already.
        attention: the encoders' self-attention: ``"standard"`` (MatMul, Softmax, MatMul, which every
            provider runs) or ``"fused"`` (ONNX Runtime's ``MultiHeadAttention`` CPU kernel over the
            real frames' keys, ``encoder_graph``; QNN has no such kernel and refuses the pack).
            Measured on whisper-base with int8 layers, 2 threads of an AMD EPYC with VNNI: a 30 s
            encode 394 → 349 ms, live RTF on the development corpus 0.135 → 0.130 at 2 s; the same
            arithmetic to 1e-4, but the int8 rows it feeds round otherwise and the live words moved
            (development 244 / 242 → 250 / 249 errors at 2 s / 1 s, new speakers 311 / 303 → 327 /
            316): not the default (docs/accuracy, forty-ninth round).
    """

    precision: str = "fp32"
    linear: str = "matmul"
    buckets: tuple[int, ...] = BUCKETS
    heads: dict[str, tuple[int, ...]] = field(default_factory=lambda: {"default": (4, 6), "prefixed": (5, 5)})
    tail_chunk: int = 5
    tail_positions: int = 20
    max_positions: int = 224
    vocab: str = "auto"
    verify_chunk: int = 5
    beam_size: int = 0
    layers: str = "auto"
    cpu_variant: str = "auto"
    attention: str = "standard"

    @property
    def vocab_projection(self) -> str:
        """``vocab`` with ``"auto"`` resolved (see the class docstring)."""
        return self.vocab if self.vocab != "auto" else self._auto_int8()

    def layer_weights(self, d_model: int) -> str:
        """``layers`` with ``"auto"`` resolved for a model of width ``d_model`` (class docstring)."""
        if self.layers != "auto":
            return self.layers
        return "int8" if d_model >= INT8_MIN_WIDTH and self._auto_int8() == "int8" else "fp32"

    def _auto_int8(self) -> str:
        """int8 for the CPU packs; fp32 for the Conv lowering and on Windows ARM64, the packs the
        NPU runs (QNN's HTP has no MatMulInteger: a graph it cannot run whole is split with the CPU)."""
        return "fp32" if self.linear == "conv" or _npu_host() else "int8"

    def cpu_weights(self, d_model: int) -> tuple[str, str] | None:
        """(vocab, layers) of the CPU variant for a model of width ``d_model``, or None when the pack
        gets none (``cpu_variant`` resolved; the class docstring)."""
        if self.cpu_variant == "none" or (self.cpu_variant == "auto" and not _npu_host()):
            return None
        vocab, layers = "int8", "int8"
        if self.cpu_variant == "auto":  # what vocab/layers "auto" give a CPU pack off the NPU host
            layers = "int8" if d_model >= INT8_MIN_WIDTH else "fp32"
        main = (self.vocab_projection, self.layer_weights(d_model))
        return None if (vocab, layers) == main and self.linear == "matmul" else (vocab, layers)

    def schedules(self) -> dict[str, tuple[int, ...]]:
        """Chunk sizes per schedule: head + ⌈tail_positions / tail_chunk⌉ × tail_chunk."""
        tail = (self.tail_chunk,) * math.ceil(self.tail_positions / self.tail_chunk)
        return {name: (*head, *tail) for name, head in self.heads.items()}

    def validate(self, n_text_ctx: int, n_audio_ctx: int) -> None:
        """Raise PackBuildError for an impossible combination."""
        if self.precision not in ("fp32", "fp16"):
            raise PackBuildError(f"precision must be fp32 or fp16, not {self.precision!r}")
        if self.linear not in ("matmul", "conv"):
            raise PackBuildError(f"linear must be matmul or conv, not {self.linear!r}")
        if self.vocab not in ("auto", "fp32", "int8"):
            raise PackBuildError(f"vocab must be auto, fp32 or int8, not {self.vocab!r}")
        if self.layers not in ("auto", "fp32", "int8"):
            raise PackBuildError(f"layers must be auto, fp32 or int8, not {self.layers!r}")
        if self.layers == "int8" and self.linear != "matmul":
            raise PackBuildError("int8 layers need the matmul lowering")
        if self.cpu_variant not in ("auto", "none", "int8"):
            raise PackBuildError(f"cpu_variant must be auto, none or int8, not {self.cpu_variant!r}")
        if self.attention not in ("standard", "fused"):
            raise PackBuildError(f"attention must be standard or fused, not {self.attention!r}")
        if not self.buckets or any(b <= 0 or 50 * b > n_audio_ctx for b in self.buckets):
            raise PackBuildError(f"buckets must be between 1 and {n_audio_ctx // 50} seconds, not {self.buckets}")
        if self.verify_chunk < 2:
            raise PackBuildError("a verifier checks at least 2 tokens")
        if self.beam_size < 0:
            raise PackBuildError("beam_size must be 0 (no beam graph) or more")
        if self.tail_chunk < 2 or any(k < 2 for h in self.heads.values() for k in h):
            raise PackBuildError("every decoder chunk must run at least 2 steps")
        starts = {sum(h) for h in self.heads.values()}
        if len(starts) != 1:
            raise PackBuildError(f"the schedule heads must cover the same positions to share the tail: {self.heads}")
        if self.max_positions + 1 > n_text_ctx:
            raise PackBuildError(f"max_positions {self.max_positions} exceeds the model's {n_text_ctx} positions")


def _npu_host() -> bool:
    """Windows ARM64: the packs built here are the NPU's (fp32 graphs, ``BuildOptions``)."""
    return sys.platform == "win32" and platform.machine().lower() in ("arm64", "aarch64")


def chunk_plan(options: BuildOptions) -> dict[int, list[tuple[int, int]]]:
    """(start, size) of every chunk graph per bucket.

    Each schedule contributes its chunks; a bucket longer than :data:`SHORT_MAX_S` (the 30 s
    re-inference window, and the long inputs of speculative rounds) continues with
    ``tail_chunk``-sized chunks while they consume positions ≤ max_positions: its audio may hold
    more words than 30 positions, and all long buckets then share one cache size, so one set of
    decoder graphs.
    """
    plan: dict[int, list[tuple[int, int]]] = {}
    schedules = options.schedules()
    for bucket in options.buckets:
        chunks: set[tuple[int, int]] = set()
        end = 0
        for sizes in schedules.values():
            chunks.update(schedule_chunks(sizes))
            end = max(end, sum(sizes))
        if bucket > SHORT_MAX_S:
            start = end
            while start + options.tail_chunk <= options.max_positions + 1:
                chunks.add((start, options.tail_chunk))
                start += options.tail_chunk
        plan[bucket] = sorted(chunks)
    return plan


def prompt_length(multilingual: bool) -> int:
    """Tokens of the decoder prompt: ``[SOT, lang, task, notimestamps]`` or ``[SOT, notimestamps]``."""
    return 4 if multilingual else 2


def known_steps(options: BuildOptions, prompt_len: int) -> dict[tuple[int, int], int]:
    """(start, size) → steps at the chunk's head whose consumed tokens the host always has.

    A round forces its whole prompt, and the prefixed schedule at least one prefix token as well, so
    the first chunk of the default schedule knows ``prompt_len`` tokens and the first chunk of the
    prefixed one ``prompt_len + 1`` (capped at the chunk size; the smaller of the two if both
    schedules begin with the same chunk). Every other chunk knows only its ``token`` input (1).
    """
    known: dict[tuple[int, int], int] = {}
    for name, sizes in options.schedules().items():
        head = (0, sizes[0])
        given = min(sizes[0], prompt_len + (1 if name == "prefixed" else 0))
        known[head] = min(known.get(head, given), given)
    return known


def cache_slots(chunks: Iterable[tuple[int, int]]) -> int:
    """Self-attention cache slots of a bucket: the positions before its last chunk's start (≥ 1)."""
    return max(1, max(start for start, _ in chunks))


def _save(model: onnx.ModelProto, path: Path) -> list[str]:
    """Write ``model`` and return the names of its weights in ``weights.bin`` (external data)."""
    onnx.save_model(model, path)
    onnx.checker.check_model(str(path))
    return [t.name for t in model.graph.initializer if t.data_location == onnx.TensorProto.EXTERNAL]


def load_any_checkpoint(root: Path | str, *, name: str | None = None, revision: str | None = None) -> Checkpoint:
    """Parse a Hugging Face checkpoint folder, or a CTranslate2 one when it has ``model.bin`` (or
    its parts) and no ``model.safetensors``."""
    root = Path(root)
    if not (root / WEIGHTS).is_file() and is_ct2_folder(root):
        return load_ct2_checkpoint(root, name=name, revision=revision)
    return load_checkpoint(root, name=name, revision=revision)


def build_pack(
    checkpoint: Path | str | Checkpoint,
    out: Path | str,
    options: BuildOptions | None = None,
    *,
    name: str | None = None,
    revision: str | None = None,
    progress: Callable[[int, int, str], None] | None = None,
) -> Pack:
    """Build a pack from a checkpoint directory into ``out`` (which must not exist).

    Args:
        checkpoint: a Hugging Face or CTranslate2 checkpoint folder (or an already parsed :class:`Checkpoint`).
        out: the pack directory to create.
        options: what to build (defaults: fp32, matmul, all buckets, the paper's schedules).
        name: source name recorded in the manifest (default: the checkpoint's).
        revision: source revision recorded in the manifest.
        progress: called as ``progress(done, total, file_name)`` after each graph.

    Returns:
        the loaded pack.

    Raises:
        PackBuildError: a bad checkpoint (the file is named), bad options, ``out`` exists, or the
            pack cannot be written (a full disk: said so; nothing is left behind).
    """
    options = options or BuildOptions()
    out = Path(out)
    if out.exists():
        raise PackBuildError(f"{out} already exists: choose another output or remove it first")
    if not out.parent.is_dir():
        raise PackBuildError(f"{out.parent} does not exist")
    ckpt = checkpoint if isinstance(checkpoint, Checkpoint) else load_any_checkpoint(checkpoint, name=name, revision=revision)
    options.validate(ckpt.dims.n_text_ctx, ckpt.dims.n_audio_ctx)
    tmp = out.parent / f".{out.name}.partial-{os.getpid()}"
    if tmp.exists():
        shutil.rmtree(tmp)
    tmp.mkdir()
    try:
        _write_pack(ckpt, tmp, options, progress)
        replace_file(tmp, out)
    except OSError as exc:  # a full disk, a folder it cannot write: said, nothing left behind
        shutil.rmtree(tmp, ignore_errors=True)
        raise PackBuildError(f"cannot write the pack in {out.parent}: {write_problem(exc, out.parent, needed=2**30)}; "
                             "nothing was kept") from exc
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    logger.info("built pack %s", out)
    return Pack.load(out)


def _write_pack(ckpt: Checkpoint, root: Path, options: BuildOptions,
                progress: Callable[[int, int, str], None] | None) -> None:
    plan = chunk_plan(options)
    known = known_steps(options, prompt_length(ckpt.multilingual))
    slots = {str(b): cache_slots(plan[b]) for b in plan}
    # one chunk graph per (cache slots, size, known steps), shared by the buckets with that cache
    graphs = sorted({(slots[str(b)], size, known.get((start, size), 1)) for b in plan for start, size in plan[b]})
    # a verifier per cache: closing rounds (long buckets) and the live rounds that revise an open
    # utterance's drafts (short buckets: opening and reaching-back rounds) check the drafts with it
    verify_slots = sorted({slots[str(b)] for b in plan})
    cpu = options.cpu_weights(ckpt.dims.d_model)
    long_slots = sorted({slots[str(b)] for b in plan if b > SHORT_MAX_S})
    beam_slots = long_slots if options.beam_size > 1 else []  # closing rounds' beam search (deviation 43)
    per_set = len(plan) + len(graphs) + len(verify_slots) + len(beam_slots)
    total = per_set * (2 if cpu else 1)
    done = 0
    store = WeightStore(root / WEIGHTS_FILE, options.precision)
    layers = options.layer_weights(ckpt.dims.d_model)
    encoders: dict[str, str] = {}
    decoders: list[dict] = []
    verifiers: dict[str, dict] = {}
    beams: dict[str, dict] = {}
    graph_weights: dict[str, list[str]] = {}

    def step(file: str) -> None:
        nonlocal done
        done += 1
        logger.debug("wrote %s (%d/%d)", file, done, total)
        if progress:
            progress(done, total, file)

    def write_set(prefix: str, linear: str, vocab: str, int8: bool) -> dict[str, str]:
        """Write one set of graphs (file names ``prefix`` + the main set's); main name -> file."""
        names: dict[str, str] = {}

        def save(model: onnx.ModelProto, name: str) -> None:
            file = prefix + name
            graph_weights[file] = _save(model, root / file)
            names[name] = file
            step(file)

        for bucket in sorted(plan):
            save(build_encoder(ckpt, store, bucket, linear, int8, options.attention == "fused"),
                 f"encoder_{bucket}s.onnx")
        for n_slots, size, k in graphs:
            save(build_decoder_chunk(ckpt, store, size, n_slots, linear, k, vocab, int8=int8),
                 f"{graph_name(n_slots, size, k)}.onnx")
        for n_slots in verify_slots:
            size = options.verify_chunk
            save(build_decoder_chunk(ckpt, store, size, n_slots, linear, size, vocab, verify=True, int8=int8),
                 f"{graph_name(n_slots, size, size, verify=True)}.onnx")
        for n_slots in beam_slots:
            size = options.beam_size
            save(build_decoder_chunk(ckpt, store, size, n_slots, linear, size, vocab, int8=int8, beam=True),
                 f"{graph_name(n_slots, size, beam=True)}.onnx")
        return names

    try:
        write_set("", options.linear, options.vocab_projection, layers == "int8")
        cpu_graphs = write_set(CPU_PREFIX, "matmul", cpu[0], cpu[1] == "int8") if cpu else {}
    finally:
        store.close()
    for bucket in sorted(plan):
        encoders[str(bucket)] = f"encoder_{bucket}s.onnx"
        for start, size in plan[bucket]:
            k = known.get((start, size), 1)
            decoders.append({"bucket": bucket, "start": start, "size": size, "known": k,
                             "file": f"{graph_name(slots[str(bucket)], size, k)}.onnx"})
    for n_slots in verify_slots:
        verifiers[str(n_slots)] = {"file": f"{graph_name(n_slots, options.verify_chunk, options.verify_chunk, verify=True)}.onnx",
                                   "size": options.verify_chunk}
    for n_slots in beam_slots:
        beams[str(n_slots)] = {"file": f"{graph_name(n_slots, options.beam_size, beam=True)}.onnx", "size": options.beam_size}
    (root / VOCAB_FILE).write_text(json.dumps([t.hex() for t in ckpt.token_bytes]), encoding="utf-8")
    files = {p.name: file_sha256(p) for p in sorted(root.iterdir()) if p.is_file()}
    manifest = {
        "format": FORMAT,
        "format_version": FORMAT_VERSION,
        "source": ckpt.source,
        "dims": asdict(ckpt.dims),
        "multilingual": ckpt.multilingual,
        "vocabulary": VOCAB_FILE,
        "special": {**asdict(ckpt.special), "languages": dict(ckpt.special.languages)},
        "alignment_heads": [list(pair) for pair in ckpt.alignment_heads],
        "alignment_heads_source": ckpt.alignment_heads_source,
        "buckets": sorted(plan),
        "schedules": {k: list(v) for k, v in options.schedules().items()},
        "long_chunk": options.tail_chunk,
        "cache_slots": slots,
        "max_positions": options.max_positions,
        "precision": options.precision,
        "linear": options.linear,
        "vocab": options.vocab_projection,
        "layers": layers,
        "attention": options.attention,
        "verifiers": verifiers,
        "beams": beams,
        **({"cpu_variant": {"vocab": cpu[0], "layers": cpu[1], "graphs": cpu_graphs}} if cpu else {}),
        "weights": WEIGHTS_FILE,
        "weights_index": store.index,
        "graph_weights": graph_weights,
        "encoders": encoders,
        "decoders": decoders,
        "files": files,
        "builder": {"captioner": __version__, "onnx_opset": OPSET, "onnx": onnx.__version__},
    }
    (root / MANIFEST).write_text(json.dumps(manifest, indent=1), encoding="utf-8")


def parse_buckets(values: Iterable[str]) -> tuple[int, ...]:
    """``["3", "30"]`` or ``["3,4"]`` -> (3, 30); PackBuildError on anything else."""
    out: list[int] = []
    for value in values:
        for part in str(value).split(","):
            if not part.strip():
                continue
            try:
                out.append(int(part))
            except ValueError:
                raise PackBuildError(f"bucket {part!r} is not a whole number of seconds") from None
    return tuple(sorted(set(out)))
