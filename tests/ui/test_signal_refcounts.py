"""The Qt binding keeps Python's reference counts: a live session emits a signal per round and per
level update, for hours (PySide6 6.12.0 dropped a reference to True in every ``Signal.emit``, so the
interpreter aborted after a few thousand signals; pyproject.toml excludes that version)."""

from __future__ import annotations

import gc
import sys

from PySide6.QtCore import QObject, Signal, Slot


class _Emitter(QObject):
    update = Signal(object)
    level = Signal(str, float)


class _Receiver(QObject):
    def __init__(self) -> None:
        super().__init__()
        self.got = 0

    @Slot(object)
    def on_update(self, _value: object) -> None:
        self.got += 1


def test_emitting_signals_keeps_the_reference_counts_of_true_and_false(qapp) -> None:
    emitter, receiver = _Emitter(), _Receiver()
    emitter.update.connect(receiver.on_update)
    gc.collect()
    before = sys.getrefcount(True), sys.getrefcount(False)
    for i in range(500):
        emitter.update.emit(i)
        emitter.level.emit("system", 0.5)  # no receiver
    gc.collect()
    after = sys.getrefcount(True), sys.getrefcount(False)
    assert receiver.got == 500
    assert after[0] >= before[0] - 50 and after[1] >= before[1] - 50, f"True/False references {before} → {after}"
