"""Candidate wirings for ``verify``: every fc input that can be built from a sample's stored tensors.

A wiring is a tuple of :class:`Source` (one per fc chunk): a stored chunk, the embedding lookup, or zeros. Tried:
the manifest's ids, the training pipeline's fc input, each stock reading, the ids and the stored order shifted by
one, with and without the embedding, every ascending choice of K stored tensors (capped), and all zeros. A zero chunk
makes a *reference* (how much the draft uses that input), not a wiring an engine feeds. A stored tensor that exactly
copies an earlier one (speculators stores the last layer twice when the fc takes it) is read as that one."""

from __future__ import annotations

from dataclasses import dataclass, field
from itertools import combinations
from math import comb
from typing import Any, Sequence

from ..core.layer_ids import EMBEDDING_LAYER_ID, FINAL_NORM


@dataclass(frozen=True)
class Source:
    """One fc chunk: ``kind`` is ``"chunk"`` (stored tensor ``index``), ``"embedding"`` or ``"zeros"``."""

    kind: str
    index: int = -1


@dataclass
class Candidate:
    """A named wiring and, after evaluation, its counts."""

    names: list[str]
    sources: tuple[Source, ...]
    layer_ids: tuple[int | None, ...] | None = None
    positions: int = 0
    correct_top1: int = 0
    correct_topk: int = 0

    @property
    def is_reference(self) -> bool:
        """True when a chunk is zeros: a measure of how much the draft uses its input, not a wiring any engine feeds."""
        return any(s.kind == "zeros" for s in self.sources)

    @property
    def name(self) -> str:
        return " = ".join(self.names)

    @property
    def top1(self) -> float:
        return self.correct_top1 / self.positions if self.positions else 0.0

    @property
    def topk(self) -> float:
        return self.correct_topk / self.positions if self.positions else 0.0


@dataclass
class CandidateSet:
    """The candidates, which one is the manifest's, and the wirings that could not be built."""

    candidates: list[Candidate] = field(default_factory=list)
    manifest: Candidate | None = None
    unbuildable: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    manifest_problem: str = ""
    _unbuilt: dict = field(default_factory=dict, repr=False)
    aliases: dict = field(default_factory=dict)  # stored chunk index -> the earlier chunk it is an exact copy of

    def add(self, name: str, sources: Sequence[Source] | None, layer_ids=None, why: str = "") -> Candidate | None:
        """Add, or merge into a candidate with the same sources; ``None`` sources = unbuildable."""
        if sources is None:
            key = f"{list(layer_ids) if layer_ids is not None else ''}|{why}"
            if key in self._unbuilt:  # same ids, same reason: one line naming every wiring
                i = self._unbuilt[key]
                head, reason = self.unbuildable[i].split(": ", 1)
                self.unbuildable[i] = f"{head} = {name}: {reason}"
            else:
                self._unbuilt[key] = len(self.unbuildable)
                self.unbuildable.append(f"{name}: {why}")
            return None
        sources = tuple(Source("chunk", self.aliases[s.index]) if s.kind == "chunk" and s.index in self.aliases
                        else s for s in sources)
        for c in self.candidates:
            if c.sources == sources:
                if name not in c.names:
                    c.names.append(name)
                return c
        c = Candidate([name], sources, None if layer_ids is None else tuple(layer_ids))
        self.candidates.append(c)
        return c


def chunk_identities(layer_ids_from_data: Sequence[int | None],
                     embedding_chunks: Sequence[int]) -> tuple[list, list[str]]:
    """Layer id of each stored chunk, trusting the data's ids only where the embedding check agrees."""
    ids, notes = list(layer_ids_from_data), []
    for i, lid in enumerate(ids):
        if lid == EMBEDDING_LAYER_ID and i not in embedding_chunks:
            notes.append(f"stored tensor {i} is labelled layer -1 (embedding) by the data, but it is NOT the "
                         "embedding lookup of the input ids; its label is ignored")
            ids[i] = None
    for i in embedding_chunks:
        if ids[i] not in (None, EMBEDDING_LAYER_ID):
            notes.append(f"stored tensor {i} is labelled layer {ids[i]} by the data, but it equals the embedding "
                         "lookup of the input ids exactly: it is the embedding output (layer -1)")
        ids[i] = EMBEDDING_LAYER_ID
    return ids, notes


@dataclass(frozen=True)
class Labels:
    """Layer ids of the stored chunks (``None`` unknown), the notes saying where they came from, and, when the draft's
    training record names other fc inputs than the manifest, that contradiction (one sentence)."""

    ids: list
    notes: list[str]
    contradiction: str = ""


def label_fc_inputs(ids: Sequence[int | None], fc_chunks: Sequence[int], declared: Sequence[int | str],
                    recorded: tuple[Sequence[int], str] | None, data_ids: Sequence[int | None]) -> Labels:
    """``ids`` with the fc chunks named when the data names none: by ``recorded`` (the ids the draft's trainer was
    given) when there is such a record, else by ``declared`` (an assumption, said in a note). A record that differs
    from ``declared`` is the contradiction. Data that names its tensors is taken as it is."""
    out = list(ids)
    if any(i is not None for i in data_ids) or all(out[i] is not None for i in fc_chunks):
        return Labels(out, [])
    names, notes, contradiction = declared, [], ""
    if recorded is not None and len(recorded[0]) == len(fc_chunks):
        names, where = recorded
        notes.append(f"the data does not name its stored layers; the training pipeline's fc input is read as the "
                     f"layer ids its training record names: {list(names)} ({where})")
        if list(names) != list(declared):
            contradiction = (f"the manifest's layer_ids {list(declared)} are not the {list(names)} the draft's "
                             f"training record names ({where}), the layers its training data stored")
    else:
        notes.append("the data does not name its stored layers, nor does a training record of the draft; the "
                     f"manifest's ids {list(declared)} are assumed to be the tensors the training pipeline fed the fc")
    if len(names) != len(fc_chunks):
        return Labels(out, notes, contradiction)
    labelled = list(out)
    for i, lid in zip(fc_chunks, names):
        if labelled[i] is None:
            labelled[i] = lid
    known = [i for i in labelled if i is not None]
    if any(labelled[i] != lid for i, lid in zip(fc_chunks, names)) or len(set(known)) != len(known):
        notes.append(f"those ids do not fit the stored tensors the data names ({layer_label_list(out)}); the "
                     "unnamed tensors stay unnamed")
        labelled = out
    return Labels(labelled, notes, contradiction)


def layer_label_list(ids: Sequence[int | None]) -> str:
    """``[-1 (embedding), ?, 4]``."""
    return "[" + ", ".join(layer_label(i) for i in ids) + "]"


def _by_layer(layer_ids: Sequence[int], chunk_ids: Sequence[int | None]) -> tuple[list[Source] | None, str]:
    out = []
    for lid in layer_ids:
        if lid in chunk_ids:
            out.append(Source("chunk", chunk_ids.index(lid)))
        elif lid == EMBEDDING_LAYER_ID:
            out.append(Source("embedding"))
        else:
            return None, f"layer {lid} is not stored (the stored tensors are layers {layer_label_list(chunk_ids)})"
    return out, ""


def build_candidates(*, manifest_ids: Sequence[int], num_layers: int, stock: Sequence[tuple[str, Sequence[int]]],
                     chunk_ids: Sequence[int | None], fc_chunks: Sequence[int], max_combinations: int = 64,
                     aliases: dict[int, int] | None = None) -> CandidateSet:
    """All candidate wirings for a K-chunk fc (K = ``len(manifest_ids)``); ``aliases``: :func:`copies`."""
    k, n_chunks = len(manifest_ids), len(chunk_ids)
    cs = CandidateSet(aliases=dict(aliases or {}))
    m_sources, why = _by_layer(manifest_ids, chunk_ids)
    cs.manifest = cs.add(f"manifest {list(manifest_ids)}", m_sources, manifest_ids, why)
    cs.manifest_problem = why if cs.manifest is None else ""
    if len(fc_chunks) == k:
        cs.add("training pipeline's fc input", [Source("chunk", i) for i in fc_chunks],
               [chunk_ids[i] for i in fc_chunks])
    else:
        cs.notes.append(f"the training pipeline's fc input has {len(fc_chunks)} tensors but the fc takes {k}")
    for name, fed in stock:
        src, why = (_by_layer(fed, chunk_ids) if len(fed) == k else
                    (None, f"feeds {len(fed)} tensors to a {k}-chunk fc (SGLang fails at startup)"))
        cs.add(f"{name} {list(fed)}", src, fed, why)
    last = num_layers - 1  # the other meaning of "the last state": the final norm's input or its output
    swap = {FINAL_NORM: last, last: FINAL_NORM}
    if FINAL_NORM in manifest_ids or last in manifest_ids:
        other = [swap.get(i, i) for i in manifest_ids]
        if len(set(other)) == k:
            src, why = _by_layer(other, chunk_ids)
            cs.add(f"manifest, pre- and post-norm swapped {other}", src, other, why)
    for d in (1, -1):
        if FINAL_NORM in manifest_ids:
            break  # no layer is one away from the final norm's output
        shifted = [i + d for i in manifest_ids]
        if all(EMBEDDING_LAYER_ID <= i < num_layers for i in shifted):
            src, why = _by_layer(shifted, chunk_ids)
            cs.add(f"manifest shifted by {d:+d} {shifted}", src, shifted, why)
        stored = [i + d for i in fc_chunks]
        if len(stored) == k and all(0 <= i < n_chunks for i in stored):
            cs.add(f"stored order shifted by {d:+d}", [Source("chunk", i) for i in stored],
                   [chunk_ids[i] for i in stored])
    if m_sources is not None:
        emb = [j for j, lid in enumerate(manifest_ids) if lid == EMBEDDING_LAYER_ID]
        if emb:
            cs.add("manifest, embedding slot zeroed",
                   [Source("zeros") if j in emb else s for j, s in enumerate(m_sources)])
        else:
            cs.add("embedding first, then the manifest's first K-1", [Source("embedding")] + list(m_sources[:-1]),
                   [EMBEDDING_LAYER_ID] + list(manifest_ids[:-1]))
    pool = [Source("chunk", i) for i in range(n_chunks) if i not in cs.aliases]
    if EMBEDDING_LAYER_ID not in chunk_ids:
        pool.insert(0, Source("embedding"))
    total = comb(len(pool), k)
    if total <= max_combinations:
        for combo in combinations(pool, k):
            labels = ["E" if s.kind == "embedding" else str(s.index) for s in combo]
            cs.add(f"stored[{','.join(labels)}]", combo)
    else:
        cs.notes.append(f"{total} ascending choices of {k} stored tensors exceed "
                        f"--max-combinations {max_combinations}; only the named wirings were evaluated")
    cs.add("all zeros (tokens only)", [Source("zeros")] * k)
    return cs


def copies(samples: Sequence[Any]) -> dict[int, int]:
    """``{j: i}`` for every stored chunk ``j`` that equals an earlier chunk ``i`` exactly in every sample."""
    import torch

    out: dict[int, int] = {}
    for j in range(len(samples[0].chunks)):
        i = next((i for i in range(j) if i not in out and all(torch.equal(s.chunks[i], s.chunks[j]) for s in samples)),
                 None)
        if i is not None:
            out[j] = i
    return out


def describe_sources(c: Candidate, names: Sequence[str]) -> list[str]:
    """Labels of a candidate's sources (``hidden_states[0]``, ``embed(input_ids)``, ``zeros``)."""
    return [names[s.index] if s.kind == "chunk" else "embed(input_ids)" if s.kind == "embedding" else "zeros"
            for s in c.sources]


def layer_label(lid: Any) -> str:
    """``-1 (embedding)``, ``k`` or ``?``."""
    return "?" if lid is None else "-1 (embedding)" if lid == EMBEDDING_LAYER_ID else str(lid)
