"""``captioner transcribe`` end to end on the tiny pack with real graphs on the CPU provider."""

from __future__ import annotations

import itertools
import json
from pathlib import Path

import numpy as np
import pytest
from wavs import spoken, write_wav
from whisper_reference import hf_greedy, load_reference

from captioner import cli
from captioner.engine import OnnxAcousticModel, Runtime, StreamConfig, Transcriber
from captioner.storage.paths import AppPaths
from captioner.transcript.store import SessionStore


@pytest.fixture(scope="module")
def long_wav(tmp_path_factory) -> Path:
    return write_wav(tmp_path_factory.mktemp("audio") / "sixty.wav", spoken(60.0))


def _transcribe(pack_root: Path, wav: Path, home: Path, *extra: str) -> tuple[int, dict]:
    out = home / "out.json"
    code = cli.run(["transcribe", str(wav), "--model", str(pack_root), "--provider", "cpu", "--json", str(out),
                    *extra], AppPaths.default(home))
    return code, json.loads(out.read_text(encoding="utf-8")) if out.exists() else {}


@pytest.fixture(scope="module")
def sixty(tiny_pack, long_wav, tmp_path_factory) -> tuple[int, dict, Path]:
    home = tmp_path_factory.mktemp("home")
    code, doc = _transcribe(tiny_pack.root, long_wav, home, "--srt", str(home / "out.srt"))
    return code, doc, home


def test_sixty_seconds_stream_through_the_cli(sixty, capsys) -> None:
    code, doc, home = sixty
    assert code == 0
    stats = doc["stats"]
    print("60 s run:", {k: stats[k] for k in ("rtf", "wall_s", "rounds", "first_round_ms", "mean_ms")})
    assert stats["audio_s"] == pytest.approx(60.0, abs=0.01)
    assert stats["provider"] == "CPU" and stats["provider_failed"] == []
    assert stats["rounds"] >= 25  # a 2 s step over 60 s
    assert all(1 <= c <= 6 for c in stats["chunks_per_round"])
    assert set(stats["mean_ms"]) == {"mel", "encoder", "decoder", "validation", "dtw", "total"}
    assert stats["mean_ms"]["encoder"] > 0 and stats["mean_ms"]["decoder"] > 0
    assert (home / "out.srt").exists()
    # the session is in the history store
    with SessionStore.open(AppPaths.default(home).sessions_db) as store:
        (info,) = store.list_sessions()
        assert info.title == "sixty.wav"
        assert [w.text for w in store.session_words(info.id)] == [w["text"] for w in doc["words"]]


def test_word_times_are_monotonic_and_inside_the_audio(sixty) -> None:
    _, doc, _ = sixty
    words = doc["words"]
    assert words, "the tiny random model still emits tokens"
    for w in words:
        assert 0.0 <= w["start"] <= w["end"] <= 60.0
        assert w["source"] == "system" and w["text"]
    starts = [w["start"] for w in words]
    assert starts == sorted(starts)
    assert all(a["end"] <= b["start"] + 1e-9 for a, b in itertools.pairwise(words))
    # emitted after the audio they cover was available (simulated live clock), but for the 0.5 s by
    # which a revision may move the end of a word that keeps the time it was first shown (stream.py
    # deviations 10, 17 and 20)
    early = [w for w in words if w["emitted_at"] < w["end"] - 0.5]
    assert not early, early[:5]


def test_output_is_deterministic(tiny_pack, long_wav, sixty, tmp_path) -> None:
    _, first, _ = sixty
    code, again = _transcribe(tiny_pack.root, long_wav, tmp_path, "--no-save")
    assert code == 0
    strip = [(w["text"], w["start"], w["end"]) for w in again["words"]]
    assert strip == [(w["text"], w["start"], w["end"]) for w in first["words"]]
    assert not (tmp_path / "data" / "sessions.sqlite3").exists()  # --no-save


class _Recorder:
    """Wraps the real model and records the first round: its audio and every chunk dispatched."""

    def __init__(self, model: OnnxAcousticModel) -> None:
        self.model = model
        self.vocab, self.buckets = model.vocab, model.buckets
        self.rounds: list[dict] = []

    @property
    def provider(self) -> str:
        return self.model.provider

    @property
    def runtime(self) -> Runtime:
        return self.model.runtime

    def chunk_plan(self, bucket, prefixed):
        return self.model.chunk_plan(bucket, prefixed)

    def encode(self, audio, *, native_30s=False):
        self.rounds.append({"audio": np.array(audio), "native": native_30s, "chunks": []})
        return self.model.encode(audio, native_30s=native_30s)

    def decoder(self, encoding):
        runner, chunks = self.model.decoder(encoding), self.rounds[-1]["chunks"]

        class _Runner:
            def run(self, start, size, token, forced):
                out = runner.run(start, size, token, forced)
                chunks.append((start, size, int(token), np.array(forced), out.tokens.copy()))
                return out

        return _Runner()


def test_first_round_tokens_equal_transformers_greedy(tiny_pack, tiny_checkpoint) -> None:
    model = _Recorder(OnnxAcousticModel(tiny_pack, Runtime(tiny_pack, "cpu")))
    config = StreamConfig(step_s=2.0)
    audio = spoken(6.0)
    Transcriber(model, model.runtime, "tiny").transcribe(audio, config)  # type: ignore[arg-type]
    first = model.rounds[0]
    assert not first["native"] and first["chunks"]
    prompt = list(model.vocab.prompt("en", "transcribe"))
    # what the stream fed: the prompt, then the model's own choices (greedy)
    seq = list(prompt)
    predicted: list[int] = []
    for start, size, token, forced, tokens in first["chunks"]:
        assert start <= len(seq) - 1 and token == seq[start]
        for s in range(size):
            pos = start + s + 1
            if pos < len(prompt):
                assert forced[s] == prompt[pos]
                continue
            predicted.append(int(tokens[s]))
            if pos == len(seq):
                seq.append(int(tokens[s]))
            if s < size - 1:
                assert forced[s] in (-1, int(tokens[s]))
    from captioner.engine.features import log_mel

    reference = load_reference(tiny_checkpoint)
    n = len(first["audio"])
    last = first["chunks"][-1][0] + first["chunks"][-1][1]
    ref = hf_greedy(reference, log_mel(first["audio"])[:, : n // 160], prompt, last, tiny_pack.special.eot)
    assert predicted == ref
    print(f"first round: {n / 16000:.2f} s of audio, {len(first['chunks'])} chunks, tokens {predicted[:8]}...")


@pytest.mark.qnn
def test_qnn_first_round_tokens_equal_cpu(tiny_fp32_pack, tmp_path) -> None:
    """The stream on --provider qnn (the HTP emulator on Linux x86-64) decodes the first round to the
    same tokens as on the CPU provider (the fp32 projection: the NPU's packs; an int8 one has no QNN
    MatMulInteger and would fall back to the CPU)."""
    pytest.importorskip("onnxruntime_qnn")
    from captioner.engine.providers import Host

    if not (Host.current().qnn_emulated or Host.current().snapdragon_windows):
        pytest.skip("no QNN HTP backend on this platform")
    audio = spoken(2.0)
    firsts = []
    for provider in ("qnn", "cpu"):
        model = _Recorder(OnnxAcousticModel(tiny_fp32_pack, Runtime(tiny_fp32_pack, provider, cache_dir=tmp_path)))
        try:
            _, info = Transcriber(model, model.runtime, "tiny").transcribe(  # type: ignore[arg-type]
                audio, StreamConfig(step_s=2.0))
        finally:
            model.model.close()
        stats = info.to_json()
        assert stats["provider"] == {"qnn": "QNN-HTP", "cpu": "CPU"}[provider]
        assert stats["provider_failed"] == []
        firsts.append([(c[0], c[1], c[2], c[4].tolist()) for c in model.rounds[0]["chunks"]])
    assert firsts[0] == firsts[1] and firsts[0]


def test_blocks_that_come_as_they_are_spoken_are_decoded_before_the_next_is_read(tiny_pack) -> None:
    """Audio given as blocks read as they come (``transcribe -`` on a live pipe): each step's round
    runs before the next block is asked for, since asking may wait for the speaker. Before, the
    engine read one step ahead, and a word waited for the step after it to be spoken."""
    model = OnnxAcousticModel(tiny_pack, Runtime(tiny_pack, "cpu"))
    audio = spoken(8.0)
    updates: list[int] = []  # updates seen when each block was asked for
    asked: list[int] = []

    def blocks():
        for i in range(0, audio.size, 32000):
            asked.append(len(updates))
            yield audio[i : i + 32000]

    Transcriber(model, model.runtime, "tiny").transcribe(  # type: ignore[arg-type]
        blocks(), StreamConfig(step_s=2.0), on_update=lambda update, last: updates.append(1))
    assert asked == [0, 1, 2, 3], asked  # block k asked for after the k rounds of the blocks before it
