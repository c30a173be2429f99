"""Small helpers to write ONNX graphs node by node, and the pack's shared weight file.

:class:`WeightStore` appends each weight tensor once to ``weights.bin`` and hands out initializer
protos that point into it (``data_location = EXTERNAL`` with location/offset/length), so every graph
of a pack names and reads the very same bytes. :class:`GraphBuilder` collects the nodes of one graph
and offers the few building blocks Whisper needs (linear layer as MatMul or 1×1 Conv, layer norm,
GELU). Graph-specific constants (masks, index lists) are stored inside the graph, not in the weight
file.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, Literal, overload

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

__all__ = ["MS_DOMAIN", "OPSET", "GraphBuilder", "WeightStore", "int8_columns", "value_info"]

logger = logging.getLogger(__name__)

# Opset 20: the first with a standard Gelu; Erf (opset 17's way to write exact GELU) has no QNN HTP
# kernel, Gelu does.
OPSET = 20
IR_VERSION = 10
MS_DOMAIN = "com.microsoft"  # ONNX Runtime's contrib operators (version 1), for the CPU packs' fused kernels
_BIG = 64 * 1024  # bytes; tensors at least this big start on a 64 KiB boundary (mmap granularity)
_SMALL_ALIGN = 64  # bytes


class WeightStore:
    """Appends tensors to one external-data file and remembers where each one lies.

    Args:
        path: the weight file to create (its name is what the graphs reference).
        precision: ``"fp32"`` or ``"fp16"``; float tensors are stored in that type.
    """

    def __init__(self, path: Path, precision: str) -> None:
        self.path = Path(path)
        self.precision = precision
        self._fh = open(self.path, "wb")  # noqa: SIM115 - closed by close()
        self._offset = 0
        self.index: dict[str, dict] = {}

    def close(self) -> None:
        """Finish writing the file."""
        self._fh.close()

    def __contains__(self, name: str) -> bool:
        return name in self.index

    def add(self, name: str, array: np.ndarray) -> None:
        """Store ``array`` under ``name`` (float tensors converted to the store's precision)."""
        if name in self.index:
            return
        arr = np.asarray(array)
        if arr.dtype.kind == "f":
            arr = arr.astype(np.float16 if self.precision == "fp16" else np.float32)
        arr = np.ascontiguousarray(arr)
        data = arr.tobytes()
        align = 65536 if len(data) >= _BIG else _SMALL_ALIGN
        pad = -self._offset % align
        if pad:
            self._fh.write(b"\0" * pad)
            self._offset += pad
        self._fh.write(data)
        self.index[name] = {
            "dtype": str(arr.dtype),
            "shape": list(arr.shape),
            "offset": self._offset,
            "length": len(data),
        }
        self._offset += len(data)

    def initializer(self, name: str) -> TensorProto:
        """An initializer proto that references the stored bytes of ``name``."""
        info = self.index[name]
        tensor = TensorProto()
        tensor.name = name
        tensor.data_type = helper.np_dtype_to_tensor_dtype(np.dtype(info["dtype"]))
        tensor.dims.extend(info["shape"])
        tensor.data_location = TensorProto.EXTERNAL
        for key, value in (("location", self.path.name), ("offset", info["offset"]), ("length", info["length"])):
            entry = tensor.external_data.add()
            entry.key = key
            entry.value = str(value)
        return tensor


class GraphBuilder:
    """Collects the nodes, initializers and constants of one ONNX graph.

    Args:
        name: graph name.
        store: the pack's weight store.
        linear: ``"matmul"`` (x @ Wᵀ as MatMul + Add) or ``"conv"`` (1×1 Conv with bias, NCHW).
        int8: the ``"matmul"`` linear layers with int8 weights (see :meth:`linear`).
    """

    def __init__(self, name: str, store: WeightStore, linear: str, int8: bool = False) -> None:
        if int8 and linear != "matmul":
            raise ValueError("int8 linear layers need the matmul lowering")
        self.name = name
        self.store = store
        self.linear_mode = linear
        self.int8 = int8
        self.nodes: list[onnx.NodeProto] = []
        self._weights: dict[str, str] = {}  # stored name -> float32 value name in this graph
        self._inits: list[TensorProto] = []
        self._consts: list[TensorProto] = []
        self._const_cache: dict[tuple, str] = {}
        self._count = 0

    # -- plumbing -----------------------------------------------------------------------------
    def fresh(self, hint: str) -> str:
        """A new unique value name."""
        self._count += 1
        return f"{hint}_{self._count}"

    @overload
    def op(self, op_type: str, inputs: list[str], *, outputs: Literal[1] = 1, **attrs: Any) -> str: ...

    @overload
    def op(self, op_type: str, inputs: list[str], *, outputs: int | list[str], **attrs: Any) -> Any: ...

    def op(self, op_type: str, inputs: list[str], *, outputs: int | list[str] = 1, **attrs: Any) -> str | list[str]:
        """Append a node; returns its output name (or list of names when ``outputs`` > 1)."""
        names = outputs if isinstance(outputs, list) else [self.fresh(op_type.lower()) for _ in range(outputs)]
        self.nodes.append(helper.make_node(op_type, inputs, names, name=self.fresh("n_" + op_type), **attrs))
        return names[0] if len(names) == 1 else names

    def const(self, value, dtype=np.int64) -> str:
        """A small constant stored inside the graph (deduplicated by value)."""
        arr = np.asarray(value, dtype=dtype)
        key = (arr.dtype.str, arr.shape, arr.tobytes())
        if key not in self._const_cache:
            name = self.fresh("const")
            self._consts.append(numpy_helper.from_array(arr, name))
            self._const_cache[key] = name
        return self._const_cache[key]

    def weight(self, name: str, make: Callable[[], np.ndarray]) -> str:
        """A shared weight as a float32 value; ``make`` computes it the first time the pack needs it."""
        if name in self._weights:
            return self._weights[name]
        if name not in self.store:
            self.store.add(name, make())
        self._inits.append(self.store.initializer(name))
        value = name
        if self.store.index[name]["dtype"] == "float16":
            value = self.op("Cast", [name], to=TensorProto.FLOAT)
        self._weights[name] = value
        return value

    def model(self, inputs: list[onnx.ValueInfoProto], outputs: list[onnx.ValueInfoProto]) -> onnx.ModelProto:
        """The finished model (opset :data:`OPSET`)."""
        graph = helper.make_graph(self.nodes, self.name, inputs, outputs, initializer=self._inits + self._consts)
        opsets = [helper.make_opsetid("", OPSET)]
        if any(node.domain == MS_DOMAIN for node in self.nodes):
            opsets.append(helper.make_opsetid(MS_DOMAIN, 1))
        model = helper.make_model(graph, opset_imports=opsets, producer_name="captioner")
        model.ir_version = IR_VERSION
        return model

    # -- building blocks ----------------------------------------------------------------------
    def linear(self, x: str, name: str, w: Callable[[], np.ndarray], b: Callable[[], np.ndarray] | None,
               rows: int, n_in: int, n_out: int, batch: bool) -> str:
        """``x @ Wᵀ + b`` for ``x`` of shape [rows, n_in] (or [1, rows, n_in] when ``batch``).

        Args:
            x: input value name.
            name: weight name prefix (the checkpoint's, e.g. ``decoder.layers.0.fc1``).
            w: makes the weight in PyTorch layout [n_out, n_in].
            b: makes the bias [n_out], or None.
            rows: rows of ``x`` (static).
            n_in: input width.
            n_out: output width.
            batch: ``x`` carries a leading batch axis of 1.

        Returns:
            the output value, shaped like ``x`` with ``n_out`` last.

        With ``int8`` the weight is stored as int8 with one scale per output (symmetric,
        :func:`int8_columns`) and each row of ``x`` is quantised to 8 bits with a scale of its own
        as it arrives (MatMulInteger, then the two scales and the bias). Per row, not per tensor:
        one frame's outlier does not coarsen the others (per-tensor encoder activations cost
        whisper-base ~0.7 WER points on 24 dev clips, per row none), and a token batched with
        others (the prompt, a verifier's rows) is quantised exactly as it is when it runs alone,
        so draft decoding keeps giving greedy's tokens.
        """
        if self.int8:
            return self._int8_linear(x, name, w, b, rows, n_out)
        if self.linear_mode == "matmul":
            wt = self.weight(f"{name}.weight_t", lambda: np.ascontiguousarray(w().T))
            y = self.op("MatMul", [x, wt])
            if b is not None:
                y = self.op("Add", [y, self.weight(f"{name}.bias", b)])
            return y
        # 1×1 Conv on NCHW [1, n_in, 1, rows]; rows == 1 needs no transpose, only reshapes.
        wc = self.weight(f"{name}.weight_1x1", lambda: w()[:, :, None, None])
        ins = [wc] + ([self.weight(f"{name}.bias", b)] if b is not None else [])
        if rows == 1:
            x4 = self.op("Reshape", [x, self.const([1, n_in, 1, 1])])
            y4 = self.op("Conv", [x4, *ins])
            return self.op("Reshape", [y4, self.const([1, 1, n_out] if batch else [1, n_out])])
        xt = self.op("Transpose", [x], perm=[0, 2, 1] if batch else [1, 0])
        x4 = self.op("Reshape", [xt, self.const([1, n_in, 1, rows])])
        y4 = self.op("Conv", [x4, *ins])
        y3 = self.op("Reshape", [y4, self.const([1, n_out, rows])])
        if batch:
            return self.op("Transpose", [y3], perm=[0, 2, 1])
        return self.op("Transpose", [self.op("Reshape", [y3, self.const([n_out, rows])])], perm=[1, 0])

    def int8_weight(self, q_name: str, scale_name: str, make: Callable[[], np.ndarray]) -> tuple[str, str]:
        """A [n_out, n_in] weight as :func:`int8_columns` stores it: the int8 [n_in, n_out] value and
        its scales [n_out]; ``make`` (the float weight) runs at most once, and only if the pack lacks them."""
        made: list[tuple[np.ndarray, np.ndarray]] = []

        def part(i: int) -> np.ndarray:
            if not made:
                made.append(int8_columns(make()))
            return made[0][i]

        return self.weight(q_name, lambda: part(0)), self.weight(scale_name, lambda: part(1))

    def _int8_linear(self, x: str, name: str, w: Callable[[], np.ndarray], b: Callable[[], np.ndarray] | None,
                     rows: int, n_out: int) -> str:
        """:meth:`linear` with int8 weights and ``x`` quantised on the fly (``int8`` of the builder)."""
        wq, ws = self.int8_weight(f"{name}.weight_int8_t", f"{name}.weight_int8_scale", w)
        y = self.int8_matmul(x, wq, ws, rows)
        if b is not None:
            y = self.op("Add", [y, self.weight(f"{name}.bias", b)])
        return y

    def int8_matmul(self, x: str, wq: str, ws: str, rows: int) -> str:
        """``x`` [..., rows, n_in] times an :meth:`int8_weight` (``wq`` [n_in, n_out], scales ``ws``
        [n_out]), each row of ``x`` quantised with a scale of its own: [..., rows, n_out]."""
        # one scale per row, symmetric, stored as uint8 around 128: ORT's fast integer kernel is
        # u8×s8 (s8×s8 ran 13× slower here), and its MatMulInteger takes one zero point per tensor
        peak = self.op("ReduceMax", [self.op("Abs", [x]), self.const([-1])], keepdims=1)  # [..., rows, 1]
        xs = self.op("Div", [self.op("Max", [peak, self.const([1e-12], np.float32)]), self.const([127.0], np.float32)])
        xq = self.op("QuantizeLinear", [x, self.op("Reshape", [xs, self.const([rows])]),
                                        self.const(np.full(rows, 128), np.uint8)], axis=-2)
        acc = self.op("Cast", [self.op("MatMulInteger", [xq, wq, self.const(128, np.uint8)])], to=TensorProto.FLOAT)
        return self.op("Mul", [self.op("Mul", [acc, xs]), ws])

    def layer_norm(self, x: str, name: str, weights: Mapping[str, np.ndarray]) -> str:
        """LayerNormalization over the last axis with the checkpoint's ``name.weight``/``name.bias`` (eps 1e-5)."""
        g = self.weight(f"{name}.weight", lambda: weights[f"{name}.weight"])
        b = self.weight(f"{name}.bias", lambda: weights[f"{name}.bias"])
        return self.op("LayerNormalization", [x, g, b], axis=-1, epsilon=1e-5)

    def gelu(self, x: str) -> str:
        """Exact (erf) GELU, as Whisper's ``gelu`` activation."""
        return self.op("Gelu", [x])


def int8_columns(w: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """A [n_out, n_in] weight (PyTorch layout) as int8 [n_in, n_out] for MatMulInteger and its
    per-output scales [n_out] (symmetric: max |w| of the output's row → 127, zero point 0)."""
    w = np.asarray(w, np.float32)
    scale = np.maximum(np.abs(w).max(axis=1), np.float32(1e-12)) / np.float32(127.0)
    q = np.clip(np.rint(w / scale[:, None]), -127, 127).astype(np.int8)
    return np.ascontiguousarray(q.T), scale.astype(np.float32)


def value_info(name: str, elem: int, shape: Sequence[int | str]) -> onnx.ValueInfoProto:
    """Shorthand for a typed graph input or output (a str in ``shape`` is a named symbolic dimension)."""
    return helper.make_tensor_value_info(name, elem, shape)
