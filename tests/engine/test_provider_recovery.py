"""A provider that recovers (QNN) re-creates its sessions after a run error and goes on; only a
second failure gives it up (issue 24, "recover before falling back").

The failure is injected as in ``test_provider_failover.py``: ``run`` raises ORT's own ``EPFail``. The
recovering provider is a real CPU session under another label with ``recovers=True`` (the flag the
plan gives QNN HTP and QNN GPU), so its outputs can be compared with the CPU's exactly.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from onnxruntime.capi.onnxruntime_pybind11_state import EPFail

from captioner.engine import providers
from captioner.engine.providers import Candidate, Host
from captioner.engine.runtime import RECOVERY_RUNS, Runtime

CPU_EP = "CPUExecutionProvider"


class _Faults:
    """Makes the sessions of ``label`` fail at the runs numbered in ``fail_runs`` (1-based, counted
    over every session of the runtime); records the graph of each failure."""

    def __init__(self, label: str = "NPU-SIM") -> None:
        self.label = label
        self.fail_runs: set[int] = set()
        self.runs = 0
        self.failed: list[str] = []
        self.created = 0

    def wrap(self, sess, cand: Candidate, graph: str):
        faults = self
        faults.created += 1

        class _Session:
            def __getattr__(self, name):
                return getattr(sess, name)

            def run(self, outputs, feeds):
                faults.runs += 1
                if cand.label == faults.label and faults.runs in faults.fail_runs:
                    faults.failed.append(graph)
                    raise EPFail(f"[ONNXRuntimeError] : 11 : EP_FAIL : sub-system restart running {graph} (injected)")
                return sess.run(outputs, feeds)

        return _Session()


@pytest.fixture
def faults(monkeypatch) -> _Faults:
    """A recovering "NPU" (a real CPU session under another label), then the CPU."""
    f = _Faults()
    monkeypatch.setattr("captioner.engine.runtime.plan_candidates",
                        lambda requested: [Candidate("NPU-SIM", CPU_EP, recovers=True), Candidate("CPU", CPU_EP)])
    real_session = Runtime._session
    monkeypatch.setattr(Runtime, "_session", lambda self, path, so, cand, inits: f.wrap(
        real_session(self, path, so, cand, inits), cand, Path(path).name))
    return f


def _encode(rt: Runtime, pack) -> list[np.ndarray]:
    mel = np.random.default_rng(7).standard_normal((1, pack.dims.n_mels, 300)).astype(np.float32)
    return rt.run(pack.encoder_file(3), ["cross_k", "cross_v"], {"mel": mel, "n_frames": np.array([120], np.int64)})


def test_one_run_error_recreates_the_sessions_and_the_provider_goes_on(tiny_pack, faults) -> None:
    rt = Runtime(tiny_pack, "auto")
    expected = _encode(rt, tiny_pack)
    faults.fail_runs = {2}  # the next run fails once (a sub-system restart), then the device works again
    got = _encode(rt, tiny_pack)
    assert faults.failed == ["encoder_3s.onnx"] and faults.created == 2  # the session was made anew
    for a, b in zip(got, expected, strict=True):
        np.testing.assert_array_equal(a, b)  # the same dispatch, run again, same numbers
    info = rt.info()
    assert info.chosen == "NPU-SIM" and info.fallbacks == ()
    (rec,) = info.recoveries
    assert rec.label == "NPU-SIM" and "encoder_3s.onnx failed while running" in rec.reason
    assert "sub-system restart" in rec.reason
    rt.close()


def test_a_second_failure_falls_back(tiny_pack, faults) -> None:
    rt = Runtime(tiny_pack, "auto")
    expected = _encode(rt, tiny_pack)
    faults.fail_runs = {2, 3}  # fails, is re-created, fails again: the device is gone
    got = _encode(rt, tiny_pack)
    assert faults.failed == ["encoder_3s.onnx"] * 2
    for a, b in zip(got, expected, strict=True):
        np.testing.assert_array_equal(a, b)  # the CPU ran the dispatch
    info = rt.info()
    assert info.chosen == "CPU" and [r.label for r in info.recoveries] == ["NPU-SIM"]
    (fallback,) = info.fallbacks
    assert fallback.label == "NPU-SIM" and fallback.mid_session
    rt.close()


def test_a_recovery_is_earned_again_by_good_runs(tiny_pack, faults) -> None:
    rt = Runtime(tiny_pack, "auto")
    faults.fail_runs = {2, 3 + RECOVERY_RUNS}  # a restart, many good runs, another restart
    for _ in range(RECOVERY_RUNS + 2):
        _encode(rt, tiny_pack)
    info = rt.info()
    assert len(faults.failed) == 2 and info.chosen == "NPU-SIM" and info.fallbacks == ()
    assert len(info.recoveries) == 2
    rt.close()


def test_a_provider_that_does_not_recover_falls_back_at_once(tiny_pack, monkeypatch) -> None:
    f = _Faults()
    monkeypatch.setattr("captioner.engine.runtime.plan_candidates",
                        lambda requested: [Candidate("NPU-SIM", CPU_EP), Candidate("CPU", CPU_EP)])
    real_session = Runtime._session
    monkeypatch.setattr(Runtime, "_session", lambda self, path, so, cand, inits: f.wrap(
        real_session(self, path, so, cand, inits), cand, Path(path).name))
    rt = Runtime(tiny_pack, "auto")
    f.fail_runs = {1}
    _encode(rt, tiny_pack)
    info = rt.info()
    assert info.chosen == "CPU" and info.recoveries == () and len(f.failed) == 1
    rt.close()


def test_a_stale_failure_of_sessions_already_recreated_only_runs_again(tiny_pack, faults) -> None:
    """Two streams share the runtime: both see the restart; the second one's failure (on a session
    of the generation the first one's recovery dropped) must neither recover again nor fall back."""
    rt = Runtime(tiny_pack, "auto")
    graph = tiny_pack.encoder_file(3)
    _sess, cand, generation = rt._session_of(graph, None)
    assert rt.recover(cand, generation, graph, EPFail("restart"))  # the first stream's failure
    assert rt.recover(cand, generation, graph, EPFail("restart"))  # the second's: stale, run again
    _sess, cand, new_generation = rt._session_of(graph, None)
    assert new_generation != generation and rt.provider == "NPU-SIM" and len(rt.info().recoveries) == 1
    assert not rt.recover(cand, new_generation, graph, EPFail("again"))  # a real second failure
    rt.close()


def test_the_qnn_providers_recover_and_the_others_do_not() -> None:
    probe = lambda: (("qnn-device",), "2.7.0", "", ["CPUExecutionProvider"])  # noqa: E731
    plan = providers.plan_candidates("qnn", Host("win32", "arm64"), probe)
    assert [(c.label, c.recovers) for c in plan if isinstance(c, Candidate)] == \
        [("QNN-HTP", True), ("QNN-GPU", True), ("CPU", False)]
