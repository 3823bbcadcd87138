"""``plan DRAFT --data SAMPLES``: which speculative setting to serve the draft with, from its own rollouts on its
training samples (:mod:`.expected`), best predicted accept length first, with the launch_server flags that run it.

Only settings SGLang runs as asked are proposed (:func:`.expected.runs_as_asked`: with topk 1 SGLang rewrites the
draft tokens to steps + 1). ``--write-expected`` on ``verify`` writes the same figures into the manifest.
"""

from __future__ import annotations

import argparse

from .cli import _command, _positive_int, _print, _print_json, _set_threads, _threads
from .expected import DEFAULT_SETTINGS, ExpectedReport, measure, parse_settings


def lines(r: ExpectedReport, top: int | None = None) -> list[str]:
    """The human report: one row per setting, best first, then the flags of the best."""
    ranked = r.ranked()[:top] if top else r.ranked()
    out = [f"draft:     {r.draft_dir} (layer ids {list(r.layer_ids)}, computed in {r.dtype})",
           f"data:      {len(r.files)} files, {r.positions} scored positions, {r.tokens} tokens "
           f"({round(r.tokens / r.seconds) if r.seconds else '-'} tokens/s)", "",
           "rank  steps  topk  draft_tokens  accept_length  per-position acceptance"]
    for i, f in enumerate(ranked, 1):
        s = f.setting
        out.append(f"{i:<4}  {s.steps:<5}  {s.topk:<4}  {s.draft_tokens:<12}  {f.accept_length:<13.3f}  "
                   + " ".join(f"{p:.3f}" for p in f.per_position))
    if ranked:
        out += ["", f"best:      {ranked[0].setting.flags()}",
                "           (predicted from the samples as a server's verify steps would walk them; the figures are "
                "per verify step, bonus token included)"]
    return out


def _cmd_plan(args: argparse.Namespace) -> int:
    _set_threads(args.threads)
    settings = parse_settings(args.settings) if args.settings else list(DEFAULT_SETTINGS)
    r = measure(args.draft_dir, args.data, target=args.target, settings=settings, batch_size=args.batch_size,
                dtype=args.dtype, progress=not args.no_progress)
    if args.json:
        _print_json(r.to_dict())
    else:
        _print(*lines(r, args.top))
    return 0


def add_subcommand(subparsers: argparse._SubParsersAction) -> None:
    p = _command(subparsers, "plan", _cmd_plan, "the speculative settings to serve the draft with, from its samples",
                 "draft_dir")
    p.add_argument("--data", nargs="+", required=True, metavar="FILE", help="training samples (as verify reads them) "
                   "or directories of them; their tokens are taken as the target's greedy tokens")
    p.add_argument("--target", metavar="TARGET", help="target model directory (its embedding, as in verify)")
    p.add_argument("--settings", metavar="LIST", help="candidate settings STEPS,TOPK,DRAFT_TOKENS separated by "
                   "spaces (default: chains of 1..5 steps and topk 2 and 4 trees)")
    p.add_argument("--top", type=_positive_int, help="print only the best N")
    p.add_argument("--batch-size", type=_positive_int, default=8, help="samples per batched rollout (default 8)")
    p.add_argument("--dtype", choices=("float32", "bfloat16", "checkpoint"), help="compute dtype (default float32; "
                   "checkpoint: the checkpoint's own, halving memory for a bf16 draft)")
    p.add_argument("--threads", type=_threads, help="torch CPU threads (at most the CPUs this process may use)")
    p.add_argument("--no-progress", action="store_true", help="no progress bar on stderr")
    p.add_argument("--json", action="store_true", help="print the report as JSON")
