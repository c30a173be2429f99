"""Recorded real-Whisper rounds, replayed without ONNX Runtime (issue 17: "record real rounds of the
real tiny.en model once and replay them in unit tests").

:class:`Recorder` wraps a real :class:`~captioner.engine.OnnxAcousticModel` (and the stream's Silero
speech detector) and writes down, in order, every request the streaming policy makes and the answer
it got:

* ``encode``: the input length in samples, ``native_30s``, a fingerprint of the samples (four
  projections on fixed ±1 sequences, compared with a relative tolerance, so a float ULP of a
  generated signal on another CPU does not matter but a shifted or different input does) → the
  bucket, real frames and bucket frames (not the cross-attention K/V: megabytes, and the replay
  does not need them);
* ``decoder``: which encoding a round's decoder runs over;
* ``run`` / ``verify`` / ``rewind``: the arguments → the :class:`~captioner.engine.model.ChunkOutput`
  arrays (tokens, logits, log-sum-exp, no-speech logit; the cross-attention rows as float16);
* ``speech`` / ``pause`` / ``flush``: the speech detector's span of a round's input, the pause a long
  utterance is closed at (and the samples fed so far).

The recorder hands the policy the attention **already rounded to float16**, so the recorded run and
its replay see bit-identical numbers and take identical decisions (the rounding is ~5e-4 relative,
far below what the policy's filters resolve).

:class:`ReplayModel` implements the same protocols (``AcousticModel``, ``VerifyingRunner``, the
detector's ``feed``/``flush``/``speech``/``pause``) and returns the recorded answers in order; a request that
differs from the recording raises an AssertionError that names both and the command to re-record.
With ``check_against`` (a real model and detector) it also asks the real model every recorded
request and compares the answers (the recording must not silently rot), still handing the policy the
recorded ones.

Files: ``tests/data/replay/<name>.json`` (scenario, requests, metadata) + ``<name>.npz`` (answers),
and one shared ``tiny.en-vocab.npz`` (the real token table, so no pack is needed to replay).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from captioner.engine.model import ChunkOutput, Encoding
from captioner.engine.tokens import Vocabulary
from captioner.engine.vad import SpeechSpan
from captioner.models.pack import SpecialTokens

_MIN_S = 0.1  # SpeechDetector.speech's default: requests that ask for it record no min_s

REPLAY_DIR = Path(__file__).resolve().parents[1] / "data" / "replay"
SPEECH_DIR = Path(__file__).resolve().parents[1] / "data" / "speech"
VOCAB_FILE = "tiny.en-vocab.npz"
FORMAT = 1
RERECORD = "re-record with `.venv/bin/python tests/engine/record_replay.py {name}` (tests/data/replay/README.md)"
_FLOAT_FIELDS = ("token_logit", "eot_logit", "logsumexp", "nospeech_logit", "lang_logits")
_ATTN_FIELDS = ("attn_last", "attn_align")
_PRINT_SEED = 20261123


# ----------------------------------------------------------------------------- files
@dataclass
class Recording:
    """One scenario's requests and answers.

    Attributes:
        name: file stem in :data:`REPLAY_DIR`.
        meta: JSON-able facts: scenario recipe, model facts (buckets, chunk plans, verifier sizes),
            what the recorded run produced (for the README and the tests' messages).
        events: the requests in order (dicts with ``op`` and the arguments, see module docstring).
        arrays: the answers' arrays, ``o<k>_<field>`` for dispatch ``k``.
    """

    name: str
    meta: dict[str, Any] = field(default_factory=dict)
    events: list[dict[str, Any]] = field(default_factory=list)
    arrays: dict[str, np.ndarray] = field(default_factory=dict)

    def save(self, folder: Path = REPLAY_DIR) -> tuple[Path, Path]:
        folder.mkdir(parents=True, exist_ok=True)
        stem = folder / self.name
        np.savez_compressed(stem.with_suffix(".npz"), **self.arrays)
        text = json.dumps({"format": FORMAT, "meta": self.meta, "events": self.events}, indent=1, ensure_ascii=False)
        stem.with_suffix(".json").write_text(text + "\n", encoding="utf-8")
        return stem.with_suffix(".json"), stem.with_suffix(".npz")

    @classmethod
    def load(cls, name: str, folder: Path = REPLAY_DIR) -> Recording:
        stem = folder / name
        doc = json.loads(stem.with_suffix(".json").read_text(encoding="utf-8"))
        if doc.get("format") != FORMAT:
            raise AssertionError(f"{stem}.json is format {doc.get('format')}, this replay reads {FORMAT}: "
                                 + RERECORD.format(name=name))
        with np.load(stem.with_suffix(".npz")) as npz:
            arrays = {k: npz[k] for k in npz.files}
        return cls(name, doc["meta"], doc["events"], arrays)

    def output(self, k: int) -> ChunkOutput:
        """Dispatch ``k``'s answer as the policy saw it (attention float16 → float32)."""
        a = self.arrays
        get = lambda f: a.get(f"o{k}_{f}")  # noqa: E731
        return ChunkOutput(
            tokens=a[f"o{k}_tokens"].astype(np.int64),
            token_logit=a[f"o{k}_token_logit"], eot_logit=a[f"o{k}_eot_logit"],
            attn_last=a[f"o{k}_attn_last"].astype(np.float32), attn_align=a[f"o{k}_attn_align"].astype(np.float32),
            logsumexp=get("logsumexp"), nospeech_logit=get("nospeech_logit"), lang_logits=get("lang_logits"),
        )


def save_vocabulary(vocab: Vocabulary, folder: Path = REPLAY_DIR) -> Path:
    """The real token table (bytes of every id) and special ids, shared by every recording."""
    blob = b"".join(vocab.token_bytes)
    ends = np.cumsum([len(t) for t in vocab.token_bytes]).astype(np.int32)
    sp = vocab.special
    special = {"eot": sp.eot, "sot": sp.sot, "transcribe": sp.transcribe, "translate": sp.translate,
               "notimestamps": sp.notimestamps, "first_timestamp": sp.first_timestamp,
               "startofprev": sp.startofprev, "nospeech": sp.nospeech, "languages": dict(sp.languages),
               "multilingual": vocab.multilingual}
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / VOCAB_FILE
    np.savez_compressed(path, blob=np.frombuffer(blob, np.uint8), ends=ends,
                        special=np.frombuffer(json.dumps(special).encode(), np.uint8))
    return path


def load_vocabulary(folder: Path = REPLAY_DIR) -> Vocabulary:
    """The vocabulary :func:`save_vocabulary` wrote."""
    with np.load(folder / VOCAB_FILE) as npz:
        blob, ends = npz["blob"].tobytes(), npz["ends"]
        special = json.loads(npz["special"].tobytes())
    starts = np.concatenate([[0], ends[:-1]])
    tokens = [blob[a:b] for a, b in zip(starts.tolist(), ends.tolist(), strict=True)]
    multilingual = special.pop("multilingual")
    return Vocabulary(tokens, SpecialTokens(**special), multilingual=multilingual)


def fingerprint(audio: np.ndarray) -> list[float]:
    """Four projections of ``audio`` on fixed pseudo-random ±1 sequences, and Σ|x| (float64)."""
    x = np.asarray(audio, dtype=np.float64)
    signs = np.random.default_rng(_PRINT_SEED).integers(0, 2, size=(4, x.size)) * 2 - 1
    return [*(signs @ x).tolist(), float(np.abs(x).sum())]


def _same_print(a: Sequence[float], b: Sequence[float]) -> bool:
    tol = 1e-4 * max(a[-1], b[-1]) + 1e-6
    return all(abs(p - q) <= tol for p, q in zip(a, b, strict=True))


# ----------------------------------------------------------------------------- recording
class _Log:
    """Shared event list of one recording."""

    def __init__(self, recording: Recording) -> None:
        self.rec = recording
        self.outputs = 0

    def add(self, **event: Any) -> None:
        self.rec.events.append(event)

    def answer(self, out: ChunkOutput) -> tuple[int, ChunkOutput]:
        """Store ``out``; returns its index and the answer the policy gets (attention as float16)."""
        k = self.outputs
        self.outputs += 1
        a = self.rec.arrays
        a[f"o{k}_tokens"] = np.asarray(out.tokens, np.int32)
        for name in ("token_logit", "eot_logit"):
            a[f"o{k}_{name}"] = np.asarray(getattr(out, name), np.float32)
        for name in ("logsumexp", "nospeech_logit", "lang_logits"):
            if getattr(out, name) is not None:
                a[f"o{k}_{name}"] = np.asarray(getattr(out, name), np.float32)
        for name in _ATTN_FIELDS:
            a[f"o{k}_{name}"] = np.asarray(getattr(out, name), np.float16)
        return k, self.rec.output(k)


class Recorder:
    """A real model that writes down every request and answer (module docstring).

    Args:
        model: the real ``OnnxAcousticModel``.
        recording: where the events go (its ``meta`` gains the model facts).
    """

    def __init__(self, model: Any, recording: Recording) -> None:
        self.model = model
        self.vocab = model.vocab
        self.buckets = model.buckets
        self.log = _Log(recording)
        self._encodings: list[Encoding] = []
        self._decoders = 0
        self.last_encoding: Encoding | None = None
        recording.meta.setdefault("buckets", list(model.buckets))
        recording.meta.setdefault("plans", {})
        recording.meta.setdefault("verify_size", {})

    @property
    def provider(self) -> str:
        return "replay-recorder"

    def chunk_plan(self, bucket: int, prefixed: bool) -> tuple[tuple[int, int], ...]:
        plan = self.model.chunk_plan(bucket, prefixed)
        self.log.rec.meta["plans"][f"{bucket}:{int(prefixed)}"] = [list(c) for c in plan]
        return plan

    def encode(self, audio: np.ndarray, *, native_30s: bool = False) -> Encoding:
        enc = self.model.encode(audio, native_30s=native_30s)
        self.log.add(op="encode", n=int(np.asarray(audio).size), native_30s=native_30s, print=fingerprint(audio),
                     bucket=enc.bucket, n_frames=enc.n_frames, total_frames=enc.total_frames)
        self._encodings.append(enc)
        self.last_encoding = enc
        return enc

    def decoder(self, encoding: Encoding) -> _RecordingRunner:
        index = next(i for i, e in enumerate(self._encodings) if e is encoding)
        runner = self.model.decoder(encoding)
        d = self._decoders
        self._decoders += 1
        self.log.add(op="decoder", encoding=index)
        size = runner.verify_size
        self.log.rec.meta["verify_size"][str(encoding.bucket)] = size
        return _RecordingRunner(runner, self.log, d, size)

    def detector(self, real: Any) -> _RecordingDetector:
        return _RecordingDetector(real, self.log)


class _RecordingRunner:
    def __init__(self, runner: Any, log: _Log, index: int, verify_size: int) -> None:
        self._runner, self._log, self._d, self._verify_size = runner, log, index, verify_size

    @property
    def verify_size(self) -> int:
        return self._verify_size

    def run(self, start: int, size: int, token: int, forced: np.ndarray) -> ChunkOutput:
        k, out = self._log.answer(self._runner.run(start, size, token, forced))
        self._log.add(op="run", decoder=self._d, start=int(start), size=int(size), token=int(token),
                      forced=[int(t) for t in forced], out=k)
        return out

    def verify(self, start: int, token: int, proposal: np.ndarray) -> ChunkOutput:
        k, out = self._log.answer(self._runner.verify(start, token, proposal))
        self._log.add(op="verify", decoder=self._d, start=int(start), token=int(token),
                      proposal=[int(t) for t in proposal], out=k)
        return out

    def rewind(self, consumed: int) -> None:
        self._runner.rewind(consumed)
        self._log.add(op="rewind", decoder=self._d, consumed=int(consumed))


class _RecordingDetector:
    def __init__(self, real: Any, log: _Log) -> None:
        self._real, self._log, self._fed = real, log, 0

    def feed(self, samples: np.ndarray) -> None:
        self._fed += int(np.asarray(samples).size)
        self._real.feed(samples)

    def flush(self) -> None:
        self._real.flush()
        self._log.add(op="flush", fed=self._fed)

    def speech(self, start: int, end: int, *, min_s: float = _MIN_S) -> SpeechSpan | None:
        span = self._real.speech(start, end, min_s=min_s)
        asked = {} if min_s == _MIN_S else {"min_s": min_s}  # recorded when not the default
        self._log.add(op="speech", fed=self._fed, start=int(start), end=int(end), **asked,
                      span=None if span is None else [int(span.start), int(span.end)])
        return span

    def pause(self, start: int, end: int, *, min_s: float) -> SpeechSpan | None:
        span = self._real.pause(start, end, min_s=min_s)
        self._log.add(op="pause", fed=self._fed, start=int(start), end=int(end), min_s=min_s,
                      span=None if span is None else [int(span.start), int(span.end)])
        return span


# ----------------------------------------------------------------------------- replay
@dataclass(frozen=True)
class _Tolerance:
    logit: float = 0.05  # logits are O(10); ORT on another CPU differs by ~1e-4
    # the int8 vocabulary's estimate of the log-sum-exp moves with the CPU's int8 kernel: 0.45 where the
    # weights are fitted to a saturating one (x86-64 without VNNI, captioner/engine/int8_kernel.py)
    logsumexp: float = 0.75
    attention: float = 5e-3  # attention rows sum to 1 over ≤ 1500 frames
    vad_samples: int = 1024  # two detector windows


class ReplayModel:
    """The recorded answers as an ``AcousticModel`` (module docstring).

    Args:
        recording: what to replay.
        vocab: the recording's vocabulary (default: the shared tiny.en table).
        check_against: optional ``(real_model, real_detector_factory)``: every request is also asked
            of the real model and its answer compared with the recording (tokens exactly, logits
            and attention within :class:`_Tolerance`); the policy still gets the recorded answer.
    """

    def __init__(self, recording: Recording, vocab: Vocabulary | None = None,
                 check_against: tuple[Any, Callable[[], Any]] | None = None) -> None:
        self.rec = recording
        self.vocab = vocab if vocab is not None else load_vocabulary()
        self.buckets = tuple(recording.meta["buckets"])
        self.at = 0  # next event
        self.dispatches: list[str] = []  # ops replayed ("run", "verify"), for the tests
        self._real = check_against[0] if check_against else None
        self._real_detector = check_against[1] if check_against else None
        self._real_encodings: list[Encoding] = []
        self._runners: list[ReplayRunner] = []
        self.tolerance = _Tolerance()
        self.last_encoding: Encoding | None = None

    @property
    def provider(self) -> str:
        return "replay"

    # -- the request log --------------------------------------------------------------------------
    def _fail(self, asked: str, have: str) -> AssertionError:
        return AssertionError(f"replay {self.rec.name!r}, request {self.at}: the policy asked for {asked}, the "
                              f"recording has {have}: {RERECORD.format(name=self.rec.name)}")

    def _next(self, op: str, asked: str) -> dict[str, Any]:
        if self.at >= len(self.rec.events):
            raise self._fail(asked, "no more requests")
        event = self.rec.events[self.at]
        if event["op"] != op:
            raise self._fail(asked, _describe(event))
        self.at += 1
        return event

    def _expect(self, event: dict[str, Any], asked: str, **args: Any) -> None:
        for key, value in args.items():
            if event[key] != value:
                self.at -= 1
                raise self._fail(asked, _describe(event))

    def assert_done(self) -> None:
        """Every recorded request was asked (the policy did not stop early)."""
        if self.at != len(self.rec.events):
            raise self._fail("nothing more (the run ended)", _describe(self.rec.events[self.at]))

    # -- AcousticModel ------------------------------------------------------------------------------
    def chunk_plan(self, bucket: int, prefixed: bool) -> tuple[tuple[int, int], ...]:
        key = f"{bucket}:{int(prefixed)}"
        if key not in self.rec.meta["plans"]:
            raise self._fail(f"the chunk plan {key}", f"plans for {sorted(self.rec.meta['plans'])} only")
        return tuple((int(s), int(k)) for s, k in self.rec.meta["plans"][key])

    def encode(self, audio: np.ndarray, *, native_30s: bool = False) -> Encoding:
        audio = np.asarray(audio, np.float32)
        asked = f"encode(n={audio.size}, native_30s={native_30s})"
        event = self._next("encode", asked)
        self._expect(event, asked, n=int(audio.size), native_30s=native_30s)
        if not _same_print(event["print"], fingerprint(audio)):
            self.at -= 1
            raise self._fail(asked + " of other samples (fingerprint differs)", _describe(event))
        index = sum(1 for e in self.rec.events[: self.at - 1] if e["op"] == "encode")
        if self._real is not None:
            real = self._real.encode(audio, native_30s=native_30s)
            assert (real.bucket, real.n_frames, real.total_frames) == (
                event["bucket"], event["n_frames"], event["total_frames"]), f"encode {index}: the real model differs"
            self._real_encodings.append(real)
        self.last_encoding = Encoding(bucket=event["bucket"], n_frames=event["n_frames"],
                                      total_frames=event["total_frames"], native_30s=native_30s, payload=index)
        return self.last_encoding

    def decoder(self, encoding: Encoding) -> ReplayRunner:
        asked = f"decoder(encoding {encoding.payload})"
        event = self._next("decoder", asked)
        self._expect(event, asked, encoding=encoding.payload)
        real = None
        if self._real is not None:
            real = self._real.decoder(self._real_encodings[int(encoding.payload)])  # type: ignore[arg-type]
        size = int(self.rec.meta["verify_size"].get(str(encoding.bucket), 0))
        if real is not None:
            assert real.verify_size == size, f"the real {encoding.bucket} s decoder verifies {real.verify_size} tokens"
        runner = ReplayRunner(self, len(self._runners), size, real)
        self._runners.append(runner)
        return runner

    # -- the speech detector -----------------------------------------------------------------------
    def detector(self, threshold: float = 0.5, **options: float) -> ReplayDetector:
        """The recorded speech detector (a stand-in for ``SpeechDetector(threshold, **options)``)."""
        real = self._real_detector(threshold, **options) if self._real_detector is not None else None
        return ReplayDetector(self, real)

    def _answer(self, event: dict[str, Any], real_out: ChunkOutput | None) -> ChunkOutput:
        out = self.rec.output(int(event["out"]))
        self.dispatches.append(event["op"])
        if real_out is not None:
            _compare(out, real_out, self.tolerance, f"{self.rec.name} request {self.at - 1} ({_describe(event)})")
        return out


class ReplayRunner:
    """One round's recorded decoder (:class:`~captioner.engine.model.VerifyingRunner`)."""

    def __init__(self, model: ReplayModel, index: int, verify_size: int, real: Any) -> None:
        self._m, self._d, self._verify_size, self._real = model, index, verify_size, real

    @property
    def verify_size(self) -> int:
        return self._verify_size

    def run(self, start: int, size: int, token: int, forced: np.ndarray) -> ChunkOutput:
        forced_l = [int(t) for t in np.asarray(forced).reshape(-1)]
        asked = f"run(decoder {self._d}, start={start}, size={size}, token={token}, forced={forced_l})"
        event = self._m._next("run", asked)
        self._m._expect(event, asked, decoder=self._d, start=int(start), size=int(size), token=int(token), forced=forced_l)
        real = self._real.run(start, size, token, forced) if self._real is not None else None
        return self._m._answer(event, real)

    def verify(self, start: int, token: int, proposal: np.ndarray) -> ChunkOutput:
        prop = [int(t) for t in np.asarray(proposal).reshape(-1)]
        asked = f"verify(decoder {self._d}, start={start}, token={token}, proposal={prop})"
        event = self._m._next("verify", asked)
        self._m._expect(event, asked, decoder=self._d, start=int(start), token=int(token), proposal=prop)
        real = self._real.verify(start, token, proposal) if self._real is not None else None
        return self._m._answer(event, real)

    def rewind(self, consumed: int) -> None:
        asked = f"rewind(decoder {self._d}, consumed={consumed})"
        event = self._m._next("rewind", asked)
        self._m._expect(event, asked, decoder=self._d, consumed=int(consumed))
        if self._real is not None:
            self._real.rewind(consumed)


class RecordedRound:
    """One recorded round's decoder answers, looked up by request in any order or any prefix: for
    deciding the same real round under another validator (``decode_round(RecordedRound(rec, d),
    rec_encoding, ...)``). A request the round never made raises the re-record AssertionError."""

    def __init__(self, recording: Recording, decoder: int, vocab: Vocabulary | None = None) -> None:
        self._replay = ReplayModel(recording, vocab)
        self.vocab, self.buckets = self._replay.vocab, self._replay.buckets
        self._events = [e for e in recording.events if e.get("decoder") == decoder and "out" in e]
        enc_index = [e for e in recording.events if e["op"] == "decoder"][decoder]["encoding"]
        enc = [e for e in recording.events if e["op"] == "encode"][enc_index]
        self.encoding = Encoding(bucket=enc["bucket"], n_frames=enc["n_frames"], total_frames=enc["total_frames"],
                                 native_30s=enc["native_30s"], payload=enc_index)
        self._verify_size = int(recording.meta["verify_size"].get(str(enc["bucket"]), 0))
        self.provider = "replay"

    def chunk_plan(self, bucket: int, prefixed: bool) -> tuple[tuple[int, int], ...]:
        return self._replay.chunk_plan(bucket, prefixed)

    def decoder(self, encoding: Encoding) -> RecordedRound:
        assert encoding.payload == self.encoding.payload, "a recorded round answers its own encoding only"
        return self

    @property
    def verify_size(self) -> int:
        return self._verify_size

    def _find(self, op: str, asked: str, **args: Any) -> ChunkOutput:
        for e in self._events:
            if e["op"] == op and all(e[k] == v for k, v in args.items()):
                return self._replay.rec.output(int(e["out"]))
        raise AssertionError(f"replay {self._replay.rec.name!r}: the policy asked for {asked}, which this recorded "
                             f"round never answered: {RERECORD.format(name=self._replay.rec.name)}")

    def run(self, start: int, size: int, token: int, forced: np.ndarray) -> ChunkOutput:
        f = [int(t) for t in np.asarray(forced).reshape(-1)]
        return self._find("run", f"run(start={start}, size={size}, token={token}, forced={f})",
                          start=int(start), size=int(size), token=int(token), forced=f)

    def verify(self, start: int, token: int, proposal: np.ndarray) -> ChunkOutput:
        p = [int(t) for t in np.asarray(proposal).reshape(-1)]
        return self._find("verify", f"verify(start={start}, token={token}, proposal={p})",
                          start=int(start), token=int(token), proposal=p)

    def rewind(self, consumed: int) -> None:
        pass


class ReplayDetector:
    """The recorded speech detector: ``feed`` counts, ``speech``, ``pause`` and ``flush`` are checked requests."""

    def __init__(self, model: ReplayModel, real: Any = None) -> None:
        self._m, self._real, self._fed = model, real, 0

    def feed(self, samples: np.ndarray) -> None:
        self._fed += int(np.asarray(samples).size)
        if self._real is not None:
            self._real.feed(samples)

    def flush(self) -> None:
        event = self._m._next("flush", f"flush() after {self._fed} samples")
        self._m._expect(event, f"flush() after {self._fed} samples", fed=self._fed)
        if self._real is not None:
            self._real.flush()

    def speech(self, start: int, end: int, *, min_s: float = _MIN_S) -> SpeechSpan | None:
        asked = f"speech({start}, {end}, min_s={min_s}) after {self._fed} samples fed"
        event = self._m._next("speech", asked)
        self._m._expect(event, asked, fed=self._fed, start=int(start), end=int(end))
        if event.get("min_s", _MIN_S) != min_s:
            self._m.at -= 1
            raise self._m._fail(asked, _describe(event))
        real = self._real.speech(start, end, min_s=min_s) if self._real is not None else None
        return self._recorded_span(event, real, "speech")

    def pause(self, start: int, end: int, *, min_s: float) -> SpeechSpan | None:
        asked = f"pause({start}, {end}, min_s={min_s}) after {self._fed} samples fed"
        event = self._m._next("pause", asked)
        self._m._expect(event, asked, fed=self._fed, start=int(start), end=int(end), min_s=min_s)
        real = self._real.pause(start, end, min_s=min_s) if self._real is not None else None
        return self._recorded_span(event, real, "pause")

    def _recorded_span(self, event: dict[str, Any], real: SpeechSpan | None, what: str) -> SpeechSpan | None:
        """The recorded answer; with a real detector, checked against its answer (``real``) within two windows."""
        span = None if event["span"] is None else SpeechSpan(*event["span"])
        if self._real is not None:
            tol = self._m.tolerance.vad_samples
            ok = (real is None) == (span is None) and (
                real is None or (abs(real.start - span.start) <= tol and abs(real.end - span.end) <= tol))  # type: ignore[union-attr]
            assert ok, f"{self._m.rec.name}: the speech detector's {what} is now {real} where the recording has {span}"
        return span


def _describe(event: dict[str, Any]) -> str:
    skip = {"op", "out", "print"}
    return f"{event['op']}(" + ", ".join(f"{k}={v}" for k, v in event.items() if k not in skip) + ")"


def _compare(recorded: ChunkOutput, real: ChunkOutput, tol: _Tolerance, where: str) -> None:
    assert np.array_equal(np.asarray(recorded.tokens), np.asarray(real.tokens)), (
        f"{where}: the real model now predicts {np.asarray(real.tokens).tolist()}, "
        f"the recording has {np.asarray(recorded.tokens).tolist()}")
    for name in _FLOAT_FIELDS:
        a, b = getattr(recorded, name), getattr(real, name)
        assert (a is None) == (b is None), f"{where}: {name} present in one answer only"
        if a is not None:
            atol = tol.logsumexp if name == "logsumexp" else tol.logit
            np.testing.assert_allclose(a, b, rtol=0, atol=atol, err_msg=f"{where}: {name}")
    for name in _ATTN_FIELDS:
        np.testing.assert_allclose(getattr(recorded, name), getattr(real, name), rtol=0, atol=tol.attention,
                                   err_msg=f"{where}: {name}")


# ----------------------------------------------------------------------------- scenarios
def scenario_audio(parts: Sequence[dict[str, Any]]) -> np.ndarray:
    """float32 16 kHz audio of a recipe: parts joined in order, each ``{"clip": id, "start_s"?,
    "end_s"?}`` (tests/data/speech), ``{"silence": seconds}`` or ``{"signal": kind, "seconds",
    "seed"}`` (``captioner.bench.nonspeech.generate``)."""
    from captioner.audio import load_audio_file
    from captioner.bench.nonspeech import generate

    sr = 16000
    pieces = []
    for part in parts:
        if "clip" in part:
            audio = load_audio_file(SPEECH_DIR / f"{part['clip']}.wav")
            a = round(part.get("start_s", 0.0) * sr)
            b = round(part["end_s"] * sr) if "end_s" in part else audio.size
            pieces.append(audio[a:b])
        elif "silence" in part:
            pieces.append(np.zeros(round(part["silence"] * sr), np.float32))
        else:
            pieces.append(generate(part["signal"], part["seconds"], seed=part["seed"]))
    return np.concatenate(pieces).astype(np.float32)


# ----------------------------------------------------------------------------- streams
@contextmanager
def detector_factory(factory: Callable[..., Any]) -> Iterator[None]:
    """While inside, ``Stream`` builds its speech detector with ``factory(threshold, **options)`` instead of
    Silero (``Stream`` takes no detector argument; its module's ``SpeechDetector`` name is the seam)."""
    import captioner.engine.stream as stream_module

    saved = stream_module.SpeechDetector
    stream_module.SpeechDetector = factory  # type: ignore[assignment,misc]
    try:
        yield
    finally:
        stream_module.SpeechDetector = saved  # type: ignore[misc]
