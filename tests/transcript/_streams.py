"""Deterministic engine-like update streams shared by the tests and the crash-test child process.

The streams follow the NPUsper emission rules (NPUSPER.md §11.4, §11.8): an update retracts the
previous update's speculative words of its source and, sometimes, the one committed word before
them, which a non-speculative update then replaces with at least one word. With ``settles``, an
update now and then says its source ``settled`` (nothing open): no later update retracts the words
before it, and no later word starts before its time.
"""

from __future__ import annotations

import random
from collections.abc import Iterator, Sequence
from pathlib import Path

from captioner.core import EngineUpdate, Source, Word, apply_update

TEXTS = (
    "hello",
    "world,",
    "this",
    "is",
    "a",
    "test.",
    "Yes!",
    "and",
    "then",
    "we",
    "went",
    "home",
    "why?",
    "שלום",
    "עולם.",
    "مرحبا",
    "😀",
    "👍🏽",
    "naïve",
    "café,",
    "--> arrow",
    "line\nbreak",
    "Straße",
    "日本語。",
)


def engine_like_updates(seed: int, sources: Sequence[Source] = ("system",), *,
                        settles: bool = False) -> Iterator[EngineUpdate]:
    """An endless stream of updates; the same seed always gives the same stream."""
    rng = random.Random(seed)
    clock = dict.fromkeys(sources, 0.0)
    speculative_tail = dict.fromkeys(sources, 0)
    committed = dict.fromkeys(sources, 0)
    emitted = 0.0
    while True:
        source = rng.choice(list(sources))
        if settles and not speculative_tail[source] and rng.random() < 0.2:
            clock[source] = round(clock[source] + rng.choice((0.0, 0.2, 0.6, 1.5, 4.0)), 3)  # the silence heard
            committed[source] = 0  # final now: no retraction reaches them
            yield EngineUpdate(source=source, settled=clock[source])
            continue
        retract = speculative_tail[source]
        replace_last = committed[source] > 0 and rng.random() < 0.3
        if replace_last:
            retract += 1  # overlap dedup: the last committed word is replaced by this round's first
            committed[source] -= 1
        speculative = not replace_last and rng.random() < 0.25  # dedup runs in non-speculative rounds
        t = clock[source]
        words = []
        for _ in range(rng.randint(1 if speculative or replace_last else 0, 6)):
            t += rng.choice((0.0, 0.05, 0.1, 0.3, 0.7, 2.5))
            duration = rng.uniform(0.1, 0.6)
            emitted = round(emitted + 0.1, 3)
            words.append(
                Word(rng.choice(TEXTS), round(t, 3), round(t + duration, 3), emitted, source, speculative)
            )
            t += duration
        if speculative:
            speculative_tail[source] = len(words)
        else:
            speculative_tail[source] = 0
            committed[source] += len(words)
            clock[source] = t
        yield EngineUpdate(retract, tuple(words), None, source)


def replay(updates: Sequence[EngineUpdate] | Iterator[EngineUpdate]) -> dict[str, list[Word]]:
    """Per-source word lists after applying ``updates`` with :func:`captioner.core.apply_update`."""
    state: dict[str, list[Word]] = {}
    for update in updates:
        apply_update(state.setdefault(update.source, []), update)
    return state


def saved_session(path: Path, title: str, text: str) -> int:
    """A store at ``path`` holding one ended session of ``text``'s words (0.4 s apart); its id."""
    from captioner.transcript.store import SessionStore

    with SessionStore.open(path) as store:
        sid = store.begin_session(title=title)
        store.apply(sid, EngineUpdate(0, tuple(Word(w, i * 0.4, i * 0.4 + 0.3) for i, w in enumerate(text.split()))))
        store.end_session(sid)
    return sid
