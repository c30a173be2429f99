"""``captioner settings``: read or change a setting from the command line (the app's Settings dialog, in text).

``captioner settings`` lists every setting with its value (and the default where it differs);
``settings get KEY``, ``settings set KEY VALUE`` and ``settings reset KEY`` (back to the default) work
on one, named ``section.field`` as in ``settings.json`` (``engine.language``, ``captions.font_size``).
A value is checked as the app checks it; a bad one is refused with the valid range or choices, and
the file is left as it was. The app reads the file when it starts: quit a running app first, as it
saves its own settings when it quits.
"""

from __future__ import annotations

import argparse
import dataclasses
import typing
from typing import Any

from captioner.commands import described
from captioner.errors import SettingsError
from captioner.storage.paths import AppPaths
from captioner.storage.settings import Settings, load_settings, save_settings

__all__ = ["register", "run"]

SECTIONS = ("captions", "audio", "engine", "transcripts")
_TRUE, _FALSE = ("true", "yes", "on", "1"), ("false", "no", "off", "0")


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add the ``settings`` subcommand and its actions."""
    p = subparsers.add_parser("settings", help="list, read or change the settings (settings.json)",
                              description=described(__doc__))
    actions = p.add_subparsers(dest="action", metavar="ACTION")
    actions.add_parser("list", help="every setting and its value (the default action)")
    get = actions.add_parser("get", help="print one setting's value")
    get.add_argument("key", metavar="KEY", help="section.field, e.g. engine.language")
    put = actions.add_parser("set", help="change one setting")
    put.add_argument("key", metavar="KEY", help="section.field, e.g. engine.language")
    put.add_argument("value", metavar="VALUE", help="the new value, e.g. de, auto, 28, true")
    reset = actions.add_parser("reset", help="put one setting back to its default")
    reset.add_argument("key", metavar="KEY", help="section.field, e.g. engine.language")
    p.set_defaults(func=run)


def _fields() -> dict[str, tuple[str, dataclasses.Field[Any]]]:
    """``"section.field"`` -> (section, field), in the order of the settings file."""
    defaults = Settings()
    out = {}
    for section in SECTIONS:
        for f in dataclasses.fields(getattr(defaults, section)):
            out[f"{section}.{f.name}"] = (section, f)
    return out


def _lookup(key: str) -> tuple[str, dataclasses.Field[Any]]:
    fields = _fields()
    if key not in fields:
        near = [k for k in fields if k.endswith("." + key) or key in k]
        hint = f" (did you mean {', '.join(near)}?)" if near else "; 'captioner settings' lists them"
        raise SettingsError(f"no setting named {key!r}{hint}")
    return fields[key]


def _show(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return '""' if value == "" else str(value)


def _parse(section: str, f: dataclasses.Field[Any], text: str) -> Any:
    """``text`` as the field's type (true/false, a number, or text)."""
    cls = type(getattr(Settings(), section))
    hint = typing.get_type_hints(cls)[f.name]
    if hint is bool:
        if text.lower() in _TRUE:
            return True
        if text.lower() in _FALSE:
            return False
        raise SettingsError(f"{section}.{f.name} is true or false, not {text!r}")
    if hint is int or hint is float:
        try:
            number = float(text)
        except ValueError:
            raise SettingsError(f"{section}.{f.name} is a number, not {text!r}") from None
        return int(number) if hint is int and number.is_integer() else number
    return text  # text, or one of a Literal's choices (checked by the dataclass)


_PATTERN_WORDS = {"language": "a Whisper language code (en, de, pt, ...), auto, or the codes you speak (en, de)", "color": "a colour as #RRGGBB"}


def _why(key: str, value: Any, exc: ValueError) -> str:
    """The validation message without the dataclass name; a pattern said in words."""
    problem = str(exc).split(": ", 1)[-1]
    if "does not match" in problem:
        words = _PATTERN_WORDS["language" if key.endswith("language") else "color"]
        problem = f"{value!r} is not {words}"
    return f"cannot set {key}: {problem}"


def run(args: argparse.Namespace, paths: AppPaths) -> int:
    """Run one ``settings`` action."""
    settings, _problems = load_settings(paths.settings_file)  # problems are logged (reset to defaults)
    action = args.action or "list"
    if action == "list":
        print(f"# {paths.settings_file}{'' if paths.settings_file.exists() else ' (not written yet: all defaults)'}")
        for key, (section, f) in _fields().items():
            value = getattr(getattr(settings, section), f.name)
            default = "" if value == f.default else f"   (default {_show(f.default)})"
            print(f"{key} = {_show(value)}{default}")
        return 0
    section, f = _lookup(args.key)
    current = getattr(settings, section)
    if action == "get":
        print(_show(getattr(current, f.name)))
        return 0
    value = f.default if action == "reset" else _parse(section, f, args.value)
    try:
        changed = dataclasses.replace(current, **{f.name: value})
    except ValueError as exc:
        raise SettingsError(_why(args.key, value, exc)) from None
    save_settings(dataclasses.replace(settings, **{section: changed}), paths.settings_file)
    print(f"{args.key} = {_show(value)} (the app uses it from its next start)")
    return 0
