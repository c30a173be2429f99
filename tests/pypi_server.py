"""A local stand-in for PyPI: its JSON API and file downloads over HTTP on 127.0.0.1, and wheels built in tests.

:class:`LocalPyPI` answers ``/pypi/<project>/<version>/json`` like pypi.org (file URLs relative to the
JSON, as some mirrors give them) and serves the files with HTTP ``Range`` support. A test can make
it cut a file's first download short (``cut``: the connection closes after that many bytes, with the
full Content-Length announced), list a wrong sha256, or answer 404 on the per-version endpoint only
(as the mirror this project's machines use does). Every file request is recorded with its Range.
"""

from __future__ import annotations

import hashlib
import json
import threading
import zipfile
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path


def make_wheel(path: Path, members: dict[str, Path | bytes]) -> Path:
    """A wheel (zip, stored) at ``path`` holding ``members`` (name in the wheel → file or bytes)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with zipfile.ZipFile(path, "w", compression=zipfile.ZIP_STORED) as zf:
        for name, content in members.items():
            if isinstance(content, Path):
                zf.write(content, name)
            else:
                zf.writestr(name, content)
    return path


def sha256_of(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as fh:
        for block in iter(lambda: fh.read(1 << 22), b""):
            digest.update(block)
    return digest.hexdigest()


@dataclass
class LocalPyPI:
    """Serves ``packages`` ((project, version) → wheel path) until :meth:`close`."""

    packages: dict[tuple[str, str], Path] = field(default_factory=dict)
    cut: dict[str, int] = field(default_factory=dict)  # file name -> bytes sent before the first download dies
    wrong_sha: set[str] = field(default_factory=set)  # file names listed with a wrong sha256
    versioned_json: bool = True  # False: the per-version endpoint answers 404 (use <project>/json)
    requests: list[tuple[str, str | None]] = field(default_factory=list)  # (path, Range header)

    def __post_init__(self) -> None:
        self._sha: dict[Path, str] = {}
        server = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args) -> None:  # quiet
                pass

            def do_GET(self) -> None:
                server.requests.append((self.path, self.headers.get("Range")))
                parts = self.path.strip("/").split("/")
                if parts[0] == "pypi":
                    server._json(self, parts[1:])
                elif parts[0] == "files" and len(parts) == 2:
                    server._file(self, parts[1])
                else:
                    self.send_error(404)

        self._httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._thread = threading.Thread(target=self._httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
        self._thread.start()

    @property
    def url(self) -> str:
        """The index URL to put in ``CAPTIONER_PYPI_URL``."""
        return f"http://127.0.0.1:{self._httpd.server_address[1]}/pypi"

    def close(self) -> None:
        self._httpd.shutdown()
        self._httpd.server_close()

    def sha(self, path: Path) -> str:
        if path not in self._sha:
            self._sha[path] = sha256_of(path)
        return self._sha[path]

    def _entry(self, wheel: Path) -> dict:
        sha = "0" * 64 if wheel.name in self.wrong_sha else self.sha(wheel)
        return {"packagetype": "bdist_wheel", "filename": wheel.name, "url": f"../../../files/{wheel.name}",
                "size": wheel.stat().st_size, "digests": {"sha256": sha}}

    def _json(self, h: BaseHTTPRequestHandler, parts: list[str]) -> None:
        if len(parts) == 3 and parts[2] == "json" and self.versioned_json and (parts[0], parts[1]) in self.packages:
            body = {"urls": [self._entry(self.packages[(parts[0], parts[1])])]}
        elif len(parts) == 2 and parts[1] == "json" and any(p == parts[0] for p, _ in self.packages):
            releases = {v: [self._entry(w)] for (p, v), w in self.packages.items() if p == parts[0]}
            body = {"releases": releases}
        else:
            h.send_error(404)
            return
        data = json.dumps(body).encode()
        h.send_response(200)
        h.send_header("Content-Type", "application/json")
        h.send_header("Content-Length", str(len(data)))
        h.end_headers()
        h.wfile.write(data)

    def _file(self, h: BaseHTTPRequestHandler, name: str) -> None:
        wheel = next((w for w in self.packages.values() if w.name == name), None)
        if wheel is None:
            h.send_error(404)
            return
        data = wheel.read_bytes()
        start = 0
        rng = h.headers.get("Range")
        if rng and rng.startswith("bytes=") and rng.endswith("-"):
            start = int(rng[len("bytes="):-1])
        body = data[start:]
        h.send_response(206 if start else 200)
        if start:
            h.send_header("Content-Range", f"bytes {start}-{len(data) - 1}/{len(data)}")
        h.send_header("Content-Length", str(len(body)))
        h.send_header("Accept-Ranges", "bytes")
        h.end_headers()
        cut = self.cut.pop(name, None)
        if cut is not None:
            h.wfile.write(body[:cut])
            h.wfile.flush()
            h.close_connection = True
            return
        h.wfile.write(body)
