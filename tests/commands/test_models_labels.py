"""A pack is described one way (issue 26): ``models list`` and ``doctor`` name int8 layers where the pack
has them (not "fp32/matmul"), and give its size once, as megabytes on disk."""

from __future__ import annotations

from captioner import cli
from captioner.storage.paths import AppPaths


def test_list_and_doctor_describe_an_int8_pack_the_same_way(real_tiny_en_int8_pack, real_tiny_en_pack,
                                                            tmp_path, capsys) -> None:
    paths = AppPaths.default(tmp_path / "home")
    paths.packs.mkdir(parents=True)
    (paths.packs / "int8").symlink_to(real_tiny_en_int8_pack.root, target_is_directory=True)
    (paths.packs / "fp32").symlink_to(real_tiny_en_pack.root, target_is_directory=True)
    assert cli.run(["models", "list"], paths) == 0
    listing = dict(line.split("\t", 1) for line in capsys.readouterr().out.splitlines())
    assert cli.run(["doctor", "--no-verify", "--provider", "cpu"], paths) == 0
    doctor = capsys.readouterr().out
    for name, layers in (("int8", "int8 layers"), ("fp32", "fp32 layers")):
        described = f"{layers}, fp32 weights file, matmul, int8-ranked vocabulary"
        assert described in listing[name] and "MB on disk" in listing[name], listing[name]
        line = next(line for line in doctor.splitlines() if line.strip().startswith(f"{name}: OK"))
        assert described in line and "English-only" in line and "MB on disk" in line, line
    assert "fp32/matmul" not in doctor and not any("fp32/matmul" in v for v in listing.values())


def test_a_download_ends_in_one_line_on_a_terminal(capsys) -> None:
    """The install's byte progress is redrawn in place and ends once, even when the 100 % comes twice
    (seen installing base from PyPI: the wheel's last line printed two times)."""
    from captioner.commands.models import DownloadProgress

    progress = DownloadProgress()
    progress.tty = True
    for done in (0, 40_000_000, 133_300_000, 133_300_000):
        progress(done, 133_300_000, "downloading part2.whl from PyPI")
    progress(12_000_000, 12_000_000, "downloading part1.whl from PyPI")
    err = capsys.readouterr().err
    assert err.count("\n") == 2 and err.count("part2.whl from PyPI: 133.3/133.3 MB (100 %)") == 1, repr(err)


def test_doctor_says_when_a_pack_predates_the_short_buckets_verifier(real_tiny_en_pack, tmp_path, capsys,
                                                                     monkeypatch) -> None:
    """A pack built before the short buckets got a verifier still runs (its live rounds decode their drafts
    sequentially); ``doctor`` says so and how to get the faster graphs."""
    from captioner.models.pack import Pack

    paths = AppPaths.default(tmp_path / "home")
    paths.packs.mkdir(parents=True)
    (paths.packs / "tiny").symlink_to(real_tiny_en_pack.root, target_is_directory=True)
    assert cli.run(["doctor", "--no-verify", "--provider", "cpu"], paths) == 0
    assert "before every bucket had a verifier" not in capsys.readouterr().out  # a pack built now has them all
    verifier = Pack.verifier
    monkeypatch.setattr(Pack, "verifier", lambda self, bucket: verifier(self, bucket) if bucket > 6 else None)
    assert cli.run(["doctor", "--no-verify", "--provider", "cpu"], paths) == 0
    out = capsys.readouterr().out
    assert "tiny: OK" in out and "captioner models remove tiny, then models install" in out, out
