"""``--vocabulary`` and ``--vocabulary-file`` (issue 27): the words reach the engine, a name comes out
spelled as listed, the list is stored with the session, and a bad list fails before any work."""

from __future__ import annotations

import json
from pathlib import Path

from captioner import cli
from captioner.commands._engine import command_vocabulary, open_configured_engine
from captioner.storage.paths import AppPaths
from captioner.storage.settings import EngineConfig
from captioner.transcript.store import SessionStore

HESTER = Path(__file__).resolve().parents[1] / "data" / "speech" / "1221-135766-0002.wav"


def test_transcribe_spells_a_listed_name_and_keeps_the_list_with_the_session(real_tiny_en_pack, tmp_path: Path,
                                                                             capsys) -> None:
    home = AppPaths.default(tmp_path / "home")
    base = ["transcribe", str(HESTER), "--model", str(real_tiny_en_pack.root), "--provider", "cpu"]
    assert cli.run([*base, "--no-save"], home) == 0
    assert "Prynne" not in capsys.readouterr().out
    words = tmp_path / "words.txt"
    words.write_text("# the reading\nPrynne\nZanzibar\n", encoding="utf-8")
    out = tmp_path / "s.json"
    assert cli.run([*base, "--vocabulary-file", str(words), "--json", str(out)], home) == 0
    printed = capsys.readouterr().out
    assert "Hester Prynne" in printed and "Zanzibar" not in printed, printed
    session = json.loads(out.read_text(encoding="utf-8"))["session"]
    assert session["settings"]["engine"]["vocabulary"] == "Prynne, Zanzibar"
    with SessionStore.open(home.sessions_db) as store:
        assert len(store.list_sessions()) == 1
    assert cli.run(["sessions", "show", "1"], home) == 0
    assert "  vocabulary Prynne, Zanzibar\n" in capsys.readouterr().out


def test_a_bad_vocabulary_fails_before_any_work(real_tiny_en_pack, tmp_path: Path, capsys) -> None:
    home = AppPaths.default(tmp_path / "home")
    base = ["transcribe", str(HESTER), "--model", str(real_tiny_en_pack.root), "--provider", "cpu"]
    assert cli.run([*base, "--vocabulary-file", str(tmp_path / "none.txt")], home) == 2
    assert "cannot read the vocabulary file" in capsys.readouterr().err
    assert cli.run([*base, "--vocabulary", "a" * 61], home) == 2
    assert "vocabulary entry too long" in capsys.readouterr().err
    with SessionStore.open(home.sessions_db) as store:
        assert store.list_sessions() == []


def test_the_settings_vocabulary_is_the_default_and_the_flag_wins(real_tiny_en_pack, tmp_path: Path) -> None:
    home = AppPaths.default(tmp_path / "home")
    settings = EngineConfig(vocabulary="Schoeffer, Gutenberg\nmissal")
    for given, expected in ((None, ("Schoeffer", "Gutenberg", "missal")), ((), ()), (("Prynne",), ("Prynne",))):
        setup = open_configured_engine(settings, home, model=str(real_tiny_en_pack.root), provider="cpu",
                                       vocabulary=given)
        try:
            assert setup.config.vocabulary == expected
        finally:
            setup.engine.close()


def test_listen_takes_the_same_vocabulary_options(tmp_path: Path) -> None:
    words = tmp_path / "words.txt"
    words.write_text("Prynne\nZanzibar, Quetzalcoatl\n", encoding="utf-8")
    parser = cli.build_parser()
    args = parser.parse_args(["listen", "--vocabulary-file", str(words)])
    assert command_vocabulary(args) == ("Prynne", "Zanzibar", "Quetzalcoatl")
    assert command_vocabulary(parser.parse_args(["listen", "--vocabulary", "Gutenberg, missal"])) == ("Gutenberg",
                                                                                                      "missal")
    assert command_vocabulary(parser.parse_args(["listen"])) is None  # the settings' list applies
