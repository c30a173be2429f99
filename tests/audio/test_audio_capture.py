"""AudioCapture with fake devices: overflow, device loss and recovery, "both", mixing, errors."""

from __future__ import annotations

import itertools
import time

import numpy as np
import pytest
from audio_fakes import FakeBackend, FakeSoundDevice, ManualStream, click_at, tone

from captioner.audio import AudioCapture, CaptureConfig, SystemBackend, resample
from captioner.audio.resample import downmix
from captioner.core import AudioBlock, AudioEvent
from captioner.errors import AudioDeviceError


def _collect(cap: AudioCapture, until: float, stop_when=None) -> tuple[list[AudioBlock], list[AudioEvent]]:
    """Read blocks and events until ``until`` (monotonic) or ``stop_when(blocks, events)``."""
    blocks: list[AudioBlock] = []
    events: list[AudioEvent] = []
    while time.monotonic() < until:
        b = cap.read(0.05)
        events += cap.events()
        if b is not None:
            blocks.append(b)
        if stop_when is not None and stop_when(blocks, events):
            break
    return blocks, events


def _contiguous(blocks: list[AudioBlock], source: str) -> np.ndarray:
    mine = [b for b in blocks if b.source == source]
    assert mine and mine[0].start == 0
    for a, b in itertools.pairwise(mine):
        assert b.start == a.end, "the audio clock must have no holes or overlaps"
    return np.concatenate([b.samples for b in mine])


def test_overflow_when_consumer_stalls_keeps_clock_true() -> None:
    backend = FakeBackend({"mic": 48_000}, {"mic": 2}, {"mic": tone(440, 48_000, 2)}, paced=False)
    cap = AudioCapture(CaptureConfig(source="mic", ring_s=0.1), backend)
    with cap:
        stream: ManualStream = backend.streams["mic"][0]
        stream.push(30)  # 0.6 s while nobody reads: the ring holds ~0.1 s
        blocks, events = _collect(cap, time.monotonic() + 0.3, lambda b, e: sum(len(x.samples) for x in b) >= 3000)
        stream.push(5)
    blocks += [b for b in iter(lambda: cap.read(0), None)]
    events += cap.events()
    audio = _contiguous(blocks, "mic")
    total_frames = 35 * stream.blocksize
    assert len(audio) == -(-total_frames * 16_000 // 48_000)  # dropped audio still advances the clock
    counters = cap.counters("mic")
    assert counters.dropped_blocks == 30 - 6 and counters.dropped_samples == 24 * 320
    overflow = [e for e in events if e.kind == "overflow"]
    assert len(overflow) == 1 and overflow[0].source == "mic" and "0.48 s" in overflow[0].message
    assert abs(overflow[0].at - 6 * 320) <= 64  # where the silence is (within the resampler's delay)
    assert overflow[0].seconds == pytest.approx(0.48)
    # what was kept is exactly the resampled device audio; what was dropped is silence
    expected = resample(downmix(np.concatenate(stream.delivered[:6])), 48_000)
    np.testing.assert_allclose(audio[:1800], expected[:1800], atol=1e-5)
    assert np.abs(audio[2000 : 6 * 320 + 24 * 320 - 100]).max() < 1e-3
    assert cap.finished


def _loss_test(call_finished: bool) -> tuple[float, list[AudioBlock], list[AudioEvent], FakeSoundDevice, float, float]:
    sd = FakeSoundDevice(
        {"Headset": (48_000, 1), "Laptop Mic": (44_100, 2)},
        default="Headset",
        signal_for=lambda name: tone(440 if name == "Headset" else 880, 48_000 if name == "Headset" else 44_100,
                                     1 if name == "Headset" else 2),
    )
    cap = AudioCapture(CaptureConfig(source="mic", device="Headset"), SystemBackend(sounddevice=sd, platform="linux"))
    t_start = time.monotonic()
    with cap:
        blocks, events = _collect(cap, time.monotonic() + 0.6)
        t_gone = time.monotonic()
        sd.remove("Headset", call_finished=call_finished, new_default="Laptop Mic")

        def reopened_and_flowing(bs: list[AudioBlock], es: list[AudioEvent]) -> bool:
            return any(e.kind == "device_reopened" for e in es) and bs[-1].end > (time.monotonic() - t_start - 0.3) * 16_000

        more, ev = _collect(cap, time.monotonic() + 5.0, reopened_and_flowing)
        blocks += more
        events += ev
        recovered = time.monotonic() - t_gone
        blocks += _collect(cap, time.monotonic() + 0.5)[0]
    blocks += [b for b in iter(lambda: cap.read(0), None)]
    t_end = time.monotonic()
    return recovered, blocks, events + cap.events(), sd, t_end - t_start, cap.counters("mic").lost_samples / 16_000


@pytest.mark.parametrize("call_finished", [False, True], ids=["portaudio-error", "finished-callback"])
def test_device_loss_reopens_default_and_loses_nothing(call_finished: bool) -> None:
    recovered, blocks, events, sd, wall, lost_s = _loss_test(call_finished)
    kinds = [e.kind for e in events]
    assert kinds.count("device_lost") == 1 and kinds.count("device_reopened") == 1
    assert kinds.index("device_lost") < kinds.index("device_reopened")
    reopened = next(e for e in events if e.kind == "device_reopened")
    assert "Laptop Mic" in reopened.message
    assert sd.opened == ["Headset", "Laptop Mic"]
    assert recovered < 2.5, f"recovery took {recovered:.2f} s"
    audio = _contiguous(blocks, "mic")
    # Nothing the headset delivered is lost: its whole output precedes the outage, sample-exact.
    headset = next(s for n, s in sd.streams if n == "Headset")
    lost_at = next(e for e in events if e.kind == "device_lost").at
    expected = resample(downmix(np.concatenate(headset.delivered)), 48_000)
    assert lost_at == len(expected)
    np.testing.assert_allclose(audio[:lost_at], expected, atol=1e-5)
    # The clock continues: the outage is silence, the new device follows, and the clock kept up
    # with wall time (to within the startup and teardown of the fake devices).
    assert 0 < lost_s < recovered + 0.1
    assert abs(len(audio) / 16_000 - wall) < 0.3
    after = audio[lost_at + round(lost_s * 16_000) + 200 :][:8000]
    assert len(after) > 4000
    spec = np.abs(np.fft.rfft(after))
    assert abs(np.argmax(spec) * 16_000 / len(after) - 880) <= 4  # the laptop mic's tone


def test_reopen_failures_report_once_then_recover() -> None:
    sd = FakeSoundDevice({"Headset": (48_000, 1)}, default="Headset", signal_for=lambda n: tone(440, 48_000))
    cap = AudioCapture(CaptureConfig(source="mic", retry_s=0.2), SystemBackend(sounddevice=sd, platform="linux"))
    with cap:
        _collect(cap, time.monotonic() + 0.3)
        sd.remove("Headset", call_finished=True)  # no device at all for a while
        _, events = _collect(cap, time.monotonic() + 1.0)
        sd.devices["USB Mic"] = (16_000, 1)
        sd.default = "USB Mic"
        _, ev = _collect(cap, time.monotonic() + 3.0, lambda b, e: any(x.kind == "device_reopened" for x in e))
        events += ev
    kinds = [e.kind for e in events]
    assert kinds.count("device_error") == 1, kinds  # reported once per failure streak, not per retry
    err = next(e for e in events if e.kind == "device_error")
    assert "Headset" in err.message and "captioner devices" in err.message
    assert kinds[-1] == "device_reopened" and cap.counters("mic").reopens == 1


def test_open_failure_names_the_device() -> None:
    sd = FakeSoundDevice({"Headset": (48_000, 1)}, default="Headset", signal_for=lambda n: tone(440, 48_000))
    cap = AudioCapture(CaptureConfig(source="mic", device="Nope"), SystemBackend(sounddevice=sd, platform="linux"))
    with pytest.raises(AudioDeviceError, match="'Nope'"):
        cap.start()
    assert cap.read(0.01) is None


def _both_backend() -> tuple[FakeBackend, list[float]]:
    t0 = [time.monotonic()]
    signals = {"system": click_at(0.7, 44_100, 2, t0), "mic": click_at(0.7, 48_000, 1, t0)}
    return FakeBackend({"system": 44_100, "mic": 48_000}, {"system": 2, "mic": 1}, signals), t0


def test_both_sources_are_tagged_and_clock_aligned() -> None:
    backend, _ = _both_backend()
    cap = AudioCapture(CaptureConfig(source="both"), backend)
    with cap:
        blocks, _ = _collect(cap, time.monotonic() + 1.3)
    blocks += [b for b in iter(lambda: cap.read(0), None)]
    assert {b.source for b in blocks} == {"system", "mic"}
    assert cap.sources == ("system", "mic")
    system, mic = _contiguous(blocks, "system"), _contiguous(blocks, "mic")
    assert np.abs(system).max() > 0.5 and np.abs(mic).max() > 0.5
    # both fakes clicked at the same wall-clock instant: same index on both clocks (± one block)
    assert abs(int(np.argmax(system)) - int(np.argmax(mic))) <= 320 + 16
    assert abs(len(system) - len(mic)) < 0.1 * 16_000


def test_both_mixed_is_one_system_stream() -> None:
    backend = FakeBackend(
        {"system": 44_100, "mic": 48_000},
        {"system": 2, "mic": 1},
        {"system": tone(1000, 44_100, 2, amp=0.3), "mic": tone(300, 48_000, 1, amp=0.3)},
    )
    cap = AudioCapture(CaptureConfig(source="both", mix_both=True), backend)
    with cap:
        blocks, _ = _collect(cap, time.monotonic() + 1.5)
    blocks += [b for b in iter(lambda: cap.read(0), None)]
    assert cap.sources == ("system",) and {b.source for b in blocks} == {"system"}
    mixed = _contiguous(blocks, "system")
    seg = mixed[4000:12000]
    spec = np.abs(np.fft.rfft(seg * np.hanning(len(seg))))
    hz = np.fft.rfftfreq(len(seg), 1 / 16_000)
    top2 = sorted(hz[np.argsort(spec)[-2:]])
    assert abs(top2[0] - 300) <= 4 and abs(top2[1] - 1000) <= 4
    assert cap.level("mic")[0] > 0.1 and cap.level("system")[0] > 0.1


def test_levels_are_latest_values_not_a_queue() -> None:
    backend = FakeBackend({"mic": 16_000}, {"mic": 1}, {"mic": tone(1000, 16_000, amp=0.5)}, paced=False)
    cap = AudioCapture(CaptureConfig(source="mic"), backend)
    with cap:
        backend.streams["mic"][0].push(10)
        assert cap.read(1.0) is not None
        rms, peak = cap.level("mic")
    assert rms == pytest.approx(0.5 / np.sqrt(2), rel=0.02) and peak == pytest.approx(0.5, rel=0.02)
    assert cap.level("system") == (0.0, 0.0)


def test_bad_config_is_rejected() -> None:
    with pytest.raises(ValueError, match="system, mic, both"):
        CaptureConfig(source="speakers")  # type: ignore[arg-type]
