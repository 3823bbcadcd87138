"""Readers of the EAGLE-3 training samples pipelines write (layouts in :mod:`.sample_schema`), each into a
:class:`Sample`; docs/formats-and-convert.md says what each trainer fed the fc. ``torch.load`` runs with
``weights_only=True``, and only after every compressed container it would inflate was bounded (:data:`MAX_RATIO`)."""

from __future__ import annotations

import fnmatch
import functools
import gzip
import io
import os
import re
import zipfile
import zlib
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable

from ..core import records
from ..core.checkpoint import read_safetensors_header
from ..core.errors import InputError, brief
from ..core.userfiles import open_regular, os_problem, path_kind, read_json_object, require_file
from . import sample_schema as schema
from .sample_schema import DATA_CONFIG_FILENAME as LEGACY_DATA_CONFIG
from .sample_schema import HS_SAFETENSORS, LEGACY_PT, REGENERATE, SPECFORGE_CKPT, TABLE_FIX, TABLE_HS_DIR, TABLE_STATE

_PATTERNS = ("*.pt", "hs_*.safetensors", "*.ckpt", "*.ckpt.gz")
_SAMPLE_NAME = re.compile("|".join(map(fnmatch.translate, _PATTERNS)))
_PASS_SAMPLES = "pass sample files or a directory of them"
_MAX_ROW = 1 << 24  # tokens in one sample of a datasets table: far past any context length
# A compressed container (a .ckpt.gz, a record deflated inside torch's zip format) may inflate to MAX_RATIO times its
# file's size or MIN_BUDGET, whichever is larger (docs/threat-model.md): hidden states barely compress.
MAX_RATIO, MIN_BUDGET = 16, 64 << 20


@dataclass(frozen=True)
class Sample:
    """``chunks[i]``: the i-th stored ``[seq, hidden]`` tensor (stored dtype); the fc was fed ``fc_chunks``."""

    path: Path
    layout: str
    input_ids: "object"
    loss_mask: "object | None"  # None when the data does not say
    chunks: tuple
    chunk_names: tuple[str, ...]
    fc_chunks: tuple[int, ...]
    target_chunk: int | None  # the verifier's last hidden state
    chunk_layer_ids: tuple[int | None, ...]  # None: unknown

    @property
    def seq_len(self) -> int:
        return int(self.input_ids.shape[0])

    @property
    def hidden_size(self) -> int:
        return int(self.chunks[0].shape[-1])


def _sample(path: Path, layout: str, ids, mask, chunks: tuple, names: Iterable[str], layer_ids=None) -> Sample:
    """The trainer fed the fc every chunk but the last, in order; the last is the verifier's last hidden state."""
    n = len(chunks)
    return Sample(path, layout, ids, mask, chunks, tuple(names), tuple(range(n - 1)), n - 1, layer_ids or (None,) * n)


def kind_phrase(kind: str) -> str:
    """A :func:`path_kind` answer as a noun phrase ("a directory", "a fifo")."""
    return kind if kind.startswith(("a ", "not ")) else f"a {kind}"


def _walk(root: Path) -> list[Path]:
    """Sample files under ``root``, sorted, following directory symlinks (each directory once, so a loop ends)."""
    found, seen = [], set()

    def refuse(e: OSError) -> None:
        problem, how = os_problem(e)
        raise InputError(e.filename or root, "<dir>", f"cannot list the directory ({problem})",
                         f"{how}, or pass only the sample files") from None

    for dirpath, dirnames, filenames in os.walk(root, onerror=refuse, followlinks=True):
        try:
            st = os.stat(dirpath)
        except OSError as e:
            refuse(e)
        if (st.st_dev, st.st_ino) in seen:
            dirnames[:] = []
            continue
        seen.add((st.st_dev, st.st_ino))
        dirnames.sort()
        if TABLE_STATE in filenames and TABLE_HS_DIR in dirnames:  # speculators' data directory: its samples are
            filenames = []  # hidden_states/hs_*.safetensors (token_freq.pt beside the table is none)
        for p in (Path(dirpath) / name for name in filenames + dirnames if _SAMPLE_NAME.match(name)):
            if (kind := path_kind(p)) != "file":
                raise InputError(p, "<file>", f"is {kind_phrase(kind)} named like a sample file",
                                 "rename or remove it, or pass the sample files explicitly")
            found.append(p)
    return sorted(found)


def expand_data_paths(paths: Iterable[str | Path]) -> list[Path]:
    """A directory stands for every sample file under it; anything else but a regular file is refused, so a fifo or a
    device is never opened."""
    out: list[Path] = []
    for p in map(Path, paths):
        kind = path_kind(p, fix=_PASS_SAMPLES)
        if kind not in ("file", "directory"):
            raise InputError(p, "<file>", "no such file or directory" if kind == "missing" else
                             f"is {kind_phrase(kind)}, not a sample file", _PASS_SAMPLES)
        found = _walk(p) if kind == "directory" else [p]
        if not found:
            raise InputError(p, "<dir>", f"holds no sample files ({', '.join(_PATTERNS)})",
                             "pass the directory the training pipeline wrote its samples to")
        out += found
    return out


def load_sample(path: str | Path) -> Sample:
    """Read one sample file, choosing the layout from its name (``.pt``, ``.safetensors``, ``.ckpt[.gz]``)."""
    path = Path(path)
    if path.name.endswith(".safetensors"):
        return _read_hs_safetensors(path)
    for suffixes, read in (((".ckpt", ".ckpt.gz"), _read_specforge), ((".pt",), _read_legacy)):
        if path.name.endswith(suffixes):
            return read(path, _torch_load(path))
    raise InputError(path, "<file>", "unknown sample file type",
                     "pass speculators data_*.pt, hs_*.safetensors or SpecForge *.ckpt / *.ckpt.gz files")


def _within_budget(path: Path, size: int, compressed: int, inflated: str) -> None:
    if size > (budget := max(MIN_BUDGET, MAX_RATIO * compressed)):
        raise InputError(path, "<data>", f"{inflated} more than {budget} bytes ({MAX_RATIO}x its {compressed}; hidden "
                         "states barely compress): not a sample a pipeline wrote (a decompression bomb?)",
                         "pass the samples the pipeline wrote")


def first_line(e: BaseException) -> str:
    """The informative line of an exception's message (torch's weights_only refusal spans several)."""
    lines = [line.strip() for line in str(e).splitlines() if line.strip()]
    refusal = [line.partition("WeightsUnpickler error:")[2] for line in lines if "WeightsUnpickler error:" in line]
    return brief((refusal or lines or [type(e).__name__])[0].strip(), 200)


def _bounded(path: Path, f, compressed: int):
    """``f``, inflated if gzip, once what it inflates to fits the budget: a torch zip archive's records as its central
    directory declares them (the sizes torch's reader allocates); a file of another format passes untouched."""
    source = f
    if path.name.endswith(".gz"):
        source = io.BytesIO()
        try:
            with gzip.GzipFile(fileobj=f, mode="rb") as g:
                while chunk := g.read(1 << 20):
                    source.write(chunk)
                    _within_budget(path, source.tell(), compressed, "inflates to")
        except (OSError, EOFError, zlib.error) as e:
            raise InputError(path, "<data>", f"not a readable gzip file ({first_line(e)})", REGENERATE) from None
        source.seek(0)
    is_zip = zipfile.is_zipfile(source)
    source.seek(0)
    if is_zip:
        try:
            with zipfile.ZipFile(source) as z:
                total = sum(info.file_size for info in z.infolist())
        except (zipfile.BadZipFile, zipfile.LargeZipFile, OSError, EOFError, ValueError) as e:
            raise InputError(path, "<data>", f"not a readable zip archive ({first_line(e)})", REGENERATE) from None
        source.seek(0)
        _within_budget(path, total, compressed, f"holds records declaring {total} bytes,")
    return source


def _torch_load(path: Path):
    import torch

    with open_regular(path, fix="pass the sample files the training pipeline wrote") as f:
        try:
            return torch.load(_bounded(path, f, os.fstat(f.fileno()).st_size), map_location="cpu", weights_only=True)
        except InputError:
            raise
        except Exception as e:  # torch raises many types (pickle, zip, weights_only unpickler)
            raise InputError(path, "<data>", f"cannot be read by torch.load(weights_only=True) ({first_line(e)})",
                             "re-save it with tensors only (torch.save of a dict of tensors), or re-generate it"
                             ) from None


def _fields(record: records.Record, data, path: Path) -> dict:
    """``data`` read as the layout ``record``; a missing key also says which keys the file has (another layout?)."""
    if isinstance(data, dict):
        absent = next((f.encode_name for f in record.fields() if f.required and f.encode_name not in data), None)
        if absent is not None:
            raise InputError(path, absent, f"missing (a {record.name} sample has {', '.join(record.names)}; found "
                             f"{brief(sorted(map(str, data)))})", "pass samples of one of the supported layouts")
    return records.read(record, data, file=path)


def _rows(t, key: str, path: Path, seq: int | None = None, batched: int = 2):
    """``t`` without the batch dimension of 1 a ``batched``-D ``t`` leads with, and with ``seq`` entries when given."""
    if t.dim() == batched:
        if t.shape[0] != 1:  # a pipeline writes one sample per file
            raise InputError(path, key, f"has shape {list(t.shape)}, expected a batch of 1", REGENERATE)
        t = t[0]
    if seq is not None and t.shape[0] != seq:
        raise InputError(path, key, f"has {t.shape[0]} entries, expected {seq} (one per token)", REGENERATE)
    return t


def _stamp(path: Path, fix: str) -> tuple[str, int, int]:
    """A regular file's version, to read it once per version rather than once per sample (callers only read)."""
    require_file(path, fix=fix)
    st = path.stat()
    return str(path), st.st_mtime_ns, st.st_size


def _directory_json(path: Path) -> dict | None:
    """The JSON object in ``path`` beside the samples; None if absent."""
    return None if path_kind(path) == "missing" else _parse_json(*_stamp(path, schema.DESCRIBES))


@functools.lru_cache(maxsize=8)
def _parse_json(path: str, mtime_ns: int, size: int) -> dict:
    return read_json_object(Path(path), fix=schema.DESCRIBES)


def _read_legacy(path: Path, data) -> Sample:
    d = _fields(schema.LEGACY, data, path)
    ids, hs = _rows(d["input_ids"], "input_ids", path).long(), d["hidden_states"]
    seq, width, n = ids.shape[0], hs[0].shape[1], len(hs)
    for i, t in enumerate(hs):
        if list(t.shape) != [seq, width] or width == 0:
            raise InputError(path, f"hidden_states[{i}]", f"has shape {list(t.shape)}, expected [{seq}, {width}] (one "
                             "row per input id, every entry as wide as hidden_states[0], not empty)", REGENERATE)
    mask = _rows(d["loss_mask"], "loss_mask", path, seq) != 0
    # data_{i}.pt must have the length sample_lengths.json beside it records for i (only that entry is judged: O(1))
    lengths_file, index = path.parent / schema.LENGTHS_FILENAME, path.stem.removeprefix("data_")
    if index != path.stem and (doc := _directory_json(lengths_file)) is not None:
        entry = {index: doc[index]} if index in doc else {}
        want = records.read(schema.sample_lengths(index), entry, file=lengths_file)[index]
        if want is not None and want != seq:
            raise InputError(path, "input_ids", f"has {seq} tokens but {lengths_file.name} says {want} for {index!r}: "
                             "the sample and the index disagree (a file from another run?)", "regenerate or remove one")
    # the layer ids data_config.json lists, if any (upper bound checked by verify): the legacy generator captured
    # after decoder layer idx, so its ids are already layer ids
    cfg = path.parent / LEGACY_DATA_CONFIG
    stored = records.read(schema.DATA_CONFIG, _directory_json(cfg) or {}, file=cfg)["hidden_states"] or {}
    layer_ids = stored.get("layer_ids")
    if layer_ids is not None and (len(layer_ids) != n or len(set(layer_ids)) != n):
        raise InputError(cfg, "hidden_states.layer_ids", f"{brief(layer_ids)} repeats a layer id" if len(layer_ids) == n
                         else f"{brief(layer_ids)} lists {len(layer_ids)} layers, but {path.name} stores {n} tensors",
                         schema.STORED_LAYERS.fix_of("layer_ids"))
    return _sample(path, LEGACY_PT, ids, mask, tuple(hs), (f"hidden_states[{i}]" for i in range(n)),
                   None if layer_ids is None else tuple(layer_ids))


def load_safetensors(path: Path, fix: str) -> dict:
    """The tensors in ``path``, loaded only after its header was checked (a fifo is never opened, nor a bad header)."""
    from safetensors.torch import load_file

    read_safetensors_header(path, fix=fix)
    try:
        return load_file(str(path), device="cpu")
    except Exception as e:  # noqa: BLE001 - safetensors' own error type (the file changed since its header was read)
        raise InputError(path, "<data>", f"not a readable safetensors file ({first_line(e)})", fix) from None


def _read_hs_safetensors(path: Path) -> Sample:
    d = _fields(schema.HS, load_safetensors(path, REGENERATE), path)
    hs = d["hidden_states"]
    if hs.shape[1] < 2 or hs.shape[2] == 0:
        raise InputError(path, "hidden_states", f"has shape {list(hs.shape)}, expected at least 2 layers of width > 0",
                         REGENERATE)
    ids = _rows(d["token_ids"], "token_ids", path, hs.shape[0]).long()
    mask = _table_mask(path, ids)
    if mask is None and d["loss_mask"] is not None:
        mask = _rows(d["loss_mask"], "loss_mask", path, hs.shape[0]) != 0
    return _sample(path, HS_SAFETENSORS, ids, mask, tuple(hs.unbind(1)),
                   (f"hidden_states[:, {i}]" for i in range(hs.shape[1])))


def _table_mask(path: Path, ids) -> object | None:
    """Row ``i``'s loss mask from speculators' datasets table; None when the file does not sit beside one."""
    import torch

    root = path.parent.parent
    doc = _directory_json(root / TABLE_STATE) if path.parent.name == TABLE_HS_DIR else None
    if doc is None:
        return None
    index = path.name[len("hs_"):-len(".safetensors")]
    if not index.isdecimal() or not index.isascii():
        raise InputError(path, "<file>", f"sits in {TABLE_HS_DIR}/ beside a datasets table but is not named "
                         "hs_{row}.safetensors, so no row of the table is its", TABLE_FIX)
    state, files = records.read(schema.TABLE_STATE_RECORD, doc, file=root / TABLE_STATE), []
    for i, entry in enumerate(state["_data_files"]):
        name = entry["filename"]
        if name in (".", "..") or "/" in name or "\\" in name or "\0" in name:
            raise InputError(root / TABLE_STATE, f"_data_files[{i}].filename", f"{brief(name)} is not a file name in "
                             "the directory", TABLE_FIX)
        files.append(_stamp(root / name, TABLE_FIX))
    start, row = 0, int(index)
    for file, *columns in _read_table(str(root), tuple(files)):  # the Arrow file holding the row
        if row < start + len(columns[0]):
            break
        start += len(columns[0])
    else:
        raise InputError(path, "<file>", f"names row {index}, but the datasets table in {root} has {start} rows",
                         f"pass the hidden states of this table; {TABLE_FIX}")
    values = {}
    for key, column in zip(("input_ids", "loss_mask"), columns):
        cell = column[row - start]
        if not cell.is_valid or len(cell) > _MAX_ROW:
            raise InputError(file, f"{key}[{index}]", "is null" if not cell.is_valid else
                             f"holds {len(cell)} entries (more than {_MAX_ROW})", TABLE_FIX)
        try:
            values[key] = torch.tensor(cell.values.to_pylist())
        except (TypeError, ValueError, RuntimeError, OverflowError) as e:
            raise InputError(file, f"{key}[{index}]", f"is not a list of numbers ({first_line(e)})",
                             TABLE_FIX) from None
    values = _fields(schema.TABLE_ROW, values, file)
    row_ids = _rows(values["input_ids"], f"input_ids[{index}]", file).long()
    mask = _rows(values["loss_mask"], f"loss_mask[{index}]", file, row_ids.shape[0]) != 0
    if row_ids.shape[0] != ids.shape[0] or not torch.equal(row_ids, ids):
        raise InputError(path, "token_ids", f"differ from input_ids of row {index} of the datasets table in "
                         f"{root} (speculators' trainer skips such a sample)", f"{REGENERATE}, or {TABLE_FIX}")
    return mask


@functools.lru_cache(maxsize=4)
def _read_table(root: str, files: tuple[tuple[str, int, int], ...]) -> tuple:
    """``(file, input_ids column, loss_mask column)`` of each Arrow file of speculators' datasets table
    (``save_to_disk``), memory mapped as datasets' ``load_from_disk`` maps it, read once per version."""
    try:
        import pyarrow as pa  # installed with SGLang (its datasets requirement), which reads Arrow tables with it
    except ImportError:
        raise InputError(Path(root) / TABLE_STATE, "<file>", "a datasets table, which needs pyarrow to read",
                         "pip install pyarrow") from None
    out = []
    for name, _, _ in files:
        try:
            table = pa.ipc.open_stream(pa.memory_map(name)).read_all()
            table.validate()
        except (pa.ArrowException, OSError, ValueError) as e:
            raise InputError(name, "<data>", f"not a readable Arrow stream ({first_line(e)})", TABLE_FIX) from None
        for key in ("input_ids", "loss_mask"):
            if key not in table.column_names:
                raise InputError(name, key, f"missing (the table has {brief(table.column_names)})", TABLE_FIX)
            if not (pa.types.is_list(table.column(key).type) or pa.types.is_large_list(table.column(key).type)):
                raise InputError(name, key, f"is a column of {table.column(key).type}, expected lists of integers",
                                 TABLE_FIX)
        out.append((Path(name), table.column("input_ids"), table.column("loss_mask")))
    return tuple(out)


def _read_specforge(path: Path, data) -> Sample:
    d = _fields(schema.SPECFORGE, data, path)
    final = _rows(d["hidden_state"], "hidden_state", path, batched=3)
    aux = _rows(d["aux_hidden_state"], "aux_hidden_state", path, final.shape[0], batched=3)
    h = final.shape[1]
    if h == 0:
        raise InputError(path, "hidden_state", f"is 0 wide (shape {list(final.shape)})", REGENERATE)
    if aux.shape[1] % h or aux.shape[1] == 0:
        raise InputError(path, "aux_hidden_state", f"is {aux.shape[1]} wide, not a multiple of the hidden size {h} "
                         "taken from 'hidden_state'", REGENERATE)
    ids = _rows(d["input_ids"], "input_ids", path, final.shape[0]).long()
    mask = _rows(d["loss_mask"], "loss_mask", path, final.shape[0]) != 0
    return _sample(path, SPECFORGE_CKPT, ids, mask, (*aux.split(h, dim=1), final),
                   (*(f"aux_hidden_state[..., {i * h}:{(i + 1) * h}]" for i in range(aux.shape[1] // h)),
                    "hidden_state"))
