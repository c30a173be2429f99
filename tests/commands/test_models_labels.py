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
