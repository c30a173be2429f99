"""Child process of the crash test: records an endless engine-like session until it is killed.

Usage: ``python _crash_child.py DB LIVE_SRT SEED``. After each update is committed it prints
``committed <n>`` (n = updates committed so far) and flushes, so the parent knows a lower bound
of what must survive the kill.
"""

from __future__ import annotations

import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE), str(HERE.parents[1])]

from _streams import engine_like_updates  # noqa: E402

from captioner.transcript.recorder import SessionRecorder  # noqa: E402
from captioner.transcript.store import SessionStore  # noqa: E402


def main() -> None:
    db, live, seed = Path(sys.argv[1]), Path(sys.argv[2]), int(sys.argv[3])
    store = SessionStore.open(db)
    recorder = SessionRecorder.start(store, sources=("system",), model="crash-test", live_path=live)
    print(f"session {recorder.session_id}", flush=True)
    for n, update in enumerate(engine_like_updates(seed), start=1):
        recorder.apply(update)
        print(f"committed {n}", flush=True)


if __name__ == "__main__":
    main()
