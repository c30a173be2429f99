"""Check a pack on disk: every file's sha256 and the consistency of the manifest with the graphs.

Used by ``captioner models verify`` and after install. A problem is reported as a
:class:`ModelError` naming the first bad file, with the count of further problems.
"""

from __future__ import annotations

import logging
from pathlib import Path

import onnx

from captioner.errors import ModelError
from captioner.models.pack import (
    FRAMES_DIM,
    MANIFEST,
    Pack,
    decoder_outputs,
    file_sha256,
    layer_input_names,
    schedule_chunks,
)

__all__ = ["pack_problems", "verify_pack"]

logger = logging.getLogger(__name__)

ENCODER_IO = (["mel", "n_frames"], ["cross_k", "cross_v"])
DECODER_INPUTS = ["token", "forced", "positions", "self_mask", "cross_mask"]  # then layer_input_names(L)


def _shape(value: onnx.ValueInfoProto) -> list[int | str]:
    """Static sizes, and the names of symbolic dimensions."""
    return [d.dim_param or d.dim_value for d in value.type.tensor_type.shape.dim]


def _graph_problems(pack: Pack, path: Path, bucket: int, size: int | None) -> list[str]:
    """Contract checks of one graph (names, shapes, references into the weight file)."""
    try:
        model = onnx.load(str(path), load_external_data=False)
    except Exception as exc:  # onnx raises DecodeError and friends from protobuf
        return [f"{path} is not a readable ONNX model: {exc}"]
    dims = pack.dims
    expect: dict[str, list[int | str]]
    if size is None:
        names = ENCODER_IO
        cross: list[int | str] = [dims.decoder_layers, 1, dims.decoder_heads, dims.head_dim, 50 * bucket]
        expect = {"mel": [1, dims.n_mels, 100 * bucket], "n_frames": [1], "cross_k": cross, "cross_v": cross}
    else:
        layers = layer_input_names(dims.decoder_layers)
        names = ([*DECODER_INPUTS, *layers], list(decoder_outputs(pack.special)))
        slots = pack.cache_slots[bucket]
        cache: list[int | str] = [dims.decoder_heads, slots, dims.head_dim]
        cross = [dims.decoder_heads, dims.head_dim, FRAMES_DIM]  # one graph serves every bucket
        new: list[int | str] = [dims.decoder_layers, 1, dims.decoder_heads, size, dims.head_dim]
        expect = {"token": [1], "forced": [size - 1], "positions": [size], "self_mask": [slots],
                  "cross_mask": [FRAMES_DIM], "tokens": [size], "token_logit": [size],
                  "eot_logit": [size], "logsumexp": [size], "nospeech_logit": [size],
                  "lang_logits": [size, len(pack.special.languages)],
                  "attn_last": [size, FRAMES_DIM], "attn_align": [size, FRAMES_DIM],
                  "new_k": new, "new_v": new}
        expect |= {name: cache if name.startswith("self_") else cross for name in layers}
    graph = model.graph
    got_in = [v.name for v in graph.input]
    got_out = [v.name for v in graph.output]
    if (got_in, got_out) != names:
        return [f"{path} has inputs {got_in} and outputs {got_out}, expected {names[0]} and {names[1]}"]
    problems = []
    for value in [*graph.input, *graph.output]:
        if _shape(value) != expect[value.name]:
            problems.append(f"{path}: {value.name} has shape {_shape(value)}, expected {expect[value.name]}")
    weights = pack.manifest["weights"]
    size_on_disk = pack.weights_file().stat().st_size
    index = pack.manifest.get("weights_index", {})
    external = [i.name for i in graph.initializer if i.data_location == onnx.TensorProto.EXTERNAL]
    listed = [ref.name for ref in pack.graph_weights(path) or ()]
    if sorted(external) != sorted(listed):  # the runtime hands a session exactly the listed weights
        problems.append(f"{path}: its weights differ from the manifest's graph_weights")
    for init in graph.initializer:
        if init.data_location != onnx.TensorProto.EXTERNAL:
            continue
        ext = {e.key: e.value for e in init.external_data}
        offset, length = int(ext.get("offset", 0)), int(ext.get("length", 0))
        if ext.get("location") != weights or offset + length > size_on_disk:
            problems.append(f"{path}: initializer {init.name} points outside {weights}")
        elif index and (init.name not in index or index[init.name]["offset"] != offset):
            problems.append(f"{path}: initializer {init.name} disagrees with the manifest's weights_index")
    return problems


def pack_problems(root: Path | str, *, checksums: bool = True) -> list[str]:
    """Every problem found in the pack at ``root`` (empty when it is sound)."""
    root = Path(root)
    try:
        pack = Pack.load(root)
    except ModelError as exc:
        return [str(exc)]
    problems: list[str] = []
    if checksums:
        for name, digest in pack.manifest["files"].items():
            if file_sha256(root / name) != digest:
                problems.append(f"{root / name} is corrupt: its sha256 differs from {root / MANIFEST}")
    listed = set(pack.manifest["files"]) | {MANIFEST}
    problems += [f"{p} is not listed in {root / MANIFEST}" for p in sorted(root.iterdir()) if p.name not in listed]
    schedules = pack.schedules.values()
    checked: set[Path] = set()  # decoder graphs are shared by the buckets with the same cache
    for bucket in pack.buckets:
        chunks = set(pack.decoder_chunks(bucket))
        for sizes in schedules:
            for start, size in schedule_chunks(sizes):
                if (start, size) not in chunks:
                    problems.append(f"{root / MANIFEST}: bucket {bucket} s lacks the chunk ({start}, {size})")
        if problems:
            return problems  # corrupt files make the graph checks below noisy
        graph_sizes: dict[Path, int | None] = {pack.encoder_file(bucket): None}
        graph_sizes |= {pack.decoder_file(bucket, *chunk): chunk[1] for chunk in sorted(chunks)}
        for path, chunk_size in graph_sizes.items():
            for variant in dict.fromkeys((path, pack.cpu_file(path))):  # the CPU variant keeps the contract
                if variant not in checked:
                    checked.add(variant)
                    problems += _graph_problems(pack, variant, bucket, chunk_size)
    return problems


def verify_pack(root: Path | str) -> Pack:
    """Check the pack at ``root`` fully (sha256 of every file, graph contracts).

    Raises:
        ModelError: naming the first problem (and how many more there are).
    """
    problems = pack_problems(root)
    if problems:
        for problem in problems:
            logger.warning("%s", problem)
        more = f" (and {len(problems) - 1} more problems)" if len(problems) > 1 else ""
        raise ModelError(problems[0] + more)
    return Pack.load(root)
