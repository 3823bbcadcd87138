"""``verify``: the draft's teacher-forced accuracy on its training samples under every buildable wiring (fp32, paired
as speculators' ``shift_batch``), each stored state read pre- or post-norm, and the draft vocabulary's blind spot.
docs/troubleshooting.md (section 2, "Pre- or post-norm", "Validation said 0.93") explains; docs/plan.md the figures."""

from __future__ import annotations

import sys
import time
from collections import Counter
from dataclasses import dataclass, field
from functools import partial
from itertools import islice
from pathlib import Path
from typing import Any, Callable, NamedTuple, Sequence

from ..core import releases
from ..core.checkpoint import draft_fc_in_features, tensor_index
from ..core.config_keys import IDS_KEY
from ..core.errors import AmbiguousLayerIds, InputError, brief
from ..core.families import family_of
from ..core.layer_ids import FINAL_NORM
from ..core.manifest import MANIFEST_FILENAME, find_manifest
from ..core.stock import stock_sglang_capture
from ..core.target_config import cfg_get, load_target_config, target_dims
from ..core.userfiles import is_directory
from . import candidates as cands
from .formats import CONVENTION_VLLM, SpeculatorsFormat, load_draft_config, read_draft_config
from .readings import engine_capture, releases_label, stock_by_release
from .sample_schema import FP8
from .samples import HS_SAFETENSORS, LEGACY_DATA_CONFIG, expand_data_paths, load_sample

DEFAULT_MARGIN = 0.05
UNIT = 0.01  # |log rms(h_t / w)| <= UNIT: the token's state has unit RMS once divided by the norm weight
POST = 0.99  # at least this fraction of unit-RMS tokens: post-norm
PRE = 0.5  # at most this fraction: pre-norm (between: undecided)
POST_NORM, PRE_NORM, UNDECIDED = "post-norm", "pre-norm", "undecided"


def _ratio(n: int, d: int) -> float:
    return n / d if d else 0.0


class NormState(NamedTuple):
    name: str
    tokens: int
    unit_tokens: int  # of ``tokens``, those with unit RMS divided by the final norm weight
    reading: str

    unit_fraction = property(lambda self: _ratio(self.unit_tokens, self.tokens))

    def to_dict(self) -> dict:
        return {"name": self.name, "tokens": self.tokens, "unit_rms_fraction": round(self.unit_fraction, 4),
                "reading": self.reading}


class NormStates:
    """Unit-RMS token counts per stored tensor over samples; a weight with a zero entry reads ``undecided``."""

    def __init__(self, names: Sequence[str], weight: Any) -> None:
        self.names, self.weight = tuple(names), weight.float()
        self.ok = bool((self.weight.abs() > 0).all())  # h / w is defined for every entry
        self.tokens, self.unit = [0] * len(self.names), [0] * len(self.names)

    def add(self, chunks: Sequence[Any]) -> None:
        for i, chunk in enumerate(chunks if self.ok else ()):
            self.tokens[i] += int(chunk.shape[0])
            rms = (chunk.float() / self.weight).pow(2).mean(dim=-1).sqrt()
            self.unit[i] += int((rms.log().abs() <= UNIT).sum())

    def result(self) -> list[NormState]:
        return [NormState(n, t, u, UNDECIDED if not (self.ok and t) else POST_NORM if u / t >= POST else PRE_NORM
                          if u / t <= PRE else UNDECIDED) for n, t, u in zip(self.names, self.tokens, self.unit)]


def target_argmax(rows: Any, norm_weight: Any, eps: float, states: Any) -> Any:
    """Draft ids of the target's argmax over ``rows`` (its lm_head in draft-id order), after the final norm if given."""
    x = states.float()  # speculators 0.9.0 validation scores the draft against this: models/eagle3/core.py:251-252
    if norm_weight is not None:
        x = x * (x.pow(2).mean(-1, keepdim=True) + eps).rsqrt() * norm_weight.float()
    return (x @ rows.float().T).argmax(-1)


@dataclass
class VocabGap:
    """Counts for one wiring over ``verify``'s scored positions (``why``: why speculators' figure is not computed)."""

    in_vocab: Any
    draft_vocab_size: int
    head: Callable | None = None  # target_argmax bound to the target's head; None: speculators' figure not computed
    why: str = ""
    positions: int = 0
    out_of_vocab: int = 0
    correct: int = 0
    restricted_correct: int = 0

    def add(self, labels: Any, scored: Any, top1_draft_ids: Any, top1_target_ids: Any, target_states: Any = None):
        """One batch, all ``[B, T]`` (``target_states`` ``[B, T, H]``)."""
        self.positions += int(scored.sum())
        self.out_of_vocab += int((~self.in_vocab[labels] & scored).sum())
        self.correct += int(((top1_target_ids == labels) & scored).sum())
        if self.head is not None and target_states is not None:
            self.restricted_correct += int(((top1_draft_ids == self.head(target_states)) & scored).sum())

    exact = property(lambda self: self.head is not None, doc="Whether speculators' figure was computed.")
    oov_fraction = property(lambda self: _ratio(self.out_of_vocab, self.positions))
    top1 = property(lambda self: _ratio(self.correct, self.positions), doc="Out-of-vocabulary targets as misses.")
    speculators_top1 = property(lambda self: _ratio(self.restricted_correct, self.positions) if self.exact else None)
    # the most speculators' figure can be: every out-of-vocabulary position counted a hit
    speculators_top1_bound = property(lambda self: min(1.0, self.top1 + self.oov_fraction))

    def to_dict(self) -> dict:
        s = self.speculators_top1
        return {"draft_vocab_size": self.draft_vocab_size, "target_vocab_size": int(self.in_vocab.shape[0]),
                "positions": self.positions, "out_of_vocab": self.out_of_vocab,
                "out_of_vocab_fraction": round(self.oov_fraction, 6), "top1_oov_as_miss": round(self.top1, 6),
                "speculators_top1": None if s is None else round(s, 6),
                "speculators_top1_upper_bound": round(self.speculators_top1_bound, 6),
                "why_not_computed": None if self.exact else self.why}

    def lines(self) -> list[str]:
        return [f"draft vocabulary {self.draft_vocab_size} of {int(self.in_vocab.shape[0])} target ids: "
                f"{self.oov_fraction:.1%} of the scored target tokens ({self.out_of_vocab} of {self.positions}) are "
                "outside it; served, they are always rejected",
                f"top-1 counting them as misses {self.top1:.3f} (what serving can accept)",
                f"top-1 as speculators' validation scores it {self.speculators_top1:.3f} (the target's argmax over the "
                f"draft vocabulary; {self.speculators_top1 - self.top1:+.3f} over what serving can accept)"
                if self.exact else
                "speculators' validation (the target's argmax over the draft vocabulary) can report up to "
                f"{self.speculators_top1_bound:.3f}; not computed: {self.why}"]


@dataclass
class VerifyReport:
    draft_dir: str
    manifest_ids: tuple[int, ...]
    files: int = 0
    positions: int = 0
    top_k: int = 5
    embedding_source: str = ""
    embedding_check: dict = field(default_factory=dict)
    candidates: cands.CandidateSet | None = None
    chunk_names: tuple[str, ...] = ()
    chunk_ids: list = field(default_factory=list)
    layout: str = ""
    throughput: dict = field(default_factory=dict)
    margin: float = DEFAULT_MARGIN
    declared_by: str = "manifest"  # what stated the wiring checked: "manifest", "config.json", or "ambiguous config"
    readings: tuple = ()  # the config's possible meanings when it is ambiguous (formats.Reading)
    norm_states: list = field(default_factory=list)  # per stored tensor: pre- or post-norm (NormStates)
    vocabulary: VocabGap | None = None  # the manifest wiring's out-of-vocabulary targets (VocabGap)
    contradiction: str = ""  # the draft's training record names other fc inputs than the manifest (candidates.Labels)
    ok: bool = False
    ambiguous: bool = False
    summary: str = ""

    def ranked(self) -> list[cands.Candidate]:
        return sorted(self.candidates.candidates, key=lambda c: (-c.top1, -c.topk))

    def to_dict(self) -> dict:
        cs, same = self.candidates, ("draft_dir", "layout", "files", "positions", "top_k", "embedding_source",
                                     "embedding_check", "margin", "throughput", "declared_by", "ok", "ambiguous")
        return {
            **{k: getattr(self, k) for k in same}, "manifest_layer_ids": list(self.manifest_ids),
            "stored_tensors": [{"name": n, "layer_id": i} for n, i in zip(self.chunk_names, self.chunk_ids)],
            "wirings": [{"name": c.name, "sources": cands.describe_sources(c, self.chunk_names),
                         "layer_ids": None if c.layer_ids is None else list(c.layer_ids), "top1": c.top1,
                         "topk": c.topk, "positions": c.positions, "is_manifest": c is cs.manifest,
                         "reference": c.is_reference} for c in self.ranked()],
            "unbuildable": cs.unbuildable, "notes": cs.notes, "contradiction": self.contradiction or None,
            "readings": [{"layer_ids": list(r.layer_ids), "trained_by": list(r.who)} for r in self.readings],
            "norm_states": [n.to_dict() for n in self.norm_states], "summary": self.summary,
            "vocabulary": None if self.vocabulary is None else self.vocabulary.to_dict()}


def load_target_tensor(target_dir: str | Path, suffix: str, *, with_file: bool = False, missing_ok: bool = False):
    """The tensor named ``*suffix`` in a target's safetensors, read alone (cheap on a sharded 671B checkpoint)."""
    from safetensors import safe_open

    index = tensor_index(target_dir)  # headers checked (dtype, shape, offsets) before safetensors opens the file
    name = min((n for n in index if n == suffix or n.endswith("." + suffix)), key=len, default=None)
    if name is None and missing_ok:
        return None
    if name is None:
        raise InputError(target_dir, f"*{suffix}", "not found in the target's safetensors",
                           "pass the target model directory (with its weights) as --target")
    try:
        with safe_open(str(index[name].file), framework="pt", device="cpu") as f:
            return (f.get_tensor(name), index[name].file) if with_file else f.get_tensor(name)
    except Exception as e:  # noqa: BLE001 - safetensors' own error type: the file changed, or its data is bad
        why = brief(str(e).splitlines()[0] if str(e) else type(e).__name__, 160)
        raise InputError(index[name].file, name, f"cannot load ({why})",
                         "re-export or re-download the target checkpoint") from None


def _target_dir(target: str | Path) -> Path:
    fix = "pass the target model directory (or its config.json) as --target"
    return Path(target) if is_directory(target, fix=fix) else Path(target).parent


def load_draft(draft_dir: str | Path, target: str | Path | None, dtype=None):
    """The draft as :class:`Eagle3Draft`, with the target's embedding (and lm_head if needed) when given."""
    from .model import DraftConfig, Eagle3Draft  # torch

    embed = head = where = None
    if target is not None:
        embed, file = load_target_tensor(_target_dir(target), "embed_tokens.weight", with_file=True)
        cfg_path, where = Path(draft_dir) / "config.json", f"{file}: tensor '*embed_tokens.weight'"
        if DraftConfig.from_dict(load_draft_config(cfg_path), where=str(cfg_path)).lm_head_from_target:
            head, file = load_target_tensor(_target_dir(target), "lm_head.weight", with_file=True)
            where += f" / {file}: tensor '*lm_head.weight'"
    return Eagle3Draft.from_pretrained(draft_dir, target_embed=embed, target_lm_head=head, target_where=where,
                                       dtype=dtype)


def _batches(paths: Sequence[Path], batch_size: int, progress: bool):
    if progress:
        from tqdm import tqdm

        paths = tqdm(paths, total=len(paths), desc="verify", unit="file", file=sys.stderr, dynamic_ncols=True)
    it = iter(paths)
    while batch := [load_sample(p) for p in islice(it, batch_size)]:
        yield batch


NO_MASK_FIX = ("pass speculators' data directory (its datasets table holds each sample's loss_mask beside "
               "hidden_states/), or samples that carry their loss_mask")
MIN_TOKENS = 3  # a sample scores position p on token p + 2


def check_batch(batch, first, declared: "_Declared", vocab: int) -> None:
    """Every check a batch passes before the draft reads it (``verify``, ``plan``, ``--write-expected``)."""
    for s in batch:
        if bad := s.input_ids[(s.input_ids < 0) | (s.input_ids >= vocab)].unique()[:5].tolist():
            raise InputError(s.path, "token_ids" if s.layout == HS_SAFETENSORS else "input_ids",
                             f"ids {bad} outside the draft's vocabulary [0, {vocab})",
                             "verify with samples tokenized for this draft's target")
    head = first if first is not None else batch[0]
    if head.hidden_size != declared.hidden_size:
        raise InputError(head.path, None, f"stored tensors are {head.hidden_size} wide but {declared.source} says "
                         f"the target's hidden size is {declared.hidden_size}", "pass samples stored from the target "
                         "the draft was trained against (or --target with that target)")
    for s in batch:
        if s.layout != head.layout or len(s.chunks) != len(head.chunks) or s.hidden_size != head.hidden_size:
            raise InputError(s.path, None, f"{s.layout} with {len(s.chunks)} stored tensors of width {s.hidden_size}, "
                             f"but {head.path} is {head.layout} with {len(head.chunks)} of width {head.hidden_size}",
                             "verify one dataset at a time")
    if first is not None:  # the stored layer ids are the first batch's: checked once, below
        return
    # layer ids a data config gives the stored tensors: distinct, within [-1, N-1] for the declared target
    n_layers, stored = declared.num_hidden_layers, [i for i in head.chunk_layer_ids if i is not None]
    bad = [i for i in stored if not -1 <= i < n_layers]
    if bad or len(set(stored)) != len(stored):
        problem = (f"ids {brief(bad)} are outside [-1, {n_layers - 1}] for a {n_layers}-layer target" if bad else
                   f"{brief(stored)} repeats an id")
        raise InputError(head.path.parent / LEGACY_DATA_CONFIG, "hidden_states.layer_ids", problem,
                         "correct the file (it describes the data's stored layers), or remove it")


def _embedding_hits(samples, embed) -> list[list[int]]:
    """Per sample, the stored chunks that equal ``embed[input_ids]`` exactly (a float32 chunk also as upcast fp8)."""
    import torch

    fp8, out = [getattr(torch, name) for name in FP8], []
    for s in samples:
        ref = embed[s.input_ids]
        out.append([i for i, c in enumerate(s.chunks) if torch.equal(c, ref.to(c.dtype)) or (
            c.dtype == torch.float32 and any(torch.equal(c, ref.to(t).float()) for t in fp8))])
    return out


def _evaluate(model, samples, report: VerifyReport) -> float:
    """Add this batch's counts to every candidate and to the vocabulary gap; returns seconds in draft forwards."""
    import torch

    b, t, h = len(samples), max(s.seq_len for s in samples), samples[0].hidden_size
    if t < MIN_TOKENS:
        return 0.0
    ids, valid = torch.zeros(b, t, dtype=torch.long), torch.zeros(b, t, dtype=torch.bool)
    stacked = torch.zeros(len(samples[0].chunks), b, t, h)
    for i, s in enumerate(samples):
        n = s.seq_len
        ids[i, :n] = s.input_ids
        valid[i, :n] = True if s.loss_mask is None else s.loss_mask
        stacked[:, i, :n] = torch.stack([c.float() for c in s.chunks])
    # draft position p (0..t-3) reads aux[p], token p+1; label token p+2 where mask[p+1]
    lengths = torch.tensor([s.seq_len for s in samples])
    scored = valid[:, 1:t - 1] & ((torch.arange(t - 2)[None, :] + 2) < lengths[:, None])
    labels, embeds, spent, gap = ids[:, 2:], model.embed_tokens.weight[ids].float(), 0.0, report.vocabulary
    with torch.no_grad():
        for c in report.candidates.candidates:
            aux = torch.cat([stacked[s.index] if s.kind == "chunk" else embeds if s.kind == "embedding"
                             else torch.zeros(b, t, h) for s in c.sources], dim=-1)[:, :t - 1]
            start = time.perf_counter()
            logits = model(ids[:, 1:], aux)[:, :t - 2]
            spent += time.perf_counter() - start
            best = logits.topk(min(report.top_k, logits.shape[-1]), dim=-1).indices
            top = model.to_target_ids(best)
            hit = top == labels[..., None]
            c.positions += int(scored.sum())
            c.correct_top1 += int((hit[..., 0] & scored).sum())
            c.correct_topk += int((hit.any(-1) & scored).sum())
            if gap is not None and c is report.candidates.manifest:  # label t+2 comes from the target's state at t+1
                tc = samples[0].target_chunk
                gap.add(labels, scored, best[..., 0], top[..., 0], None if tc is None else stacked[tc][:, 1:t - 1])
    return spent


def _target_head(draft_dir: Path, target: str | Path | None, model, sample, norm_weight, found
                 ) -> tuple[Callable | None, str]:
    """Refuse a ``d2t`` mapping outside the target vocabulary; then the target's head over the draft's, or why not."""
    import torch

    vocab = model.embed_tokens.weight.shape[0]
    ids = torch.arange(model.d2t.shape[0]) + model.d2t  # target id = draft id + d2t[draft id]
    bad = ((ids < 0) | (ids >= vocab)).nonzero().flatten()
    if bad.numel():
        j = int(bad[0])
        raise InputError(draft_dir, "d2t", f"maps {bad.numel()} draft ids outside the target vocabulary [0, {vocab}) "
                         f"(draft id {j} -> {int(ids[j])}; d2t holds offsets: target id = draft id + d2t[draft id])",
                         "re-export d2t as offsets (target ids minus arange(draft_vocab_size))")
    if target is None:
        return None, "pass --target TARGET (its lm_head and final norm give the target's argmax)"
    if sample.target_chunk is None:
        return None, "the samples store no target state"
    cfg, _ = load_target_config(target)
    text = cfg_get(cfg, "text_config") or {}
    eps = cfg_get(cfg, "rms_norm_eps", cfg_get(text, "rms_norm_eps"))
    post = found is not None and found[sample.target_chunk].reading == POST_NORM
    if eps is None and not post:
        return None, "the target's config.json has no rms_norm_eps for its final norm"
    head = load_target_tensor(_target_dir(target), "lm_head.weight", missing_ok=True)
    if head is None:
        if not cfg_get(cfg, "tie_word_embeddings", cfg_get(text, "tie_word_embeddings", False)):
            return None, "the target has no lm_head.weight (and does not tie it to its embedding)"
        head = load_target_tensor(_target_dir(target), "embed_tokens.weight")
    if head.dim() != 2 or head.shape[0] <= int(ids.max()) or head.shape[1] != sample.hidden_size:
        return None, (f"the target's lm_head has shape {list(head.shape)}, not [vocab >= {int(ids.max()) + 1}, "
                      f"{sample.hidden_size}] (the draft's target ids, the samples' hidden size)")
    return partial(target_argmax, head[ids], None if post else norm_weight, float(eps or 0.0)), ""


def verify(draft_dir: str | Path, data: Sequence[str | Path], *, target: str | Path | None = None, top_k: int = 5,
           batch_size: int = 32, margin: float = DEFAULT_MARGIN, max_combinations: int = 64,
           progress: bool = True, dtype=None) -> VerifyReport:
    """Run the draft on ``data`` under every buildable wiring (``dtype``: e.g. bfloat16, for one too large in fp32)."""
    import torch

    draft_cfg = load_draft_config(cfg_file := Path(draft_dir) / "config.json")
    declared = _declared(Path(draft_dir), draft_cfg, target)
    paths, model = expand_data_paths(data), load_draft(draft_dir, target, dtype)
    n_layers, family = declared.num_hidden_layers, family_of(declared.architecture)
    if family is None:
        raise InputError(declared.source, "target.architecture", f"{declared.architecture} has no target-family "
                         "entry, so stock SGLang's wirings are unknown", "see docs/families.md")
    named = [(releases_label(v), c) for v, c in reversed(stock_by_release(draft_cfg, n_layers, family=family,
                                                                          file=cfg_file))]
    named += [(r.name, engine_capture(draft_cfg, n_layers, family=family, reader=r, file=cfg_file))
              for r in releases.other_engines()]
    default = ("stock default (no ids)", stock_sglang_capture({}, n_layers, family=family))
    # a crash feeds nothing, and branch outputs (Gemma 3) are no layer's hidden states in the samples: not scored
    stock = [(name, c.fed_layer_ids) for name, c in named if c.problem is None and c.mis_fed is None]
    stock += [(default[0], default[1].fed_layer_ids)] * (default[1].mis_fed is None)
    stock += [(f"reading {i + 1}: {'; '.join(r.who)}", r.layer_ids) for i, r in enumerate(declared.readings)]
    dropped = [f"not scored: {name} would feed layer ids {list(c.fed_layer_ids)} but fails: {c.problem}"
               for name, c in named if c.problem is not None]
    dropped += [f"not scored: {name}: {c.mis_fed}" for name, c in [*named, default] if c.mis_fed is not None]
    report = VerifyReport(str(draft_dir), declared.layer_ids, top_k=top_k, margin=margin,
                          embedding_source=f"{model.embedding_source} embed_tokens.weight", declared_by=declared.by,
                          readings=declared.readings)
    embed, vocab = model.embed_tokens.weight.detach(), model.embed_tokens.weight.shape[0]
    # the final norm's weight tells pre- from post-norm stored states
    norm_weight = None if target is None else load_target_tensor(_target_dir(target), "model.norm.weight")
    states, first, hits, fwd_s, start, unmasked = None, None, Counter(), 0.0, time.perf_counter(), 0
    for batch in _batches(paths, batch_size, progress):
        check_batch(batch, first, declared, vocab)
        if norm_weight is not None:  # a stored tensor that is the final norm's output is layer id final_norm
            states = states or NormStates(batch[0].chunk_names, norm_weight)
            for s in batch:
                states.add(s.chunks)
        batch_hits = _embedding_hits(batch, embed)
        if first is None:
            first, found = batch[0], None if states is None else states.result()
            ids, notes = cands.chunk_identities(first.chunk_layer_ids, batch_hits[0])
            for i, st in enumerate(found or ()):  # post-norm: final_norm, also where the data says N-1 (noted)
                if st.reading == POST_NORM and ids[i] in (None, n_layers - 1):
                    notes += [] if ids[i] is None else [
                        f"{st.name} is labelled layer {n_layers - 1} (pre-norm) by the data, but it is the final "
                        f"norm's output ({st.unit_fraction:.1%} of {st.tokens} tokens have unit RMS divided by "
                        "model.norm.weight): read as final_norm"]
                    ids[i] = FINAL_NORM
            labels = cands.label_fc_inputs(ids, first.fc_chunks, declared.layer_ids, declared.recorded,
                                           first.chunk_layer_ids)
            aliases = cands.copies(batch)
            notes += labels.notes + [
                f"{first.chunk_names[j]} equals {first.chunk_names[i]} exactly in every sample of the first batch: one "
                "tensor stored twice (e.g. the last layer, as an fc input and as the target state); wirings that "
                "differ only in which copy they read are one wiring" for j, i in aliases.items()]
            cs = cands.build_candidates(manifest_ids=declared.layer_ids, num_layers=n_layers, stock=stock,
                                        chunk_ids=labels.ids, fc_chunks=first.fc_chunks,
                                        max_combinations=max_combinations, aliases=aliases)
            cs.notes = notes + cs.notes + dropped
            report.candidates, report.chunk_names, report.chunk_ids = cs, first.chunk_names, labels.ids
            report.layout, report.contradiction = first.layout, labels.contradiction
            if cs.manifest is not None:
                report.vocabulary = VocabGap(torch.zeros(vocab, dtype=torch.bool), int(model.d2t.shape[0]),
                                             *_target_head(Path(draft_dir), target, model, first, norm_weight, found))
                report.vocabulary.in_vocab[torch.arange(model.d2t.shape[0]) + model.d2t.long()] = True
        unmasked += sum(s.loss_mask is None for s in batch)
        hits.update(i for sample_hits in batch_hits for i in sample_hits)
        report.files += len(batch)
        fwd_s += _evaluate(model, batch, report)
    wall, n_wirings = time.perf_counter() - start, len(report.candidates.candidates)
    report.positions = report.candidates.candidates[0].positions if n_wirings else 0
    per = [{"name": n, "files_equal": hits[i]} for i, n in enumerate(report.chunk_names)]
    report.embedding_check = {"reference": report.embedding_source, "per_tensor": per, "embedding_tensor": next(
        (t["name"] for t in per if t["files_equal"] == report.files), None)}
    if states is not None:
        report.norm_states = found = states.result()
        report.candidates.notes += [
            f"{n.name} is the final norm's output (post-norm, layer id \"final_norm\"): {n.unit_fraction:.1%} of "
            f"{n.tokens} tokens have unit RMS divided by the target's model.norm.weight" for n in found
            if n.reading == POST_NORM]
        if first.target_chunk is not None and found:
            t = found[first.target_chunk]
            report.candidates.notes.append(
                f"the target state {t.name} is {t.reading} ({t.unit_fraction:.1%} of {t.tokens} tokens have unit RMS "
                "divided by model.norm.weight; post-norm >= 99%, pre-norm <= 50%)")
    if unmasked:
        report.candidates.notes.append(f"{unmasked} of {report.files} samples carry no loss mask, so every position "
                                       f"of theirs is scored, the prompt's too: {NO_MASK_FIX}")
    report.throughput = {"wall_s": round(wall, 3), "draft_forward_s": round(fwd_s, 3), "wirings": n_wirings,
                         "files_per_s": round(report.files / wall, 2) if wall else None,
                         "draft_positions_per_s": round(report.positions * n_wirings / fwd_s) if fwd_s else None,
                         "torch_threads": torch.get_num_threads()}
    _decide(report)
    return report


class _Declared(NamedTuple):
    """The wiring ``verify`` checks: the manifest's, or config.json's (ambiguous: every reading, the first declared)."""

    layer_ids: tuple[int, ...]
    by: str
    source: str
    architecture: str
    num_hidden_layers: int
    hidden_size: int
    readings: tuple = ()
    recorded: tuple[tuple[int, ...], str] | None = None  # the training record's ids, and where (_recorded)


def _declared(draft: Path, draft_cfg: dict, target: str | Path | None) -> _Declared:
    if (manifest := find_manifest(draft)) is not None:
        return _Declared(manifest.layer_ids, "manifest", str(manifest.path), manifest.target_architecture,
                         manifest.target_num_hidden_layers, manifest.target_hidden_size,
                         recorded=_recorded(draft, draft_cfg, manifest))
    if target is None:
        raise InputError(draft / MANIFEST_FILENAME, "<file>", "no manifest", "pass --target TARGET, and verify ranks "
                         "what the draft's config.json can mean, or write the manifest first")
    target_cfg, target_file = load_target_config(target)
    dims, cfg_file = target_dims(target_cfg, str(target_file)), str(draft / "config.json")  # arch, layers, hidden
    try:
        resolved = read_draft_config(draft_cfg, target_cfg, file=cfg_file, fc_in_features=draft_fc_in_features(draft))
    except AmbiguousLayerIds as e:
        return _Declared(e.readings[0].layer_ids, "ambiguous config", cfg_file, *dims, tuple(e.readings))
    return _Declared(resolved.layer_ids, "config.json", cfg_file, *dims)


def _recorded(draft: Path, draft_cfg: dict, manifest) -> tuple[tuple[int, ...], str] | None:
    """The layer ids the draft's trainer was given (speculators' config.json, or ``convert``'s ``original_ids``)."""
    target = {"architectures": [manifest.target_architecture], "num_hidden_layers": manifest.target_num_hidden_layers,
              "hidden_size": manifest.target_hidden_size}
    prov, original = manifest.provenance, manifest.provenance.get("original_ids")
    if prov.get("convention") == CONVENTION_VLLM and isinstance(original, list) and original and all(
            type(i) is int for i in original):
        cfg = {"speculators_model_type": "eagle3", IDS_KEY: original}
        where = f"{manifest.path}: provenance.original_ids"
    elif SpeculatorsFormat.detect(draft_cfg):
        cfg, where = draft_cfg, f"{draft / 'config.json'}: {IDS_KEY}"
    else:
        return None
    try:
        resolved = SpeculatorsFormat.layer_ids(cfg, target, where, fc_in_features=draft_fc_in_features(draft))
    except InputError:  # a record that does not read names nothing
        return None
    return None if resolved.provenance.get("inferred") else (resolved.layer_ids, where)


def _decide(report: VerifyReport) -> None:
    """OK when the declared wiring (or one reading) leads every other by the margin, else FAIL or AMBIGUOUS (exit 3)."""
    if report.readings:  # the reading whose wiring leads every other by the margin is the trained one
        by_ids = {c.layer_ids: c for c in report.candidates.candidates if c.layer_ids is not None}
        built = sorted(((r, by_ids[tuple(r.layer_ids)]) for r in report.readings if tuple(r.layer_ids) in by_ids),
                       key=lambda rc: -rc[1].top1)
        report.ambiguous = True  # until a lead decides it
        if len(built) < 2:
            report.summary = ("the readings of the config's ids cannot be built from the stored tensors; fix: verify "
                              "with samples stored with every layer")
            return
        (best, c1), (_, c2) = built[:2]
        lead, ids = c1.top1 - c2.top1, ",".join(str(i) for i in best.layer_ids)
        if c1.positions and lead >= report.margin:
            report.ok, report.ambiguous = True, False
            report.summary = (f"the draft was trained on layer ids {list(best.layer_ids)} ({'; '.join(best.who)}): "
                              f"top-1 {c1.top1:.3f}, {lead:.3f} ahead of the next reading ({c2.top1:.3f}). Fix: write "
                              f"it down with `sglang-eagle3-capture manifest write {report.draft_dir} "
                              f"--layer-ids={ids} --target TARGET`")
        else:
            report.summary = (f"the readings are not told apart by {report.margin}: top-1 {c1.top1:.3f} vs "
                              f"{c2.top1:.3f}; verify with more samples, or samples stored with every layer")
        return
    m = report.candidates.manifest
    best = max((c for c in report.candidates.candidates if c is not m and not c.is_reference), key=lambda c: c.top1,
               default=None)
    if report.contradiction:
        report.summary = (f"{report.contradiction}; fix: write the manifest with the ids the draft was trained on, or "
                          "verify with samples that name their stored layers (a legacy data_config.json) to settle "
                          "which is right")
        return
    report.ambiguous = True  # until a lead decides it
    if m is None:
        report.summary = (f"the manifest's wiring {list(report.manifest_ids)} cannot be built from the stored tensors: "
                          f"{report.candidates.manifest_problem}; fix: verify with data that stores those layers")
    elif best is None:
        report.summary = ("no other wiring could be built from the stored tensors to compare with; fix: verify with "
                          "data that stores more layers")
    elif m.positions == 0:
        report.summary = ("no scored positions (empty loss masks or sequences shorter than 3 tokens); fix: verify with "
                          "samples that have scored positions")
    elif abs(m.top1 - best.top1) < report.margin:
        report.summary = (f"the manifest's wiring and {best.name} are not told apart by {report.margin}: top-1 "
                          f"{m.top1:.3f} vs {best.top1:.3f}; fix: verify with more samples")
    else:
        lead = m.top1 - best.top1
        report.ambiguous, report.ok = False, lead >= report.margin
        report.summary = (f"the manifest's wiring is best: top-1 {m.top1:.3f}, {lead:.3f} ahead of the next wiring "
                          f"({best.name}: {best.top1:.3f}); margin required {report.margin}" if report.ok else
                          f"the manifest's wiring is NOT best by {report.margin}: manifest top-1 {m.top1:.3f}, "
                          f"best other {best.name}: {best.top1:.3f}")
