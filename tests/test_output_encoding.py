"""A command's output redirected where the locale's encoding cannot hold every character.

On Windows, Python writes a redirected stdout or stderr (``> out.txt``, a pipe) in the ANSI code page,
cp1252 on a Western system; ``PYTHONIOENCODING=cp1252`` gives a child process here exactly that
stream. A session holding Chinese words and a mark is shown with both streams so redirected.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def test_a_redirected_output_in_a_narrow_code_page_gets_every_character_in_utf8(tmp_path: Path) -> None:
    session = {"version": 1, "session": {"started_at": "2026-01-02T03:04:05+00:00", "sources": ["system"],
                                         "language": "zh", "title": "廣州 call"},
               "words": [{"text": t, "start": i, "end": i + 0.8, "source": "system"}
                         for i, t in enumerate(["廣州市", "佛地產", "中間協會分析", "—", "★"])],
               "marks": [{"at": 1.5, "note": "价格 ★"}]}
    exported = tmp_path / "zh.json"
    exported.write_text(json.dumps(session, ensure_ascii=False), encoding="utf-8")
    env = {**os.environ, "CAPTIONER_HOME": str(tmp_path / "home"), "PYTHONIOENCODING": "cp1252",
           "PYTHONPATH": str(REPO)}

    def run(*args: str) -> subprocess.CompletedProcess[bytes]:
        return subprocess.run([sys.executable, "-m", "captioner", *args], env=env, capture_output=True, timeout=120)

    imported = run("sessions", "import", str(exported))
    assert imported.returncode == 0, imported.stderr.decode("utf-8", "replace")
    shown = run("sessions", "show", "1")
    assert shown.returncode == 0, shown.stderr.decode("utf-8", "replace")
    out = shown.stdout.decode("utf-8")  # UTF-8, whatever the locale's code page
    assert "廣州 call" in out and "廣州市 佛地產 中間協會分析" in out and "价格 ★" in out
    missing = run("sessions", "show", "廣州")  # an error naming what was typed, on stderr
    assert missing.returncode != 0 and "廣州" in missing.stderr.decode("utf-8")
    assert b"Traceback" not in missing.stderr + shown.stderr + imported.stderr
