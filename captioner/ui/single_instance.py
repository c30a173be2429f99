"""One app per user and data folder: a second ``captioner`` asks the running one to show itself.

A :class:`QLocalServer` listens on a name derived from the data directory (so test instances
with their own ``CAPTIONER_HOME`` never meet the user's app). A second start connects, sends
``show`` and exits; the first emits :attr:`SingleInstance.message` with the command.
"""

from __future__ import annotations

import hashlib
import logging
from pathlib import Path

from PySide6.QtCore import QObject, Signal
from PySide6.QtNetwork import QLocalServer, QLocalSocket

__all__ = ["CONNECT_TIMEOUT_MS", "SingleInstance", "server_name"]

logger = logging.getLogger(__name__)

CONNECT_TIMEOUT_MS = 500
COMMANDS = ("show", "quit", "toggle", "pause", "mark")  # what a client may ask; anything else is ignored
# a command is one line: its word, then for "mark" an optional note ("mark decision taken")


def server_name(data_dir: Path) -> str:
    """The local-socket name for the app using ``data_dir`` (short: socket paths are limited)."""
    digest = hashlib.sha256(str(Path(data_dir).resolve()).encode()).hexdigest()[:16]
    return f"captioner-{digest}"


def send(name: str, command: str = "show") -> bool:
    """Send ``command`` to a running instance; True when one was there and took it."""
    sock = QLocalSocket()
    sock.connectToServer(name)
    if not sock.waitForConnected(CONNECT_TIMEOUT_MS):
        return False
    sock.write(f"{command}\n".encode())
    sock.flush()  # usually writes at once; wait only for what is still buffered
    ok = sock.bytesToWrite() == 0 or sock.waitForBytesWritten(CONNECT_TIMEOUT_MS)
    sock.disconnectFromServer()
    return ok


class SingleInstance(QObject):
    """The running instance's end: listens and emits each command it receives.

    Signals:
        message(str): a command from another start (``"show"``, ``"quit"``, ``"mark a note"``…).
    """

    message = Signal(str)

    def __init__(self, name: str, parent: QObject | None = None) -> None:
        super().__init__(parent)
        self.name = name
        self._server = QLocalServer(self)
        self._server.setSocketOptions(QLocalServer.SocketOption.UserAccessOption)
        self._server.newConnection.connect(self._on_server_new_connection)

    def listen(self) -> bool:
        """Start listening; clears a stale socket left by a crashed instance. False on failure."""
        if self._server.listen(self.name):
            return True
        QLocalServer.removeServer(self.name)  # nobody answered send(): the socket file is stale
        ok = self._server.listen(self.name)
        if not ok:
            logger.warning("single-instance socket %s: %s", self.name, self._server.errorString())
        return ok

    def close(self) -> None:
        """Stop listening."""
        self._server.close()

    def _on_server_new_connection(self) -> None:
        while (sock := self._server.nextPendingConnection()) is not None:
            sock.readyRead.connect(lambda s=sock: self._on_socket_ready(s))
            sock.disconnected.connect(sock.deleteLater)
            if sock.bytesAvailable():
                self._on_socket_ready(sock)

    def _on_socket_ready(self, sock: QLocalSocket) -> None:
        while sock.canReadLine():
            command = bytes(sock.readLine().data()).decode(errors="replace").strip()
            if command.partition(" ")[0] in COMMANDS:
                self.message.emit(command)
            else:
                logger.debug("single-instance: ignored %r", command)
