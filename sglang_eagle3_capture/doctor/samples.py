"""Readers for the EAGLE-3 training samples that training pipelines write to disk.

Three layouts are read, each into one :class:`Sample` (token ids, loss mask, and the stored
hidden-state tensors split into ``[seq, hidden]`` chunks in stored order):

- speculators' legacy ``data_{i}.pt`` (``VllmHiddenStatesGenerator``, Nov 2025 - Apr 2026):
  ``{"input_ids": [seq], "hidden_states": [[seq, hidden], ...], "loss_mask": [seq]}``; the trainer
  (``standardize_data_v1``) fed the fc ``cat(hidden_states[:-1])`` and used ``hidden_states[-1]``
  as the verifier's last hidden state. A ``data_config.json`` next to the files may list the
  stored layers (``{"hidden_states": {"layer_ids": [...]}}``); the legacy generator captured
  *after* decoder layer ``idx``, so its ids already are this package's layer ids. Its
  ``sample_lengths.json`` (``{"i": seq_len}``) must agree with ``data_{i}.pt``.
- speculators' ``hs_{i}.safetensors`` (vLLM ``extract_hidden_states``): ``hidden_states``
  ``[seq, layers, hidden]`` and ``token_ids`` ``[seq]``; the loss mask usually lives in an Arrow dataset,
  which is not read: a ``loss_mask`` ``[seq]`` in the file is read when present, else every position counts.
  The trainer fed the fc ``hidden_states[:, :-1]``.
- SpecForge's ``.ckpt`` / ``.ckpt.gz`` (``scripts/prepare_hidden_states.py``): ``input_ids``,
  ``loss_mask``, ``hidden_state`` ``[1, seq, hidden]`` (post-norm final) and ``aux_hidden_state``
  ``[1, seq, K*hidden]`` (the fc input, split here into K chunks).

Every problem is a :class:`SampleError` naming the file, the key and what was expected.
``torch.load`` always runs with ``weights_only=True``.
"""

from __future__ import annotations

import fnmatch
import functools
import gzip
import io
import os
import zlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterable, Sequence

from ..draft.checkpoint import read_safetensors_header
from ..errors import SampleError
from ..userfiles import brief, open_regular, os_problem, path_kind, read_json_object, require_file, shown

LEGACY_PT = "speculators-legacy-pt"
HS_SAFETENSORS = "speculators-hs-safetensors"
SPECFORGE_CKPT = "specforge-ckpt"
LEGACY_DATA_CONFIG = "data_config.json"
LEGACY_LENGTHS = "sample_lengths.json"
_PATTERNS = ("*.pt", "hs_*.safetensors", "*.ckpt", "*.ckpt.gz")


@dataclass(frozen=True)
class Sample:
    """One training sample: ``chunks[i]`` is the i-th stored ``[seq, hidden]`` tensor, in its stored dtype.

    ``chunk_names`` say where each chunk sits in the file; ``chunk_layer_ids[i]`` is its layer id
    when the data says so (``None`` when unknown); ``fc_chunks`` are the chunk indices the training
    pipeline concatenated for the fc, in order; ``target_chunk`` the one it used as the verifier's
    last hidden state (``None`` if the layout has none).
    """

    path: Path
    layout: str
    input_ids: "object"
    loss_mask: "object | None"
    chunks: tuple
    chunk_names: tuple[str, ...]
    fc_chunks: tuple[int, ...]
    target_chunk: int | None
    chunk_layer_ids: tuple[int | None, ...] = field(default=())

    @property
    def seq_len(self) -> int:
        """Number of tokens."""
        return int(self.input_ids.shape[0])

    @property
    def hidden_size(self) -> int:
        """Width of each stored chunk."""
        return int(self.chunks[0].shape[-1])


def _err(path, key: str, problem: str, fix: str) -> SampleError:
    """``FILE: key 'KEY' PROBLEM; fix: FIX`` (the key is the field of a sample file)."""
    return SampleError(f"{shown(path)}: key '{key}' {problem}; fix: {fix}")


def _is_sample_name(name: str) -> bool:
    return any(fnmatch.fnmatchcase(name, pat) for pat in _PATTERNS)


def _walk(root: Path) -> list[Path]:
    """Sample files under directory ``root``, following directory symlinks (each directory once, so a symlink loop
    ends), sorted. A directory that cannot be listed, or a sample name that is not a regular file, is an error."""
    found: list[Path] = []
    seen: set[tuple[int, int]] = set()

    def refuse(e: OSError) -> None:
        problem, how = os_problem(e)
        raise SampleError(f"{shown(e.filename or root)}: cannot list the directory ({problem}); fix: {how}, or "
                          "pass only the sample files") from None

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
        for name in filenames + dirnames:
            if not _is_sample_name(name):
                continue
            p = Path(dirpath) / name
            kind = path_kind(p, error=SampleError)
            if kind == "file":
                found.append(p)
            elif kind != "directory" or name not in dirnames:
                raise SampleError(f"{shown(p)}: field '<file>': {_kind_problem(kind)}, not a sample file; fix: "
                                  "remove it, or pass the sample files explicitly")
            else:
                raise SampleError(f"{shown(p)}: field '<file>': is a directory named like a sample file; fix: rename "
                                  "or remove it, or pass the sample files explicitly")
    return sorted(found)


def _kind_problem(kind: str) -> str:
    return {"missing": "does not exist", "dangling symlink": "is a dangling symlink", "symlink loop":
            "is a symlink loop", "directory": "is a directory"}.get(kind, f"is {kind}")


def expand_data_paths(paths: Iterable[str | Path]) -> list[Path]:
    """Files named on the command line; a directory stands for every sample file under it (sorted, directory symlinks
    followed). Anything that is not a regular file where a sample file is expected is named and refused: a fifo
    or a device is never opened."""
    out: list[Path] = []
    for p in map(Path, paths):
        kind = path_kind(p, error=SampleError, fix="pass sample files or a directory of them")
        if kind == "directory":
            found = _walk(p)
            if not found:
                raise SampleError(f"{shown(p)}: directory holds no sample files ({', '.join(_PATTERNS)}); fix: pass "
                                  "the directory the training pipeline wrote its samples to")
            out.extend(found)
        elif kind == "file":
            out.append(p)
        elif kind == "missing":
            raise SampleError(f"{shown(p)}: no such file or directory; fix: pass sample files or a directory of them")
        else:
            raise SampleError(f"{shown(p)}: field '<file>': {_kind_problem(kind)}, not a sample file; fix: pass "
                              "sample files or a directory of them")
    return out


def load_sample(path: str | Path) -> Sample:
    """Read one sample file, choosing the layout from its name (``.pt``, ``.safetensors``, ``.ckpt[.gz]``)."""
    path = Path(path)
    name = path.name
    if name.endswith(".safetensors"):
        return _read_hs_safetensors(path)
    if name.endswith(".ckpt") or name.endswith(".ckpt.gz"):
        return _read_specforge(path, _torch_load(path))
    if name.endswith(".pt"):
        return _read_legacy(path, _torch_load(path))
    raise SampleError(
        f"{shown(path)}: unknown sample file type; fix: pass speculators data_*.pt, hs_*.safetensors "
        "or SpecForge *.ckpt / *.ckpt.gz files"
    )


# A .ckpt.gz may inflate to at most this many times its size (hidden states barely compress: real files come in
# near 1x) or MIN_GZ_BUDGET, whichever is larger: a gzip bomb is refused after reading that much, never unpickled.
MAX_GZ_RATIO = 16
MIN_GZ_BUDGET = 64 << 20


def _first_line(e: BaseException) -> str:
    """The informative line of an exception's message (torch's weights_only refusal spans several)."""
    text = str(e)
    for line in text.splitlines():
        if "WeightsUnpickler error:" in line:
            return line.split("WeightsUnpickler error:", 1)[1].strip()
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    return brief(lines[0] if lines else type(e).__name__, 200)


def _gunzip(path: Path, f, compressed: int) -> bytes:
    budget = max(MIN_GZ_BUDGET, MAX_GZ_RATIO * compressed)
    out = io.BytesIO()
    try:
        with gzip.GzipFile(fileobj=f, mode="rb") as g:
            while chunk := g.read(1 << 20):
                out.write(chunk)
                if out.tell() > budget:
                    raise SampleError(f"{shown(path)}: field '<data>': inflates to more than {budget} bytes "
                                      f"({MAX_GZ_RATIO}x its {compressed}; hidden states barely compress): not a "
                                      "SpecForge sample (a gzip bomb?); fix: pass the samples the pipeline wrote")
    except (OSError, EOFError, zlib.error) as e:
        raise SampleError(f"{shown(path)}: field '<data>': not a readable gzip file ({_first_line(e)}); fix: "
                          "re-generate the sample") from None
    return out.getvalue()


def _torch_load(path: Path):
    import torch

    fix = "re-save it with tensors only (torch.save of a dict of tensors), or re-generate it"
    with open_regular(path, error=SampleError, fix="pass the sample files the training pipeline wrote") as f:
        try:
            if path.name.endswith(".gz"):
                source = io.BytesIO(_gunzip(path, f, os.fstat(f.fileno()).st_size))
            else:
                source = f
            return torch.load(source, map_location="cpu", weights_only=True)
        except SampleError:
            raise
        except Exception as e:  # torch raises many types (pickle, zip, weights_only unpickler)
            raise SampleError(f"{shown(path)}: cannot be read by torch.load(weights_only=True) ({_first_line(e)}); "
                              f"fix: {fix}") from None


def _need(data, key: str, path: Path, layout: str):
    if not isinstance(data, dict):
        raise SampleError(f"{shown(path)}: expected a dict of tensors ({layout}), got {type(data).__name__}; fix: "
                          "pass samples written by the training pipeline")
    if key not in data:
        raise SampleError(
            f"{shown(path)}: missing key '{key}' (a {layout} sample has {_KEYS[layout]}; found "
            f"{brief(sorted(map(str, data)))}); fix: pass samples of one of the supported layouts"
        )
    return data[key]


_KEYS = {
    LEGACY_PT: "'input_ids', 'hidden_states' (list of [seq, hidden]) and 'loss_mask'",
    HS_SAFETENSORS: "'hidden_states' [seq, layers, hidden] and 'token_ids' [seq]",
    SPECFORGE_CKPT: "'input_ids', 'loss_mask', 'hidden_state' [1, seq, hidden], 'aux_hidden_state' [1, seq, K*hidden]",
}
_FIX = "re-generate the sample with the training pipeline"


def _tensor(value, key: str, path: Path, ndims: Sequence[int], what: str):
    import torch

    if not isinstance(value, torch.Tensor):
        raise _err(path, key, f"should be a tensor {what}, got {type(value).__name__}", _FIX)
    if value.dim() not in ndims:
        raise _err(path, key, f"has shape {list(value.shape)}, expected {what}", _FIX)
    return value


def _floats(t, key: str, path: Path):
    import torch

    if not t.is_floating_point():
        raise _err(path, key, f"holds {t.dtype}, expected floating-point hidden states", _FIX)
    if t.numel() and not bool(torch.isfinite(t).all()):
        bad = int((~torch.isfinite(t)).sum())
        raise _err(path, key, f"holds {bad} non-finite values (NaN or Inf)", _FIX)
    return t


def _ids(value, key: str, path: Path, seq: int | None = None):
    """Token ids as int64 ``[seq]``; a leading batch dim of 1 is dropped."""
    import torch

    t = _tensor(value, key, path, (1, 2), "[seq] of token ids")
    if t.dim() == 2:
        if t.shape[0] != 1:
            raise _err(path, key, f"has shape {list(t.shape)}, expected [seq] or [1, seq]", _FIX)
        t = t[0]
    if t.is_floating_point() or t.is_complex() or t.dtype == torch.bool:
        raise _err(path, key, f"holds {t.dtype}, expected integer token ids", _FIX)
    if seq is not None and t.shape[0] != seq:
        raise _err(path, key, f"has {t.shape[0]} entries but the hidden states have {seq} positions", _FIX)
    return t.long()


def _mask(value, key: str, path: Path, seq: int):
    t = _tensor(value, key, path, (1, 2), "[seq] loss mask")
    if t.dim() == 2:
        if t.shape[0] != 1:
            raise _err(path, key, f"has shape {list(t.shape)}, expected [seq] or [1, seq]", _FIX)
        t = t[0]
    if t.shape[0] != seq:
        raise _err(path, key, f"has {t.shape[0]} entries, expected {seq} (one per token)", _FIX)
    return t != 0


def _read_legacy(path: Path, data) -> Sample:
    hs = _need(data, "hidden_states", path, LEGACY_PT)
    if not isinstance(hs, (list, tuple)) or len(hs) < 2:
        raise _err(path, "hidden_states", "should be a list of at least 2 tensors [seq, hidden] (fc inputs then the "
                   f"verifier's last hidden state), got {type(hs).__name__}"
                   + (f" of length {len(hs)}" if isinstance(hs, (list, tuple)) else ""), _FIX)
    ids = _ids(_need(data, "input_ids", path, LEGACY_PT), "input_ids", path)
    chunks = []
    for i, t in enumerate(hs):
        t = _tensor(t, f"hidden_states[{i}]", path, (2,), "[seq, hidden]")
        width = chunks[0].shape[1] if chunks else t.shape[1]
        if t.shape[0] != ids.shape[0] or t.shape[1] != width or t.shape[1] == 0 or not t.is_floating_point():
            raise _err(path, f"hidden_states[{i}]", f"has shape {list(t.shape)}, expected [{ids.shape[0]}, {width}] "
                       f"(one row per input id, all entries as wide as hidden_states[0], not empty) of floats, got "
                       f"{t.dtype}", _FIX)
        chunks.append(_floats(t, f"hidden_states[{i}]", path))
    mask = _mask(_need(data, "loss_mask", path, LEGACY_PT), "loss_mask", path, ids.shape[0])
    _check_legacy_length(path, ids.shape[0])
    n = len(chunks)
    return Sample(
        path=path, layout=LEGACY_PT, input_ids=ids, loss_mask=mask, chunks=tuple(chunks),
        chunk_names=tuple(f"hidden_states[{i}]" for i in range(n)),
        fc_chunks=tuple(range(n - 1)), target_chunk=n - 1,
        chunk_layer_ids=_legacy_layer_ids(path, n),
    )


def _directory_json(path: Path) -> dict:
    """A JSON object shared by every sample in a directory (``sample_lengths.json``, ``data_config.json``), read
    strictly (:func:`~sglang_eagle3_capture.userfiles.read_json_object`) once per version of the file rather than once
    per sample; callers only read the result."""
    fix = "correct it, or remove it (it only describes the samples)"
    require_file(path, error=SampleError, fix=fix)
    st = path.stat()
    return _parse_json(str(path), st.st_mtime_ns, st.st_size, fix)


@functools.lru_cache(maxsize=8)
def _parse_json(path: str, mtime_ns: int, size: int, fix: str) -> dict:
    return read_json_object(Path(path), fix=fix, error=SampleError)


def _check_legacy_length(path: Path, seq: int) -> None:
    """``data_{i}.pt`` must have the length its directory's ``sample_lengths.json`` records for ``i``."""
    lengths_file = path.parent / LEGACY_LENGTHS
    index = path.stem[len("data_"):] if path.stem.startswith("data_") else None
    if index is None or path_kind(lengths_file, error=SampleError) == "missing":
        return
    lengths = _directory_json(lengths_file)
    want = lengths.get(index)
    if want is None:
        return
    if not isinstance(want, int) or isinstance(want, bool) or want < 0:
        raise SampleError(f"{shown(lengths_file)}: field '{shown(index)}': expected a token count (an integer >= 0), "
                          f"got {brief(want)}; fix: correct the file, or remove it")
    if want != seq:
        raise SampleError(f"{shown(path)}: key 'input_ids' has {seq} tokens but {shown(lengths_file)} field "
                          f"'{shown(index)}' says {want}; the sample and the index disagree (a file from another "
                          "run?); fix: regenerate or remove one")


def _legacy_layer_ids(path: Path, n: int) -> tuple[int | None, ...]:
    """Layer ids of the stored tensors from the legacy generator's ``data_config.json``, if present (distinct
    integers >= -1; the upper bound needs the target and is checked by ``verify``)."""
    cfg = path.parent / LEGACY_DATA_CONFIG
    if path_kind(cfg, error=SampleError) == "missing":
        return (None,) * n
    doc = _directory_json(cfg)
    hs = doc.get("hidden_states")
    if hs is None:
        return (None,) * n
    if not isinstance(hs, dict):
        raise SampleError(f"{shown(cfg)}: field 'hidden_states': expected an object, got {brief(hs)}; fix: correct the "
                          "file (speculators writes {\"hidden_states\": {\"layer_ids\": [...]}}), or remove it")
    ids = hs.get("layer_ids")
    if ids is None:
        return (None,) * n
    ints = isinstance(ids, list) and all(isinstance(i, int) and not isinstance(i, bool) for i in ids)
    if not ints or len(ids) != n:
        raise SampleError(
            f"{shown(cfg)}: field 'hidden_states.layer_ids' = {brief(ids)} should list {n} integers, one per stored "
            f"tensor of {shown(path.name)}; fix: correct the file, or remove it"
        )
    if len(set(ids)) != n or min(ids) < -1:
        raise SampleError(f"{shown(cfg)}: field 'hidden_states.layer_ids' = {brief(ids)}: layer ids are distinct and "
                          ">= -1 (-1 = embedding output); fix: correct the file, or remove it")
    # The legacy generator captured after decoder layer idx: its ids are already layer ids.
    return tuple(ids)


def _read_hs_safetensors(path: Path) -> Sample:
    from safetensors.torch import load_file

    try:
        read_safetensors_header(path, error=SampleError)  # a fifo is never opened; bad headers never reach safetensors
    except SampleError as e:
        detail = str(e).split(": ", 1)[-1]
        raise SampleError(f"{shown(path)}: not a readable safetensors file ({detail.split('; fix:')[0]}); fix: "
                          "re-generate the sample") from None
    try:
        data = load_file(str(path), device="cpu")
    except Exception as e:  # noqa: BLE001 - safetensors' own error type (the file changed since its header was read)
        raise SampleError(f"{shown(path)}: not a readable safetensors file ({_first_line(e)}); fix: re-generate the "
                          "sample") from None
    hs = _tensor(_need(data, "hidden_states", path, HS_SAFETENSORS), "hidden_states", path, (3,),
                 "[seq, layers, hidden]")
    _floats(hs, "hidden_states", path)
    if hs.shape[1] < 2 or hs.shape[2] == 0:
        raise _err(path, "hidden_states", f"has shape {list(hs.shape)}, expected at least 2 layers of width > 0", _FIX)
    ids = _ids(_need(data, "token_ids", path, HS_SAFETENSORS), "token_ids", path, seq=hs.shape[0])
    mask = _mask(data["loss_mask"], "loss_mask", path, hs.shape[0]) if "loss_mask" in data else None
    n = hs.shape[1]
    return Sample(
        path=path, layout=HS_SAFETENSORS, input_ids=ids, loss_mask=mask,
        chunks=tuple(hs[:, i] for i in range(n)),
        chunk_names=tuple(f"hidden_states[:, {i}]" for i in range(n)),
        fc_chunks=tuple(range(n - 1)), target_chunk=n - 1, chunk_layer_ids=(None,) * n,
    )


def _read_specforge(path: Path, data) -> Sample:
    final = _tensor(_need(data, "hidden_state", path, SPECFORGE_CKPT), "hidden_state", path, (2, 3),
                    "[1, seq, hidden]")
    aux = _tensor(_need(data, "aux_hidden_state", path, SPECFORGE_CKPT), "aux_hidden_state", path, (2, 3),
                  "[1, seq, K*hidden]")
    final, aux = (t[0] if t.dim() == 3 else t for t in (final, aux))
    _floats(final, "hidden_state", path), _floats(aux, "aux_hidden_state", path)
    if final.shape[0] != aux.shape[0]:
        raise _err(path, "aux_hidden_state", f"has {aux.shape[0]} positions, but 'hidden_state' has {final.shape[0]}",
                   _FIX)
    h = final.shape[1]
    if h == 0:
        raise _err(path, "hidden_state", f"is 0 wide (shape {list(final.shape)})", _FIX)
    if aux.shape[1] % h or aux.shape[1] == 0:
        raise _err(path, "aux_hidden_state", f"is {aux.shape[1]} wide, not a multiple of the hidden size {h} taken "
                   "from 'hidden_state'", _FIX)
    ids = _ids(_need(data, "input_ids", path, SPECFORGE_CKPT), "input_ids", path, seq=final.shape[0])
    mask = _mask(_need(data, "loss_mask", path, SPECFORGE_CKPT), "loss_mask", path, final.shape[0])
    k = aux.shape[1] // h
    chunks = tuple(aux[:, i * h:(i + 1) * h] for i in range(k)) + (final,)
    return Sample(
        path=path, layout=SPECFORGE_CKPT, input_ids=ids, loss_mask=mask, chunks=chunks,
        chunk_names=tuple(f"aux_hidden_state[..., {i * h}:{(i + 1) * h}]" for i in range(k)) + ("hidden_state",),
        fc_chunks=tuple(range(k)), target_chunk=k, chunk_layer_ids=(None,) * (k + 1),
    )
