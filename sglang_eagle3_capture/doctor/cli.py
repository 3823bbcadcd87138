"""Command line ``sglang-eagle3-capture`` (also ``python -m sglang_eagle3_capture``). Exit status, for every command:
0 consistent (or done), 1 mis-wired, 2 bad input, 3 ambiguous, 70 a bug (docs/threat-model.md has the full table).
Heavy imports (torch, safetensors) happen inside the commands that need them."""

from __future__ import annotations

import argparse
import contextlib
import importlib
import io
import json
import logging
import math
import os
import re
import signal
import sys
import tempfile
import traceback
import warnings
from itertools import groupby
from pathlib import Path

from ..core.errors import AmbiguousLayerIds, Eagle3CaptureError, InputError, brief, cut, shown
from ..core.families.schema import DEEPSTACK_ORDERS
from ..core.layer_ids import FINAL_NORM, hidden_state_indices
from ..core.manifest import manifest_path, read_manifest
from ..core.userfiles import os_problem, path_kind
from .candidates import describe_sources, layer_label
from .compare import DEFAULT_MIN_COSINE, compare
from .convert import convert
from .expected import DEFAULT_SETTINGS, _dtype, measure, parse_settings, write_expected
from .inspect import inspect_draft
from .manifest_write import write_draft_manifest
from .readings import releases_label
from .verify import DEFAULT_MARGIN, verify

PROG = "sglang-eagle3-capture"
EXIT_CONSISTENT, EXIT_MISWIRED, EXIT_BAD_INPUT, EXIT_AMBIGUOUS, EXIT_BUG = 0, 1, 2, 3, 70
EXIT_INTERRUPTED, EXIT_BROKEN_PIPE = 130, 141  # Ctrl-C; stdout closed by its reader (128 + SIGPIPE)

# Modules adding subcommands after the built-in ones: each has ``add_subcommand(subparsers)``, which sets
# ``handler=<function(args) -> int>`` (raising InputError for bad input) with ``set_defaults``.
SUBCOMMAND_MODULES: list[str] = []

_LAYER_ID = re.compile(r"\s*(-?[0-9]{1,9}|" + FINAL_NORM + r")\s*")


def parse_layer_ids(text: str) -> list[int | str]:
    """``"-1,2,final_norm"`` -> ``[-1, 2, "final_norm"]``; anything else is an :class:`InputError` naming the option."""
    parts = text.split(",")
    bad = next((part for part in parts if not _LAYER_ID.fullmatch(part)), None)
    if bad is not None:
        raise InputError(None, "--layer-ids", f"{brief(text, 80)} is not a comma-separated list of integers "
                         f"({brief(bad, 40)}: only ASCII digits, optionally after '-', or {FINAL_NORM})",
                         f"e.g. --layer-ids=-1,2,30 or --layer-ids=-1,2,{FINAL_NORM}")
    return [FINAL_NORM if part.strip() == FINAL_NORM else int(part) for part in parts]


def _normalise_argv(argv: list[str]) -> list[str]:
    """Join ``--layer-ids -1,2,30`` into ``--layer-ids=-1,2,30`` (argparse reads ``-1,...`` as an option)."""
    out, rest = [], iter(argv)
    for arg in rest:
        value = next(rest, None) if arg == "--layer-ids" else None
        out.append(arg if value is None else f"--layer-ids={value}")
    return out


def _print(*lines: str) -> None:
    """Each line escaped, so a value read from a file can neither run terminal escapes nor forge a report line."""
    for line in lines:
        print(shown(line))


def _print_json(doc: dict) -> None:
    print(json.dumps(doc, indent=2))  # ensure_ascii: every control character and non-ASCII code point escaped


def _table(rows: list[list[str]]) -> list[str]:
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    return ["  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip() for r in rows]


def _status(r) -> int:
    return EXIT_CONSISTENT if r.ok else EXIT_AMBIGUOUS if r.ambiguous else EXIT_MISWIRED


def _cmd_manifest_write(args: argparse.Namespace) -> int:
    _print(*write_draft_manifest(args.draft_dir, parse_layer_ids(args.layer_ids), args.target, source=args.source,
                                 note=args.note, force=args.force, fail_closed=args.fail_closed,
                                 deepstack=args.deepstack).lines())
    return 0


def _cmd_manifest_show(args: argparse.Namespace) -> int:
    m = read_manifest(args.draft_dir)
    if args.json:
        _print_json(m.to_dict())
        return 0
    _print(f"manifest:      {m.path}",
           f"layer ids:     {list(m.layer_ids)}  (-1 = embedding output, k = output of decoder layer k, "
           f"{FINAL_NORM} = the final norm's output)",
           f"HF indices:    {hidden_state_indices(m.layer_ids)}  (output_hidden_states / SGLang capture loop; "
           f"{FINAL_NORM} is HF hidden_states[{m.target_num_hidden_layers}], no loop index)",
           f"target:        {m.target_architecture}, {m.target_num_hidden_layers} layers, "
           f"hidden {m.target_hidden_size}", f"fc in width:   {m.fc_in_features}",
           *(f"provenance.{key}: {value}" for key, value in m.provenance.items()))
    return 0


def _cmd_convert(args: argparse.Namespace) -> int:
    ids = parse_layer_ids(args.layer_ids) if args.layer_ids is not None else None
    _print(*convert(args.src, args.dst, target=args.target, layer_ids=ids, trained_with=args.trained_with).lines())
    return 0


def _cmd_inspect(args: argparse.Namespace) -> int:
    manifest = manifest_path(args.draft_dir)
    if args.trained_with is not None and path_kind(manifest) != "missing":
        raise InputError(None, "--trained-with", f"{brief(str(manifest), 200)} states the ids, so nothing reads "
                         "--trained-with (it only chooses among the readings of a config without a manifest)",
                         "drop --trained-with (the manifest wins), or remove the manifest to inspect config.json's ids")
    r = inspect_draft(args.draft_dir, args.target, sglang_version=args.sglang, trained_with=args.trained_with,
                      stock=args.stock, launch_args=args.launch_args)
    if args.json:
        _print_json(r.to_dict())
        return _status(r)
    _print(f"draft:       {r.draft_dir}")
    if r.manifest is not None:
        _print(f"manifest:    layer ids {r.manifest['layer_ids']} for {r.manifest['target']['architecture']} "
               f"({r.manifest['target']['num_hidden_layers']} layers, hidden {r.manifest['target']['hidden_size']})")
    _print("provenance:  " + ", ".join(f"{k}={v}" for k, v in r.provenance.items()))
    _print(*(f"check:       {c}" for c in r.checks), *(f"note:        {m}" for m in r.messages))
    groups = _grouped(r.readings)
    rows = [["", "layer ids", "HF indices", "status", "how"]] + [
        [name, str(list(w.layer_ids)), str(w.hf_indices), w.status.upper() if w.status != "declared" else "", w.rule]
        for name, w in [(r.declared.name, r.declared), *groups]]
    _print("", *_table(rows), *(f"  {name}: {w.problem}" for name, w in groups if w.problem), "")
    whose = "with the plugin" if r.plugin_active else "stock SGLang's"
    _print(f"plugin:      {'installed' if r.plugin_installed else 'NOT installed'} (sglang.srt.plugins entry point "
           f"eagle3_capture); the verdict is {whose}")
    _print(*(f"setup:       {line}" for line in (r.setup.lines() if r.setup is not None else ())),
           *(f"reading:     {reading.describe()}" for reading in r.ambiguous_readings))
    _print(*([f"no plugin:   stock SGLang: {r.stock_outcome}"] if r.stock_outcome else []),
           *([f"no plugin:   stock vLLM: {r.vllm_outcome}"] if r.vllm_outcome else []),
           f"verdict:     {r.verdict.upper()}: {r.summary}")
    return _status(r)


def _grouped(rows: list) -> list[tuple[str, object]]:
    """Consecutive stock SGLang rows that read the draft identically as one ``(stock SGLang A .. B, row)``."""
    groups = [list(g) for _, g in groupby(rows, lambda w: (w.layer_ids, w.rule, w.status, w.problem,
                                                           w.name.startswith("stock SGLang ") or w.name))]
    return [(g[0].name if len(g) == 1 else releases_label([w.name.rsplit(" ", 1)[-1] for w in g]), g[0])
            for g in groups]


def _cmd_verify(args: argparse.Namespace) -> int:
    _set_threads(args.threads)
    settings = parse_settings(args.settings) if args.settings else list(DEFAULT_SETTINGS)
    if args.settings and not args.write_expected:
        raise InputError(None, "--settings", "only --write-expected reads it", "add --write-expected, or drop it")
    r = verify(args.draft_dir, args.data, target=args.target, top_k=args.top_k, batch_size=args.batch_size,
               margin=args.margin, max_combinations=args.max_combinations, progress=not args.no_progress,
               dtype=None if args.dtype in (None, "float32") else _dtype(args.draft_dir, args.dtype))
    status = _status(r)
    if args.write_expected and status != EXIT_CONSISTENT:  # figures of a wiring verify does not call right arm nothing
        _say(f"expected:    NOT written: verify says {'AMBIGUOUS' if r.ambiguous else 'FAIL'}, so figures measured "
             "under the manifest's wiring would arm the alarm from a wiring it does not call right; fix the manifest "
             "(or verify with more samples), then run --write-expected again")
    elif args.write_expected:  # the draft's own rollouts: doctor/expected.py
        written = write_expected(args.draft_dir, measure(args.draft_dir, args.data, target=args.target,
                                                         settings=settings, dtype=args.dtype))
        _say(f"expected:    written to {written}")
    if args.json:
        _print_json(r.to_dict())
        return status
    declared = (f"manifest layer ids {list(r.manifest_ids)}" if r.declared_by == "manifest" else
                f"no manifest; config.json read as {list(r.manifest_ids)}" if not r.readings else
                f"no manifest; config.json ids mean one of {len(r.readings)} readings")
    emb, t = r.embedding_check, r.throughput
    _print(f"draft:       {r.draft_dir} ({declared})",
           f"data:        {r.files} files ({r.layout}), {r.positions} scored positions",
           "stored:      " + ", ".join(f"{n} = layer {layer_label(i)}" for n, i in zip(r.chunk_names, r.chunk_ids)),
           f"embedding:   {emb['embedding_tensor'] or 'no stored tensor'} equals the embedding lookup of the input ids "
           f"exactly in every file (reference: {emb['reference']}; per tensor: "
           + ", ".join(f"{t['name']} {t['files_equal']}/{r.files}" for t in emb["per_tensor"]) + ")")
    rows = [["rank", "top-1", f"top-{r.top_k}", "wiring", "fc input"]]
    for i, c in enumerate(r.ranked(), 1):
        mark = "*" if c is r.candidates.manifest and not r.readings else "r" if c.is_reference else " "
        rows.append([f"{i}{mark}", f"{c.top1:.3f}", f"{c.topk:.3f}", c.name,
                     ", ".join(describe_sources(c, r.chunk_names))])
    _print(*(f"note:        {n}" for n in r.candidates.notes), "", *_table(rows),
           "  (* = the manifest's wiring; r = reference with zeroed input, not compared for the verdict)",
           *(f"  not buildable: {u}" for u in r.candidates.unbuildable))
    if r.vocabulary is not None:
        _print("", *(f"{'vocabulary:' if i == 0 else ''.ljust(11)}  {line}" for i, line in
                     enumerate(r.vocabulary.lines())))
    _print("", f"throughput:  {t['files_per_s']} files/s, {t['draft_positions_per_s']} draft positions/s over "
           f"{t['wirings']} wirings ({t['wall_s']} s wall, {t['torch_threads']} torch threads)",
           f"verdict:     {'OK' if r.ok else 'AMBIGUOUS' if r.ambiguous else 'FAIL'}: {r.summary}")
    return status


def _cmd_compare(args: argparse.Namespace) -> int:
    r = compare(args.dump, args.data, min_cosine=args.min_cosine)
    if args.json:
        _print_json(r.to_dict())
        return EXIT_CONSISTENT if r.ok else EXIT_MISWIRED
    ids = {str(x) for x in r.dump_layer_ids}
    _print(f"dump:        {len(r.dump_files)} batches; the capture said it fed layer ids {', '.join(sorted(ids))}",
           f"rows:        {r.rows} served rows matched to training samples ({r.skipped_rows} unmatched rows skipped)",
           "training:    " + ", ".join(f"{n} = layer {layer_label(i)}"
                                       for n, i in zip(r.chunk_names, r.chunk_layer_ids)))
    rows = [["served chunk", "expected (training)", "best match", "mean cos", "min cos", "max |diff|", ""]]
    for c in r.chunks:
        served, b = f"{c.index} (layer {layer_label(c.served_layer_id)})", c.best
        rows.append([served, r.chunk_names[c.expected], r.chunk_names[b], f"{c.mean_cos[b]:.6f}", f"{c.min_cos[b]:.6f}",
                     f"{c.max_abs_diff[b]:.3g}", "ok" if c.matches(r.min_cosine) else "MISMATCH"])
    _print(*(f"note:        {n}" for n in r.notes), "", *_table(rows), "",
           f"verdict:     {'OK' if r.ok else 'FAIL'}: {r.summary}")
    return EXIT_CONSISTENT if r.ok else EXIT_MISWIRED


def _cmd_plan(args: argparse.Namespace) -> int:
    """Settings to serve the draft with, from its own rollouts on its samples (:mod:`.expected`), best first."""
    _set_threads(args.threads)
    settings = parse_settings(args.settings) if args.settings else list(DEFAULT_SETTINGS)
    r = measure(args.draft_dir, args.data, target=args.target, settings=settings, batch_size=args.batch_size,
                dtype=args.dtype, progress=not args.no_progress)
    if args.json:
        _print_json(r.to_dict())
        return 0
    ranked = r.ranked()[:args.top] if args.top else r.ranked()
    _print(f"draft:     {r.draft_dir} (layer ids {list(r.layer_ids)}, computed in {r.dtype})",
           f"data:      {len(r.files)} files, {r.positions} scored positions, {r.tokens} tokens "
           f"({round(r.tokens / r.seconds) if r.seconds else '-'} tokens/s)", "",
           "rank  steps  topk  draft_tokens  accept_length  per-position acceptance",
           *(f"{i:<4}  {f.setting.steps:<5}  {f.setting.topk:<4}  {f.setting.draft_tokens:<12}  "
             f"{f.accept_length:<13.3f}  " + " ".join(f"{p:.3f}" for p in f.per_position)
             for i, f in enumerate(ranked, 1)),
           *(["", f"best:      {ranked[0].setting.flags()}", "           (predicted from the samples as a "
              "server's verify steps would walk them; the figures are per verify step, bonus token included)"]
             if ranked else []))
    return 0


def _command(subparsers: argparse._SubParsersAction, name: str, handler, help: str, *positionals: str,
             **defaults) -> argparse.ArgumentParser:
    """Subcommand ``name`` run by ``handler``, with its positional arguments (shown upper-cased)."""
    parser = subparsers.add_parser(name, help=help)
    parser.set_defaults(handler=handler, **defaults)
    for positional in positionals:
        parser.add_argument(positional, metavar=positional.upper())
    return parser


def _flags(parser: argparse.ArgumentParser, *names: str, **helps: str) -> None:
    """Options several commands share, by name; ``helps``: their help text where it differs."""
    shared = {"--json": dict(action="store_true", help="print the report as JSON"),
              "--no-progress": dict(action="store_true", help="no progress bar on stderr"),
              "--threads": dict(type=_threads, help="torch CPU threads (at most the CPUs this process may use)"),
              "--dtype": dict(choices=("float32", "bfloat16", "checkpoint"), help="compute dtype (default float32; "
                              "checkpoint: the checkpoint's own, half the memory for a bf16 draft)"),
              "--trained-with": dict(metavar="HOW", help="how the draft was trained, when its ids mean different "
                                     "layers for different trainers: sglang==VERSION, layer-output, hf-hidden-states"),
              "--data": dict(nargs="+", required=True, metavar="FILE"), "--target": dict(metavar="TARGET")}
    for name in names:
        parser.add_argument(name, **{**shared[name], **({"help": helps[name[2:]]} if name[2:] in helps else {})})


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog=PROG, description="Explicit, checked EAGLE-3 hidden-state wiring for SGLang")
    subparsers = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    man = subparsers.add_parser("manifest", help="write or show a draft's layer manifest")
    msub = man.add_subparsers(dest="manifest_command", required=True, metavar="{write,show}")
    w = _command(msub, "write", _cmd_manifest_write, "write DRAFT_DIR/eagle3_manifest.json", "draft_dir")
    w.add_argument("--layer-ids", required=True, help="layer ids the fc consumes, in fc order, e.g. -1,2,30 or "
                   "-1,2,final_norm (the final norm's output)")
    w.add_argument("--target", required=True, metavar="TARGET", help="target model directory or its config.json")
    w.add_argument("--source", default="manual", help="provenance.source (default: manual)")
    w.add_argument("--note", help="provenance.note: free text, e.g. how the ids were established")
    w.add_argument("--deepstack", choices=DEEPSTACK_ORDERS, help="provenance.deepstack (Qwen3-VL): whether the "
                   "training data held a deepstack layer's output before or after the add (docs/families.md)")
    w.add_argument("--force", action="store_true", help="replace an existing manifest")
    w.add_argument("--fail-closed", action="store_true", help="also rewrite config.json where stock SGLang would feed "
                   "the fc other layers: ids it reads right, or a value it refuses at startup")
    _flags(_command(msub, "show", _cmd_manifest_show, "print a draft's manifest", "draft_dir"), "--json",
           json="print the manifest document as JSON")
    c = _command(subparsers, "convert", _cmd_convert, "convert a speculators/SpecForge draft into an SGLang draft "
                 "directory", "src", "dst")
    _flags(c, "--target", "--trained-with", target="target model directory or its config.json (default: the "
           "speculators verifier path, when local)")
    c.add_argument("--layer-ids", help="override the ids read from SRC, e.g. --layer-ids=-1,2,30 or -1,2,final_norm")
    i = _command(subparsers, "inspect", _cmd_inspect, "the draft's manifest next to what stock SGLang would feed it",
                 "draft_dir", launch_args=None)  # `-- ARGS`: launch_server arguments (_Parser)
    _flags(i, "--target", "--trained-with", "--json", target="target model directory or its config.json (required "
           "without a manifest)")
    i.add_argument("--sglang", metavar="VERSION", help="the release the verdict concerns (default: the installed one "
                   "when supported, else the newest supported)")
    i.add_argument("--stock", action="store_true", help="the verdict of stock SGLang, even where the plugin is active")
    v = _command(subparsers, "verify", _cmd_verify, "the draft's accuracy on its training samples under each wiring",
                 "draft_dir")
    _flags(v, "--data", "--target", data="training samples (speculators data_*.pt, hs_*.safetensors, SpecForge "
           "*.ckpt[.gz]) or directories of them", target="target model directory: its embedding (and lm_head) "
           "replace the draft's, as in SGLang")
    v.add_argument("--top-k", type=_positive_int, default=5, metavar="K", help="also report top-K accuracy (default 5)")
    v.add_argument("--batch-size", type=_positive_int, default=32, help="samples per batched forward (default 32)")
    v.add_argument("--margin", type=_number_in(0.0, 1.0), default=DEFAULT_MARGIN,
                   help=f"top-1 lead the manifest's wiring needs over every other wiring (default {DEFAULT_MARGIN})")
    v.add_argument("--max-combinations", type=_count, default=64, help="evaluate every ascending choice of stored "
                   "tensors when there are at most this many (default 64)")
    _flags(v, "--threads", "--no-progress", "--json", "--dtype")
    v.add_argument("--write-expected", action="store_true", help="when OK, also write the draft's acceptance figures "
                   "per setting (see `plan`) into the manifest, for a server's acceptance alarm")
    v.add_argument("--settings", metavar="LIST", help="with --write-expected: the settings STEPS,TOPK,DRAFT_TOKENS")
    c = _command(subparsers, "compare", _cmd_compare, "served fc inputs (a capture dump) against training samples")
    c.add_argument("--dump", required=True, metavar="DIR", help="directory written with SGLANG_EAGLE3_CAPTURE_DUMP=DIR")
    _flags(c, "--data", data="training samples of the served prompts")
    c.add_argument("--min-cosine", type=_number_in(-1.0, 1.0), default=DEFAULT_MIN_COSINE,
                   help=f"cosine every served row must reach (default {DEFAULT_MIN_COSINE})")
    _flags(c, "--json")
    p = _command(subparsers, "plan", _cmd_plan, "the speculative settings to serve the draft with, from its samples",
                 "draft_dir")
    _flags(p, "--data", "--target", data="training samples (as verify reads them); their tokens are taken as the "
           "target's greedy tokens", target="target model directory (its embedding, as in verify)")
    p.add_argument("--settings", metavar="LIST", help="candidate settings STEPS,TOPK,DRAFT_TOKENS separated by "
                   "spaces (default: chains of 1..5 steps and topk 2 and 4 trees)")
    p.add_argument("--top", type=_positive_int, help="print only the best N")
    p.add_argument("--batch-size", type=_positive_int, default=8, help="samples per batched rollout (default 8)")
    _flags(p, "--dtype", "--threads", "--no-progress", "--json")
    for name in SUBCOMMAND_MODULES:
        importlib.import_module(name).add_subcommand(subparsers)
    return parser


_ARGUMENT = re.compile(r"argument ([^:\s]+(?:/[^:\s]+)*): (.*)", re.DOTALL)


class _Parser(argparse.ArgumentParser):
    """argparse with its usage errors as an :class:`InputError` line naming the option, like every other bad input."""

    def error(self, message: str):
        named = _ARGUMENT.fullmatch(message)
        option, problem = named.groups() if named else (None, message)
        e = InputError(None, option, problem, f"see `{self.prog} --help`")
        self.exit(e.exit_code, f"{self.prog}: error: {e}\n")

    def parse_known_args(self, args=None, namespace=None):
        """``inspect ... -- ARGS``: ARGS are launch_server arguments (docs/setup-report.md), kept whole."""
        args = list(sys.argv[1:] if args is None else args)
        first = next((a for a in args if not a.startswith("-")), None)
        if first == "inspect" and "--" in args and self.prog == PROG:
            ns, extra = super().parse_known_args(args[:args.index("--")], namespace)
            ns.launch_args = args[args.index("--") + 1:]
            return ns, extra
        return super().parse_known_args(args, namespace)


def _set_threads(threads: int | None) -> None:
    if threads is not None:
        import torch

        torch.set_num_threads(threads)


def _integer(minimum: int, what: str):
    def parse(text: str) -> int:
        if not re.fullmatch(r"\s*[0-9]{1,9}\s*", text) or int(text) < minimum:
            raise argparse.ArgumentTypeError(f"{brief(text, 40)} is not {what}")
        return int(text)
    return parse


_positive_int, _count = _integer(1, "a positive integer"), _integer(0, "an integer >= 0")


def _threads(text: str) -> int:
    """A positive integer no larger than the CPUs this process may use (torch crashes far past it)."""
    n = _positive_int(text)
    cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    if n > cpus:
        raise argparse.ArgumentTypeError(f"{n} is more than the {cpus} CPUs this process may use")
    return n


def _number_in(lo: float, hi: float):
    def parse(text: str) -> float:
        try:
            value = float(text)
        except ValueError:
            value = math.nan
        if not math.isfinite(value) or not lo <= value <= hi:
            raise argparse.ArgumentTypeError(f"{brief(text, 40)} is not a number in [{lo:g}, {hi:g}]")
        return value
    return parse


def _say(message: str) -> None:
    print(shown(message), file=sys.stderr)


def _report_bug(exc: BaseException) -> int:
    """One line for an unexpected exception; the full traceback goes to a file named in that line."""
    where = traceback.extract_tb(exc.__traceback__)[-1] if exc.__traceback__ else None
    at = f" at {Path(where.filename).name}:{where.lineno}" if where else ""
    try:
        fd, path = tempfile.mkstemp(prefix=f"{PROG}-crash-", suffix=".txt")
        with os.fdopen(fd, "w", encoding="utf-8", errors="backslashreplace") as f:
            f.write("".join(traceback.format_exception(exc)))
        saved = f"full traceback in {path}; please report it with that file"
    except OSError as e:  # even the traceback cannot be written: say so, still one line
        saved = f"the traceback could not be written ({e.strerror}); please report this line"
    _say(f"{PROG}: internal error: {type(exc).__name__}: {brief(str(exc), 300)}{at} (a bug in sglang-eagle3-capture; "
         f"{saved})")
    return EXIT_BUG


def _to_devnull(stream) -> None:
    """``stream``'s fd onto /dev/null, so nothing more written there fails (not even the flush at exit: status 120)."""
    # not a file descriptor (in-process use): the guard drops what follows
    with contextlib.suppress(OSError, ValueError, AttributeError, io.UnsupportedOperation):
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, stream.fileno())
        os.close(devnull)


class _Guarded:
    """stdout or stderr for one command: a failed write or flush is remembered and what follows dropped, so the status
    is the command's own; only stdout's broken pipe still raises (:data:`EXIT_BROKEN_PIPE`, as ``cat`` would)."""

    def __init__(self, inner, *, pipe_stops: bool) -> None:
        self.inner, self.pipe_stops, self.failed = inner, pipe_stops, None

    def _call(self, name: str, *args):
        if self.failed is None:
            try:
                return getattr(self.inner, name)(*args)
            except BrokenPipeError:
                if self.pipe_stops:
                    raise
                self.failed = "its reader went away"
            except (OSError, ValueError) as e:  # ValueError: the stream was closed
                self.failed = os_problem(e, writing=True)[0] if isinstance(e, OSError) else "it is closed"
            _to_devnull(self.inner)
        return len(args[0]) if args else None

    def write(self, text: str):
        return self._call("write", text)

    def flush(self) -> None:
        self._call("flush")

    def __getattr__(self, name: str):  # isatty, fileno, encoding ... (tqdm, argparse)
        return getattr(self.inner, name)


@contextlib.contextmanager
def _guarded_streams():
    """sys.stdout and sys.stderr as :class:`_Guarded` for the command; the streams it found come back after."""
    saved = sys.stdout, sys.stderr
    # a closed fd 0, 1 or 2 becomes /dev/null: else sys.stdout/stderr are None (the error line then goes to stdout,
    # breaking --json) and the next file opened takes that number
    for fd in (0, 1, 2):
        try:
            os.fstat(fd)
        except OSError:
            with contextlib.suppress(OSError):
                null = os.open(os.devnull, os.O_RDWR)
                if null != fd:
                    os.dup2(null, fd)
                    os.close(null)
    with io.StringIO() as null:  # for a stream Python found closed at startup (None): what is written is dropped
        out = _Guarded(sys.stdout if sys.stdout is not None else null, pipe_stops=True)
        err = _Guarded(sys.stderr if sys.stderr is not None else null, pipe_stops=False)
        sys.stdout, sys.stderr = out, err
        try:
            yield out
        finally:
            out.flush()
            if out.failed is not None:
                _say(f"{PROG}: warning: stdout: the report could not be written ({out.failed}); the exit status is "
                     "the command's own")
            err.flush()
            sys.stdout, sys.stderr = saved


@contextlib.contextmanager
def _collected():
    """Warnings and WARNING+ log records while entered, kept back (shown after a report, dropped after an error)."""
    lines, handler, saved = [], logging.Handler(logging.WARNING), warnings.showwarning
    handler.emit = lambda record: lines.append(f"{record.name}: {record.getMessage()}")
    warnings.showwarning = lambda message, category, *_args, **_kw: lines.append(f"{category.__name__}: {message}")
    logging.getLogger().addHandler(handler)
    try:
        yield lines
    finally:
        logging.getLogger().removeHandler(handler)
        warnings.showwarning = saved


class Terminated(BaseException):
    """SIGTERM or SIGHUP (``args[0]``), raised where the command is so every ``finally`` runs (cleanup like Ctrl-C);
    a BaseException, so no ``except Exception`` reads it as a failed write."""


def _terminate(signum: int, _frame) -> None:
    signal.signal(signum, signal.SIG_IGN)  # a second signal must not cut the cleanup short (kill -9 still can)
    raise Terminated(signum)


@contextlib.contextmanager
def _signals_raise():
    """SIGTERM / SIGHUP raise :class:`Terminated` during the command (main thread, unless the caller ignores them)."""
    saved = {}
    with contextlib.suppress(ValueError):  # not the main thread
        for signum in (signal.SIGTERM, signal.SIGHUP):
            if signal.getsignal(signum) == signal.SIG_DFL:
                saved[signum] = signal.signal(signum, _terminate)
    try:
        yield
    finally:
        for signum, handler in saved.items():
            signal.signal(signum, handler)


def _run(argv: list[str]) -> tuple[int, bool]:
    """``(status, reported)``: the handler's status, or the status of the one line that reported an error."""
    try:
        try:
            args = build_parser().parse_args(argv)
        except SystemExit as e:  # argparse reports usage errors itself (status 2) and --help (status 0)
            return int(e.code or 0), True
        status = int(args.handler(args))
        sys.stdout.flush()
        return status, False
    except Eagle3CaptureError as e:  # input, or a deployment refusal that reached the command line: one line
        _say(f"{PROG}: {'ambiguous' if isinstance(e, AmbiguousLayerIds) else 'error'}: {e}")
        return e.exit_code, True
    except KeyboardInterrupt:
        _say(f"{PROG}: interrupted")
        return EXIT_INTERRUPTED, True
    except Terminated as e:
        _say(f"{PROG}: terminated ({signal.Signals(e.args[0]).name})")
        return 128 + e.args[0], True
    except BrokenPipeError:  # stdout closed by its reader: stop quietly, as `cat` would
        _to_devnull(sys.stdout)
        return EXIT_BROKEN_PIPE, True
    except OSError as e:  # a file the readers did not wrap (their job): still the user's file, still one line
        if e.filename is None:
            return _report_bug(e), True
        err = InputError(e.filename, "<file>", *os_problem(e))
        _say(f"{PROG}: error: {err}")
        return err.exit_code, True
    except Exception as e:  # noqa: BLE001 - anything else is a bug: one line, never the verdict codes
        return _report_bug(e), True


def main(argv: list[str] | None = None) -> int:
    """Run the command line; returns the exit status, which where stdout and stderr go never changes."""
    for stream in (sys.stdout, sys.stderr):  # text the terminal's encoding cannot hold: escaped, not raised
        # not a TextIOWrapper, or one whose file changed under it (a parent dup2'd a pipe over a file: reconfigure's
        # tell() fails); printing escapes on its own anyway
        with contextlib.suppress(AttributeError, ValueError, OSError):
            stream.reconfigure(errors="backslashreplace")
    argv = _normalise_argv(list(sys.argv[1:] if argv is None else argv))
    with _guarded_streams(), _signals_raise(), _collected() as collected:
        status, reported = _run(argv)
        if not reported:
            for line in dict.fromkeys(collected):
                _say(f"{PROG}: warning: {cut(shown(line), 600)}")
    return status
