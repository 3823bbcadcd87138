"""``compare``: what SGLang fed the draft at serving time (a capture dump) against the training samples, row by row
for the same tokens; served chunk ``k`` must best match what training fed fc slot ``k``, by cosine and by norm.
docs/troubleshooting.md section 3 shows the output."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Sequence

from ..core import records
from ..core.errors import InputError, brief
from ..core.userfiles import list_directory, path_kind, read_json_object
from .sample_schema import BATCH, DUMP_FIX, METADATA
from .samples import expand_data_paths, kind_phrase, load_safetensors, load_sample

DEFAULT_MIN_COSINE = 0.999
# Cosine is blind to per-token scale, and an RMSNorm is a per-token scale (times a weight close to uniform): the final
# norm's output and its input are >= 0.996 cosine-similar on the bundled fixtures, while their norms differ by a factor
# 0.58 .. 8.8. A served chunk must also have its training tensor's norm, row by row, within this relative deviation.
MAX_NORM_DEVIATION = 0.01
# Dumped rows are grouped into runs of consecutive positions (one request's tokens). A run from position 0 sees its
# whole context, so any sample with the same tokens is the same computation; a later run does not show the tokens
# before it, so it is used only when it matches this many tokens of exactly one sample.
MIN_LATE_RUN = 8


@dataclass
class ChunkResult:
    index: int
    served_layer_id: int | str | None  # a layer id, "final_norm" included
    expected: int
    mean_cos: list[float]
    min_cos: list[float]
    max_abs_diff: list[float]
    max_norm_dev: list[float]  # max over rows of |log(norm served / norm training)|

    @property
    def best(self) -> int:
        return max(range(len(self.mean_cos)), key=lambda j: self.mean_cos[j])

    def matches(self, min_cosine: float) -> bool:
        """Best match is the expected tensor, with every row's cosine and norm within bounds."""
        return (self.best == self.expected and self.min_cos[self.expected] >= min_cosine
                and self.max_norm_dev[self.expected] <= MAX_NORM_DEVIATION)


@dataclass
class CompareReport:
    dump_files: list[str] = field(default_factory=list)
    dump_layer_ids: list = field(default_factory=list)
    chunk_names: tuple[str, ...] = ()
    chunk_layer_ids: tuple = ()
    rows: int = 0
    skipped_rows: int = 0
    chunks: list[ChunkResult] = field(default_factory=list)
    min_cosine: float = DEFAULT_MIN_COSINE
    notes: list[str] = field(default_factory=list)
    ok: bool = False  # the exit status
    summary: str = ""

    def to_dict(self) -> dict:
        names, layer_ids = self.chunk_names, self.chunk_layer_ids
        return {"dump_files": self.dump_files, "dump_layer_ids": self.dump_layer_ids, "rows_compared": self.rows,
                "rows_skipped": self.skipped_rows, "min_cosine": self.min_cosine,
                "training_tensors": [{"name": n, "layer_id": i} for n, i in zip(names, layer_ids)],
                "served_chunks": [{"index": c.index, "served_layer_id": c.served_layer_id,
                                   "expected": names[c.expected], "best_match": names[c.best],
                                   "match": c.matches(self.min_cosine),
                                   "vs": [{"name": n, "mean_cos": c.mean_cos[j], "min_cos": c.min_cos[j],
                                           "max_abs_diff": c.max_abs_diff[j], "max_norm_deviation": c.max_norm_dev[j]}
                                          for j, n in enumerate(names)]} for c in self.chunks],
                "notes": self.notes, "ok": self.ok, "summary": self.summary}


def read_dump(directory: str | Path) -> list[tuple[Path, dict, dict]]:
    """``(file, tensors, metadata)`` for every dumped batch in ``directory``, sorted by name, every file checked
    (safetensors headers before any data; one position and input id per row, positions >= 0)."""
    d = Path(directory)
    kind = path_kind(d, fix=DUMP_FIX)
    if kind not in ("missing", "directory"):
        raise InputError(d, "--dump", f"is {kind_phrase(kind)}, not a directory", DUMP_FIX)
    names = [] if kind == "missing" else [n for n in list_directory(d, fix=DUMP_FIX)
                                          if n.endswith(".safetensors") and not n.startswith(".")]
    if not names:
        raise InputError(d, None, "no dumped batches (*.safetensors)", f"serve with SGLANG_EAGLE3_CAPTURE_DUMP={d} "
                         "and the sglang-eagle3-capture plugin installed, send a request, then run compare")
    out = []
    for f, meta in ((d / name, (d / name).with_suffix(".json")) for name in names):
        tensors = records.read(BATCH, load_safetensors(f, DUMP_FIX), file=f)  # fp8 read as float32
        tensors = {k: v for k, v in tensors.items() if v is not None}
        t, pos = tensors["aux_hidden_states"].shape[0], tensors["positions"]
        for key in ("positions", "input_ids"):
            if key in tensors and tensors[key].shape[0] != t:
                raise InputError(f, key, f"has {tensors[key].shape[0]} entries, expected {t} (one per row of "
                                 "aux_hidden_states)", DUMP_FIX)
        if pos.numel() and int(pos.min()) < 0:
            raise InputError(f, "positions", f"holds negative positions (min {int(pos.min())})", DUMP_FIX)
        out.append((f, tensors, {} if path_kind(meta) == "missing" else
                    records.read(METADATA, read_json_object(meta, fix=DUMP_FIX), file=meta)))
    return out


def _match_run(ids: list[int], p0: int, samples: list, by_p0: dict) -> tuple[object | None, int]:
    """The sample whose tokens at ``p0..`` equal ``ids`` longest, and that length (0: none or ambiguous). Tied samples
    are interchangeable only if they share every token up to the match's end, which always holds for ``p0 == 0``."""
    if p0 > 0 and len(ids) < MIN_LATE_RUN:
        return None, 0  # a late run this short is never used: no need to look
    if len(ids) >= MIN_LATE_RUN:  # only the samples with the run's first tokens there (a table per p0, built lazily)
        if p0 not in by_p0:
            by_p0[p0] = {}
            for s in samples:
                if len(key := tuple(s.input_ids[p0:p0 + MIN_LATE_RUN].tolist())) == MIN_LATE_RUN:
                    by_p0[p0].setdefault(key, []).append(s)
        samples = by_p0[p0].get(tuple(ids[:MIN_LATE_RUN])) or samples  # else a shorter match may be the best
    best, best_len = [], 0
    for s in samples:
        sid = s.input_ids[p0:p0 + len(ids)].tolist()
        n = next((i for i, (a, b) in enumerate(zip(sid, ids)) if a != b), len(sid))  # tokens in common
        if n > best_len:
            best, best_len = [s], n
        elif n == best_len and n > 0:
            best.append(s)
    end = p0 + best_len
    if not best or p0 > 0 and (len(best) > 1 or best_len < MIN_LATE_RUN) or any(
            not bool((s.input_ids[:end] == best[0].input_ids[:end]).all()) for s in best[1:]):
        return None, 0
    return best[0], best_len


def compare(dump_dir: str | Path, data: Sequence[str | Path], *,
            min_cosine: float = DEFAULT_MIN_COSINE) -> CompareReport:
    import torch

    samples = [load_sample(p) for p in expand_data_paths(data)]
    first, by_p0 = samples[0], {}
    for s in samples[1:]:
        if len(s.chunks) != len(first.chunks) or s.fc_chunks != first.fc_chunks or s.hidden_size != first.hidden_size:
            raise InputError(s.path, None, f"{len(s.chunks)} stored tensors of width {s.hidden_size}, but "
                             f"{first.path} has {len(first.chunks)} of width {first.hidden_size}",
                             "compare one dataset at a time")
    dump = read_dump(dump_dir)
    runs_ids = {tuple(meta["layer_ids"]) for _, _, meta in dump if meta.get("layer_ids") is not None}
    if len(runs_ids) > 1:
        raise InputError(dump_dir, "layer_ids", "its batches say different layer ids "
                         f"({brief(sorted(runs_ids, key=str))}): batches of several server runs",
                         "give each run its own dump directory (or remove the other run's files)")
    h, k = first.hidden_size, len(first.fc_chunks)
    served_ids = next((i for i in runs_ids if len(i) == k), (None,) * k)  # when the dump names one id per chunk
    report = CompareReport(chunk_names=first.chunk_names, chunk_layer_ids=first.chunk_layer_ids, min_cosine=min_cosine)
    served_rows, train_rows = [], []
    for f, tensors, meta in dump:
        aux = tensors["aux_hidden_states"]
        report.dump_files.append(f.name)
        report.dump_layer_ids.append(meta.get("layer_ids"))
        if "input_ids" not in tensors:
            report.notes.append(f"{f.name}: no input_ids (input embeddings were served); skipped")
            continue
        if aux.shape[-1] != k * h:
            raise InputError(f, "aux_hidden_states", f"has shape {list(aux.shape)}, but the training fc input is "
                             f"{k} x {h} = {k * h} wide ({first.path})", "compare with the data the draft was "
                             "trained on (else SGLang fed a different number of hidden states)")
        ids, pos = tensors["input_ids"], tensors["positions"].tolist()
        edges = [0, *(i for i in range(1, len(pos)) if pos[i] != pos[i - 1] + 1), len(pos)] if pos else []
        for a, b in zip(edges, edges[1:]):  # runs of consecutive positions
            s, n = _match_run(ids[a:b].tolist(), pos[a], samples, by_p0)
            report.skipped_rows += (b - a) - n
            if s is not None and n:
                served_rows.append(aux[a:a + n].float().view(n, k, h))
                train_rows.append(torch.stack([c[pos[a]:pos[a] + n].float() for c in s.chunks], dim=1))
    if not served_rows:
        raise InputError(dump_dir, None, f"none of the {report.skipped_rows} dumped rows matches the tokens of any "
                         "training sample given with --data", "serve prompts taken from those samples (their "
                         "input_ids)")
    served, train = torch.cat(served_rows), torch.cat(train_rows)  # [R, K, H], [R, C, H]
    report.rows = served.shape[0]
    cos = torch.nn.functional.cosine_similarity(served[:, :, None, :], train[:, None, :, :], dim=-1)  # [R, K, C]
    tiny = torch.finfo(torch.float32).tiny
    ratio = served.norm(dim=-1)[:, :, None].clamp_min(tiny) / train.norm(dim=-1)[:, None, :].clamp_min(tiny)
    norm_dev = ratio.log().abs().amax(dim=0)  # [K, C]
    for j in range(k):
        diff = (served[:, j, None, :] - train).abs().amax(dim=(0, 2))
        report.chunks.append(ChunkResult(j, served_ids[j], first.fc_chunks[j], cos[:, j].mean(0).tolist(),
                                         cos[:, j].amin(0).tolist(), diff.tolist(), norm_dev[j].tolist()))
    report.ok, report.summary = all(c.matches(min_cosine) for c in report.chunks), _summary(report)
    return report


def _summary(report: CompareReport) -> str:
    names, floor = report.chunk_names, report.min_cosine
    parts = []
    for c in (c for c in report.chunks if not c.matches(floor)):
        want = names[c.expected]
        if c.best == c.expected and c.min_cos[c.best] >= floor:  # so its norms are what differ
            parts.append(f"served chunk {c.index} points the way {want} does (min cosine {c.min_cos[c.best]:.4f}) but "
                         f"its norms differ by up to {c.max_norm_dev[c.expected]:.1%} (log scale): one side is the "
                         "final norm's output and the other its input (pre- vs post-norm, layer id final_norm vs "
                         "N-1)?")
        elif c.min_cos[c.best] >= floor:
            parts.append(f"served chunk {c.index} is {names[c.best]}, but training fed {want} to that slot")
        else:
            parts.append(f"served chunk {c.index} matches no training tensor (closest {names[c.best]}, mean cosine "
                         f"{c.mean_cos[c.best]:.3f}); training fed {want} to that slot")
    return ("MISMATCH: " + "; ".join(parts) if parts else "every served chunk matches the tensor training fed that fc "
            f"slot (min cosine >= {floor} over {report.rows} rows)")
