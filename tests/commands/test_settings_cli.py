"""``captioner settings`` (issue 26): list, get, set and reset a setting; bad values refused in one line,
the file left as it was; what it writes is what the app loads."""

from __future__ import annotations

from captioner import cli
from captioner.storage.paths import AppPaths
from captioner.storage.settings import load_settings


def test_list_get_set_reset(tmp_path, capsys) -> None:
    paths = AppPaths.default(tmp_path / "home")
    assert cli.run(["settings"], paths) == 0
    listing = capsys.readouterr().out
    assert "engine.language = auto" in listing and "captions.font_size = 22" in listing
    assert "not written yet" in listing and not paths.settings_file.exists()  # listing never writes

    assert cli.run(["settings", "set", "engine.language", "pt"], paths) == 0
    assert cli.run(["settings", "set", "captions.outline", "off"], paths) == 0
    assert cli.run(["settings", "set", "captions.font_size", "30"], paths) == 0
    capsys.readouterr()
    settings, problems = load_settings(paths.settings_file)  # what the app will load
    assert problems == []
    assert (settings.engine.language, settings.captions.outline, settings.captions.font_size) == ("pt", False, 30)
    assert cli.run(["settings", "get", "engine.language"], paths) == 0
    assert capsys.readouterr().out == "pt\n"
    assert cli.run(["settings", "list"], paths) == 0
    assert "engine.language = pt   (default auto)" in capsys.readouterr().out

    assert cli.run(["settings", "reset", "engine.language"], paths) == 0
    assert load_settings(paths.settings_file)[0].engine.language == "auto"


def test_bad_values_are_refused_and_nothing_changes(tmp_path, capsys) -> None:
    paths = AppPaths.default(tmp_path / "home")
    assert cli.run(["settings", "set", "engine.step_s", "1.5"], paths) == 0
    before = paths.settings_file.read_bytes()
    capsys.readouterr()
    for argv, said in ((["set", "captions.font_size", "200"], "200 is outside 8..96"),
                       (["set", "engine.language", "portuguese"], "is not a Whisper language code"),
                       (["set", "captions.dock", "left"], "is not one of 'bottom', 'top', 'float'"),
                       (["set", "captions.outline", "maybe"], "is true or false"),
                       (["set", "engine.step_s", "fast"], "is a number"),
                       (["get", "font_size"], "did you mean captions.font_size?")):
        assert cli.run(["settings", *argv], paths) == 2
        err = capsys.readouterr().err
        assert err.startswith("captioner: error: ") and said in err and err.count("\n") == 1, err
    assert paths.settings_file.read_bytes() == before
