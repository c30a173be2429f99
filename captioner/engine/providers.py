"""Which execution providers exist on this machine, in the order the runtime tries them.

Kept apart from ``runtime.py`` so that the decision can be tested without ONNX graphs: a
:class:`Host` and an availability probe are injectable. See ``runtime.py`` for the policy.
"""

from __future__ import annotations

import logging
import os
import platform
import sys
import threading
from collections.abc import Mapping
from dataclasses import dataclass, field

import onnxruntime as ort

from captioner.core import Provider
from captioner.models.pack import BEAM_CACHE_DIM, FRAMES_DIM

__all__ = ["CPU_EP", "QNN_EP", "Attempt", "Candidate", "Host", "plan_candidates", "qnn_devices", "session_options"]

logger = logging.getLogger(__name__)

QNN_EP = "QNNExecutionProvider"
DML_EP = "DmlExecutionProvider"
CPU_EP = "CPUExecutionProvider"
_ORDER = ("QNN-HTP", "QNN-GPU", "DirectML", "CPU")
_START = {"auto": 0, "qnn": 0, "gpu": 1, "cpu": 3}
_register_lock = threading.Lock()


@dataclass(frozen=True, slots=True)
class Attempt:
    """A provider that is not used, and why.

    Attributes:
        label: the provider (``"QNN-HTP"``, ...).
        failed: True if a session was tried and failed; False if it was skipped without trying.
        reason: one line for the user.
        mid_session: the provider ran, then a run failed (a lost device): the runtime moved on to the
            next provider in the middle of a session (the app tells the user once).
    """

    label: str
    failed: bool
    reason: str
    mid_session: bool = False


@dataclass(frozen=True, slots=True)
class Host:
    """The facts about this machine that decide the providers.

    Attributes:
        system: ``sys.platform`` (``"win32"``, ``"linux"``, ``"darwin"``).
        machine: normalised CPU architecture (``"x86_64"``, ``"arm64"``).
    """

    system: str
    machine: str

    @classmethod
    def current(cls) -> Host:
        """This machine."""
        machine = platform.machine().lower()
        machine = {"amd64": "x86_64", "aarch64": "arm64"}.get(machine, machine)
        return cls(sys.platform, machine)

    @property
    def snapdragon_windows(self) -> bool:
        """Windows on ARM64: the only platform with a real Hexagon NPU and Adreno QNN GPU backend."""
        return self.system == "win32" and self.machine == "arm64"

    @property
    def qnn_emulated(self) -> bool:
        """Linux x86-64, where the QNN HTP backend is Qualcomm's (slow) x86 emulator."""
        return self.system.startswith("linux") and self.machine == "x86_64"


@dataclass(frozen=True, slots=True)
class Candidate:
    """A provider the runtime can create sessions with.

    Attributes:
        label: ``"QNN-HTP"``, ``"QNN-GPU"``, ``"DirectML"`` or ``"CPU"``.
        ep_name: ONNX Runtime's name of the execution provider.
        options: provider options.
        devices: plugin EP devices (``ort.get_ep_devices()``) for ``add_provider_for_devices``.
        version: plugin version (part of the EP-context cache key).
        strict: every node must run on this EP (``session.disable_cpu_ep_fallback``), checked again
            from the placement after creation.
        uses_ep_context: compile to an EP context and cache it.
        recovers: after a run error, re-create this provider's sessions and run again once before
            giving it up (Qualcomm documents a sub-system restart of the NPU, after which re-created
            QNN resources work again); see ``Runtime.run``.
    """

    label: str
    ep_name: str
    options: Mapping[str, str] = field(default_factory=dict)
    devices: tuple = ()
    version: str = ""
    strict: bool = False
    uses_ep_context: bool = False
    recovers: bool = False

    @property
    def static_shapes(self) -> bool:
        """Sessions need every dimension fixed (QNN rejects symbolic ones; DirectML plans better):
        every provider but the CPU."""
        return self.ep_name != CPU_EP

    @property
    def uses_devices(self) -> bool:
        """A plugin EP added through its devices rather than by name."""
        return bool(self.devices)

    @property
    def providers(self) -> list[str]:
        """The ``providers`` list for classic (non-plugin) EPs."""
        return [self.ep_name] if self.ep_name == CPU_EP else [self.ep_name, CPU_EP]

    def configure(self, so: ort.SessionOptions) -> None:
        """Add this provider to session options ``so``."""
        if self.devices:
            so.add_provider_for_devices(list(self.devices), dict(self.options))
        if self.strict:
            so.add_session_config_entry("session.disable_cpu_ep_fallback", "1")


def session_options(cand: Candidate, threads: int, frames: int | None = None, *,
                    verbose: bool = False, beam_cache: int | None = None) -> ort.SessionOptions:
    """Session options for ``cand`` (the one place they are decided; the runtime and the NPU's trial
    load in a child process both use them); ``frames`` fixes a chunk graph's symbolic number of
    encoder frames, ``beam_cache`` a beam step's cache rows; ``verbose``: ONNX Runtime's own
    warnings on stderr."""
    so = ort.SessionOptions()
    if frames is not None:
        so.add_free_dimension_override_by_name(FRAMES_DIM, frames)
    if beam_cache is not None:
        so.add_free_dimension_override_by_name(BEAM_CACHE_DIM, beam_cache)
    so.intra_op_num_threads = threads
    so.inter_op_num_threads = 1
    so.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    # ORT logs to stderr, not through our logger; the failures we act on are recorded as exceptions
    so.log_severity_level = 3 if verbose else 4
    so.add_session_config_entry("session.record_ep_graph_assignment_info", "1")
    # Prepacking copies shared MatMul/Gemm weights into every session (runtime.py's module docstring).
    so.add_session_config_entry("session.disable_prepacking", "1")
    # No busy-waiting: a round runs a chain of different sessions, each with its own pool, and a
    # pool that spins after its run steals the cores from the next session's (captioner bench,
    # whisper-base, 2 cores: 30 positions 438 -> 281 ms, one graph per token 949 -> 292 ms).
    so.add_session_config_entry("session.intra_op.allow_spinning", "0")
    # No per-session memory arena: an arena keeps its peak forever and extends in doubling steps,
    # and a pack has dozens of sessions (the 30 s encoder: 72 MB per attention map; a 30 s
    # re-inference touches 44 chunk graphs). whisper-base, 2 s step, 300 s: RSS grew 522 -> 716 MB
    # with arenas, 455 -> 515 MB without; decoding is 0-5 % slower (captioner bench).
    so.enable_cpu_mem_arena = False
    if cand.label == "DirectML":
        so.enable_mem_pattern = False  # DirectML rejects memory patterns (ECOSYSTEM.md §3)
    cand.configure(so)
    return so


def qnn_devices() -> tuple[tuple, str, str]:
    """Register the ``onnxruntime_qnn`` plugin once and return (devices, version, reason-if-none).

    On Windows ARM64 ``ADSP_LIBRARY_PATH`` is pointed at the plugin directory first, because the
    FastRPC loader looks for the DSP skeletons there, not next to the DLL (ECOSYSTEM.md §2).
    """
    try:
        import onnxruntime_qnn
    except ImportError:
        return (), "", "onnxruntime-qnn is not installed"
    with _register_lock:
        devices = tuple(d for d in ort.get_ep_devices() if d.ep_name == QNN_EP)
        if not devices:
            lib = onnxruntime_qnn.get_library_path()
            if Host.current().system == "win32":
                plugin_dir = os.path.dirname(lib)
                current = os.environ.get("ADSP_LIBRARY_PATH", "")
                if plugin_dir not in current.split(";"):
                    os.environ["ADSP_LIBRARY_PATH"] = ";".join(p for p in (plugin_dir, current) if p)
            try:
                ort.register_execution_provider_library(QNN_EP, lib)
            except Exception as exc:  # ORT raises a generic Fail for a plugin that will not load
                return (), "", f"the QNN plugin did not load: {str(exc).strip()[:200]}"
            devices = tuple(d for d in ort.get_ep_devices() if d.ep_name == QNN_EP)
    version = str(getattr(onnxruntime_qnn, "__version__", "")) or (devices[0].ep_metadata.get("version", "")
                                                                    if devices else "")
    return devices, version, "" if devices else "the QNN plugin reports no device"


def plan_candidates(requested: Provider, host: Host | None = None,
                    probe=None) -> list[Candidate | Attempt]:
    """The providers for ``requested`` in the order to try them: a :class:`Candidate` for each usable
    one, an :class:`Attempt` (with the reason) for each one that is not. The last item is the CPU.

    ``"auto"`` starts at QNN HTP; a forced provider starts at itself and falls back along the same
    order (``"qnn"`` → QNN GPU → DirectML → CPU, ``"gpu"`` → DirectML → CPU). CPU is always last.

    Args:
        requested: one of :data:`~captioner.core.PROVIDERS`.
        host: the machine (default: this one).
        probe: callable returning ``(qnn_devices, qnn_version, reason, available_providers)``; for
            tests. Default: register the QNN plugin and ask ONNX Runtime.
    """
    host = host or Host.current()
    if probe is None:
        devices, version, reason = qnn_devices()
        available = ort.get_available_providers()
    else:
        devices, version, reason, available = probe()
    plan: list[Candidate | Attempt] = []
    for label in _ORDER[_START[requested]:]:
        why = ""
        cand: Candidate | None = None
        if label == "QNN-HTP":
            if not devices:
                why = reason
            elif requested == "auto" and host.qnn_emulated:
                why = "on Linux x86-64 it is the slow HTP emulator; use --provider qnn to run it anyway"
            elif requested == "auto" and not host.snapdragon_windows:
                why = "no Snapdragon NPU on this platform"
            else:
                opts = {"backend_type": "htp", "htp_performance_mode": "burst"}
                if host.qnn_emulated:
                    # The emulator cannot detect a SoC and fails to finalise graphs (MEM_ALLOC) without
                    # one; emulate the Snapdragon X Elite (SoC 60, HTP v73). Real devices detect theirs.
                    opts.update(soc_model="60", htp_arch="73")
                cand = Candidate(label, QNN_EP, opts, devices, version, strict=True, uses_ep_context=True,
                                 recovers=True)
        elif label == "QNN-GPU":
            if not host.snapdragon_windows:
                why = "the QNN GPU backend needs a Snapdragon (Windows ARM64)"
            elif not devices:
                why = reason
            else:
                cand = Candidate(label, QNN_EP, {"backend_type": "gpu"}, devices, version, strict=True, recovers=True)
        elif label == "DirectML":
            if DML_EP not in available:
                why = "this onnxruntime build has no DirectML (onnxruntime-directml on Windows x64)"
            else:
                cand = Candidate(label, DML_EP)
        else:
            cand = Candidate(label, CPU_EP)
        plan.append(cand if cand is not None else Attempt(label, False, why))
    return plan
