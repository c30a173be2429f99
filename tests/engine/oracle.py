"""A scripted AcousticModel for the streaming-policy tests.

The oracle knows a *script*: words (token ids) with audio times, spoken over seeded noise. It learns
which part of the script a round covers **from the samples alone** (an exact lookup of the first
samples of the round's audio in the script's audio, then a full comparison), so the stream cannot
pass it hidden information. Its chunk runner then "decodes" like an ideal Whisper:

* the words whose middle lies in the input, in order, after the forced prefix word (found in the
  script near the input start); a word cut by the input's end is truncated (its first token, or a
  different short token) when at least half of it is inside, else omitted;
* every token's cross-attention (``attn_last`` and ``attn_align`` alike) is a Cauchy bump (half-width
  3 frames) at the token's audio position over a small floor;
* after the last word EOT wins with a garbage runner-up;
* on command it plants hallucinations (:class:`Plant`): a ghost word whose attention jumps back,
  a token repeated three times, a non-garbage runner-up after EOT attending backwards, or another
  garbage runner-up.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field

import numpy as np

from captioner.engine.model import SAMPLES_PER_FRAME, ChunkOutput, Encoding
from captioner.engine.tokens import Vocabulary
from captioner.models.pack import SpecialTokens

SR = 16_000
N_WORDS = 300  # " w000" … : script word tokens
N_TRUNC = N_WORDS  # " t000" … : the truncated form of a single-token word
SUBWORDS = (b"ing", b"er", b"ly", b"ed")
PUNCT = (b".", b",", b"?")
GHOSTS = tuple(f" ghost{i}".encode() for i in range(20))
RUNNER_UPS = (b" you", b" thanks", b" so")
REPEAT = b" la"
GARBAGE = (b" -", b"\xe2\x80\x94")  # no ASCII alphanumeric (with PUNCT: the garbage runner-ups)


@dataclass(frozen=True)
class Vocab:
    """The synthetic vocabulary and the ids the oracle uses."""

    vocab: Vocabulary
    word: tuple[int, ...]
    trunc: tuple[int, ...]
    subword: tuple[int, ...]
    punct: tuple[int, ...]
    ghost: tuple[int, ...]
    runner_up: tuple[int, ...]
    repeat: int
    garbage: tuple[int, ...]


def make_vocab(multilingual: bool = True) -> Vocab:
    """A small vocabulary: ordinary tokens, then EOT and Whisper's special tokens."""
    table: list[bytes] = []

    def add(items) -> tuple[int, ...]:
        first = len(table)
        table.extend(items)
        return tuple(range(first, len(table)))

    word = add(f" w{i:03d}".encode() for i in range(N_WORDS))
    trunc = add(f" t{i:03d}".encode() for i in range(N_TRUNC))
    subword = add(SUBWORDS)
    punct = add(PUNCT)
    ghost = add(GHOSTS)
    runner_up = add(RUNNER_UPS)
    (repeat,) = add([REPEAT])
    garbage = punct + add(GARBAGE)
    eot = len(table)
    names = ["<|endoftext|>", "<|startoftranscript|>"]
    langs = ["en", "de", "fr"] if multilingual else []
    names += [f"<|{lang}|>" for lang in langs]
    names += ["<|translate|>", "<|transcribe|>", "<|startoflm|>", "<|startofprev|>", "<|nospeech|>"]
    names += ["<|notimestamps|>", "<|0.00|>", "<|0.02|>"]
    table.extend(n.encode() for n in names)
    ids = {n: eot + i for i, n in enumerate(names)}
    special = SpecialTokens(
        eot=eot,
        sot=ids["<|startoftranscript|>"],
        transcribe=ids["<|transcribe|>"] if multilingual else None,
        translate=ids["<|translate|>"] if multilingual else None,
        notimestamps=ids["<|notimestamps|>"],
        first_timestamp=ids["<|0.00|>"],
        startofprev=ids["<|startofprev|>"],
        nospeech=ids["<|nospeech|>"],
        languages={lang: ids[f"<|{lang}|>"] for lang in langs},
    )
    vocab = Vocabulary(table, special, multilingual=multilingual)
    return Vocab(vocab, word, trunc, subword, punct, ghost, runner_up, repeat, tuple(sorted(set(garbage))))


@dataclass(frozen=True)
class ScriptWord:
    """A spoken word: its tokens and its audio span in samples."""

    tokens: tuple[int, ...]
    start: int
    end: int

    @property
    def mid(self) -> int:
        return (self.start + self.end) // 2


@dataclass
class Script:
    """Words over seeded noise (``audio``), with the lookup the oracle uses to locate rounds."""

    words: list[ScriptWord]
    audio: np.ndarray
    index: dict[bytes, int] = field(default_factory=dict, repr=False)

    def __post_init__(self) -> None:
        a = self.audio
        self.index = {}
        for p in range(0, a.size - 8, SAMPLES_PER_FRAME):  # first occurrence (silence repeats)
            self.index.setdefault(a[p : p + 8].tobytes(), p)

    def locate(self, audio: np.ndarray) -> tuple[int, int]:
        """Offset of ``audio`` in the script's audio and how many of its samples are the script's
        (the rest: the digital silence an input is heard with), found from the samples alone."""
        off = self.index.get(np.asarray(audio[:8], np.float32).tobytes())
        if off is None:
            raise AssertionError("round audio is not a frame-aligned part of the script")
        real = min(audio.size, self.audio.size - off)
        if np.array_equal(audio[:real], self.audio[off : off + real]) and not np.any(audio[real:]):
            return off, audio.size
        heard = heard_n(audio)  # an input heard with digital silence after it (an opening round's)
        if not (heard < real and np.array_equal(audio[:heard], self.audio[off : off + heard])):
            raise AssertionError("round audio does not match the script")
        return off, heard


def heard_n(audio: np.ndarray) -> int:
    """Samples of ``audio`` before the digital silence it is heard with, in whole 20 ms frames."""
    nonzero = np.flatnonzero(audio)
    n = int(nonzero[-1]) + 1 if nonzero.size else audio.size
    return -(-n // SAMPLES_PER_FRAME) * SAMPLES_PER_FRAME


def random_script(v: Vocab, rng: random.Random, *, n_words: int, rate: float = 1.0, pauses: float = 0.1,
                  max_pause_s: float = 2.0, tail_s: float = 1.0, amplitude: float = 0.1) -> Script:
    """Words of 0.15–0.6 s (scaled by 1/rate), small gaps, some pauses; no id three times in a row."""
    words: list[ScriptWord] = []
    t = rng.uniform(0.1, 1.0)
    last_base = -1
    for _ in range(n_words):
        dur = rng.uniform(0.15, 0.6) / rate
        base = rng.randrange(N_WORDS)
        while base == last_base:
            base = rng.randrange(N_WORDS)
        last_base = base
        kind = rng.random()
        tokens: tuple[int, ...] = (v.word[base],)
        if kind < 0.2:
            tokens += (rng.choice(v.subword),)
        elif kind < 0.3:
            tokens += (rng.choice(v.punct),)
        start = int(t * SR)
        words.append(ScriptWord(tokens, start, start + int(dur * SR)))
        t += dur + (rng.uniform(0.5, max_pause_s) if rng.random() < pauses else rng.uniform(0.0, 0.15))
    total = int((t + tail_s) * SR)
    noise = np.random.default_rng(rng.randrange(2**32)).standard_normal(total).astype(np.float32) * amplitude
    return Script(words, noise)


@dataclass
class Plant:
    """Hallucinations to plant. Probabilities apply per round (drawn from the oracle's RNG);
    ``force`` lists (round, kind) pairs planted deterministically (kind as in ``KINDS``)."""

    ghost: float = 0.0
    repeat: float = 0.0
    runner_up: float = 0.0
    force: dict[int, str] = field(default_factory=dict)
    ghost_id: int | None = None  # always use this ghost (to trigger the re-inference)
    ghost_at: int | None = None  # insert the ghost after this many decoded entries
    repeat_at: int | None = None  # plant the repeat before this many decoded entries (0: first)

    KINDS = ("ghost", "repeat", "runner_up")


class SimClock:
    """A simulated monotonic clock; the oracle adds its simulated compute cost to it."""

    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


@dataclass
class _Entry:
    token: int
    center: float  # attention centre, frames (relative to the round's input)
    eot_wins: bool = False


class OracleModel:
    """The scripted :class:`~captioner.engine.model.AcousticModel`.

    Attributes:
        rounds: per encode call, (offset, samples, native_30s) — what the stream sent.
        planted: per round, the kind planted (or None).
    """

    provider = "oracle"
    buckets = (3, 4, 5, 6, 30)

    def __init__(self, script: Script, v: Vocab, *, plant: Plant | None = None, seed: int = 0,
                 clock: SimClock | None = None, encode_cost_s: float = 0.04, chunk_cost_s: float = 0.01):
        self.script = script
        self.v = v
        self.vocab = v.vocab
        self.plant = plant or Plant()
        self.rng = random.Random(seed)
        self.clock = clock
        self.encode_cost_s = encode_cost_s
        self.chunk_cost_s = chunk_cost_s
        self.rounds: list[tuple[int, int, bool]] = []
        self.planted: list[str | None] = []
        self.chunks_run = 0
        self.prompts: list[list[int]] = []  # the forced special tokens each decode saw
        self.prefixes: list[list[int]] = []  # the forced prefix each decode saw
        self._last_ghost: int | None = None
        self._last_runner_up: int | None = None

    def chunk_plan(self, bucket: int, prefixed: bool) -> tuple[tuple[int, int], ...]:
        sizes = [6, 4, 5, 5, 5, 5] if prefixed else [4, 6, 5, 5, 5, 5]
        if bucket == 30:
            sizes += [5] * 38 + [4]
        plan, start = [], 0
        for size in sizes:
            plan.append((start, size))
            start += size
        return tuple(plan)

    def encode(self, audio: np.ndarray, *, native_30s: bool = False) -> Encoding:
        assert audio.dtype == np.float32 and audio.ndim == 1
        assert audio.size % SAMPLES_PER_FRAME == 0 and 0 < audio.size <= 30 * SR
        off, n = self.script.locate(audio)
        self.rounds.append((off, audio.size, native_30s))
        if self.clock is not None:
            self.clock.now += self.encode_cost_s
        dur = audio.size / SR
        bucket = 30 if native_30s else next(b for b in self.buckets if dur <= b)
        return Encoding(bucket, audio.size // SAMPLES_PER_FRAME, 50 * bucket, native_30s, 1.0, 2.0,
                        payload=(off, n))

    def decoder(self, encoding: Encoding) -> OracleRunner:
        return OracleRunner(self, encoding)

    # ------------------------------------------------------------------ the oracle's "hearing"
    def transcript(self, off: int, n: int, prefix: list[int], native: bool) -> list[_Entry]:
        """What an ideal model decodes from ``[off, off+n)`` after ``prefix``."""
        words = self.script.words
        end = off + n
        first = None
        if prefix:  # the prefix word: the occurrence nearest to where the carry puts it (0.2 s in)
            same = [k for k, w in enumerate(words) if w.tokens == tuple(prefix) and w.end > off - SR and w.start < end]
            if same:
                first = min(same, key=lambda k: abs(words[k].start - (off + 0.2 * SR))) + 1
        if first is None:
            first = next((k for k, w in enumerate(words) if w.mid >= off), len(words))
        entries: list[_Entry] = []
        for w in words[first:]:
            if w.start >= end:
                break
            if w.mid < off:
                continue
            frames = lambda t: (t - off) / SAMPLES_PER_FRAME  # noqa: E731
            if w.end <= end:
                k = len(w.tokens)
                for j, tok in enumerate(w.tokens):
                    entries.append(_Entry(tok, frames(w.start + (j + 0.5) * (w.end - w.start) / k)))
            elif end - w.start >= (w.end - w.start) / 2:
                tok = w.tokens[0] if len(w.tokens) > 1 and self.vocab.subword[w.tokens[1]] else None
                if tok is None:
                    tok = self.v.trunc[self.v.word.index(w.tokens[0])]
                entries.append(_Entry(tok, frames((w.start + end) / 2)))
                break
            else:
                break
        kind = None if native else self._choose_plant()
        self.planted.append(kind)
        if kind is not None:
            entries = self._plant(kind, entries)
        entries.append(_Entry(self.rng.choice(self.v.garbage), entries[-1].center if entries else 0.0, eot_wins=True))
        return entries

    def _choose_plant(self) -> str | None:
        r = len(self.planted)
        if r in self.plant.force:
            return self.plant.force[r]
        for kind in Plant.KINDS:
            if self.rng.random() < getattr(self.plant, kind):
                return kind
        return None

    def _plant(self, kind: str, entries: list[_Entry]) -> list[_Entry]:
        content = [i for i, e in enumerate(entries) if self.vocab.content[e.token]]
        if kind == "repeat" and content:
            at = self.rng.choice(content) + 1 if self.plant.repeat_at is None else self.plant.repeat_at
            c = entries[max(0, at - 1)].center
            return entries[:at] + [_Entry(self.v.repeat, c)] * 3 + entries[at:]
        if kind in ("ghost", "runner_up") and len(content) >= 2:
            at = self.rng.choice(content[1:]) + 1 if kind == "ghost" else len(entries)
            if kind == "ghost" and self.plant.ghost_at is not None:
                at = self.plant.ghost_at
            prev = max(e.center for e in entries[:at])
            back = min(max(20.0, entries[0].center), prev - 25.0)
            if back < 20.0:
                return entries
            if kind == "ghost":
                ghost = self.plant.ghost_id
                if ghost is None:
                    ghost = self.rng.choice([g for g in self.v.ghost if g != self._last_ghost])
                self._last_ghost = ghost
                return [*entries[:at], _Entry(ghost, back), *entries[at:]]
            runner_up = self.rng.choice([t for t in self.v.runner_up if t != self._last_runner_up])
            self._last_runner_up = runner_up  # never the same twice in a row: no accidental re-inference
            return [*entries, _Entry(runner_up, back, eot_wins=True)]
        return entries


def bump(center: float, n: int, width: float = 3.0, floor: float = 1e-4) -> np.ndarray:
    """A normalised attention vector over ``n`` frames peaking at ``center``: a Cauchy profile of
    half-width ``width`` frames over a small floor. The heavy tails make the token nearest to a
    frame the most attended one there (as in Whisper's alignment heads), which DTW relies on."""
    f = np.arange(n, dtype=np.float64)
    a = floor + 1.0 / (1.0 + ((f - center) / width) ** 2)
    return (a / a.sum()).astype(np.float32)


class OracleRunner:
    """The oracle's ChunkRunner: follows the forced tokens, then its transcript."""

    def __init__(self, model: OracleModel, encoding: Encoding):
        self.model = model
        self.encoding = encoding
        self.off, self.n = encoding.payload
        self.seq: list[int] = []  # tokens at consumed positions
        self.entries: list[_Entry] | None = None
        self.gen_start = 0  # position of the first generated token

    def run(self, start: int, size: int, token: int, forced: np.ndarray) -> ChunkOutput:
        m = self.model
        assert start == len(self.seq), "chunks must be contiguous"
        assert forced.dtype == np.int64 and forced.shape == (size - 1,)
        nf = self.encoding.n_frames
        eot = m.vocab.eot
        out_tok = np.zeros(size, np.int64)
        tlog = np.ones(size, np.float32)
        elog = np.zeros(size, np.float32)
        attn = np.zeros((size, nf), np.float32)
        for s in range(size):
            p = start + s
            tok = token if s == 0 else int(forced[s - 1]) if forced[s - 1] >= 0 else int(out_tok[s - 1])
            self.seq.append(tok)
            k = p - self.gen_start
            if self.entries is not None and 0 <= k < len(self.entries) and tok != self.entries[k].token:
                self.entries = None  # that position was forced after all (a longer prefix)
                self.model.planted.pop()
            if self.entries is not None and 0 <= k < len(self.entries):
                attn[s] = bump(self.entries[k].center, nf)
            else:
                attn[s] = np.full(nf, 1.0 / nf, np.float32)
            next_forced = s < size - 1 and forced[s] >= 0
            if self.entries is None and not next_forced:
                prefix = [t for t in self.seq if t < eot]
                m.prompts.append([t for t in self.seq if t >= eot])
                m.prefixes.append(prefix)
                self.entries = m.transcript(self.off, self.n, prefix, self.encoding.native_30s)
                self.gen_start = p + 1
            k = p + 1 - self.gen_start
            if self.entries is not None and 0 <= k < len(self.entries):
                e = self.entries[k]
                out_tok[s], elog[s] = e.token, 2.0 if e.eot_wins else 0.0
            else:
                out_tok[s], elog[s] = m.v.garbage[0], 2.0
        m.chunks_run += 1
        if m.clock is not None:
            m.clock.now += m.chunk_cost_s
        return ChunkOutput(out_tok, tlog, elog, attn, attn.copy(), elapsed_ms=1.0)


def run_stream(stream, audio: np.ndarray, clock: SimClock, *, block_s: float = 0.1, before_finish=None):
    """Feed ``audio`` in blocks at real-time pace on the simulated clock (a block is fed once it has
    "arrived"; compute cost pushes the clock forward, so a slow round makes the next one longer),
    calling ``step()`` after each block, then ``finish()``. Returns (words, updates)."""
    from captioner.core import apply_update

    words, updates = [], []
    bs = max(1, int(block_s * SR))
    for pos in range(0, audio.size, bs):
        block = audio[pos : pos + bs]
        clock.now = max(clock.now, (pos + block.size) / SR)
        stream.feed(block)
        update = stream.step()
        if update is not None:
            apply_update(words, update)
            updates.append(update)
    if before_finish is not None:
        before_finish()
    update = stream.finish()
    apply_update(words, update)
    updates.append(update)
    return words, updates
