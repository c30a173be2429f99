"""The real clips of ``tests/data/speech`` (LibriSpeech and LJ Speech; licences in its README)."""

from __future__ import annotations

import json
from pathlib import Path

DATA = Path(__file__).resolve().parents[1] / "data" / "speech"
CLIPS = [json.loads(line) for line in (DATA / "manifest.jsonl").read_text(encoding="utf-8").splitlines() if line]
