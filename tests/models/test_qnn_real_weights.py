"""Real tiny.en weights on QNN HTP (the x86-64 emulator here) against the CPU provider, on real speech.

The random packs of ``test_qnn.py`` prove the graphs map onto the HTP; this proves real weights keep
their words there: tiny.en built as the NPU's pack (``--layers fp32 --vocab fp32``), the vendored
2.1 s LibriSpeech clip "He could wait no longer" (the 3 s bucket), its encoder and its first decoder
chunk compiled for the HTP. The emulator compiles a real decoder chunk in 1–2 minutes on the CI
machine, so one chunk graph runs on the HTP here; ``python -m captioner.bench.htp`` runs every chunk
of more clips.

Tolerances (stated, measured with margin; the HTP computes in fp16): cross-attention K/V within 4 %
of their largest magnitude at worst and 0.2 % on average (measured: 0.099 of 5.12 and 0.103 of 6.58
at worst, 0.14 % and 0.09 % on average); the first chunk's logits within 1.0 of the CPU's (logits of
20–31; measured 0.30 for the best token, 0.38 for EOT) and the same argmax at every position; and
the CPU decoder fed the HTP's encoder output gives exactly the CPU's greedy tokens. Time: ~6.5 min on
the 2-core machine under load (the chunk graph's compile dominates: 110–135 s at lower load).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from captioner import cli
from captioner.audio.files import load_audio_file
from captioner.bench.htp import decode_greedy, greedy
from captioner.engine.onnx_model import OnnxAcousticModel
from captioner.engine.providers import Host
from captioner.engine.runtime import Runtime
from captioner.models.pack import Pack
from captioner.storage.paths import AppPaths

pytest.importorskip("onnxruntime_qnn")
pytestmark = [pytest.mark.qnn, pytest.mark.slow]

CLIP = Path(__file__).resolve().parents[1] / "data" / "speech" / "1089-134691-0000.wav"


@pytest.fixture(scope="module")
def npu_tiny_en(real_tiny_en_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Pack:
    if not Host.current().qnn_emulated and not Host.current().snapdragon_windows:
        pytest.skip("no QNN HTP backend on this platform")
    out = tmp_path_factory.mktemp("packs") / "tiny.en-npu"
    code = cli.run(["models", "build", "--checkpoint", str(real_tiny_en_dir), "--out", str(out),
                    "--layers", "fp32", "--vocab", "fp32"], AppPaths.default(tmp_path_factory.mktemp("home")))
    assert code == 0
    return Pack.load(out)


def test_real_tiny_en_on_the_htp_keeps_the_cpus_tokens(npu_tiny_en: Pack, tmp_path: Path) -> None:
    pack = npu_tiny_en
    audio = load_audio_file(CLIP)
    audio = np.pad(audio, (0, -len(audio) % 320))
    cpu = OnnxAcousticModel(pack, Runtime(pack, "cpu"))
    htp = OnnxAcousticModel(pack, Runtime(pack, "qnn", cache_dir=tmp_path, npu_buckets=(3,)))
    assert htp.provider == "QNN-HTP"
    reference = greedy(cpu, audio)
    assert cpu.vocab.decode(reference).strip().startswith("He could wait no longer.")  # real words

    enc_cpu, enc_htp = cpu.encode(audio), htp.encode(audio)
    assert enc_cpu.bucket == enc_htp.bucket == 3
    n = enc_cpu.n_frames
    for a, b in zip(enc_htp.payload[:2], enc_cpu.payload[:2], strict=True):  # type: ignore[index]
        scale = np.abs(b[..., :n]).max()
        err = np.abs(a[..., :n] - b[..., :n])
        print(f"cross K/V: |HTP - CPU| max {err.max():.4f}, mean {err.mean():.5f}, of values up to {scale:.2f}")
        assert err.max() <= 0.04 * scale and err.mean() <= 0.002 * scale
    # the HTP's encoder output, decoded on the CPU: the same tokens
    assert decode_greedy(cpu, enc_htp, len(reference)) == reference

    # the first decoder chunk on the HTP, fed the CPU's tokens (teacher forcing): same argmax, close logits
    prompt = list(cpu.vocab.prompt("en"))
    seq = prompt + reference
    start, size = cpu.chunk_plan(3, False)[0]
    forced = np.array(seq[start + 1:start + size], np.int64)
    out_cpu = cpu.decoder(enc_cpu).run(start, size, seq[start], forced)
    out_htp = htp.decoder(enc_htp).run(start, size, seq[start], forced)
    rows = [s for s in range(size) if start + s + 1 >= len(prompt)]  # the rows that predict
    assert rows and [int(out_htp.tokens[s]) for s in rows] == [int(out_cpu.tokens[s]) for s in rows]
    assert [int(out_cpu.tokens[s]) for s in rows] == seq[start + rows[0] + 1:start + size + 1]
    for name in ("token_logit", "eot_logit"):
        diff = np.abs(getattr(out_htp, name)[rows] - getattr(out_cpu, name)[rows]).max()
        print(f"{name}: max |HTP - CPU| {diff:.3f}")
        assert diff <= 1.0
    placement = htp.runtime.info().placement
    assert placement and all(set(p) == {"QNNExecutionProvider"} for p in placement.values())
    htp.close()
    cpu.close()
