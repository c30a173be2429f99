"""The accuracy bench reads several manifests at once (the development corpus and the new-speaker
``corpus/``): each one's audio paths relative to its own folder, each manifest split into the two
speaker halves on its own (adding a corpus leaves the others' halves as they were)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from captioner import cli
from captioner.bench.accuracy import load_manifest
from captioner.errors import CaptionerError
from captioner.storage.paths import AppPaths


def write(folder: Path, entries: list[dict]) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "manifest.jsonl"
    path.write_text("".join(json.dumps(e) + "\n" for e in entries), encoding="utf-8")
    return path


def entry(id_: str, kind: str, speaker: str) -> dict:
    return {"id": id_, "audio": f"audio/{id_}.flac", "text": "a b", "language": "en", "kind": kind,
            "speaker": speaker}


def test_items_of_several_manifests_keep_their_own_folders_and_each_manifest_its_own_split(tmp_path) -> None:
    first = write(tmp_path / "dev", [entry(f"{s[0]}{i}", "k", s) for s in ("anna", "ben") for i in range(2)])
    second = write(tmp_path / "new", [entry("c0", "k", "carl"), entry("c1", "k", "carl"), entry("d0", "k", "dora"),
                                      entry("e0", "conv", "eve"), entry("e1", "conv", "eve"),
                                      entry("f0", "conv", "finn")])
    items = load_manifest([first, second])
    assert [i.id for i in items] == ["a0", "a1", "b0", "b1", "c0", "c1", "d0", "e0", "e1", "f0"]
    by_id = {i.id: i for i in items}
    assert by_id["a0"].audio == tmp_path / "dev" / "audio" / "a0.flac"
    assert by_id["c0"].audio == tmp_path / "new" / "audio" / "c0.flac"
    halves = {i.speaker: i.half for i in items}
    # the first manifest keeps the halves it has alone, the second gets its own balanced split
    assert {i.speaker: i.half for i in load_manifest(first)} == {"anna": "tune", "ben": "check"}
    assert {i.speaker: i.half for i in load_manifest(second)} == {s: halves[s] for s in ("carl", "dora", "eve", "finn")}
    for kind in ("k", "conv"):
        assert {i.half for i in items if i.kind == kind and i.audio.parent.parent == tmp_path / "new"} == \
            {"tune", "check"}
    # a half and a kind filter apply across both
    tune = load_manifest([first, second], half="tune", kinds=["conv"])
    assert [i.id for i in tune] == [i.id for i in items if i.kind == "conv" and i.half == "tune"]
    assert tune
    # rotated, every speaker changes half
    rotated = {i.speaker: i.half for i in load_manifest([first, second], rotate=True)}
    assert all(rotated[s] != h for s, h in halves.items())


def test_a_speaker_in_two_manifests_keeps_the_half_of_the_first(tmp_path) -> None:
    first = write(tmp_path / "dev", [entry("a0", "k", "anna"), entry("b0", "k", "ben")])
    second = write(tmp_path / "new", [entry("a9", "conv", "anna"), entry("g0", "conv", "gil"),
                                      entry("g1", "conv", "gil")])
    assert {i.speaker: i.half for i in load_manifest(second)}["anna"] == "check"
    items = {i.id: i.half for i in load_manifest([first, second])}
    assert items["a9"] == items["a0"] == "tune"


def test_an_id_in_two_manifests_is_an_error_naming_both(tmp_path) -> None:
    first = write(tmp_path / "dev", [entry("x1", "k", "anna")])
    second = write(tmp_path / "new", [entry("x1", "k", "ben")])
    with pytest.raises(CaptionerError, match=r"'x1' is also in .*dev"):
        load_manifest([first, second])
    with pytest.raises(CaptionerError, match="cannot read the manifest"):
        load_manifest([first, tmp_path / "missing.jsonl"])


def test_the_bench_takes_manifest_more_than_once(tmp_path, capsys) -> None:
    """Both manifests are read before any model is loaded: a bad second one fails the command."""
    first = write(tmp_path / "dev", [entry("x1", "k", "anna")])
    second = write(tmp_path / "new", [entry("x1", "k", "ben")])
    argv = ["bench", "--sections", "accuracy", "--model", str(tmp_path), "--manifest", str(first),
            "--manifest", str(second)]
    assert cli.run(argv, AppPaths.default(tmp_path / "home")) == 2
    assert "'x1' is also in" in capsys.readouterr().err


def test_the_soak_takes_one_manifest(tmp_path, capsys) -> None:
    """The soak joins one manifest's clips into one session; two are refused before anything runs."""
    first = write(tmp_path / "dev", [entry("x1", "k", "anna")])
    second = write(tmp_path / "new", [entry("y1", "k", "ben")])
    argv = ["bench", "--sections", "soak", "--model", str(tmp_path), "--manifest", str(first), "--manifest", str(second)]
    assert cli.run(argv, AppPaths.default(tmp_path / "home")) == 2
    assert "joins the clips of one --manifest" in capsys.readouterr().err
