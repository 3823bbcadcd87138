"""``verify``: the draft's teacher-forced accuracy on its training samples under every buildable wiring.

The draft runs standalone (:class:`.model.Eagle3Draft`) in fp32, paired as EAGLE trains it (speculators
``shift_batch``). Samples stream through in right-padded batches so memory stays bounded; every stored tensor is
also compared exactly with the embedding lookup of the input ids. For the manifest's wiring, :mod:`.vocab_gap`
counts the scored tokens outside the draft vocabulary. docs/plan.md describes the figures."""

from __future__ import annotations

import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Sequence

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
from .candidates import (
    Candidate,
    CandidateSet,
    build_candidates,
    chunk_identities,
    copies,
    describe_sources,
    label_fc_inputs,
)
from .formats import CONVENTION_VLLM, SpeculatorsFormat, load_draft_config, read_draft_config
from .norm_state import POST_NORM, NormState, NormStates
from .readings import engine_capture, releases_label, stock_by_release
from .sample_schema import FP8
from .samples import HS_SAFETENSORS, LEGACY_DATA_CONFIG, expand_data_paths, load_sample
from .vocab_gap import TargetHead, VocabGap

DEFAULT_MARGIN = 0.05


@dataclass
class VerifyReport:
    """What ``verify`` found; :attr:`ok` decides the exit status."""

    draft_dir: str
    manifest_ids: tuple[int, ...]
    files: int = 0
    positions: int = 0
    top_k: int = 5
    embedding_source: str = ""
    embedding_check: dict = field(default_factory=dict)
    candidates: CandidateSet | None = None
    chunk_names: tuple[str, ...] = ()
    chunk_ids: list = field(default_factory=list)
    layout: str = ""
    throughput: dict = field(default_factory=dict)
    margin: float = DEFAULT_MARGIN
    declared_by: str = "manifest"  # what stated the wiring checked: "manifest", "config.json", or "ambiguous config"
    readings: tuple = ()  # the config's possible meanings when it is ambiguous (formats.Reading)
    norm_states: list = field(default_factory=list)  # per stored tensor: pre- or post-norm (doctor/norm_state.py)
    vocabulary: VocabGap | None = None  # the manifest wiring's out-of-vocabulary targets (doctor/vocab_gap.py)
    contradiction: str = ""  # the draft's training record names other fc inputs than the manifest (candidates.Labels)
    ok: bool = False
    ambiguous: bool = False
    summary: str = ""

    def ranked(self) -> list[Candidate]:
        """Candidates, best top-1 first (ties: top-k)."""
        return sorted(self.candidates.candidates, key=lambda c: (-c.top1, -c.topk))

    def to_dict(self) -> dict:
        cs = self.candidates
        return {
            "draft_dir": self.draft_dir, "manifest_layer_ids": list(self.manifest_ids), "layout": self.layout,
            "files": self.files, "positions": self.positions, "top_k": self.top_k,
            "embedding_source": self.embedding_source, "embedding_check": self.embedding_check,
            "stored_tensors": [{"name": n, "layer_id": i} for n, i in zip(self.chunk_names, self.chunk_ids)],
            "wirings": [{"name": c.name, "sources": describe_sources(c, self.chunk_names),
                         "layer_ids": None if c.layer_ids is None else list(c.layer_ids), "top1": c.top1,
                         "topk": c.topk, "positions": c.positions, "is_manifest": c is cs.manifest,
                         "reference": c.is_reference}
                        for c in self.ranked()],
            "unbuildable": cs.unbuildable, "notes": cs.notes, "margin": self.margin,
            "throughput": self.throughput, "declared_by": self.declared_by,
            "readings": [{"layer_ids": list(r.layer_ids), "trained_by": list(r.who)} for r in self.readings],
            "norm_states": [n.to_dict() for n in self.norm_states],
            "vocabulary": None if self.vocabulary is None else self.vocabulary.to_dict(),
            "contradiction": self.contradiction or None,
            "ok": self.ok, "ambiguous": self.ambiguous, "summary": self.summary,
        }


def load_target_tensor(target_dir: str | Path, suffix: str, *, with_file: bool = False, missing_ok: bool = False):
    """One tensor whose name ends with ``suffix`` from a target's safetensors (``with_file``: also its file;
    ``missing_ok``: ``None`` when no tensor has that name, where a checkpoint that does not read still raises).
    Only that tensor is read (``safe_open``), so this is cheap even for a sharded 671B checkpoint."""
    from safetensors import safe_open

    index = tensor_index(target_dir)  # headers checked (dtype, shape, offsets) before safetensors opens the file
    names = sorted((n for n in index if n == suffix or n.endswith("." + suffix)), key=len)
    if not names:
        if missing_ok:
            return None
        raise InputError(target_dir, f"*{suffix}", "not found in the target's safetensors",
                           "pass the target model directory (with its weights) as --target")
    info = index[names[0]]
    try:
        with safe_open(str(info.file), framework="pt", device="cpu") as f:
            tensor = f.get_tensor(names[0])
        return (tensor, info.file) if with_file else tensor
    except Exception as e:  # noqa: BLE001 - safetensors' own error type: the file changed, or its data is bad
        why = brief(str(e).splitlines()[0] if str(e) else type(e).__name__, 160)
        raise InputError(info.file, names[0], f"cannot load ({why})",
                         "re-export or re-download the target checkpoint") from None


def _target_dir(target: str | Path) -> Path:
    fix = "pass the target model directory (or its config.json) as --target"
    return Path(target) if is_directory(target, fix=fix) else Path(target).parent


def load_draft(draft_dir: str | Path, target: str | Path | None, dtype=None):
    """The draft as :class:`Eagle3Draft`, with the target's embedding (and lm_head if needed) when given."""
    from .model import DraftConfig, Eagle3Draft  # torch

    embed = head = target_where = None
    if target is not None:
        tdir = _target_dir(target)
        embed, embed_file = load_target_tensor(tdir, "embed_tokens.weight", with_file=True)
        cfg_path = Path(draft_dir) / "config.json"
        cfg = DraftConfig.from_dict(load_draft_config(cfg_path), where=str(cfg_path))
        target_where = f"{embed_file}: tensor '*embed_tokens.weight'"
        if cfg.lm_head_from_target:
            head, head_file = load_target_tensor(tdir, "lm_head.weight", with_file=True)
            target_where += f" / {head_file}: tensor '*lm_head.weight'"
    return Eagle3Draft.from_pretrained(draft_dir, target_embed=embed, target_lm_head=head, target_where=target_where,
                                       dtype=dtype)


def _post_norm_identities(ids: list, found: list[NormState], n_layers: int) -> tuple[list, list[str]]:
    """``ids`` with every stored tensor ``found`` reads as post-norm named ``final_norm`` (including one the data
    calls layer N-1, the pre-norm state: the data's label is then wrong, and said so)."""
    out, notes = list(ids), []
    for i, state in enumerate(found):
        if state.reading != POST_NORM or out[i] not in (None, n_layers - 1):
            continue
        if out[i] == n_layers - 1:
            notes.append(f"{state.name} is labelled layer {n_layers - 1} (pre-norm) by the data, but it is the final "
                         f"norm's output ({state.unit_fraction:.1%} of {state.tokens} tokens have unit RMS divided by "
                         "model.norm.weight): read as final_norm")
        out[i] = FINAL_NORM
    return out, notes


def _norm_notes(found: list[NormState], sample) -> list[str]:
    """One note per stored tensor that is the final norm's output, or the target state's reading."""
    notes = [f"{n.name} is the final norm's output (post-norm, layer id \"final_norm\"): {n.unit_fraction:.1%} of "
             f"{n.tokens} tokens have unit RMS divided by the target's model.norm.weight" for n in found
             if n.reading == POST_NORM]
    if sample.target_chunk is not None and found:
        t = found[sample.target_chunk]
        notes.append(f"the target state {t.name} is {t.reading} ({t.unit_fraction:.1%} of {t.tokens} tokens have unit "
                     "RMS divided by model.norm.weight; post-norm >= 99%, pre-norm <= 50%)")
    return notes


def _batches(paths: Sequence[Path], batch_size: int, progress: bool):
    if progress:
        from tqdm import tqdm

        paths = tqdm(paths, total=len(paths), desc="verify", unit="file", file=sys.stderr, dynamic_ncols=True)
    batch = []
    for p in paths:
        batch.append(load_sample(p))
        if len(batch) == batch_size:
            yield batch
            batch = []
    if batch:
        yield batch


NO_MASK_FIX = ("pass speculators' data directory (its datasets table holds each sample's loss_mask beside "
               "hidden_states/), or samples that carry their loss_mask")
MIN_TOKENS = 3  # a sample scores position p on token p + 2


def check_batch(batch, first, declared: "_Declared", vocab: int) -> None:
    """Every check a batch passes before the draft reads it (``verify``, ``plan``, ``--write-expected``)."""
    for s in batch:
        ids = s.input_ids
        if ids.numel() and (int(ids.min()) < 0 or int(ids.max()) >= vocab):
            bad = ids[(ids < 0) | (ids >= vocab)].unique()[:5].tolist()
            key = "token_ids" if s.layout == HS_SAFETENSORS else "input_ids"
            raise InputError(s.path, key, f"ids {bad} outside the draft's vocabulary [0, {vocab})",
                             "verify with samples tokenized for this draft's target")
    head = first if first is not None else batch[0]
    if head.hidden_size != declared.hidden_size:
        raise InputError(head.path, None, f"stored tensors are {head.hidden_size} wide but {declared.source} says "
                         f"the target's hidden size is {declared.hidden_size}", "pass samples stored from the target "
                         "the draft was trained against (or --target with that target)")
    n_chunks = len(head.chunks)
    for s in batch:
        if s.layout != head.layout or len(s.chunks) != n_chunks or s.hidden_size != head.hidden_size:
            raise InputError(s.path, None, f"{s.layout} with {len(s.chunks)} stored tensors of width {s.hidden_size}, "
                             f"but {head.path} is {head.layout} with {n_chunks} of width {head.hidden_size}",
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
    """Per sample, the stored chunks that equal ``embed[input_ids]`` exactly (a float32 chunk also as fp8 stored
    it, since the reader upcasts fp8 hidden states)."""
    import torch

    fp8 = [getattr(torch, name) for name in FP8]
    out = []
    for s in samples:
        ref = embed[s.input_ids]
        out.append([i for i, c in enumerate(s.chunks) if torch.equal(c, ref.to(c.dtype)) or (
            c.dtype == torch.float32 and any(torch.equal(c, ref.to(t).float()) for t in fp8))])
    return out


def _evaluate(model, samples, candidates: list[Candidate], top_k: int, gap: tuple[Candidate, VocabGap] | None = None
              ) -> float:
    """Add this batch's counts to every candidate; returns seconds spent in draft forwards."""
    import torch

    b, t = len(samples), max(s.seq_len for s in samples)
    if t < 3:
        return 0.0
    h = samples[0].hidden_size
    ids = torch.zeros(b, t, dtype=torch.long)
    valid = torch.zeros(b, t, dtype=torch.bool)
    stacked = torch.zeros(len(samples[0].chunks), b, t, h)
    for i, s in enumerate(samples):
        n = s.seq_len
        ids[i, :n] = s.input_ids
        valid[i, :n] = True if s.loss_mask is None else s.loss_mask
        for j, c in enumerate(s.chunks):
            stacked[j, i, :n] = c.float()
    lengths = torch.tensor([s.seq_len for s in samples])
    # draft position p (0..t-3) reads aux[p], token p+1; label token p+2 where mask[p+1]
    pos = torch.arange(t - 2)
    scored = valid[:, 1:t - 1] & ((pos[None, :] + 2) < lengths[:, None])
    labels = ids[:, 2:]
    embeds = model.embed_tokens.weight[ids].float()
    spent = 0.0
    with torch.no_grad():
        for c in candidates:
            parts = [stacked[s.index] if s.kind == "chunk" else embeds if s.kind == "embedding"
                     else torch.zeros(b, t, h) for s in c.sources]
            aux = torch.cat(parts, dim=-1)[:, :t - 1]
            start = time.perf_counter()
            logits = model(ids[:, 1:], aux)[:, :t - 2]
            spent += time.perf_counter() - start
            best = logits.topk(min(top_k, logits.shape[-1]), dim=-1).indices
            top = model.to_target_ids(best)
            hit = top == labels[..., None]
            c.positions += int(scored.sum())
            c.correct_top1 += int((hit[..., 0] & scored).sum())
            c.correct_topk += int((hit.any(-1) & scored).sum())
            if gap is not None and c is gap[0]:  # label t+2 comes from the target's state at t+1
                tc = samples[0].target_chunk
                gap[1].add(labels, scored, best[..., 0], top[..., 0],
                           None if tc is None else stacked[tc][:, 1:t - 1])
    return spent


def _check_d2t(draft_dir: Path, d2t, vocab: int) -> None:
    """Every draft id maps to a target id in ``[0, vocab)`` (``target = draft + d2t[draft]``)."""
    import torch

    ids = torch.arange(d2t.shape[0]) + d2t
    bad = ((ids < 0) | (ids >= vocab)).nonzero().flatten()
    if bad.numel():
        j = int(bad[0])
        raise InputError(draft_dir, "d2t", f"maps {bad.numel()} draft ids outside the target vocabulary [0, {vocab}) "
                         f"(draft id {j} -> {int(ids[j])}; d2t holds offsets: target id = draft id + d2t[draft id])",
                         "re-export d2t as offsets (target ids minus arange(draft_vocab_size))")


def _target_head(target: str | Path | None, model, sample, norm_weight, found: list[NormState] | None
                 ) -> tuple[TargetHead | None, str]:
    """The target's head over the draft vocabulary for :class:`VocabGap`, or ``None`` and why it cannot be built.
    The final norm is applied unless the stored target state reads post-norm."""
    if target is None:
        return None, "pass --target TARGET (its lm_head and final norm give the target's argmax over the draft " \
                     "vocabulary)"
    if sample.target_chunk is None:
        return None, "the samples store no target state"
    tdir = _target_dir(target)
    cfg, _ = load_target_config(target)
    text = cfg_get(cfg, "text_config") or {}
    eps = cfg_get(cfg, "rms_norm_eps", cfg_get(text, "rms_norm_eps"))
    post = found is not None and found[sample.target_chunk].reading == POST_NORM
    if eps is None and not post:
        return None, "the target's config.json has no rms_norm_eps for its final norm"
    head = load_target_tensor(tdir, "lm_head.weight", missing_ok=True)
    if head is None:
        if not cfg_get(cfg, "tie_word_embeddings", cfg_get(text, "tie_word_embeddings", False)):
            return None, "the target has no lm_head.weight (and does not tie it to its embedding)"
        head = load_target_tensor(tdir, "embed_tokens.weight")
    import torch

    ids = torch.arange(model.d2t.shape[0]) + model.d2t
    if head.dim() != 2 or head.shape[0] <= int(ids.max()) or head.shape[1] != sample.hidden_size:
        return None, (f"the target's lm_head has shape {list(head.shape)}, not [vocab >= {int(ids.max()) + 1}, "
                      f"{sample.hidden_size}] (the draft's target ids, the samples' hidden size)")
    return TargetHead(head[ids], None if post else norm_weight, float(eps or 0.0)), ""


def verify(draft_dir: str | Path, data: Sequence[str | Path], *, target: str | Path | None = None, top_k: int = 5,
           batch_size: int = 32, margin: float = DEFAULT_MARGIN, max_combinations: int = 64,
           progress: bool = True, dtype=None) -> VerifyReport:
    """Run the draft on ``data`` under every buildable wiring (``dtype``: e.g. ``torch.bfloat16`` for a bf16
    checkpoint too large for fp32)."""
    import torch

    cfg_file = Path(draft_dir) / "config.json"
    draft_cfg = load_draft_config(cfg_file)
    declared = _declared(Path(draft_dir), draft_cfg, target)
    paths = expand_data_paths(data)
    model = load_draft(draft_dir, target, dtype)
    n_layers = declared.num_hidden_layers
    family = family_of(declared.architecture)
    if family is None:
        raise InputError(declared.source, "target.architecture", f"{declared.architecture} has no target-family "
                         "entry, so stock SGLang's wirings are unknown", "see docs/families.md")
    named = [(releases_label(v), c) for v, c in reversed(stock_by_release(draft_cfg, n_layers, family=family,
                                                                          file=cfg_file))]
    named += [(r.name, engine_capture(draft_cfg, n_layers, family=family, reader=r, file=cfg_file))
              for r in releases.other_engines()]
    # a crash feeds nothing, and branch outputs (Gemma 3) are no layer's hidden states in the samples: not scored
    stock = [(name, c.fed_layer_ids) for name, c in named if c.problem is None and c.mis_fed is None]
    dropped = [f"not scored: {name} would feed layer ids {list(c.fed_layer_ids)} but fails: {c.problem}"
               for name, c in named if c.problem is not None]
    dropped += [f"not scored: {name}: {c.mis_fed}" for name, c in named if c.mis_fed is not None]
    default = stock_sglang_capture({}, n_layers, family=family)
    if default.mis_fed is None:
        stock.append(("stock default (no ids)", default.fed_layer_ids))
    else:
        dropped.append(f"not scored: stock default (no ids): {default.mis_fed}")
    stock += [(f"reading {i + 1}: {'; '.join(r.who)}", r.layer_ids) for i, r in enumerate(declared.readings)]
    report = VerifyReport(str(draft_dir), declared.layer_ids, top_k=top_k, margin=margin,
                          embedding_source=f"{model.embedding_source} embed_tokens.weight", declared_by=declared.by,
                          readings=declared.readings)
    embed = model.embed_tokens.weight.detach()
    # the final norm's weight tells pre- from post-norm stored states
    norm_weight = None if target is None else load_target_tensor(_target_dir(target), "model.norm.weight")
    states = None
    first, hits_per_chunk, fwd_s, start, unmasked = None, None, 0.0, time.perf_counter(), 0
    vocab = model.embed_tokens.weight.shape[0]
    for batch in _batches(paths, batch_size, progress):
        check_batch(batch, first, declared, vocab)
        if norm_weight is not None:  # a stored tensor that is the final norm's output is layer id final_norm
            if states is None:
                states = NormStates(batch[0].chunk_names, norm_weight)
            for s in batch:
                states.add(s.chunks)
        if first is None:
            first = batch[0]
            hits_per_chunk = [0] * len(first.chunks)
            emb0 = _embedding_hits([first], embed)[0]
            ids, notes = chunk_identities(first.chunk_layer_ids, emb0)
            if states is not None:
                ids, more = _post_norm_identities(ids, states.result(), n_layers)
                notes += more
            labels = label_fc_inputs(ids, first.fc_chunks, declared.layer_ids, declared.recorded, first.chunk_layer_ids)
            ids, report.contradiction = labels.ids, labels.contradiction
            notes += labels.notes
            aliases = copies(batch)
            notes += [f"{first.chunk_names[j]} equals {first.chunk_names[i]} exactly in every sample of the first "
                      f"batch: one tensor stored twice (e.g. the last layer, as an fc input and as the target state); "
                      "wirings that differ only in which copy they read are one wiring" for j, i in aliases.items()]
            cs = build_candidates(manifest_ids=declared.layer_ids, num_layers=n_layers, stock=stock, chunk_ids=ids,
                                  fc_chunks=first.fc_chunks, max_combinations=max_combinations, aliases=aliases)
            cs.notes[:0] = notes
            cs.notes += dropped
            report.candidates, report.chunk_names, report.chunk_ids = cs, first.chunk_names, ids
            report.layout = first.layout
            if cs.manifest is not None:
                _check_d2t(Path(draft_dir), model.d2t, vocab)
                head, why = _target_head(target, model, first, norm_weight, None if states is None else states.result())
                report.vocabulary = VocabGap.of_draft(model.d2t, vocab, head, why)
        unmasked += sum(s.loss_mask is None for s in batch)
        for hits in _embedding_hits(batch, embed):
            for i in hits:
                hits_per_chunk[i] += 1
        report.files += len(batch)
        gap = None if report.vocabulary is None else (report.candidates.manifest, report.vocabulary)
        fwd_s += _evaluate(model, batch, report.candidates.candidates, top_k, gap)
    wall = time.perf_counter() - start
    report.positions = report.candidates.candidates[0].positions if report.candidates.candidates else 0
    report.embedding_check = {
        "reference": report.embedding_source,
        "per_tensor": [{"name": n, "files_equal": h} for n, h in zip(report.chunk_names, hits_per_chunk)],
        "embedding_tensor": next((n for n, h in zip(report.chunk_names, hits_per_chunk) if h == report.files), None)}
    if states is not None:
        report.norm_states = states.result()
        report.candidates.notes.extend(_norm_notes(report.norm_states, first))
    if unmasked:
        report.candidates.notes.append(f"{unmasked} of {report.files} samples carry no loss mask, so every position "
                                       f"of theirs is scored, the prompt's too: {NO_MASK_FIX}")
    n_wirings = len(report.candidates.candidates)
    report.throughput = {"wall_s": round(wall, 3), "draft_forward_s": round(fwd_s, 3), "wirings": n_wirings,
                         "files_per_s": round(report.files / wall, 2) if wall else None,
                         "draft_positions_per_s": round(report.positions * n_wirings / fwd_s) if fwd_s else None,
                         "torch_threads": torch.get_num_threads()}
    _decide(report)
    return report


@dataclass(frozen=True)
class _Declared:
    """The wiring ``verify`` checks: the manifest's, or what config.json reads as; when ambiguous, every reading is
    checked and the first stands in as the declared one."""

    layer_ids: tuple[int, ...]
    by: str
    source: str
    architecture: str
    num_hidden_layers: int
    hidden_size: int
    readings: tuple = ()
    recorded: tuple[tuple[int, ...], str] | None = None  # the training record's ids, and where (_recorded)


def _declared(draft: Path, draft_cfg: dict, target: str | Path | None) -> _Declared:
    manifest = find_manifest(draft)
    if manifest is not None:
        return _Declared(manifest.layer_ids, "manifest", str(manifest.path), manifest.target_architecture,
                         manifest.target_num_hidden_layers, manifest.target_hidden_size,
                         recorded=_recorded(draft, draft_cfg, manifest))
    if target is None:
        raise InputError(draft / MANIFEST_FILENAME, "<file>", "no manifest", "pass --target TARGET, and verify ranks "
                         "what the draft's config.json can mean, or write the manifest first")
    target_cfg, target_file = load_target_config(target)
    arch, n_layers, hidden = target_dims(target_cfg, str(target_file))
    cfg_file = str(draft / "config.json")
    try:
        resolved = read_draft_config(draft_cfg, target_cfg, file=cfg_file, fc_in_features=draft_fc_in_features(draft))
    except AmbiguousLayerIds as e:
        return _Declared(e.readings[0].layer_ids, "ambiguous config", cfg_file, arch, n_layers, hidden,
                         tuple(e.readings))
    return _Declared(resolved.layer_ids, "config.json", cfg_file, arch, n_layers, hidden)


def _recorded(draft: Path, draft_cfg: dict, manifest) -> tuple[tuple[int, ...], str] | None:
    """The layer ids the draft's trainer was given, when recorded apart from the manifest (speculators'
    ``config.json``, or ``convert``'s provenance ``original_ids``); ``None`` when there is none or it does not read."""
    target = {"architectures": [manifest.target_architecture], "num_hidden_layers": manifest.target_num_hidden_layers,
              "hidden_size": manifest.target_hidden_size}
    prov = manifest.provenance
    original = prov.get("original_ids")
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
    return (None if resolved.provenance.get("inferred") else (resolved.layer_ids, where))


def _decide_readings(report: VerifyReport) -> None:
    """An ambiguous config: the reading whose wiring leads every other by the margin is the trained one."""
    by_ids = {c.layer_ids: c for c in report.candidates.candidates if c.layer_ids is not None}
    scored = [(r, by_ids.get(tuple(r.layer_ids))) for r in report.readings]
    built = sorted(((r, c) for r, c in scored if c is not None), key=lambda rc: -rc[1].top1)
    if len(built) < 2:
        report.ambiguous = True
        report.summary = "the readings of the config's ids cannot be built from the stored tensors; fix: verify with " \
                         "samples stored with every layer"
        return
    (best, c1), (_, c2) = built[0], built[1]
    lead = c1.top1 - c2.top1
    if c1.positions and lead >= report.margin:
        report.ok = True
        ids = ",".join(str(i) for i in best.layer_ids)
        report.summary = (f"the draft was trained on layer ids {list(best.layer_ids)} ({'; '.join(best.who)}): top-1 "
                          f"{c1.top1:.3f}, {lead:.3f} ahead of the next reading ({c2.top1:.3f}). Fix: write it down "
                          f"with `sglang-eagle3-capture manifest write {report.draft_dir} --layer-ids={ids} "
                          "--target TARGET`")
    else:
        report.ambiguous = True
        report.summary = (f"the readings are not told apart by {report.margin}: top-1 {c1.top1:.3f} vs {c2.top1:.3f}; "
                          "verify with more samples, or samples stored with every layer")


def _decide(report: VerifyReport) -> None:
    """OK when the manifest's wiring leads every other by the margin; FAIL when another leads it by the margin, or
    the training record names other fc inputs than the manifest; AMBIGUOUS (exit 3) when the data cannot decide."""
    if report.readings:
        return _decide_readings(report)
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
