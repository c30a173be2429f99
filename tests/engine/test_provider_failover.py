"""A provider that fails in the middle of a session: the runtime moves to the next one and the stream
goes on with every word (issue 16, "faults").

The failure is injected the way a lost NPU device shows itself to ONNX Runtime's caller: ``run``
raises ORT's own ``EPFail`` after N dispatches. The provider that fails is a real CPU session under
another label (this machine has no NPU), so both providers compute the same numbers and the
transcript with a failure mid-clip must equal the transcript without one, word for word and time for
time. The real tiny.en runs on real speech (the vendored clips joined with pauses).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from onnxruntime.capi.onnxruntime_pybind11_state import EPFail

from captioner.audio.files import load_audio_file
from captioner.core import SAMPLE_RATE, EngineUpdate
from captioner.engine import StreamConfig, Transcriber
from captioner.engine.providers import Candidate
from captioner.engine.runtime import Runtime
from captioner.errors import ProviderError

SPEECH = Path(__file__).resolve().parents[1] / "data" / "speech"
CPU_EP = "CPUExecutionProvider"


@pytest.fixture(scope="module")
def clips() -> np.ndarray:
    """The four vendored clips, each followed by 1 s of silence (16.8 s of speech, 20.8 s)."""
    pause = np.zeros(SAMPLE_RATE, dtype=np.float32)
    parts = []
    for wav in sorted(SPEECH.glob("*.wav")):
        parts += [load_audio_file(wav), pause]
    return np.concatenate(parts)


class _Dispatches:
    """Counts the runs of every session and makes the sessions of ``label`` fail from run ``fail_at``
    on (as a lost device does: every later run fails too); ``kind`` picks the graph that fails."""

    def __init__(self, label: str = "", fail_at: int = -1, kind: str = "") -> None:
        self.label, self.fail_at, self.kind = label, fail_at, kind
        self.runs = 0
        self.failed: list[str] = []

    def wrap(self, sess, cand: Candidate, graph: str):
        counter = self

        class _Session:
            def __getattr__(self, name):
                return getattr(sess, name)

            def run(self, outputs, feeds):
                counter.runs += 1
                if (counter.label in (cand.label, "*") and 0 <= counter.fail_at <= counter.runs
                        and (counter.failed or graph.startswith(counter.kind))):
                    counter.failed.append(graph)
                    raise EPFail(f"[ONNXRuntimeError] : 11 : EP_FAIL : device lost running {graph} (injected)")
                return sess.run(outputs, feeds)

        return _Session()


@pytest.fixture
def dispatches(monkeypatch) -> _Dispatches:
    """Two real CPU providers, the first labelled as an NPU; its sessions fail as ``dispatches`` says."""
    counter = _Dispatches()
    monkeypatch.setattr("captioner.engine.runtime.plan_candidates",
                        lambda requested: [Candidate("NPU-SIM", CPU_EP), Candidate("CPU", CPU_EP)])
    real_session = Runtime._session

    def session(self, path, so, cand, inits):
        return counter.wrap(real_session(self, path, so, cand, inits), cand, Path(path).name)

    monkeypatch.setattr(Runtime, "_session", session)
    return counter


def _run(pack, audio: np.ndarray) -> tuple[list, object, list[EngineUpdate]]:
    engine = Transcriber.from_pack(pack, "auto")
    updates: list[EngineUpdate] = []
    try:
        words, info = engine.transcribe(audio, StreamConfig(step_s=2.0, language="en"),
                                        on_update=lambda u, _last: updates.append(u))
    finally:
        engine.close()
    return words, info, updates


@pytest.fixture(scope="module")
def baseline(real_tiny_en_pack, clips):
    """The transcript and the number of dispatches without a failure (the runs counted by a wrapper
    that never fails)."""
    mp = pytest.MonkeyPatch()
    counter = _Dispatches()
    real_session = Runtime._session
    mp.setattr(Runtime, "_session",
               lambda self, path, so, cand, inits: counter.wrap(real_session(self, path, so, cand, inits), cand,
                                                                Path(path).name))
    try:
        words, info, _updates = _run(real_tiny_en_pack, clips)
    finally:
        mp.undo()
    return words, info, counter.runs


def _strip(words) -> list[tuple[str, float, float, bool]]:
    return [(w.text, w.start, w.end, w.speculative) for w in words]


@pytest.mark.parametrize("kind", ["encoder", "decoder"])
def test_a_provider_failing_mid_clip_loses_no_word(real_tiny_en_pack, clips, baseline, dispatches, kind) -> None:
    """The NPU fails half-way through the clip (in an encoder or in a decoder chunk dispatch): the
    runtime moves to the CPU, runs the failed dispatch again there, and the stream never notices."""
    base_words, base_info, total_runs = baseline
    assert base_words and base_info.provider.chosen == "CPU"
    text = " ".join(w.text for w in base_words)
    assert "could wait no longer" in text.lower()  # real speech, really recognised
    dispatches.label, dispatches.kind, dispatches.fail_at = "NPU-SIM", kind, total_runs // 2
    words, info, _updates = _run(real_tiny_en_pack, clips)
    assert dispatches.failed and dispatches.failed[0].startswith(kind)  # the fault really happened mid-clip
    assert len(dispatches.failed) == 1  # one failed dispatch, then the NPU's sessions were dropped
    assert _strip(words) == _strip(base_words)
    providers = [r.provider for r in info.rounds if r.bucket > 0]
    assert providers[0] == "NPU-SIM" and providers[-1] == "CPU"
    switch = providers.index("CPU")
    print(f"{kind} failed at dispatch {dispatches.fail_at} of {total_runs}: rounds {switch} on NPU-SIM, "
          f"{len(providers) - switch} on CPU, {len(words)} words as without the failure")
    assert 0 < switch < len(providers) - 1 and set(providers[switch:]) == {"CPU"}
    assert info.provider.chosen == "CPU"
    (failure,) = info.provider.fallbacks
    assert failure.label == "NPU-SIM" and failure.failed and failure.mid_session
    assert "failed while running" in failure.reason and "device lost" in failure.reason
    assert failure.reason.startswith(kind)


def test_the_last_provider_failing_is_a_clear_error_after_the_words_so_far(real_tiny_en_pack, clips, baseline,
                                                                          dispatches) -> None:
    """When the CPU (the last provider) fails too, the stream raises a ProviderError that says so;
    the updates emitted before it are exactly those of a run without failure."""
    _words, _info, total_runs = baseline
    config = StreamConfig(step_s=2.0, language="en")
    reference: list[EngineUpdate] = []
    clean = Transcriber.from_pack(real_tiny_en_pack, "auto")
    clean.transcribe(clips, config, on_update=lambda u, _last: reference.append(u))
    clean.close()
    dispatches.runs = 0
    dispatches.label, dispatches.fail_at = "*", total_runs // 2  # every provider fails from there on
    engine = Transcriber.from_pack(real_tiny_en_pack, "auto")
    updates: list[EngineUpdate] = []
    with pytest.raises(ProviderError, match=r"CPU failed while running .* no other execution provider is left"):
        engine.transcribe(clips, config, on_update=lambda u, _last: updates.append(u))
    info = engine.info()
    engine.close()
    assert [a.label for a in info.fallbacks] == ["NPU-SIM"] and info.fallbacks[0].mid_session
    assert len(dispatches.failed) == 2  # the NPU's dispatch, then the same one on the CPU
    assert sum(len(u.words) for u in updates) > 0, "words came before the failure"
    assert [(u.retract, _strip(u.words)) for u in updates] == \
        [(u.retract, _strip(u.words)) for u in reference[: len(updates)]]


@pytest.mark.qnn
@pytest.mark.slow
def test_real_qnn_sessions_failing_mid_stream_are_dropped_and_the_cpu_goes_on(tiny_fp32_pack, tmp_path_factory,
                                                                             monkeypatch) -> None:
    """The same on real QNN HTP sessions (the HTP emulator on Linux x86-64, with shared EP contexts):
    their runs start failing half-way, the QNN sessions are re-created once and fail again, every QNN
    session is released, and the stream finishes on the CPU. The tiny random model's words are not compared with a CPU-only run: QNN HTP computes in fp16,
    so the two providers' tokens may differ; what must hold is that no round is lost."""
    from captioner.engine import providers
    from captioner.engine.providers import Host

    devices, _version, reason = providers.qnn_devices()
    if not devices:
        pytest.skip(reason)
    if not (Host.current().qnn_emulated or Host.current().snapdragon_windows):
        pytest.skip("no QNN HTP backend on this platform")
    pack = tiny_fp32_pack  # the fp32 projection: every node on QNN
    audio = load_audio_file(SPEECH / "1089-134691-0001.wav")
    config = StreamConfig(step_s=2.0, language="en")
    counter = _Dispatches()
    real_session = Runtime._session
    monkeypatch.setattr(Runtime, "_session", lambda self, path, so, cand, inits: counter.wrap(
        real_session(self, path, so, cand, inits), cand, Path(path).name))
    cache = tmp_path_factory.mktemp("cache")  # the second run loads the contexts the first compiled
    clean = Transcriber.from_pack(pack, "qnn", cache_dir=cache)
    _words, clean_info = clean.transcribe(audio, config)
    clean.close()
    assert clean_info.provider.chosen == "QNN-HTP" and clean_info.provider.fallbacks == ()
    rounds = [r for r in clean_info.rounds if r.bucket > 0]
    counter.runs, counter.label, counter.kind, counter.fail_at = 0, "QNN-HTP", "", counter.runs // 2
    engine = Transcriber.from_pack(pack, "qnn", cache_dir=cache)
    words, info = engine.transcribe(audio, config)
    engine.close()
    providers_used = [r.provider for r in info.rounds if r.bucket > 0]
    print("QNN then CPU:", providers_used, len(words), "words")
    assert len(providers_used) == len(rounds)  # no round lost
    assert providers_used[0] == "QNN-HTP" and providers_used[-1] == "CPU"
    assert info.provider.chosen == "CPU"
    failed = [a for a in info.provider.fallbacks if a.mid_session]
    # the first failure re-created the QNN sessions (a sub-system restart would have passed); the
    # device still failing, the second gave QNN up
    assert [a.label for a in info.provider.recoveries] == ["QNN-HTP"]
    assert [a.label for a in failed] == ["QNN-HTP"] and len(counter.failed) == 2
    assert all("CPUExecutionProvider" in p for p in info.provider.placement.values())  # the QNN sessions are gone


def test_a_bad_input_is_the_callers_error_not_a_provider_failure(tiny_pack, dispatches) -> None:
    """ORT's InvalidArgument (a wrong shape) is raised as it is: the same on every provider."""
    from onnxruntime.capi.onnxruntime_pybind11_state import InvalidArgument

    rt = Runtime(tiny_pack, "auto")
    graph = tiny_pack.encoder_file(3)
    with pytest.raises(InvalidArgument):
        rt.run(graph, ["cross_k"], {"mel": np.zeros((1, 80, 7), np.float32), "n_frames": np.array([3])})
    assert rt.provider == "NPU-SIM" and rt.info().fallbacks == ()
    rt.close()


def test_a_second_stream_failing_on_the_provider_already_left_does_not_skip_the_next(tiny_pack, dispatches) -> None:
    """Two streams share one runtime: the second one's failure on the provider the first one's
    failure already left is not counted again (the CPU stays)."""
    rt = Runtime(tiny_pack, "auto")
    graph = tiny_pack.encoder_file(3)
    npu = rt._current
    rt.session(graph)
    rt.fail_over(npu, graph, EPFail("device lost"))
    assert rt.provider == "CPU" and rt.loaded() == []
    rt.fail_over(npu, graph, EPFail("device lost"))  # the other stream's stale failure
    assert rt.provider == "CPU" and [a.label for a in rt.info().fallbacks] == ["NPU-SIM"]
    with pytest.raises(ProviderError, match=r"CPU failed while running encoder_3s\.onnx"):
        rt.fail_over(rt._current, graph, EPFail("device lost"))
    rt.close()
