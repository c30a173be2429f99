"""Global keyboard shortcuts: show/hide the caption bar and pause, from any application.

Where the platform allows it:

* **Windows**: ``RegisterHotKey`` on a thread of its own (no window: ``WM_HOTKEY`` arrives in that
  thread's message queue, read by ``GetMessageW``; ``PostThreadMessageW(WM_QUIT)`` ends it).
* **Linux on X11** (Qt's ``xcb`` platform): ``XGrabKey`` on the root window through a separate
  Xlib connection read on a thread of its own (with the Caps Lock and Num Lock variants grabbed
  too, so the shortcut works whatever their state).
* **Wayland, macOS**: an application cannot grab keys there. :meth:`GlobalHotkeys.start` says so;
  bind a desktop keyboard shortcut to ``captioner --toggle``, ``--pause`` or ``--mark`` instead (a
  second start hands those to the running app).

A shortcut another program already holds is reported, not fatal; the app works without them (the
bar's right-click menu and the tray have the same actions).
"""

from __future__ import annotations

import ctypes
import ctypes.util
import logging
import os
import select
import sys
import threading
from collections.abc import Mapping
from typing import ClassVar

from PySide6.QtCore import QObject, Signal
from PySide6.QtGui import QGuiApplication

__all__ = ["DEFAULT_HOTKEYS", "GlobalHotkeys", "parse_hotkey"]

logger = logging.getLogger(__name__)

# action -> shortcut; the actions are those of the tray / bar menu
DEFAULT_HOTKEYS: dict[str, str] = {"toggle": "Ctrl+Alt+C", "pause": "Ctrl+Alt+P", "mark": "Ctrl+Alt+M"}
_MODIFIERS = ("ctrl", "alt", "shift", "super")


def parse_hotkey(text: str) -> tuple[frozenset[str], str]:
    """``"Ctrl+Alt+C"`` -> ``({"ctrl", "alt"}, "c")``: modifiers and one key (a letter, a digit or F1-F24).

    Raises:
        ValueError: not a modifier set plus one such key.
    """
    parts = [p.strip().lower() for p in text.split("+")]
    mods, key = frozenset(parts[:-1]), parts[-1]
    valid_key = (len(key) == 1 and key.isalnum()) or (key[:1] == "f" and key[1:].isdigit() and 1 <= int(key[1:]) <= 24)
    if not mods <= set(_MODIFIERS) or not mods or not valid_key:
        raise ValueError(f"not a shortcut: {text!r} (use e.g. Ctrl+Alt+C: modifiers {', '.join(_MODIFIERS)} "
                         "and a letter, digit or F-key)")
    return mods, key


class GlobalHotkeys(QObject):
    """Listens for global shortcuts on a thread of its own and emits :attr:`triggered` with the action.

    Signals:
        triggered(str): the action of the shortcut pressed ("toggle", "pause", "mark").
    """

    triggered = Signal(str)

    def __init__(self, parent: QObject | None = None) -> None:
        super().__init__(parent)
        self._thread: threading.Thread | None = None
        self._stop = threading.Event()
        self._backend: _Backend | None = None
        self.active: dict[str, str] = {}  # action -> shortcut actually registered

    def start(self, bindings: Mapping[str, str] = DEFAULT_HOTKEYS) -> str:
        """Register ``bindings`` (action -> shortcut); returns "" or why some or all are not available."""
        if sys.platform == "win32":
            backend: _Backend = _WindowsBackend()
        elif sys.platform.startswith("linux") and QGuiApplication.platformName() == "xcb":
            backend = _X11Backend()
        else:
            return ("global shortcuts are not possible here (Wayland or macOS): bind a desktop keyboard "
                    "shortcut to 'captioner --toggle', 'captioner --pause' or 'captioner --mark' instead")
        parsed = {action: parse_hotkey(text) for action, text in bindings.items()}
        ready = threading.Event()
        problems: list[str] = []

        def run() -> None:
            try:
                problems.extend(backend.register(parsed))
            except OSError as exc:
                problems.append(f"global shortcuts are not available: {exc}")
                ready.set()
                return
            ready.set()
            backend.loop(self._stop, self.triggered.emit)

        self._backend = backend
        self._thread = threading.Thread(target=run, name="captioner-hotkeys", daemon=True)
        self._thread.start()
        ready.wait(5.0)
        self.active = {a: bindings[a] for a in backend.registered}
        return "; ".join(problems)

    def stop(self) -> None:
        """Unregister the shortcuts and end the thread."""
        if self._thread is None or self._backend is None:
            return
        self._stop.set()
        self._backend.wake()
        self._thread.join(5.0)
        self._thread = None


class _Backend:
    registered: list[str]

    def register(self, parsed: Mapping[str, tuple[frozenset[str], str]]) -> list[str]:
        """Grab the keys (on the listening thread); returns the problems, one per shortcut refused."""
        raise NotImplementedError

    def loop(self, stop: threading.Event, emit) -> None:
        """Emit each registered action pressed until ``stop`` is set; then release the keys."""
        raise NotImplementedError

    def wake(self) -> None:
        """Make :meth:`loop` notice ``stop`` now."""


class _WindowsBackend(_Backend):
    MOD: ClassVar[dict[str, int]] = {"alt": 0x1, "ctrl": 0x2, "shift": 0x4, "super": 0x8}
    MOD_NOREPEAT, WM_HOTKEY, WM_QUIT = 0x4000, 0x0312, 0x0012

    def __init__(self) -> None:
        self.registered = []
        self._thread_id = 0

    def register(self, parsed):
        from ctypes import wintypes  # noqa: F401 - Windows only

        user32, kernel32 = ctypes.windll.user32, ctypes.windll.kernel32  # type: ignore[attr-defined]
        self._thread_id = kernel32.GetCurrentThreadId()
        problems = []
        for i, (action, (mods, key)) in enumerate(parsed.items(), start=1):
            vk = ord(key.upper()) if len(key) == 1 else 0x70 + int(key[1:]) - 1  # VK_F1 = 0x70
            flags = sum(self.MOD[m] for m in mods) | self.MOD_NOREPEAT
            if user32.RegisterHotKey(None, i, flags, vk):
                self.registered.append(action)
            else:
                problems.append(f"the shortcut for {action} is taken by another program")
        return problems

    def loop(self, stop, emit):
        from ctypes import wintypes

        user32 = ctypes.windll.user32  # type: ignore[attr-defined]
        actions = dict(enumerate(self.registered, start=1))
        msg = wintypes.MSG()
        while not stop.is_set() and user32.GetMessageW(ctypes.byref(msg), None, 0, 0) > 0:
            if msg.message == self.WM_HOTKEY and msg.wParam in actions:
                emit(actions[msg.wParam])
        for i in actions:
            user32.UnregisterHotKey(None, i)

    def wake(self):
        ctypes.windll.user32.PostThreadMessageW(self._thread_id, self.WM_QUIT, 0, 0)  # type: ignore[attr-defined]


class _XKeyEvent(ctypes.Structure):
    _fields_ = [("type", ctypes.c_int), ("serial", ctypes.c_ulong), ("send_event", ctypes.c_int),
                ("display", ctypes.c_void_p), ("window", ctypes.c_ulong), ("root", ctypes.c_ulong),
                ("subwindow", ctypes.c_ulong), ("time", ctypes.c_ulong), ("x", ctypes.c_int), ("y", ctypes.c_int),
                ("x_root", ctypes.c_int), ("y_root", ctypes.c_int), ("state", ctypes.c_uint),
                ("keycode", ctypes.c_uint), ("same_screen", ctypes.c_int)]


class _XEvent(ctypes.Union):
    _fields_ = [("type", ctypes.c_int), ("xkey", _XKeyEvent), ("pad", ctypes.c_long * 24)]


_X_ERROR_HANDLER = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_void_p, ctypes.c_void_p)


class _X11Backend(_Backend):
    MOD: ClassVar[dict[str, int]] = {"shift": 1 << 0, "ctrl": 1 << 2, "alt": 1 << 3, "super": 1 << 6}
    LOCKS = (0, 1 << 1, 1 << 4, (1 << 1) | (1 << 4))  # none, Caps Lock, Num Lock, both
    KEY_PRESS, GRAB_MODE_ASYNC = 2, 1

    def __init__(self) -> None:
        self.registered = []
        self._keys: dict[tuple[int, int], str] = {}  # (keycode, modifiers) -> action
        self._dpy: int | None = None
        self._wake_r, self._wake_w = os.pipe()

    def register(self, parsed):
        name = ctypes.util.find_library("X11")
        if name is None:
            raise OSError("libX11 is not installed")
        x = ctypes.CDLL(name)
        x.XOpenDisplay.restype = ctypes.c_void_p
        x.XOpenDisplay.argtypes = [ctypes.c_char_p]
        x.XDefaultRootWindow.restype = ctypes.c_ulong
        x.XDefaultRootWindow.argtypes = [ctypes.c_void_p]
        x.XStringToKeysym.restype = ctypes.c_ulong
        x.XStringToKeysym.argtypes = [ctypes.c_char_p]
        x.XKeysymToKeycode.restype = ctypes.c_ubyte
        x.XKeysymToKeycode.argtypes = [ctypes.c_void_p, ctypes.c_ulong]
        x.XGrabKey.argtypes = [ctypes.c_void_p, ctypes.c_int, ctypes.c_uint, ctypes.c_ulong, ctypes.c_int,
                               ctypes.c_int, ctypes.c_int]
        x.XUngrabKey.argtypes = [ctypes.c_void_p, ctypes.c_int, ctypes.c_uint, ctypes.c_ulong]
        x.XSync.argtypes = [ctypes.c_void_p, ctypes.c_int]
        x.XSetErrorHandler.restype = ctypes.c_void_p
        x.XSetErrorHandler.argtypes = [ctypes.c_void_p]
        x.XPending.argtypes = [ctypes.c_void_p]
        x.XNextEvent.argtypes = [ctypes.c_void_p, ctypes.c_void_p]
        x.XConnectionNumber.argtypes = [ctypes.c_void_p]
        x.XCloseDisplay.argtypes = [ctypes.c_void_p]
        self._x = x
        dpy = x.XOpenDisplay(None)
        if not dpy:
            raise OSError("cannot open the X display")
        self._dpy, self._root = dpy, x.XDefaultRootWindow(dpy)
        failed: list[int] = []
        handler = _X_ERROR_HANDLER(lambda _d, _e: failed.append(1) or 0)  # BadAccess: someone holds the key
        problems = []
        for action, (mods, key) in parsed.items():
            keycode = x.XKeysymToKeycode(dpy, x.XStringToKeysym(key.encode() if len(key) == 1 else key.upper().encode()))
            mask = sum(self.MOD[m] for m in mods)
            previous = x.XSetErrorHandler(ctypes.cast(handler, ctypes.c_void_p))
            failed.clear()
            for lock in self.LOCKS:
                x.XGrabKey(dpy, keycode, mask | lock, self._root, 1, self.GRAB_MODE_ASYNC, self.GRAB_MODE_ASYNC)
            x.XSync(dpy, 0)
            x.XSetErrorHandler(previous)
            if failed or not keycode:
                for lock in self.LOCKS:
                    x.XUngrabKey(dpy, keycode, mask | lock, self._root)
                problems.append(f"the shortcut for {action} is taken by another program")
                continue
            self._keys[(keycode, mask)] = action
            self.registered.append(action)
        x.XSync(dpy, 0)
        return problems

    def loop(self, stop, emit):
        x, dpy = self._x, self._dpy
        fd = x.XConnectionNumber(dpy)
        event = _XEvent()
        relevant = sum(self.MOD.values())
        while not stop.is_set():
            while x.XPending(dpy):
                x.XNextEvent(dpy, ctypes.byref(event))
                if event.type == self.KEY_PRESS:
                    action = self._keys.get((event.xkey.keycode, event.xkey.state & relevant))
                    if action is not None:
                        emit(action)
            select.select([fd, self._wake_r], [], [], 1.0)
        for keycode, mask in self._keys:
            for lock in self.LOCKS:
                x.XUngrabKey(dpy, keycode, mask | lock, self._root)
        x.XCloseDisplay(dpy)
        _close_pipe(self._wake_r, self._wake_w)

    def wake(self):
        try:
            os.write(self._wake_w, b"x")
        except OSError:
            logger.debug("the hotkey thread's wake-up pipe is closed", exc_info=True)


def _close_pipe(*fds: int) -> None:
    for fd in fds:
        try:
            os.close(fd)
        except OSError:
            logger.debug("closing the wake-up pipe", exc_info=True)
