"""A model pack on disk: ``manifest.json``, the vocabulary, the shared weight file and the ONNX graphs.

A pack is what ``captioner models build`` writes and what the engine reads. The manifest keys are a
contract (ARCHITECTURE.md §5); :class:`Pack` is the only reader, validating them on load so that the
engine never meets a half-formed pack. Layout of a pack directory::

    manifest.json        format, source, dims, special ids, alignment heads, buckets, schedules, files,
                         every weight's place in weights.bin and the weights each graph uses
    tokens.json          id -> hex of the token's raw bytes (byte-level BPE decoded)
    weights.bin          every weight tensor once; each graph's initializers point into it by offset
    encoder_3s.onnx ...  one encoder graph per bucket (seconds)
    decoder_s25_k5.onnx ...    one decoder chunk graph per (cache slots, chunk size, known steps),
                               shared by the buckets with that cache (any number of encoder frames);
                               the manifest maps every (bucket, start, size) of the chunk plan to one
    cpu_encoder_3s.onnx ...    optional: the CPU variant of every graph (manifest ``cpu_variant``),
                               e.g. int8 beside the NPU's fp32 graphs, over the same weights.bin

Weight sharing contract for the runtime: every initializer stored in ``weights.bin`` (the ONNX
``data_location == EXTERNAL`` ones) has the same name and the same bytes in every graph of the pack,
so the runtime may load each once and hand the same OrtValue to every session
(``SessionOptions.add_initializer``). Small graph-specific constants are stored inside the graphs.
"""

from __future__ import annotations

import hashlib
import json
import logging
import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, fields
from pathlib import Path
from types import MappingProxyType
from typing import Any

from captioner.errors import ModelError

__all__ = [
    "FORMAT",
    "FORMAT_VERSION",
    "FRAMES_DIM",
    "LAYER_INPUTS",
    "MANIFEST",
    "Dims",
    "Pack",
    "SpecialTokens",
    "WeightRef",
    "decoder_outputs",
    "describe_computation",
    "file_sha256",
    "layer_feeds",
    "layer_input",
    "layer_input_names",
    "schedule_chunks",
]

logger = logging.getLogger(__name__)


def describe_computation(layers: str, precision: str, linear: str, vocab: str, attention: str = "standard") -> str:
    """How a pack computes, said the same way everywhere (``models build``/``list``, ``doctor``, the
    bench's reports): ``int8 layers, fp32 weights file, matmul, int8-ranked vocabulary`` (and
    ``, fused attention`` where the pack has it). The arguments are the manifest's fields."""
    ranked = "int8-ranked" if vocab == "int8" else "fp32"
    fused = ", fused attention" if attention == "fused" else ""
    return f"{layers} layers, {precision} weights file, {linear}, {ranked} vocabulary{fused}"

FORMAT = "captioner-pack"
# 2: fixed-size self-attention cache, one graph per chunk size (not per position);
# 3: the chunk graphs take each layer's caches and cross K/V as inputs of their own, and any number
#    of encoder frames (one graph per cache size, chunk size and known steps, shared by buckets)
# 4: ``graph_weights`` lists each graph's weights in ``weights.bin``, so the runtime hands them to a
#    session without parsing the graph (the ``onnx`` package cost the app 11 MB of RSS for that)
# 5: the chunk graphs also return ``logsumexp``, ``nospeech_logit`` and ``lang_logits``
#    (:func:`decoder_outputs`), and the batched head's first row (the SOT row) predicts them too
FORMAT_VERSION = 5
MANIFEST = "manifest.json"

# Per-layer inputs of a decoder chunk graph, in the order they follow the shared inputs: one tensor
# per layer and kind, so the graph reads each layer's K/V where the host keeps them (a Split of a
# stacked [L, …] input copies it on every dispatch: 37 MB per chunk for whisper-base at 30 s).
LAYER_INPUTS = ("self_k", "self_v", "cross_k", "cross_v")
FRAMES_DIM = "frames"  # the symbolic number of encoder frames of a chunk graph (shared by buckets)
BEAM_CACHE_DIM = "beam_cache"  # the symbolic cache rows of a beam step (positions × hypotheses)


def decoder_outputs(special: SpecialTokens) -> tuple[str, ...]:
    """The outputs of a decoder chunk graph, in order (``decoder_graph.py`` documents each).

    ``nospeech_logit`` only when the vocabulary has ``<|nospeech|>``, ``lang_logits`` only for a
    multilingual vocabulary (``special.languages`` not empty).
    """
    return ("tokens", "token_logit", "eot_logit", "logsumexp",
            *(("nospeech_logit",) if special.nospeech is not None else ()),
            *(("lang_logits",) if special.languages else ()),
            "attn_last", "attn_align", "new_k", "new_v")


BEAM_OUTPUTS = ("top_tokens", "top_logits")  # a beam step's outputs after the chunk graph's


def layer_input(kind: str, layer: int) -> str:
    """The chunk graph's input of ``kind`` (one of :data:`LAYER_INPUTS`) for ``layer``: ``self_k_0``."""
    return f"{kind}_{layer}"


def layer_input_names(layers: int) -> list[str]:
    """``self_k_0, self_v_0, cross_k_0, cross_v_0, self_k_1, …``: the per-layer inputs of a chunk graph."""
    return [layer_input(kind, i) for i in range(layers) for kind in LAYER_INPUTS]


def layer_feeds(**stacked) -> dict:
    """Per-layer feeds from stacked arrays, as views (no copy).

    ``stacked`` maps each of :data:`LAYER_INPUTS` to its [L, 1, …] array (caches [L, 1, H, S, hd],
    cross K/V [L, 1, H, hd, T]); the result maps ``kind_i`` to layer i's [H, …] view.
    """
    return {layer_input(kind, i): array[i, 0] for kind, array in stacked.items() for i in range(array.shape[0])}


@dataclass(frozen=True, slots=True)
class Dims:
    """Model dimensions, as in the checkpoint's ``config.json``.

    Attributes:
        n_mels: mel bins of the input (80, or 128 for large-v3).
        n_audio_ctx: encoder positions of a 30 s window (1500).
        d_model: hidden width.
        encoder_layers, encoder_heads, decoder_layers, decoder_heads: transformer depth and heads.
        head_dim: ``d_model // heads`` (the same for encoder and decoder in every Whisper).
        n_text_ctx: decoder positions (448).
        n_vocab: vocabulary size (51865 multilingual, 51864 English-only, 51866 large-v3).
        encoder_ffn_dim, decoder_ffn_dim: width of the feed-forward blocks.
    """

    n_mels: int
    n_audio_ctx: int
    d_model: int
    encoder_layers: int
    encoder_heads: int
    decoder_layers: int
    decoder_heads: int
    head_dim: int
    n_text_ctx: int
    n_vocab: int
    encoder_ffn_dim: int
    decoder_ffn_dim: int

    @property
    def parameters(self) -> int:
        """About how many weights the model has (its size, whatever the pack's number format): the
        linear layers, convolutions and embeddings, biases and norms left out (tiny 38 M, base 73 M,
        small 241 M, where the published counts are 39, 74 and 244 M)."""
        d = self.d_model
        encoder = self.encoder_layers * (4 * d * d + 2 * d * self.encoder_ffn_dim)
        decoder = self.decoder_layers * (8 * d * d + 2 * d * self.decoder_ffn_dim)
        conv = 3 * d * (self.n_mels + d)
        embeddings = d * (self.n_vocab + self.n_text_ctx + self.n_audio_ctx)
        return encoder + decoder + conv + embeddings


@dataclass(frozen=True, slots=True)
class SpecialTokens:
    """Ids of Whisper's special tokens.

    Attributes:
        eot: ``<|endoftext|>``; every id ``>= eot`` is special or a timestamp.
        sot: ``<|startoftranscript|>``.
        transcribe, translate: task tokens (None for English-only models, whose prompt has no task).
        notimestamps: ``<|notimestamps|>``.
        first_timestamp: ``<|0.00|>``.
        startofprev: ``<|startofprev|>`` if the vocabulary has it.
        nospeech: ``<|nospeech|>`` (``<|nocaptions|>`` in older vocabularies) if present.
        languages: language code -> token id (``"en"`` -> 50259); empty for English-only models.
    """

    eot: int
    sot: int
    transcribe: int | None
    translate: int | None
    notimestamps: int
    first_timestamp: int
    startofprev: int | None
    nospeech: int | None
    languages: Mapping[str, int] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class WeightRef:
    """Where one shared weight lies in ``weights.bin`` (the manifest's ``weights_index`` entry).

    Attributes:
        name: the initializer name the graphs use.
        dtype: ``"float32"`` or ``"float16"``.
        shape: its dimensions.
        offset, length: its bytes in the weight file.
    """

    name: str
    dtype: str
    shape: tuple[int, ...]
    offset: int
    length: int


def file_sha256(path: Path, chunk: int = 1 << 20) -> str:
    """Hex sha256 of a file, read in 1 MiB chunks."""
    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        while block := fh.read(chunk):
            digest.update(block)
    return digest.hexdigest()


def _dataclass_from(cls: type, data: Any, what: str, manifest: Path) -> Any:
    """Build ``cls`` from a manifest dict, naming the manifest and key on any mismatch."""
    if not isinstance(data, dict):
        raise ModelError(f"{manifest}: '{what}' must be an object")
    names = [f.name for f in fields(cls)]
    missing = [n for n in names if n not in data]
    if missing:
        raise ModelError(f"{manifest}: '{what}' lacks {', '.join(missing)}")
    return cls(**{n: data[n] for n in names})


def schedule_chunks(sizes: Iterable[int], start: int = 0) -> list[tuple[int, int]]:
    """(start, size) of consecutive decoder chunks of ``sizes`` from position ``start``.

    ``(4, 6, 5)`` → ``[(0, 4), (4, 6), (10, 5)]``: a schedule as the chunk graphs that run it.
    """
    plan = []
    for size in sizes:
        plan.append((start, int(size)))
        start += int(size)
    return plan


@dataclass(frozen=True, slots=True)
class Pack:
    """A loaded, validated pack directory (read-only).

    Attributes:
        root: the pack directory.
        manifest: the parsed ``manifest.json``.
        dims: model dimensions.
        special: special token ids.
        multilingual: the model has language and task tokens.
        alignment_heads: (decoder layer, head) pairs averaged into ``attn_align`` (for DTW).
        buckets: encoder buckets in seconds, ascending, e.g. ``(3, 4, 5, 6, 10, 20, 30)``.
        schedules: chunk sizes per schedule name: ``{"default": (4, 6, 5, 5, 5, 5),
            "prefixed": (5, 5, 5, 5, 5, 5)}`` with K = 5, ``(4, 6, 3, …, 3)`` with K = 3 (the paper's
            prefixed head is (6, 4); see ``BuildOptions``).
        long_chunk: the tail chunk size K, with which the buckets over 6 s continue after the schedule.
        max_positions: decoder positions the longest bucket reaches (224).
        cache_slots: bucket → S, the slots of the fixed self-attention cache its chunk graphs read.
        precision: ``"fp32"`` or ``"fp16"`` (weights; graph I/O is always float32).
        linear: ``"matmul"`` or ``"conv"`` (lowering of the linear layers).
        vocab: the decoder's vocabulary projection, ``"fp32"`` or ``"int8"`` (ranked in int8, the
            best candidates scored in fp32; ``BuildOptions.vocab``); packs without the field: fp32.
        layers: the linear layers' weights, ``"fp32"`` or ``"int8"`` (``BuildOptions.layers``);
            packs without the field: fp32.
        attention: the encoders' self-attention, ``"standard"`` or ``"fused"`` (ONNX Runtime's
            contrib kernel, ``BuildOptions.attention``); packs without the field: standard.
        token_bytes: id -> raw bytes of that single token (specials as their ``<|...|>`` text).
        pack_hash: hex sha256 of ``manifest.json`` (key of EP-context caches).
        cpu_vocab, cpu_layers: the vocabulary projection and layer weights of the pack's CPU variant
            (manifest ``cpu_variant``: a second set of graphs over the same ``weights.bin`` that the
            CPU provider runs instead of the main ones, e.g. int8 beside the NPU's fp32;
            ``BuildOptions.cpu_variant``); None when the pack has none (older packs too).
    """

    root: Path
    manifest: dict
    dims: Dims
    special: SpecialTokens
    multilingual: bool
    alignment_heads: tuple[tuple[int, int], ...]
    buckets: tuple[int, ...]
    schedules: Mapping[str, tuple[int, ...]]
    long_chunk: int
    max_positions: int
    cache_slots: Mapping[int, int]
    precision: str
    linear: str
    token_bytes: tuple[bytes, ...]
    pack_hash: str
    vocab: str
    layers: str
    attention: str
    cpu_vocab: str | None
    cpu_layers: str | None
    _encoders: Mapping[int, str] = field(repr=False)
    _decoders: Mapping[tuple[int, int, int], tuple[str, int]] = field(repr=False)
    _verifiers: Mapping[int, tuple[str, int]] = field(repr=False)
    _beams: Mapping[int, tuple[str, int]] = field(repr=False)
    _graph_weights: Mapping[str, tuple[WeightRef, ...]] = field(repr=False)
    _cpu_graphs: Mapping[str, str] = field(repr=False)

    @property
    def description(self) -> str:
        """How this pack computes (:func:`describe_computation`)."""
        return describe_computation(self.layers, self.precision, self.linear, self.vocab, self.attention)

    def encoder_file(self, bucket: int) -> Path:
        """The encoder graph of ``bucket`` seconds; ModelError if the pack has no such bucket."""
        try:
            return self.root / self._encoders[int(bucket)]
        except KeyError:
            raise ModelError(f"pack {self.root} has no {bucket} s encoder (buckets: {self.buckets})") from None

    def decoder_file(self, bucket: int, start: int, size: int) -> Path:
        """The decoder chunk graph that starts at position ``start`` and runs ``size`` steps."""
        return self.root / self._decoder(bucket, start, size)[0]

    def decoder_known(self, bucket: int, start: int, size: int) -> int:
        """Steps at the head of that chunk that consume given tokens (the graph batches them; ≥ 1)."""
        return self._decoder(bucket, start, size)[1]

    def _decoder(self, bucket: int, start: int, size: int) -> tuple[str, int]:
        try:
            return self._decoders[(int(bucket), int(start), int(size))]
        except KeyError:
            # a chunk graph serves any start (positions are an input): off the plan, e.g. a draft
            # decode's sequential chunk after a verifier, any sequential graph of that size will do
            for (b, _, k), entry in self._decoders.items():
                if b == int(bucket) and k == int(size) and entry[1] == 1 and int(start) > 0:
                    return entry
            raise ModelError(
                f"pack {self.root} has no decoder chunk for bucket {bucket} s, start {start}, size {size}"
            ) from None

    def verifier(self, bucket: int) -> tuple[Path, int] | None:
        """The verifier graph of ``bucket``'s cache and the tokens it checks per dispatch (every
        batched row predicts: ``decoder_graph.build_decoder_chunk(verify=True)``); None when the
        pack has none for it (packs built before verifiers, and the short buckets of packs built
        before 2026-11-29)."""
        entry = self._verifiers.get(self.cache_slots[int(bucket)])
        return (self.root / entry[0], entry[1]) if entry else None

    def beam(self, bucket: int) -> tuple[Path, int] | None:
        """The beam-step graph of ``bucket``'s cache and its number of hypotheses
        (``decoder_graph.build_decoder_chunk(beam=True)``); None when the pack has none for it (the
        short buckets, and packs built before beam search)."""
        entry = self._beams.get(self.cache_slots[int(bucket)])
        return (self.root / entry[0], entry[1]) if entry else None

    def decoder_chunks(self, bucket: int) -> list[tuple[int, int]]:
        """(start, size) of every chunk graph available for ``bucket``, sorted."""
        return sorted((s, k) for (b, s, k) in self._decoders if b == int(bucket))

    def chunk_plan(self, bucket: int, prefixed: bool) -> tuple[tuple[int, int], ...]:
        """The (start, size) chunks a round in ``bucket`` runs, in order.

        The schedule (``"prefixed"`` when the round has a carried prefix, else ``"default"``), then,
        for a long bucket, chunks of ``long_chunk`` steps while the pack has them (up to
        ``max_positions``). This is the one home of the plan: the engine runs it, ``verify``
        checks it, the build writes the graphs it names.

        Raises:
            ModelError: the pack lacks one of the schedule's chunk graphs.
        """
        available = set(self.decoder_chunks(bucket))
        plan = schedule_chunks(self.schedules["prefixed" if prefixed else "default"])
        start = sum(size for _, size in plan)
        while (start, self.long_chunk) in available:
            plan.append((start, self.long_chunk))
            start += self.long_chunk
        missing = [c for c in plan if c not in available]
        if missing:
            raise ModelError(f"pack {self.root} lacks decoder chunks {missing} of bucket {bucket} s")
        return tuple(plan)

    def graph_weights(self, graph: Path | str) -> tuple[WeightRef, ...] | None:
        """The shared weights of ``graph`` (a file of this pack); None for a graph the pack does not
        list (e.g. the bench's own graphs)."""
        graph = Path(graph)
        if graph.parent != self.root:
            return None
        return self._graph_weights.get(graph.name)

    def weight_index(self) -> dict[str, WeightRef]:
        """Every shared weight of the pack's graphs (main and CPU variant) by name."""
        return {ref.name: ref for refs in self._graph_weights.values() for ref in refs}

    def weights_file(self) -> Path:
        """The shared external-data file that every graph's initializers reference."""
        return self.root / self.manifest["weights"]

    def graph_files(self) -> list[Path]:
        """Every ONNX graph of the pack, once (encoders first, then decoders in (bucket, start) order)."""
        enc = [self.root / self._encoders[b] for b in sorted(self._encoders)]
        dec = dict.fromkeys(self.root / self._decoders[key][0] for key in sorted(self._decoders))
        ver = [self.root / self._verifiers[s][0] for s in sorted(self._verifiers)]
        beams = [self.root / self._beams[s][0] for s in sorted(self._beams)]
        return enc + list(dec) + ver + beams

    def cpu_file(self, graph: Path | str) -> Path:
        """The graph the CPU provider runs for ``graph`` (a main graph of this pack): its CPU
        variant where the pack has one, else ``graph`` itself."""
        graph = Path(graph)
        variant = self._cpu_graphs.get(graph.name) if graph.parent == self.root else None
        return self.root / variant if variant else graph

    def cpu_graph_files(self) -> list[Path]:
        """The CPU variant's graphs (none for a pack without one)."""
        return [self.root / f for f in self._cpu_graphs.values()]

    @classmethod
    def load(cls, root: Path | str, *, verify: bool = False) -> Pack:
        """Read and validate the pack in ``root``.

        Args:
            root: the pack directory.
            verify: also check the sha256 of every file listed in the manifest (slow for big packs).

        Raises:
            ModelError: a missing, unreadable or inconsistent file; the message names it.
        """
        root = Path(root)
        mpath = root / MANIFEST
        if not root.is_dir():
            raise ModelError(f"model pack not found: {root}")
        try:
            raw = mpath.read_bytes()
            manifest = json.loads(raw)
        except FileNotFoundError:
            raise ModelError(f"{mpath} is missing: {root} is not a model pack") from None
        except (OSError, ValueError) as exc:
            raise ModelError(f"{mpath} is unreadable or not JSON: {exc}") from exc
        if not isinstance(manifest, dict) or manifest.get("format") != FORMAT:
            raise ModelError(f"{mpath} is not a captioner pack manifest")
        if manifest.get("format_version") != FORMAT_VERSION:
            raise ModelError(
                f"{mpath} has format_version {manifest.get('format_version')!r}; this captioner reads "
                f"{FORMAT_VERSION}: rebuild the pack with 'captioner models build'"
            )
        try:
            return cls._from_manifest(root, manifest, hashlib.sha256(raw).hexdigest(), verify)
        except (KeyError, TypeError, ValueError) as exc:
            raise ModelError(f"{mpath} is inconsistent: {exc!r}") from exc

    @classmethod
    def _from_manifest(cls, root: Path, manifest: dict, pack_hash: str, verify: bool) -> Pack:
        mpath = root / MANIFEST
        dims = _dataclass_from(Dims, manifest["dims"], "dims", mpath)
        sp = dict(manifest["special"])
        sp["languages"] = MappingProxyType({str(k): int(v) for k, v in sp.get("languages", {}).items()})
        special = _dataclass_from(SpecialTokens, sp, "special", mpath)
        files: dict[str, str] = manifest["files"]
        for name in files:
            if not (root / name).is_file():
                raise ModelError(f"{root / name} is missing (listed in {mpath})")
        encoders = {int(b): str(f) for b, f in manifest["encoders"].items()}
        decoders = {(int(d["bucket"]), int(d["start"]), int(d["size"])): (str(d["file"]), int(d["known"]))
                    for d in manifest["decoders"]}
        verifiers = {int(s): (str(v["file"]), int(v["size"])) for s, v in manifest.get("verifiers", {}).items()}
        beams = {int(s): (str(v["file"]), int(v["size"])) for s, v in manifest.get("beams", {}).items()}
        for name in [*encoders.values(), *(f for f, _ in decoders.values()), *(f for f, _ in verifiers.values()),
                     *(f for f, _ in beams.values()), manifest["weights"], manifest["vocabulary"]]:
            if name not in files:
                raise ModelError(f"{mpath} does not list {name} in 'files'")
        buckets = tuple(sorted(int(b) for b in manifest["buckets"]))
        if set(buckets) != set(encoders):
            raise ModelError(f"{mpath}: buckets {buckets} do not match the encoders {sorted(encoders)}")
        slots = {int(b): int(s) for b, s in manifest["cache_slots"].items()}
        if set(slots) != set(buckets):
            raise ModelError(f"{mpath}: cache_slots {sorted(slots)} do not match the buckets {buckets}")
        main_graphs = {*encoders.values(), *(f for f, _ in decoders.values()), *(f for f, _ in verifiers.values()),
                       *(f for f, _ in beams.values())}
        variant = manifest.get("cpu_variant")
        cpu_graphs = {str(k): str(v) for k, v in variant["graphs"].items()} if variant else {}
        if variant and set(cpu_graphs) != main_graphs:
            raise ModelError(f"{mpath}: cpu_variant does not name a CPU graph for every graph of the pack")
        for name in cpu_graphs.values():
            if name not in files:
                raise ModelError(f"{mpath} does not list {name} in 'files'")
        graph_weights = _graph_weights(manifest, mpath, [*main_graphs, *cpu_graphs.values()])
        if verify:
            for name, digest in files.items():
                if file_sha256(root / name) != digest:
                    raise ModelError(f"{root / name} is corrupt (sha256 differs from {mpath})")
        token_bytes = _load_vocabulary(root / manifest["vocabulary"], dims.n_vocab)
        return cls(
            root=root,
            manifest=manifest,
            dims=dims,
            special=special,
            multilingual=bool(manifest["multilingual"]),
            alignment_heads=tuple((int(l_), int(h)) for l_, h in manifest["alignment_heads"]),
            buckets=buckets,
            schedules=MappingProxyType({str(k): tuple(int(x) for x in v) for k, v in manifest["schedules"].items()}),
            long_chunk=int(manifest["long_chunk"]),
            max_positions=int(manifest["max_positions"]),
            cache_slots=MappingProxyType(slots),
            precision=str(manifest["precision"]),
            linear=str(manifest["linear"]),
            token_bytes=token_bytes,
            pack_hash=pack_hash,
            vocab=str(manifest.get("vocab", "fp32")),
            layers=str(manifest.get("layers", "fp32")),
            attention=str(manifest.get("attention", "standard")),
            cpu_vocab=str(variant["vocab"]) if variant else None,
            cpu_layers=str(variant["layers"]) if variant else None,
            _encoders=MappingProxyType(encoders),
            _decoders=MappingProxyType(decoders),
            _verifiers=MappingProxyType(verifiers),
            _beams=MappingProxyType(beams),
            _graph_weights=MappingProxyType(graph_weights),
            _cpu_graphs=MappingProxyType(cpu_graphs),
        )


def _graph_weights(manifest: dict, mpath: Path, graphs: list[str]) -> dict[str, tuple[WeightRef, ...]]:
    """``graph_weights`` resolved through ``weights_index``, checked for every graph of the pack."""
    try:
        index = manifest["weights_index"]
        refs = {name: WeightRef(name, str(e["dtype"]), tuple(int(d) for d in e["shape"]), int(e["offset"]),
                                int(e["length"])) for name, e in index.items()}
        listed = manifest["graph_weights"]
        out = {str(g): tuple(refs[n] for n in names) for g, names in listed.items()}
    except KeyError as exc:
        raise ModelError(f"{mpath}: weights_index or graph_weights lacks {exc}") from None
    except (TypeError, ValueError, AttributeError) as exc:
        raise ModelError(f"{mpath}: malformed weights_index or graph_weights: {exc}") from None
    for ref in refs.values():
        size = {"float32": 4, "float16": 2, "int8": 1}.get(ref.dtype)
        if size is None or math.prod(ref.shape) * size != ref.length or ref.offset < 0:
            raise ModelError(f"{mpath}: weights_index entry {ref.name} is inconsistent")
    missing = sorted(set(graphs) - set(out))
    if missing:
        raise ModelError(f"{mpath}: graph_weights does not list {', '.join(missing)}")
    return out


def _load_vocabulary(path: Path, n_vocab: int) -> tuple[bytes, ...]:
    """Read ``tokens.json`` (a JSON list of hex strings, index = token id)."""
    try:
        table = json.loads(path.read_text(encoding="utf-8"))
        token_bytes = tuple(bytes.fromhex(h) for h in table)
    except (OSError, ValueError, TypeError) as exc:
        raise ModelError(f"{path} is unreadable or malformed: {exc}") from exc
    if len(token_bytes) != n_vocab:
        raise ModelError(f"{path} has {len(token_bytes)} tokens, the model has {n_vocab}")
    return token_bytes
