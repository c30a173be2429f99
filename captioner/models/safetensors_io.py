"""Read ``model.safetensors`` with numpy alone (no ``safetensors`` or torch at run time).

The format (https://huggingface.co/docs/safetensors): an 8-byte little-endian header length N, N
bytes of JSON ``{name: {"dtype", "shape", "data_offsets": [begin, end]}, "__metadata__": {...}}``,
then the raw little-endian tensor data, offsets relative to the end of the header. The file is
memory-mapped, so even large-v3 (3 GB) costs no copy until a tensor is converted.
"""

from __future__ import annotations

import json
import logging
import struct
from collections.abc import Iterator, Mapping
from pathlib import Path

import numpy as np

from captioner.errors import PackBuildError

__all__ = ["SafetensorsFile"]

logger = logging.getLogger(__name__)

_DTYPES: dict[str, np.dtype] = {
    "F32": np.dtype("<f4"),
    "F16": np.dtype("<f2"),
    "BF16": np.dtype("<u2"),  # converted to float32 on read
    "F64": np.dtype("<f8"),
    "I64": np.dtype("<i8"),
    "I32": np.dtype("<i4"),
}
_MAX_HEADER = 100 * 1024 * 1024  # bytes; the spec's own limit


class SafetensorsFile(Mapping[str, np.ndarray]):
    """A read-only mapping name -> float32/int array over a memory-mapped safetensors file.

    Args:
        path: the ``.safetensors`` file.

    Raises:
        PackBuildError: the file is missing, truncated, or its header is malformed (names the file).
    """

    def __init__(self, path: Path | str) -> None:
        self.path = Path(path)
        try:
            size = self.path.stat().st_size
            with open(self.path, "rb") as fh:
                head = fh.read(8)
                if len(head) < 8:
                    raise PackBuildError(f"{self.path} is truncated (no safetensors header)")
                (n,) = struct.unpack("<Q", head)
                if n > _MAX_HEADER or 8 + n > size:
                    raise PackBuildError(f"{self.path} is truncated or not a safetensors file (header of {n} bytes)")
                header = json.loads(fh.read(n))
        except FileNotFoundError:
            raise PackBuildError(f"{self.path} is missing") from None
        except (OSError, UnicodeDecodeError, ValueError) as exc:
            raise PackBuildError(f"{self.path} is not a valid safetensors file: {exc}") from exc
        if not isinstance(header, dict):
            raise PackBuildError(f"{self.path}: the safetensors header is not a JSON object")
        self.metadata: dict = header.pop("__metadata__", None) or {}
        self._data_start = 8 + n
        self._entries: dict[str, tuple[np.dtype, tuple[int, ...], int, int, str]] = {}
        for name, info in header.items():
            try:
                dtype_name = info["dtype"]
                shape = tuple(int(d) for d in info["shape"])
                begin, end = (int(x) for x in info["data_offsets"])
                dtype = _DTYPES[dtype_name]
            except (KeyError, TypeError, ValueError) as exc:
                raise PackBuildError(f"{self.path}: tensor {name!r} has an unsupported or malformed entry") from exc
            expected = int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
            if end - begin != expected or begin < 0:
                raise PackBuildError(f"{self.path}: tensor {name!r} has inconsistent offsets")
            if self._data_start + end > size:
                raise PackBuildError(
                    f"{self.path} is truncated: tensor {name!r} ends at byte {self._data_start + end}, "
                    f"the file has {size}"
                )
            self._entries[name] = (dtype, shape, begin, end, dtype_name)
        self._mmap = np.memmap(self.path, dtype=np.uint8, mode="r") if size > 0 else np.zeros(0, np.uint8)
        logger.debug("%s: %d tensors", self.path, len(self._entries))

    def __getitem__(self, name: str) -> np.ndarray:
        """The tensor ``name`` (BF16 widened to float32; others as stored, read-only view)."""
        dtype, shape, begin, end, dtype_name = self._entries[name]
        raw = self._mmap[self._data_start + begin : self._data_start + end]
        arr = raw.view(dtype).reshape(shape)
        if dtype_name == "BF16":
            return (arr.astype(np.uint32) << 16).view(np.float32)
        return arr

    def __iter__(self) -> Iterator[str]:
        return iter(self._entries)

    def __len__(self) -> int:
        return len(self._entries)

    def shape(self, name: str) -> tuple[int, ...]:
        """Shape of ``name`` without reading its data."""
        return self._entries[name][1]
