"""ONNX Runtime sessions for a model pack: execution providers, session options, shared weights.

Provider order for ``"auto"`` (ARCHITECTURE.md §6): QNN HTP (the NPU), then the QNN GPU backend or
DirectML, then CPU. Each candidate that is skipped or fails is recorded with its reason in
:class:`EngineInfo` and logged (a skip as info, a failure as a warning), and the next one is used;
nothing falls back silently: a forced provider that is not used is one line from the caller
(:meth:`EngineInfo.summary`). A QNN candidate is skipped without trying when the pack has int8
layers or an int8-ranked vocabulary (QNN has no int8 MatMul), with the way to an NPU pack.
Placement is read from the session's graph-assignment info (``get_providers()`` lists plugin EPs even
when no node runs on them, ECOSYSTEM.md §1.4).

Platform notes:

* Linux x86-64: ``onnxruntime-qnn`` ships only the x86-64 HTP *emulator*. It is correct but orders of
  magnitude slower than the CPU provider, so ``"auto"`` never picks it; only an explicit ``"qnn"``
  (tests, ``captioner doctor --check-qnn``) uses it.
* Windows ARM64: the plugin's DSP skeleton libraries are found through ``ADSP_LIBRARY_PATH``, which the
  runtime points at the ``onnxruntime_qnn`` directory when it registers the plugin (not at import).
* Forcing a provider (``"qnn"``, ``"gpu"``, ``"cpu"``) that is unavailable is not an error: the
  runtime falls back to the next candidate in the auto order after it and says so in the
  :class:`EngineInfo` (``fallbacks``) and in the log; ``captioner transcribe`` prints that line.

Weights: every large initializer of a pack lives once in ``weights.bin``. The runtime reads each
tensor once into memory it owns (from a descriptor opened with the pack), wraps it as an ``OrtValue``
and hands the same OrtValue to every session (``SessionOptions.add_initializer``). Not a memory map:
a mapped file truncated under a running session (a reinstall writing in place) kills the process with
SIGBUS at the next page fault; owned memory makes a deleted, replaced or truncated pack harmless to
the sessions already open, and a session created after such a change fails with a ModelError
(:meth:`Runtime.session`). The cost is nil on the CPU, which touches every weight anyway: whisper-base,
33.6 s of speech on the CPU, RSS after the run 452 MB either way (mapped: 133 MB anonymous + 319 MB
file pages; read: 409 + 42), peak 504 MB either way. The pages are anonymous rather than file-backed,
so under memory pressure they go to swap instead of being dropped, and reading them costs time once,
as the first sessions are created (base's 290 MB: 0.3-0.9 s on the shared 2-core machine at load 4.6,
from the page cache). A provider running compiled EP contexts never reads them. Which weights a graph uses comes from
the manifest (``Pack.graph_weights``), so the app never imports the ``onnx`` package (11 MB of RSS);
only a graph outside the pack (the bench's) is read with it. MatMul/Gemm weight *prepacking* is
disabled on the CPU provider (``session.disable_prepacking``), because ORT prepacks a shared
initializer into a private copy per session: measured with a 80 MB weight file and four sessions,
+330 MB with prepacking against +0 MB without, and sessions are created ~8× faster.
Int8 weights are the pack's as stored, except on a CPU whose u8×s8 kernel saturates (x86-64 without
VNNI), where they are fitted to it as they are read (:mod:`~captioner.engine.int8_kernel`).
CPU variant: a pack may carry a second set of graphs for the CPU provider over the same
``weights.bin`` (``Pack.cpu_file``; Windows ARM64 packs get int8 ones beside the NPU's fp32 graphs),
so the CPU, chosen or fallen back to, keeps the int8 speed-up; every other provider runs the main
graphs. The choice is made per session, so a fallback mid-session moves to the variant too.
Host threads: numpy's BLAS (OpenBLAS in the numpy wheels, Windows ARM64 included) runs its own
thread pool whose threads busy-wait after every call, so the log-mel matrix product just before the
encoder left a spinning thread competing with ONNX Runtime's (whisper-base, 6 s encoder on 2 cores:
148 ms after the log-mel against 101 ms alone). The host's matrix products are small, so the runtime
limits BLAS to one thread for the process (:func:`limit_host_blas_threads`).

Heap: without arenas ONNX Runtime mallocs every run's buffers. glibc keeps freed blocks of up to
32 MB in its heap for reuse (its mmap threshold adapts upward), so the short rounds leave ~100 MB
of free but resident heap (whisper-base, 2 s step: mallinfo2 showed 115 MB free of a 200 MB heap).
The longest bucket's buffers do not fit those holes and landed on top of them: the streaming RSS
peak was that free heap plus the 30 s run. :func:`release_free_heap` (``malloc_trim``) before a
run of the longest bucket hands the free pages back first: peak 601 -> 545 MB at a 2 s step, no
measurable cost (those rounds are rare and take ~1 s). Trimming after every round saved no more
and cost 5 % (the next round faults its pages in again).

Mid-session failures: a run that raises on a provider that recovers (QNN: Qualcomm documents a
sub-system restart of the NPU, after which re-created QNN resources work again) first drops every
session and runs the same inputs again on sessions created anew (from the EP-context cache: no
compile), recorded in ``EngineInfo.recoveries``; a provider gets one such recovery, and one more
after every :data:`RECOVERY_RUNS` good runs since its last. A failure without a recovery left (or on
a provider that does not recover) on a provider other than the last (a lost NPU device, a driver
reset; :meth:`Runtime.run`) drops every session, records the provider as failed with the
reason (``Attempt.mid_session``), moves to the next candidate and runs the same inputs again there.
The caller's state lives in host arrays (the decoder's KV cache, the encoder output), so the retried
dispatch continues the round and the stream never sees the failure; ``RoundStats.provider`` names
the new provider from that round on. Only when the last provider fails is a ProviderError raised.

NPU contexts, compiled ahead (docs/NPU.md): on QNN every graph is compiled into an EP context, cached
under the user cache dir, keyed by pack hash, provider, options and the ORT and plugin versions.
:meth:`Runtime.prepare` compiles every graph the pack's rounds can need on the NPU
(:meth:`Runtime.npu_units`: each bucket's encoder, and its decoder chunks and verifier with a frame
count fixed, as QNN needs static shapes) before the first round, with progress, through
ONNX Runtime's ``ModelCompiler`` (no inference session is created to compile), and marks the set
complete (``prepared.json``); the app and the CLI call it when they open the engine, so a round never
waits for a compile (a graph outside the prepared set is still compiled when first needed, with a
warning). The chunk graphs of buckets up to twice as short share one frame count, the longest's
(:meth:`Runtime.static_decoder_frames`; the host pads the cross-attention K/V with masked frames):
21 compiled graphs instead of 38 for the default buckets, each chunk graph's context holding the
decoder's weights and vocabulary projection again. Two layouts:

* one context per graph: each ``*_ctx.onnx`` with its own ``.bin``, every graph's weights stored in
  its own binary;
* one shared context for the pack (``shared_context``; the default on a real QNN device): the graphs
  are compiled as one session group (``ep.share_ep_contexts`` on each, ``ep.stop_share_ep_contexts``
  on the last), so QNN builds one context holding every graph, written as one ``.bin`` that every
  ``*_ctx.onnx`` points to. Where the context is generated on x86-64 the plugin also turns on HTP
  weight sharing (a weight used by several graphs is stored once; the plugin says weight sharing
  "only available with offline generation on x64 platform, not work on real device"). Each graph is
  compiled from a copy named for its frame count (a chunk graph compiled for two buckets would give
  two QNN graphs of one name), beside a hard link of the weight file. A shared context is loaded
  whole: the first session deserialises every graph, so the runtime opens the sessions of every
  graph in the set at once (the plugin keeps the graphs no session took in a process-wide list).

Loading a shared context can kill the process inside QNN (the x86-64 emulator's backend does:
SIGSEGV), so the runtime never loads one before a child process has (:mod:`~captioner.engine.npu_probe`):
right after generating it, :meth:`Runtime.prepare` has a child load the whole set and run the first
bucket's encoder, and compares its outputs with the CPU's. A crash, an error, a timeout or other
outputs is a failed verdict: one warning line, the shared files are deleted and one context per
graph is compiled (the same progress again). The verdict is kept beside the shared context
(``probe.json``, with the cache key: pack, options, ONNX Runtime and plugin versions, platform,
buckets), so the child runs once per pack and plugin; a later start reads it (a corrupt or stale one
is ignored). A context that loaded in the child but not in the app is recorded as failed and left
the same way. On the x86-64 emulator, whose QNN cannot load it (``benchmarks/qnn_weight_sharing_repro.py``),
the default is one context per graph without trying (``shared_context=True`` probes it there too).
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import io
import json
import logging
import os
import shutil
import sys
import threading
import time
import weakref
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType
from typing import IO, TYPE_CHECKING, Any

import numpy as np
import onnxruntime as ort

from captioner.core import PROVIDERS, Provider
from captioner.engine import int8_kernel, npu_probe
from captioner.engine.plugin_paths import plugin_folder
from captioner.engine.providers import (
    CPU_EP,
    QNN_EP,
    Attempt,
    Candidate,
    Host,
    plan_candidates,
    session_options,
)
from captioner.errors import ModelError, ProviderError
from captioner.models.pack import WeightRef
from captioner.storage.atomic import replace_file
from captioner.storage.disk import free_bytes

try:  # the ORT error of a bad input (wrong shape or type): a caller's mistake, not a provider failure
    from onnxruntime.capi.onnxruntime_pybind11_state import InvalidArgument as _InvalidArgument
except ImportError:  # pragma: no cover - every supported onnxruntime has it
    _InvalidArgument = ValueError  # type: ignore[assignment,misc]
_INPUT_ERRORS: tuple[type[BaseException], ...] = (_InvalidArgument, TypeError, ValueError)

if TYPE_CHECKING:
    from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence

    from captioner.models.pack import Pack

__all__ = ["RECOVERY_RUNS", "Attempt", "EngineInfo", "Runtime", "SharedWeights", "default_threads",
           "limit_host_blas_threads", "release_free_heap"]

logger = logging.getLogger(__name__)

# Good runs after a recovery that earn a provider another one (a few minutes of captioning: a round
# is ~10 dispatches), so a rare sub-system restart hours apart never ends the NPU for the session,
# while a device that keeps failing is given up at its second failure.
RECOVERY_RUNS = 500

# One graph compiled at a time in this process (and, by a lock file, per cache folder across
# processes, :func:`_compiling`): an engine left compiling at a stop (the app's stop timeout) and the
# next session's, or the app and the CLI on a first start, would otherwise each compile every graph
# the cache lacked when they began, over the same temporary file.
_COMPILING = threading.Lock()
CONTEXTS_ROOM = 1 << 30  # a cache disk with less room than this cannot be counted on for a model's contexts


def default_threads() -> int:
    """Intra-op threads: min(4, physical cores) — the reference's choice, good on 2–8 core laptops."""
    try:
        import psutil  # optional: only for the physical core count

        cores = psutil.cpu_count(logical=False)
    except ImportError:
        cores = None
    return max(1, min(4, cores or os.cpu_count() or 1))


_blas_limited = False


def limit_host_blas_threads() -> None:
    """Run numpy's BLAS on the calling thread only, for the whole process (idempotent; see the
    module docstring). Without threadpoolctl's view of the BLAS library nothing is changed."""
    global _blas_limited
    if _blas_limited:
        return
    _blas_limited = True
    try:
        from threadpoolctl import threadpool_limits

        threadpool_limits(limits=1, user_api="blas")
    except Exception as exc:  # a missing or unrecognised BLAS: slower, never wrong
        logger.info("could not limit numpy's BLAS threads: %s", exc)


_malloc_trim: Any = None  # glibc's malloc_trim once looked up, False where the C library has none


def release_free_heap() -> bool:
    """Hand the C heap's free pages back to the OS (glibc ``malloc_trim(0)``; see the module
    docstring). Elsewhere (Windows, macOS, musl) nothing happens. Returns whether memory was released."""
    global _malloc_trim
    if _malloc_trim is None:
        _malloc_trim = False
        if sys.platform.startswith("linux"):
            try:
                import ctypes

                trim = ctypes.CDLL(None).malloc_trim  # the process's C library
                trim.argtypes, trim.restype = [ctypes.c_size_t], ctypes.c_int
                _malloc_trim = trim
            except (OSError, AttributeError):  # not glibc
                pass
    return bool(_malloc_trim and _malloc_trim(0))


@dataclass(frozen=True, slots=True)
class EngineInfo:
    """Which execution provider runs the pack, and why (for the log, the UI and ``doctor``).

    Attributes:
        requested: the setting: ``"auto"``, ``"qnn"``, ``"gpu"`` or ``"cpu"``.
        chosen: label of the provider new sessions use (``"QNN-HTP"``, ``"QNN-GPU"``, ``"DirectML"``,
            ``"CPU"``).
        fallbacks: every candidate skipped or failed before ``chosen``, in order, with its reason.
        placement: graph file name → {EP name: nodes assigned}, from the graph-assignment info.
        recoveries: run errors after which a provider's sessions were re-created and it went on.
        session_ms: graph file name → session creation time in milliseconds.
        cache_problem: why the NPU's compiled contexts cannot be kept on disk ("" where they can, or
            where nothing is compiled): then the NPU compiles the model again at every start.
    """

    requested: str
    chosen: str
    fallbacks: tuple[Attempt, ...] = ()
    placement: Mapping[str, Mapping[str, int]] = field(default_factory=dict)
    session_ms: Mapping[str, float] = field(default_factory=dict)
    recoveries: tuple[Attempt, ...] = ()
    cache_problem: str = ""

    def summary(self) -> str:
        """One line: ``CPU (requested qnn; QNN-HTP: <reason>)``: the requested provider's reason and
        every provider that was tried and failed; those skipped on the way are left to ``fallbacks``."""
        shown = [a for i, a in enumerate(self.fallbacks) if a.failed or (i == 0 and self.requested != "auto")]
        if not shown:
            return f"{self.chosen} (requested {self.requested})"
        why = "; ".join(f"{a.label}: {a.reason}" for a in shown)
        return f"{self.chosen} (requested {self.requested}; {why})"


class SharedWeights:
    """The pack's weight file, each tensor read once into owned memory; one OrtValue per external
    initializer, shared by all sessions.

    The file is opened here and its descriptor kept, so a deleted or replaced file still reads as it
    was; a file changed in place (another size or modification time) or cut short is a ModelError,
    never a read of the wrong bytes and never SIGBUS (module docstring).

    Int8 weights (a pack's int8 layers and vocabulary ranking, each a ``…int8_t`` [K, N] tensor with
    its ``…int8_scale`` [N]) are fitted as they are read where this CPU's u8×s8 kernel saturates
    (:mod:`~captioner.engine.int8_kernel`); both tensors of a pair must then be in ``index``.

    Args:
        path: ``weights.bin`` of the pack.
        index: every weight of the pack by name (:meth:`~captioner.models.pack.Pack.weight_index`): where
            an int8 scale finds the weight it belongs to.
        fit_u8s8: fit int8 weights to a saturating kernel; None (default): where
            :func:`~captioner.engine.int8_kernel.u8s8_saturates` says so, asked at the first int8 weight.
    """

    def __init__(self, path: Path, index: Mapping[str, WeightRef] | None = None, fit_u8s8: bool | None = None) -> None:
        self.path = Path(path)
        self._index = dict(index or {})
        self._fit_u8s8 = fit_u8s8
        self._factors: dict[str, np.ndarray] = {}  # int8 weight name -> its columns' factors
        try:
            self._fd = os.open(self.path, os.O_RDONLY | getattr(os, "O_BINARY", 0))
        except OSError as exc:
            raise ModelError(f"cannot open the weight file {self.path}: {exc}") from exc
        self._closer = weakref.finalize(self, os.close, self._fd)  # kept open for this object's life
        st = os.fstat(self._fd)
        self._identity = (st.st_size, st.st_mtime_ns)
        self._size = int(st.st_size)
        self._loaded = 0
        self._values: dict[str, tuple[tuple, ort.OrtValue]] = {}
        self._lock = threading.Lock()

    @property
    def nbytes(self) -> int:
        """Size of the weight file in bytes (as opened)."""
        return self._size

    @property
    def loaded_bytes(self) -> int:
        """Bytes of weights read into memory so far."""
        return self._loaded

    def changed(self) -> str:
        """Why the opened file no longer matches what was opened ("" if it does)."""
        if not self._closer.alive:
            return "was closed"
        try:
            st = os.fstat(self._fd)
        except OSError as exc:
            return f"cannot be read: {exc}"
        if (st.st_size, st.st_mtime_ns) != self._identity:
            return "was changed on disk after the model was opened"
        return ""

    def ortvalue(self, ref: WeightRef) -> ort.OrtValue:
        """The OrtValue of a shared weight (read on first use, then reused).

        Raises:
            ModelError: the file is shorter than the manifest says, or changed since it was opened.
        """
        key = (ref.offset, ref.length, ref.dtype, ref.shape)
        with self._lock:
            cached = self._values.get(ref.name)
            if cached is not None:
                if cached[0] != key:
                    raise ModelError(f"{self.path}: initializer {ref.name} differs between graphs")
                return cached[1]
            if ref.offset + ref.length > self._size:
                raise ModelError(f"{self.path} is truncated: {ref.name} lies beyond its end")
            why = self.changed()
            if why:
                raise ModelError(f"{self.path} {why}; restart captioning (reinstall the model if it is damaged)")
            array = self._fitted(ref, self._array(ref))
            value = ort.OrtValue.ortvalue_from_numpy(array)
            self._values[ref.name] = (key, value)
            self._loaded += ref.length
            return value

    def _array(self, ref: WeightRef) -> np.ndarray:
        """The tensor ``ref`` read from the file into owned memory; under the lock."""
        data = np.empty(ref.length, dtype=np.uint8)
        try:
            got = self._read_at(data, ref.offset)
        except (OSError, ValueError) as exc:
            raise ModelError(f"cannot read {ref.name} from {self.path}: {exc}") from exc
        if got != ref.length:
            raise ModelError(f"{self.path} was cut short after the model was opened ({ref.name} "
                             f"reads {got} of {ref.length} bytes); reinstall the model")
        return data.view(np.dtype(ref.dtype)).reshape(ref.shape)

    def _fitted(self, ref: WeightRef, array: np.ndarray) -> np.ndarray:
        """``array`` as the sessions get it: an int8 weight of the pack, or its scales, fitted to a
        saturating u8×s8 kernel where there is one (class docstring); else unchanged. Under the lock."""
        q_name = int8_kernel.weight_name(ref.name) or ref.name
        s_name = int8_kernel.scale_name(q_name)
        if s_name is None or q_name not in self._index or s_name not in self._index:
            return array
        if self._fit_u8s8 is None:
            self._fit_u8s8 = int8_kernel.u8s8_saturates()
        if not self._fit_u8s8:
            return array
        factors = self._factors.get(q_name)
        if factors is None:
            q = array if ref.name == q_name else self._array(self._index[q_name])
            factors = self._factors[q_name] = int8_kernel.pair_factors(q)
        if ref.name == q_name:
            return int8_kernel.fit_weight(array, factors)
        return int8_kernel.fit_scale(array, factors)

    def _read_at(self, data: np.ndarray, offset: int) -> int:
        """Fill ``data`` from ``offset`` (fewer bytes only at the end of the file); under the lock."""
        view, done = data.data, 0
        while done < len(view):
            if hasattr(os, "preadv"):  # POSIX: no shared file position
                got = os.preadv(self._fd, [view[done:]], offset + done)
            else:  # Windows: seek and read (under the lock)
                with io.FileIO(self._fd, "rb", closefd=False) as f:
                    f.seek(offset + done)
                    got = f.readinto(view[done:]) or 0
            if got <= 0:
                break
            done += got
        return done

    def close(self) -> None:
        """Close the file (the tensors already read stay valid; a later read is a ModelError)."""
        self._closer()


def _external_initializers(graph: Path, weights_name: str) -> tuple[WeightRef, ...]:
    """The weights of a graph the pack does not list, read from the graph (protos only, no data)."""
    import onnx  # only for graphs outside a pack's manifest (the bench's): 11 MB the app does not pay

    try:
        model = onnx.load(str(graph), load_external_data=False)
    except Exception as exc:  # onnx raises DecodeError, OSError, ... for a bad file
        raise ModelError(f"{graph} is not a readable ONNX graph: {exc}") from exc
    out = []
    for tensor in model.graph.initializer:
        if tensor.data_location == onnx.TensorProto.EXTERNAL:
            info = {e.key: e.value for e in tensor.external_data}
            if info.get("location") != weights_name:
                raise ModelError(f"{graph}: initializer {tensor.name} points to {info.get('location')}, "
                                 f"not {weights_name}")
            dtype = np.dtype(onnx.helper.tensor_dtype_to_np_dtype(tensor.data_type)).name
            out.append(WeightRef(tensor.name, dtype, tuple(tensor.dims), int(info.get("offset", 0)),
                                 int(info["length"])))
    return tuple(out)


class Runtime:
    """Creates and caches one ONNX Runtime session per graph of a pack, on the best provider.

    Sessions are created on first use (:meth:`session`), or all of them before the first round by
    :meth:`prepare` (which the app and the CLI call): compiled on an NPU, opened on the CPU. If the
    current provider fails on a graph, the runtime records why and moves on to the next candidate for
    that graph and every later one.

    Args:
        pack: the loaded model pack.
        provider: ``"auto"``, ``"qnn"``, ``"gpu"`` or ``"cpu"``.
        cache_dir: user cache directory (EP-context caches go under ``ep-context/``); None: no cache.
            A cache that cannot be written (a full disk, :attr:`cache_problem` says why) is dropped
            and the provider compiles in memory, at every start, rather than left for the next one.
        threads: intra-op threads; default :func:`default_threads`.
        npu_buckets: the buckets whose graphs :meth:`prepare` compiles for the NPU (default: all).
        shared_context: compile the prepared graphs into one shared QNN context and use it where a
            trial load in a child process shows that it loads here (module docstring;
            :mod:`~captioner.engine.npu_probe`), else one context per graph. Default (None): so on a
            real QNN device; on the x86-64 HTP emulator, which cannot load such a context, one context
            per graph without trying. False: one context per graph.
    """

    def __init__(self, pack: Pack, provider: Provider = "auto", *, cache_dir: Path | None = None,
                 threads: int | None = None, npu_buckets: Iterable[int] | None = None,
                 shared_context: bool | None = None) -> None:
        if provider not in PROVIDERS:
            raise ProviderError(f"unknown provider {provider!r}; choose one of {', '.join(PROVIDERS)}")
        self.pack = pack
        self.requested = provider
        self.threads = threads or default_threads()
        limit_host_blas_threads()
        self.cache_dir = Path(cache_dir) if cache_dir else None
        self.cache_problem = ""  # why the EP-context cache could not be written (then None: compiled in memory)
        self.weights = SharedWeights(pack.weights_file(), pack.weight_index())
        self._graph_ids = _identities(pack)
        self._plan: list[Candidate | Attempt] = [_fit_for_pack(c, pack) for c in plan_candidates(provider)]
        self._fallbacks: list[Attempt] = []
        self._advance()
        if self.cache_dir is not None and self._current.uses_ep_context:  # the QNN plugin reads that folder
            self.cache_dir, self.cache_problem = plugin_folder(self.cache_dir)
            if self.cache_dir is None:
                logger.warning("the NPU's compile cache under %s cannot be used (%s); %s compiles in memory, "
                               "at every start", cache_dir, self.cache_problem, self.provider)
        if pack.precision == "fp16" and not self._current.uses_ep_context:
            # Measured: the in-graph Cast of each fp16 weight gives every session its own fp32 copy
            # (+740 MB instead of +140 MB for a 9-graph bucket of a d_model 384 model).
            logger.warning("pack %s has fp16 weights: on %s every session holds its own fp32 copy; "
                           "an fp32 pack uses less memory here", pack.root.name, self.provider)
        self._sessions: dict[tuple[Path, int | None], ort.InferenceSession] = {}  # (graph, fixed frames)
        self._placement: dict[str, dict[str, int]] = {}
        self._session_ms: dict[str, float] = {}
        self._opened_s = 0.0  # every session created so far, re-created ones included
        self._lock = threading.Lock()
        self._generation = 0  # bumped whenever every session is dropped (a recovery, a fallback)
        self._recoveries: list[Attempt] = []
        self._good_runs = 0  # runs that succeeded since the last recovery
        self._recovered: str | None = None  # label of the provider whose recovery is spent
        self.npu_buckets = tuple(npu_buckets) if npu_buckets is not None else tuple(pack.buckets)
        self.shared_context = not Host.current().qnn_emulated if shared_context is None else shared_context
        self._prepared: set[str] = set()  # context folders known complete in this process
        self._group_open = False  # the sessions of a shared context are open

    @property
    def opened_s(self) -> float:
        """Seconds spent creating sessions so far (``prepare``'s and those opened on first use in a
        round), so that a caller can tell opening the model from transcribing with it."""
        return self._opened_s

    @property
    def provider(self) -> str:
        """Label of the provider that new sessions use (``"CPU"``, ``"QNN-HTP"``, ...)."""
        return self._current.label

    @property
    def _current(self) -> Candidate:
        return self._plan[0]  # type: ignore[return-value]  # _advance() leaves a Candidate first

    def _advance(self) -> None:
        """Record the skipped providers at the head of the plan until a usable one is first."""
        while isinstance(attempt := self._plan[0], Attempt):
            self._plan.pop(0)
            self._fallbacks.append(attempt)
            # the log file only: what the user sees is the caller's one line (EngineInfo.summary,
            # transcribe's "is not available", the app's warning), not a line per skipped provider
            logger.info("execution provider %s not used: %s", attempt.label, attempt.reason)

    def info(self) -> EngineInfo:
        """A snapshot of the provider decision and the placement of every session so far."""
        return EngineInfo(
            requested=self.requested,
            chosen=self.provider,
            fallbacks=tuple(self._fallbacks),
            placement=MappingProxyType({k: MappingProxyType(dict(v)) for k, v in self._placement.items()}),
            session_ms=MappingProxyType(dict(self._session_ms)),
            recoveries=tuple(self._recoveries),
            cache_problem=self.cache_problem,
        )

    def session(self, graph: Path, frames: int | None = None) -> ort.InferenceSession:
        """The session of ``graph`` (a file of the pack), created on first use.

        ``frames``: the round's encoder frames, for a decoder chunk graph (its ``frames`` dimension is
        symbolic, so one graph serves every bucket). The CPU runs one session for every value; a
        provider that needs static shapes (every other one) gets a session per value, compiled with
        the dimension fixed.

        Raises:
            ProviderError: no provider, not even the CPU, could run the graph.
        """
        return self._session_of(Path(graph), frames)[0]

    def _session_of(self, graph: Path, frames: int | None) -> tuple[ort.InferenceSession, Candidate, int]:
        """The session of ``graph``, the candidate it runs on and the session generation (see :meth:`session`)."""
        with self._lock:
            fixed = frames if frames is not None and self._current.static_shapes else None
            sess = self._sessions.get((graph, fixed))
            if sess is None:
                sess = self._create(graph, fixed)
                fixed = frames if frames is not None and self._current.static_shapes else None  # after a fallback
                self._sessions[(graph, fixed)] = sess
                if self._shared_now(self._current) and not self._group_open:
                    self._open_group()
            return sess, self._current, self._generation

    def run(self, graph: Path, outputs: Sequence[str], feeds: Mapping[str, Any], *,
            frames: int | None = None) -> list[np.ndarray]:
        """Run ``graph``'s session on ``feeds``; when the run fails, recover or fail over and run it again.

        A failing run (any ONNX Runtime error but a bad input: a lost NPU device, a sub-system
        restart, a driver reset, an out-of-memory on the device) first re-creates the provider's
        sessions and runs again when the provider recovers and has a recovery left (:meth:`recover`);
        otherwise, on a provider that is not the last, it calls :meth:`fail_over` and runs the same
        feeds on the next provider's new session, so the caller's dispatch succeeds and its round
        continues (module docstring). ``frames`` as in :meth:`session`.

        Raises:
            ProviderError: the last provider failed too (chained to its exception).
            ModelError: a session had to be created and the pack's files changed on disk.
        """
        graph = Path(graph)
        while True:
            sess, cand, generation = self._session_of(graph, frames)
            try:
                out = sess.run(list(outputs), dict(feeds))
            except _INPUT_ERRORS:
                raise  # the caller's mistake: the same on every provider
            except Exception as exc:  # ORT's Fail/EPFail/DeviceReset/RuntimeException, ...
                if not self.recover(cand, generation, graph, exc):
                    self.fail_over(cand, graph, exc)
                continue
            self._good_runs += 1
            return out

    def recover(self, cand: Candidate, generation: int, graph: Path, exc: BaseException) -> bool:
        """After a run of ``graph`` on sessions of ``generation`` failed with ``exc``: drop every
        session so that the next run creates them anew on ``cand``, when ``cand`` recovers and has a
        recovery left (module docstring). True when the caller should simply run again: recovered
        now, or the sessions were already re-created (another stream's failure) or the provider
        already left; False when ``cand`` is to be given up (:meth:`fail_over`)."""
        with self._lock:
            if self._current is not cand or self._generation != generation:
                return True  # another dispatch's failure has dealt with it: run on what is current
            spent = self._recovered == cand.label and self._good_runs < RECOVERY_RUNS
            if not cand.recovers or spent:
                return False
            reason = f"{graph.name} failed while running: {_one_line(exc)}"
            self._drop_sessions()
            self._recovered, self._good_runs = cand.label, 0
            self._recoveries.append(Attempt(cand.label, True, reason, mid_session=True))
            logger.warning("execution provider %s failed (%s); re-creating its sessions", cand.label, reason)
            return True

    def _drop_sessions(self) -> None:
        """Drop every session (in reverse creation order, as shared EP contexts require); under the lock."""
        for key in reversed(list(self._sessions)):
            del self._sessions[key]
        self._placement.clear()
        self._generation += 1
        self._group_open = False

    # -- NPU contexts compiled ahead ----------------------------------------------------------
    @property
    def static_shapes(self) -> bool:
        """The current provider compiles static shapes (the NPU): a beam step's cache rows are then
        fixed at their maximum (:meth:`beam_cache_rows`); the CPU takes the filled rows only."""
        return self._current.static_shapes

    def beam_cache_rows(self) -> int | None:
        """Rows of the pack's beam-step caches (hypotheses × positions) as a static-shape provider
        compiles them; None for a pack without a beam step."""
        rows = [size * self.pack.cache_slots[b] for b in self.pack.buckets if (found := self.pack.beam(b))
                for size in (found[1],)]
        return max(rows) if rows else None

    def decoder_frames(self, bucket: int) -> int:
        """Encoder frames the decoder chunk graphs of ``bucket`` read on the current provider: the
        bucket's own (50 per second) on the CPU, whose graphs take any count; on a static-shape
        provider those of the bucket's frame group (:meth:`static_decoder_frames`). The caller pads
        the cross-attention K/V and mask to this count with masked frames."""
        return self.static_decoder_frames(bucket) if self._current.static_shapes else 50 * int(bucket)

    def static_decoder_frames(self, bucket: int) -> int:
        """The frame count a static-shape provider fixes in the decoder chunk graphs of ``bucket``.

        A chunk graph compiled for one frame count serves every bucket up to it (the frames past a
        bucket's are masked like its own padding: the -100 bias gives them no weight), so buckets
        share compiled graphs: among the :attr:`npu_buckets` that use the same chunk graph files
        (the same ``cache_slots``), the longest one serves every bucket at least half as long, the
        longest left after them the next, and so on (default buckets: 3-6 s read 300 frames, 10 s
        500, 20-30 s 1500). At most twice a bucket's frames: the NPU's cross-attention work and the
        K/V it is sent per chunk at most double. A bucket outside :attr:`npu_buckets` is served by
        one of them when one qualifies, else by its own frames."""
        bucket = int(bucket)
        slots = self.pack.cache_slots[bucket]
        anchors: list[int] = []
        for b in sorted((b for b in self.npu_buckets if self.pack.cache_slots[b] == slots), reverse=True):
            if not anchors or 2 * b < anchors[-1]:
                anchors.append(b)  # the longest bucket not yet served: it serves those down to half its length
        served = [a for a in anchors if bucket <= a <= 2 * bucket]
        return 50 * (min(served) if served else bucket)

    def npu_units(self, buckets: Iterable[int] | None = None) -> list[tuple[Path, int | None]]:
        """Every (graph, fixed frames) a static-shape provider compiles for ``buckets`` (default
        :attr:`npu_buckets`): each bucket's encoder (``None``), then its decoder chunk graphs, its
        verifier and its beam step with the frames of its group (:meth:`static_decoder_frames`)
        fixed; each pair once, in that order."""
        units: dict[tuple[Path, int | None], None] = {}
        for bucket in self.npu_buckets if buckets is None else buckets:
            units[(self.pack.encoder_file(bucket), None)] = None
            frames = self.static_decoder_frames(bucket)
            for start, size in self.pack.decoder_chunks(bucket):
                units[(self.pack.decoder_file(bucket, start, size), frames)] = None
            verifier = self.pack.verifier(bucket)
            if verifier:
                units[(verifier[0], frames)] = None
            beam = self.pack.beam(bucket)
            if beam:
                units[(beam[0], frames)] = None
        return list(units)

    def prepare(self, progress: Callable[[int, int], None] | None = None, *, open_sessions: bool = True) -> None:
        """Compile every graph of :meth:`npu_units` for the current provider now, before any round
        (EP-context providers with a cache dir), then open the first one's session (a compile that
        fails falls back to the next provider as any session would). Elsewhere (the CPU, DirectML)
        open every one of their sessions now, one at a time: a session takes 20–60 ms for an encoder
        but 200–520 ms for a decoder chunk graph (whisper-base, 2-core x86-64: 3.5 s in all), which a
        session opened as rounds need it charged to the first live round (~1.5 s) and the first
        closing round (~1.4 s) of every run; ``open_sessions=False`` leaves them to the rounds (a file
        transcribed as fast as it can be, where a short one would open graphs it never uses).
        ``progress(done, total)`` is called after each graph compiled; nothing is called when the
        cache already holds them all, nor for sessions opened. A ``progress`` that raises a
        BaseException that is not an Exception (the app's worker, asked to stop) ends the compile
        there, the graphs compiled so far kept in the cache, the generating child ended; an
        Exception would be taken for a failed compile.

        Raises:
            ProviderError: no provider, not even the CPU, could run the pack's first graph.
        """
        with self._lock:
            cand = self._current
            compiles = cand.uses_ep_context and self.cache_dir is not None
            generation = self._generation
            if compiles:
                self._progress, self._preparing = progress, True
        if not compiles:
            self._open_units(generation, open_sessions)
            return
        try:
            graph, frames = self.npu_units()[0]
            self.session(graph, frames)
        finally:
            with self._lock:
                self._progress, self._preparing = None, False
        if self.cache_problem and self._current is cand:  # compiled in memory: the rest now, not in a round
            self._open_units(generation, True, progress)

    def _open_units(self, generation: int, open_sessions: bool,
                    progress: Callable[[int, int], None] | None = None) -> None:
        """Open every session of :meth:`npu_units` (when ``open_sessions``), one at a time, each
        under the lock, so a round's own session can go between them; ``progress`` as in :meth:`prepare`."""
        units = self.npu_units() if open_sessions else []
        for done, (graph, frames) in enumerate(units, 1):
            if self._generation != generation:
                return  # closed (or failed over) meanwhile: what is still needed opens as rounds need it
            self.session(graph, frames)
            if progress is not None:
                progress(done, len(units))

    _progress: Callable[[int, int], None] | None = None
    _preparing = False  # prepare() is running: the first session compiles the whole set

    def _shared_now(self, cand: Candidate) -> bool:
        return self.shared_context and cand.uses_ep_context and self.cache_dir is not None

    def _compile_ahead(self, cand: Candidate) -> None:
        """Compile what the cache lacks of :meth:`npu_units` for ``cand``; for the shared layout, then
        trial-load it in a child process unless a verdict is cached (under the cache folder's lock, as
        the generation: an engine that finds another's verdict there takes it), and go on with one
        context per graph where it does not load (module docstring); under the lock."""
        folder = self._context_dir(cand)
        if str(folder) in self._prepared:
            return
        shared = self._shared_now(cand)
        verdict = npu_probe.read_verdict(self._verdict_path(cand), self._context_key(cand)) if shared else None
        if verdict is not None and not verdict.loads:
            logger.info("the shared NPU context of %s does not load here (%s; probed before): one context per graph",
                        self.pack.root.name, verdict.reason)
            self.shared_context = False
            self._compile_ahead(cand)
            return
        if not shared:
            self._compile_set(cand, folder)
            self._prepared.add(str(folder))
            return
        fresh = None
        if not self._set_complete(cand, folder):
            with _compiling(folder):  # one generation at a time; another engine's may have ended meanwhile
                why = "" if self._set_complete(cand, folder) else self._generate_in_child(cand, folder)
            if why:
                fresh = npu_probe.Verdict(False, why)
        if fresh is None and verdict is None:
            # one trial load at a time per cache folder (they share its probe folder, which each
            # deletes when done), and none where another engine's verdict came meanwhile
            with _compiling(folder):
                verdict = npu_probe.read_verdict(self._verdict_path(cand), self._context_key(cand))
                if verdict is None:
                    fresh = self._probe(cand)
                    npu_probe.write_verdict(self._verdict_path(cand), self._context_key(cand), fresh)
            if verdict is not None:  # another engine's verdict: as if it had been cached
                self._compile_ahead(cand)
                return
        elif fresh is not None:
            npu_probe.write_verdict(self._verdict_path(cand), self._context_key(cand), fresh)
        if fresh is not None:
            if not fresh.loads:
                logger.warning("the shared NPU context of %s does not load here (%s); using one context per graph",
                               self.pack.root.name, fresh.reason)
                _discard_contexts(folder)
                self.shared_context = False
                self._compile_ahead(cand)
                return
            logger.info("the shared NPU context of %s loads here (trial load %.1f s, outputs within %.3g of the CPU's)",
                        self.pack.root.name, fresh.seconds or 0.0, fresh.max_error or 0.0)
        self._prepared.add(str(folder))

    def _set_complete(self, cand: Candidate, folder: Path) -> bool:
        """``folder`` holds every context of :meth:`npu_units` (``prepared.json`` lists them)."""
        names = [self._context_path(g, cand, f).name for g, f in self.npu_units()]
        try:
            listed = json.loads((folder / "prepared.json").read_text())["contexts"]
        except (OSError, ValueError, KeyError, TypeError):
            return False
        return listed == names and all((folder / n).is_file() for n in names)

    def compile_pending(self) -> bool:
        """:meth:`prepare` has graphs to compile (minutes on a first NPU start, where a warm start
        takes seconds): the current provider compiles EP contexts into the cache and the cache lacks
        some of :meth:`npu_units` (or, for the shared layout, the trial load's verdict). The app then
        readies the engine before it opens the capture, which would overflow meanwhile."""
        with self._lock:
            cand = self._current
            if not (cand.uses_ep_context and self.cache_dir is not None):
                return False
            shared = self._shared_now(cand)
            if shared:
                verdict = npu_probe.read_verdict(self._verdict_path(cand), self._context_key(cand))
                if verdict is None:
                    return True  # the shared set is generated, then trial-loaded in a child
                shared = verdict.loads  # else the one-context-per-graph set is the one used
            folder = self._context_dir(cand, shared)
            return str(folder) not in self._prepared and not self._set_complete(cand, folder)

    def _generate_in_child(self, cand: Candidate, folder: Path) -> str:
        """Generate the shared set of ``cand`` into ``folder`` in a child process (its memory peak, the
        group's graphs held until the last, is the child's and ends with it; a crash is contained),
        relaying its progress; why it failed, or ""."""
        logger.info("preparing the NPU: generating the shared context of %s in a child process", self.pack.root.name)
        request = {"task": "generate", "pack": str(self.pack.root), "cache": str(self.cache_dir),
                   "buckets": list(self.npu_buckets), "threads": self.threads, "options": dict(cand.options),
                   "folder": str(folder)}
        work = folder / "probe"
        try:
            why, seconds = npu_probe.run_child(work, request, "generating it", None, self._progress)
        finally:
            shutil.rmtree(work, ignore_errors=True)
        if not why and not self._set_complete(cand, folder):
            why = "generating it left an incomplete set"
        if not why:
            logger.info("generated the shared NPU context of %s in %.0f s", self.pack.root.name, seconds)
        return why

    def _generate_shared_here(self, folder: Path, options: Mapping[str, str],
                              progress: Callable[[int, int], None]) -> None:
        """In the generating child (:mod:`~captioner.engine.npu_probe`): compile the shared set into
        ``folder``, which must be the parent's (the same provider options and cache key)."""
        cand = self._current
        if not self._shared_now(cand) or dict(cand.options) != dict(options) or self._context_dir(cand) != folder:
            raise ProviderError(f"the child's NPU ({cand.label} {dict(cand.options)}) is not the parent's")
        self._progress = progress
        self._compile_set(cand, folder)

    def _compile_set(self, cand: Candidate, folder: Path) -> None:
        """Compile the graphs of :meth:`npu_units` that ``folder`` lacks (all of them again for a
        shared context), with progress, and mark the set complete (``prepared.json``)."""
        units = self.npu_units()
        ctxs = [self._context_path(g, cand, f) for g, f in units]
        marker = folder / "prepared.json"
        names = [c.name for c in ctxs]
        if not self._set_complete(cand, folder):
            shared = self._shared_now(cand)
            todo = list(zip(units, ctxs, strict=True))
            if shared:  # one session group writes the one binary: all of it again
                for old in folder.glob("*"):
                    if old.is_file() and old.name != "probe.json":
                        old.unlink()
            else:
                todo = [(u, c) for u, c in todo if not c.is_file()]
            folder.mkdir(parents=True, exist_ok=True)
            t0 = time.perf_counter()
            logger.info("preparing the NPU: compiling %d graphs of %s on %s", len(todo), self.pack.root.name,
                        cand.label)
            for i, ((graph, frames), ctx) in enumerate(todo):
                self._compile(graph, frames, ctx, cand, group=(i == len(todo) - 1) if shared else None)
                if self._progress is not None:
                    self._progress(i + 1, len(todo))
            nbytes = sum(f.stat().st_size for f in folder.glob("*") if f.is_file())
            marker.write_text(json.dumps({"contexts": names, "shared": shared,
                                          "compile_s": round(time.perf_counter() - t0, 1), "bytes": nbytes}))
            logger.info("prepared the NPU: %d graphs in %.0f s, %.1f MB of contexts", len(todo),
                        time.perf_counter() - t0, nbytes / 1e6)

    def _probe(self, cand: Candidate) -> npu_probe.Verdict:
        """Trial-load the shared context of ``cand`` in a child process and run the first prepared
        graph (the first bucket's encoder) there and on the CPU: the verdict (module docstring)."""
        units = self.npu_units()
        ctxs = [self._context_path(g, cand, f) for g, f in units]
        graph, frames = units[0]
        bucket = int(self.npu_buckets[0])
        rng = np.random.default_rng(0)
        feeds: dict[str, np.ndarray] = {"mel": rng.standard_normal((1, self.pack.dims.n_mels, 100 * bucket)).astype(np.float32),
                 "n_frames": np.array([50 * bucket], np.int64)}
        cpu = Candidate("CPU", CPU_EP)
        inits = self.pack.graph_weights(graph)
        if inits is None:
            inits = _external_initializers(graph, self.pack.weights_file().name)
        sess = self._session(graph, self._options(cpu, frames), cpu, inits)
        names = [o.name for o in sess.get_outputs()]
        reference = dict(zip(names, sess.run(names, feeds), strict=True))
        del sess
        logger.info("trial-loading the shared NPU context of %s in a child process", self.pack.root.name)
        probe_dir = ctxs[0].parent / "probe"
        try:
            outputs, why, seconds = npu_probe.trial_load(probe_dir, ctxs, ctxs[0], feeds, cand.options)
        finally:
            shutil.rmtree(probe_dir, ignore_errors=True)
        if outputs is None:
            return npu_probe.Verdict(False, why, None, round(seconds, 1))
        error, why = npu_probe.compare(outputs, reference)
        return npu_probe.Verdict(not why, why, round(error, 6), round(seconds, 1))

    def _compile(self, graph: Path, frames: int | None, ctx: Path, cand: Candidate, group: bool | None) -> None:
        """Compile ``graph`` (``frames`` fixed) into the EP-context model ``ctx`` with ``ModelCompiler``;
        ``group``: None alone, else a member of the shared session group (True: its last)."""
        if group is None:  # alone: one at a time, and not again once another engine compiled it
            with _compiling(ctx.parent):
                if not ctx.is_file():
                    self._compile_to(graph, frames, ctx, cand, None)
        else:
            self._compile_to(graph, frames, ctx, cand, group)

    def _compile_to(self, graph: Path, frames: int | None, ctx: Path, cand: Candidate, group: bool | None) -> None:
        """:meth:`_compile`'s work."""
        so = self._options(cand, frames)
        source = graph
        # alone: compiled under a temporary name and renamed, so a ``*_ctx.onnx`` exists only whole (a
        # process killed mid-compile left one that the cache counted as compiled; its binary keeps the
        # temporary name, which the renamed context points to)
        out = ctx if group is not None else _cleared_part(ctx)
        if group is not None:
            so.add_session_config_entry("ep.share_ep_contexts", "1")
            if group:
                so.add_session_config_entry("ep.stop_share_ep_contexts", "1")
            source = _unique_source(graph, frames, ctx.parent / "src", self.pack.weights_file())
        inits = self.pack.graph_weights(graph)
        if inits is None:
            inits = _external_initializers(graph, self.pack.weights_file().name)
        for ref in inits:
            so.add_initializer(ref.name, self.weights.ortvalue(ref))
        compiler = ort.ModelCompiler(so, str(source), embed_compiled_data_into_model=False,
                                     graph_optimization_level=so.graph_optimization_level)
        compiler.compile_to_file(str(out))
        if out != ctx:
            replace_file(out, ctx)

    def _open_group(self) -> None:
        """Open the session of every prepared graph now (a shared context is loaded whole); under the lock."""
        self._group_open = True
        for graph, frames in self.npu_units():
            if (graph, frames) not in self._sessions:
                self._sessions[(graph, frames)] = self._create(graph, frames)

    def fail_over(self, cand: Candidate, graph: Path, exc: BaseException) -> None:
        """Give up ``cand`` after a run of ``graph`` failed with ``exc``: drop every session, record
        the failure (``Attempt.mid_session``) and make the next candidate current. Nothing happens
        when ``cand`` is no longer current (another stream's failure moved on already).

        Raises:
            ProviderError: ``cand`` is the last provider; its sessions are dropped all the same.
        """
        with self._lock:
            if self._current is not cand:
                return
            reason = f"{graph.name} failed while running: {_one_line(exc)}"
            self._drop_sessions()
            if len(self._plan) == 1:
                logger.error("execution provider %s failed (%s); no provider is left", cand.label, reason)
                raise ProviderError(f"{cand.label} failed while running {graph.name} and no other execution "
                                    f"provider is left: {_one_line(exc)}; restart captioning") from exc
            self._fallbacks.append(Attempt(cand.label, True, reason, mid_session=True))
            self._plan.pop(0)
            self._advance()
            logger.warning("execution provider %s failed mid-session (%s); continuing on %s",
                           cand.label, reason, self._current.label)

    def loaded(self) -> list[Path]:
        """The graph file of every live session (a file once per fixed ``frames`` value)."""
        return [graph for graph, _frames in self._sessions]

    def close(self) -> None:
        """Drop every session (in reverse creation order, as shared EP contexts require)."""
        with self._lock:
            for key in reversed(list(self._sessions)):
                del self._sessions[key]
            self._generation += 1
            self._group_open = False

    def pack_changed(self, graph: Path) -> str:
        """Why ``graph`` (a file of the pack) or the weight file is no longer what the runtime opened
        ("" when both are as they were; a graph outside the pack is not watched)."""
        why = self.weights.changed()
        if why:
            return f"{self.weights.path.name} {why}"
        opened = self._graph_ids.get(graph)
        if opened is None:
            return ""
        try:
            st = graph.stat()
        except OSError:
            return f"{graph.name} is missing"
        if (st.st_size, st.st_mtime_ns) != opened:
            return f"{graph.name} was changed on disk after the model was opened"
        return ""

    # -- internals ----------------------------------------------------------------------------
    def _create(self, graph: Path, frames: int | None) -> ort.InferenceSession:
        requested = graph
        while True:
            cand = self._current
            # the CPU runs the pack's CPU variant of the graph where it has one (int8 beside the NPU's fp32)
            graph = self.pack.cpu_file(requested) if cand.ep_name == CPU_EP else requested
            inits = self.pack.graph_weights(graph)
            if inits is None:
                inits = _external_initializers(graph, self.pack.weights_file().name)
            t0 = time.perf_counter()
            fixed = frames if cand.static_shapes else None
            try:
                changed = self.pack_changed(graph)
                if changed:  # a pack deleted or rewritten under a running session: no provider's fault
                    raise ModelError(f"the model pack {self.pack.root.name} changed while captioning: {changed}; "
                                     "restart captioning (reinstall the model if it is damaged)")
                sess = self._open(graph, cand, inits, fixed)
            except ModelError:
                raise
            except Exception as exc:  # ORT raises its own Fail/InvalidGraph/... types
                changed = self.pack_changed(graph)
                if changed:
                    raise ModelError(f"the model pack {self.pack.root.name} changed while captioning: {changed}; "
                                     "restart captioning (reinstall the model if it is damaged)") from exc
                cache = self._cache_fails(cand, exc)
                if cache:  # the NPU is sound, its cache is not: compiled in memory instead of left for the CPU
                    logger.warning("the NPU's compile cache %s cannot be written (%s); %s compiles in memory, "
                                   "at every start", self.cache_dir, cache, cand.label)
                    self.cache_dir, self.cache_problem = None, cache
                    continue
                if len(self._plan) == 1:
                    raise ProviderError(f"{cand.label} cannot run {graph.name}: {_one_line(exc)}") from exc
                reason = f"{graph.name}: {_one_line(exc)}"
                self._fallbacks.append(Attempt(cand.label, True, reason))
                self._plan.pop(0)
                self._advance()
                logger.warning("execution provider %s failed (%s); falling back to %s",
                               cand.label, reason, self._current.label)
                continue
            ms = (time.perf_counter() - t0) * 1000.0
            name = graph.name if fixed is None else f"{graph.name}@{fixed}"
            self._session_ms[name] = ms
            self._opened_s += ms / 1000.0
            self._placement[name] = _placement(sess)
            logger.info("session %s on %s in %.0f ms: %s", name, cand.label, ms, self._placement[name])
            return sess

    def _cache_fails(self, cand: Candidate, exc: BaseException) -> str:
        """Why compiling into the EP-context cache, not the provider, failed opening a session on
        ``cand`` with ``exc``: the cache folder cannot be written, ONNX Runtime could not write a
        context file, or the cache's disk has no room for a model's contexts; "" otherwise (and
        where nothing is compiled into a cache)."""
        if not (cand.uses_ep_context and self.cache_dir is not None):
            return ""
        if isinstance(exc, OSError):
            return exc.strerror or str(exc)
        if "context cache file" in str(exc).lower():
            return _one_line(exc)
        free = free_bytes(self.cache_dir)
        return f"{free // 2**20} MB free on its disk" if free is not None and free < CONTEXTS_ROOM else ""

    def _options(self, cand: Candidate, frames: int | None = None) -> ort.SessionOptions:
        """Session options for ``cand`` (:func:`~captioner.engine.providers.session_options`);
        ``frames`` fixes a chunk graph's symbolic number of encoder frames (and then, the shapes being
        static, a beam step's cache rows)."""
        return session_options(cand, self.threads, frames, verbose=logger.isEnabledFor(logging.DEBUG),
                               beam_cache=self.beam_cache_rows() if frames is not None else None)

    def _open(self, graph: Path, cand: Candidate, inits: Sequence[WeightRef],
              frames: int | None) -> ort.InferenceSession:
        """A session for ``graph`` on ``cand`` (``frames`` fixed when given); on EP-context providers
        from (or into) the cache."""
        if not (cand.uses_ep_context and self.cache_dir is not None):
            so = self._options(cand, frames)
            if cand.uses_ep_context:
                so.add_session_config_entry("ep.share_ep_contexts", "1")
            return self._session(graph, so, cand, inits)
        if self._preparing or self._shared_now(cand):
            self._compile_ahead(cand)
        ctx = self._context_path(graph, cand, frames)
        if ctx.is_file():
            so = self._options(cand)  # a compiled context is static already
            so.add_session_config_entry("ep.share_ep_contexts", "1")  # one QNN backend for the pack
            try:
                # one at a time with the compiles of this process: the emulator's QNN backend crashed
                # (SIGSEGV in session creation) loading a context while another engine compiled
                with _COMPILING:
                    return self._session(ctx, so, cand, [])  # a compiled context holds its own weights
            except Exception as exc:
                if self._shared_now(cand):  # the child loaded it, this process did not: never again
                    why = f"it did not load in the app: {_one_line(exc)}"
                    npu_probe.write_verdict(self._verdict_path(cand), self._context_key(cand),
                                            npu_probe.Verdict(False, why))
                    _discard_contexts(ctx.parent)
                    return self._leave_shared(graph, cand, inits, frames, why)
                # a stale or half-written cache entry: compile again
                logger.warning("EP-context cache %s unusable (%s); recompiling", ctx, _one_line(exc))
                for stale in ctx.parent.glob(f"{ctx.stem}*"):
                    stale.unlink(missing_ok=True)
                self._prepared.discard(str(ctx.parent))
        with _compiling(ctx.parent):
            if not ctx.is_file():
                logger.warning("compiling %s%s for %s while captioning (not among the prepared graphs)", graph.name,
                               "" if frames is None else f" for {frames} frames", cand.label)
                so = self._options(cand, frames)
                part = _cleared_part(ctx)  # written whole, then renamed (as :meth:`_compile` does)
                so.add_session_config_entry("ep.context_enable", "1")
                so.add_session_config_entry("ep.context_file_path", str(part))
                so.add_session_config_entry("ep.context_embed_mode", "0")
                # One context binary per graph: a shared binary is only written by the session marked
                # ep.stop_share_ep_contexts, which lazy creation cannot know in advance.
                so.add_session_config_entry("ep.share_ep_contexts", "0")
                sess = self._session(graph, so, cand, inits)
                if part.is_file():
                    replace_file(part, ctx)
                return sess
        return self._open(graph, cand, inits, frames)  # another engine of this process compiled it meanwhile

    def _leave_shared(self, graph: Path, cand: Candidate, inits: Sequence[WeightRef], frames: int | None,
                      why: str) -> ort.InferenceSession:
        """Go on with one context per graph (the whole set compiled so) when the shared one cannot
        be used; the session of ``graph`` from it. Under the lock."""
        logger.warning("the shared NPU context of %s is not used (%s); compiling one context per graph",
                       self.pack.root.name, why)
        self.shared_context = False
        preparing, self._preparing = self._preparing, True
        try:
            return self._open(graph, cand, inits, frames)
        finally:
            self._preparing = preparing

    def _session(self, path: Path, so: ort.SessionOptions, cand: Candidate,
                 inits: Sequence[WeightRef]) -> ort.InferenceSession:
        for ref in inits:
            so.add_initializer(ref.name, self.weights.ortvalue(ref))
        providers = None if cand.uses_devices else cand.providers
        sess = ort.InferenceSession(str(path), sess_options=so, providers=providers)
        if cand.strict:
            foreign = {ep for ep in _placement(sess) if ep != cand.ep_name}
            if foreign:
                raise ProviderError(f"nodes placed on {', '.join(sorted(foreign))}")
        return sess

    def _context_key(self, cand: Candidate, shared: bool | None = None) -> dict[str, Any]:
        """What a compiled context depends on: pack, provider, options, versions, platform (and, for a
        shared context, the set of buckets compiled into it); ``shared``: that layout's key (default:
        the one used now)."""
        key: dict[str, Any] = {
            "pack": self.pack.pack_hash, "provider": cand.label, "options": dict(cand.options),
            "ort": ort.__version__, "plugin": cand.version, "platform": sys.platform,
        }
        if self._shared_now(cand) if shared is None else shared:
            key["shared"] = list(self.npu_buckets)
        return key

    def _context_dir(self, cand: Candidate, shared: bool | None = None) -> Path:
        """``<cache>/ep-context/<key>``, key = hash of :meth:`_context_key`."""
        key = self._context_key(cand, shared)
        digest = hashlib.sha256(json.dumps(key, sort_keys=True).encode()).hexdigest()[:20]
        assert self.cache_dir is not None  # only called with a cache dir
        return self.cache_dir / "ep-context" / digest

    def _verdict_path(self, cand: Candidate) -> Path:
        """Where the shared context's trial-load verdict is kept: beside it (:mod:`~captioner.engine.npu_probe`)."""
        return self._context_dir(cand) / "probe.json"

    def _context_path(self, graph: Path, cand: Candidate, frames: int | None = None) -> Path:
        """``<cache>/ep-context/<key>/<graph>[_f<frames>]_ctx.onnx`` (:meth:`_context_dir`)."""
        stem = graph.stem if frames is None else f"{graph.stem}_f{frames}"
        return self._context_dir(cand) / f"{stem}_ctx.onnx"


# what ``msvcrt.locking`` raises once its ten one-second tries found the bytes locked by another
_HELD_ERRNOS = frozenset({errno.EDEADLOCK, errno.EACCES})


@contextlib.contextmanager
def _compiling(folder: Path) -> Iterator[None]:
    """Hold the right to compile into the EP-context cache ``folder`` (created): :data:`_COMPILING`
    in this process, and an OS lock on ``<folder>.lock`` beside it against other processes (released
    by the OS if the holder dies: nothing stale to clean; beside the folder, whose files a shared
    layout's regeneration deletes)."""
    with _COMPILING:
        folder.mkdir(parents=True, exist_ok=True)
        with open(folder.with_name(folder.name + ".lock"), "a+b") as f:
            _lock(f)
            try:
                yield
            finally:
                _unlock(f)


def _lock(f: IO[bytes]) -> None:
    """Block until this process holds the exclusive lock of the open file ``f``."""
    if sys.platform == "win32":
        import msvcrt

        f.seek(0)
        while True:
            try:
                msvcrt.locking(f.fileno(), msvcrt.LK_LOCK, 1)  # retries for ~10 s, then raises
                return
            except OSError as exc:
                if exc.errno not in _HELD_ERRNOS:
                    raise  # not a lock someone holds: waiting on would never end
                # another process compiles a graph for longer: wait on
    else:
        import fcntl

        fcntl.flock(f.fileno(), fcntl.LOCK_EX)


def _unlock(f: IO[bytes]) -> None:
    """Release the lock :func:`_lock` took."""
    if sys.platform == "win32":
        import msvcrt

        f.seek(0)
        msvcrt.locking(f.fileno(), msvcrt.LK_UNLCK, 1)
    else:
        import fcntl

        fcntl.flock(f.fileno(), fcntl.LOCK_UN)


def _cleared_part(ctx: Path) -> Path:
    """The temporary name ``ctx`` is compiled under (``<graph>_ctx.part.onnx``), cleared of what a
    process killed mid-compile left there (ONNX Runtime will not write a context over a file): such a
    process leaves no ``*_ctx.onnx`` that the cache would count as compiled and a round fail to load."""
    part = ctx.with_name(f"{ctx.stem}.part{ctx.suffix}")
    for left in ctx.parent.glob(f"{part.stem}*"):  # the context and its ``_qnn.bin``
        left.unlink(missing_ok=True)
    return part


def _discard_contexts(folder: Path) -> None:
    """Delete the shared context in ``folder`` that does not load here, keeping its verdict."""
    for old in folder.iterdir():
        if old.name != "probe.json":
            if old.is_dir():
                shutil.rmtree(old, ignore_errors=True)
            else:
                old.unlink(missing_ok=True)


def _unique_source(graph: Path, frames: int | None, folder: Path, weights: Path) -> Path:
    """A copy of ``graph`` named for ``frames`` in ``folder``, beside a link to the pack's weight file
    (ONNX Runtime resolves external data next to the graph, and names a compiled QNN graph after its
    model's path: the same file compiled for two frame counts would give two graphs of one name)."""
    folder.mkdir(parents=True, exist_ok=True)
    link = folder / weights.name
    if not link.exists():
        try:
            os.link(weights, link)  # no copy of the weights; NTFS allows it without privileges
        except OSError:
            os.symlink(weights, link)
    copy = folder / (graph.name if frames is None else f"{graph.stem}_f{frames}{graph.suffix}")
    copy.write_bytes(graph.read_bytes())  # a few kB: the weights are external
    return copy


def _fit_for_pack(cand: Candidate | Attempt, pack: Pack) -> Candidate | Attempt:
    """``cand``, or why it cannot run ``pack`` without trying: QNN has no int8 MatMul (MatMulInteger,
    DynamicQuantizeLinear) and no ONNX Runtime contrib attention, so a pack with int8 layers, an
    int8-ranked vocabulary or fused attention would fail there with ONNX Runtime's errors after a
    compile attempt."""
    if isinstance(cand, Attempt) or cand.ep_name != QNN_EP:
        return cand
    int8 = [what for what, kind in (("linear layers", pack.layers), ("vocabulary projection", pack.vocab))
            if kind == "int8"]
    cpu_only = ([f"int8 {' and '.join(int8)}"] if int8 else []) + (["fused attention"] if pack.attention == "fused" else [])
    if not cpu_only:
        return cand
    return Attempt(cand.label, False, f"the pack {pack.root.name} has {' and '.join(cpu_only)}, which QNN cannot "
                                      "run; install an NPU pack (models install MODEL --layers fp32 --vocab fp32)")


def _identities(pack: Pack) -> dict[Path, tuple[int, int]]:
    """(size, mtime in ns) of every graph file of ``pack`` now, to notice a pack changed later."""
    ids = {}
    for graph in [*pack.graph_files(), *pack.cpu_graph_files()]:
        try:
            st = graph.stat()
        except OSError:
            continue  # a missing graph is reported when a session needs it
        ids[graph] = (st.st_size, st.st_mtime_ns)
    return ids


def _placement(sess: ort.InferenceSession) -> dict[str, int]:
    """EP name → number of nodes assigned, from the session's graph-assignment info."""
    counts: dict[str, int] = {}
    try:
        subgraphs = sess.get_provider_graph_assignment_info()
    except Exception:  # older ORT or the option not recorded
        return {p: -1 for p in sess.get_providers()[:1]}
    for sub in subgraphs:
        counts[sub.ep_name] = counts.get(sub.ep_name, 0) + len(sub.get_nodes())
    return counts


def _one_line(exc: BaseException) -> str:
    """The first line of an exception message, without ORT's ``[ONNXRuntimeError] : N : X :`` prefix."""
    text = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
    if text.startswith("[ONNXRuntimeError]"):
        text = text.split(":", 3)[-1].strip()
    return text[:300]
