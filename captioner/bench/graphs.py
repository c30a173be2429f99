"""Extra decoder graphs for the comparisons, built over an existing pack's weights.

The strategies the bench compares must run the very same layers and weights as the pack:

* the single-step graph (K = 1: a dispatch per token) over the bucket's cache,
* the tail chunk sizes K = 3 and 7 next to the pack's 5 (paper Table 8),
* the single-step graph over a fixed 200-position cache (Qualcomm AI Hub's design),
* the pack's first chunk without batching the prompt (to show what the batching saves).

Each is built with the pack's own lowering, layer weights (fp32 or int8) and vocabulary projection:
an int8 pack keeps only the int8 form of its layers, so a float graph could not even find its weights.

:class:`PackWeightStore` is a read-only weight store over the pack's ``weights.bin`` (from the
manifest's ``weights_index``), so the graphs are written with the pack's own builders
(:func:`~captioner.models.decoder_graph.build_decoder_chunk`) without the checkpoint and
without copying a single weight: their initializers point into the pack's weight file, which the
runtime maps once and shares with every session. The graphs live in a work directory next to a
hard link to that file (ONNX resolves external data relative to the graph).
"""

from __future__ import annotations

import hashlib
import logging
import os
import shutil
from pathlib import Path
from types import MappingProxyType

import onnx

from captioner.errors import ModelError
from captioner.models.checkpoint import Checkpoint
from captioner.models.decoder_graph import build_decoder_chunk, graph_name
from captioner.models.graph_ops import WeightStore
from captioner.models.pack import Pack
from captioner.storage.atomic import replace_file

__all__ = ["ExtraGraphs", "PackWeightStore", "pack_as_checkpoint"]

logger = logging.getLogger(__name__)

_GRAPHS_VERSION = "3"  # bump when the graph builders change in a way the cache key cannot see


class PackWeightStore(WeightStore):
    """The weights of a built pack as a read-only :class:`WeightStore` (no file is written).

    Args:
        pack: the pack whose ``weights.bin`` the new graphs reference.
    """

    def __init__(self, pack: Pack) -> None:  # deliberately does not open a file for writing
        self.path = pack.weights_file()
        self.precision = pack.precision
        self.index = dict(pack.manifest["weights_index"])

    def close(self) -> None:
        """Nothing to close."""

    def add(self, name: str, array) -> None:
        """Only names the pack already has can be used."""
        if name not in self.index:
            raise ModelError(f"pack weight file {self.path} has no tensor {name!r}")


def pack_as_checkpoint(pack: Pack) -> Checkpoint:
    """A :class:`Checkpoint` view of ``pack`` whose weights are all in the pack's store (none readable)."""
    return Checkpoint(
        root=pack.root, dims=pack.dims, special=pack.special, multilingual=pack.multilingual,
        alignment_heads=pack.alignment_heads, alignment_heads_source="pack",
        token_bytes=pack.token_bytes, weights=MappingProxyType({}),
        tied_output="proj_out.weight" not in pack.manifest["weights_index"], source=dict(pack.manifest["source"]),
    )


class ExtraGraphs:
    """Builds (once) and locates the comparison graphs of ``pack`` under ``work_dir``.

    Args:
        pack: the pack (any dims, fp32 or fp16, matmul or conv).
        work_dir: where to write the graphs; a subdirectory per pack hash is used.
    """

    def __init__(self, pack: Pack, work_dir: Path) -> None:
        self.pack = pack
        key = hashlib.sha256(f"{pack.pack_hash}:{_GRAPHS_VERSION}".encode()).hexdigest()[:16]
        self.root = Path(work_dir) / f"graphs-{key}"
        self.root.mkdir(parents=True, exist_ok=True)
        link = self.root / pack.weights_file().name
        if not link.exists():
            # ONNX Runtime insists that external data exists inside the graph's directory (a symlink
            # out of it is refused). A hard link costs nothing; across file systems an empty
            # placeholder does, because the runtime supplies every external initializer itself
            # (SessionOptions.add_initializer) and ORT never reads the file.
            try:
                os.link(pack.weights_file(), link)
            except OSError:
                logger.debug("no hard link to %s possible; using a placeholder", pack.weights_file())
                link.touch()
        self._ckpt = pack_as_checkpoint(pack)
        self._store = PackWeightStore(pack)

    def _write(self, name: str, make) -> Path:
        path = self.root / name
        if not path.is_file():
            tmp = path.with_suffix(".partial")
            onnx.save_model(make(), tmp)
            replace_file(tmp, path)
        return path

    def chunk(self, bucket: int, size: int, slots: int, known: int = 1) -> Path:
        """The chunk graph of ``bucket`` with ``size`` steps, ``known`` of them batched, over a cache of
        ``slots``: the pack's own file if it has that graph, else one built here."""
        if slots == self.pack.cache_slots.get(bucket):
            for start, k in self.pack.decoder_chunks(bucket):
                if k == size and self.pack.decoder_known(bucket, start, k) == known:
                    return self.pack.decoder_file(bucket, start, k)
        return self._write(f"{graph_name(slots, size, known)}.onnx", lambda: build_decoder_chunk(
            self._ckpt, self._store, size, slots, self.pack.linear, known, self.pack.vocab,
            int8=self.pack.layers == "int8"))

    def remove(self) -> None:
        """Delete the work directory of this pack."""
        shutil.rmtree(self.root, ignore_errors=True)
