"""Command line: ``sglang-eagle3-capture`` (also ``python -m sglang_eagle3_capture``): argparse and printing.

Subcommands: ``manifest write|show``, ``convert``, and the wiring doctor ``inspect`` (:mod:`.inspect`),
``verify`` (:mod:`.verify`) and ``compare`` (:mod:`.compare`). Exit status, the same for every subcommand:

====  =========================================================================================
0     consistent (or done)
1     mis-wired: the wiring the draft was trained on is not what would be / was fed
2     bad input: one line on stderr naming the file, the field and the fix
3     ambiguous: the draft's config means different layers depending on the release or trainer
      it was trained with, and nothing in the checkpoint settles it (``inspect``)
70    a bug in this package: one line naming what failed and the file holding the full traceback
====  =========================================================================================

Other modules add subcommands through :data:`SUBCOMMAND_MODULES`. Heavy imports (torch, safetensors) happen
inside the commands that need them.
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import sys
import tempfile
import traceback
from pathlib import Path

from ..draft.checkpoint import INDEX_FILENAME, SINGLE_FILENAME, tensor_index
from ..draft.convert import convert
from ..errors import AmbiguousLayerIds, Eagle3CaptureError, InputError, UsageError
from ..families import family_of
from ..formats import load_json
from ..layer_ids import hidden_state_indices
from ..manifest import Manifest, check_fc_width, find_manifest, manifest_path, read_manifest, write_manifest
from ..readings import releases_label, stock_sglang_capture
from ..target_config import load_target_config, target_dims
from .candidates import describe_sources, layer_label
from .compare import DEFAULT_MIN_COSINE, compare
from .inspect import inspect_draft
from .verify import DEFAULT_MARGIN, verify

PROG = "sglang-eagle3-capture"
EXIT_CONSISTENT, EXIT_MISWIRED, EXIT_BAD_INPUT, EXIT_AMBIGUOUS, EXIT_BUG = 0, 1, 2, 3, 70

# Modules that add subcommands after the built-in ones, in help order: each defines ``add_subcommand(subparsers)``,
# which adds its parser and sets ``handler=<function(args) -> int>`` with ``set_defaults``; handlers raise an
# :class:`~sglang_eagle3_capture.errors.InputError` (e.g. :class:`UsageError`) for bad input.
SUBCOMMAND_MODULES: list[str] = []



def parse_layer_ids(text: str) -> list[int]:
    """``"-1,2,30"`` -> ``[-1, 2, 30]``; anything else is a :class:`UsageError` naming the option."""
    try:
        ids = [int(part) for part in text.split(",")]
    except ValueError:
        raise UsageError(f"--layer-ids: {text!r} is not a comma-separated list of integers; fix: e.g. --layer-ids=-1,2,30") from None
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



def _cmd_manifest_write(args: argparse.Namespace) -> int:
    draft = Path(args.draft_dir)
    if not draft.is_dir():
        raise UsageError(f"{draft}: field 'DRAFT_DIR': not a directory; fix: pass the draft checkpoint directory")
    target_cfg, target_file = load_target_config(args.target)
    arch, n_layers, hidden = target_dims(target_cfg, str(target_file))
    prov = {"source": args.source, "convention": "layer-id"}
    if args.note:
        prov["note"] = args.note
    path = manifest_path(draft)
    if not args.force and find_manifest(draft) is not None:
        raise UsageError(f"{path}: field '<file>': a manifest already exists; fix: pass --force to replace it")
    manifest = Manifest(tuple(parse_layer_ids(args.layer_ids)), arch, n_layers, hidden, prov, path=path)
    if (draft / SINGLE_FILENAME).is_file() or (draft / INDEX_FILENAME).is_file():
        index = tensor_index(draft)
        if "fc.weight" not in index:
            raise UsageError(f"{draft}: tensor 'fc.weight': missing; fix: point at an EAGLE-3 draft checkpoint")
        check_fc_width(manifest, index["fc.weight"].shape[-1], where=f"{index['fc.weight'].file}: fc.weight")
        checked = "fc width checked"
    else:
        checked = "no weights in DRAFT_DIR: fc width not checked"
    written = write_manifest(draft, manifest)
    print(f"wrote {written}: layer ids {list(manifest.layer_ids)} for {arch} ({n_layers} layers, hidden {hidden}); {checked}")
    family = family_of(arch)
    if (draft / "config.json").is_file() and family is not None:
        stock = stock_sglang_capture(load_json(draft / "config.json", "the draft's config.json"), n_layers, family=family)
        if stock.fed_layer_ids != manifest.layer_ids or stock.problem:
            print(f"note: {draft / 'config.json'} disagrees with the manifest: {stock.describe()}; "
                  f"`sglang-eagle3-capture convert SRC DST --layer-ids=...` writes a config that agrees")
    return 0


def _cmd_manifest_show(args: argparse.Namespace) -> int:
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
    ids = parse_layer_ids(args.layer_ids) if args.layer_ids is not None else None
    report = convert(args.src, args.dst, target=args.target, layer_ids=ids, trained_with=args.trained_with)
    for line in report.lines():
        print(line)
    return 0



def _table(rows: list[list[str]]) -> list[str]:
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    return ["  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip() for r in rows]


# --- inspect ---------------------------------------------------------------------------------------


def _cmd_inspect(args: argparse.Namespace) -> int:
    r = inspect_draft(args.draft_dir, args.target, sglang_version=args.sglang, trained_with=args.trained_with)
    status = EXIT_CONSISTENT if r.ok else EXIT_AMBIGUOUS if r.ambiguous else EXIT_MISWIRED
    if args.json:
        print(json.dumps(r.to_dict(), indent=2))
        return status
    print(f"draft:       {r.draft_dir}")
    if r.manifest is not None:
        print(f"manifest:    layer ids {r.manifest['layer_ids']} for {r.manifest['target']['architecture']} "
              f"({r.manifest['target']['num_hidden_layers']} layers, hidden {r.manifest['target']['hidden_size']})")
    print("provenance:  " + ", ".join(f"{k}={v}" for k, v in r.provenance.items()))
    for c in r.checks:
        print(f"check:       {c}")
    for m in r.messages:
        print(f"note:        {m}")
    rows = [["", "layer ids", "HF indices", "status", "how"]]
    for names, w in [([r.declared.name], r.declared), *_grouped(r.readings)]:
        rows.append([_join_releases(names), str(list(w.layer_ids)), str(w.hf_indices),
                     w.status.upper() if w.status != "declared" else "", w.rule])
    print()
    print("\n".join(_table(rows)))
    for names, w in _grouped(r.readings):
        if w.problem:
            print(f"  {_join_releases(names)}: {w.problem}")
    print()
    print(f"plugin:      {'installed' if r.plugin_installed else 'NOT installed'} (sglang.srt.plugins entry point "
          "eagle3_capture)")
    for reading in r.ambiguous_readings:
        print(f"reading:     {reading.describe()}")
    print(f"verdict:     {r.verdict.upper()}: {r.summary}")
    return status


def _grouped(rows: list) -> list[tuple[list[str], object]]:
    """Consecutive rows that read the draft identically, as one (names, row)."""
    out: list[tuple[list[str], object]] = []
    for w in rows:
        prev = out[-1][1] if out else None
        same = prev is not None and (prev.layer_ids, prev.rule, prev.status, prev.problem) == \
            (w.layer_ids, w.rule, w.status, w.problem)
        if same and all(n.startswith("stock SGLang ") for n in (prev.name, w.name)):
            out[-1][0].append(w.name)
        else:
            out.append(([w.name], w))
    return out


def _join_releases(names: list[str]) -> str:
    """Row names of grouped releases (``stock SGLang A`` ... ``stock SGLang B``) as ``stock SGLang A .. B``."""
    return names[0] if len(names) == 1 else releases_label([n.rsplit(" ", 1)[-1] for n in names])


# --- verify ----------------------------------------------------------------------------------------


def _cmd_verify(args: argparse.Namespace) -> int:
    if args.threads is not None:
        import torch

        torch.set_num_threads(args.threads)
    r = verify(args.draft_dir, args.data, target=args.target, top_k=args.top_k, batch_size=args.batch_size,
               margin=args.margin, max_combinations=args.max_combinations, progress=not args.no_progress)
    status = EXIT_CONSISTENT if r.ok else EXIT_AMBIGUOUS if r.ambiguous else EXIT_MISWIRED
    if args.json:
        print(json.dumps(r.to_dict(), indent=2))
        return status
    declared = (f"manifest layer ids {list(r.manifest_ids)}" if r.declared_by == "manifest" else
                f"no manifest; config.json read as {list(r.manifest_ids)}" if not r.readings else
                f"no manifest; config.json ids mean one of {len(r.readings)} readings")
    print(f"draft:       {r.draft_dir} ({declared})")
    print(f"data:        {r.files} files ({r.layout}), {r.positions} scored positions")
    print("stored:      " + ", ".join(f"{n} = layer {layer_label(i)}" for n, i in zip(r.chunk_names, r.chunk_ids)))
    emb = r.embedding_check
    print(f"embedding:   {emb['embedding_tensor'] or 'no stored tensor'} equals the embedding lookup of the input ids "
          f"exactly in every file (reference: {emb['reference']}; per tensor: "
          + ", ".join(f"{t['name']} {t['files_equal']}/{r.files}" for t in emb["per_tensor"]) + ")")
    for n in r.candidates.notes:
        print(f"note:        {n}")
    print()
    rows = [["rank", "top-1", f"top-{r.top_k}", "wiring", "fc input"]]
    for i, c in enumerate(r.ranked(), 1):
        mark = "*" if c is r.candidates.manifest and not r.readings else "r" if c.is_reference else " "
        rows.append([f"{i}{mark}", f"{c.top1:.3f}", f"{c.topk:.3f}", c.name, ", ".join(describe_sources(c, r.chunk_names))])
    print("\n".join(_table(rows)))
    print("  (* = the manifest's wiring; r = reference with zeroed input, not compared for the verdict)")
    for u in r.candidates.unbuildable:
        print(f"  not buildable: {u}")
    t = r.throughput
    print(f"\nthroughput:  {t['files_per_s']} files/s, {t['draft_positions_per_s']} draft positions/s over "
          f"{t['wirings']} wirings ({t['wall_s']} s wall, {t['torch_threads']} torch threads)")
    print(f"verdict:     {'OK' if r.ok else 'AMBIGUOUS' if r.ambiguous else 'FAIL'}: {r.summary}")
    return status


# --- compare ---------------------------------------------------------------------------------------


def _cmd_compare(args: argparse.Namespace) -> int:
    r = compare(args.dump, args.data, min_cosine=args.min_cosine)
    if args.json:
        print(json.dumps(r.to_dict(), indent=2))
        return EXIT_CONSISTENT if r.ok else EXIT_MISWIRED
    ids = {str(x) for x in r.dump_layer_ids}
    print(f"dump:        {len(r.dump_files)} batches; the capture said it fed layer ids {', '.join(sorted(ids))}")
    print(f"rows:        {r.rows} served rows matched to training samples ({r.skipped_rows} unmatched rows skipped)")
    print("training:    " + ", ".join(f"{n} = layer {layer_label(i)}" for n, i in zip(r.chunk_names, r.chunk_layer_ids)))
    for n in r.notes:
        print(f"note:        {n}")
    print()
    rows = [["served chunk", "expected (training)", "best match", "mean cos", "min cos", "max |diff|", ""]]
    for c in r.chunks:
        served = f"{c.index} (layer {layer_label(c.served_layer_id)})"
        b = c.best
        rows.append([served, r.chunk_names[c.expected], r.chunk_names[b], f"{c.mean_cos[b]:.6f}", f"{c.min_cos[b]:.6f}",
                     f"{c.max_abs_diff[b]:.3g}", "ok" if c.matches(r.min_cosine) else "MISMATCH"])
    print("\n".join(_table(rows)))
    print(f"\nverdict:     {'OK' if r.ok else 'FAIL'}: {r.summary}")
    return EXIT_CONSISTENT if r.ok else EXIT_MISWIRED



def _add_manifest_and_convert(subparsers: argparse._SubParsersAction) -> None:
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
    c.add_argument("--trained-with", metavar="HOW", help="how an SGLang-format draft was trained, when its ids mean "
                   "different layers for different trainers: sglang==VERSION or layer-output")
    c.set_defaults(handler=_cmd_convert)



def _add_doctor(subparsers: argparse._SubParsersAction) -> None:
    """Add ``inspect``, ``verify`` and ``compare``."""
    i = subparsers.add_parser("inspect", help="the draft's manifest next to what stock SGLang would feed it")
    i.add_argument("draft_dir", metavar="DRAFT_DIR")
    i.add_argument("--target", metavar="TARGET", help="target model directory or its config.json (checked against "
                   "the manifest; required when the draft has no manifest)")
    i.add_argument("--sglang", metavar="VERSION", help="the SGLang release the verdict concerns (default: the "
                   "installed one when supported, else the newest supported)")
    i.add_argument("--trained-with", metavar="HOW", help="how the draft was trained, when its config's ids mean "
                   "different layers for different trainers: sglang==VERSION or layer-output")
    i.add_argument("--json", action="store_true", help="print the report as JSON")
    i.set_defaults(handler=_cmd_inspect)

    v = subparsers.add_parser("verify", help="the draft's accuracy on its training samples under each wiring")
    v.add_argument("draft_dir", metavar="DRAFT_DIR")
    v.add_argument("--data", nargs="+", required=True, metavar="FILE", help="training samples (speculators data_*.pt, "
                   "hs_*.safetensors, SpecForge *.ckpt[.gz]) or directories of them")
    v.add_argument("--target", metavar="TARGET", help="target model directory: its embedding (and lm_head when the "
                   "draft takes it from the target) replaces the draft's, as in SGLang; without a manifest, verify "
                   "checks what the draft's config.json means (every reading, when it is ambiguous)")
    v.add_argument("--top-k", type=int, default=5, metavar="K", help="also report top-K accuracy (default 5)")
    v.add_argument("--batch-size", type=int, default=32, help="samples per batched forward (default 32)")
    v.add_argument("--margin", type=float, default=DEFAULT_MARGIN, help="top-1 lead the manifest's wiring needs over "
                   f"every other wiring (default {DEFAULT_MARGIN})")
    v.add_argument("--max-combinations", type=int, default=64, help="evaluate every ascending choice of stored tensors "
                   "when there are at most this many (default 64)")
    v.add_argument("--threads", type=int, help="torch CPU threads (default: torch's choice; on a busy machine 1 "
                   "is often fastest)")
    v.add_argument("--no-progress", action="store_true", help="no progress bar on stderr")
    v.add_argument("--json", action="store_true", help="print the report as JSON")
    v.set_defaults(handler=_cmd_verify)

    c = subparsers.add_parser("compare", help="served fc inputs (a capture dump) against training samples")
    c.add_argument("--dump", required=True, metavar="DIR", help="directory written with SGLANG_EAGLE3_CAPTURE_DUMP=DIR")
    c.add_argument("--data", nargs="+", required=True, metavar="FILE", help="training samples of the served prompts")
    c.add_argument("--min-cosine", type=float, default=DEFAULT_MIN_COSINE, help="cosine every served row must reach "
                   f"against its training tensor (default {DEFAULT_MIN_COSINE})")
    c.add_argument("--json", action="store_true", help="print the report as JSON")
    c.set_defaults(handler=_cmd_compare)


def build_parser() -> argparse.ArgumentParser:
    """The parser with every subcommand."""
    parser = argparse.ArgumentParser(prog=PROG, description="Explicit, checked EAGLE-3 hidden-state wiring for SGLang")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    _add_manifest_and_convert(sub)
    _add_doctor(sub)
    for name in SUBCOMMAND_MODULES:
        importlib.import_module(name).add_subcommand(sub)
    return parser


def _report_bug(exc: BaseException) -> int:
    """One line for an unexpected exception; the full traceback goes to a file named in that line."""
    fd, path = tempfile.mkstemp(prefix=f"{PROG}-crash-", suffix=".txt")
    with os.fdopen(fd, "w", encoding="utf-8") as f:
        f.write("".join(traceback.format_exception(exc)))
    where = traceback.extract_tb(exc.__traceback__)[-1] if exc.__traceback__ else None
    at = f" at {Path(where.filename).name}:{where.lineno}" if where else ""
    print(f"{PROG}: internal error: {type(exc).__name__}: {exc}{at} (a bug in sglang-eagle3-capture; full traceback "
          f"in {path}; please report it with that file)", file=sys.stderr)
    return EXIT_BUG


def main(argv: list[str] | None = None) -> int:
    """Run the command line; returns the exit status (see the module doc)."""
    argv = _normalise_argv(list(sys.argv[1:] if argv is None else argv))
    try:
        args = build_parser().parse_args(argv)
    except SystemExit as e:  # argparse reports usage errors itself (status 2) and --help (status 0)
        return int(e.code or 0)
    try:
        return int(args.handler(args))
    except AmbiguousLayerIds as e:
        print(f"{PROG}: ambiguous: {e}", file=sys.stderr)
        return EXIT_AMBIGUOUS
    except InputError as e:
        print(f"{PROG}: error: {e}", file=sys.stderr)
        return EXIT_BAD_INPUT
    except Eagle3CaptureError as e:  # a deployment refusal reached the command line: still one line, still input
        print(f"{PROG}: error: {e}", file=sys.stderr)
        return EXIT_BAD_INPUT
    except KeyboardInterrupt:
        return 130
    except Exception as e:  # noqa: BLE001 - anything else is a bug: one line, never the verdict codes
        return _report_bug(e)
