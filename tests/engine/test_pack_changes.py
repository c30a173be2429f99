"""The model pack's files deleted or cut short under a running stream (issue 16, "faults").

A memory-mapped weight file truncated under a process kills it with SIGBUS at the next page fault, so
each case runs the stream in a child process: a signal shows up as a negative return code and fails
the test instead of killing pytest. The child streams the real tiny.en over real speech, damages the
pack after the first half, and streams the rest. Two outcomes are acceptable: the stream goes on
(sessions already open keep their weights in memory) or it stops with a ModelError that says the pack
changed; a crash or any other error is not.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

from captioner.engine.runtime import SharedWeights
from captioner.errors import ModelError
from captioner.models.pack import Pack

SPEECH = Path(__file__).resolve().parents[1] / "data" / "speech"

_CHILD = textwrap.dedent("""
    import json, os, sys
    from pathlib import Path
    import numpy as np
    from captioner.audio.files import load_audio_file
    from captioner.core import apply_update, final_count
    from captioner.engine import StreamConfig, Transcriber
    from captioner.errors import CaptionerError

    pack, damage, preload, speech = Path(sys.argv[1]), sys.argv[2], sys.argv[3] == "1", Path(sys.argv[4])
    pause = np.zeros(16000, np.float32)
    audio = np.concatenate([x for w in sorted(speech.glob("*.wav")) for x in (load_audio_file(w), pause)])
    engine = Transcriber.open(pack, "cpu", verify=False)
    if preload:
        for bucket in engine.model.buckets:
            engine.model.preload(bucket)
    stream = engine.stream(StreamConfig(step_s=2.0, language="en"))
    words, error, rounds_after, finished = [], "", 0, False
    half = len(audio) // 2
    try:
        for pos in range(0, len(audio), 32000):
            if pos >= half and damage:
                for f in sorted(pack.iterdir()):
                    if damage == "delete":
                        f.unlink()
                    else:  # truncate in place: the same inode, now shorter
                        os.truncate(f, f.stat().st_size // 3)
                damage = ""
                print("damaged", flush=True)
            stream.feed(audio[pos:pos + 32000])
            while (u := stream.step()) is not None:
                apply_update(words, u)
                rounds_after += pos >= half
        apply_update(words, stream.finish())
        finished = True
    except CaptionerError as exc:
        error = f"{type(exc).__name__}: {exc}"
    final = words[: final_count(words, finished=finished)]  # what no later round could have changed
    print(json.dumps({"words": [w.text for w in final], "error": error, "rounds_after": rounds_after}))
""")


@pytest.fixture
def pack_copy(real_tiny_en_pack, tmp_path) -> Path:
    """A copy of the real tiny.en pack that the test may damage."""
    return Path(shutil.copytree(real_tiny_en_pack.root, tmp_path / "tiny.en"))


def _stream(pack: Path, damage: str, preload: bool) -> dict:
    out = subprocess.run([sys.executable, "-c", _CHILD, str(pack), damage, "1" if preload else "0", str(SPEECH)],
                         capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, f"the stream's process died (return code {out.returncode}):\n{out.stderr[-2000:]}"
    return json.loads(out.stdout.strip().splitlines()[-1])


@pytest.fixture(scope="module")
def undamaged(real_tiny_en_pack) -> dict:
    return _stream(real_tiny_en_pack.root, "", False)


@pytest.mark.parametrize("damage", ["delete", "truncate"])
def test_a_running_stream_with_every_session_open_survives_its_pack_being_damaged(pack_copy, undamaged,
                                                                                  damage) -> None:
    """Every graph's session opened first (as a long session ends up): the stream goes on from the
    weights in memory and its words are those of an undamaged run."""
    result = _stream(pack_copy, damage, preload=True)
    print(damage, "with every session open:", result["rounds_after"], "rounds after the damage")
    assert result["error"] == ""
    assert result["rounds_after"] >= 3
    assert result["words"] == undamaged["words"] and len(undamaged["words"]) > 20


@pytest.mark.parametrize("damage", ["delete", "truncate"])
def test_a_stream_that_needs_a_new_session_after_the_damage_stops_with_a_clear_error(pack_copy, undamaged,
                                                                                     damage) -> None:
    """Sessions created on demand: the rounds go on while they need no new graph; the first one that
    does stops the stream with a ModelError naming the change (never a crash, never a provider
    fallback), and the words so far are those of an undamaged run."""
    result = _stream(pack_copy, damage, preload=False)
    print(damage, "lazy sessions:", result)
    if result["error"]:
        assert result["error"].startswith("ModelError: the model pack tiny.en changed while captioning")
        assert "restart captioning" in result["error"]
        assert result["words"] == undamaged["words"][: len(result["words"])]  # the final words so far
    else:
        assert result["words"] == undamaged["words"]


def test_shared_weights_read_a_deleted_file_and_refuse_a_truncated_one(tmp_path) -> None:
    """The weight reader itself: a deleted file reads as it was (the descriptor is kept); a file cut
    short or rewritten after opening is a ModelError, not SIGBUS and not wrong bytes."""
    from captioner.models.pack import WeightRef

    path = tmp_path / "weights.bin"
    data = np.arange(4096, dtype=np.float32)
    path.write_bytes(data.tobytes())
    a = WeightRef("a", "float32", (1024,), 0, 4096)
    b = WeightRef("b", "float32", (1024,), 4096, 4096)
    c = WeightRef("c", "float32", (2048,), 8192, 8192)
    weights = SharedWeights(path)
    assert np.array_equal(weights.ortvalue(a).numpy(), data[:1024])
    path.unlink()
    assert np.array_equal(weights.ortvalue(b).numpy(), data[1024:2048])  # deleted: still readable
    assert weights.loaded_bytes == 8192
    again = tmp_path / "w2.bin"
    again.write_bytes(data.tobytes())
    cut = SharedWeights(again)
    import os

    os.truncate(again, 6000)
    with pytest.raises(ModelError, match="changed on disk"):
        cut.ortvalue(c)
    assert np.array_equal(weights.ortvalue(a).numpy(), data[:1024])  # what was read stays valid
    weights.close()
    cut.close()
    with pytest.raises(ModelError, match="was closed"):
        cut.ortvalue(a)


def test_the_real_pack_loads_the_same_weights_as_before(real_tiny_en_pack) -> None:
    """Every weight the manifest lists reads back as the bytes at its offset in weights.bin."""
    pack = Pack.load(real_tiny_en_pack.root)
    weights = SharedWeights(pack.weights_file())
    raw = pack.weights_file().read_bytes()
    refs = {r.name: r for g in pack.graph_files() for r in pack.graph_weights(g) or ()}
    for ref in refs.values():
        assert weights.ortvalue(ref).numpy().tobytes() == raw[ref.offset: ref.offset + ref.length]
    assert weights.loaded_bytes == sum(r.length for r in refs.values())
    weights.close()
