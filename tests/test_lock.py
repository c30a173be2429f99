"""The locked dependency sets in requirements/ (scripts/lock) agree with pyproject.toml's ranges and
with each other, carry a hash for every package, and are what this environment really runs.

A change to pyproject.toml without a refresh of the locks fails here, not on a fresh machine next
month; so does a test environment that drifted from the lock (a package installed by hand).
"""

from __future__ import annotations

import re
import sys
import tomllib
from importlib import metadata
from pathlib import Path

import pytest
from packaging.markers import default_environment
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
from packaging.version import Version

REPO = Path(__file__).resolve().parents[1]
LOCKS = REPO / "requirements"
PROJECT = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]

LINUX_311 = {**default_environment(), "sys_platform": "linux", "platform_machine": "x86_64",
             "platform_system": "Linux", "os_name": "posix", "python_version": "3.11",
             "python_full_version": "3.11.7", "implementation_name": "cpython"}
WIN_ARM64_312 = {**LINUX_311, "sys_platform": "win32", "platform_machine": "ARM64", "platform_system": "Windows",
                 "os_name": "nt", "python_version": "3.12", "python_full_version": "3.12.10"}

_ENTRY = re.compile(r"^([A-Za-z0-9][A-Za-z0-9._-]*)==(\S+?)(?:\s*;\s*(.+?))?\s*\\?$")


def read_lock(name: str) -> list[tuple[Requirement, list[str]]]:
    """Each locked entry of ``requirements/<name>`` (``pkg==version ; marker``) with its sha256 hashes."""
    entries: list[tuple[Requirement, list[str]]] = []
    for line in (LOCKS / name).read_text().splitlines():
        if m := _ENTRY.match(line):
            marker = f" ; {m.group(3)}" if m.group(3) else ""
            entries.append((Requirement(f"{m.group(1)}=={m.group(2)}{marker}"), []))
        elif (h := line.strip()).startswith("--hash=sha256:"):
            assert entries, f"{name}: a hash before any package"
            entries[-1][1].append(h.removeprefix("--hash=sha256:").rstrip(" \\"))
    assert entries, f"{name} locks nothing"
    return entries


def versions_for(name: str, env: dict[str, str]) -> dict[str, Version]:
    """canonical name -> locked version of the entries of ``name`` whose markers hold in ``env``."""
    out: dict[str, Version] = {}
    for req, _hashes in read_lock(name):
        if req.marker is None or req.marker.evaluate(env):
            key = canonicalize_name(req.name)
            assert key not in out, f"{name}: {req.name} locked twice for one platform"
            out[key] = Version(next(iter(req.specifier)).version)
    return out


def project_requirements(*extras: str) -> list[Requirement]:
    reqs = [Requirement(r) for r in PROJECT["dependencies"]]
    for extra in extras:
        reqs += [Requirement(r) for r in PROJECT["optional-dependencies"][extra]]
    return reqs


@pytest.mark.parametrize("lock", ["dev.txt", "app.txt", "windows-build.txt"])
def test_every_locked_package_is_pinned_with_a_hash(lock: str) -> None:
    for req, hashes in read_lock(lock):
        assert hashes and all(re.fullmatch(r"[0-9a-f]{64}", h) for h in hashes), f"{lock}: {req} has no sha256"


@pytest.mark.parametrize(("lock", "env", "extras"), [
    ("dev.txt", LINUX_311, ("dev", "qnn")),
    ("app.txt", LINUX_311, ()),
    ("app.txt", WIN_ARM64_312, ()),
    ("windows-build.txt", WIN_ARM64_312, ()),
])
def test_the_lock_satisfies_pyproject(lock: str, env: dict[str, str], extras: tuple[str, ...]) -> None:
    """Every requirement of pyproject.toml that applies on the lock's platform is locked, in range."""
    locked = versions_for(lock, env)
    for req in project_requirements(*extras):
        if req.marker is not None and not req.marker.evaluate(env):
            continue
        key = canonicalize_name(req.name)
        assert key in locked, f"{lock}: {req} is not locked (run scripts/lock)"
        assert req.specifier.contains(locked[key], prereleases=True), \
            f"{lock}: {req.name} {locked[key]} is outside pyproject.toml's {req.specifier} (run scripts/lock)"


@pytest.mark.parametrize(("lock", "env"), [("app.txt", LINUX_311), ("app.txt", WIN_ARM64_312),
                                           ("windows-build.txt", WIN_ARM64_312)])
def test_the_app_ships_the_versions_the_tests_ran(lock: str, env: dict[str, str]) -> None:
    """A package in both the app's set and the dev set has one version: what we test is what we ship."""
    dev = versions_for("dev.txt", LINUX_311)
    app = versions_for(lock, env)
    differ = {k: (str(v), str(dev[k])) for k, v in app.items() if k in dev and dev[k] != v}
    assert not differ, f"{lock} vs dev.txt: {differ}"


def test_this_environment_runs_the_dev_lock() -> None:
    """The interpreter running the tests has exactly the dev lock's versions (scripts/setup --dev)."""
    if sys.platform != "linux" or sys.version_info[:2] != (3, 11):
        pytest.skip("requirements/dev.txt is locked for Linux x86-64, Python 3.11")
    wrong = {}
    for key, version in versions_for("dev.txt", LINUX_311).items():
        try:
            have = Version(metadata.version(key))
        except metadata.PackageNotFoundError:
            wrong[key] = (str(version), "not installed")
            continue
        if have != version:
            wrong[key] = (str(version), str(have))
    assert not wrong, f"locked vs installed: {wrong}"
