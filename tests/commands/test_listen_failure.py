"""A ``listen`` whose audio cannot start (no PulseAudio server) says why in one line and leaves no
"(not ended)" session with no words behind (issue 26)."""

from __future__ import annotations

import os
import subprocess
import sys

from captioner.storage.paths import AppPaths
from captioner.transcript.store import SessionStore


def test_a_listen_that_cannot_capture_leaves_no_session(real_tiny_en_pack, tmp_path) -> None:
    home = tmp_path / "home"
    env = dict(os.environ, CAPTIONER_HOME=str(home), PULSE_SERVER=f"unix:{tmp_path}/no-such-server")
    done = subprocess.run([sys.executable, "-m", "captioner", "listen", "--model", str(real_tiny_en_pack.root),
                           "--provider", "cpu", "--seconds", "3"], env=env, capture_output=True, text=True,
                          timeout=120)  # fmt: skip
    assert done.returncode == 2, done
    assert done.stderr.startswith("captioner: error: ") and "PulseAudio" in done.stderr, done.stderr
    assert "Traceback" not in done.stderr
    with SessionStore.open(AppPaths.default(home).sessions_db) as store:
        assert store.list_sessions() == []


def test_a_title_too_long_is_refused_before_any_device_opens(tmp_path, capsys) -> None:
    from captioner import cli

    home = AppPaths.default(tmp_path / "home")
    assert cli.run(["listen", "--levels-only", "--seconds", "1", "--title", "x" * 201], home) == 2
    err = capsys.readouterr().err
    assert err.strip() == "captioner: error: a session's title is at most 200 characters; this one has 201"
