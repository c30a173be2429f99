"""The Windows ARM64 workflow (.github/workflows/windows-arm64.yml) against the code it drives.

The workflow only runs on GitHub's windows-11-arm runners, so a name it spells differently from the
code (a pack folder, an executable, a data file, a command-line option) is found there, an hour into
a run, or never. This test reads the workflow and checks every path and command in it against their
one home here: pack names from ``models/catalog.py``, the executables from ``installer/captioner.spec``
and ``captioner.nsi``, the install and data folders from the NSIS script and platformdirs' Windows
rules (``storage/paths.py``), the QNN files from ``installer/bundle_parts.py``, every captioner command
line from the real argument parser, the doctor pattern from the real ``doctor`` output, and the
expected words from the clip's reference transcript.
"""

from __future__ import annotations

import json
import re
import shlex
import shutil
from pathlib import Path, PureWindowsPath

import bundle_parts
import pytest
import yaml

from captioner import cli
from captioner.models.catalog import KNOWN_MODELS
from captioner.models.install import pack_name
from captioner.models.pack import Pack
from captioner.storage.paths import APP_NAME, AppPaths

from .conftest import REPO

WORKFLOW = REPO / ".github" / "workflows" / "windows-arm64.yml"
NSIS = (REPO / "installer" / "captioner.nsi").read_text()
SPEC = (REPO / "installer" / "captioner.spec").read_text()
BUILD = (REPO / "installer" / "build.ps1").read_text()


@pytest.fixture(scope="module")
def workflow() -> dict:
    return yaml.safe_load(WORKFLOW.read_text())


def _job(workflow: dict) -> dict:
    (job,) = workflow["jobs"].values()
    return job


def _scripts(workflow: dict) -> str:
    """Every ``run:`` script of the job, joined."""
    return "\n".join(step["run"] for step in _job(workflow)["steps"] if "run" in step)


def _windows_data_dirs(monkeypatch: pytest.MonkeyPatch) -> dict[str, PureWindowsPath]:
    """platformdirs' Windows folders of captioner (as ``AppPaths.default`` asks for them), relative to
    %LOCALAPPDATA%."""
    import platformdirs.windows as win

    monkeypatch.setattr(win, "get_win_folder", lambda csidl: "LOCALAPPDATA" if csidl == "CSIDL_LOCAL_APPDATA"
                        else f"<{csidl}>")
    dirs = win.Windows(appname=APP_NAME, appauthor=False)
    rel = {kind: PureWindowsPath(getattr(dirs, f"user_{kind}_dir").replace("/", "\\")) for kind in
           ("data", "log", "cache", "config")}
    assert all(p.parts[0] == "LOCALAPPDATA" for p in rel.values()), rel  # all local, none roaming
    return {k: PureWindowsPath(*p.parts[1:]) for k, p in rel.items()}


def test_repository_paths_exist(workflow: dict) -> None:
    job = _job(workflow)
    clip = REPO / PureWindowsPath(job["env"]["CLIP"]).as_posix()
    assert clip.is_file(), clip
    scripts = _scripts(workflow)
    pytest_line = re.search(r"python -m pytest (.*)", scripts)
    assert pytest_line, "the test step is gone"
    tests = [a for a in pytest_line.group(1).split() if not a.startswith("-") and a != "no:cacheprovider"]
    assert len(tests) >= 4 and all(t.startswith("tests/") for t in tests), tests
    for path in tests:
        assert (REPO / path).exists(), path
    for script in re.findall(r"installer[\\/][\w.]+\.ps1", scripts):
        assert (REPO / PureWindowsPath(script).as_posix()).is_file(), script


def test_setup_program_name_matches_the_build(workflow: dict) -> None:
    scripts = _scripts(workflow)
    upload = next(s for s in _job(workflow)["steps"] if s.get("with", {}).get("name") == "captioner-win-arm64-setup")
    patterns = {upload["with"]["path"].replace("/", "\\"), *re.findall(r"dist\\captioner-\*[\w.-]+\.exe", scripts)}
    assert patterns == {r"dist\captioner-*-win-arm64-setup.exe"}
    assert '$setup = Join-Path $dist "captioner-$Version-win-arm64-setup.exe"' in BUILD
    assert '!define OUTFILE "captioner-${VERSION}-win-arm64-setup.exe"' in NSIS


def test_installed_files_are_what_the_installer_installs(workflow: dict) -> None:
    scripts = _scripts(workflow)
    assert '$inst = Join-Path $env:LOCALAPPDATA "Programs\\captioner"' in scripts
    assert 'InstallDir "$LOCALAPPDATA\\Programs\\${APP}"' in NSIS and '!define APP "captioner"' in NSIS
    exes = set(re.findall(r'EXE\(pyz, a\.scripts, \[\], name="([\w-]+)"', SPEC))
    assert exes == {"captioner", "captioner-cli"}
    uninstaller = re.search(r'WriteUninstaller "\$INSTDIR\\([\w.]+)"', NSIS)
    assert uninstaller
    installed = {f"{e}.exe" for e in exes} | {uninstaller.group(1)}
    named = set(re.findall(r'"([\w.-]+\.exe)"', scripts))
    assert named == installed, named ^ installed
    qnn = set(re.findall(r'"_internal\\onnxruntime_qnn\\([\w.]+)"', scripts))
    assert qnn and qnn <= set(bundle_parts.SNAPDRAGON_QNN_FILES), qnn
    # the Start menu shortcut and the uninstall key the NSIS script writes
    assert re.search(r'CreateShortcut "\$SMPROGRAMS\\captioner\.lnk"', NSIS)
    assert "Start Menu\\Programs\\captioner.lnk" in scripts
    assert '!define UNINST_KEY "Software\\Microsoft\\Windows\\CurrentVersion\\Uninstall\\${APP}"' in NSIS
    keys = set(re.findall(r'HKCU:\\Software\\Microsoft\\Windows\\CurrentVersion\\Uninstall\\(\w+)', scripts))
    assert keys == {"captioner"}, keys
    assert '$_.PSChildName -eq "captioner"' in scripts


def test_data_paths_are_the_apps(workflow: dict, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """Every path under %LOCALAPPDATA%\\captioner: the pack folder of the model installed by name, the
    log file, the session store."""
    dirs = _windows_data_dirs(monkeypatch)
    scripts = _scripts(workflow)
    assert "$data = Join-Path $env:LOCALAPPDATA \"captioner\"" in scripts
    assert dirs["data"] == PureWindowsPath("captioner") and dirs["config"] == dirs["data"]
    assert '!define DATA_DIR "$LOCALAPPDATA\\${APP}"' in NSIS  # what /REMOVEDATA removes
    installed = set(re.findall(r"models install ([\w.]+)", scripts))
    assert installed == {"tiny.en"}
    packs = {KNOWN_MODELS[m].pack_name for m in installed}
    assert packs == {pack_name(m) for m in installed} == {"whisper-tiny.en"}
    paths = AppPaths.default(tmp_path)  # the layout below the data folder
    packs_rel = paths.packs.relative_to(paths.data)
    # $LOCALAPPDATA-relative ("captioner\packs\X") and $data-relative ("packs\X\manifest.json") mentions
    mentioned = re.findall(r'"captioner\\packs\\([^"\\]+)"', scripts) + re.findall(r'"packs\\([^"\\]+)\\', scripts)
    assert len(mentioned) == 2 and set(mentioned) == packs, mentioned
    assert str(packs_rel) == "packs"
    assert "\\manifest.json" in scripts and (paths.packs / "x" / "manifest.json").name == "manifest.json"
    sessions = re.search(r'Join-Path \$data "([\w.]+)"', scripts)
    assert sessions and sessions.group(1) == paths.sessions_db.relative_to(paths.data).as_posix()
    log = re.search(r'"\$env:LOCALAPPDATA\\(captioner\\Logs)\\([\w.]+)"', scripts)
    assert log and PureWindowsPath(log.group(1)) == dirs["log"], log
    main_src = (REPO / "captioner" / "__main__.py").read_text()
    assert f'paths.logs / "{log.group(2)}"' in main_src


def _command_lines(scripts: str) -> list[list[str]]:
    """The arguments of every captioner command the workflow runs (installed CLI or pip package)."""
    found = []
    for line in scripts.splitlines():
        m = (re.search(r"& \$cli (.*)", line) or re.search(r"python -m captioner (.*)", line)
             or re.search(r'captioner-cli\.exe"\) (.*)', line))
        if not m:
            continue
        args = re.split(r"[|;>]|\s#", m.group(1))[0]
        args = args.replace("$env:CLIP", "clip.wav").replace("$pack", "packdir")
        found.append(shlex.split(args))
    return found


def test_every_command_line_parses(workflow: dict, capsys: pytest.CaptureFixture[str]) -> None:
    scripts = _scripts(workflow)
    commands = _command_lines(scripts)
    assert len(commands) == 7, commands
    parser = cli.build_parser()
    for args in commands:
        if args == ["--version"]:
            with pytest.raises(SystemExit) as exit_:
                parser.parse_args(args)
            assert exit_.value.code == 0
            continue
        parsed = parser.parse_args(args)
        assert parsed.command in cli.COMMANDS, args
    # the GUI: Start-Process captioner.exe -ArgumentList "--source-file", <clip>, "--model", "tiny.en", ...
    gui = re.search(r"\$gui -ArgumentList (.*?) -Wait", scripts.replace("\n", " "), re.S)
    assert gui, "the caption bar step is gone"
    items = [i.strip() for i in re.sub(r"\s+", " ", gui.group(1)).split(",")]
    args = [i.strip('"') if i.startswith('"') else "value" for i in items]
    assert args[0].startswith("-")  # cli.run reads options without a command as the app's
    parsed = parser.parse_args(["gui", *args])
    assert parsed.model in KNOWN_MODELS and parsed.screenshot and parsed.quit_after == 30
    capsys.readouterr()


def test_doctor_patterns_match_what_doctor_prints(workflow: dict, tmp_path: Path, tiny_pack: Pack,
                                                  capsys: pytest.CaptureFixture[str], monkeypatch) -> None:
    """``doctor`` as the workflow runs it: after a model was installed, and passing; on Windows, where the
    installed app's manifest makes UTF-8 its ANSI code page (``GetACP`` answered so here)."""
    patterns = re.findall(r'Select-String -Path doctor\.txt -Pattern "([^"]+)"', _scripts(workflow))
    assert len(patterns) == 2
    monkeypatch.setattr("captioner.commands.doctor.ansi_code_page", lambda: 65001)
    paths = AppPaths.default(tmp_path).ensure()
    shutil.copytree(tiny_pack.root, paths.packs / "whisper-tiny.en")
    code = cli.run(["doctor", "--no-verify"], paths)
    out = capsys.readouterr().out
    assert code == 0, out
    for pattern in patterns:
        assert re.search(pattern, out), (pattern, out)


def test_the_frozen_app_runs_in_utf8_by_its_manifest() -> None:
    """The spec embeds installer/captioner.manifest, and PyInstaller's own manifest writer (what the
    Windows build runs) keeps its activeCodePage UTF-8 (Windows 10 1903 and later), long paths and
    asInvoker."""
    from xml.dom import minidom

    from PyInstaller.utils.win32.winmanifest import create_application_manifest

    spec = (REPO / "installer" / "captioner.spec").read_text(encoding="utf-8")
    assert 'manifest=str(Path(SPECPATH) / "captioner.manifest")' in spec
    written = create_application_manifest((REPO / "installer" / "captioner.manifest").read_bytes())
    dom = minidom.parseString(written)
    (page,) = dom.getElementsByTagName("activeCodePage")
    assert page.firstChild.data == "UTF-8"
    assert page.getAttribute("xmlns") == "http://schemas.microsoft.com/SMI/2019/WindowsSettings"
    assert page.parentNode.tagName == "windowsSettings"
    (longpath,) = dom.getElementsByTagName("longPathAware")
    assert longpath.firstChild.data == "true"
    (level,) = dom.getElementsByTagName("requestedExecutionLevel")
    assert level.getAttribute("level") == "asInvoker"


def test_expected_words_are_the_clips(workflow: dict) -> None:
    clip = PureWindowsPath(_job(workflow)["env"]["CLIP"]).name
    expected = re.search(r"-notmatch '([a-z ]+)'", _scripts(workflow))
    assert expected
    manifest = REPO / "tests" / "data" / "speech" / "manifest.jsonl"
    items = [json.loads(line) for line in manifest.read_text().splitlines() if line.strip()]
    text = next(i["text"] for i in items if i["audio"] == clip)
    assert expected.group(1) in text.lower()


def test_the_pack_check_is_what_a_windows_arm64_install_builds(workflow: dict, tiny_checkpoint: Path,
                                                                tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The manifest keys and values the workflow expects of the installed pack are what the builder
    writes on Windows ARM64 (the host faked): fp32 graphs for the NPU, an int8 CPU variant."""
    from captioner.models import build

    expected = dict(re.findall(r"\$m\.([\w.]+) -ne \"(\w+)\"", _scripts(workflow)))
    assert expected == {"layers": "fp32", "vocab": "fp32", "cpu_variant.vocab": "int8"}
    monkeypatch.setattr(build, "_npu_host", lambda: True)
    pack = build.build_pack(tiny_checkpoint, tmp_path / "pack", build.BuildOptions(buckets=(3,)))
    for key, value in expected.items():
        node = pack.manifest
        for part in key.split("."):
            node = node[part]
        assert node == value, key

