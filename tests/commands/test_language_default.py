"""The language by default (issue 26): a multilingual pack detects it, an English-only pack stays
English; the detected language is said in the summary line and kept with the session."""

from __future__ import annotations

from pathlib import Path

from captioner import cli
from captioner.storage.paths import AppPaths
from captioner.storage.settings import Settings
from captioner.transcript.store import SessionStore

GERMAN = Path(__file__).resolve().parents[1] / "data" / "speech-multilingual" / "picovoice-leopard-de.wav"


def _summary(err: str) -> str:
    return next(line for line in err.splitlines() if "s of audio in" in line)


def test_a_multilingual_pack_detects_german_by_default(base_pack: Path, tmp_path: Path, capsys) -> None:
    """Real whisper-base on a real German sentence ("Der hinter diesem Portal liegenden Raum wurde als
    Leichenhalle genutzt."), no --language and no settings file: German words, "language de (detected)"."""
    assert Settings().engine.language == "auto"
    home = AppPaths.default(tmp_path / "home")
    assert cli.run(["transcribe", str(GERMAN), "--model", str(base_pack), "--provider", "cpu"], home) == 0
    out = capsys.readouterr()
    text = out.out.lower()
    assert "transcribing" in out.err and "language detected" in out.err
    assert "language de (detected)" in _summary(out.err), out.err
    assert sum(w in text for w in ("der", "diesem", "portal", "raum", "wurde", "als", "genutzt")) >= 4, out.out
    with SessionStore.open(home.sessions_db) as store:
        (session,) = store.list_sessions()
        assert session.language == "de"
    assert cli.run(["sessions", "show", str(session.id)], home) == 0
    assert "language de (detected)" in capsys.readouterr().out


def test_an_english_only_pack_stays_english(real_tiny_en_pack, tmp_path: Path, capsys) -> None:
    home = AppPaths.default(tmp_path / "home")
    clip = GERMAN.parents[1] / "speech" / "1089-134691-0000.wav"
    assert cli.run(["transcribe", str(clip), "--model", str(real_tiny_en_pack.root), "--provider", "cpu"], home) == 0
    err = capsys.readouterr().err
    assert "language en" in err and "(detected)" not in _summary(err), err
    with SessionStore.open(home.sessions_db) as store:
        assert [s.language for s in store.list_sessions()] == ["en"]
    assert cli.run(["sessions", "show", "1"], home) == 0
    shown = capsys.readouterr().out
    assert "language en" in shown and "(detected)" not in shown


def test_the_languages_a_person_speaks_are_the_only_ones_detected(base_pack: Path, tmp_path: Path, capsys) -> None:
    """``--language en,de`` (and the setting ``engine.language = "en, de"``): the German sentence is
    German among English and German, said so in the summary and the session; an English-only pack
    told the same hears English."""
    home = AppPaths.default(tmp_path / "home")
    assert cli.run(["transcribe", str(GERMAN), "--model", str(base_pack), "--provider", "cpu",
                    "--language", "en,de"], home) == 0
    out = capsys.readouterr()
    assert "language de (detected among en, de)" in _summary(out.err), out.err
    assert sum(w in out.out.lower() for w in ("der", "diesem", "portal", "raum", "wurde", "als", "genutzt")) >= 4
    assert cli.run(["sessions", "show", "1"], home) == 0
    assert "language de (detected among en, de)" in capsys.readouterr().out
    assert cli.run(["settings", "set", "engine.language", "fr, en"], home) == 0  # the setting, in the app's form
    assert cli.run(["transcribe", str(GERMAN), "--model", str(base_pack), "--provider", "cpu", "--no-save"], home) == 0
    summary = _summary(capsys.readouterr().err)
    assert "(detected among fr, en)" in summary and "language de" not in summary, summary  # never outside the list
    assert cli.run(["transcribe", str(GERMAN), "--language", "en, xx", "--model", str(base_pack), "--no-save"],
                   home) == 2
    assert "unknown language 'xx'" in capsys.readouterr().err


def test_an_english_only_pack_told_the_languages_spoken_hears_english(real_tiny_en_pack, tmp_path: Path,
                                                                     capsys) -> None:
    home = AppPaths.default(tmp_path / "home")
    clip = GERMAN.parents[1] / "speech" / "1089-134691-0000.wav"
    assert cli.run(["transcribe", str(clip), "--model", str(real_tiny_en_pack.root), "--provider", "cpu",
                    "--language", "en,de", "--no-save"], home) == 0
    assert "language en" in _summary(capsys.readouterr().err)
