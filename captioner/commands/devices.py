"""``captioner devices``: input devices, system-audio (loopback / monitor) sources and defaults."""

from __future__ import annotations

import argparse

from captioner.audio import list_devices
from captioner.storage.paths import AppPaths

__all__ = ["register", "run"]


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add the ``devices`` subcommand."""
    p = subparsers.add_parser(
        "devices",
        help="list microphones, system-audio sources and the defaults",
        description="List the input devices (for --device), the system-audio sources "
        "(PulseAudio/PipeWire monitors on Linux, WASAPI loopback on Windows) and the defaults "
        "(marked with *).",
    )
    p.set_defaults(func=run)


def run(args: argparse.Namespace, paths: AppPaths) -> int:
    """Print the device report; exit code 0 even when a kind of source is unavailable."""
    report = list_devices()
    print("Microphones (captioner listen --source mic --device NAME|INDEX):")
    if not report.inputs:
        print("  (none)")
    for d in report.inputs:
        mark = "*" if d.is_default else " "
        print(f"{mark} {d.index:3d} {d.name}  [{d.host_api}, {d.channels} ch, {d.rate} Hz]")
    print("System audio (captioner listen --source system):")
    if not report.system:
        print("  (none)")
    for d in report.system:
        mark = "*" if d.is_default else " "
        print(f"{mark}     {d.name}  [{d.host_api}, {d.rate} Hz]")
    for note in report.notes:
        print(f"note: {note}")
    return 0
