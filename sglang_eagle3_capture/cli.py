"""Command line: ``sglang-eagle3-capture`` (also ``python -m sglang_eagle3_capture``).

Subcommands register themselves through :data:`SUBCOMMAND_MODULES`: each listed module defines
``add_subcommand(subparsers)``, which adds its parser and sets ``handler=<function(args) -> int>``
with ``set_defaults``. To add ``inspect``/``verify``/``compare``/``check``, write a module with that
function and append its name here. Handlers raise :class:`UserError` (or one of the package's
validation errors) for bad input: :func:`main` prints one line to stderr and returns 2, with no
traceback. Heavy imports (torch, safetensors, sglang) happen inside handlers only.
"""

from __future__ import annotations

import argparse
import importlib
import json
import sys
from pathlib import Path

PROG = "sglang-eagle3-capture"

# Modules that contribute subcommands, in help order. Other helpers append theirs.
SUBCOMMAND_MODULES: list[str] = ["sglang_eagle3_capture.cli", "sglang_eagle3_capture.doctor"]


class UserError(Exception):
    """Bad input from the user: reported as one line, exit status 2."""


def _user_error_types() -> tuple[type[BaseException], ...]:
    from .convert import ConvertError  # light: torch/safetensors are imported only inside convert()
    from .draft_weights import WeightsError
    from .formats import FormatError
    from .layer_ids import LayerIdError
    from .manifest import ManifestError

    return (UserError, ManifestError, FormatError, LayerIdError, WeightsError, ConvertError)


def parse_layer_ids(text: str) -> list[int]:
    """``"-1,2,30"`` -> ``[-1, 2, 30]``; anything else is a :class:`UserError` naming the option."""
    try:
        ids = [int(part) for part in text.split(",")]
    except ValueError:
        raise UserError(f"--layer-ids: {text!r} is not a comma-separated list of integers; fix: e.g. --layer-ids=-1,2,30") from None
    return ids


def _normalise_argv(argv: list[str]) -> list[str]:
    """Join ``--layer-ids -1,2,30`` into ``--layer-ids=-1,2,30`` (argparse reads ``-1,...`` as an option)."""
    out, i = [], 0
    while i < len(argv):
        if argv[i] == "--layer-ids" and i + 1 < len(argv):
            out.append(f"--layer-ids={argv[i + 1]}")
            i += 2
        else:
            out.append(argv[i])
            i += 1
    return out


# --- manifest write / show -------------------------------------------------------------------------


def _cmd_manifest_write(args: argparse.Namespace) -> int:
    from .draft_weights import tensor_index
    from .manifest import Manifest, check_fc_width, find_manifest, load_target_config, manifest_path, target_dims, write_manifest

    draft = Path(args.draft_dir)
    if not draft.is_dir():
        raise UserError(f"{draft}: field 'DRAFT_DIR': not a directory; fix: pass the draft checkpoint directory")
    target_cfg, target_file = load_target_config(args.target)
    arch, n_layers, hidden = target_dims(target_cfg, str(target_file))
    prov = {"source": args.source, "convention": "layer-id"}
    if args.note:
        prov["note"] = args.note
    path = manifest_path(draft)
    if not args.force and find_manifest(draft) is not None:
        raise UserError(f"{path}: field '<file>': a manifest already exists; fix: pass --force to replace it")
    manifest = Manifest(tuple(parse_layer_ids(args.layer_ids)), arch, n_layers, hidden, prov, path=path)
    if (draft / "model.safetensors").is_file() or (draft / "model.safetensors.index.json").is_file():
        index = tensor_index(draft)
        if "fc.weight" not in index:
            raise UserError(f"{draft}: tensor 'fc.weight': missing; fix: point at an EAGLE-3 draft checkpoint")
        check_fc_width(manifest, index["fc.weight"].shape[-1], where=f"{index['fc.weight'].file}: fc.weight")
        checked = "fc width checked"
    else:
        checked = "no weights in DRAFT_DIR: fc width not checked"
    written = write_manifest(draft, manifest)
    print(f"wrote {written}: layer ids {list(manifest.layer_ids)} for {arch} ({n_layers} layers, hidden {hidden}); {checked}")
    if (draft / "config.json").is_file():
        from .formats import load_json
        from .stock_wiring import stock_sglang_capture

        stock = stock_sglang_capture(load_json(draft / "config.json", "the draft's config.json"), n_layers, "0.5.23")
        if stock.fed_layer_ids != manifest.layer_ids or stock.problem:
            print(f"note: {draft / 'config.json'} disagrees with the manifest: {stock.describe()}; "
                  f"`sglang-eagle3-capture convert SRC DST --layer-ids=...` writes a config that agrees")
    return 0


def _cmd_manifest_show(args: argparse.Namespace) -> int:
    from .layer_ids import hidden_state_indices
    from .manifest import read_manifest

    m = read_manifest(args.draft_dir)
    if args.json:
        print(json.dumps(m.to_dict(), indent=2))
        return 0
    print(f"manifest:      {m.path}")
    print(f"layer ids:     {list(m.layer_ids)}  (-1 = embedding output, k = output of decoder layer k)")
    print(f"HF indices:    {hidden_state_indices(m.layer_ids)}  (output_hidden_states / SGLang capture loop)")
    print(f"target:        {m.target_architecture}, {m.target_num_hidden_layers} layers, hidden {m.target_hidden_size}")
    print(f"fc in width:   {m.fc_in_features}")
    for key, value in m.provenance.items():
        print(f"provenance.{key}: {value}")
    return 0


# --- convert ---------------------------------------------------------------------------------------


def _cmd_convert(args: argparse.Namespace) -> int:
    from .convert import convert

    ids = parse_layer_ids(args.layer_ids) if args.layer_ids is not None else None
    report = convert(args.src, args.dst, target=args.target, layer_ids=ids)
    for line in report.lines():
        print(line)
    return 0


def add_subcommand(subparsers: argparse._SubParsersAction) -> None:
    """Add ``manifest write``, ``manifest show`` and ``convert``."""
    man = subparsers.add_parser("manifest", help="write or show a draft's layer manifest")
    msub = man.add_subparsers(dest="manifest_command", required=True, metavar="{write,show}")
    w = msub.add_parser("write", help="write DRAFT_DIR/eagle3_manifest.json")
    w.add_argument("draft_dir", metavar="DRAFT_DIR")
    w.add_argument("--layer-ids", required=True, help="layer ids the fc consumes, in fc order, e.g. --layer-ids=-1,2,30")
    w.add_argument("--target", required=True, metavar="TARGET", help="target model directory or its config.json")
    w.add_argument("--source", default="manual", help="provenance.source (default: manual)")
    w.add_argument("--note", help="provenance.note: free text, e.g. how the ids were established")
    w.add_argument("--force", action="store_true", help="replace an existing manifest")
    w.set_defaults(handler=_cmd_manifest_write)
    s = msub.add_parser("show", help="print a draft's manifest")
    s.add_argument("draft_dir", metavar="DRAFT_DIR")
    s.add_argument("--json", action="store_true", help="print the manifest document as JSON")
    s.set_defaults(handler=_cmd_manifest_show)
    c = subparsers.add_parser("convert", help="convert a speculators/SpecForge draft into an SGLang draft directory")
    c.add_argument("src", metavar="SRC")
    c.add_argument("dst", metavar="DST")
    c.add_argument("--target", metavar="TARGET", help="target model directory or its config.json "
                   "(default: the speculators verifier path, when local)")
    c.add_argument("--layer-ids", help="override the ids read from SRC, e.g. --layer-ids=-1,2,30")
    c.set_defaults(handler=_cmd_convert)


def build_parser() -> argparse.ArgumentParser:
    """The parser with every registered subcommand."""
    parser = argparse.ArgumentParser(prog=PROG, description="Explicit, checked EAGLE-3 hidden-state wiring for SGLang")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for name in SUBCOMMAND_MODULES:
        module = sys.modules[__name__] if name == __name__ else importlib.import_module(name)
        module.add_subcommand(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    """Run the command line; returns the exit status (0 ok, 2 bad input)."""
    argv = _normalise_argv(list(sys.argv[1:] if argv is None else argv))
    try:
        args = build_parser().parse_args(argv)
    except SystemExit as e:  # argparse reports usage errors itself (status 2) and --help (status 0)
        return int(e.code or 0)
    try:
        return int(args.handler(args))
    except _user_error_types() as e:
        print(f"{PROG}: error: {e}", file=sys.stderr)
        return 2
