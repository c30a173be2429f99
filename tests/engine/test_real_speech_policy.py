"""The streaming policy on real Whisper (tiny.en, Systran's weights) and real speech: what users see.

Clips: tests/data/speech (LibriSpeech, LJ Speech; licences in its README). Non-speech: the bench's
deterministic generators (captioner/bench/nonspeech.py). Scoring: Whisper's English normaliser and
jiwer, as the accuracy bench does.
"""

from __future__ import annotations

import difflib
import itertools
import json
import logging
from dataclasses import replace
from pathlib import Path

import jiwer
import numpy as np
import pytest
from whisper_normalizer.english import EnglishTextNormalizer

from captioner.audio import load_audio_file
from captioner.bench.accuracy import run_offline
from captioner.bench.joined import joined_audio
from captioner.bench.nonspeech import generate
from captioner.core import apply_update
from captioner.engine import OnnxAcousticModel, Runtime, Stream, StreamConfig
from captioner.engine.vad import VAD_WINDOW, SpeechDetector
from captioner.errors import CaptionerError

DATA = Path(__file__).resolve().parents[1] / "data" / "speech"
CLIPS = [json.loads(line) for line in (DATA / "manifest.jsonl").read_text(encoding="utf-8").splitlines() if line]
NORMALISE = EnglishTextNormalizer()
HARD = Path(__file__).resolve().parents[1] / "data" / "speech-hard"
HARD_REFERENCE = ("IF CALLED TO A CASE SUPPOSED OR SUSPECTED TO BE ONE OF POISONING THE MEDICAL MAN HAS TWO "
                  "DUTIES TO PERFORM TO SAVE THE PATIENT'S LIFE AND TO PLACE HIMSELF IN A POSITION TO GIVE "
                  "EVIDENCE IF CALLED ON TO DO SO")  # LibriSpeech 1998-15444-0000 (tests/data/speech-hard)
SR = 16000


@pytest.fixture(scope="module")
def model(real_tiny_en_pack) -> OnnxAcousticModel:
    return OnnxAcousticModel(real_tiny_en_pack, Runtime(real_tiny_en_pack, "cpu"))


def stream_words(model, audio: np.ndarray, step_s: float = 2.0, **config) -> list:
    stream = Stream(model, StreamConfig(step_s=step_s, **config))
    step = round(step_s * SR)
    for i in range(0, audio.size, step):
        stream.feed(audio[i : i + step])
        stream.step()
    stream.finish()
    return list(stream.words)


@pytest.mark.parametrize("kind", ["silence", "white", "brown", "tones"])
def test_no_words_on_non_speech(model, kind) -> None:
    audio = generate(kind, 20.0, seed=1)
    assert stream_words(model, audio) == []


def test_no_words_on_speech_followed_by_noise_only_the_speech(model) -> None:
    clip = CLIPS[0]
    speech = load_audio_file(DATA / clip["audio"])
    audio = np.concatenate([speech, generate("white", 10.0, seed=2)])
    words = stream_words(model, audio)
    assert words and words[-1].end <= speech.size / SR + 0.5
    assert NORMALISE(" ".join(w.text for w in words)) == NORMALISE(clip["text"])


@pytest.mark.parametrize("step_s", [1.0, 2.0])
def test_clips_come_out_within_the_wer_bound_and_keep_their_last_word(model, step_s) -> None:
    refs, hyps = [], []
    for clip in CLIPS:
        words = stream_words(model, load_audio_file(DATA / clip["audio"]), step_s)
        ref, hyp = NORMALISE(clip["text"]), NORMALISE(" ".join(w.text for w in words))
        refs.append(ref)
        hyps.append(hyp)
        assert hyp.split()[-1] == ref.split()[-1], f"{clip['id']}: last word lost or invented: {hyp!r}"
    wer = jiwer.wer(refs, hyps)
    print(f"tiny.en, {step_s} s step, {len(refs)} clips: WER {wer:.3f}")
    assert wer <= 0.10


def test_a_recording_that_fits_the_window_comes_out_as_offline_whisper_transcribes_it(model) -> None:
    """Deviation 27: the stream's first utterance, closing within 30 s of the first sample, is decoded
    from that sample in the 30 s window: the last closing round hears the recording from its start
    (leading silence included) in the 30 s bucket, and on a clip that is one utterance the final
    words are offline Whisper's (the accuracy bench's offline mode) at every step."""
    for clip in CLIPS:
        speech = load_audio_file(DATA / clip["audio"])
        for lead_s in (0.0, 1.0):
            audio = np.concatenate([np.zeros(round(lead_s * SR), np.float32), speech])
            offline = [w.text for w in run_offline(model, audio).words]
            for step_s in (1.0, 2.0):
                stream = Stream(model, StreamConfig(step_s=step_s))
                n = round(step_s * SR)
                closing = []
                for i in range(0, audio.size, n):
                    stream.feed(audio[i : i + n])
                    update = stream.step()
                    if update is not None and update.stats is not None and update.stats.closes:
                        closing.append(update.stats)
                final = stream.finish().stats
                closing += [final] if final is not None and final.closes else []
                why = f"{clip['id']} after {lead_s:g} s of silence at a {step_s:g} s step"
                assert closing and closing[-1].bucket == 30, why
                assert closing[-1].input_s >= lead_s + _speech_end_s(speech), why  # from the first sample
                assert [w.text for w in stream.words] == offline, why


def _speech_end_s(audio: np.ndarray) -> float:
    """Where the speech detector's last speech in ``audio`` ends, seconds."""
    detector = SpeechDetector(0.5)
    detector.feed(audio)
    detector.flush()
    span = detector.speech(0, audio.size)
    assert span is not None
    return span.end / SR


def test_no_word_starts_in_leading_silence(model) -> None:
    clip = CLIPS[1]
    speech = load_audio_file(DATA / clip["audio"])
    words = stream_words(model, np.concatenate([np.zeros(SR * 3 // 2, np.float32), speech]))
    detector = SpeechDetector()
    detector.feed(speech)
    onset = 1.5 + detector.speech(0, speech.size).start / SR
    assert words and words[0].start >= onset - 0.05  # one 32 ms detector window of slack


def test_speech_detector_is_independent_of_block_sizes() -> None:
    audio = np.concatenate([load_audio_file(DATA / c["audio"]) for c in CLIPS[:2]])
    whole, blocks = SpeechDetector(), SpeechDetector()
    whole.feed(audio)
    for i in range(0, audio.size, 777):
        blocks.feed(audio[i : i + 777])
    n = audio.size // VAD_WINDOW * VAD_WINDOW
    np.testing.assert_allclose(whole.probabilities(0, n), blocks.probabilities(0, n), atol=1e-5)
    span = whole.speech(0, n)
    assert span is not None and 0 < span.start < span.end <= n
    assert whole.speech(0, 0) is None


def test_the_latest_pause_between_two_sentences_is_found_and_a_trailing_silence_is_not_a_pause() -> None:
    """``SpeechDetector.pause`` (deviation 31 cuts a long utterance there): two clips 0.4 s apart; the
    latest non-speech run of at least ``min_s`` that speech follows inside the range holds the gap
    (asked up to 1 s into the second clip; the second clip has a pause of its own later on); every
    window of it is under the threshold and speech resumes right after it."""
    first, second = (load_audio_file(DATA / c["audio"]) for c in CLIPS[:2])
    gap = np.zeros(round(0.4 * SR), np.float32)
    audio = np.concatenate([first, gap, second])
    detector = SpeechDetector()
    detector.feed(audio)
    detector.flush()
    upto = first.size + gap.size + SR
    pause = detector.pause(0, upto, min_s=0.3)
    assert pause is not None and pause.start <= first.size and pause.end >= first.size + gap.size
    assert pause.start % VAD_WINDOW == 0 and pause.end % VAD_WINDOW == 0 and pause.end - pause.start >= 0.3 * SR
    assert (detector.probabilities(pause.start, pause.end) < 0.5).all()
    assert detector.probabilities(pause.end, pause.end + VAD_WINDOW)[0] >= 0.5  # speech resumes
    assert detector.probabilities(pause.start - VAD_WINDOW, pause.start)[0] >= 0.5  # after speech
    latest = detector.pause(0, audio.size, min_s=0.3)
    assert latest is not None and latest.start >= pause.end  # the second clip's own pause, later
    assert detector.pause(0, first.size + gap.size, min_s=0.3) is None  # no speech after it yet: not a pause
    assert detector.pause(0, upto, min_s=5.0) is None


RADIO = HARD / "radio-a11-launch-canary-1+2.wav"  # two Apollo 11 turns (tests/data/speech-hard)
RADIO_SECOND_TURN = "ROGER. READING YOU LOUD AND CLEAR. OUR INSERTION CHECKLIST IS COMPLETE, AND WE HAVE NO ABNORMALITIES."


@pytest.mark.parametrize("step_s", [1.0, 2.0])
def test_a_radio_turn_the_threshold_does_not_hear_is_transcribed(model, step_s) -> None:
    """The second turn (5.2–11.2 s) is 8 kHz downlink that Silero rates 0.25–0.45 throughout: by the
    threshold it is not speech and every word of it was lost. As faint speech (deviation 32) it is
    heard and decoded; the first turn, which Silero hears clearly, comes out the same."""
    audio = load_audio_file(RADIO)
    plain, faint = SpeechDetector(), SpeechDetector(faint=0.25)
    for det in (plain, faint):
        det.feed(audio)
        det.flush()
    turn = (round(5.2 * SR), audio.size // VAD_WINDOW * VAD_WINDOW)
    assert plain.speech(*turn) is None or plain.speech(*turn).end - plain.speech(*turn).start < 0.2 * SR
    assert faint.speech(*turn) is not None and faint.speech(*turn).start < 6 * SR

    without = stream_words(model, audio, step_s, speech_faint=0.0, speech_weak=0.0)
    words = stream_words(model, audio, step_s, speech_weak=0.0)  # the rule alone (weak speech hears the turn too)
    assert not [w for w in without if w.start >= 4.0]  # the turn was lost
    first = [w.text for w in words if w.start < 4.0]
    assert first == [w.text for w in without] and len(first) >= 6  # "Apollo 11, this is Houston …"
    reference = NORMALISE(RADIO_SECOND_TURN).split()
    for found, least in ((words, 6), (stream_words(model, audio, step_s), 5)):
        heard = NORMALISE(" ".join(w.text for w in found if w.start >= 4.0)).split()
        matched = sum(b.size for b in difflib.SequenceMatcher(a=reference, b=heard).get_matching_blocks())
        # tiny.en on radio: "… clear and efficient system complete and we have no …"; with weak speech
        # as well (the default) the turn starts 0.5 s sooner and ends "… we have nowhere to know"
        assert matched >= least, heard


APOLLO13 = HARD / "radio-a13-houston-problem.wav"  # Apollo 13's "we've had a problem" (tests/data/speech-hard)


@pytest.mark.parametrize("step_s", [1.0, 2.0])
def test_radio_speech_silero_hardly_rates_is_transcribed(model, step_s) -> None:
    """CAPCOM's "This is Houston. Say again, please." (0.2–1.5 s) Silero hears; Lovell's "Houston,
    we've had a problem." (2.2–3.4 s) and "We've had a MAIN B BUS UNDERVOLT." (5.3–6.3 s), 15 dB
    above the channel's noise, it rates 0.05–0.4, too little for faint speech (deviation 32): they
    were never decoded. As weak speech (deviation 45) they are heard; CAPCOM's words stay."""
    audio = load_audio_file(APOLLO13)
    plain, weak = SpeechDetector(faint=0.25), SpeechDetector(faint=0.25, weak=0.1)
    for det in (plain, weak):
        det.feed(audio)
        det.flush()
    problem, undervolt = (round(2.4 * SR), round(3.3 * SR)), (round(5.3 * SR), round(6.2 * SR))
    assert plain.speech(round(1.6 * SR), audio.size // VAD_WINDOW * VAD_WINDOW, min_s=0.0) is None
    assert weak.speech(*problem) is not None and weak.speech(*undervolt) is not None
    assert weak.speech(round(4.0 * SR), round(5.0 * SR), min_s=0.0) is None  # the pause between them stays

    without = stream_words(model, audio, step_s, speech_weak=0.0)
    words = stream_words(model, audio, step_s)
    assert without and not [w for w in without if w.start >= 2.0], [w.text for w in without]  # the turn was lost
    assert [w.text for w in words if w.start < 2.0] == [w.text for w in without]
    heard = NORMALISE(" ".join(w.text for w in words if w.start >= 2.0)).split()
    assert {"we", "have", "problem"} <= set(heard), heard  # tiny.en on this channel: "… can we have a problem"


APOLLO13_START = HARD / "radio-a13-houston-problem-start.wav"  # the same exchange from its first line


@pytest.mark.parametrize("step_s", [1.0, 2.0])
def test_words_heard_before_the_detected_speech_keep_their_times(model, step_s) -> None:
    """Swigert's "Okay, Houston, I believe we've had a problem here." (0.3–3.0 s), which Silero, the
    faint and the weak rules all miss, then CAPCOM's "This is Houston. Say again, please." (3.2–4.4 s),
    where the utterance's speech onset is set. The recording's decode from its first sample (deviation
    27) hears the first line, and the onset floor put every word of it at 3.2 s with no length: a
    subtitle cue of 1 ms. The floor now stands aside where two or more words are timed wholly before
    the onset: they keep their DTW times, in order, each with a length."""
    audio = load_audio_file(APOLLO13_START)
    cfg = StreamConfig(step_s=step_s)
    detector = SpeechDetector(cfg.vad_threshold, hold=cfg.speech_hold, faint=cfg.speech_faint,
                              faint_s=cfg.speech_faint_s, weak=cfg.speech_weak, weak_db=cfg.speech_weak_db,
                              loud_db=cfg.speech_loud_db, bridge_s=cfg.speech_bridge_s)
    detector.feed(audio)
    detector.flush()
    heard = detector.speech(0, audio.size // VAD_WINDOW * VAD_WINDOW, min_s=0.0)
    assert heard is not None and heard.start >= 3.0 * SR  # the first line is not speech to the detector

    words = stream_words(model, audio, step_s)
    before = [w for w in words if w.end <= 3.0]
    assert len(before) >= 5, [(w.text, w.start, w.end) for w in words]  # "Okay, I can leave that a problem"
    assert all(w.end > w.start for w in before)
    assert all(a.end <= b.start for a, b in itertools.pairwise(words))  # in order, none collapsed onto another
    assert NORMALISE(" ".join(w.text for w in words)).endswith("please")  # CAPCOM's line after it


@pytest.mark.parametrize("silence_s", [12.0, 22.0])
def test_a_first_sentence_after_long_silence_keeps_its_word_times(model, silence_s) -> None:
    """A session's first sentence after 12 s or more of digital silence (an app started before the
    meeting): its closing decode hears the stream from its first sample in the 30 s window, where
    DTW's trailing row won every silent frame and every word came out at the speech onset with no
    length (one instant in the JSON, a subtitle cue of reading time only). Each word now has its
    own time, that of the sentence heard alone moved by the silence."""
    speech = load_audio_file(DATA / "1221-135766-0002.wav")  # "Yet these thoughts affected Hester Prynne ..."
    alone = stream_words(model, speech)
    words = stream_words(model, np.concatenate([np.zeros(round(silence_s * SR), np.float32), speech]))
    timed = [(w.text, round(w.start, 2), round(w.end, 2)) for w in words]
    assert [w.text for w in words] == [w.text for w in alone], timed
    assert all(w.end > w.start for w in words), timed
    assert all(a.end <= b.start for a, b in itertools.pairwise(words)), timed
    for w, a in zip(words, alone, strict=True):
        assert abs(w.start - silence_s - a.start) <= 0.25, (timed, [(a.text, a.start, a.end) for a in alone])


@pytest.mark.parametrize("step_s", [1.0, 2.0])
def test_a_sentence_after_a_long_pause_is_timed_where_it_was_said(model, step_s) -> None:
    """A sentence, 12 s of silence, another: the second's closing decode reaches back over the
    silence to the first (deviation 52), and DTW over that input ran the second sentence's tokens
    down one frame at the first one's end, then took the silence and the sentence as its trailing
    uniform row: "He could wait no longer." at 4.90 s, every word with no length, in the SRT 12 s
    before it was said. Its words are aligned again on the audio after the first sentence
    (deviation 55): each at its own time, that of the sentence heard alone moved by where it starts."""
    first = load_audio_file(DATA / "LJ001-0011.wav")  # "It is of the first importance that the letter used ..."
    second = load_audio_file(DATA / "1089-134691-0000.wav")  # "He could wait no longer."
    at = (first.size + 12 * SR) / SR
    alone = stream_words(model, second, step_s)
    words = stream_words(model, np.concatenate([first, np.zeros(12 * SR, np.float32), second]), step_s)
    timed = [(w.text, round(w.start, 2), round(w.end, 2)) for w in words]
    late = words[len(words) - len(alone):]
    assert [w.text for w in late] == [w.text for w in alone], timed
    assert all(w.end <= first.size / SR + 0.3 for w in words[: len(words) - len(alone)]), timed
    for w, a in zip(late, alone, strict=True):
        assert abs(w.start - at - a.start) <= 0.3, (timed, [(a.text, a.start, a.end) for a in alone])


def test_a_sentence_before_a_long_pause_is_final_during_the_pause(model) -> None:
    """A closed sentence, 16 s of silence, the sentence again, fed 2 s at a time as a pipe brings it:
    during the pause the engine says its source settled (nothing open), every word of the sentence
    final, so ``transcribe - > out.txt`` and a live subtitle file write the sentence then; before,
    the rule that keeps a stream's last committed word back held it until the next speech. No later
    update takes back a word it made final, and no later word starts before its time."""
    speech = load_audio_file(DATA / "1221-135766-0002.wav")  # 4.8 s
    alone = [w.text for w in stream_words(model, speech)]
    pause = 16 * SR
    audio = np.concatenate([speech, np.zeros(pause, np.float32), speech])
    stream = Stream(model, StreamConfig(step_s=2.0))
    words: list = []
    settled: list[tuple[int, float, float]] = []  # (words then, settled at, audio fed then)
    for i in range(0, audio.size, 2 * SR):
        stream.feed(audio[i : i + 2 * SR])
        update = stream.step()
        if update is None:
            continue
        if settled:
            assert len(words) - update.retract >= settled[-1][0], "a word made final was taken back"
            assert all(w.start >= settled[-1][1] for w in update.words)
        apply_update(words, update)
        if update.settled is not None:
            settled.append((len(words), update.settled, min(i + 2 * SR, audio.size) / SR))
    apply_update(words, stream.finish())
    assert [w.text for w in words[: len(alone)]] == alone and len(words) > len(alone) + 5
    first = settled[0]
    assert first[2] <= (speech.size + pause) / SR, f"settled only at {first[2]} s, after the pause"
    assert first[0] == len(alone) and first[1] <= first[2]
    assert first[1] >= words[len(alone) - 1].end


def test_the_onset_floor_stands_aside_only_for_two_words_said_before_the_onset() -> None:
    """``_floor`` on token spans (a word's tokens share its span), onset at 3.2 s: one word before it,
    even of three tokens, or one DTW collapsed to no length, is floored as ever (DTW's first word at
    the input's start); two words of their own, each with a length and ending 0.2 s or more before
    the onset, stand with every other span of the decode."""
    from captioner.engine.stream import _floor

    onset = round(3.2 * SR)

    def s(a: float, b: float) -> tuple[int, int]:
        return round(a * SR), round(b * SR)

    one_word = [s(0.0, 1.0)] * 3 + [s(3.3, 3.6)]  # " Okay" in three tokens, then the detected speech
    assert _floor(one_word, onset) == [(onset, onset)] * 3 + [s(3.3, 3.6)]
    collapsed = [s(0.0, 0.0), s(0.0, 0.0), s(3.3, 3.6)]  # DTW's own collapse: no length
    assert _floor(collapsed, onset) == [(onset, onset), (onset, onset), s(3.3, 3.6)]
    in_the_pad = [s(3.05, 3.1), s(3.1, 3.15), s(3.3, 3.6)]  # within the onset pad's 0.2 s
    assert _floor(in_the_pad, onset) == [(onset, onset), (onset, onset), s(3.3, 3.6)]
    missed = [s(0.0, 1.0), s(1.0, 1.2), s(1.2, 3.3), s(3.3, 3.6)]  # "Okay, I ... here." then the speech
    assert _floor(missed, onset) == missed


MEETING = HARD / "ami-en2002b-feo072-0930.wav"  # AMI EN2002b, FEO072's headset (tests/data/speech-hard)


@pytest.mark.parametrize("step_s", [1.0, 2.0])
def test_soft_words_between_two_phrases_of_a_meeting_are_not_lost(model, step_s) -> None:
    """"Yeah I mean we could we could order them by meeting for example": Silero rates the soft "I
    mean" (0.55–0.95 s) 0.01–0.3 and "we could" (1.6–1.95 s) 0.27–0.41, so by the threshold the
    first phrase ended at 0.55 s, the round at 2 s closed it, and both were lost. Their level is
    that of the speech (−43 to −53 dBFS against a −80 dBFS room) and the next phrase comes 1.47 s
    after the first: as the speaker going on (deviation 39) they are speech, the utterance stays
    open across the pause, and its closing decode hears them. So, since deviation 52, does the second
    phrase's closing decode, which hears the first phrase's final words before it (asserted too)."""
    audio = load_audio_file(MEETING)
    plain, loud = SpeechDetector(), SpeechDetector(loud_db=20.0)
    for det in (plain, loud):
        det.feed(audio)
        det.flush()
    i_mean, we_could = (round(0.6 * SR), round(0.9 * SR)), (round(1.65 * SR), round(1.9 * SR))
    assert plain.speech(*i_mean, min_s=0.0) is None and loud.speech(*i_mean) == i_mean
    assert plain.speech(*we_could, min_s=0.0) is None and loud.speech(*we_could) == we_could
    assert loud.speech(round(1.0 * SR), round(1.5 * SR), min_s=0.0) is None  # the pause stays a pause

    without = NORMALISE(" ".join(w.text for w in stream_words(model, audio, step_s, speech_loud_db=0.0,
                                                              closing_before_s=0.0)))
    words = NORMALISE(" ".join(w.text for w in stream_words(model, audio, step_s, closing_before_s=0.0)))
    assert "i mean" not in without and words.startswith("yeah i mean we could"), (without, words)
    assert words.endswith("order them by meeting for example")
    after = NORMALISE(" ".join(w.text for w in stream_words(model, audio, step_s, speech_loud_db=0.0)))
    assert after == "yeah i mean we could order them by meeting for example", after  # deviation 52 alone


def test_the_speech_hold_extends_speech_only_after_speech_and_is_independent_of_block_sizes() -> None:
    """Silero's hysteresis (``hold``): a window at most ``hold`` below the threshold counts as speech
    only right after a speech window. Radio speech (8 kHz, noisy) hovers around the threshold, so
    held speech must reach past plain speech, never start it, and not depend on how audio arrives."""
    rng = np.random.default_rng(3)
    audio = np.concatenate([load_audio_file(DATA / CLIPS[1]["audio"]), 0.02 * rng.standard_normal(SR).astype(np.float32)])
    plain, whole, blocks = SpeechDetector(), SpeechDetector(hold=0.3), SpeechDetector(hold=0.3)
    plain.feed(audio)
    whole.feed(audio)
    for i in range(0, audio.size, 777):
        blocks.feed(audio[i : i + 777])
        blocks.speech(0, i + 777)  # asked as a stream asks, between blocks
    n = audio.size // VAD_WINDOW * VAD_WINDOW
    a, b, c = plain.speech(0, n), whole.speech(0, n), blocks.speech(0, n)
    assert a is not None and b == c and b is not None
    assert b.start == a.start and b.end > a.end  # starts where plain speech starts, ends later
    probs = whole.probabilities(0, n)
    first = int(np.flatnonzero(probs >= 0.5)[0])
    assert whole.speech(0, first * VAD_WINDOW) is None  # nothing held before any speech
    with pytest.raises(CaptionerError, match="hold"):
        StreamConfig(speech_hold=0.5)


def test_an_utterance_ending_on_a_round_boundary_is_closed_by_the_next_silent_round(model) -> None:
    """Speech that ends exactly where a round ends leaves a silent next input: the open utterance is
    closed there (its closing decode runs), not left as a draft until the end of the stream."""
    clip = CLIPS[1]
    speech = load_audio_file(DATA / clip["audio"])
    n = -(-speech.size // (2 * SR)) * 2 * SR  # the speech padded to whole 2 s steps
    audio = np.concatenate([speech, np.zeros(n - speech.size + 6 * SR, np.float32)])
    stream = Stream(model, StreamConfig(step_s=2.0))
    closed = []
    for i in range(0, audio.size, 2 * SR):
        stream.feed(audio[i : i + 2 * SR])
        update = stream.step()
        if update is not None and update.stats.closes:
            closed.append(update.stats.round_index)
    stream.finish()
    assert closed, "the utterance was never closed before finish()"
    assert NORMALISE(" ".join(w.text for w in stream.words)) == NORMALISE(clip["text"])


def test_a_stream_in_a_hurry_closes_without_the_look_back(model) -> None:
    """``Stream.hurry`` (set by the bounded-lag rule when the engine is behind): closing rounds decode
    only their own input, not the whole utterance again, so they cost no more than a round; the
    words still come out (the drafts stand)."""
    clip = max(CLIPS, key=lambda c: load_audio_file(DATA / c["audio"]).size)
    audio = load_audio_file(DATA / clip["audio"])

    def closing_inputs(hurry: bool) -> tuple[list[float], str]:
        stream = Stream(model, StreamConfig(step_s=1.0))
        stream.hurry = hurry
        closing = []
        for i in range(0, audio.size, SR):
            stream.feed(audio[i : i + SR])
            update = stream.step()
            if update is not None and update.stats is not None and update.stats.closes:
                closing.append(update.stats.input_s)
        final = stream.finish()
        closing.append(final.stats.input_s)
        return closing, " ".join(w.text for w in stream.words)

    relaxed, _ = closing_inputs(False)
    hurried, text = closing_inputs(True)
    assert max(hurried) < max(relaxed)  # the look-back reaches the utterance's start
    assert max(hurried) <= 3 * 1.0 + 0.5  # a round's input: the carry (≤ 2 steps) and one step
    assert jiwer.wer(NORMALISE(clip["text"]), NORMALISE(text)) <= 0.3


def test_a_loop_inside_a_word_is_stopped_and_the_rest_of_the_utterance_is_decoded(model) -> None:
    """LibriSpeech 1998-15444-0000 (tests/data/speech-hard): tiny.en's closing round looped
    "Chói-Chi-Chi-Chi-…" inside one word to the token limit; the token-block guard stops it, and the
    closing round then decodes the rest of the utterance again from its last kept word instead of
    dropping it (measured: 9 of 43 words wrong at both steps, offline 13; before: 73 errors).
    fp32 layers (tiny.en's default): that is where tiny.en loops on this clip (with int8 layers it
    mishears instead, 18 errors, and never loops: no guard to test). Deviation 27 off: the clip is a
    whole recording under 30 s, which the default decodes from its first sample as offline Whisper
    does (no loop either; offline's own mishearing, checked last); the utterance path is the one every
    later utterance of a stream takes."""
    assert model.pack.layers == "fp32"
    audio = load_audio_file(HARD / "1998-15444-0000.wav")
    reference = HARD_REFERENCE
    whole = " ".join(w.text for w in stream_words(model, audio, step_s=2.0))
    assert max(len(w) for w in whole.split()) < 20 and NORMALISE(whole).endswith("so"), whole
    for step_s in (1.0, 2.0):
        words = stream_words(model, audio, step_s=step_s, closing_from_start=False)
        text = " ".join(w.text for w in words)
        assert max(len(w.text) for w in words) < 20, text
        assert jiwer.wer(NORMALISE(reference), NORMALISE(text)) <= 0.3, text
        assert NORMALISE(text).endswith("do so"), text


def test_live_rounds_revise_the_drafts_at_small_steps_only(model) -> None:
    """Deviation 20 on real tiny.en and a 15 s utterance: at a 1 s step the rounds after the opening
    (whose inputs are the utterance from its start, heard with silence to 6 s) reach back to hear at
    least ~5 s; at a 2 s step (a carry cap of 4 s) only the opening rounds reach back. Either way the
    words come out as well as without the rule."""
    audio = load_audio_file(HARD / "1998-15444-0000.wav")

    def rounds(step_s: float, **config) -> tuple[list, str]:
        stream = Stream(model, StreamConfig(step_s=step_s, **config))
        stats = []
        for i in range(0, audio.size, round(step_s * SR)):
            stream.feed(audio[i : i + round(step_s * SR)])
            update = stream.step()
            if update is not None and update.stats.chunks and not update.stats.closes:
                stats.append(update.stats)
        stream.finish()
        return stats, " ".join(w.text for w in stream.words)

    live, text = rounds(1.0)
    opening = [s for s in live if s.bucket == 6]
    later = live[len(opening):]
    assert len(opening) >= 3 and later
    assert sum(s.revised_s > 0 for s in later) >= len(later) // 2, [(s.input_s, s.revised_s) for s in later]
    assert all(s.input_s >= 3.5 for s in later if s.revised_s > 0)
    paper, paper_text = rounds(1.0, opening_s=0.0, min_context_s=0.0)
    assert max(s.input_s for s in paper) <= 3 * 1.0 + 0.5 < max(s.input_s for s in later)
    reference = NORMALISE(HARD_REFERENCE)
    assert jiwer.wer(reference, NORMALISE(text)) <= jiwer.wer(reference, NORMALISE(paper_text)) + 0.05
    live2, _ = rounds(2.0)
    assert all(s.bucket == 6 or s.revised_s == 0 for s in live2)


def test_a_real_repeated_phrase_keeps_the_rest_of_the_sentence(model) -> None:
    """Real speech said again (issue 25): "… up and down, waiting, but" with its last second
    (2.68–3.68 s of the real recording: "down, waiting, but") spliced in once more. The repeat's
    cross-attention lies after the first time's, so the repetition guard lets it stand; before, it
    stopped every round there and "he could wait no longer" (6 words) was never shown."""
    clip = next(c for c in CLIPS if c["id"] == "1089-134691-0001")
    speech = load_audio_file(DATA / clip["audio"])
    a, b = round(2.68 * SR), round(3.68 * SR)
    audio = np.concatenate([speech[:b], speech[a:b], speech[b:]])
    for step_s in (1.0, 2.0):
        text = NORMALISE(" ".join(w.text for w in stream_words(model, audio, step_s)))
        assert text.endswith("he could wait no longer"), (step_s, text)
        assert text.count("waiting") == 2, (step_s, text)


def _espeak(tmp_path, sentence: str, pad: bool = True) -> np.ndarray:
    """``sentence`` said by espeak-ng (with ``pad``: 0.5 s of silence before and 1 s after); synthetic
    speech holds the control flow of a rule, real speech in the accuracy bench judges it."""
    import shutil
    import subprocess

    if shutil.which("espeak-ng") is None:
        pytest.skip("needs espeak-ng (scripts/setup --dev installs it)")
    wav = tmp_path / "said.wav"
    subprocess.run(["espeak-ng", "-w", str(wav), sentence], check=True, capture_output=True)
    audio = load_audio_file(wav)
    return np.concatenate([np.zeros(SR // 2, np.float32), audio, np.zeros(SR, np.float32)]) if pad else audio


def test_a_spoken_no_no_keeps_the_sentence_after_it(model, tmp_path) -> None:
    """The control flow on synthetic speech (espeak-ng): "No, no, I said …" lost everything after
    the first "no" (the lone-word rule stopped every round at the second); the second "no" attends
    to later audio, so the sentence stands."""
    audio = _espeak(tmp_path, "No, no, I said it was the red one, not the blue one on the table.", pad=False)
    text = NORMALISE(" ".join(w.text for w in stream_words(model, audio, 2.0)))
    assert text.startswith("no no i said it was the red one") and text.endswith("table"), text


def test_a_guard_stop_never_drops_the_speech_after_it(model, tmp_path) -> None:
    """The control flow on synthetic speech (espeak-ng): tiny.en hears "I tell you, you have …" with
    the second "you" attending only 0.16 s after the first (alignment heads), so the repetition guard
    stops the closing decode there; DTW stretches the kept "you," to the input's end, which hid that
    a second of speech was left. Where the stopped repeat attends now decides, and the rest of the
    utterance is decoded again (issue 25: before, "I tell you," and nothing after)."""
    audio = _espeak(tmp_path, "I tell you, you have no right to be here.")
    for step_s in (1.0, 2.0):
        text = NORMALISE(" ".join(w.text for w in stream_words(model, audio, step_s)))
        assert text.startswith("i tell") and text.endswith("you have no right to be here"), (step_s, text)


def test_the_rest_after_a_guard_stop_that_kept_no_new_word_is_not_lost(model, tmp_path, monkeypatch) -> None:
    """Deviation 35, the control flow on synthetic speech (espeak-ng; judged on real speech in the
    accuracy bench: an AMI speaker's "Yeah, yeah, like how much …"): tiny.en's closing decode of "Yes
    yes, we could order them by meeting." is stopped by the phrase guard at the second "yes"; the
    rest, decoded again from the kept "Yes", stops there again and keeps no new word. It is then
    decoded from where the stopped word is heard, and the sentence stands; decoding it again from the
    kept word each time lost everything after "Yes," (asserted below). Deviation 37, which hears this
    sentence whole by itself, is off here."""
    audio = _espeak(tmp_path, "Yes yes, we could order them by meeting.")
    for step_s in (1.0, 2.0):
        text = NORMALISE(" ".join(w.text for w in stream_words(model, audio, step_s, closing_unguarded=False)))
        assert text.startswith("yes") and text.endswith("by meeting") and "could order" in text, (step_s, text)
    _without_rule_35(monkeypatch)
    assert NORMALISE(" ".join(w.text for w in stream_words(model, audio, 2.0, closing_unguarded=False))) == "yes"


def _without_rule_35(monkeypatch) -> None:
    """The rest after a guard's stop decoded again from the last kept word, as before deviation 35."""
    from captioner.engine import stream as stream_module

    cut = stream_module._rest_cut
    monkeypatch.setattr(stream_module, "_rest_cut", lambda start, last, heard, early, offset, stopped=None:
                        cut(start, last, heard, early, offset))


@pytest.mark.parametrize(("sentence", "first", "last"), [("Right, right, I know.", "right", "i know"),
                                                         ("Okay okay, I see.", "okay", "i see")])
def test_a_guard_stop_under_a_second_before_the_end_leaves_the_rest_decoded(model, tmp_path, monkeypatch,
                                                                            sentence, first, last) -> None:
    """Deviation 36, the control flow on synthetic speech (espeak-ng; judged on real speech in the
    accuracy bench: an AMI speaker's "Yeah, yeah, I can imagine"): tiny.en's closing decode is stopped
    by the phrase guard at the repeated word, less than a second before the input's end (0.3-0.5 s
    for "Okay okay"); the rest is decoded again and the last words stand. With the second that a rest
    needed before, they were lost (asserted below). Deviation 37, which hears these sentences whole by
    itself, is off here."""
    from captioner.engine import stream as stream_module

    audio = _espeak(tmp_path, sentence)
    for step_s in (1.0, 2.0):
        text = NORMALISE(" ".join(w.text for w in stream_words(model, audio, step_s, closing_unguarded=False)))
        assert text.startswith(first) and text.endswith(last), (step_s, text)
    monkeypatch.setattr(stream_module, "_GUARD_REST_MIN_N", SR)
    assert NORMALISE(" ".join(w.text for w in stream_words(model, audio, 2.0, closing_unguarded=False))) == first


@pytest.mark.parametrize("step_s", [1.0, 2.0])
def test_a_repeat_the_guard_stopped_at_does_not_freeze_the_captions(model, tmp_path, step_s) -> None:
    """Deviation 49, the control flow on synthetic speech (espeak-ng; judged on real speech in the
    accuracy bench: an AMI speaker's quick "Yeah, yeah, like how much …" froze the live captions of
    the new speakers' joined checking half for 20 s at 2 s): tiny.en's live rounds of "Yes yes, we
    could order them …" stop at the second "yes" (its attention 0.18 s after the first's, the first
    token's own peak says nothing) and every round after, on the same input, stopped there again;
    the repeat is kept from the second such round on, so the sentence is shown 4 s in, where before
    only "Yes," was (asserted below), and the final words are the same."""
    audio = _espeak(tmp_path, "Yes yes, we could order them by meeting, and then we could look at all the results "
                              "together on the screen.", pad=False)
    at_4s = round(4.0 / step_s) - 1  # the round that ran when 4 s of audio had come
    shown, final = _shown_by_round(model, audio, step_s)
    assert shown[at_4s].startswith("yes yes we could order them by meeting"), shown
    frozen, before = _shown_by_round(model, audio, step_s, repeat_kept_once=False)
    assert frozen[at_4s] == "yes", frozen
    assert final == before and final.startswith("yes yes we could order") and final.endswith("on the screen"), final


@pytest.mark.parametrize(("sentence", "said"), [("Yes yes, we could order them by meeting.",
                                                 "yes yes we could order them by meeting"),
                                                ("Right, right, I know.", "right right i know"),
                                                ("Okay okay, I see.", "okay okay i see")])
def test_a_closing_decode_the_phrase_guard_stopped_is_decoded_again_without_it(model, tmp_path, monkeypatch,
                                                                              sentence, said) -> None:
    """Deviation 37, the control flow on synthetic speech (espeak-ng; judged on real speech in the
    accuracy bench: AMI speakers' "Yeah, yeah, like how much …"): tiny.en's closing decode is stopped
    by the phrase guard at the repeated word; decoded again in the 30 s window without that guard, as
    offline Whisper decodes it, it looks right by Whisper's own signs and is kept, the repeat as said.
    With deviations 35 and 36 taken away, so that only this rule can keep the rest, the sentence
    stands; without it too, only the first word was left."""
    from captioner.engine import stream as stream_module

    audio = _espeak(tmp_path, sentence)
    _without_rule_35(monkeypatch)
    monkeypatch.setattr(stream_module, "_GUARD_REST_MIN_N", SR)
    for step_s in (1.0, 2.0):
        assert NORMALISE(" ".join(w.text for w in stream_words(model, audio, step_s))) == said, step_s
    alone = stream_words(model, audio, 2.0, closing_unguarded=False)
    assert NORMALISE(" ".join(w.text for w in alone)) == said.split()[0]


def test_a_closing_decode_without_the_phrase_guard_that_loops_is_not_kept(model, tmp_path, monkeypatch,
                                                                         caplog) -> None:
    """Deviation 37's unguarded decode is kept only where it says no block of two or more words four
    times in a row (``said_in_a_loop``; judged on real speech in the accuracy bench: a father's three
    "wanna give me a kiss?" that whisper-base wrote seven times in a long stream). The control flow on
    espeak-ng: tiny.en hears "Go ahead, go ahead, go ahead." as "Go, my friend" three times; its
    closing decode is stopped by the phrase guard and its unguarded one says the block three times,
    which is speech at the real count (kept, every word) and a loop once the count is lowered to
    three (not kept: the guarded decode and its rest stand; how the rest reads the third block
    depends on the CPU's int8 kernel: left out without VNNI, "go a friend go a" with it)."""
    from captioner.engine import validate

    audio = _espeak(tmp_path, "Go ahead, go ahead, go ahead. Ready to copy.")
    said = "go my friend go my friend go my friend ready to copy"
    for step_s in (1.0, 2.0):
        assert NORMALISE(" ".join(w.text for w in stream_words(model, audio, step_s))) == said, step_s
    monkeypatch.setattr(validate, "_LOOP_TIMES", 3)
    for step_s in (1.0, 2.0):
        caplog.clear()
        with caplog.at_level(logging.DEBUG, logger="captioner.engine.stream"):
            looped = NORMALISE(" ".join(w.text for w in stream_words(model, audio, step_s)))
        unguarded = [r.getMessage() for r in caplog.records if "unguarded in 30 s" in r.getMessage()]
        assert unguarded and all("(loop, " in m for m in unguarded), (step_s, unguarded)
        assert looped != said and looped.startswith("go my friend go my friend"), (step_s, looped)
        assert looped.endswith("ready to copy"), (step_s, looped)  # the rest after the guard's stop decoded
        kept = stream_words(model, audio, step_s, closing_unguarded_loops=False)
        assert NORMALISE(" ".join(w.text for w in kept)) == said, step_s


TURN = HARD / "turn-1998-15444-0008+2033-164914-0000.wav"  # two speakers, 0.2 s apart (README there)


@pytest.mark.parametrize("step_s", [1.0, 2.0])
def test_a_closing_decode_whisper_ends_early_leaves_no_speech_undecoded(model, step_s) -> None:
    """Deviation 28, on real speech: one speaker ends ("… ten minims"), another starts 0.2 s later
    ("replied he, of a truth I heard him not …"); the speech detector hears one utterance, and
    tiny.en's closing decode ends (EOT) after the first sentence. The speech after its last word is
    decoded again by itself: the second speaker's sentence is kept, the first one's words too.
    Without the rule the whole second sentence was lost, at both steps (asserted below, so the
    clip keeps showing the failure the rule is for)."""
    audio = load_audio_file(TURN)
    text = NORMALISE(" ".join(w.text for w in stream_words(model, audio, step_s)))
    assert text.startswith("the days for") and "10 minutes" in text, text
    assert "of a truth i heard him not" in text and text.endswith("folks are all sleeping"), text
    before = NORMALISE(" ".join(w.text for w in stream_words(model, audio, step_s, closing_rest=False)))
    assert "truth" not in before and "sleeping" not in before, before


class EndsAtOnceAfterItsFirstLongWindow:
    """Real tiny.en whose long-window decodes (10, 20 or 30 s: closing rounds) after the first end at
    their first step (EOT wins every row): the decode of a rest (deviation 28) then finds no word,
    as whisper-base's did where the phrase guard stopped it at its first token on a sentence read
    twice ("Please call Stella." read clean then noisy, continuous checking file)."""

    def __init__(self, model: OnnxAcousticModel) -> None:
        self._model, self.long_windows = model, 0

    def __getattr__(self, name: str):
        return getattr(self._model, name)

    def decoder(self, encoding):
        runner = self._model.decoder(encoding)
        if encoding.bucket >= 10:
            self.long_windows += 1
            if self.long_windows > 1:
                return _EndsAtOnce(runner)
        return runner


class _EndsAtOnce:
    def __init__(self, runner) -> None:
        self._runner = runner

    @property
    def verify_size(self) -> int:
        return self._runner.verify_size

    def run(self, start: int, size: int, token: int, forced: np.ndarray):
        out = self._runner.run(start, size, token, forced)
        return replace(out, eot_logit=out.token_logit + 10.0)

    def verify(self, start: int, token: int, proposal: np.ndarray):
        out = self._runner.verify(start, token, proposal)
        return replace(out, eot_logit=out.token_logit + 10.0)

    def rewind(self, consumed: int) -> None:
        self._runner.rewind(consumed)


@pytest.mark.parametrize("step_s", [1.0, 2.0])
def test_the_drafts_after_an_early_end_stand_when_the_rest_decode_finds_nothing(model, step_s) -> None:
    """Deviation 34: the turn clip's closing decode ends after the first speaker's sentence; the
    second speaker's live words (drafts) were dropped for the rest to be decoded again by itself.
    When that decode finds nothing mid-stream, the drafts stand (before: "the days for nadal is 10
    minutes" and nothing after, at both steps; whisper-base lost 55 words so on the continuous
    checking file). Each word once, in time order."""
    audio = np.concatenate([load_audio_file(TURN), np.zeros(3 * SR, np.float32)])
    ending = EndsAtOnceAfterItsFirstLongWindow(model)
    words = stream_words(ending, audio, step_s)
    assert ending.long_windows >= 2  # the rest was decoded again, and found nothing
    text = NORMALISE(" ".join(w.text for w in words))
    assert text.startswith("the days for") and "truth i heard him not" in text and "folks are" in text, text
    starts = [w.start for w in words]
    assert starts == sorted(starts), [(w.text, w.start) for w in words]
    assert len(text.split()) <= len(NORMALISE(" ".join(w.text for w in stream_words(model, audio, step_s))).split()) + 2


@pytest.mark.parametrize("step_s", [1.0, 2.0])
def test_a_sentence_said_twice_after_a_long_silence_comes_out_twice(model, step_s) -> None:
    """Deviation 28 must not fire on a decode that did reach the end: after 20 s of silence, DTW put
    the last word of "He could wait no longer. He could wait no longer." 2.8 s before the input's end,
    and the speech after it was decoded again and added (four copies); the alignment heads' peaks of
    the last tokens say where the decode really ended."""
    clip = load_audio_file(DATA / "1089-134691-0000.wav")
    gap = np.zeros(SR // 5, np.float32)
    audio = np.concatenate([np.zeros(20 * SR, np.float32), clip, gap, clip, np.zeros(SR, np.float32)])
    text = NORMALISE(" ".join(w.text for w in stream_words(model, audio, step_s)))
    assert text == "he could wait no longer he could wait no longer", text


class SkipsTheStartOfLongInputs:
    """Real tiny.en that, like whisper-base over 29 s of continuous reading (docs/accuracy/
    deviations.md, 29), transcribes only the last seconds of a long input: an input whose audio
    runs past 12 s is heard with all but its last 6 s silent. Live rounds (short inputs) hear
    everything; the speech detector hears the real audio."""

    def __init__(self, model: OnnxAcousticModel) -> None:
        self._model = model

    def __getattr__(self, name: str):
        return getattr(self._model, name)

    def encode(self, audio: np.ndarray, **kwargs):
        end = int(np.flatnonzero(audio)[-1]) + 1  # before the silence a short input is heard with
        if end > 12 * SR:
            audio = audio.copy()
            audio[: end - 6 * SR] = 0.0
        return self._model.encode(audio, **kwargs)


@pytest.mark.parametrize("step_s", [1.0, 2.0])
def test_a_closing_decode_that_skips_the_start_of_its_input_leaves_the_drafts_there(model, step_s) -> None:
    """Deviation 29: the four clips joined 0.2 s apart are one 15.6 s utterance; its closing decode
    (made to skip all but its last 6 s) begins mid-sentence ("then apprehension. It is of the first
    importance …"). The drafts before the words it matches stand, the words from there are its own,
    timed after the kept drafts. Without the rule (asserted too) the first 30 words were lost."""
    audio = joined_audio([DATA / c["audio"] for c in CLIPS], [0.0] + [0.2] * (len(CLIPS) - 1))
    skipping = SkipsTheStartOfLongInputs(model)
    words = stream_words(skipping, audio, step_s)
    text = NORMALISE(" ".join(w.text for w in words))
    assert text.startswith("he could wait no longer for a full hour"), text
    assert "yet these thoughts affected" in text and text.endswith("the letter used should be fine and form"), text
    starts = [w.start for w in words]
    assert starts == sorted(starts) and words[-1].start > 12.0, [(w.text, w.start) for w in words]
    before = NORMALISE(" ".join(w.text for w in stream_words(skipping, audio, step_s, closing_skip=False)))
    assert before.startswith("then apprehension"), before


@pytest.mark.parametrize("step_s", [1.0, 2.0])
def test_a_sentence_read_twice_keeps_both_copies_and_the_sentence_after(model, step_s) -> None:
    """Issue 25, a guard that fires must never drop speech: one VCTK speaker reads "Please call Stella."
    twice (clean, then the same recording with noise) and goes on, 0.2 s apart. The phrase guard took
    the second copy for a loop: at 1 s the repeat's "." attended where the first's did (punctuation
    attends anywhere) and the rest decoded after the stop began inside the first copy, whose words,
    now committed context, it stopped at again: "Please call Stella. Please" (2 s: "Please call
    Stella. call Stella"). Every copy and the sentence after it now come out, at both steps."""
    audio = load_audio_file(HARD / "said-twice-vctk-p287_001-clean+noisy+002-clean.wav")
    text = NORMALISE(" ".join(w.text for w in stream_words(model, audio, step_s)))
    assert text.startswith("please call stella please call stella"), text
    assert text.endswith("ask her to bring those things with her from the store"), text


def _closed_mid_stream(model, audio: np.ndarray, step_s: float, **config) -> tuple[list, list]:
    """The stream's words at the end, and for each closing round before ``finish()`` the final words
    shown right after it with the audio time it ran at (seconds)."""
    stream = Stream(model, StreamConfig(step_s=step_s, **config))
    step, closed = round(step_s * SR), []
    for i in range(0, audio.size, step):
        stream.feed(audio[i : i + step])
        update = stream.step()
        if update is not None and update.stats.closes:
            closed.append(([w for w in stream.words if not w.speculative], (i + step) / SR))
    stream.finish()
    return list(stream.words), closed


@pytest.mark.parametrize("step_s", [1.0, 2.0])
def test_a_long_utterance_is_closed_at_its_pauses_and_loses_no_word_there(model, step_s) -> None:
    """Deviation 31: the four clips joined 0.2 s apart are one 15.6 s utterance without a pause the
    stream closes at (0.5 s): without the rule (0) nothing is final before the stream's end. With
    ``closing_split_s`` at 6 s it is closed at a pause between two clips while the speech goes on:
    at that round every word before the cut is final and stays as it is; in the end every word is
    there once, in time order, as without the rule."""
    audio = joined_audio([DATA / c["audio"] for c in CLIPS], [0.0] + [0.2] * (len(CLIPS) - 1))
    reference = NORMALISE(" ".join(c["text"] for c in CLIPS))
    plain, never = _closed_mid_stream(model, audio, step_s, closing_split_s=0.0, closing_before_s=0.0)
    assert never == []
    words, closed = _closed_mid_stream(model, audio, step_s, closing_split_s=6.0, closing_before_s=0.0)
    assert closed
    for final, at_s in closed:
        assert final and final[-1].end < at_s and final == words[: len(final)]
    text = NORMALISE(" ".join(w.text for w in words))
    assert jiwer.wer(reference, text) < 0.06 and text == NORMALISE(" ".join(w.text for w in plain)), text
    starts = [w.start for w in words]
    assert starts == sorted(starts)
    # with deviation 52 the rest's closing decode also hears the final words before the cut: they stay
    heard, closed = _closed_mid_stream(model, audio, step_s, closing_split_s=6.0)
    for final, at_s in closed:
        assert final and final[-1].end < at_s and final == heard[: len(final)]
    text = NORMALISE(" ".join(w.text for w in heard))
    assert jiwer.wer(reference, text) < 0.06, text
    assert [w.start for w in heard] == sorted(w.start for w in heard)


@pytest.mark.parametrize("level_dbfs", [-70.0, -72.0])
def test_quiet_speech_under_the_silence_floor_is_captioned_whole(model, level_dbfs: float) -> None:
    """Deviation 40: a quiet microphone. The silence floor (−70 dBFS RMS) skipped every round under it
    as digital silence, even where the speech detector heard speech: at −70 or −72 dBFS only the
    rounds of the loudest words were decoded ("For a full hour he"), as on a FLEURS recording at −67
    dBFS whose last words went. Now an input under the floor is skipped only when the detector hears
    no speech in it, and quiet speech gives the words the same speech gives at −25 dBFS. (Lower, at
    −75 dBFS of 16-bit samples, Silero stops hearing the sentence's soft end.)"""
    clip = load_audio_file(DATA / "1089-134691-0001.wav")
    level = 20 * np.log10(np.sqrt(np.mean(np.square(clip, dtype=np.float64))))
    quiet = np.round(clip * 10 ** ((level_dbfs - level) / 20) * 32767).astype(np.float32) / 32767  # 16-bit capture
    assert 20 * np.log10(np.sqrt(np.mean(np.square(quiet, dtype=np.float64)))) < StreamConfig().silence_floor_dbfs + 0.5
    loud = NORMALISE(" ".join(w.text for w in stream_words(model, clip)))
    assert loud == NORMALISE("for a full hour he had paced up and down waiting but he could wait no longer")
    assert NORMALISE(" ".join(w.text for w in stream_words(model, quiet))) == loud
    alone = stream_words(model, quiet, vad=False)  # without the detector the level decides, as it did always
    assert len(alone) < len(loud.split()) - 3, alone


@pytest.mark.parametrize("step_s", [1.0, 2.0])
def test_a_quiet_real_recording_keeps_its_last_words(model, step_s: float) -> None:
    """Deviation 40 on a real quiet recording (FLEURS en_us, −67 dBFS RMS, tests/data/speech-hard): the
    closing input ("… and can fly", 2.78–4.32 s) measures −70.4 dBFS and was skipped as digital
    silence, so the stream ended "… they have feathers and". Now the closing decode runs, heard as
    offline Whisper hears the recording (deviation 27), and its words are offline's."""
    audio = load_audio_file(HARD / "fleurs-en_us-quiet-can-fly.wav")
    offline = NORMALISE(run_offline(model, audio).text).split()
    tail = offline[offline.index("feathers") :]
    assert tail[:2] == ["feathers", "and"] and len(tail) > 2, offline  # offline hears words after "feathers and"
    live = NORMALISE(" ".join(w.text for w in stream_words(model, audio, step_s))).split()
    assert live == offline
    alone = NORMALISE(" ".join(w.text for w in stream_words(model, audio, step_s, vad=False))).split()
    # the level alone skips the closing input: the stream ends on its drafts ("… feathers and", at 1 s
    # with the 0.3 s peak margin a partial "conf" after them), not on offline's last word
    assert alone != offline and alone[-1] != offline[-1], (alone, offline)


def _shown_by_round(model, audio: np.ndarray, step_s: float, **config) -> tuple[list[str], str]:
    """The captions (normalised) after each live round, and the final words."""
    stream = Stream(model, StreamConfig(step_s=step_s, **config))
    step, shown = round(step_s * SR), []
    for i in range(0, audio.size, step):
        stream.feed(audio[i : i + step])
        stream.step()
        shown.append(NORMALISE(" ".join(w.text for w in stream.words)))
    stream.finish()
    return shown, NORMALISE(" ".join(w.text for w in stream.words))


def test_a_backward_shift_with_speech_still_to_come_does_not_hold_the_captions_back(model) -> None:
    """Deviation 46: LJ Speech LJ001-0001 at a 1 s step. The paper's backward-shift test stopped two
    live rounds in a row at "we" ("… sense with which | we are at present concerned …") while the speech
    detector heard 1.2 and 1.8 s of speech after where the decoder attended: "we are", shown at 3 s,
    went from the captions for two rounds, and "concerned" came a round late. A shift with a second or
    more of speech still to come is the attention's noise between two words, not Whisper running out
    of audio: the captions keep "we are" and show "concerned" a round sooner; the final words are
    the same."""
    audio = load_audio_file(HARD / "LJ001-0001.wav")
    paper, paper_final = _shown_by_round(model, audio, 1.0, backward_speech_s=0.0)
    shown, final = _shown_by_round(model, audio, 1.0)
    assert final == paper_final and final.startswith("printing in the only sense with which we are at present"), final

    def first(phrase: str, captions: list[str]) -> int:
        return next(k for k, text in enumerate(captions) if phrase in text)

    k = first("with which we are", shown)
    assert k == first("with which we are", paper)
    assert all("with which we are" in text for text in shown[k:]), shown
    assert not all("with which we are" in text for text in paper[k:]), paper  # the paper's rounds took it back
    assert first("concerned", shown) < first("concerned", paper), (shown, paper)


def test_drafts_stand_when_a_revising_decode_keeps_no_word(model) -> None:
    """Deviation 47: VCTK p287's "Please call Stella." said twice, then "Ask her to bring these
    things …", at a 1 s step. The round at 6 s reaches back into the drafts (deviation 20) and its
    decode stops at its first word (the phrase guard takes the forced "Please" and "call Stella" for
    the phrase said a third time); replaced by nothing, the shown "call Stella. Ask her to bring those
    things" went from the captions until the closing decode. Now the drafts stand; the final words
    are the same."""
    audio = load_audio_file(HARD / "said-twice-vctk-p287_001-clean+noisy+002-clean.wav")
    before, before_final = _shown_by_round(model, audio, 1.0, revise_kept=False)
    shown, final = _shown_by_round(model, audio, 1.0)
    assert final == before_final and final.startswith("please call stella please call stella ask her to bring"), final
    k = next(k for k, text in enumerate(shown) if "ask her to bring" in text)
    assert all("ask her to bring" in text for text in shown[k:]), shown  # shown once, never taken back
    assert shown[:k + 1] == before[:k + 1]
    assert not all("ask her to bring" in text for text in before[k:]), before  # the old way took it back


def _repeated_run(text: str, n: int = 4) -> str | None:
    """A run of ``n`` words that ``text`` shows twice, else None."""
    words = text.split()
    runs = [" ".join(words[i : i + n]) for i in range(len(words) - n + 1)]
    return next((r for i, r in enumerate(runs) if r in runs[i + 1 :]), None)


def test_the_rest_of_a_closed_utterance_replaces_its_drafts_instead_of_showing_them_twice(model) -> None:
    """Deviation 48: two LibriSpeech speakers 0.2 s apart, at a 1 s step with ``closing_split_s`` at 8 s
    (tests/data/speech-hard). The closing round at 9 s ends the first sentence and leaves the rest
    ("… he, of a truth I heard him") standing as drafts (deviations 28, 34); the next round heard all
    of that rest and decoded it again as a live round, so its words came after the drafts: "he of a
    truth i heard him replied he of a truth i heard him not …" was shown. Now that round decodes the
    rest whole and its words replace the drafts; the final words are the same."""
    audio = load_audio_file(HARD / "turn-1998-15444-0008+2033-164914-0000.wav")
    before, before_final = _shown_by_round(model, audio, 1.0, closing_split_s=8.0, rest_drafts=False)
    shown, final = _shown_by_round(model, audio, 1.0, closing_split_s=8.0)
    assert final == before_final and "of a truth i heard him not" in final, final
    assert any(_repeated_run(text) for text in before), before  # the old way showed the rest twice
    assert not any(_repeated_run(text) for text in shown), shown
    assert "replied he of a truth i heard him not" in shown[9], shown  # the round after the closing one


@pytest.mark.parametrize("step_s", [1.0, 2.0])
def test_the_speech_after_a_closing_round_s_rest_is_heard_where_it_was_said(model, step_s) -> None:
    """Deviation 28's rest, carried: the two-speaker clip (tests/data/speech-hard), 1.3 s of silence,
    then a LibriSpeech sentence. The round that closes the clip's utterance cuts it 0.2 s after the
    speech; tiny.en's decode ends after the first speaker, so the rest is carried to be decoded
    again. That carry ended at the cut, and the next round's audio was joined to it without the
    non-speech between: every later position was off by that much, and at a 2 s step the sentence
    lost "For a full hour he had paced up and down, waiting, but". The rest is now carried to the
    end of the round's input, so the audio after it follows it where it was heard."""
    turn = load_audio_file(TURN)
    sentence = load_audio_file(DATA / "1089-134691-0001.wav")
    audio = np.concatenate([turn, np.zeros(round(1.3 * SR), np.float32), sentence])
    words = stream_words(model, audio, step_s)
    text = NORMALISE(" ".join(w.text for w in words))
    assert "of a truth i heard him not" in text, text
    assert text.endswith("for a full hour he had paced up and down waiting but he could wait no longer"), text
    detector = SpeechDetector()
    detector.feed(sentence)
    detector.flush()
    onset = (turn.size + round(1.3 * SR) + detector.speech(0, sentence.size).start) / SR
    first = next(w for w in words if w.start >= turn.size / SR)  # the sentence's first word, where it was said
    assert first.text == "For" and onset - 0.1 <= first.start <= onset + 0.5, (first, onset)


def test_a_live_decode_that_loops_is_heard_again_in_the_30_s_window(model) -> None:
    """Deviation 50: Apollo 11 launch-day radio (NASA, public domain), CAPCOM's "... if you're ready to
    copy." then the commander's "Stand by.", tiny.en at a 1 s step. The live round at 6 s decodes
    " and i i i": the token guard stops it at the loop, all three copies dropped, and "Stand by" was
    not shown until the utterance closed, where this decode lost it. Heard again in the 30 s window,
    the round's decode does not loop and shows "Stand by" at once, and it stays."""
    audio = load_audio_file(HARD / "radio-a11-launch-canary-3-from-3s.wav")
    looped, looped_final = _shown_by_round(model, audio, 1.0, loop_retry=False)
    shown, final = _shown_by_round(model, audio, 1.0)
    assert looped[:5] == shown[:5]  # the rounds before the loop are the same
    assert looped[5].endswith("ready to copy and") and "stand by" not in looped_final, (looped[5], looped_final)
    assert shown[5].endswith("ready to copy stand by"), shown[5]
    assert "stand by" in final, final


def closing_inputs(model, audio: np.ndarray, step_s: float, **config) -> tuple[list, list[float]]:
    """The stream's final words and the input length (seconds) of each round that closed an utterance."""
    stream = Stream(model, StreamConfig(step_s=step_s, **config))
    step, closed = round(step_s * SR), []
    for i in range(0, audio.size + step, step):
        stream.feed(audio[i : i + step])
        update = stream.step() if i < audio.size else stream.finish()
        if update is not None and update.stats is not None and update.stats.closes:
            closed.append(update.stats.input_s)
    return list(stream.words), closed


BEFORE_S = 19.6  # deviation 52's reach


def _two_sentences() -> np.ndarray:
    """Two LibriSpeech sentences of two speakers, 1 s apart: two utterances, the second 4.8 s long."""
    first, second = load_audio_file(DATA / "1089-134691-0001.wav"), load_audio_file(DATA / "1221-135766-0002.wav")
    gap = np.zeros(SR, np.float32)
    return np.concatenate([first, gap, second, gap])


@pytest.mark.parametrize("step_s", [1.0, 2.0])
def test_a_short_sentence_is_closed_heard_after_the_sentences_before_it(model, step_s) -> None:
    """Deviation 52: the second sentence's closing decode hears the first sentence before it (its
    input reaches back to the first sentence's words, as offline Whisper's window would hear both),
    and only its own words are replaced: the first sentence's final words, and when they were shown,
    are those of the engine without the rule."""
    audio = _two_sentences()
    words, closed = closing_inputs(model, audio, step_s, closing_before_s=BEFORE_S)
    alone, closed_alone = closing_inputs(model, audio, step_s, closing_before_s=0.0)
    assert closed[-1] > 4.8 + 1.0 and closed_alone[-1] < 4.8 + 1.0, (closed, closed_alone)
    first = [w for w in alone if w.end <= 5.5]
    assert [(w.text, w.start, w.end, w.emitted_at > 0) for w in words[: len(first)]] == [
        (w.text, w.start, w.end, w.emitted_at > 0) for w in first]
    text = NORMALISE(" ".join(w.text for w in words))
    reference = NORMALISE("for a full hour he had paced up and down waiting but he could wait no longer "
                          "yet these thoughts affected hester prynne less with hope than apprehension")
    assert jiwer.wer(reference, text) <= 0.15, text
    assert all(not w.speculative for w in words)


@pytest.mark.parametrize("step_s", [1.0, 2.0])
def test_a_closing_decode_that_does_not_hear_the_words_before_is_decoded_again_alone(model, step_s,
                                                                                    monkeypatch) -> None:
    """Deviation 52's fallback: a decode reaching back that does not begin with the final words before
    its utterance, or does not hear the utterance (Whisper ended before a radio reply, or skipped the
    start of the input and a sentence with it), is set aside and the utterance's own input decoded:
    the words are then exactly those of the engine without the rule."""
    import captioner.engine.stream as stream_module

    asked: list[int] = []

    def not_heard(before, decoded):
        asked.append(len(before))
        return None

    audio = _two_sentences()
    alone, _ = closing_inputs(model, audio, step_s, closing_before_s=0.0)
    monkeypatch.setattr(stream_module, "_after_before", not_heard)
    words, closed = closing_inputs(model, audio, step_s, closing_before_s=BEFORE_S)
    assert asked and all(n > 0 for n in asked)
    assert [(w.text, w.start, w.end) for w in words] == [(w.text, w.start, w.end) for w in alone]
    assert closed[-1] < 4.8 + 1.0  # the round's input is the utterance's own


def test_the_words_after_the_final_ones_are_found_at_the_start_of_the_decode() -> None:
    """``_after_before``: the final words are looked for among the decode's first words only (a
    phrase said again later is another one), one of them may be heard otherwise, and a decode
    whose last two final words match nothing there is not placed by text."""
    from captioner.engine.stream import _after_before

    def w(text: str) -> list[bytes]:
        return [x.encode() for x in text.split()]

    pao = w("the man nod your pilot my columns 99 lunar module pilot buzz aldrin 88")
    assert _after_before(w("command module pilot"), pao) == 5  # "my columns", not "buzz aldrin"
    assert _after_before(w("ready to copy"), w("ill be ready to copy")) == 5  # no word after them
    assert _after_before(w("steel and on"), w("deal anon margaret said")) is None
    assert _after_before(w("one pound of"), w("one pound off lobster meat")) == 3  # the last word heard otherwise
