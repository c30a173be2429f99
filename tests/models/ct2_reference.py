"""Our pack against CTranslate2 itself: the same log-mel features in, greedy tokens out of both.

Both decoders choose, at each position after the prompt, the most likely of the text tokens and EOT
(CTranslate2 is told to suppress every id above EOT; our chunk graphs return the argmax below EOT and
the EOT logit) and stop at EOT. The features are the host's own (:func:`captioner.engine.features.log_mel`
of the clip zero-padded to 30 s, as stock Whisper does), fed to the pack's 30 s encoder with every
frame real.

By hand, for any CTranslate2 folder and the pack built from it (e.g. whisper-base)::

    .venv/bin/python tests/models/ct2_reference.py --ct2 /tmp/wh/base --pack /tmp/packs/base tests/data/speech/*.wav
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np

if __package__ in (None, ""):  # run as a script: make ``models.helpers`` and ``captioner`` importable
    sys.path[:0] = [str(Path(__file__).resolve().parents[1]), str(Path(__file__).resolve().parents[2])]

from captioner.audio.files import load_audio_file
from captioner.engine.features import log_mel, pad_to_frames
from captioner.models.pack import Pack
from models.helpers import PackRunner

SAMPLES_30S = 30 * 16000


def clip_features(path: Path, n_mels: int = 80) -> np.ndarray:
    """float32 [1, n_mels, 3000]: the clip (≤ 30 s, 16 kHz after loading) zero-padded to 30 s, log-mel."""
    audio = load_audio_file(path)
    padded = np.zeros(SAMPLES_30S, np.float32)
    padded[: len(audio)] = audio[:SAMPLES_30S]
    return pad_to_frames(log_mel(padded, n_mels), 3000)


def prompt_of(pack: Pack, language: str = "en") -> list[int]:
    """``[SOT, notimestamps]`` (English-only) or ``[SOT, <|language|>, <|transcribe|>, notimestamps]``."""
    s = pack.special
    if pack.multilingual:
        return [s.sot, s.languages[language], s.transcribe, s.notimestamps]
    return [s.sot, s.notimestamps]


def ct2_greedy(model, features: np.ndarray, prompt: list[int], eot: int, n_vocab: int,
               max_length: int = 224) -> list[int]:
    """CTranslate2's greedy tokens after the prompt (EOT excluded), choosing among ids ≤ EOT."""
    import ctranslate2

    (result,) = model.generate(ctranslate2.StorageView.from_array(np.ascontiguousarray(features)), [prompt],
                               beam_size=1, suppress_blank=False, suppress_tokens=list(range(eot + 1, n_vocab)),
                               max_length=max_length)
    return list(result.sequences_ids[0])


def pack_greedy(runner: PackRunner, features: np.ndarray, prompt: list[int], max_length: int = 224) -> list[int]:
    """Our pack's greedy tokens after the prompt (EOT excluded): 30 s encoder, then the chunk graphs."""
    pack = runner.pack
    enc = runner.encode(features, 1500, 30)
    self_k, self_v = runner.empty_cache(30), runner.empty_cache(30)
    seq = list(prompt)
    for start, size in runner.plan(30, "default", pack.dims.n_text_ctx):
        forced = [prompt[p] if (p := start + s + 1) < len(prompt) else -1 for s in range(size - 1)]
        out = runner.chunk(enc, start, size, seq[start], forced, self_k, self_v)
        end = min(start + size, self_k.shape[3])
        self_k[:, :, :, start:end] = out["new_k"][:, :, :, : end - start]
        self_v[:, :, :, start:end] = out["new_v"][:, :, :, : end - start]
        for s in range(size):
            pos = start + s + 1
            if pos < len(prompt):
                continue
            if out["eot_logit"][s] >= out["token_logit"][s] or len(seq) >= max_length:
                return seq[len(prompt):]
            seq.append(int(out["tokens"][s]))
    return seq[len(prompt):]


def joined_folder(folder: Path, tmp: Path) -> Path:
    """``folder`` itself, or (CTranslate2 reads only one ``model.bin``) a copy in ``tmp`` with its
    ``model.bin.partN`` files joined and the other files linked."""
    from captioner.models.ct2 import model_bin_parts

    parts = model_bin_parts(folder)
    if parts == [folder / "model.bin"]:
        return folder
    tmp.mkdir(parents=True, exist_ok=True)
    with (tmp / "model.bin").open("wb") as out:
        for part in parts:
            out.write(part.read_bytes())
    for f in folder.iterdir():
        if not f.name.startswith("model.bin"):
            (tmp / f.name).symlink_to(f.resolve())
    return tmp


def main(argv: list[str] | None = None) -> int:
    import tempfile

    import ctranslate2

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--ct2", required=True, type=Path, help="CTranslate2 model folder")
    ap.add_argument("--pack", required=True, type=Path, help="the pack built from it")
    ap.add_argument("clips", nargs="+", type=Path)
    args = ap.parse_args(argv)
    pack = Pack.load(args.pack)
    runner = PackRunner(pack)
    tmp = tempfile.TemporaryDirectory()
    model = ctranslate2.models.Whisper(str(joined_folder(args.ct2, Path(tmp.name) / "ct2")), device="cpu",
                                       compute_type="float32")
    prompt = prompt_of(pack)
    same = 0
    for clip in args.clips:
        feats = clip_features(clip, pack.dims.n_mels)
        t0 = time.perf_counter()
        ref = ct2_greedy(model, feats, prompt, pack.special.eot, pack.dims.n_vocab)
        t1 = time.perf_counter()
        ours = pack_greedy(runner, feats, prompt)
        t2 = time.perf_counter()
        ok = ours == ref
        same += ok
        first = next((i for i, (a, b) in enumerate(zip(ours, ref, strict=False)) if a != b), min(len(ours), len(ref)))
        text = b"".join(pack.token_bytes[t] for t in ours).decode("utf-8", "replace")
        print(f"{clip.name}: {'same' if ok else f'DIFFER at {first}'} ({len(ours)} vs {len(ref)} tokens; "
              f"ct2 {t1 - t0:.2f} s, pack {t2 - t1:.2f} s) {text.strip()[:80]}")
    print(f"{same}/{len(args.clips)} clips give the same greedy tokens")
    return 0 if same == len(args.clips) else 1


if __name__ == "__main__":
    sys.exit(main())
