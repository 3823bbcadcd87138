"""Candidate wirings for ``verify``: every fc input that can be built from a sample's stored tensors (a stored
chunk, the embedding lookup, or zeros per fc chunk; a zero chunk makes a *reference*, not a wiring an engine feeds).
docs/troubleshooting.md (section 2) shows them ranked."""

from __future__ import annotations

from dataclasses import dataclass, field
from itertools import combinations
from math import comb
from typing import Any, NamedTuple, Sequence

from ..core.layer_ids import EMBEDDING_LAYER_ID, FINAL_NORM


@dataclass(frozen=True)
class Source:
    kind: str  # "chunk" (stored tensor ``index``), "embedding" or "zeros"
    index: int = -1


@dataclass
class Candidate:
    names: list[str]
    sources: tuple[Source, ...]
    layer_ids: tuple[int | None, ...] | None = None
    positions: int = 0
    correct_top1: int = 0
    correct_topk: int = 0

    is_reference = property(lambda self: any(s.kind == "zeros" for s in self.sources))
    name = property(lambda self: " = ".join(self.names))
    top1 = property(lambda self: self.correct_top1 / self.positions if self.positions else 0.0)
    topk = property(lambda self: self.correct_topk / self.positions if self.positions else 0.0)


@dataclass
class CandidateSet:
    candidates: list[Candidate] = field(default_factory=list)
    manifest: Candidate | None = None
    notes: list[str] = field(default_factory=list)
    manifest_problem: str = ""
    aliases: dict = field(default_factory=dict)  # stored chunk index -> the earlier chunk it is an exact copy of
    unbuilt: dict = field(default_factory=dict)  # (layer ids, why) -> the wirings that cannot be built, for that why

    @property
    def unbuildable(self) -> list[str]:
        return [f"{' = '.join(names)}: {why}" for (_, why), names in self.unbuilt.items()]

    def add(self, name: str, sources: Sequence[Source] | None, layer_ids=None, why: str = "") -> Candidate | None:
        """Add, or merge into the candidate with the same sources; ``None`` sources: unbuildable, for ``why``."""
        if sources is None:
            self.unbuilt.setdefault((None if layer_ids is None else tuple(layer_ids), why), []).append(name)
            return None
        sources = tuple(Source("chunk", self.aliases.get(s.index, s.index)) if s.kind == "chunk" else s
                        for s in sources)
        c = next((c for c in self.candidates if c.sources == sources), None)
        if c is None:
            c = Candidate([name], sources, None if layer_ids is None else tuple(layer_ids))
            self.candidates.append(c)
        elif name not in c.names:
            c.names.append(name)
        return c


def chunk_identities(layer_ids_from_data: Sequence[int | None], embedding_chunks: Sequence[int]) -> tuple[list, list]:
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


class Labels(NamedTuple):
    ids: list  # layer id per stored chunk, ``None`` unknown
    notes: list[str]
    contradiction: str = ""  # the draft's training record names other fc inputs than the manifest


def label_fc_inputs(ids: Sequence[int | None], fc_chunks: Sequence[int], declared: Sequence[int | str],
                    recorded: tuple[Sequence[int], str] | None, data_ids: Sequence[int | None]) -> Labels:
    """Where the data names no stored tensor: the fc chunks by ``recorded`` (the trainer's ids), else ``declared``."""
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
    labelled = [names[list(fc_chunks).index(i)] if lid is None and i in fc_chunks else lid for i, lid in enumerate(out)]
    known = [i for i in labelled if i is not None]
    if any(labelled[i] != lid for i, lid in zip(fc_chunks, names)) or len(set(known)) != len(known):
        notes.append(f"those ids do not fit the stored tensors the data names ({layer_label_list(out)}); the "
                     "unnamed tensors stay unnamed")
        labelled = out
    return Labels(labelled, notes, contradiction)


def layer_label(lid: Any) -> str:
    return "?" if lid is None else "-1 (embedding)" if lid == EMBEDDING_LAYER_ID else str(lid)


def layer_label_list(ids: Sequence[int | None]) -> str:
    return "[" + ", ".join(map(layer_label, ids)) + "]"


def _by_layer(layer_ids: Sequence[int], chunk_ids: Sequence[int | None]) -> tuple[list[Source] | None, str]:
    missing = [lid for lid in layer_ids if lid not in chunk_ids and lid != EMBEDDING_LAYER_ID]
    if missing:
        return None, f"layer {missing[0]} is not stored (the stored tensors are layers {layer_label_list(chunk_ids)})"
    return [Source("chunk", chunk_ids.index(lid)) if lid in chunk_ids else Source("embedding") for lid in layer_ids], ""


def build_candidates(*, manifest_ids: Sequence[int], num_layers: int, stock: Sequence[tuple[str, Sequence[int]]],
                     chunk_ids: Sequence[int | None], fc_chunks: Sequence[int], max_combinations: int = 64,
                     aliases: dict[int, int] | None = None) -> CandidateSet:
    """Every candidate wiring for a K-chunk fc: named ones, shifted and swapped variants, K-choices, references."""
    k, n_chunks = len(manifest_ids), len(chunk_ids)
    cs = CandidateSet(aliases=dict(aliases or {}))

    def by_ids(name: str, ids: Sequence) -> None:
        src, why = _by_layer(ids, chunk_ids) if len(ids) == k else (
            None, f"feeds {len(ids)} tensors to a {k}-chunk fc (SGLang fails at startup)")
        cs.add(f"{name} {list(ids)}", src, ids, why)

    def stored(name: str, chunks: Sequence[int]) -> None:
        cs.add(name, [Source("chunk", i) for i in chunks], [chunk_ids[i] for i in chunks])

    m_sources, cs.manifest_problem = _by_layer(manifest_ids, chunk_ids)
    cs.manifest = cs.add(f"manifest {list(manifest_ids)}", m_sources, manifest_ids, cs.manifest_problem)
    if len(fc_chunks) == k:
        stored("training pipeline's fc input", fc_chunks)
    else:
        cs.notes.append(f"the training pipeline's fc input has {len(fc_chunks)} tensors but the fc takes {k}")
    for name, fed in stock:
        by_ids(name, fed)
    last = num_layers - 1  # the other meaning of "the last state": the final norm's input or its output
    other = [{FINAL_NORM: last, last: FINAL_NORM}.get(i, i) for i in manifest_ids]
    if other != list(manifest_ids) and len(set(other)) == k:
        by_ids("manifest, pre- and post-norm swapped", other)
    for d in () if FINAL_NORM in manifest_ids else (1, -1):  # no layer is one away from the final norm's output
        shifted = [i + d for i in manifest_ids]
        if all(EMBEDDING_LAYER_ID <= i < num_layers for i in shifted):
            by_ids(f"manifest shifted by {d:+d}", shifted)
        moved = [i + d for i in fc_chunks]
        if len(moved) == k and all(0 <= i < n_chunks for i in moved):
            stored(f"stored order shifted by {d:+d}", moved)
    if m_sources is not None and EMBEDDING_LAYER_ID in manifest_ids:
        cs.add("manifest, embedding slot zeroed",
               [Source("zeros") if lid == EMBEDDING_LAYER_ID else s for lid, s in zip(manifest_ids, m_sources)])
    elif m_sources is not None:
        cs.add("embedding first, then the manifest's first K-1", [Source("embedding"), *m_sources[:-1]],
               [EMBEDDING_LAYER_ID, *manifest_ids[:-1]])
    pool = [Source("embedding")] * (EMBEDDING_LAYER_ID not in chunk_ids) + [
        Source("chunk", i) for i in range(n_chunks) if i not in cs.aliases]
    total = comb(len(pool), k)
    if total > max_combinations:
        cs.notes.append(f"{total} ascending choices of {k} stored tensors exceed "
                        f"--max-combinations {max_combinations}; only the named wirings were evaluated")
    else:
        for combo in combinations(pool, k):
            cs.add("stored[" + ",".join("E" if s.kind == "embedding" else str(s.index) for s in combo) + "]", combo)
    cs.add("all zeros (tokens only)", [Source("zeros")] * k)
    return cs


def copies(samples: Sequence[Any]) -> dict[int, int]:
    """``{j: i}`` for every stored chunk ``j`` that equals an earlier chunk ``i`` exactly in every sample."""
    out: dict[int, int] = {}
    for j in range(len(samples[0].chunks)):
        i = next((i for i in range(j) if i not in out and all(s.chunks[i].equal(s.chunks[j]) for s in samples)), None)
        if i is not None:
            out[j] = i
    return out


def describe_sources(c: Candidate, names: Sequence[str]) -> list[str]:
    return [names[s.index] if s.kind == "chunk" else "embed(input_ids)" if s.kind == "embedding" else "zeros"
            for s in c.sources]
