"""The real app on Xvfb with an engine too slow for real time: the bar and the tray say "behind — skipping",
the transcript records the gaps, and both clear once the load goes away (issue 16, overload); with the
lag rule's longer step, the same load is absorbed: the tray says "captions every 2 s to keep up" and
nothing is skipped.

``xcb_overload_driver.py`` runs the app as ``captioner --source-file`` assembles it (real FileSource at
real pace, the tiny pack on the CPU, real store, real tray in trayer) with the encoder slowed to three
times real time for the first 5 s of rounds, and records the bar's badge and the tray's status line
every 100 ms.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import srt

from captioner.engine.overload import SKIPPING_HOLD_STEPS
from tests.ui.test_gui_xvfb import REPO, SPEECH, new_home, pixel_variance

pytestmark = pytest.mark.gui

STEP_S = 1.0  # new_home's settings
SLOW_S = 5.0


@pytest.fixture(scope="module")
def long_speech_wav(tmp_path_factory) -> Path:
    """About 18 s of English speech from espeak-ng (the passage twice)."""
    if shutil.which("espeak-ng") is None:
        pytest.skip("needs espeak-ng (scripts/setup --dev installs it)")
    out = tmp_path_factory.mktemp("speech") / "long.wav"
    subprocess.run(["espeak-ng", "-w", str(out), f"{SPEECH} {SPEECH}"], check=True, capture_output=True)
    return out


def test_overloaded_app_says_behind_skipping_records_gaps_and_recovers(xserver, tiny_pack, long_speech_wav,
                                                                       tmp_path, artifacts):
    home = new_home(tmp_path)
    env = xserver.env(PYTHONPATH=str(REPO))
    res = subprocess.run([sys.executable, str(REPO / "tests" / "ui" / "xcb_overload_driver.py"), "--home", str(home),
                          "--pack", str(tiny_pack.root), "--wav", str(long_speech_wav), "--out", str(artifacts),
                          "--slow-s", str(SLOW_S), "--slow-rtf", "3", "--no-adapt-step"],
                         env=env, capture_output=True, text=True, timeout=300)
    assert res.returncode == 0, f"stdout: {res.stdout[-3000:]}\nstderr: {res.stderr[-3000:]}"
    report = json.loads(res.stdout.split("REPORT ", 1)[1])
    assert report["platform"] == "xcb" and report["exit_code"] == 0
    samples = report["samples"]
    skipping = [s for s in samples if s[2].startswith("behind — skipping · ")]
    assert skipping, samples
    assert any("behind — skipping, lag" in s[3] for s in samples)  # the tray's status line too
    assert report["infos"] == ["Captions are behind — skipping"]  # told once
    assert pixel_variance(Path(report["skipping_shot"])) > 50

    # the transcript records every skipped span, and its SRT export shows them
    gaps = report["gaps"]
    assert gaps
    marks = [s for s in srt.parse(Path(report["srt"]).read_text(encoding="utf-8")) if s.content == "[…]"]
    assert [(m.start.total_seconds(), m.end.total_seconds()) for m in marks] == [tuple(g) for g in gaps]

    # recovery: once the load went away (slow_until_s) the badge and the tray's "behind" clear, after
    # the slow round then running and the hold of SKIPPING_HOLD_STEPS steps, and do not come back
    shown = [s[0] for s in samples if s[1]]
    assert shown[-1] >= report["slow_until_s"] - SLOW_S  # (sanity: the badge was shown during the load)
    late = [s for s in samples if s[0] > shown[-1]]
    assert late and late[-1][0] - shown[-1] >= 1.0, (shown[-1], samples[-1])  # seen clear for a while
    assert not any(s[1] for s in late) and not any("behind" in s[3] for s in late)
    assert shown[-1] <= report["slow_until_s"] + 3 * 3 * STEP_S + SKIPPING_HOLD_STEPS * STEP_S + 1.0


def test_the_same_load_with_a_longer_step_skips_nothing_and_the_tray_says_so(xserver, tiny_pack, long_speech_wav,
                                                                             tmp_path, artifacts):
    """The lag rule as the app runs it: the step is lengthened (here to 3 s) before anything is
    skipped, the tray's status line says how often captions come now, and no gap, no skip badge and
    no "skipping" message come."""
    home = new_home(tmp_path)
    env = xserver.env(PYTHONPATH=str(REPO))
    res = subprocess.run([sys.executable, str(REPO / "tests" / "ui" / "xcb_overload_driver.py"), "--home", str(home),
                          "--pack", str(tiny_pack.root), "--wav", str(long_speech_wav), "--out", str(artifacts / "adapt"),
                          "--slow-s", str(SLOW_S), "--slow-rtf", "3"],
                         env=env, capture_output=True, text=True, timeout=300)
    assert res.returncode == 0, f"stdout: {res.stdout[-3000:]}\nstderr: {res.stderr[-3000:]}"
    report = json.loads(res.stdout.split("REPORT ", 1)[1])
    samples = report["samples"]
    assert any("captions every 2 s to keep up" in s[3] or "captions every 3 s to keep up" in s[3] for s in samples), samples
    assert not report["gaps"] and not any("skipping" in s[2] or "skipping" in s[3] for s in samples)
    assert report["infos"] == []
