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

__all__ = ["CPU_EP", "QNN_EP", "Attempt", "Candidate", "Host", "plan_candidates", "qnn_devices"]

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
