"""The wiring doctor's subcommands: ``inspect``, ``verify`` and ``compare`` (registered through ``cli``).

Each prints a human report (or ``--json``) and exits 0 when the wiring is consistent, 1 when it is
not, and 2 for bad input (a one-line error naming the file, the field and the fix).

- ``inspect DRAFT_DIR [--target TARGET]``: the manifest next to what stock SGLang would feed
  (:mod:`sglang_eagle3_capture.doctor_inspect`);
- ``verify DRAFT_DIR --data FILE...``: the draft's accuracy on its training samples under every
  buildable wiring (:mod:`sglang_eagle3_capture.doctor_verify`);
- ``compare --dump DIR --data FILE...``: served fc inputs against training tensors
  (:mod:`sglang_eagle3_capture.doctor_compare`).
"""

from __future__ import annotations

import argparse
import json
from typing import Callable

EXIT_OK, EXIT_INCONSISTENT = 0, 1


def _as_user_errors(fn: Callable[[argparse.Namespace], int]) -> Callable[[argparse.Namespace], int]:
    """Turn this module's data errors into ``cli.UserError`` (one line, exit 2)."""

    def run(args: argparse.Namespace) -> int:
        """``fn(args)``, with sample and draft-format errors re-raised as ``UserError``."""
        from .cli import UserError
        from .draft_model import DraftFormatError
        from .samples import SampleError

        try:
            return fn(args)
        except (SampleError, DraftFormatError) as e:
            raise UserError(str(e)) from e

    return run


def _table(rows: list[list[str]]) -> list[str]:
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    return ["  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip() for r in rows]


# --- inspect ---------------------------------------------------------------------------------------


def _cmd_inspect(args: argparse.Namespace) -> int:
    from .doctor_inspect import inspect_draft

    r = inspect_draft(args.draft_dir, args.target)
    if args.json:
        print(json.dumps(r.to_dict(), indent=2))
        return EXIT_OK if r.ok else EXIT_INCONSISTENT
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
    for w in [r.declared, *r.readings]:
        rows.append([w.name, str(list(w.layer_ids)), str(w.hf_indices), w.status.upper() if w.status != "declared"
                     else "", w.rule])
    print()
    print("\n".join(_table(rows)))
    for w in r.readings:
        if w.problem:
            print(f"  {w.name}: {w.problem}")
    print()
    print(f"plugin:      {'installed' if r.plugin_installed else 'NOT installed'} (sglang.srt.plugins entry point "
          "eagle3_capture)")
    print(f"verdict:     {r.verdict.upper()}: {r.summary}")
    return EXIT_OK if r.ok else EXIT_INCONSISTENT


# --- verify ----------------------------------------------------------------------------------------


def _cmd_verify(args: argparse.Namespace) -> int:
    from .doctor_verify import verify
    from .doctor_wirings import describe_sources, layer_label

    if args.threads is not None:
        import torch

        torch.set_num_threads(args.threads)
    r = verify(args.draft_dir, args.data, target=args.target, top_k=args.top_k, batch_size=args.batch_size,
               margin=args.margin, max_combinations=args.max_combinations, progress=not args.no_progress)
    if args.json:
        print(json.dumps(r.to_dict(), indent=2))
        return EXIT_OK if r.ok else EXIT_INCONSISTENT
    print(f"draft:       {r.draft_dir} (manifest layer ids {list(r.manifest_ids)})")
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
        mark = "*" if c is r.candidates.manifest else "r" if c.is_reference else " "
        rows.append([f"{i}{mark}", f"{c.top1:.3f}", f"{c.topk:.3f}", c.name, ", ".join(describe_sources(c, r.chunk_names))])
    print("\n".join(_table(rows)))
    print("  (* = the manifest's wiring; r = reference with zeroed input, not compared for the verdict)")
    for u in r.candidates.unbuildable:
        print(f"  not buildable: {u}")
    t = r.throughput
    print(f"\nthroughput:  {t['files_per_s']} files/s, {t['draft_positions_per_s']} draft positions/s over "
          f"{t['wirings']} wirings ({t['wall_s']} s wall, {t['torch_threads']} torch threads)")
    print(f"verdict:     {'OK' if r.ok else 'FAIL'}: {r.summary}")
    return EXIT_OK if r.ok else EXIT_INCONSISTENT


# --- compare ---------------------------------------------------------------------------------------


def _cmd_compare(args: argparse.Namespace) -> int:
    from .doctor_compare import compare
    from .doctor_wirings import layer_label

    r = compare(args.dump, args.data, min_cosine=args.min_cosine)
    if args.json:
        print(json.dumps(r.to_dict(), indent=2))
        return EXIT_OK if r.ok else EXIT_INCONSISTENT
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
    return EXIT_OK if r.ok else EXIT_INCONSISTENT


def add_subcommand(subparsers: argparse._SubParsersAction) -> None:
    """Add ``inspect``, ``verify`` and ``compare``."""
    from .doctor_compare import DEFAULT_MIN_COSINE
    from .doctor_verify import DEFAULT_MARGIN

    i = subparsers.add_parser("inspect", help="the draft's manifest next to what stock SGLang would feed it")
    i.add_argument("draft_dir", metavar="DRAFT_DIR")
    i.add_argument("--target", metavar="TARGET", help="target model directory or its config.json (checked against "
                   "the manifest; required when the draft has no manifest)")
    i.add_argument("--json", action="store_true", help="print the report as JSON")
    i.set_defaults(handler=_as_user_errors(_cmd_inspect))

    v = subparsers.add_parser("verify", help="the draft's accuracy on its training samples under each wiring")
    v.add_argument("draft_dir", metavar="DRAFT_DIR")
    v.add_argument("--data", nargs="+", required=True, metavar="FILE", help="training samples (speculators data_*.pt, "
                   "hs_*.safetensors, SpecForge *.ckpt[.gz]) or directories of them")
    v.add_argument("--target", metavar="TARGET", help="target model directory: its embedding (and lm_head when the "
                   "draft takes it from the target) replaces the draft's, as in SGLang")
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
    v.set_defaults(handler=_as_user_errors(_cmd_verify))

    c = subparsers.add_parser("compare", help="served fc inputs (a capture dump) against training samples")
    c.add_argument("--dump", required=True, metavar="DIR", help="directory written with SGLANG_EAGLE3_CAPTURE_DUMP=DIR")
    c.add_argument("--data", nargs="+", required=True, metavar="FILE", help="training samples of the served prompts")
    c.add_argument("--min-cosine", type=float, default=DEFAULT_MIN_COSINE, help="cosine every served row must reach "
                   f"against its training tensor (default {DEFAULT_MIN_COSINE})")
    c.add_argument("--json", action="store_true", help="print the report as JSON")
    c.set_defaults(handler=_as_user_errors(_cmd_compare))
