"""Fixtures of the engine tests that decode the real clips as closing rounds hear them (draft
decoding, beam search): the real tiny.en with fp32 and with int8 layers, built with the beam step
(``captioner models build --beam 5``; the other graphs are the default pack's)."""

from __future__ import annotations

import numpy as np
import pytest
from speech_clips import CLIPS, DATA

from captioner import cli
from captioner.audio import load_audio_file
from captioner.engine import OnnxAcousticModel, Runtime
from captioner.models.pack import Pack
from captioner.storage.paths import AppPaths

SR = 16000


@pytest.fixture(scope="session")
def beam_packs(real_tiny_en_dir, tmp_path_factory) -> dict[str, Pack]:
    """tiny.en with its default fp32 layers and with int8 layers (whisper-base's default), each with
    the beam step."""
    root = tmp_path_factory.mktemp("beam-packs")
    paths = AppPaths.default(root / "home")
    packs = {}
    for layers in ("fp32", "int8"):
        out = root / f"tiny.en-{layers}-beam5"
        assert cli.run(["models", "build", "--checkpoint", str(real_tiny_en_dir), "--out", str(out),
                        "--layers", layers, "--beam", "5"], paths) == 0
        packs[layers] = Pack.load(out)
    return packs


@pytest.fixture(scope="module", params=["fp32", "int8"])
def tiny_en(request, beam_packs) -> OnnxAcousticModel:
    pack = beam_packs[request.param]
    return OnnxAcousticModel(pack, Runtime(pack, "cpu"))


@pytest.fixture(scope="module")
def closing_inputs(tiny_en) -> list:
    """Each clip as a closing round sees it: padded with silence to 10 s (or 20 s), encoded; with
    its seconds."""
    out = []
    for clip in CLIPS:
        audio = load_audio_file(DATA / clip["audio"])
        n = audio.size - audio.size % 320
        window = 10 * SR if n <= 10 * SR else 20 * SR
        padded = np.zeros(window, np.float32)
        padded[:n] = audio[:n]
        out.append((tiny_en.encode(padded), n / SR))
    return out
