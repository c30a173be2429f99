"""The streaming session: audio in, validated and timed words out (the NPUsper engine).

A :class:`Stream` runs one **round** every ``step_s`` of new audio. What a round decodes is decided
before anything is decoded, by one pure function of the stream's state and the speech detector's
answer (:func:`~captioner.engine.rounds.plan_round`), and executed by one path
(:meth:`Stream._run_round`). The rules follow the life of an utterance; the numbers in brackets are
the rows of ``docs/accuracy/deviations.md``, which keeps why each rule is there and what it measured.

======== ======================================================= ============================================ ====================
kind     when                                                    input ``[start, end)`` and what is heard     prefix / draft
======== ======================================================= ============================================ ====================
skip     input empty; a live input under ``min_chunk_s``         —: the input is carried (under 1 s: all of   —
         (``"short"``); digital silence [2, 40] (``"silence"``);  it; else its last 2 × step), nothing decoded
         no speech and no open utterance [15] (``"no_speech"``)
opening  live, the open utterance at most ``opening_s`` long     the whole utterance from its start, heard    none / its drafts,
         (its start to the input's end) [20], or the rest of     with silence to ``opening_window_s``         replaced
         an utterance after a closing round, its drafts shown
         [48]
live     the speech goes on                                      carry + new audio (last 30 s), leading       the carry's word
                                                                 non-speech trimmed when nothing is forced    (§2.5) / none
                                                                 [15]; masked (the paper's round)
live,    at steps under 2 s, a live input shorter than           from the drafted word that starts            that word / the
reaching ``min_context_s`` [20]                                  ``min_context_s`` before its end; masked     drafts after it,
back                                                                                                          replaced
closing  the speech ended ``end_silence_s`` before the input's   cut ``speech_pad_s`` after the speech [16];  none / the
         end, an open utterance's input has no speech, or        reaching back up to ``closing_context_s``    committed words of
         ``finish()`` [1, 16]                                    to a committed word's start in the           that audio,
                                                                 utterance [17]; heard with silence to the    replaced [17]
                                                                 smallest bucket ≥ 10 s (10, 20, 30 s) [18]
closing, a closing round of the stream's first utterance whose   from the stream's first sample, heard in     none / the
whole    input ends within 30 s of the stream's first sample     the 30 s window: offline Whisper's decode    drafts, replaced
         (not in a hurry) [27]                                   of the recording so far
closing, a later utterance's closing round, its input shorter    from the first committed word that starts    none / the
after    than ``closing_before_s`` (19.6 s), after final words   ``closing_before_s`` before the input's end  utterance's
words    the stream still keeps (not in a hurry; where the       (less the pad): the final words before the   drafts, replaced;
         language is detected, only where its own input is       utterance heard before it, as offline        the final words
         heard in their language) [52]                           Whisper's window hears a sentence            stay
closing, an open utterance ``closing_split_s`` long or longer    to the latest pause (``speech_pad_s`` into   none / the
at a     (not in a hurry) whose round input holds a pause of     it) as any closing round; the audio after    committed words of
pause    ``split_pause_s`` or more that speech follows [31]      it is carried: the utterance goes on there   that audio, replaced
======== ======================================================= ============================================ ====================

Speech is what the speech detector (Silero VAD, 32 ms windows) rates at ``vad_threshold`` or more, and
any ``speech_faint_s`` stretch that never reaches it but averages ``speech_faint`` or more (band-limited
radio turns that Silero rates 0.25–0.45 throughout) [32] or averages ``speech_weak`` or more while it
stands ``speech_weak_db`` above the recording's quiet level (where it stands that high: an edited radio
channel rated 0.05–0.4) [45], and the speaker going on where Silero lets go: a window ``speech_loud_db``
above the recording's quiet level and within 10 dB of the phrase before it, between two phrases the
threshold heard at most ``speech_bridge_s`` apart (a meeting's soft "I mean"), which counts as speech
while the second phrase may still come [39]. A round that opens an utterance (the first with speech
after none) sets its start (the input's start) and its speech onset: no word starts before the onset
[15], unless a decode times two or more words wholly before it (speech the detector missed). Until
the closing round, the utterance's words are **drafts** (``Word.speculative``: dimmed, not final for
the printer and the live subtitle file) [17]; after it, the last closed utterance's words stay
not final (published the same way, and ``Word.rereadable``: "stable words only" shows them, which hides
drafts) until the next closing round has had the chance to read them again,
or until the stream is ``closing_before_s`` past them, where no closing decode reaches back, or
``closing_reread_s`` (10 s; word by word), or its end [53]. A caller behind real time sets
:attr:`Stream.hurry`: rounds then neither look back nor reach back (each decodes only its own input, as
the paper's rounds do) and the drafts stand; such a closing round (or one with nothing committed yet)
keeps the carry's prefix and commits its words as a live round does, without speculation.

Decoding: live and opening rounds greedy, in chunks of the pack's chunk plan
(:mod:`~captioner.engine.decoder`); a forced prefix longer than the plan has room for is not forced
[14]; words decoded again are proposed to the verifier (draft decoding: the same tokens, up to five
confirmed per dispatch). Closing rounds can search with five hypotheses instead, as offline Whisper
decodes by default (``closing_beam`` with a pack built with ``--beam 5``, :mod:`~captioner.engine.beam`;
not the whole-recording decode [27], not in a hurry; the round's guards read the chosen
hypothesis): measured and not the default [43]. The guards of
:mod:`~captioner.engine.validate`: live rounds stop on the paper's tests (EOT with a garbage
runner-up, backward shift (not while the speech detector hears the speech go on ``backward_speech_s``,
1 s, after where the decoder attended [46]), peak margin (0.15 s, the paper's 0.6 s quartered [41]),
token limit [6]); closing rounds end on EOT whenever it wins
and have no attention stops [16]; the two word guards (a phrase repeated with the committed words as
context: those before the input, or with a forced word those before it in the log, whatever their
times [44]; sound annotations) run in every round. A live or opening round that the phrase guard stopped at
a repeat is followed, on the same input (its start within 0.1 s, the same prefix), by rounds that keep
that one repeat after the same words: a step more of audio does not change the guard's evidence, and
stopping there again froze the captions until the utterance closed; a later copy is judged as before
[49]. A live or opening round whose decode the token guards stopped at a loop (one id three times, a
block of tokens inside a word three times: a failed decode, which speech never sounds like) is decoded
again heard in the 30 s window, and that decode is kept when it does not loop
[50]. Language (``"auto"`` on a multilingual model): read
from the first decoder step of every round until 4 s of input settle it, and of every closing
round [19], among the languages the user speaks where ``languages`` lists them (their probabilities
among them; the first is the language before any is heard; PRODUCT.md's "a short list the user
speaks"); a live round changes it only where it hears another language with probability 0.8 or
more, a closing round at any probability [42]; once a closing round has heard it on 4 s or more it is
the session's: live rounds no longer read it, and a closing round changes it only where it hears
another language with probability 0.8 or more [33]. Before that, a closing round that is unsure of the language (under 0.5)
and whose decode looks wrong by Whisper's own signs (token limit, compression, log-probability) is
decoded in the other of its two likeliest languages too, and that decode is kept with its language
when it looks right [38]. A closing round that would reach back to the final words before its
utterance reads the language on the utterance's own input first, and reaches back only where what it
hears there leaves the stream's language, that of those final words, as it is (and not unsure); else it
decodes the utterance alone [52].

After the decode, by kind:

* **live** (the paper's §11, in its order): DTW word times on the real frames only [3, 54]; an
  unreliable round (its last word ends before ``unreliable_fraction`` of the input, or a single
  word) is shown speculatively and retracted by the next round [7, 8]; the overlap dedup drops the
  re-decoded last word (or replaces it when it gained punctuation, keeping its first-shown time)
  [9–12]; the carry is cut 0.2 s before the second-to-last word (at most 2 × step, never past the
  last word's start) [9]; two identical backward-shift stops in a row: the input is decoded again as
  stock Whisper on a 30 s window (§11.3, [13]).
* **opening / reaching back**: the same, except that the drafts after the prefix are replaced
  (unchanged words at the same place keep their first-shown time [10, 51]) instead of
  deduplicated; a decode that keeps no token (a guard stopped it at its first word) replaces
  nothing: the drafts stand, and the round is an empty one (its input's last 2 × step carried) [47].
* **closing**: a decode heard in a window under 30 s that looks wrong by Whisper's own signs (a
  word guard or the token limit stopped it, its text compresses more than 2.4 times, or its average
  log-probability is below −1) is decoded again heard in the 30 s window; the retry is kept when it
  looks right, and when both look wrong the one with the higher average log-probability among those
  that did not loop [23, 24]. A decode that the phrase-repetition guard still stopped is decoded
  again in the 30 s window without that guard, as offline Whisper decodes it, and that decode is
  kept when it looks right by the same signs and says no block of two or more words four times in
  a row (the loop the guard had stopped) [37]. A decode that reached back before its utterance
  [52] must begin with the final words before it (matched by text among its first words) and hear the
  utterance after them (a word at least, and at least half as many as its drafts), else the
  utterance's own input is decoded instead; the final words stay, and its words after them replace
  the drafts, except the last closed utterance's words where the decode reads them otherwise, after
  a word it reads alike, and is surer of its reading (their tokens' mean log-probability), unless it
  reads fewer than 70 % of the final words alike or leaves three in a row out: from there its words
  replace them too, timed within their audio [53]; where DTW over the whole input put two or more of
  the utterance's words on one instant (across the pause after the final words), they are aligned
  again on the audio after those words [55]. Its words replace the committed words of its input
  (``closing_replaces=False``: only the words after them are added, aligned by text, else by
  time), except that a decode whose words begin, word for word, four or more drafted words in
  (Whisper skipped the start of a long input; where its first words recur in the drafts, at the
  copy after which more of its words agree) replaces only the drafts from there, its words
  aligned to the audio after the kept ones [29]; one that finds no words keeps the drafts;
  nothing is carried and the utterance ends, except that a decode the chunk plan cuts short,
  or that a guard stops 0.3 s or more before the input's end [36] (measured from where the stopped
  token attends when DTW stretched the kept words to the end [26]), or that Whisper ends (EOT) a
  second or more before the input's end while the speech detector hears half a second of speech
  after its last word (a turn or sentence break where greedy Whisper stops) [28], leaves the rest of
  the utterance to be decoded again by itself, from its last kept word [17] (from where the stopped
  word is heard when a guard's stop kept no new word [35]; carried to the end of the round's input,
  the non-speech after the cut included, so the next audio follows it where it was heard [28]); the
  words decoded so far stay (the next closing round replaces only what follows them), and the drafts
  after them stand until a decode of the rest finds words [28, 34]. A round that closed a long utterance
  at a pause leaves the utterance open after the pause, its words before it final, the drafts after
  the word its decode ends with shown [31, 48]. Either way the next live round hears all of the
  rest: it decodes it whole without a prefix, as an opening round, and its words replace the rest's
  drafts [48]. ``finish()`` decodes everything pending
  as a closing round and decodes again what an early stop left (at most 3 times) [1].

Times: audio positions are integer sample indices (16 kHz) from the first fed sample; ``Word``
start/end are converted to seconds; ``emitted_at`` is ``clock() − clock() at construction``.
"""

from __future__ import annotations

import difflib
import logging
import math
import time
import zlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from captioner.core import SAMPLE_RATE, EngineUpdate, RoundStats, Source, Word
from captioner.engine._committed import (
    CommittedLog,
    CommittedToken,
    Shown,
    keep_first_shown,
    retracted_words,
    token_spans,
)
from captioner.engine.align import Alignment, align_words, split_words
from captioner.engine.beam import FEWER_WORDS, SKIP_WORDS, decode_beam, repeated_block, skipped_words
from captioner.engine.decoder import DecodeResult, NativeValidator, TokenValidator, decode_round, max_prefix
from captioner.engine.language import LanguageGuess, detect_language
from captioner.engine.model import FRAME_S, SAMPLES_PER_FRAME, AcousticModel, Encoding
from captioner.engine.rounds import FULL_N, RoundPlan, RoundPolicy, StreamState, plan_round
from captioner.engine.tokens import TASKS, normalize_word
from captioner.engine.vad import SpeechDetector
from captioner.engine.validate import RoundValidator, said_in_a_loop
from captioner.engine.vocabulary import VocabularyPrompt, speech_frames
from captioner.errors import CaptionerError

__all__ = ["Stream", "StreamConfig"]

logger = logging.getLogger(__name__)

_CARRYOVER_OVERLAP_S = 0.6  # mode-0 fallback cut before the last f+ (unreachable with a valid DTW)
_FLUSH_RETRIES = 3  # finish(): extra final rounds after a hallucination stop
_GUARD_CONTEXT_WORDS = 8  # committed words before a round's audio that the repetition guard sees
_REINFER_DEDUP_WORDS = 8  # re-inference: committed words compared with the result's head (reference: 2)


@dataclass(frozen=True, slots=True)
class StreamConfig:
    """Engine parameters; defaults are the reference's effective configuration (NPUSPER.md §0.1),
    except the peak margin (deviation 41).

    Attributes:
        step_s: new audio per round, seconds (0.5–3.0; paper: 2.0).
        peak_margin_s: stop a live round when attention enters the last this-many seconds of its
            input (paper: 0.6 s; 0.15 s here: the words of the input's last 0.15–0.6 s are shown a
            round sooner, the final words decided as before by the closing round, deviation 41).
        backward_speech_s: a live round's backward cross-attention shift (§7) is not a stop while the
            speech detector hears the round's speech go on at least this long after the last passed
            test's f+ (the decoder has not run out of audio: the shift is the attention's noise
            between two words; deviation 46); 0: the paper's test on every content token.
        min_chunk_s: rounds with a shorter effective input are skipped (audio carried).
        word_end_offset_s: added to the second-to-last word's DTW start for the carry cut.
        exclude_s: f+ is searched from this time on (0.3 s = frame 15).
        median, average: filter widths of the backward-shift test.
        dtw_median: median width of the DTW rows.
        max_tokens: generated tokens per round at most.
        max_input_s: the effective input is trimmed from the front to this length.
        unreliable_fraction: DTW is unreliable when the last word ends before this fraction of
            the input (speculative round).
        reinfer_after: identical backward-shift stops in a row that trigger the 30 s re-inference.
        language: Whisper language code, or "auto": detected on multilingual models from the
            first decoder step (deviation 19), English until a live round is sure of another or a
            closing round hears one (deviation 42); English-only models are always English.
        languages: with "auto", the languages the user speaks: detection chooses among these only
            (its probabilities are among them), and the first is the language before any is
            heard; empty: every language the model knows, English first.
        task: "transcribe" or "translate".
        vocabulary: names and terms Whisper is told about before every round, as its previous
            context (:mod:`~captioner.engine.vocabulary`); empty: none.
        silence_floor_dbfs: inputs with an RMS below this (dB re full scale 1.0) in which the speech
            detector hears no speech (any input, without a detector) are not decoded but handled
            as a round that decoded nothing (deviations 2, 40: a quiet microphone's speech is
            decoded); ``None`` disables the gate.
        vad: gate and trim rounds with the speech detector (deviation 15); False = the paper's
            policy on every input (the scripted-oracle tests, whose audio is not speech).
        vad_threshold: Silero speech probability that counts as speech.
        speech_hold: once speech is heard, a probability at most this much below the threshold
            still counts as speech (Silero's hysteresis; 0 = none).
        speech_faint: a ``speech_faint_s`` stretch that never reaches the threshold but whose mean
            probability is at least this is speech (deviation 32: radio turns Silero rates 0.25–0.45
            throughout; :class:`~captioner.engine.vad.SpeechDetector` ``faint``); 0 = off.
        speech_faint_s: that stretch, seconds.
        speech_weak: a ``speech_faint_s`` stretch that never reaches the threshold, whose mean
            probability is at least this and whose median level stands ``speech_weak_db`` above the
            recording's quiet level is speech where it stands that high (deviation 45: an edited radio
            channel Silero rates 0.05–0.4 word after word; :class:`~captioner.engine.vad.SpeechDetector`
            ``weak``); 0 = off.
        speech_weak_db: that height, dB.
        speech_loud_db: the speaker goes on where Silero lets go (deviation 39): a window at least
            this many dB above the recording's quiet level (the 10th percentile of the last 10 s of
            windows) and within 10 dB of the phrase before it, between two stretches of speech the
            threshold heard at most ``speech_bridge_s`` apart, is speech, and counts as speech while
            the second may still come (:class:`~captioner.engine.vad.SpeechDetector` ``loud_db``);
            0 = off. Where the recording is not that quiet between words (noise, music) nothing
            changes.
        speech_bridge_s: the longest stretch between two phrases that loud windows join, seconds.
        end_silence_s: an input whose speech ended at least this long before its end closes the
            utterance (deviation 16).
        speech_pad_s: non-speech kept after detected speech when a closing input is cut.
        onset_pad_s: non-speech kept before detected speech when leading non-speech is trimmed
            (the speech detector's onset comes late on noisy or band-limited speech).
        closing_context_s: a closing round's input reaches this far back into audio already
            decoded (not before the utterance's start), decoded without a prefix, and emits what
            follows the committed words (deviation 17); 0 = the carry only.
        closing_replaces: the closing round's words replace the committed words of its input
            (the live words were a draft; deviation 17); False = only what follows them is added.
        closing_full_s: a closing input shorter than this is heard in the 30 s window, as offline
            Whisper hears it (a short utterance is where the 10 s window lost words on unseen
            speakers); 0 = by its length only (10, 20 or 30 s).
        closing_from_start: the stream's first utterance, when it closes within 30 s of the stream's
            first sample, is decoded from that sample heard in the 30 s window: a recording that fits
            Whisper's window comes out as offline Whisper transcribes it (deviation 27); False: from
            the utterance's own start, as every later one.
        closing_retry: a closing decode in a window under 30 s that looks wrong (a word guard or
            the token limit stopped it, its text compresses more than 2.4 times, or its average
            log-probability is below −1) is decoded again in the 30 s window; the better of the
            two is kept (``_better``).
        closing_unguarded: a closing decode that the phrase-repetition guard stopped (after the
            retry) is decoded again in the 30 s window without that guard, as offline Whisper
            decodes it, and kept when it looks right (deviation 37) and, with
            ``closing_unguarded_loops``, says no block of two or more words four times in a row
            (``said_in_a_loop``: the loop that the guard stopped, let through).
        closing_before_s: a later utterance's closing input shorter than this reaches back to the
            final words before it (the first committed word starting this long before its end, in
            audio the stream keeps), decoded without a prefix: Whisper hears a short sentence after
            the ones before it, as offline Whisper's 30 s windows hear it; the final words stay
            (deviation 52); 0 = the utterance's own input. Where the language is detected
            (``"auto"`` on a multilingual pack), only where the utterance's own input is heard in
            the final words' language: words of another language before a short sentence would
            decide its language (German before an English reply read the reply as German).
        closing_rereads: such a decode reads the last closed utterance's words again, now with the
            words after them; where it reads them otherwise and Whisper is surer of its reading
            (their tokens' mean log-probability), its reading replaces them (deviation 53). The last
            closed utterance's words are therefore not final (published as ``speculative``) until
            the next closing round, or the stream's end, or until the stream is past each of them
            by ``closing_before_s`` (where no closing decode reaches back to it) or
            ``closing_reread_s``, whichever comes first.
        closing_reread_s: with ``closing_rereads``, the longest a closed utterance's word waits to
            be final, from its start (the terminal and the live subtitle file write a sentence when
            it is final); 10 s: the talk 94 / 95 errors at 2 s / 1 s, 19.6 s:
            94 / 91, and a 19 s reading printed nothing final before its end.
        closing_beam: closing rounds decode with beam search (the beam-step graph of a pack built
            with ``--beam 5``: offline Whisper's default decoding) where their bucket has one, except
            the stream's first utterance decoded whole (27: offline Whisper's greedy decode of a
            short recording), inputs under ``closing_beam_min_s`` and rounds in a hurry; their draft
            is then not used. Not the default (deviation 43 in docs/accuracy/deviations.md: on the
            talk 96 / 100 → 78 / 90 errors at 2 s / 1 s, but at 2 s over that step's CPU budget on
            long speech, and at 1 s its words later: latency p90 1.98 → 2.70 s on continuous
            speech); False: greedy with the draft.
        closing_beam_min_s: with ``closing_beam``, the shortest closing input that searches.
        closing_beam_rate: with ``closing_beam``, the searched decodes' dispatches a stream may
            spend per second of audio (0: no limit): a closing round searches only while those
            spent so far are within this rate of the audio heard, a CPU budget counted in
            dispatches so that the words do not depend on the machine's speed.
        closing_beam_skips: with ``closing_beam``, a searched decode that leaves out a run of
            ``SKIP_WORDS`` consecutive live words is read greedily too, and the greedy reading is
            kept when the search left out such a run of its words, or reads ``FEWER_WORDS`` words
            fewer than it (where it is read: with the rival, the floor or a run of drafts left
            out), or when the greedy reading has the drafts' run (up to where it ends) (skipped
            speech); and a searched decode that says a block three times in a row
            (:func:`~captioner.engine.beam.repeated_block`) is read greedily too and gives way where
            that reading does not (a phrase said over words the search did not hear); False: the
            search's reading stands.
        closing_beam_rival: with ``closing_beam``, every searched decode is read greedily too and
            the greedy reading is kept where its average log-probability (Whisper's, EOT's
            included) is higher: greedy decoding's hypothesis ranked with the search's ended ones.
        closing_beam_floor: with ``closing_beam``, a closing input is read greedily first and
            searched only where that reading's average log-probability is at least this (Whisper is
            sure of the speech); where it is unsure (radio, meeting speech) the greedy reading stands.
            ``-inf``: every closing input is searched, and read greedily only for the guards above.
        closing_rest: a closing decode that Whisper ended (EOT) while the speech detector still
            hears at least ``_REST_SPEECH_S`` of speech after its last word (Whisper ends early at a
            turn or sentence break; offline Whisper seeks past it to the next window): the audio
            from its last word on is decoded again, as after a guard's stop; after either, the
            words decoded so far stay and, at the stream's end, the drafts after them stand until
            the rest is decoded (deviation 28); False: the engine before it.
        closing_skip: a closing decode that begins, word for word, at least ``_SKIP_MIN_WORDS``
            drafted words into its input (Whisper skipped the start of a long input) replaces only
            the drafts from there; the skipped drafts, heard as speech, stand (deviation 29). Where
            its first words are said more than once in the drafts, it begins at the copy after which
            more of its words agree.
        closing_split_s: an open utterance at least this long (its start to the input's end) is
            closed at the latest pause of at least ``split_pause_s`` inside the round's input: the
            audio before it is decoded as a closing round (30 s window at most), the audio after it
            goes on as the utterance (deviation 31); 0 = never (an utterance longer than
            ``closing_context_s`` keeps the live words of its start).
        split_pause_s: the shortest pause (seconds of non-speech) a long utterance is closed at.
        opening_s: while an open utterance is at most this long (its start to the input's end), a
            live round decodes all of it from its start, heard with silence to ``opening_window_s``,
            and its words replace the utterance's drafts (deviation 20); 0 = off.
        opening_window_s: the window an opening round's input is padded to with silence, seconds.
        min_context_s: at steps under 2 s, a live round whose input is shorter reaches back into
            the open utterance's drafted audio to a drafted word starting at least this long before
            its end, forced as the prefix; the drafts after it are decoded again and replaced
            (deviation 20); 0 = off.
        revise_kept: a revising round (opening, or reaching back) whose decode keeps no token (a
            guard stopped it at its first word) leaves the drafts it was to replace standing
            (deviation 47); False: they go, replaced by nothing.
        rest_drafts: the drafts of an utterance's rest, after a closing round that closed it at a
            pause or that left its rest to be decoded again, are replaced by the next live round,
            which hears all of the rest and decodes it whole without a prefix; a round that closed
            at a pause keeps standing the drafts after the word its decode ends with, DTW's time
            for them notwithstanding (deviation 48). False: the engine before it (those drafts
            stayed beside the next round's words, and drafts timed before the pause went).
        repeat_kept_once: a live round that the phrase guard stopped at a repeat is followed, on the
            same input (start and prefix), by rounds that keep that one repeat after the same words
            (deviation 49): a step more of audio did not change the guard's evidence, and stopping
            there again froze the captions until the utterance closed; a later copy (a loop's
            third) is judged as before. False: stopped again each round.
        loop_retry: a live or opening round whose decode the token guards stopped at a loop (one id
            three times, a block inside a word three times: the decode failed, speech never sounds
            so) is decoded again heard in the 30 s window, and that decode is kept when it does not
            loop (deviation 50): the same short window a step later looped again or not at all, and
            the words after the loop were shown only when the utterance closed. False: kept as it is.
    """

    step_s: float = 2.0
    peak_margin_s: float = 0.15
    backward_speech_s: float = 1.0
    min_chunk_s: float = 1.0
    word_end_offset_s: float = -0.2
    exclude_s: float = 0.3
    median: int = 7
    average: int = 10
    dtw_median: int = 7
    max_tokens: int = 224
    max_input_s: float = 30.0
    unreliable_fraction: float = 0.3
    reinfer_after: int = 2
    language: str = "en"
    languages: tuple[str, ...] = ()
    task: str = "transcribe"
    vocabulary: tuple[str, ...] = ()
    silence_floor_dbfs: float | None = -70.0
    vad: bool = True
    vad_threshold: float = 0.5
    speech_hold: float = 0.0
    speech_faint: float = 0.25
    speech_faint_s: float = 1.0
    speech_weak: float = 0.1
    speech_weak_db: float = 12.0
    speech_loud_db: float = 20.0
    speech_bridge_s: float = 1.5
    end_silence_s: float = 0.5
    speech_pad_s: float = 0.2
    onset_pad_s: float = 0.2
    closing_context_s: float = 29.6
    closing_replaces: bool = True
    closing_full_s: float = 0.0
    closing_from_start: bool = True
    closing_retry: bool = True
    closing_unguarded: bool = True
    closing_unguarded_loops: bool = True
    closing_before_s: float = 19.6
    closing_rereads: bool = True
    closing_reread_s: float = 10.0
    closing_beam: bool = False
    closing_beam_min_s: float = 0.0
    closing_beam_rate: float = 0.0
    closing_beam_skips: bool = True
    closing_beam_rival: bool = False
    closing_beam_floor: float = -math.inf
    closing_rest: bool = True
    closing_skip: bool = True
    closing_split_s: float = 25.0
    split_pause_s: float = 0.2
    opening_s: float = 4.0
    opening_window_s: float = 6.0
    min_context_s: float = 5.0
    revise_kept: bool = True
    rest_drafts: bool = True
    repeat_kept_once: bool = True
    loop_retry: bool = True

    def __post_init__(self) -> None:
        if not 0.5 <= self.step_s <= 3.0:
            raise CaptionerError(f"step must be between 0.5 and 3.0 seconds, got {self.step_s}")
        if self.task not in TASKS:
            raise CaptionerError(f"unknown task {self.task!r}; choose one of: {', '.join(TASKS)}")
        if self.languages and (self.language != "auto" or len(self.languages) < 2):
            raise CaptionerError(f"the languages to detect among need language 'auto' and two or more codes, got "
                                 f"{self.language!r} among {', '.join(self.languages)}")
        if self.peak_margin_s < 0 or self.min_chunk_s < 0 or self.max_tokens < 1 or self.backward_speech_s < 0:
            raise CaptionerError("peak margin, backward-shift speech, minimum chunk and token limit must not be negative")
        if not 2 * self.step_s < self.max_input_s <= 30.0:
            raise CaptionerError(f"maximum input must be in (2 × step, 30] seconds, got {self.max_input_s}")
        if self.median < 1 or self.average < 1 or self.dtw_median < 1 or self.reinfer_after < 1:
            raise CaptionerError("filter widths and the re-inference count must be at least 1")
        if not 0.0 <= self.closing_full_s <= 30.0:
            raise CaptionerError(f"closing full window length must be in [0, 30] seconds, got {self.closing_full_s}")
        if not 0.0 <= self.closing_context_s <= 30.0 or not 0.0 <= self.closing_before_s <= 30.0:
            raise CaptionerError(f"closing context and reach must be in [0, 30] seconds, got {self.closing_context_s} "
                                 f"and {self.closing_before_s}")
        if not (0.0 <= self.opening_s <= self.opening_window_s <= 30.0 and 0.0 <= self.min_context_s <= 30.0):
            raise CaptionerError("opening length, opening window and minimum context must be within [0, 30] "
                                 "seconds, the opening no longer than its window")
        if not 0.0 < self.vad_threshold < 1.0 or self.end_silence_s <= 0 or min(self.speech_pad_s, self.onset_pad_s) < 0:
            raise CaptionerError("speech threshold must be in (0, 1), end silence positive, speech pads ≥ 0")
        if not 0.0 <= self.speech_hold < self.vad_threshold:
            raise CaptionerError(f"speech hold must be in [0, threshold), got {self.speech_hold}")
        if not 0.0 <= self.speech_weak < self.vad_threshold or self.speech_weak_db < 0:
            raise CaptionerError(f"weak speech must be in [0, threshold) at ≥ 0 dB, got {self.speech_weak} at "
                                 f"{self.speech_weak_db} dB")
        if not 0.0 <= self.speech_faint < self.vad_threshold or self.speech_faint_s <= 0:
            raise CaptionerError(f"faint speech must be in [0, threshold) over a positive stretch, got "
                                 f"{self.speech_faint} over {self.speech_faint_s} s")
        if self.closing_reread_s < 0:
            raise CaptionerError(f"the wait for a closed sentence's words must not be negative, got {self.closing_reread_s}")
        if self.closing_beam_rate < 0:
            raise CaptionerError(f"the search's rate must not be negative, got {self.closing_beam_rate}")
        if self.speech_loud_db < 0 or self.speech_bridge_s <= 0:
            raise CaptionerError(f"loud speech must be ≥ 0 dB within a positive bridge, got {self.speech_loud_db} dB "
                                 f"within {self.speech_bridge_s} s")

    def speech_detector(self) -> SpeechDetector:
        """A new speech detector with this configuration's rules (threshold, hold, faint, weak, loud)."""
        return SpeechDetector(self.vad_threshold, hold=self.speech_hold, faint=self.speech_faint,
                              faint_s=self.speech_faint_s, weak=self.speech_weak, weak_db=self.speech_weak_db,
                              loud_db=self.speech_loud_db, bridge_s=self.speech_bridge_s)


def _agreeing(a: Sequence[bytes], b: Sequence[bytes]) -> int:
    """How many words ``a`` and ``b`` share from their starts, in order."""
    return next((i for i, (x, y) in enumerate(zip(a, b, strict=False)) if x != y), min(len(a), len(b)))


def _frames(samples: int) -> int:
    """Whole 20 ms frames in ``samples``, as samples."""
    return samples // SAMPLES_PER_FRAME * SAMPLES_PER_FRAME


class Stream:
    """One source's streaming session. Not thread-safe: one thread feeds and steps it.

    Args:
        model: the acoustic model (real graphs or the test oracle).
        config: engine parameters.
        source: written into every word and update.
        clock: monotonic seconds; ``emitted_at`` is measured from the value at construction.

    Usage: ``feed()`` audio as it arrives; call ``step()`` whenever audio was fed — it runs a round
    once ``step_s`` of new audio is pending and takes **all** pending audio (so a caller that falls
    behind gets longer rounds, like the reference in real time; more than 30 s pending loses the
    front); ``finish()`` at the end. To replay a file as fast as possible, feed one step at a time.
    """

    def __init__(
        self,
        model: AcousticModel,
        config: StreamConfig | None = None,
        *,
        source: Source = "system",
        clock: Callable[[], float] = time.monotonic,
    ):
        self.model = model
        self.config = config or StreamConfig()
        self.source: Source = source
        self.vocab = model.vocab
        self._clock = clock
        self._t0 = clock()
        # deviation 19: language detection ("auto" on a multilingual model), among the user's languages
        self._auto = self.config.language == "auto" and self.vocab.multilingual
        self.language = (self.config.languages or ("en",))[0] if self.config.language == "auto" else self.config.language
        self._prompt = self.vocab.prompt(self.language if self._auto else self.config.language, self.config.task)
        self._vocabulary = VocabularyPrompt(self.config.vocabulary, self.vocab)
        if self._vocabulary.entries:  # a list longer than the roomiest round can take is said once
            start, size = model.chunk_plan(model.buckets[-1], prefixed=True)[-1]
            self._vocabulary.check_room(start + size, len(self._prompt))
        self._language_settled = not self._auto
        self._session_language = False  # deviation 33: a closing round heard the language on _SETTLE_N
        self._final_language = self.language  # the language of the last closing decode (deviation 52)
        cfg = self.config
        self._step_n = round(cfg.step_s * SAMPLE_RATE)
        self._cap_n = _frames(round(2 * cfg.step_s * SAMPLE_RATE))
        self._max_n = _frames(round(cfg.max_input_s * SAMPLE_RATE))
        self._offset_n = round(cfg.word_end_offset_s * SAMPLE_RATE)
        self._vad = cfg.speech_detector() if cfg.vad else None
        # audio
        self._pending: list[np.ndarray] = []
        self._pending_n = 0
        self._fed = 0
        self._next = 0  # absolute index of the first sample not yet taken into a round
        self._carry = np.zeros(0, np.float32)
        self._carry_start = 0
        self._bad_samples = 0
        # policy state (NPUSPER.md §1)
        self._prefix: tuple[int, ...] = ()
        self._memory: tuple[int, ...] | None = None  # last word of the last reliable round (dedup)
        self._memory_end = 0  # its DTW end, absolute samples
        self._spec_from: int | None = None  # token index where the speculative emission starts
        self._repeat: tuple[int, int] | None = None
        self._repeat_count = 0
        # deviation 49: ((input start, prefix), tokens before the repeat) of the last live round that
        # the word guards stopped at a repeat, and of the repeat kept on that input since
        self._guard_stop: tuple[tuple[int, tuple[int, ...]], tuple[int, ...]] | None = None
        self._kept_repeat: tuple[tuple[int, tuple[int, ...]], tuple[int, ...]] | None = None
        self._round = 0
        self._finished = False
        # audio already taken, kept for closing rounds (deviation 17): [_history_start, _next)
        self._history = np.zeros(0, np.float32)
        self._history_start = 0
        self._context_n = _frames(round(cfg.closing_context_s * SAMPLE_RATE))
        self._policy = RoundPolicy.from_config(cfg)
        self._utterance_start: int | None = None  # where the open utterance's input begins (onset − pad)
        self._final_n: int | None = None  # deviation 28: log tokens the next closing round keeps
        self._onset = 0  # where its speech begins (the speech detector's onset): no word starts before
        self._log = CommittedLog(self.vocab, source)  # committed tokens -> published words
        self._closed = False  # a closing decode has run (deviation 27 applies before it only)
        self._searched = 0  # dispatches of searched closing decodes (``closing_beam_rate``)
        # set by a live caller that is behind real time (engine/overload.py): closing rounds then
        # decode only what is not decoded yet, without the look-back re-decode (deviation 17)
        self.hurry = False

    # ----------------------------------------------------------------------------- public
    @property
    def audio_s(self) -> float:
        """Seconds of audio fed so far."""
        return self._fed / SAMPLE_RATE

    @property
    def processed_s(self) -> float:
        """Audio clock up to which audio has been taken into rounds, seconds."""
        return self._next / SAMPLE_RATE

    @property
    def lag_s(self) -> float:
        """Fed but not yet processed audio, seconds."""
        return (self._fed - self._next) / SAMPLE_RATE

    @property
    def words(self) -> tuple[Word, ...]:
        """The words emitted so far with all updates applied (speculative ones included)."""
        return tuple(self._log.words)

    def feed(self, samples: np.ndarray) -> None:
        """Append 16 kHz mono float32 samples (any block size). Non-finite samples become 0.

        Raises:
            CaptionerError: not 1-D, or the stream is finished.
        """
        if self._finished:
            raise CaptionerError("this stream is finished; start a new one")
        block = np.asarray(samples, dtype=np.float32)
        if block.ndim != 1:
            raise CaptionerError(f"expected mono samples (1-D), got shape {block.shape}")
        if block.size == 0:
            return
        finite = np.isfinite(block)
        if not finite.all():
            if self._bad_samples == 0:
                logger.warning("non-finite audio samples replaced by silence")
            self._bad_samples += int(block.size - finite.sum())
            block = np.where(finite, block, np.float32(0.0))
        self._pending.append(block.copy())
        self._pending_n += block.size
        if self._vad is not None:
            self._vad.feed(block)
        self._fed += block.size

    def step(self) -> EngineUpdate | None:
        """Run one round if at least ``step_s`` of new audio is pending, else return None.

        A round that does not reach the model still returns an (empty) update with its stats:
        stop reason ``"short"`` (input under ``min_chunk_s``, all of it carried) or ``"silence"``
        (deviation 2). Update words carry audio-clock times and ``emitted_at`` (module docstring).
        """
        if self._finished or self._pending_n < self._step_n:
            return None
        start, new = self._take(_frames(self._pending_n))
        return self._run_round(start, new, last=False)

    def finish(self) -> EngineUpdate:
        """Decode and emit everything still pending or carried (deviation 1); the stream ends."""
        if self._finished:
            return EngineUpdate(source=self.source)
        start, new = self._take(self._pending_n)
        if new.size % SAMPLES_PER_FRAME:
            new = np.concatenate([new, np.zeros(SAMPLES_PER_FRAME - new.size % SAMPLES_PER_FRAME, np.float32)])
        self._finished = True
        if self._vad is not None:
            self._vad.flush()
        update = self._run_round(start, new, last=True)
        for _ in range(_FLUSH_RETRIES):  # an early stop left audio undecoded: decode it again
            if not self._carry.size:
                break
            end = self._carry_start + self._carry.size
            update = _merge(update, self._run_round(end, np.zeros(0, np.float32), last=True))
        self._carry = np.zeros(0, np.float32)
        if self._log.draft_from is not None or self._log.reread_from is not None:  # over: every word is final
            self._log.set_draft(None)
            self._log.set_reread(None)
            retract, words = self._log.publish()
            update = _merge(update, EngineUpdate(retract, words, update.stats, self.source))
        return update

    def set_step(self, step_s: float) -> None:
        """Change the step from the next round on (the lag rule of ``engine/overload.py``
        lengthens it while the engine cannot keep up, and shortens it back). What depends on the
        step follows it: how much new audio a round waits for, the carry's cap (2 × step) and
        whether live rounds reach back into the drafts (steps under 2 s, deviation 20); the open
        utterance, its drafts and the audio pending stay as they are.

        Raises:
            CaptionerError: the step is outside 0.5–3.0 s or the longest input cannot hold two of it.
        """
        config = replace(self.config, step_s=step_s)  # validated as any StreamConfig
        self.config = config
        self._step_n = round(config.step_s * SAMPLE_RATE)
        self._cap_n = _frames(round(2 * config.step_s * SAMPLE_RATE))
        self._policy = RoundPolicy.from_config(config)

    def skip(self, keep_s: float) -> EngineUpdate:
        """Overload: drop the pending audio but its last ``keep_s`` seconds, undecoded.

        For a caller that fell behind real time (the worker's lag rule): the carried audio before
        the pending audio goes too, the open utterance ends as it stands (its draft and
        speculative words become final: a closing decode would cost the round the caller does not
        have), the prefix is forgotten, and the update's ``gap`` is the dropped audio-clock span
        (seconds) for the transcript's gap marker. Nothing happens (an empty update) when no more
        than ``keep_s`` is pending or the stream is finished.
        """
        keep = _frames(round(max(0.0, keep_s) * SAMPLE_RATE))
        drop = _frames(self._pending_n - keep) if self._pending_n > keep else 0
        if self._finished or drop <= 0:
            return EngineUpdate(source=self.source)
        t_round = time.perf_counter()
        gap_start = self._carry_start if self._carry.size else self._next
        if self._log.tokens:  # the carry may hold words already shown, which stay: the gap follows them
            gap_start = min(self._next, max(gap_start, self._log.tokens[-1].end))
        data = np.concatenate(self._pending)
        self._pending = [data[drop:]] if data.size > drop else []
        self._pending_n = data.size - drop
        self._next += drop
        self._carry = np.zeros(0, np.float32)
        self._history, self._history_start = np.zeros(0, np.float32), self._next
        if self._spec_from is not None:
            self._log.confirm(self._spec_from)
        self._spec_from, self._memory, self._repeat, self._repeat_count = None, None, None, 0
        self._end_utterance()
        skipped = (self._next - gap_start) / SAMPLE_RATE
        logger.info("behind real time: skipped %.2f s of audio at %.2f s", skipped, gap_start / SAMPLE_RATE)
        update = self._update({"round_index": self._round, "stop_reason": "skipped", "skipped_s": skipped}, t_round)
        return replace(update, gap=(gap_start / SAMPLE_RATE, self._next / SAMPLE_RATE))

    # ----------------------------------------------------------------------------- rounds
    def _take(self, n: int) -> tuple[int, np.ndarray]:
        data = np.concatenate(self._pending) if self._pending else np.zeros(0, np.float32)
        taken, rest = data[:n], data[n:]
        if self._context_n:
            history = np.concatenate([self._history, taken])
            drop = max(0, history.size - self._context_n - self._max_n)
            self._history, self._history_start = history[drop:], self._history_start + drop
        self._pending = [rest] if rest.size else []
        self._pending_n = rest.size
        start = self._next
        self._next += taken.size
        return start, taken

    def _run_round(self, new_start: int, new: np.ndarray, *, last: bool) -> EngineUpdate:
        """One round: its plan (:func:`~captioner.engine.rounds.plan_round`), executed."""
        t_round = time.perf_counter()
        stats: dict[str, Any] = {"round_index": self._round, "carry_s": self._carry.size / SAMPLE_RATE}
        self._round += 1
        start = self._carry_start if self._carry.size else new_start
        audio = np.concatenate([self._carry, new]) if self._carry.size else new
        self._carry = np.zeros(0, np.float32)
        if audio.size > self._max_n:  # §2.3: keep the last 30 s
            start += audio.size - self._max_n
            audio = audio[audio.size - self._max_n :]
        stats["input_s"] = audio.size / SAMPLE_RATE
        self._settle(start + audio.size)
        state = StreamState(start, audio, last, self.hurry, self._prefix, self._utterance_start, self._spec_from,
                            (self._history_start, self._history_start + self._history.size), self._log,
                            len(self._prompt), self._closed, self._over_search_budget(start + audio.size))
        plan = plan_round(state, self._policy, self.model, self._vad)
        if plan.kind == "skip":
            if plan.skip is None:
                return self._update(stats, t_round)
            if plan.skip == "short":  # §2.4: all of it carried
                self._set_carry(start, audio)
                return self._update({**stats, "stop_reason": "short"}, t_round)
            return self._nothing_decoded(start, audio, stats, t_round, last, plan.skip)
        if plan.opens is not None:
            self._utterance_start, self._onset = plan.opens
            if self._context_n:
                self._log.set_draft(plan.draft_from)
        own = plan.start + plan.reach_n
        # a closing round's own input after its end: the utterance after the pause (a split, deviation
        # 31), else the non-speech after the speech, carried with a rest so the carry meets the next audio
        tail = audio[plan.end - start :] if plan.closes else None
        audio = audio[own - start : plan.end - start]
        if plan.reach_n:
            audio = self._with_history(plan.start, own, audio)
        start = plan.start
        alone = None
        own_plan = plan.fallback
        if own_plan is not None and self._auto:  # deviation 52: the utterance's language on its own input
            alone = self._heard_alone(plan, start, audio, stats)
            if not alone.same:  # not the final words' language: the utterance decoded alone
                plan, audio, start = own_plan, audio[own_plan.start - start :], own_plan.start
        return self._decode(plan, start, audio, stats, t_round, last, tail, alone)

    def _heard_alone(self, plan: RoundPlan, start: int, audio: np.ndarray, stats: dict) -> _Heard:
        """Deviation 52 where the language is detected: the language of the utterance's own input
        (``plan.fallback``'s part of ``audio``, which starts at ``start``), read before its closing
        round reaches back to the final words before it; its encoding counted in ``stats``. Heard as
        the utterance is decoded, in the 10 s window: in the smallest bucket that holds it, a talk's
        short sentence was read as Tagalog at 0.87 and the session's language changed (talk, 1 s:
        100 -> 109 errors)."""
        own = plan.fallback
        assert own is not None
        own_audio = audio[own.start - start :]
        encoding = self._encode(own, own_audio)
        _count_encoding(stats, encoding)
        guess = detect_language(self.model, encoding, among=self.config.languages)
        same = self.language == self._final_language and _language_stays(guess, self.language, self._session_language)
        logger.debug("round %d: the utterance alone heard as %s (p %.2f), the final words before it as %s: %s",
                     stats["round_index"], guess.code, guess.probability, self._final_language,
                     "reaches back" if same else "decoded alone")
        return _Heard(guess, own_audio.size, encoding, same)

    def _encode(self, plan: RoundPlan, audio: np.ndarray) -> Encoding:
        """``audio`` (the plan's input) as the plan hears it: with silence to ``plan.heard_n``."""
        return self.model.encode(_heard_with_silence(audio, plan.heard_n) if plan.heard_n > audio.size else audio)

    def _decode(self, plan: RoundPlan, start: int, audio: np.ndarray, stats: dict, t_round: float,
                last: bool, tail: np.ndarray | None = None, alone: _Heard | None = None) -> EngineUpdate:
        """Encode what the plan hears, decode with its prefix, draft and guards, commit by its kind;
        ``tail``: a closing round's own audio after its input (deviation 31, 28); ``alone``: the
        utterance's own input, its language read (deviation 52): its encoding is the plan's when the
        plan is the utterance's own, and its language is the round's."""
        cfg = self.config
        eff_s = audio.size / SAMPLE_RATE
        stats["input_s"] = eff_s
        if not plan.closes:
            stats["revised_s"] = plan.reach_n / SAMPLE_RATE
        if alone is not None and plan.fallback is None:  # the utterance's own input: encoded already
            encoding = alone.encoding
        else:
            encoding = self._encode(plan, audio)
            _count_encoding(stats, encoding)  # a fallback's decode adds
        stats["bucket"] = encoding.bucket
        unsure: tuple[str, str] | None = None  # deviation 38: the two likeliest languages of an unsure closing
        if self._auto and (plan.closes or not (self._language_settled or self._session_language)):
            held = self._session_language
            guess = self._detect_language(alone.guess if alone is not None
                                          else detect_language(self.model, encoding, among=cfg.languages),
                                          alone.n if alone is not None else audio.size, plan.closes)
            if plan.closes and not held and guess.probability < _UNSURE_P and len(guess.top) > 1:
                unsure = (guess.top[0][0], guess.top[1][0])
        prefix = plan.prefix
        if len(prefix) > max_prefix(self.model, encoding.bucket, len(self._prompt)):  # no room in the chunk plan
            logger.debug("prefix of %d tokens too long for the plan; not forced", len(prefix))
            prefix = ()
        timed = self._log.context_before(start, _GUARD_CONTEXT_WORDS, prefix, plan.redo_from)
        context = tuple(w for w, _ in timed)
        ends: tuple[float, ...] = tuple((e - start) / SAMPLE_RATE for _, e in timed)
        if prefix:
            forced = tuple(self._words(prefix))
            heard = self._log.end_of(prefix, start)  # the forced word is a committed one, heard first
            context += forced
            ends = ends + ((heard - start) / SAMPLE_RATE,) * len(forced) if heard is not None else ()

        key = (start, prefix)  # deviation 49: the repeat a round stopped at, stopped at again, is kept
        keep_after = None
        if cfg.repeat_kept_once and not plan.closes:
            for stopped in (self._kept_repeat, self._guard_stop):  # one repeat per input, the first stopped at
                if stopped is not None and _same_input(stopped[0], key):
                    keep_after = stopped[1]
                    break

        def validator(phrases: bool = True) -> TokenValidator:
            checks = RoundValidator(self.vocab, input_s=eff_s, peak_margin_s=0.0 if plan.closes else cfg.peak_margin_s,
                                    exclude_s=cfg.exclude_s, median=cfg.median, average=cfg.average, context=context,
                                    context_ends=ends, closing=plan.closes, phrases=phrases,
                                    speech_end_s=None if plan.speech_end is None else (plan.speech_end - start) / SAMPLE_RATE,
                                    backward_speech_s=cfg.backward_speech_s, kept_after=keep_after)
            return self._vocabulary.guard(checks, self._speech(start, audio.size))  # a listed word must be heard

        # words decoded again are proposed to the verifier (draft decoding)
        draft = [t.id for t in self._log.tokens[plan.redo_from:]] if plan.redo_from is not None else []
        beam = plan.search
        result = self._decode_told(encoding, prefix, validator, draft, eff_s, beam)
        if unsure is not None and self.language in unsure:
            result = self._other_language(result, unsure, lambda: self._decode_told(encoding, prefix, validator, draft,
                                                                                   eff_s, beam), stats["round_index"])
        stats["language"] = self.language
        if plan.closes:
            self._final_language = self.language
        self._closed = self._closed or plan.closes
        decodes = [result]  # every decode of the round: their chunks and times are the round's

        def in_30s() -> Encoding:
            """The round's input heard again in the 30 s window (offline Whisper's), its encoding counted."""
            again = self.model.encode(_heard_with_silence(audio, FULL_N))
            stats["retried"] = True
            _count_encoding(stats, again)
            return again

        def decode_again(heard: Encoding, checks: Callable[[], TokenValidator] = validator) -> DecodeResult:
            decodes.append(self._decode_told(heard, prefix, checks, draft, eff_s, beam))
            return decodes[-1]

        if (not plan.closes and cfg.loop_retry and not self.hurry and plan.heard_n < FULL_N
                and result.stop is not None and result.stop.loop):
            # deviation 50: a live decode that looped failed in its short window; heard as offline Whisper hears it
            again = in_30s()
            retry = decode_again(again)
            logger.debug("round %d: live decode looped: %r; heard again in 30 s: %r (%s)", stats["round_index"],
                         self.vocab.decode(result.candidates), self.vocab.decode(retry.candidates), retry.stop_reason)
            if retry.stop is None or not retry.stop.loop:
                result, stats["bucket"] = retry, again.bucket
        wrong = self._looks_wrong(result) if plan.closes and cfg.closing_retry and plan.heard_n < FULL_N else None
        full = encoding if plan.heard_n >= FULL_N else None  # the input heard in the 30 s window
        if wrong is not None:
            # a short window's decode that looks wrong: heard again as offline Whisper hears it
            full = in_30s()
            stats["bucket"] = full.bucket
            retry = decode_again(full)
            retry_wrong = self._looks_wrong(retry)
            kept = _better(result, wrong, retry, retry_wrong)
            logger.debug("round %d: closing decode (%s, %s) heard again in 30 s: %r -> %r (%s, %s); kept the %s",
                         stats["round_index"], wrong, _logprob(result), self.vocab.decode(result.candidates),
                         self.vocab.decode(retry.candidates), retry_wrong or "fine", _logprob(retry),
                         "retry" if kept is retry else "first")
            result = kept
        if plan.closes and cfg.closing_unguarded and result.stop_reason == "repetition":
            # deviation 37: the phrase guard stopped it; offline Whisper, which has no such guard,
            # hears the whole input: kept when that looks right by Whisper's own signs
            if full is None:
                full = in_30s()
            stats["retried"] = True
            free = decode_again(full, lambda: validator(phrases=False))
            free_wrong = self._looks_wrong(free)
            if free_wrong is None and cfg.closing_unguarded_loops and said_in_a_loop([w for w in self._words(free.candidates) if w]):
                free_wrong = "loop"
            logger.debug("round %d: closing decode stopped by the phrase guard: %r; unguarded in 30 s: %r (%s, %s)",
                         stats["round_index"], self.vocab.decode(result.candidates), self.vocab.decode(free.candidates),
                         free_wrong or "fine", _logprob(free))
            if free_wrong is None:
                result, stats["bucket"] = free, full.bucket
        chunks = sum(d.chunks for d in decodes)
        decoder_ms = sum(d.decoder_ms for d in decodes)
        validation_ms = sum(d.validation_ms for d in decodes)
        if keep_after is not None:
            self._kept_repeat = (key, keep_after)
        self._guard_stop = (key, result.candidates) if not plan.closes and result.stop_reason == "repetition" else None
        stats.update(
            tokens=len(result.tokens),
            chunks=stats.get("chunks", 0) + chunks,  # a fallback's decode adds (see the encoder's)
            decoder_ms=stats.get("decoder_ms", 0.0) + decoder_ms,
            validation_ms=stats.get("validation_ms", 0.0) + validation_ms,
            drafted=result.drafted,
            stop_reason=result.stop_reason,
            closes=plan.closes,
        )
        if plan.fallback is not None and self._follows_before(plan, start, result) is None:
            # the decode did not hear the words before the utterance (Whisper skipped its start): the
            # utterance's own input decoded instead
            logger.debug("round %d: closing decode from %.2f s skipped the words before its utterance: %r",
                         stats["round_index"], start / SAMPLE_RATE, self.vocab.decode(result.candidates))
            fallback = plan.fallback
            return self._decode(fallback, fallback.start, audio[fallback.start - start :], stats, t_round, last, tail,
                                alone)
        if plan.looks_back:
            return self._close_utterance(start, audio, result, stats, t_round, last, tail, plan.splits, plan.keeps)
        # §2.6: first choice EOT with a garbage runner-up; deviation 47: a revising decode that a guard
        # stopped at its first word replaces nothing (its drafts, replaced by nothing, were gone until
        # the closing decode)
        if not result.tokens or (plan.revises and not result.candidates and cfg.revise_kept):
            if plan.closes and not last:  # the utterance is over: nothing of it is carried
                self._end_utterance()
                return self._update(stats, t_round)
            return self._nothing_decoded(start, audio, stats, t_round, last, result.stop_reason)
        replaced: list[Shown] = []
        if plan.revises:  # the drafts after the prefix were decoded again: replace them
            speculative = self._undo_speculative()
            replaced = retracted_words(self._log.truncate(plan.redo_from or 0), self.vocab) + speculative
            self._prefix, self._memory = plan.prefix, None
        return self._end_of_round(start, audio, result, stats, t_round, last, plan.closes, replaced)

    def _follows_before(self, plan: RoundPlan, start: int, result: DecodeResult) -> int | None:
        """Index of the first decoded word after the final words that ``plan``'s input (from ``start``)
        holds before its utterance (``plan.keeps``), found by text at the decode's start
        (:func:`_after_before`). None when the decode does not begin with them or does not hear the
        utterance: no word after them, or fewer than half as many words as its drafts (Whisper skipped
        the start of the input and the utterance's first sentence with it, or ended before the
        utterance: a radio reply after a call)."""
        keeps = plan.keeps or 0
        cands = [t for t in result.candidates if t < self.vocab.eot]
        groups = split_words(cands, self.vocab)
        decoded = [normalize_word(self.vocab.text_bytes(cands[f : f + k])) for f, k in groups]
        j = _after_before(self._before_words(start, keeps), decoded)
        new, drafts = len(decoded) - (j or 0), len(self._log.words_from(keeps))
        return j if j is not None and new >= 1 and 2 * new >= drafts else None

    def _before_words(self, start: int, keeps: int) -> list[bytes]:
        """Normalised texts of the final words (tokens before ``keeps``) that start at or after ``start``."""
        return [w for i, w in self._log.words_from(self._log.first_word_since(start)) if i < keeps]

    def _looks_wrong(self, result: DecodeResult, guards: bool = True) -> str | None:
        """Why a decode looks failed by Whisper's own signs, in this order, else None: a word guard or
        the token limit stopped it (its stop reason; ``guards=False``: the token limit only); its text
        compresses more than 2.4 times (``"compression"``: a loop the guards let through); its
        average log-probability is below −1 (``"logprob"``; openai/whisper's and faster-whisper's
        thresholds)."""
        if result.stop_reason in _LOOKS_WRONG_STOPS and (guards or result.stop_reason == "limit"):
            return result.stop_reason
        if _compression_ratio(self.vocab.text_bytes(t for t in result.candidates if t < self.vocab.eot)) > _COMPRESSION_RATIO:
            return "compression"
        logprob = result.avg_logprob
        if logprob is not None and logprob < _LOGPROB_FLOOR:
            return "logprob"
        return None

    def _nothing_decoded(self, start: int, audio: np.ndarray, stats: dict, t_round: float, last: bool, reason: str):
        """§2.6: no emission, state untouched, the last ≤ 2 × step carried (final round: the
        previous speculative words are retracted, nothing replaces them)."""
        if last:
            self._undo_speculative()
        else:
            self._set_carry(start + max(0, audio.size - self._cap_n), audio[max(0, audio.size - self._cap_n) :])
        return self._update({**stats, "stop_reason": reason}, t_round)

    def _end_of_round(
        self, start: int, audio: np.ndarray, result: DecodeResult, stats: dict, t_round: float, last: bool,
        closes: bool, replaced: list[Shown] | None = None,
    ) -> EngineUpdate:
        """NPUSPER.md §11 in its order (11.1 … 11.11); ``replaced``: the drafted words that a revising
        round (deviation 20) decoded again, in time order."""
        cfg = self.config
        eff_s = audio.size / SAMPLE_RATE
        cands = list(result.candidates)  # 11.1
        t_dtw = time.perf_counter()
        alignment: Alignment | None = None
        reliable = False
        if cands:  # 11.2
            alignment = align_words(cands, result.attn_align[: len(cands)], self.vocab, cfg.dtw_median)
            if alignment.valid:
                lw = alignment.words[-1]
                reliable = not alignment.collapsed and lw.end_frame * FRAME_S >= cfg.unreliable_fraction * eff_s
        stats["dtw_ms"] = (time.perf_counter() - t_dtw) * 1000.0

        # 11.3 repeat tracker and the 30 s re-inference
        if result.stop is not None and result.stop.reason == "backward_shift":
            key = (int(result.stop.token or 0), result.stop.index)
            self._repeat_count = self._repeat_count + 1 if key == self._repeat else 1
            self._repeat = key
        else:
            self._repeat, self._repeat_count = None, 0
        if self._repeat_count >= cfg.reinfer_after:
            return self._reinfer(start, audio, stats, t_round)

        retracted = (replaced or []) + self._undo_speculative()  # 11.4
        saved_memory, saved_end, saved_prefix = self._memory, self._memory_end, self._prefix
        words = alignment.words if alignment is not None and alignment.valid else ()
        if reliable and words:  # 11.5
            lw = words[-1]
            self._memory = tuple(cands[lw.first : lw.first + lw.count])
            self._memory_end = start + lw.end_frame * SAMPLES_PER_FRAME
            if len(words) > 1:
                w2 = words[-2]
                self._prefix = tuple(t for t in cands[w2.first : w2.first + w2.count] if t < self.vocab.eot)
            else:
                self._prefix = ()
        single = len(words) == 1  # 11.6
        speculative = bool(cands) and (not reliable or single) and not closes
        if speculative:  # 11.7 (deviation 7: the prefix is kept in the single-word case too)
            self._memory, self._memory_end, self._prefix = saved_memory, saved_end, saved_prefix

        emit = cands
        first_shown: CommittedToken | None = None  # the re-decoded first word's, when it replaces it (11.8)
        count = 0  # tokens of the current first word (11.8)
        if saved_memory is not None and emit and start < saved_end:  # 11.8 (deviations 8, 9)
            count = words[0].count if len(words) > 1 or (speculative and words) else len(saved_memory)
            same = normalize_word(self.vocab.text_bytes(emit[:count])) == normalize_word(
                self.vocab.text_bytes(saved_memory)
            )
            longer = count > len(saved_memory) and tuple(emit[: len(saved_memory)]) == saved_memory
            if same and (speculative or not longer):
                emit = emit[count:]
            elif not speculative and self._log.tail_ids(len(saved_memory)) == saved_memory:
                first_shown = self._log.truncate(len(self._log) - len(saved_memory))[0]
            if not emit and not speculative:  # deviation 12: the committed tail still ends with it
                self._memory, self._memory_end = saved_memory, saved_end
        dropped = len(cands) - len(emit)

        # 11.10 commit
        now = self._clock() - self._t0
        spans = _floor(token_spans(words, len(cands), start, start + audio.size), self._onset)
        logprobs = _logprobs(result, self.vocab.eot) if closes else []
        new_tokens = []
        for k, token in enumerate(emit):
            i = k + dropped
            s, e = spans[i] if spans else (start, start + audio.size)
            shown, heard_to = ((first_shown.emitted_at, first_shown.heard_to) if first_shown is not None and k < count
                               else (now, start + audio.size))
            lp = logprobs[i] if i < len(logprobs) else math.nan
            new_tokens.append(CommittedToken(int(token), s, e, shown, speculative, heard_to, lp))
        keep_first_shown(new_tokens, retracted, self.vocab)  # deviation 10
        if speculative and new_tokens:
            self._spec_from = len(self._log)
        self._log.extend(new_tokens)

        if not closes:  # 11.11 carry-over (§2.5)
            self._carry_after(start, audio, result, words, speculative, bool(emit))
        elif result.stop_reason in ("backward_shift", "limit"):  # deviation 1: flush the rest
            self._carry_after(start, audio, result, words, speculative, bool(emit))
            if last and self._carry.size >= audio.size:
                self._carry = np.zeros(0, np.float32)
        elif not last:  # deviation 16: the utterance is over, nothing of it is carried
            self._end_utterance(closed=True)
        logger.debug(
            "round %d: input %.2f s at %.2f s, prefix %r, stop %s, candidates %r, emitted %r%s, carry %.2f s",
            stats["round_index"], eff_s, start / SAMPLE_RATE, self.vocab.decode(saved_prefix), result.stop_reason,
            self.vocab.decode(cands), self.vocab.decode(emit), " (speculative)" if speculative else "",
            self._carry.size / SAMPLE_RATE,
        )
        stats.update(speculative=speculative)
        return self._update(stats, t_round)

    def _decode_told(self, encoding, prefix: tuple[int, ...], validator: Callable[[], TokenValidator],
                     draft: Sequence[int], input_s: float, beam: bool = False) -> DecodeResult:
        """:func:`decode_round` (``beam``: :func:`decode_beam` where the bucket has a beam graph)
        with the vocabulary as the previous context (:meth:`_previous`); when that puts none of its
        words into the round, the round is decoded again without it and that decode is the result
        (the list changes only the rounds that hold its words: a list of names that are not said
        otherwise costs words, docs/VOCABULARY.md). The costs are summed."""
        def greedy(context: tuple[int, ...]) -> DecodeResult:
            return decode_round(self.model, encoding, self._prompt, prefix, validator(), self.config.max_tokens,
                                draft, context)

        def decode(context: tuple[int, ...]) -> DecodeResult:
            cfg = self.config
            plain = None
            if beam and cfg.closing_beam_floor > -math.inf:  # greedy first: is Whisper sure of this speech?
                plain = greedy(context)
                if plain.avg_logprob is None or plain.avg_logprob < cfg.closing_beam_floor:
                    return plain
            searched = decode_beam(self.model, encoding, self._prompt, prefix, validator(), self.config.max_tokens,
                                   context) if beam else None
            if searched is None:
                return plain if plain is not None else greedy(context)
            self._searched += searched.chunks
            chosen, drafted = self._words(searched.candidates), self._words(draft)
            skips_drafts = bool(drafted) and skipped_words(chosen, drafted) >= SKIP_WORDS
            loops = cfg.closing_beam_skips and repeated_block(chosen) > 0
            if plain is None and not cfg.closing_beam_rival and not loops and (
                    not cfg.closing_beam_skips or (drafted and not skips_drafts)):
                return searched  # it reads every run of the live words: no greedy reading needed
            plain = plain if plain is not None else greedy(context)
            read = self._words(plain.candidates)
            # the search skipped speech: a run of the greedy reading, words of it (a repeat, a filler),
            # or a run of the drafts that the greedy reading has (up to where it ends: a guard's stop
            # has its rest decoded again)
            skipped = skipped_words(chosen, read) >= SKIP_WORDS or len(read) - len(chosen) >= FEWER_WORDS or (
                skips_drafts and skipped_words(read, drafted, trailing=False) < SKIP_WORDS) or (
                loops and repeated_block(read) == 0)  # the search says a block three times, greedy does not
            mine, theirs = searched.avg_logprob, plain.avg_logprob
            likelier = cfg.closing_beam_rival and mine is not None and theirs is not None and theirs > mine
            logger.debug("closing search %r (%s), greedy %r (%s): skipped %s", self.vocab.decode(searched.candidates),
                         mine, self.vocab.decode(plain.candidates), theirs, skipped)
            if likelier or (cfg.closing_beam_skips and skipped):
                return _summed(plain, searched)
            return _summed(searched, plain)

        context = self._previous(encoding, len(prefix), input_s)
        told = decode(context)
        if not context or self._vocabulary.heard_in(told.candidates):
            return told
        return _summed(decode(()), told)

    def _over_search_budget(self, end: int) -> bool:
        """The searched decodes so far spent more dispatches than ``closing_beam_rate`` allows for
        the audio up to sample ``end`` (never without a rate)."""
        rate = self.config.closing_beam_rate
        return rate > 0 and self._searched > rate * end / SAMPLE_RATE

    def _words(self, tokens: Sequence[int]) -> list[bytes]:
        """The normalised words of text ``tokens`` (timestamps and specials left out)."""
        text = tuple(t for t in tokens if t < self.vocab.eot)
        return [normalize_word(self.vocab.text_bytes(g)) for g in _word_groups(text, self.vocab)]

    def _previous(self, encoding, n_prefix: int, input_s: float) -> tuple[int, ...]:
        """The vocabulary's previous-context tokens for a round over ``encoding`` (cut to the room
        its chunk plan leaves, :meth:`VocabularyPrompt.for_round`); ``()`` without a vocabulary."""
        if not self._vocabulary.entries:
            return ()
        start, size = self.model.chunk_plan(encoding.bucket, prefixed=True)[-1]
        return self._vocabulary.for_round(start + size, len(self._prompt) + n_prefix, input_s)

    def _speech(self, start: int, n: int) -> np.ndarray | None:
        """bool [frames] of the input ``[start, start + n)`` that hold speech; None without a
        vocabulary or a speech detector (only the vocabulary's guard reads it)."""
        if not self._vocabulary.entries or self._vad is None:
            return None
        return speech_frames(self._vad.probabilities(start, start + n), start, n, self._vad.threshold)

    def _with_history(self, begin: int, start: int, audio: np.ndarray) -> np.ndarray:
        """``audio`` (from absolute sample ``start``) with the taken audio ``[begin, start)`` before it."""
        return np.concatenate([self._history[begin - self._history_start : start - self._history_start], audio])

    def _other_language(self, result: DecodeResult, unsure: tuple[str, str], decode: Callable[[], DecodeResult],
                        round_index: int) -> DecodeResult:
        """Deviation 38: a closing decode whose language detection was unsure (the likeliest under
        ``_UNSURE_P``) before the session has a language, and that looks wrong by Whisper's own signs
        (:meth:`_looks_wrong`; a word guard's stop is left to the guards' own remedies, deviations 35-37,
        and says nothing of the language), is decoded in the other of the two likeliest languages
        too; that decode is kept, with its language as the stream's, when it looks right (a short English
        meeting turn was detected as Welsh at 0.47 against English's 0.36 and came out "Yna yn
        yw'r ymwr cost.", average log-probability −1.34; in English −0.19). Two decodes that both
        look wrong keep the detected language: the average log-probability alone chose German for
        an English "Yeah, I'd say so" (−1.01 against −1.05). ``decode``: the round's decode again,
        with the stream's prompt as it is then."""
        if self._looks_wrong(result, guards=False) is None:
            return result
        other = unsure[1] if self.language == unsure[0] else unsure[0]
        mine, self._prompt = self._prompt, self.vocab.prompt(other, self.config.task)
        alt = decode()
        right = self._looks_wrong(alt, guards=False) is None
        logger.debug("round %d: unsure language %s/%s: %r (%s) vs %r (%s)", round_index, self.language,
                     other, self.vocab.decode(result.candidates), _logprob(result), self.vocab.decode(alt.candidates),
                     _logprob(alt))
        kept = alt if right else result
        if right:
            logger.info("language: %s (its decode looks right) instead of %s", other, self.language)
            self.language = other
        else:
            self._prompt = mine
        return replace(kept, chunks=alt.chunks + result.chunks, decoder_ms=alt.decoder_ms + result.decoder_ms,
                       validation_ms=alt.validation_ms + result.validation_ms)

    def _detect_language(self, guess: LanguageGuess, n_audio: int, closes: bool) -> LanguageGuess:
        """Deviation 19: the language of this input from the first decoder step (one chunk dispatch);
        settled for the utterance once heard on ``_SETTLE_N`` of audio, re-checked when it closes and
        for the next utterance. Deviation 33: once a closing round heard it on ``_SETTLE_N``, it is the
        session's: live rounds no longer ask, and a closing round changes it only when it hears another
        language with probability ``_SWITCH_P`` or more (a short or archaic passage of English was taken
        for Latin, Welsh or Portuguese). Deviation 42: before that, a live round changes the language
        only when it is as sure (``_SWITCH_P``); an unsure one keeps the stream's (English before any
        detection) and leaves the choice to the closing round, which changes it at any probability (an
        English speaker's first 2 s were read as Arabic, Greek, Latin, Vietnamese at 0.3–0.6).
        ``guess``: :func:`detect_language` of the input, ``n_audio`` samples long."""
        sure = guess.probability >= _SWITCH_P
        if guess.code != self.language and (sure or (closes and not self._session_language)):
            logger.info("language: %s (p %.2f) instead of %s", guess.code, guess.probability, self.language)
            self.language = guess.code
            self._prompt = self.vocab.prompt(guess.code, self.config.task)
        self._language_settled = n_audio >= _SETTLE_N and not closes
        self._session_language = self._session_language or (closes and n_audio >= _SETTLE_N)
        return guess

    def _end_utterance(self, closed: bool = False) -> None:
        """The utterance closed: its words are final, the next one starts afresh. ``closed``: a
        closing round decoded it; with ``closing_rereads`` its words, from its start on, stay not
        final until the next closing decode has had the chance to read them again (deviation 53)."""
        utterance = self._utterance_start
        lo = min((i for i in (self._log.draft_from, self._log.reread_from) if i is not None), default=0)
        self._prefix, self._utterance_start, self._final_n = (), None, None
        self._log.set_draft(None)
        rereads = closed and self.config.closing_rereads and self.config.closing_replaces and self._policy.before_n > 0
        self._log.set_reread(self._log.first_word_since(utterance, lo) if rereads and utterance is not None else None)

    def _settle(self, end: int) -> None:
        """Deviation 53: the last closed utterance's words become final where no later closing decode
        can read them again (a stream in a hurry reaches back nowhere, and a closing input ending after
        ``end`` reaches back to words starting at most ``closing_before_s``, less the pad, before it)
        or where they have waited ``closing_reread_s`` since their start."""
        lo = self._log.reread_from
        if lo is None:
            return
        reach = max(self._history_start, end - self._policy.before_n + self._policy.pad_n,
                    end - round(self.config.closing_reread_s * SAMPLE_RATE))
        upto = len(self._log) if self._log.draft_from is None else self._log.draft_from
        k = self._log.first_word_since(reach, lo)
        self._log.set_reread(None if self.hurry or k >= upto else k)

    def _own_spans(self, spans: list[tuple[int, int]], result: DecodeResult, cands: list[int],
                   groups: list[tuple[int, int]], after: int, start: int, size: int,
                   final_n: int | None) -> list[tuple[int, int]]:
        """Deviation 55: the token spans of a closing decode that reached back over the final words
        before its utterance (deviation 52), with its utterance's own words aligned again, on the audio after
        those final words, where DTW over the whole input put two or more of them on one instant:
        across the pause between the two, the path ran the utterance's tokens down one frame and
        took the rest of the input as the trailing uniform row ("Tell me what happened." timed at
        the end of the sentence before, in the 12 s of silence before it was said). Else ``spans``.
        ``after``: the index of the decode's first word after those (:func:`_after_before`)."""
        if after >= len(groups):
            return spans
        k = groups[after][0]
        firsts = [spans[f] for f, _ in groups[after:]]
        if sum(1 for a, b in firsts if a == b == firsts[0][0]) < 2:
            return spans
        final_end = self._log.tokens[final_n - 1].end if final_n else start
        own_n = _frames(max(0, min(final_end, self._onset) - start))
        attn = result.attn_align[k : len(cands), own_n // SAMPLES_PER_FRAME :]
        again = align_words(cands[k:], attn, self.vocab, self.config.dtw_median) if attn.shape[1] else None
        if again is None or not again.valid:
            return spans
        logger.debug("closing decode at %.2f s: its utterance's words collapsed at %.2f s, aligned again from %.2f s",
                     start / SAMPLE_RATE, firsts[0][0] / SAMPLE_RATE, (start + own_n) / SAMPLE_RATE)
        return spans[:k] + token_spans(again.words, len(cands) - k, start + own_n, start + size)

    def _reread(self, start: int, final_n: int, before: list[bytes], decoded: list[bytes],
                groups: list[tuple[int, int]], logprobs: list[float]) -> _Reread | None:
        """Deviation 53: where a closing decode whose input (from ``start``) holds the final words
        ``before`` (log tokens up to ``final_n``) reads the last closed utterance's words among them
        otherwise (:func:`_reread_at`) and Whisper is surer of its reading than of theirs (the
        tokens' mean log-probability, from the first word read otherwise to the last final word),
        the place its words replace them from; None where they stay. ``logprobs``: the decode's per
        candidate token (:func:`_logprobs`)."""
        lo = self._log.reread_from
        if lo is None or not (self.config.closing_rereads and self.config.closing_replaces):
            return None
        firsts = [i for i, _ in self._log.words_from(self._log.first_word_since(start)) if i < final_n]
        at = _reread_at(before, decoded, next((k for k, i in enumerate(firsts) if i >= lo), len(firsts)))
        if at is None:
            return None
        i, j, after = at
        token = firsts[i]
        old = [t.logprob for t in self._log.tokens[token:final_n]]
        cands = sum(k for _, k in groups)
        until = groups[after][0] if after < len(groups) else cands
        new = logprobs[groups[j][0] : until] if j < len(groups) else []
        if not old or not new or any(math.isnan(x) for x in old) or sum(new) / len(new) <= sum(old) / len(old):
            return None
        logger.debug("closing decode at %.2f s reads the last utterance's %r as %r (mean log-probability %.2f -> %.2f)",
                     start / SAMPLE_RATE, b" ".join(before[i:]), b" ".join(decoded[j:after]), sum(old) / len(old),
                     sum(new) / len(new))
        floor = max(start, self._log.tokens[token - 1].end if token > 0 else start)
        return _Reread(token, j, floor, until, max(floor, self._log.tokens[final_n - 1].end))

    def _close_utterance(
        self, start: int, audio: np.ndarray, result: DecodeResult, stats: dict, t_round: float, last: bool,
        tail: np.ndarray | None = None, splits: bool = False, keeps: int | None = None,
    ) -> EngineUpdate:
        """Deviation 17: a closing round decoded with left context already committed; emit the
        decoded words that follow the committed ones (aligned by text, else by time). ``tail``: the
        round's own audio after its input: the rest of a long utterance closed at a pause (``splits``,
        deviation 31), which goes on as the utterance, else the non-speech after the speech, carried
        with a rest to be decoded again so that the carry ends where the next audio begins."""
        retracted = self._undo_speculative()
        cands = [t for t in result.candidates if t < self.vocab.eot]
        groups = split_words(cands, self.vocab)
        decoded = [normalize_word(self.vocab.text_bytes(cands[f : f + k])) for f, k in groups]
        logprobs = _logprobs(result, self.vocab.eot)
        committed = self._log.words_since(start)
        dropped: list[CommittedToken] = []
        final_n, self._final_n = self._final_n, None
        before: list[bytes] = []  # the final words the input holds before its utterance
        reread: _Reread | None = None
        if keeps is not None:
            final_n = max(final_n or 0, keeps)
            before = self._before_words(start, final_n)
            reread = self._reread(start, final_n, before, decoded, groups, logprobs) if before else None
            if reread is not None:  # deviation 53: its words from there on replace the final ones
                final_n, before = reread.token, []
        base = max(self._log.first_word_since(start), final_n or 0)
        replaced = (self._skipped_drafts(base, decoded) if self.config.closing_skip and not before and reread is None
                    else base)
        # deviation 29: words of a decode that skipped drafts are aligned to the audio after those
        # (over the whole input the DTW collapses them onto its start)
        skip_n = _frames(max(0, self._log.tokens[replaced].start - start - _SKIP_MARGIN_N)) if replaced != base else 0
        attn = result.attn_align[: len(cands), skip_n // SAMPLES_PER_FRAME :]
        alignment = align_words(cands, attn, self.vocab, self.config.dtw_median) if cands else None
        words = alignment.words if alignment is not None and alignment.valid else ()
        spans = token_spans(words, len(cands), start + skip_n, start + audio.size)
        own = _after_before(before, decoded) if before else None  # its first own word (before: no reread)
        if own is not None:
            spans = self._own_spans(spans, result, cands, groups, own, start, audio.size, final_n)
        if reread is not None:  # the words read again stay within the audio of those they replace
            spans = ([(min(max(a, reread.floor), reread.ceiling), min(max(b, reread.floor), reread.ceiling))
                      for a, b in spans[: reread.until]] + _floor(spans[reread.until :], self._onset))
        else:
            spans = _floor(spans, self._onset)
        if self.config.closing_replaces and decoded and not (replaced == len(self._log) and committed):
            if replaced != base:  # the decode begins with the first word it replaces
                kept: tuple[bytes, ...] = ()
            else:
                kept = self._log.words_before(start, 1) if final_n is None else self._log.words_upto(final_n, 1)
            dropped = self._log.truncate(replaced)
            retracted = retracted_words(dropped, self.vocab) + retracted  # in time order
            follow: int | None = 1 if kept and decoded and decoded[0] == kept[-1] else 0  # the kept word heard again
            if before:
                follow = own
            elif reread is not None:
                follow = reread.word
        else:
            follow = _follow(committed, decoded)
        j = follow
        if j is None:  # no text match: the words that start after the last committed word ends
            end = self._log.tokens[-1].end if self._log.tokens else start
            j = next((i for i, (f, _) in enumerate(groups) if spans and spans[f][0] >= end - _TIME_SLACK_N), len(groups))
        first = groups[j][0] if j < len(groups) else len(cands)
        new_tokens = self._commit(cands[first:], spans[first:], start, audio.size, retracted, logprobs[first:])
        logger.debug(
            "round %d: closing %.2f s at %.2f s: %r, committed %r, emitted %r",
            stats["round_index"], audio.size / SAMPLE_RATE, start / SAMPLE_RATE, self.vocab.decode(cands),
            [w.decode(errors="replace") for w in committed], self.vocab.decode(t.id for t in new_tokens),
        )
        self._prefix, self._memory, self._spec_from = (), None, None
        self._repeat, self._repeat_count = None, 0
        heard_to, stopped = (new_tokens[-1].end if new_tokens else start), None
        if result.stop is not None and result.stop.index < len(result.tokens):
            # where the stopped repeat attends (alignment heads): DTW may stretch the last kept word to the end
            stopped = _attended(result.attn_align[result.stop.index : result.stop.index + 1], start)[0]
            heard_to = min(heard_to, stopped)
        unheard = start + audio.size - heard_to
        if result.stop_reason == "eot" and cands:  # deviation 28: DTW can also end the last word early
            heard_to = max([heard_to] + [p for p in _attended(result.attn_align[max(0, len(cands) - 3) : len(cands)], start)
                                         if p < start + audio.size])
            unheard = start + audio.size - heard_to
        early = result.stop_reason == "eot" and unheard >= _REST_MIN_N and self._speech_after(heard_to, start + audio.size)
        cut = _rest_cut(start, new_tokens[-1].start if new_tokens else None, heard_to, early, self._offset_n,
                        stopped if result.stop_reason in _DECODE_REST else None)
        rest = early or result.stop_reason in _DECODE_REST
        after = np.zeros(0, np.float32) if tail is None else tail
        if 0 < cut < audio.size and (result.stop_reason == "limit" or (rest and unheard >= _GUARD_REST_MIN_N)):
            # the plan ran out, or a guard stopped a loop before the utterance's end: what follows
            # the last kept word is decoded again, by itself (the look-back starts there now)
            self._set_carry(start + cut, np.concatenate([audio[cut:], after]))
            self._utterance_start = start + cut
            if self.config.closing_rest:  # deviation 28: the words decoded so far stay (the next closing
                # replaces only what follows them); the replaced drafts of the rest stand until a decode
                # of the rest finds words (deviation 34: a rest decode that finds nothing, a guard
                # stopping a sentence read twice, leaves them standing), as drafts while live rounds go on
                self._final_n = len(self._log)
                self._log.extend(_words_from(dropped, heard_to - _TIME_SLACK_N, self.vocab))
                if not last:
                    self._log.set_draft(self._final_n)
        elif splits and tail is not None:  # deviation 31: the utterance goes on after the pause, its words so far final;
            # its drafts after the pause are shown until the next round decodes them again
            end = start + audio.size
            self._set_carry(end, tail)
            standing = _words_from(dropped, end, self.vocab)
            undecoded = _drafts_after_last_word(dropped, new_tokens, self.vocab) if self.config.rest_drafts and new_tokens else []
            standing = max(standing, undecoded, key=len)  # both end with the last draft
            final_n = len(self._log)  # the kept drafts may start before the pause (deviation 48)
            self._log.extend(standing)
            self._utterance_start = end
            self._final_n = min(final_n, self._log.first_word_since(end, self._log.draft_from or 0))
            self._log.set_draft(self._final_n)
        elif not last:
            self._end_utterance(closed=True)
        return self._update(stats, t_round)

    def _skipped_drafts(self, replaced: int, decoded: list[bytes]) -> int:
        """Deviation 29: the log index from which a closing decode's words replace the drafts. A
        long closing decode can skip the start of its input (Whisper transcribes only its last
        seconds, the DTW collapsed): when its words, from its first or second on, match
        ``_SKIP_RUN`` drafts word for word at least ``_SKIP_MIN_WORDS`` words in (its first word
        may be a cut one, "then" for "than"), and the speech detector heard speech under the drafts
        it skipped, those drafts stand and it replaces from there; else from ``replaced``. Where its
        first words are said more than once in the drafts ("if the other person ... if the other
        fellow"), it begins at the copy after which more of its words agree with the drafts (the
        first, on a tie)."""
        if self._vad is None or len(decoded) < _SKIP_RUN + 1:
            return replaced
        drafts = self._log.words_from(replaced)
        texts = [w for _, w in drafts]
        for b in (0, 1):  # where the match begins in the decode
            head = decoded[b : b + _SKIP_RUN]
            found = [k for k in range(len(texts) - _SKIP_RUN + 1) if texts[k : k + _SKIP_RUN] == head]
            if not found:
                continue
            k = max(found, key=lambda k: (_agreeing(decoded[b:], texts[k:]), -k))  # where more of it agrees
            if k < _SKIP_MIN_WORDS + b:  # it begins where the drafts begin
                return replaced
            first, at = self._log.tokens[drafts[0][0]].start, drafts[k - b][0]
            if self._vad.speech(first, self._log.tokens[at].start, min_s=_SKIP_SPEECH_S) is None:
                return replaced
            logger.debug("closing decode skipped %d drafted words (%s ...); they stand", k - b,
                         b" ".join(texts[:4]).decode(errors="replace"))
            return at
        return replaced

    def _speech_after(self, begin: int, end: int) -> bool:
        """Deviation 28: the speech detector hears at least ``_REST_SPEECH_S`` of speech in ``[begin, end)``."""
        return (self.config.closing_rest and self._vad is not None
                and self._vad.speech(begin, end, min_s=_REST_SPEECH_S) is not None)

    def _commit(self, tokens, spans, start: int, n_audio: int, retracted,
                logprobs: Sequence[float] = ()) -> list[CommittedToken]:
        """Append ``tokens`` (non-speculative, timed by ``spans`` or, without an alignment, by the whole
        input; ``logprobs``: theirs in the decode, where known) to the log; words that re-emit
        ``retracted`` ones keep their first-shown time."""
        now = self._clock() - self._t0
        whole = (start, start + n_audio)
        new_tokens = []
        for i, t in enumerate(tokens):
            a, b = spans[i] if spans else whole
            lp = logprobs[i] if i < len(logprobs) else math.nan
            new_tokens.append(CommittedToken(int(t), a, b, now, False, start + n_audio, lp))
        keep_first_shown(new_tokens, retracted, self.vocab)
        self._log.extend(new_tokens)
        return new_tokens

    def _carry_after(self, start, audio, result: DecodeResult, words, speculative: bool, emitted: bool) -> None:
        if speculative:  # (b) whole input, no cap (before (a): deviation 8 may leave nothing emitted)
            self._set_carry(start, audio)
            return
        if not emitted:  # (a)
            keep = min(audio.size, self._cap_n)
            self._set_carry(start + audio.size - keep, audio[audio.size - keep :])
            return
        if len(words) >= 2:  # (c), modes 2/3
            cut = words[-2].start_frame * SAMPLES_PER_FRAME + self._offset_n
        elif result.last_peak_s > 0:  # (c), the reference's fallback
            cut = int((result.last_peak_s - _CARRYOVER_OVERLAP_S) * SAMPLE_RATE)
        else:  # (d)
            return
        cut = _frames(max(0, cut))
        cap_cut = audio.size - self._cap_n
        if cap_cut > cut:  # the 2 × step cap, which never cuts past the last word's start (deviation 9)
            last_cut = words[-1].start_frame * SAMPLES_PER_FRAME + self._offset_n if words else cap_cut
            cut = max(cut, min(cap_cut, _frames(max(0, last_cut))))
        if cut < audio.size:
            self._set_carry(start + cut, audio[cut:])

    def _reinfer(self, start: int, audio: np.ndarray, stats: dict, t_round: float) -> EngineUpdate:
        """§11.3: decode the input as stock Whisper on a 30 s window, emit, reset the state."""
        cfg = self.config
        retracted = self._undo_speculative()
        encoding = self.model.encode(audio, native_30s=True)
        result = self._decode_told(encoding, (), lambda: NativeValidator(audio.size / SAMPLE_RATE, self.vocab), (),
                                   audio.size / SAMPLE_RATE)
        tokens = [t for t in result.tokens if t < self.vocab.eot]
        t_dtw = time.perf_counter()
        alignment = align_words(tokens, result.attn_align[: len(tokens)], self.vocab, cfg.dtw_median) if tokens else None
        dtw_ms = (time.perf_counter() - t_dtw) * 1000.0
        words = alignment.words if alignment is not None and alignment.valid else ()
        spans = _floor(token_spans(words, len(tokens), start, start + audio.size), self._onset)
        groups = split_words(tokens, self.vocab)
        committed = self._log.tail_words(_REINFER_DEDUP_WORDS)
        drop = 0
        for n in range(min(_REINFER_DEDUP_WORDS, len(groups), len(committed)), 0, -1):
            heads = [normalize_word(self.vocab.text_bytes(tokens[f : f + k])) for f, k in groups[:n]]
            if committed[len(committed) - n :] == heads:
                drop = groups[n][0] if n < len(groups) else len(tokens)
                break
        new_tokens = self._commit(tokens[drop:], spans[drop:], start, audio.size, retracted)
        logger.debug(
            "round %d: 30 s re-inference of %.2f s at %.2f s: %r, emitted %r",
            stats["round_index"], audio.size / SAMPLE_RATE, start / SAMPLE_RATE, self.vocab.decode(tokens),
            self.vocab.decode(t.id for t in new_tokens),
        )
        self._carry = np.zeros(0, np.float32)
        self._prefix, self._memory, self._spec_from = (), None, None
        self._repeat, self._repeat_count = None, 0
        _count_encoding(stats, encoding)
        stats.update(
            bucket=encoding.bucket,
            decoder_ms=stats.get("decoder_ms", 0.0) + result.decoder_ms,
            chunks=stats.get("chunks", 0) + result.chunks,
            dtw_ms=stats.get("dtw_ms", 0.0) + dtw_ms,
            reinferred=True,
        )
        return self._update(stats, t_round)

    # ----------------------------------------------------------------------------- bookkeeping
    def _set_carry(self, start: int, audio: np.ndarray) -> None:
        self._carry, self._carry_start = audio, start

    def _undo_speculative(self) -> list[Shown]:
        """§11.4: drop the previous round's speculative tokens; returns the dropped words'
        (normalised text, emitted_at)."""
        if self._spec_from is None:
            return []
        dropped = self._log.truncate(self._spec_from)
        self._spec_from = None
        return retracted_words(dropped, self.vocab)

    def _update(self, stats: dict, t_round: float) -> EngineUpdate:
        """The round's word update (token changes turned into words) with its statistics."""
        retract, words = self._log.publish()
        round_stats = RoundStats(
            provider=self.model.provider,
            lag_s=(self._fed - self._next) / SAMPLE_RATE,
            total_ms=(time.perf_counter() - t_round) * 1000.0,
            **stats,
        )
        return EngineUpdate(retract, words, round_stats, self.source, settled=self._settled_at())

    def _settled_at(self) -> float | None:
        """``EngineUpdate.settled``: where nothing is open (no utterance, draft, speculative word,
        carried word or closed words a closing decode may read again), the end of the audio heard
        for good (seconds: the carry's start, else the next sample to take), and the log sealed
        there; else None."""
        if (self._utterance_start is not None or self._spec_from is not None or self._memory is not None
                or self._prefix or self._log.draft_from is not None or self._log.reread_from is not None):
            return None
        self._log.seal()
        return (self._carry_start if self._carry.size else self._next) / SAMPLE_RATE


def _same_input(a: tuple[int, tuple[int, ...]], b: tuple[int, tuple[int, ...]]) -> bool:
    """Two rounds' (input start, forced prefix) are the same input: the same prefix, starts within
    :data:`_SAME_START_N` (leading non-speech is trimmed to whole frames, so a rest's start moves a frame
    or two as its audio grows)."""
    return a[1] == b[1] and abs(a[0] - b[0]) <= _SAME_START_N


_SAME_START_N = SAMPLE_RATE // 10
_LOOKS_WRONG_STOPS = ("limit", "repetition", "nonspeech")  # a closing decode so stopped is decoded again in 30 s
_COMPRESSION_RATIO = 2.4  # ... and one whose text compresses more (faster-whisper's threshold)
_LOGPROB_FLOOR = -1.0  # ... or whose average log-probability is lower (openai/whisper's, faster-whisper's)
_REPETITIVE = ("limit", "repetition", "compression")  # failures that say a decode looped
_DECODE_REST = ("limit", "repetition", "nonspeech")  # closing stops after which the rest is decoded again
_REST_MIN_N = SAMPLE_RATE  # ... when Whisper ended it (EOT) at least this long before the input's end
_GUARD_REST_MIN_N = round(0.3 * SAMPLE_RATE)  # ... when a guard stopped it this long before ("Yeah, yeah, I can imagine")
_REST_SPEECH_S = 0.5  # ... or Whisper ended it (EOT) with this much speech after its last word (deviation 28)
_SKIP_RUN = 3  # deviation 29: a closing decode's first words matched word for word in the drafts ...
_SKIP_MIN_WORDS = 4  # ... at least this many words in: it skipped those drafts ...
_SKIP_SPEECH_S = 1.0  # ... which stand when the speech detector heard this much speech under them
_BEFORE_SLACK = 2  # decoded words more than the final words before an utterance that may hold them
_REREAD_ALIKE = 0.7  # deviation 53: a reading of the final words is theirs where this share is read alike ...
_REREAD_SKIPPED = 3  # ... and no run of this many is left out
_SKIP_MARGIN_N = 4800  # 0.3 s: the decode's words are aligned from this much before the first draft it replaces
_SETTLE_N = 4 * SAMPLE_RATE  # deviation 19: a language heard on 4 s of audio holds for the utterance
_SWITCH_P = 0.8  # deviations 33, 42: the probability that changes the session's language, or a live round's
_UNSURE_P = 0.5  # deviation 38: a closing detection under this is decoded in its two likeliest languages
_UNHEARD_SLACK_N = 8000  # 0.5 s: a draft word is a splitting decode's last word when it starts no earlier than this before it
_TIME_SLACK_N = 1600  # 0.1 s: DTW slack when closing-round words are matched by time
_MISSED_WORDS = 2  # words timed wholly before the speech onset that show the detector missed speech ...
_ONSET_SLACK_N = round(0.2 * SAMPLE_RATE)  # ... ending this long before it or earlier (the onset pad's silence)


def _compression_ratio(text: bytes) -> float:
    """Bytes of ``text`` over bytes of its zlib compression (0 for no text), as faster-whisper."""
    return len(text) / len(zlib.compress(text)) if text else 0.0


def _logprob(result: DecodeResult) -> str:
    lp = result.avg_logprob
    return "avg logprob ?" if lp is None else f"avg logprob {lp:.2f}"


def _better(first: DecodeResult, first_wrong: str | None, retry: DecodeResult, retry_wrong: str | None) -> DecodeResult:
    """The closing decode kept of a first decode and its retry (faster-whisper's choice among its
    attempts): the retry when it looks right (or the first, when only the first does); when both
    look wrong, the one with the higher average log-probability among those that did not loop
    (:data:`_REPETITIVE`), else among both; on a tie or unknown log-probabilities, the first."""
    if retry_wrong is None or first_wrong is None:
        return retry if retry_wrong is None else first
    pool = [(r, w) for r, w in ((first, first_wrong), (retry, retry_wrong)) if w not in _REPETITIVE]
    if len(pool) == 1:
        return pool[0][0]
    a, b = first.avg_logprob, retry.avg_logprob
    return retry if a is not None and b is not None and b > a else first


def _attended(rows: np.ndarray, start: int) -> list[int]:
    """Absolute sample where each token's alignment-head attention row (float32 [tokens, frames])
    peaks, for an input that begins at ``start``."""
    return [start + int(np.argmax(row)) * SAMPLES_PER_FRAME for row in rows]


def _count_encoding(stats: dict, encoding: Encoding) -> None:
    """Add an encoding's log-mel and encoder times (ms) to a round's ``stats``: a round may encode
    more than once (a retry in 30 s, the language read on an utterance alone, a fallback's decode)."""
    stats["mel_ms"] = stats.get("mel_ms", 0.0) + encoding.mel_ms
    stats["encoder_ms"] = stats.get("encoder_ms", 0.0) + encoding.encoder_ms


@dataclass(frozen=True, slots=True)
class _Heard:
    """Deviation 52 where the language is detected: the utterance's own closing input, ``n`` samples,
    its ``encoding`` and the language ``guess`` read on it; ``same``: what is heard there leaves the
    stream's language, that of the final words before it, as it is, so the round reaches back."""

    guess: LanguageGuess
    n: int
    encoding: Encoding
    same: bool


def _language_stays(guess: LanguageGuess, language: str, session: bool) -> bool:
    """A closing round's ``guess`` leaves the stream's ``language`` as it is and is sure enough not to
    be tried in another: the same language (not unsure, under ``_UNSURE_P``, before the ``session``
    has one: deviation 38), or another one unsure against the session's (under ``_SWITCH_P``:
    deviation 33)."""
    if guess.code == language:
        return session or guess.probability >= _UNSURE_P
    return session and guess.probability < _SWITCH_P


def _heard_with_silence(audio: np.ndarray, n: int) -> np.ndarray:
    """``audio`` followed by digital silence up to ``n`` samples (the encoder sees it, unmasked)."""
    return np.concatenate([audio, np.zeros(max(0, n - audio.size), np.float32)])


def _floor(spans: list[tuple[int, int]], onset: int) -> list[tuple[int, int]]:
    """Token spans moved to start no earlier than the utterance's speech onset (DTW puts the first
    word at the start of the input, which holds ``speech_pad_s`` of silence before the speech).

    Not where the decode times ``_MISSED_WORDS`` or more words, each with a length, wholly before
    the onset less ``_ONSET_SLACK_N``: the speech detector missed speech there (a radio call's first
    line that Silero rates under its threshold, heard by a decode from the stream's first sample),
    and moved to the onset those words would all collapse onto one instant (Apollo 13's "Okay,
    Houston, I believe we've had a problem here": seven words at 3.2 s, a subtitle cue of 1 ms)."""
    missed = len({(a, b) for a, b in spans if a < b <= onset - _ONSET_SLACK_N})  # a word's tokens share its span
    if missed >= _MISSED_WORDS:
        return spans
    return [(max(a, onset), max(b, onset)) for a, b in spans]


def _follow(committed: list[bytes], decoded: list[bytes]) -> int | None:
    """Index of the first decoded word after the committed ones, found by aligning the texts
    (difflib); None when the last two committed words match nothing."""
    if not committed:
        return 0
    blocks = [b for b in difflib.SequenceMatcher(None, committed, decoded, autojunk=False).get_matching_blocks() if b.size]
    if not blocks or blocks[-1].a + blocks[-1].size < len(committed) - 1:
        return None
    last = blocks[-1]
    return last.b + last.size + (len(committed) - last.a - last.size)


@dataclass(frozen=True)
class _Reread:
    """Deviation 53: a closing decode's reading of the last closed utterance's words that replaces
    them: from log token ``token`` on, by its words from index ``word`` on, the tokens before its
    candidate ``until`` (the utterance's first) timed within ``[floor, ceiling]`` (absolute samples:
    the end of the word before them, the end of the last one they replace; DTW stretches a
    sentence's last word over the pause after it when the next sentence follows in the input)."""

    token: int
    word: int
    floor: int
    until: int
    ceiling: int


def _reread_at(before: list[bytes], decoded: list[bytes], open_from: int) -> tuple[int, int, int] | None:
    """Deviation 53: (index in ``before``, index in ``decoded``) of the first word that a decode
    beginning with the final words ``before`` (:func:`_after_before`) reads otherwise among the
    last closed utterance's (``before[open_from:]``), after a word it reads alike, and the index of
    its first word after ``before``; None where it reads them alike or does not hear them: fewer than
    70 % of them read alike, or three or more in a row left out (Whisper skipped them)."""
    after = _after_before(before, decoded)
    if after is None:
        return None
    ops = difflib.SequenceMatcher(None, before, decoded[:after], autojunk=False).get_opcodes()
    if sum(i2 - i1 for tag, i1, i2, _, _ in ops if tag == "equal") < _REREAD_ALIKE * len(before):
        return None
    for k, (tag, i1, _, j1, _) in enumerate(ops):
        if tag != "equal" and k and ops[k - 1][0] == "equal" and open_from <= i1 < len(before):
            if any(t == "delete" and i2 - a >= _REREAD_SKIPPED for t, a, i2, _, _ in ops[k:]):
                return None
            return i1, j1, after
    return None


def _logprobs(result: DecodeResult, eot: int) -> list[float]:
    """Each candidate token's log-probability, EOT left out (empty where the decode has none)."""
    if len(result.logprobs) < len(result.candidates):
        return []
    return [lp for t, lp in zip(result.candidates, result.logprobs, strict=False) if t < eot]


def _after_before(before: list[bytes], decoded: list[bytes]) -> int | None:
    """Index of the first decoded word after ``before``, the final words that a closing input holds
    before its utterance, matched by text among the decode's first ``1.5 × len(before) + 2`` words (the
    same word later in the decode is another one: "Command Module Pilot ... Lunar Module Pilot"), one
    of them, the last, allowed to be heard otherwise; ``len(decoded)`` when no word follows them; None
    when neither of the last two matches there."""
    head = decoded[: len(before) * 3 // 2 + _BEFORE_SLACK]
    blocks = [b for b in difflib.SequenceMatcher(None, before, head, autojunk=False).get_matching_blocks() if b.size]
    if not blocks or blocks[-1].a + blocks[-1].size < len(before) - 1:
        return None
    last = blocks[-1]
    return min(len(decoded), last.b + last.size + (len(before) - last.a - last.size))


def _rest_cut(start: int, last_start: int | None, heard_to: int, early: bool, offset_n: int,
              stopped: int | None = None) -> int:
    """Samples into a closing input that begins at ``start`` from which the rest of its utterance is
    decoded again (0: from nowhere): ``offset_n`` from the start of the last word it committed
    (``last_start``, absolute samples; None: it committed none). A decode that Whisper ended early
    (``early``, deviation 28) but that committed no word (it heard only words already kept: "about."
    and EOT) or whose words DTW put on the input's first frame is cut ``offset_n`` from where it was
    heard to (``heard_to``, absolute: its last tokens' attention), or its rest would be lost. So is a
    decode that a guard stopped (``stopped``, absolute: where the stopped word attends) with no new
    word: the rest of a quick "Yeah, yeah, like how much …", decoded again from the kept "Yeah", stopped
    at the same repeat each time, and the words after it were lost (AMI meeting speech)."""
    cut = _frames(max(0, last_start - start + offset_n)) if last_start is not None else 0
    if cut == 0 and early:
        cut = _frames(max(0, heard_to - start + offset_n))
    elif cut == 0 and stopped is not None:
        cut = _frames(max(0, stopped - start + offset_n))
    return cut


def _words_from(tokens: list[CommittedToken], sample: int, vocab) -> list[CommittedToken]:
    """The tokens of the words of ``tokens`` (in order) whose first token starts at ``sample`` or later."""
    kept: list[CommittedToken] = []
    keep = False
    for t in tokens:
        if vocab.starts_word(t.id):
            keep = t.start >= sample
        if keep:
            kept.append(t)
    return kept


def _drafts_after_last_word(dropped: list[CommittedToken], decoded: list[CommittedToken], vocab) -> list[CommittedToken]:
    """Deviation 48: the tokens of ``dropped`` (drafts, in order) after the draft word that a splitting
    closing decode (``decoded``, non-empty) ends with: a draft of the same text that starts at most
    ``_UNHEARD_SLACK_N`` before the decode's. The decode did not hear them, whatever their DTW times
    (a live round's last words can collapse onto the pause). Empty when no draft is that word."""
    last = _word_groups(tuple(t.id for t in decoded), vocab)[-1]
    text, at = normalize_word(vocab.text_bytes(last)), decoded[-len(last)].start
    groups = [dropped[f : f + k] for f, k in split_words([t.id for t in dropped], vocab)]
    for i in range(len(groups) - 1, -1, -1):
        if groups[i][0].start < at - _UNHEARD_SLACK_N:
            break
        if normalize_word(vocab.text_bytes(t.id for t in groups[i])) == text:
            return [t for g in groups[i + 1 :] for t in g]
    return []


def _word_groups(tokens: tuple[int, ...], vocab) -> list[tuple[int, ...]]:
    """``tokens`` split into words (token tuples)."""
    return [tokens[f : f + k] for f, k in split_words(tokens, vocab)]


def _summed(result: DecodeResult, other: DecodeResult) -> DecodeResult:
    """``result`` with ``other``'s decoding costs added (a decode made and not kept)."""
    return replace(result, chunks=result.chunks + other.chunks, decoder_ms=result.decoder_ms + other.decoder_ms,
                   validation_ms=result.validation_ms + other.validation_ms)


def _merge(first: EngineUpdate, then: EngineUpdate) -> EngineUpdate:
    """One update equivalent to applying ``first`` then ``then`` (the stats of ``then``)."""
    kept = max(0, len(first.words) - then.retract)
    retract = first.retract + max(0, then.retract - len(first.words))
    return EngineUpdate(retract, first.words[:kept] + then.words, then.stats, then.source, settled=then.settled)
