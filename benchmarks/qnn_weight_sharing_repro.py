"""The smallest reproduction of the x86-64 HTP emulator's limit with weight-shared QNN contexts.

ONNX Runtime's own recipe (onnxruntime-qnn ``qnn_ep_context_test.cc``: ``DumpModelWithSharedCtx`` and
``QnnContextShareAcrossSessions``): two fp32 models that use one 64x64 weight are compiled by two
sessions that share the QNN backend (``ep.share_ep_contexts=1``, ``ep.stop_share_ep_contexts=1`` on the
second, ``ep.context_embed_mode=0``); QNN writes one context binary holding both graphs, with HTP
weight sharing on (the plugin turns it on whenever such a group is generated on x86-64). Loading either
``*_ctx.onnx`` then dies inside ``libQnnHtp.so``'s ``contextCreateFromBinary`` (a call through a null
function pointer: SIGSEGV), with or without ``ep.share_ep_contexts`` on the loading session; the same
two models compiled one context each load and run. ONNX Runtime's test loads the shared binary only
on ARM64 ("only load and run the session on real device").

Usage (each step in its own process; ``load`` is the one that crashes)::

    python benchmarks/qnn_weight_sharing_repro.py gen shared|pergraph DIR
    python benchmarks/qnn_weight_sharing_repro.py load DIR
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
from onnx import TensorProto, helper, numpy_helper

from captioner.engine.providers import Candidate, plan_candidates

MODELS = ("weight_share1", "weight_share2")


def _options(cand: Candidate) -> ort.SessionOptions:
    so = ort.SessionOptions()
    so.log_severity_level = 3
    cand.configure(so)  # the QNN HTP plugin with the project's emulator options (SoC 60, HTP v73)
    return so


def _model(path: Path, relu: bool) -> None:
    """x [1, 64] @ W [64, 64] (the same W in both models), then Relu in the second."""
    weight = numpy_helper.from_array(np.random.default_rng(0).standard_normal((64, 64)).astype(np.float32), "W")
    nodes = [helper.make_node("MatMul", ["x", "W"], ["h" if relu else "y"])]
    if relu:
        nodes.append(helper.make_node("Relu", ["h"], ["y"]))
    graph = helper.make_graph(nodes, path.stem, [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 64])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 64])], [weight])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 9
    onnx.save(model, str(path))


def generate(folder: Path, shared: bool) -> list[Path]:
    """Compile both models into ``folder``: one shared context (ORT's recipe) or one context each."""
    cand = plan_candidates("qnn")[0]
    assert isinstance(cand, Candidate) and cand.label == "QNN-HTP", cand
    folder.mkdir(parents=True, exist_ok=True)
    for i, name in enumerate(MODELS):
        _model(folder / f"{name}.onnx", relu=bool(i))
        so = _options(cand)
        so.add_session_config_entry("ep.context_enable", "1")
        so.add_session_config_entry("ep.context_embed_mode", "0")
        so.add_session_config_entry("ep.context_file_path", str(folder / f"{name}_ctx.onnx"))
        if shared:
            so.add_session_config_entry("ep.share_ep_contexts", "1")
            if i == len(MODELS) - 1:
                so.add_session_config_entry("ep.stop_share_ep_contexts", "1")
        ort.InferenceSession(str(folder / f"{name}.onnx"), sess_options=so)
    return sorted(folder.glob("*.bin"))


def load_and_run(folder: Path) -> list[np.ndarray]:
    """Open both compiled models as ORT's test does (backend shared) and run each once."""
    cand = plan_candidates("qnn")[0]
    assert isinstance(cand, Candidate)
    sessions = []
    for name in MODELS:
        so = _options(cand)
        so.add_session_config_entry("ep.share_ep_contexts", "1")
        sessions.append(ort.InferenceSession(str(folder / f"{name}_ctx.onnx"), sess_options=so))
    x = np.ones((1, 64), np.float32)
    return [s.run(None, {"x": x})[0] for s in sessions]


def main(argv: list[str]) -> int:
    """Run one step (``gen`` or ``load``, see the module docstring); the exit status."""
    if argv[:1] == ["gen"] and len(argv) == 3:
        bins = generate(Path(argv[2]), argv[1] == "shared")
        print("context binaries:", ", ".join(f"{b.name} {b.stat().st_size} B" for b in bins))
    elif argv[:1] == ["load"] and len(argv) == 2:
        outs = load_and_run(Path(argv[1]))
        print("loaded and ran:", [o.shape for o in outs])
    else:
        print(__doc__)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
