"""``captioner models ...`` through the real CLI: bad input, install from a local checkpoint, list, verify, remove."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from captioner import cli
from captioner.errors import ModelError, PackBuildError
from captioner.models.build import BuildOptions
from captioner.models.install import install_pack, list_packs
from captioner.models.pack import Pack
from captioner.storage.paths import AppPaths

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture
def paths(tmp_path) -> AppPaths:
    return AppPaths.default(tmp_path / "home")


def run_cli(*args: str, home: Path) -> subprocess.CompletedProcess:
    """``python -m captioner ARGS`` in a subprocess with CAPTIONER_HOME=home."""
    env = {**os.environ, "CAPTIONER_HOME": str(home), "PYTHONPATH": str(REPO)}
    return subprocess.run([sys.executable, "-m", "captioner", *args], capture_output=True, text=True,
                          env=env, cwd=REPO, timeout=300)


def one_line_error(proc: subprocess.CompletedProcess) -> str:
    assert proc.returncode != 0
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert len(lines) == 1, proc.stderr
    assert lines[0].startswith("captioner: error: ")
    assert "Traceback" not in proc.stderr
    return lines[0]


def copy_checkpoint(src: Path, dst: Path) -> Path:
    shutil.copytree(src, dst)
    return dst


def test_missing_safetensors_is_a_one_line_error(tiny_checkpoint, tmp_path):
    ckpt = copy_checkpoint(tiny_checkpoint, tmp_path / "ckpt")
    (ckpt / "model.safetensors").unlink()
    proc = run_cli("models", "build", "--checkpoint", str(ckpt), "--out", str(tmp_path / "pack"), home=tmp_path)
    assert "model.safetensors" in one_line_error(proc)
    assert not (tmp_path / "pack").exists()
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".pack")] == []


def test_truncated_weights_is_a_one_line_error(tiny_checkpoint, tmp_path):
    ckpt = copy_checkpoint(tiny_checkpoint, tmp_path / "ckpt")
    weights = ckpt / "model.safetensors"
    with open(weights, "r+b") as fh:
        fh.truncate(weights.stat().st_size // 2)
    proc = run_cli("models", "build", "--checkpoint", str(ckpt), "--out", str(tmp_path / "pack"), home=tmp_path)
    line = one_line_error(proc)
    assert "model.safetensors" in line and "truncated" in line
    assert not (tmp_path / "pack").exists()


def test_unknown_architecture_is_a_one_line_error(tiny_checkpoint, tmp_path):
    ckpt = copy_checkpoint(tiny_checkpoint, tmp_path / "ckpt")
    config = json.loads((ckpt / "config.json").read_text())
    config["model_type"] = "wav2vec2"
    (ckpt / "config.json").write_text(json.dumps(config))
    proc = run_cli("models", "build", "--checkpoint", str(ckpt), "--out", str(tmp_path / "pack"), home=tmp_path)
    line = one_line_error(proc)
    assert "config.json" in line and "wav2vec2" in line


def test_existing_output_is_a_one_line_error_and_is_left_alone(tiny_checkpoint, tmp_path):
    out = tmp_path / "pack"
    out.mkdir()
    (out / "keep.txt").write_text("mine")
    proc = run_cli("models", "build", "--checkpoint", str(tiny_checkpoint), "--out", str(out), home=tmp_path)
    assert "already exists" in one_line_error(proc)
    assert (out / "keep.txt").read_text() == "mine"


@pytest.mark.parametrize("damage", ["bad_json_config", "no_tokenizer", "bad_header"])
def test_malformed_checkpoint_files_are_named(tiny_checkpoint, tmp_path, paths, capsys, damage):
    ckpt = copy_checkpoint(tiny_checkpoint, tmp_path / "ckpt")
    if damage == "bad_json_config":
        (ckpt / "config.json").write_text("{not json")
        named = "config.json"
    elif damage == "no_tokenizer":
        for name in ("vocab.json", "added_tokens.json", "tokenizer_config.json"):
            (ckpt / name).unlink()
        named = "vocab.json"
    else:
        (ckpt / "model.safetensors").write_bytes(b"\x08\x00\x00\x00\x00\x00\x00\x00{broken}")
        named = "model.safetensors"
    code = cli.run(["models", "build", "--checkpoint", str(ckpt), "--out", str(tmp_path / "pack")], paths)
    err = capsys.readouterr().err.strip()
    assert code != 0 and named in err and len(err.splitlines()) == 1
    assert not (tmp_path / "pack").exists()


def test_failure_mid_build_leaves_nothing_behind(tiny_checkpoint, tmp_path, monkeypatch):
    from captioner.models import build as build_mod

    def explode(*args, **kwargs):
        raise OSError("disk full")

    calls = {"n": 0}
    original = build_mod.build_decoder_chunk

    def flaky(*args, **kwargs):
        calls["n"] += 1
        if calls["n"] == 3:
            explode()
        return original(*args, **kwargs)

    monkeypatch.setattr(build_mod, "build_decoder_chunk", flaky)
    with pytest.raises(PackBuildError, match=r"cannot write the pack in .*: disk full; nothing was kept") as caught:
        build_mod.build_pack(tiny_checkpoint, tmp_path / "pack")
    assert isinstance(caught.value.__cause__, OSError)
    assert list(tmp_path.iterdir()) == []


def test_install_from_local_checkpoint_then_list_verify_remove(tiny_checkpoint, tmp_path, capsys):
    home = tmp_path / "home"
    paths = AppPaths.default(home)
    assert cli.run(["models", "install", "--from", str(tiny_checkpoint), "--buckets", "3"], paths) == 0
    installed = paths.packs / "tiny-whisper"
    assert (installed / "manifest.json").is_file()
    capsys.readouterr()

    assert cli.run(["models", "list"], paths) == 0
    listing = capsys.readouterr().out
    assert "tiny-whisper" in listing and "multilingual" in listing and "buckets 3" in listing

    assert cli.run(["models", "verify", "tiny-whisper"], paths) == 0
    assert "OK" in capsys.readouterr().out

    # a flipped byte in one graph: verify names that file
    victim = Pack.load(installed).decoder_file(3, 10, 5)
    assert victim.name == "decoder_s25_k5.onnx"
    data = bytearray(victim.read_bytes())
    data[len(data) // 2] ^= 0xFF
    victim.write_bytes(bytes(data))
    assert cli.run(["models", "verify", "tiny-whisper"], paths) == 2
    err = capsys.readouterr().err
    assert "decoder_s25_k5.onnx" in err and "corrupt" in err

    assert cli.run(["models", "install", str(tiny_checkpoint), "--buckets", "3"], paths) == 2
    assert "already installed" in capsys.readouterr().err

    assert cli.run(["models", "remove", "tiny-whisper"], paths) == 0
    assert not installed.exists()
    assert cli.run(["models", "remove", "tiny-whisper"], paths) == 2
    assert cli.run(["models", "remove", ".."], paths) == 2
    assert home.exists() and paths.data.exists()
    capsys.readouterr()
    assert cli.run(["models", "list"], paths) == 0
    assert "no packs installed" in capsys.readouterr().out


def test_install_by_repo_id_uses_the_downloader_and_cleans_staging(tiny_checkpoint, tmp_path):
    paths = AppPaths.default(tmp_path / "home")
    seen = []

    def fake_download(repo_id: str, dest: Path, revision: str | None) -> Path:
        seen.append((repo_id, dest, revision))
        shutil.copytree(tiny_checkpoint, dest, dirs_exist_ok=True)
        return dest

    pack = install_pack("openai/whisper-tiny", paths, options=BuildOptions(buckets=(3,)), revision="abc123",
                        downloader=fake_download)
    assert pack.root == paths.packs / "openai--whisper-tiny"
    assert seen[0][0] == "openai/whisper-tiny" and seen[0][2] == "abc123"
    assert seen[0][1].is_relative_to(paths.cache)
    assert not seen[0][1].exists()  # staging removed after a successful build
    assert pack.manifest["source"]["name"] == "openai/whisper-tiny"
    assert pack.manifest["source"]["revision"] == "abc123"
    assert [p.name for p in list_packs(paths)] == ["openai--whisper-tiny"]

    fp16 = install_pack("openai/whisper-tiny", paths, options=BuildOptions(buckets=(3,), precision="fp16"),
                        downloader=fake_download)
    assert fp16.root.name == "openai--whisper-tiny-fp16"


def test_install_rejects_a_name_that_is_neither_repo_nor_directory(paths):
    with pytest.raises(ModelError, match="neither"):
        install_pack("not a repo", paths, downloader=lambda *a: Path("/nonexistent"))


def test_download_failure_is_a_model_error(paths):
    def failing(repo_id, dest, revision):
        raise ModelError(f"no model {repo_id!r} on the Hugging Face Hub (or it needs a login)")

    with pytest.raises(ModelError, match="no model"):
        install_pack("someone/missing", paths, downloader=failing)
    assert not (paths.packs / "someone--missing").exists()


def test_install_offline_is_a_one_line_error(tmp_path):
    """The real huggingface_hub download path, with the Hub switched off: a clear error, nothing installed."""
    env_home = tmp_path / "home"
    env = {"HF_HUB_OFFLINE": "1", "HF_HOME": str(tmp_path / "hf")}
    proc = subprocess.run([sys.executable, "-m", "captioner", "models", "install", "openai/whisper-tiny"],
                          capture_output=True, text=True, cwd=REPO, timeout=300,
                          env={**os.environ, **env, "CAPTIONER_HOME": str(env_home), "PYTHONPATH": str(REPO)})
    line = one_line_error(proc)
    assert "openai/whisper-tiny" in line
    assert not (env_home / "data" / "packs" / "openai--whisper-tiny").exists()


def test_an_npu_pack_for_another_machine_gets_its_cpu_graphs_by_option(tiny_checkpoint, tmp_path, capsys):
    """``--cpu-variant int8`` builds, off Windows ARM64, the pack that machine installs: fp32 graphs for
    the NPU and int8 ones for the CPU over one weight file; verify checks both sets."""
    paths = AppPaths.default(tmp_path / "home")
    args = ["models", "install", "--from", str(tiny_checkpoint), "--buckets", "3", "--layers", "fp32",
            "--vocab", "fp32", "--name", "npu"]
    assert cli.run([*args, "--cpu-variant", "int8"], paths) == 0
    manifest = json.loads((paths.packs / "npu" / "manifest.json").read_text())
    assert manifest["cpu_variant"]["vocab"] == "int8"
    cpu_graphs = manifest["cpu_variant"]["graphs"]
    assert cpu_graphs and all((paths.packs / "npu" / f).is_file() for f in cpu_graphs.values())
    assert len(list((paths.packs / "npu").glob("weights*.bin"))) == 1
    capsys.readouterr()
    assert cli.run(["models", "verify", "npu"], paths) == 0
    assert "OK" in capsys.readouterr().out
    assert cli.run(["models", "remove", "npu"], paths) == 0
    assert cli.run([*args, "--cpu-variant", "none"], paths) == 0
    assert "cpu_variant" not in json.loads((paths.packs / "npu" / "manifest.json").read_text())


def test_installed_pack_names_tell_non_default_builds_apart() -> None:
    from captioner.models.install import pack_name

    assert pack_name("openai/whisper-base") == "openai--whisper-base"
    assert pack_name("openai/whisper-base", BuildOptions(tail_chunk=3)) == "openai--whisper-base-k3"
    conv = BuildOptions(linear="conv", precision="fp16")  # the NPU form
    assert pack_name("openai/whisper-base", conv) == "openai--whisper-base-fp16-conv"
    assert pack_name("/ckpt/my-whisper", BuildOptions(linear="conv", tail_chunk=7)) == "my-whisper-conv-k7"
    assert pack_name("base", BuildOptions(beam_size=5)) == "whisper-base-beam5"  # the closing rounds' beam step
