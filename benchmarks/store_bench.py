"""Session store and export throughput on a 10-hour synthetic session (~100 000 words).

Usage: ``python benchmarks/store_bench.py [--words 100000] [--dir DIR]``

Prints insert words/s (every engine update is one committed transaction, as in the app), the time of building cues and writing the SRT file, and the other exports. Goals from
issue 5: >= 5 000 words/s insert, SRT export < 5 s.
"""

from __future__ import annotations

import argparse
import random
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from a checkout without installing

from captioner.core import EngineUpdate, Word
from captioner.transcript.cues import build_cues
from captioner.transcript.export import export_words
from captioner.transcript.store import SessionStore

VOCAB = [
    "the",
    "of",
    "and",
    "to",
    "a",
    "in",
    "that",
    "is",
    "was",
    "he",
    "for",
    "it",
    "with",
    "as",
    "his",
    "on",
    "be",
    "at",
    "by",
    "I",
    "this",
    "had",
    "not",
    "are",
    "but",
    "from",
    "or",
    "have",
    "an",
    "they",
    "which",
    "one",
    "you",
    "were",
    "her",
    "all",
    "she",
    "there",
    "would",
    "their",
    "we",
    "him",
    "been",
    "has",
    "when",
    "who",
    "will",
    "more",
    "no",
    "if",
    "out",
    "so",
    "said",
    "what",
    "up",
    "its",
    "about",
    "into",
    "than",
    "them",
    "can",
    "only",
    "other",
    "new",
    "some",
    "could",
    "time",
    "these",
    "two",
    "may",
    "then",
    "do",
    "first",
    "any",
    "my",
    "now",
    "such",
    "like",
    "our",
    "over",
    "man",
    "me",
    "even",
    "most",
    "made",
    "after",
    "also",
    "did",
    "many",
    "before",
    "must",
    "through",
    "back",
    "years",
    "where",
    "much",
    "your",
    "way",
    "well",
    "down",
    "should",
    "because",
    "each",
    "just",
    "those",
    "people",
    "Mr",
    "how",
    "too",
    "little",
    "state",
    "good",
    "very",
    "make",
    "world",
]


def synthetic_updates(total_words: int, hours: float, seed: int = 0) -> list[EngineUpdate]:
    """Engine-like updates: 2 s rounds per source, ~20 % speculative rounds retracted by the next."""
    rng = random.Random(seed)
    rounds = int(hours * 3600 / 2.0)
    per_round = total_words / rounds / 0.8  # ~20 % of the appended words are retracted again
    updates: list[EngineUpdate] = []
    clock = {"system": 0.0, "mic": 0.0}
    last_spec = {"system": 0, "mic": 0}
    for r in range(rounds):
        source = "mic" if r % 4 == 3 else "system"
        n = max(1, round(rng.gauss(per_round, 1.5)))
        t = clock[source]
        words = []
        speculative = rng.random() < 0.2
        for _ in range(n):
            text = rng.choice(VOCAB)
            if rng.random() < 0.08:
                text += rng.choice(".,?!")
            dur = rng.uniform(0.15, 0.5)
            words.append(Word(text, t, t + dur, t + 1.0, source, speculative))
            t += dur + rng.choice((0.02, 0.05, 0.1, 0.6))
        updates.append(EngineUpdate(last_spec[source], tuple(words), None, source))
        last_spec[source] = n if speculative else 0
        if not speculative:
            clock[source] = t
    return updates


def main() -> None:
    """Insert a synthetic session into a fresh store, then time the cues and every export."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--words", type=int, default=100_000)
    parser.add_argument("--hours", type=float, default=10.0)
    parser.add_argument(
        "--dir", type=Path, default=None, help="folder for the store (default: a temp folder)"
    )
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(dir=args.dir) as tmp:
        folder = Path(tmp)
        updates = synthetic_updates(args.words, args.hours)
        appended = sum(len(u.words) for u in updates)
        store = SessionStore.open(folder / "sessions.sqlite3")
        sid = store.begin_session(sources=("system", "mic"), model="bench")
        t0 = time.perf_counter()
        for update in updates:
            store.apply(sid, update)
        insert_s = time.perf_counter() - t0
        store.end_session(sid)
        print(
            f"updates: {len(updates)} transactions, {appended} words appended, "
            f"{sum(u.retract for u in updates)} retracted"
        )
        print(
            f"insert: {insert_s:.2f} s = {appended / insert_s:,.0f} words/s, "
            f"{len(updates) / insert_s:,.0f} updates/s (one transaction per update, WAL fsynced at least every second)"
        )

        t0 = time.perf_counter()
        words = store.session_words(sid)
        read_s = time.perf_counter() - t0
        t0 = time.perf_counter()
        cues = build_cues(words)
        cues_s = time.perf_counter() - t0
        t0 = time.perf_counter()
        export_words(words, folder / "out.srt")
        srt_s = time.perf_counter() - t0
        print(f"committed words: {len(words)}; read {read_s:.2f} s; {len(cues)} cues built in {cues_s:.2f} s")
        print(
            f"SRT export (cues + render + atomic write): {srt_s:.2f} s; "
            f"read + SRT export: {read_s + srt_s:.2f} s; file {(folder / 'out.srt').stat().st_size / 1e6:.1f} MB"
        )
        for fmt in ("vtt", "txt", "json"):
            t0 = time.perf_counter()
            export_words(words, folder / f"out.{fmt}")
            print(f"{fmt.upper()} export: {time.perf_counter() - t0:.2f} s")
        t0 = time.perf_counter()
        hits = store.search("people must")
        print(f"search 'people must': {len(hits)} hits in {time.perf_counter() - t0:.3f} s")
        store.close()


if __name__ == "__main__":
    main()
