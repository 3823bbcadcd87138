"""What the draft should accept when served (``verify --write-expected``, ``plan``): its own rollouts (:mod:`.rollout`)
on its training samples under the declared wiring, as the served walk and every start (docs/plan.md)."""

from __future__ import annotations

import re
import time
from dataclasses import dataclass, replace
from datetime import datetime, timezone
from pathlib import Path
from typing import Sequence

from .. import __version__
from ..core.checkpoint import module_name, tensor_index
from ..core.errors import InputError, brief
from ..core.manifest import find_manifest, manifest_path, write_manifest
from ..observe.acceptance import Tally
from . import verify as v
from .candidates import build_candidates, chunk_identities, label_fc_inputs
from .formats import load_draft_config
from .samples import expand_data_paths

MAX_STEPS = 8
MAX_TOPK = 16  # a tree rollout's memory grows as topk squared; SGLang's examples and the EAGLE papers use up to 10


@dataclass(frozen=True, order=True)
class Setting:
    """``--speculative-num-steps``, ``--speculative-eagle-topk``, ``--speculative-num-draft-tokens``."""

    steps: int
    topk: int
    draft_tokens: int

    def label(self) -> str:
        return f"{self.steps},{self.topk},{self.draft_tokens}"

    def flags(self) -> str:
        return (f"--speculative-num-steps {self.steps} --speculative-eagle-topk {self.topk} "
                f"--speculative-num-draft-tokens {self.draft_tokens}")

# Candidate settings, each as SGLang runs it: topk 1 is a chain (SGLang rewrites draft tokens to steps + 1); a tree
# selects draft_tokens - 1 of its topk + (steps - 1) * topk**2 candidates.
DEFAULT_SETTINGS = tuple(
    [Setting(s, 1, s + 1) for s in range(1, 6)]
    + [Setting(s, k, d) for k in (2, 4) for s in (2, 3, 4, 5) for d in (4, 6, 8, 16) if d - 1 <= k + (s - 1) * k * k
       and d - 1 >= s])


_SETTING = re.compile(r"\s*([0-9]{1,4}),([0-9]{1,4}),([0-9]{1,5})\s*")


def parse_settings(text: str) -> list[Setting]:
    """``--settings "1,1,2 3,2,6"`` (or ``;``-separated); each must run as asked, within bounds."""
    out = []
    for part in re.split(r"[\s;]+", text.strip()):
        m = _SETTING.fullmatch(part)
        if not m:
            raise InputError(None, "--settings", f"{brief(part, 40)!r} is not STEPS,TOPK,DRAFT_TOKENS",
                             "give settings like --settings '1,1,2 3,1,4 3,2,6'")
        out.append(_checked(Setting(*map(int, m.groups()))))
    return out


def _checked(s: Setting) -> Setting:
    why = runs_as_asked(s) or bounded(s)
    if why:
        raise InputError(None, "--settings", f"{s.label()}: {why}", "give settings SGLang runs as asked, of at "
                         f"most {MAX_STEPS} steps and topk {MAX_TOPK}")
    return s


def runs_as_asked(s: Setting) -> str | None:
    """Why SGLang would not run ``s`` as given (0.5.23 arg_groups/speculative_hook.py), or ``None``."""
    if min(s.steps, s.topk, s.draft_tokens) < 1:
        return "every value must be at least 1"
    if s.topk == 1 and s.draft_tokens != s.steps + 1:
        return f"with topk 1 SGLang rewrites --speculative-num-draft-tokens to steps + 1 = {s.steps + 1}"
    if s.topk > 1 and not 2 <= s.draft_tokens <= 1 + s.topk + (s.steps - 1) * s.topk ** 2:
        return (f"a {s.steps}-step topk-{s.topk} tree drafts {s.topk + (s.steps - 1) * s.topk ** 2} nodes, so draft "
                f"tokens must be in [2, {1 + s.topk + (s.steps - 1) * s.topk ** 2}]")
    return None


def bounded(s: Setting) -> str | None:
    """Why ``s`` is past ``plan``'s bounds, or ``None``."""
    return (f"more than {MAX_STEPS} steps" if s.steps > MAX_STEPS else
            f"topk more than {MAX_TOPK} (a tree rollout's memory grows as topk squared)" if s.topk > MAX_TOPK else None)


class Figures:
    """One setting's accepted-drafts histograms (the serving side's :class:`Tally`): served walk and every start."""

    def __init__(self, setting: Setting) -> None:
        self.setting, self.walk, self.start = setting, Tally(setting.steps), Tally(setting.steps)

    def add(self, accepted) -> None:
        """One batch's accepted draft tokens per row (``-1``: no rollout there)."""
        for tally, ns in ((self.walk, _walk(accepted)), (self.start, accepted[accepted >= 0].tolist())):
            for n in ns:
                tally.record(n)

    @property
    def per_position(self) -> list[float]:
        return [round(p or 0.0, 4) for p in self.walk.per_position()]

    @property
    def accept_length(self) -> float:
        length = self.walk.accept_length()
        return round(length, 4) if length is not None else 1.0

    @property
    def per_position_every_start(self) -> list[float]:
        return [round(p or 0.0, 4) for p in self.start.per_position()]

    def to_dict(self) -> dict:
        s = self.setting
        return {"steps": s.steps, "topk": s.topk, "draft_tokens": s.draft_tokens, "accept_length": self.accept_length,
                "per_position": self.per_position, "verify_steps": self.walk.verify_steps,
                "accept_histogram": self.walk.histogram, "per_position_every_start": self.per_position_every_start,
                "accept_length_every_start": round(1 + sum(self.per_position_every_start), 4),
                "flags": s.flags()}


@dataclass
class ExpectedReport:
    draft_dir: str
    layer_ids: tuple[int, ...]
    files: list[str]
    figures: list[Figures]
    positions: int = 0
    tokens: int = 0
    seconds: float = 0.0
    dtype: str = "float32"

    def ranked(self) -> list[Figures]:
        """Best accept length first (ties: fewer draft tokens, then fewer steps)."""
        return sorted(self.figures, key=lambda f: (-f.accept_length, f.setting.draft_tokens, f.setting.steps))

    def expected_block(self, version: str) -> dict:
        """The manifest's ``expected`` block (core.schemas.manifest.EXPECTED)."""
        acceptance = [{"steps": f.setting.steps, "topk": f.setting.topk, "draft_tokens": f.setting.draft_tokens,
                       "per_position": f.per_position, "accept_length": f.accept_length} for f in self.ranked()]
        return {"acceptance": acceptance,
                "provenance": {"tool": "sglang-eagle3-capture verify --write-expected", "version": version,
                               "data_files": len(self.files), "data": self.files[:20], "positions": self.positions,
                               "layer_ids": list(self.layer_ids), "dtype": self.dtype,
                               "definition": "served walk over the samples: per_position[k] = fraction of verify "
                                             "steps accepting >= k+1 draft tokens",
                               "date": datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")}}

    def to_dict(self) -> dict:
        return {"draft_dir": self.draft_dir, "layer_ids": list(self.layer_ids), "files": len(self.files),
                "positions": self.positions, "tokens": self.tokens, "seconds": round(self.seconds, 3),
                "tokens_per_s": round(self.tokens / self.seconds, 1) if self.seconds else None, "dtype": self.dtype,
                "settings": [f.to_dict() for f in self.ranked()]}


def shifted_batch(samples, sources, embed):
    """Right-padded ``(ids, aux, tgt, mask)`` as :func:`.model.eagle3_shift`; ``None`` when no sample scores a row."""
    import torch

    b, t = len(samples), max(s.seq_len for s in samples)
    if t < v.MIN_TOKENS:
        return None
    h, dtype = samples[0].hidden_size, embed.dtype
    ids = torch.zeros(b, t, dtype=torch.long)
    valid = torch.zeros(b, t, dtype=torch.bool)
    aux = torch.zeros(b, t, len(sources) * h, dtype=dtype)
    for i, s in enumerate(samples):
        n = s.seq_len
        ids[i, :n] = s.input_ids
        valid[i, :n] = True if s.loss_mask is None else s.loss_mask.bool()
        for j, src in enumerate(sources):
            part = (s.chunks[src.index] if src.kind == "chunk" else embed[s.input_ids] if src.kind == "embedding"
                    else None)
            if part is not None:
                aux[i, :n, j * h:(j + 1) * h] = part.to(dtype)
    lengths = torch.tensor([s.seq_len for s in samples])
    mask = valid[:, 1:t - 1] & ((torch.arange(t - 2)[None, :] + 2) < lengths[:, None])
    return ids[:, 1:t - 1], aux[:, :t - 2], ids[:, 2:], mask


def measure(draft_dir: str | Path, data: Sequence[str | Path], *, target: str | Path | None = None,
            settings: Sequence[Setting] = DEFAULT_SETTINGS, batch_size: int = 8, dtype: str | None = None,
            progress: bool = False, model=None) -> ExpectedReport:
    """Roll the draft out on ``data`` for every setting, in fp32 unless ``dtype`` says (``"checkpoint"``: the fc's)."""
    from .rollout import accepted_drafts  # torch

    for s in settings:
        _checked(s)
    draft_cfg = load_draft_config(Path(draft_dir) / "config.json")
    declared = v._declared(Path(draft_dir), draft_cfg, target)
    if declared.readings:
        raise InputError(Path(draft_dir) / "config.json", None, f"no manifest, and the config's ids have "
                         f"{len(declared.readings)} readings: no declared wiring", "run `sglang-eagle3-capture verify` "
                         "to tell them apart, then write the manifest")
    paths = expand_data_paths(data)
    if model is None:
        model = v.load_draft(draft_dir, target, None if dtype in (None, "float32") else _dtype(draft_dir, dtype))
    draft_vocab = int(model.d2t.shape[0])
    for s in settings:
        if s.topk > draft_vocab:
            raise InputError(None, "--settings", f"{s.label()}: topk {s.topk} is more than the draft's vocabulary of "
                             f"{draft_vocab} tokens", f"give a topk of at most {draft_vocab}")
    embed = model.embed_tokens.weight.detach()
    figures = {s: Figures(s) for s in settings}
    report = ExpectedReport(str(draft_dir), declared.layer_ids, [str(p) for p in paths], list(figures.values()),
                            dtype=str(embed.dtype).removeprefix("torch."))
    sources, first, start = None, None, time.perf_counter()
    vocab = embed.shape[0]
    for batch in v._batches(paths, batch_size, progress):
        v.check_batch(batch, first, declared, vocab)
        for s in batch:
            if s.loss_mask is None:
                raise InputError(s.path, "loss_mask", "the sample carries no loss mask, so where a server's verify "
                                 "steps start (after the prompt) is unknown", v.NO_MASK_FIX)
        if first is None:
            first = batch[0]
            ids, _ = chunk_identities(first.chunk_layer_ids, v._embedding_hits([first], embed)[0])
            labels = label_fc_inputs(ids, first.fc_chunks, declared.layer_ids, declared.recorded,
                                     first.chunk_layer_ids)
            if labels.contradiction:
                raise InputError(declared.source, "layer_ids", labels.contradiction, "run `sglang-eagle3-capture "
                                 "verify` on the draft and write the manifest with the ids it was trained on")
            cs = build_candidates(manifest_ids=declared.layer_ids, num_layers=declared.num_hidden_layers, stock=[],
                                  chunk_ids=labels.ids, fc_chunks=first.fc_chunks)
            if cs.manifest is None:
                raise InputError(first.path, None, f"the declared wiring {list(declared.layer_ids)} cannot be built "
                                 f"from the stored tensors: {cs.manifest_problem}",
                                 "pass samples that store those layers")
            sources = cs.manifest.sources
        shifted = shifted_batch(batch, sources, embed)
        if shifted is None:
            continue
        report.positions += int(shifted[3].sum())
        report.tokens += sum(s.seq_len for s in batch)
        for s, a in accepted_drafts(model, *shifted, list(settings)).items():
            figures[s].add(a)
    report.seconds = time.perf_counter() - start
    if report.positions == 0:
        raise InputError(None, "--data", f"the {len(paths)} samples score no position (empty loss masks, or fewer "
                         f"than {v.MIN_TOKENS} tokens)", "pass the draft's training samples, with their loss masks")
    return report


def _walk(accepted) -> list[int]:
    out = []  # accepted draft tokens of each verify step of the served walk
    for row in accepted.tolist():
        r = next((i for i, a in enumerate(row) if a >= 0), None)
        while r is not None and r < len(row) and row[r] >= 0:
            out.append(row[r])
            r += row[r] + 1
    return out


def _dtype(draft_dir, name: str):
    """``--dtype name`` (``checkpoint``: the fc weight's if bf16/fp16, else None: fp32)."""
    import torch

    if name == "checkpoint":
        fc = next((info for n, info in tensor_index(draft_dir).items() if module_name(n) == "fc.weight"), None)
        if fc is None:
            raise InputError(draft_dir, "fc.weight", "not in the draft's weights, so --dtype checkpoint has no dtype",
                             "pass the EAGLE-3 draft directory, or --dtype float32 / bfloat16")
        return {"BF16": torch.bfloat16, "F16": torch.float16}.get(fc.dtype)
    return getattr(torch, name)


def write_expected(draft_dir: str | Path, report: ExpectedReport) -> Path:
    """Replace the manifest's ``expected`` block with ``report``'s, atomically."""
    m = find_manifest(draft_dir)
    if m is None:
        raise InputError(manifest_path(draft_dir), "<file>", "no manifest to write the expected figures into",
                         "run `sglang-eagle3-capture manifest write` first, then verify --write-expected")
    return write_manifest(draft_dir, replace(m, expected=report.expected_block(__version__)))
