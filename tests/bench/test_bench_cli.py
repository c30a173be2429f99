"""``captioner bench --random-dims tiny --short`` end to end: every section present with sane values.

This is the CI guard that keeps the bench from rotting: a random whisper-tiny-shaped pack is built
by the real builder (cached in the test's home), every section runs on real ONNX Runtime sessions,
and the JSON, the Markdown and the plots are checked. Timings are not judged here (benchmarks, not
timed tests); only that they exist, are positive and are consistent with each other.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from captioner import cli
from captioner.bench.report import check_targets, markdown
from captioner.models.pack import Pack, describe_computation
from captioner.storage.paths import AppPaths

STAGES = ("mel_ms", "encoder_ms", "decoder_ms", "validation_ms", "dtw_ms", "other_ms", "host_ms", "total_ms")


@pytest.fixture(scope="module")
def bench_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[dict, str, Path]:
    """(JSON result, Markdown report, plots dir) of one short tiny-dims run."""
    root = tmp_path_factory.mktemp("bench")
    paths = AppPaths.default(root / "home")
    out, report, plots = root / "bench.json", root / "bench.md", root / "plots"
    code = cli.run(["bench", "--random-dims", "tiny", "--short", "--json", str(out), "--report", str(report),
                    "--plots", str(plots)], paths)
    assert code == 0
    return json.loads(out.read_text(encoding="utf-8")), report.read_text(encoding="utf-8"), plots


def test_encoder_section_has_every_bucket_and_ratios(bench_run) -> None:
    result, _, _ = bench_run
    rows = {b["bucket_s"]: b for b in result["encoder"]["buckets"]}
    assert sorted(rows) == [3, 4, 5, 6, 10, 20, 30]
    assert all(r["encoder_ms"] > 0 and r["mel_ms"] > 0 for r in rows.values())
    assert rows[30]["ratio_to_full"] == pytest.approx(1.0)
    for r in rows.values():
        assert r["ratio_to_full"] == pytest.approx(r["encoder_ms"] / rows[30]["encoder_ms"])


def test_decoder_strategies_dispatch_as_designed(bench_run) -> None:
    result, _, _ = bench_run
    dec = result["decoder"]
    assert set(dec["strategies"]) == {"unrolled", "unrolled_stepwise", "per_token", "fixed200"}
    schedule = dec["schedule"]
    for t in dec["t_values"]:
        unrolled = dec["strategies"]["unrolled"][str(t)]
        chunks = next(n for n in range(1, len(schedule) + 1) if sum(schedule[:n]) >= t)
        assert unrolled["dispatches"] == chunks and unrolled["positions"] == sum(schedule[:chunks])
        assert unrolled["ratio_to_unrolled"] == pytest.approx(1.0)
        stepwise = dec["strategies"]["unrolled_stepwise"][str(t)]
        assert (stepwise["dispatches"], stepwise["positions"]) == (unrolled["dispatches"], unrolled["positions"])
        for name in ("per_token", "fixed200"):
            row = dec["strategies"][name][str(t)]
            assert row["dispatches"] == t and row["positions"] == t
            assert row["ms"] > 0 and row["ratio_to_unrolled"] == pytest.approx(row["ms"] / unrolled["ms"])
    assert schedule == [4, 6, 5, 5, 5, 5]
    assert dec["cache_slots"] == 25  # the last chunk's start
    assert dec["self_attention_mac_ratio_fixed_vs_unrolled"] == pytest.approx(200 / 25)


def test_chunk_size_section_compares_3_5_7(bench_run) -> None:
    cs = bench_run[0]["chunk_sizes"]
    assert set(cs["sizes"]) == {"3", "5", "7"}
    for k, row in cs["sizes"].items():
        assert row["schedule"][:2] == [4, 6] and set(row["schedule"][2:]) == {int(k)}
        assert row["mean_ms_t5_30"] > 0 and row["calls_mean_t5_30"] > 0
        assert all(row["by_t"][t]["ms"] > 0 and row["by_t"][t]["positions"] >= int(t) for t in row["by_t"])
    # smaller chunks mean more calls on average; larger ones more positions computed for nothing
    assert cs["sizes"]["3"]["calls_mean_t5_30"] > cs["sizes"]["5"]["calls_mean_t5_30"] > cs["sizes"]["7"]["calls_mean_t5_30"]
    assert cs["sizes"]["3"]["extra_positions_mean_t5_30"] < cs["sizes"]["7"]["extra_positions_mean_t5_30"]
    assert cs["chosen"] in (3, 5, 7) and cs["fastest"] in (3, 5, 7)
    # two repetitions cannot show a difference: the short run keeps the paper's K = 5 unless it is fastest
    assert cs["reps"] == 2 and cs["chosen"] == 5
    assert cs["sizes"]["5"]["faster_than_paper_reps"] == 0 and cs["sizes"]["5"]["paired_gain"] == 0.0
    assert all(row["paired_gain_lower"] <= row["paired_gain"] for row in cs["sizes"].values())
    assert all(0 <= row["faster_than_paper_reps"] <= 2 for row in cs["sizes"].values())
    # the report checks the pack's K against this run's choice
    assert bench_run[0]["pack"]["tail_chunk"] == 5 and cs["margin"] == 0.05
    target = next(t for t in check_targets(bench_run[0]) if t["target"] == "default_chunk")
    assert target["value"] == 5 and target["limit"] == 5 and target["met"] is True


def test_streaming_runs_report_rtf_stages_memory_and_start(bench_run) -> None:
    result, _, _ = bench_run
    runs = {r["step_s"]: r for r in result["streaming"]}
    assert sorted(runs) == [1.0, 2.0]
    for step, r in runs.items():
        assert r["audio_s"] == pytest.approx(16.0)
        assert r["rtf"] > 0 and r["wall_s"] > 0
        assert r["decoded_rounds"] >= 1 and r["rounds"] >= r["decoded_rounds"]
        assert r["rounds"] <= 16.0 / step + 2
        assert all(r["per_round_ms"][s]["median"] >= 0 for s in STAGES)
        assert r["per_round_ms"]["encoder_ms"]["median"] > 0 and r["per_round_ms"]["decoder_ms"]["median"] > 0
        assert r["chunks_per_round"] >= 1 and r["tokens_per_round"] >= 0
        assert 0 < r["first_round_s"] <= r["first_round_from_process_start_s"]
        assert r["peak_rss_bytes"] >= r["rss_loaded_bytes"] > 0
        assert r["sessions"] >= r["sessions_streaming"] >= 2
        assert r["provider"] == "CPU" and r["weights_bytes"] == result["pack"]["weights_bytes"]


def test_providers_are_named_for_every_graph(bench_run) -> None:
    providers = bench_run[0]["providers"]
    assert providers["chosen"] == "CPU"
    graphs = providers["graphs"]
    assert any(name.startswith("encoder_") for name in graphs)
    assert "decoder_s200_k1.onnx" in graphs  # AI Hub's fixed 200-slot graph
    assert all(ep == "CPUExecutionProvider" for ep in graphs.values())


def test_markdown_and_plots(bench_run) -> None:
    result, report, plots = bench_run
    assert result["pack"]["attention"] == "standard" and "fused attention" not in report
    # the pack said as `models list` and `doctor` say it
    pack = Pack.load(result["pack"]["path"])
    assert f"{pack.description}; weights" in report.splitlines()[2]
    fused = {**result, "pack": {**result["pack"], "attention": "fused"}}  # a pack built --attention fused
    said = describe_computation(pack.layers, pack.precision, pack.linear, pack.vocab, "fused")
    assert said.endswith(", fused attention") and f"{said}; weights" in markdown(fused).splitlines()[2]
    for heading in ("## Encoder per bucket", "## Decoder strategies", "## Tail chunk size K", "## Streaming",
                    "## Providers", "## Targets"):
        assert heading in report
    names = sorted(p.name for p in plots.iterdir())
    assert names == ["chunk_sizes.png", "decoder.png", "encoder.png", "stages.png"]
    assert all((plots / n).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" for n in names)


@pytest.mark.parametrize("argv, message", [
    (["--step", "5"], "step must be between"),
    (["--sections", "encoder,warp"], "unknown bench section"),
    (["--threads", "-1"], "must not be negative"),
    (["--audio", "/nonexistent.wav"], "does not exist"),
])
def test_bad_options_are_one_line_errors(argv, message, tmp_path: Path, capsys) -> None:
    code = cli.run(["bench", "--random-dims", "tiny", *argv], AppPaths.default(tmp_path))
    err = capsys.readouterr().err
    assert code == 2
    assert message in err and len(err.strip().splitlines()) == 1
