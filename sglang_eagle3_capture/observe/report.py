"""The effective speculative setup: what was asked, what SGLang runs, what the draft was trained for, and where they
disagree (docs/setup-report.md). Plain data only (no torch, no SGLang)."""

from __future__ import annotations

import array
import hashlib
import json
import math
import sys
from collections import namedtuple
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Mapping, Sequence

from ..core import switches
from ..core.checkpoint import tensor_index, weights_present
from ..core.errors import DeploymentError, Eagle3CaptureError, InputError, brief, cut, shown
from ..core.manifest import Manifest, find_manifest
from ..core.releases.schema import Release
from ..core.target_config import path_get
from ..core.userfiles import MAX_JSON_BYTES, is_file, open_regular, parse_json, read_bytes

STRICT_ENV = switches.STRICT.name
REPORT_ENV = switches.REPORT.name
REPORT_FILENAME = "setup-report.json"
REWRITTEN, CONTRADICTION = "rewritten", "contradiction"


# one reported setting: its report name, ServerArgs field and flag; ``speculative``: a rewrite is a finding
Setting = namedtuple("Setting", "name field flag speculative", defaults=(False,))
SETTINGS = (
    Setting("speculative_algorithm", "speculative_algorithm", "--speculative-algorithm", True),
    Setting("num_steps", "speculative_num_steps", "--speculative-num-steps", True),
    Setting("eagle_topk", "speculative_eagle_topk", "--speculative-eagle-topk", True),
    Setting("num_draft_tokens", "speculative_num_draft_tokens", "--speculative-num-draft-tokens", True),
    Setting("draft_window", "speculative_draft_window_size", "--speculative-draft-window-size", True),
    Setting("attention_backend", "attention_backend", "--attention-backend"),
    Setting("draft_attention_backend", "speculative_draft_attention_backend", "--speculative-draft-attention-backend"),
    Setting("cuda_graph", "cuda_graph", "--disable-cuda-graph"),  # on/off, read by the caller from its config
    Setting("torch_compile", "enable_torch_compile", "--enable-torch-compile"),
    Setting("page_size", "page_size", "--page-size"),
    Setting("context_length", "context_length", "--context-length"),
)
FIELDS = tuple(s.field for s in SETTINGS)


@dataclass(frozen=True)
class Finding:
    """A rewrite or a contradiction: ``field`` is the flag (``file`` None) or the draft file's field that fixes it."""

    kind: str
    field: str
    problem: str
    fix: str
    file: str | None = None

    def line(self) -> str:
        where = f"{self.file}: field '{self.field}'" if self.file else self.field
        return f"{self.kind.upper()}: {where}: {self.problem}; fix: {self.fix}"


@dataclass(frozen=True)
class DraftFacts:
    path: str
    config: Mapping | None = None  # the draft's config.json (None: not a local directory with one)
    manifest: Manifest | None = None
    d2t: tuple[int, int] | None = None  # (lowest, highest) target id the draft's d2t offsets map to
    d2t_file: str | None = None
    tokenizer: str | None = None  # a digest of the draft directory's vocabulary (None: it has no tokenizer)
    target_path: str | None = None
    target_config: Mapping | None = None
    target_tokenizer: str | None = None
    unread: tuple[str, ...] = ()  # one error line per file that is there but was not read (too large, not regular...)


@dataclass(frozen=True)
class SetupFacts:
    release: Release
    requested: Mapping[str, Any]  # field -> value asked for (None: not given; missing: not known)
    effective: Mapping[str, Any]  # field -> value SGLang runs
    record: Sequence[tuple[str, Mapping]] | None = None  # SGLang's resolution record (None: the release keeps none)
    sources: Mapping[str, str] = field(default_factory=dict)  # record source -> where SGLang defines it
    draft: DraftFacts | None = None
    plugin_active: bool = True
    notes: Sequence[str] = ()  # what SGLang said while resolving, where the caller saw it


@dataclass
class SetupReport:
    release: str
    how: str
    settings: list[dict]  # one row per SETTINGS entry
    trained: dict
    findings: list[Finding]
    notes: list[str]
    unread: list[str] = field(default_factory=list)  # the draft's or target's files left out (DraftFacts.unread)

    @property
    def ok(self) -> bool:
        return not self.findings

    def to_dict(self) -> dict:
        return {"sglang": self.release, "changes_read_from": self.how, "settings": self.settings,
                "trained": self.trained, "findings": [asdict(f) for f in self.findings], "notes": self.notes,
                "unread": self.unread, "ok": self.ok}

    def lines(self) -> list[str]:
        out = [f"speculative setup (SGLang {self.release}; changes read from {self.how}):"]
        for r in self.settings:
            asked = "not given" if r["requested"] is None else "not known" if r["requested"] == "?" else \
                brief(r["requested"])
            by = f" <- {r['changed_by']}" + (f" ({r['source']})" if r["source"] else "") if r["changed_by"] else ""
            out.append(f"  {r['name']}: requested {asked}, effective {brief(r['effective'])}{by}")
        out += [f"  draft {k}: {cut(shown(v), 200) if isinstance(v, str) else brief(v, 200)}"
                for k, v in self.trained.items()]
        out += [f"  SGLang said: {n}" for n in self.notes] + [f"  not read: {u}" for u in self.unread]
        return out + ([f"  {f.line()}" for f in self.findings] or ["  no rewrites or contradictions"])


def _rows(facts: SetupFacts) -> tuple[list[dict], list[Finding]]:
    rows, findings = [], []
    for s in SETTINGS:
        requested, effective = facts.requested.get(s.field, "?"), facts.effective.get(s.field)
        by = source = None  # who changed it, where SGLang defines that
        if facts.record is not None:  # the field's last declaration, unless it declares what was asked
            last = next((d for d in reversed(facts.record) if s.field in d[1]), None)
            if last is not None and last[1][s.field] != requested:
                by, source = last[0], facts.sources.get(last[0])
        elif requested not in (None, "?") and requested != effective:
            by = "argument resolution (the parsed value differs from the effective one)"
        rule = next((n for n in facts.notes if s.field in n), None) if by else None
        rows.append({"name": s.name, "flag": s.flag, "requested": requested, "effective": effective,
                     "changed_by": by, "source": source, "rule": rule})
        if s.speculative and requested not in (None, "?") and requested != effective:
            where = f" by SGLang's {by}" + (f" ({source})" if source else "") if by else ""
            findings.append(Finding(REWRITTEN, s.flag, f"{brief(requested)} was rewritten to {brief(effective)}"
                                    f"{where}{f': {rule}' if rule else ''}", f"pass {s.flag} {brief(effective)} "
                                    "(what runs), or change the settings SGLang derives it from"))
    return rows, findings


def _trained_depth(cfg: Mapping) -> tuple[int, str] | None:
    """The draft's test-time-training depth, where its config states it: ``(steps, field)``."""
    methods = path_get(cfg, "speculators_config.proposal_methods")
    stated = [(path_get(m, "speculative_tokens"), f"speculators_config.proposal_methods[{i}].speculative_tokens")
              for i, m in enumerate(methods if isinstance(methods, list) else [])]
    stated += [(cfg.get(key), key) for key in ("ttt_length", "ttt_steps")]
    return next(((n, key) for n, key in stated if isinstance(n, int) and not isinstance(n, bool)), None)


def _draft_findings(d: DraftFacts, eff: Mapping, release: Release, plugin: bool) -> tuple[dict, list[Finding]]:
    """What the draft was trained with, and where what the server runs contradicts it."""
    cfg, out, trained = d.config or {}, [], {}
    cfile, algorithm = str(Path(d.path) / "config.json"), eff.get("speculative_algorithm")

    def add(field: str, problem: str, fix: str, file: str | None = None) -> None:
        out.append(Finding(CONTRADICTION, field, problem, fix, file))

    archs = cfg.get("architectures")  # SGLang's draft class: architectures[0]
    arch = str(archs[0]) if isinstance(archs, list) and archs else ""
    eagle3 = "Eagle3" in arch or path_get(cfg, "speculators_model_type") == "eagle3"
    if d.target_path and Path(d.path).resolve() == Path(d.target_path).resolve() or (
            arch and not eagle3 and "Eagle" not in arch and arch in map(str, path_get(d.target_config,
                                                                                      "architectures") or [])):
        add("--speculative-draft-model-path", f"{d.path} is the target model (architectures {brief(archs)}), not a "
            "draft: SGLang would load the target as the draft",
            "pass the EAGLE-3 draft's directory as --speculative-draft-model-path")
    elif algorithm == "EAGLE3" and arch and not eagle3:
        what = "an EAGLE (not EAGLE-3) draft" if "Eagle" in arch else "not an EAGLE-3 draft class"
        add("--speculative-algorithm", f"EAGLE3 with {d.path}, whose class {arch} is {what}: it takes no aux hidden "
            "states", "serve an EAGLE-3 draft, or pass --speculative-algorithm EAGLE for an EAGLE draft")
    elif algorithm == "EAGLE" and (eagle3 or d.manifest is not None):
        add("--speculative-algorithm", f"EAGLE with the EAGLE-3 draft {d.path}: SGLang captures no aux hidden states "
            "and skips the fc (accept length about 1.0)", "pass --speculative-algorithm EAGLE3")
    elif not algorithm:
        add("--speculative-algorithm", f"not set: SGLang serves without speculation and never loads the draft "
            f"{d.path}", "pass --speculative-algorithm EAGLE3")
    if d.manifest is not None:
        trained["layer ids"] = list(d.manifest.layer_ids)
    depth = _trained_depth(cfg)
    if depth is not None:
        trained["test-time-training steps"] = depth[0]
        steps = eff.get("speculative_num_steps")
        if isinstance(steps, int) and steps > depth[0]:
            add("--speculative-num-steps", f"{steps} draft steps, but {cfile} field '{depth[1]}' says the draft was "
                f"trained for {depth[0]}: later positions are proposals it never learned",
                f"pass --speculative-num-steps {depth[0]} or fewer")
    window, served = cfg.get("sliding_window"), eff.get("speculative_draft_window_size")
    if window and "sliding_attention" in (cfg.get("layer_types") or []):
        trained["window"] = window
        if served != window:
            add("--speculative-draft-window-size", f"the draft was trained with a {window}-token sliding window, the "
                f"server's draft window is {served}", f"pass --speculative-draft-window-size {window}")
    vocab, dvocab = cfg.get("vocab_size"), cfg.get("draft_vocab_size")
    target_vocab = path_get(d.target_config, "vocab_size") or vocab
    if dvocab is not None:
        trained["vocab"] = f"{dvocab} of {vocab}"
    if d.d2t is not None:
        lo, hi = d.d2t
        trained["d2t target ids"] = f"[{lo}, {hi}]"
        if isinstance(target_vocab, int) and (lo < 0 or hi >= target_vocab):
            add("tensor d2t", f"maps draft ids to target ids [{lo}, {hi}], outside the target vocabulary [0, "
                f"{target_vocab})", "export d2t as offsets (target id - draft id) from the training run for this "
                "target's tokenizer", d.d2t_file)
    if isinstance(vocab, int) and isinstance(target_vocab, int) and vocab != target_vocab:
        add("vocab_size", f"{vocab}, but the target's vocab_size is {target_vocab}: the draft was trained on another "
            "vocabulary", "serve the draft on the target it was trained against", cfile)
    if d.tokenizer and d.target_tokenizer and d.tokenizer != d.target_tokenizer:
        add("tokenizer", f"the draft directory's vocabulary ({d.tokenizer}) is not the target's "
            f"({d.target_tokenizer})", "serve the draft on the target whose tokenizer it was trained with", d.path)
    positions, ctx = cfg.get("max_position_embeddings"), eff.get("context_length")
    if isinstance(positions, int) and isinstance(ctx, int) and ctx > positions:
        add("--context-length", f"{ctx} tokens, but {cfile} field 'max_position_embeddings' is {positions}: the "
            f"draft attends beyond its positions", f"pass --context-length {positions} or less, or serve a draft "
            f"built for {ctx}")
    for name, flag in release.draft_flags.items():
        value = next((path_get(cfg, k) for k in flag.keys if path_get(cfg, k) is not None), None)
        if value is not None:
            trained[name] = value
        if value and not flag.native and not plugin:
            add(flag.keys[0], "true, but stock SGLang's draft class ignores it (the plugin's draft loader serves it)",
                "install sglang-eagle3-capture in the server's environment (and list eagle3_capture in "
                "SGLANG_PLUGINS if it is set)", cfile)
    return trained, out


def build(facts: SetupFacts) -> SetupReport:
    rows, findings = _rows(facts)
    how = "SGLang's resolution record (server_args._resolved_overrides)" if facts.record is not None else \
        "the parsed arguments compared with the effective ones (this release keeps no resolution record)"
    trained: dict = {}
    eff, draft = facts.effective, facts.draft
    if draft is None or not draft.path:
        if eff.get("speculative_algorithm"):
            findings.append(Finding(CONTRADICTION, "--speculative-draft-model-path", f"{eff['speculative_algorithm']} "
                                    "without a draft: SGLang loads the target as its own draft",
                                    "pass --speculative-draft-model-path DRAFT_DIR"))
    else:
        trained, more = _draft_findings(draft, eff, facts.release, facts.plugin_active)
        findings += more
    return SetupReport(facts.release.version, how, rows, trained, findings, list(facts.notes),
                       list(draft.unread) if draft is not None else [])


def strict(environ: Mapping[str, str]) -> bool:
    return switches.read(switches.STRICT, environ)


def strict_refusal(report: SetupReport) -> DeploymentError | None:
    """The error strict mode raises (None without findings): the first finding's field, every finding named."""
    if report.ok:
        return None
    first = report.findings[0]
    rest = "; ".join(f.line() for f in report.findings[1:])
    return DeploymentError(first.file, first.field, f"{first.problem} ({STRICT_ENV}=1 refuses a rewritten speculative "
                           f"setting or a contradiction{'; also: ' + rest if rest else ''})",
                           f"{first.fix}, or unset {STRICT_ENV} to serve it with a WARNING")


def report_path(environ: Mapping[str, str]) -> Path | None:
    """The REPORT switch, else report/ in the dump directory (a subdirectory: the dump's ``*.json`` are batches)."""
    explicit, dump = switches.read(switches.REPORT, environ), switches.read(switches.DUMP, environ)
    if explicit:
        return Path(explicit)
    return Path(dump) / "report" / REPORT_FILENAME if dump else None


# --- reading the draft's and the target's files (no torch) -------------------------------------------------------

_INT_CODES = {"I64": "q", "I32": "i", "I16": "h", "I8": "b"}
MAX_D2T_ENTRIES = 1 << 22  # a draft vocabulary's d2t (the published drafts' hold 32k to 256k entries)
_FIX = "make it a readable regular file of its kind (the report leaves it out meanwhile; serving goes on)"


def _d2t_range(draft: Path) -> tuple[tuple[int, int] | None, str | None]:
    info = tensor_index(draft).get("d2t") if weights_present(draft) else None
    if info is None or info.dtype not in _INT_CODES:
        return None, None
    count = math.prod(info.shape)
    if count > MAX_D2T_ENTRIES:
        raise InputError(info.file, "d2t", f"holds {count} entries, more than the {MAX_D2T_ENTRIES} the report "
                         "reads", _FIX)
    with open_regular(info.file, fix=_FIX) as f:
        (n,) = array.array("Q", f.read(8))
        f.seek(8 + n + info.offsets[0])
        values = array.array(_INT_CODES[info.dtype], f.read(info.offsets[1] - info.offsets[0]))
    if sys.byteorder == "big":
        values.byteswap()
    targets = [i + v for i, v in enumerate(values)]
    return ((min(targets), max(targets)) if targets else None), str(info.file)


def _read(directory: Path | None, name: str, unread: list[str]) -> Any:
    """``config.json`` as a mapping, ``tokenizer.json`` as a digest of its vocabulary (``model.vocab``, else the whole
    file), read bounded; None when absent or unreadable (then ``unread`` says why)."""
    try:
        if directory is None or not is_file(directory / name, fix=_FIX):
            return None
        data = read_bytes(directory / name, fix=_FIX, max_bytes=MAX_JSON_BYTES)
        if name == "config.json":
            doc = parse_json(data, where=directory / name, fix=_FIX)
            return doc if isinstance(doc, Mapping) else None
    except Eagle3CaptureError as e:
        unread.append(str(e))
        return None
    try:
        vocab = json.loads(data).get("model", {}).get("vocab")
    except (ValueError, AttributeError, RecursionError):
        vocab = None
    return "sha256:" + hashlib.sha256(data if vocab is None else json.dumps(vocab, sort_keys=True).encode()
                                      ).hexdigest()[:16]


def read_draft_facts(draft_path: str | None, target_path: str | None = None) -> DraftFacts | None:
    """The draft's (and target's) files, each read bounded; what cannot be read is named in ``unread``, never raised."""
    if not draft_path:
        return None
    draft = Path(draft_path)
    target = Path(target_path) if target_path else None
    tdir = target if target is None or target.is_dir() else target.parent
    unread: list[str] = []
    if not draft.is_dir():
        return DraftFacts(str(draft_path), target_path=target_path, target_config=_read(tdir, "config.json", unread),
                          unread=tuple(unread))
    try:
        manifest = find_manifest(draft)
    except Eagle3CaptureError:
        manifest = None  # the policy refuses a bad manifest itself
    try:
        d2t, d2t_file = _d2t_range(draft)
    except (Eagle3CaptureError, OSError, ValueError) as e:
        d2t, d2t_file = None, None
        unread.append(str(e) if isinstance(e, Eagle3CaptureError) else f"{draft}: the d2t tensor: {type(e).__name__}: "
                      f"{e}")
    config, tokenizer = _read(draft, "config.json", unread), _read(draft, "tokenizer.json", unread)
    target_config, target_tokenizer = _read(tdir, "config.json", unread), _read(tdir, "tokenizer.json", unread)
    return DraftFacts(str(draft_path), config, manifest, d2t, d2t_file, tokenizer, target_path, target_config,
                      target_tokenizer, tuple(unread))
