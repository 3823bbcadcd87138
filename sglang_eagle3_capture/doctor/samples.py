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
  ``[seq, layers, hidden]`` and ``token_ids`` ``[seq]``; the loss mask lives in an Arrow dataset
  and is not read (every position counts). The trainer fed the fc ``hidden_states[:, :-1]``.
- SpecForge's ``.ckpt`` / ``.ckpt.gz`` (``scripts/prepare_hidden_states.py``): ``input_ids``,
  ``loss_mask``, ``hidden_state`` ``[1, seq, hidden]`` (post-norm final) and ``aux_hidden_state``
  ``[1, seq, K*hidden]`` (the fc input, split here into K chunks).

Every problem is a :class:`SampleError` naming the file, the key and what was expected.
``torch.load`` always runs with ``weights_only=True``.
"""

from __future__ import annotations

import functools
import gzip
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterable, Sequence

from ..errors import SampleError

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


def expand_data_paths(paths: Iterable[str | Path]) -> list[Path]:
    """Files named on the command line; a directory stands for every sample file under it (sorted)."""
    out: list[Path] = []
    for p in map(Path, paths):
        if p.is_dir():
            found = sorted({f for pat in _PATTERNS for f in p.rglob(pat)})
            if not found:
                raise SampleError(f"{p}: directory holds no sample files ({', '.join(_PATTERNS)})")
            out.extend(found)
        elif p.is_file():
            out.append(p)
        else:
            raise SampleError(f"{p}: no such file or directory (pass sample files or a directory of them)")
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
        f"{path}: unknown sample file type; expected speculators data_*.pt, hs_*.safetensors "
        "or SpecForge *.ckpt / *.ckpt.gz"
    )


def _torch_load(path: Path):
    import torch

    try:
        if path.name.endswith(".gz"):
            with gzip.open(path, "rb") as f:
                return torch.load(f, map_location="cpu", weights_only=True)
        return torch.load(path, map_location="cpu", weights_only=True)
    except Exception as e:  # torch raises many types (pickle, zip, weights_only unpickler)
        raise SampleError(f"{path}: cannot be read by torch.load(weights_only=True): {e}") from e


def _need(data, key: str, path: Path, layout: str):
    if not isinstance(data, dict):
        raise SampleError(f"{path}: expected a dict of tensors ({layout}), got {type(data).__name__}")
    if key not in data:
        raise SampleError(
            f"{path}: missing key '{key}' (a {layout} sample has {_KEYS[layout]}; found {sorted(map(str, data))})"
        )
    return data[key]


_KEYS = {
    LEGACY_PT: "'input_ids', 'hidden_states' (list of [seq, hidden]) and 'loss_mask'",
    HS_SAFETENSORS: "'hidden_states' [seq, layers, hidden] and 'token_ids' [seq]",
    SPECFORGE_CKPT: "'input_ids', 'loss_mask', 'hidden_state' [1, seq, hidden], 'aux_hidden_state' [1, seq, K*hidden]",
}


def _tensor(value, key: str, path: Path, ndims: Sequence[int], what: str):
    import torch

    if not isinstance(value, torch.Tensor):
        raise SampleError(f"{path}: key '{key}' should be a tensor {what}, got {type(value).__name__}")
    if value.dim() not in ndims:
        raise SampleError(f"{path}: key '{key}' has shape {list(value.shape)}, expected {what}")
    return value


def _floats(t, key: str, path: Path):
    if not t.is_floating_point():
        raise SampleError(f"{path}: key '{key}' holds {t.dtype}, expected floating-point hidden states")
    return t


def _ids(value, key: str, path: Path, seq: int | None = None):
    """Token ids as int64 ``[seq]``; a leading batch dim of 1 is dropped."""
    import torch

    t = _tensor(value, key, path, (1, 2), "[seq] of token ids")
    if t.dim() == 2:
        if t.shape[0] != 1:
            raise SampleError(f"{path}: key '{key}' has shape {list(t.shape)}, expected [seq] or [1, seq]")
        t = t[0]
    if t.is_floating_point() or t.dtype == torch.bool:
        raise SampleError(f"{path}: key '{key}' holds {t.dtype}, expected integer token ids")
    if seq is not None and t.shape[0] != seq:
        raise SampleError(f"{path}: key '{key}' has {t.shape[0]} entries but the hidden states have {seq} positions")
    return t.long()


def _mask(value, key: str, path: Path, seq: int):
    t = _tensor(value, key, path, (1, 2), "[seq] loss mask")
    if t.dim() == 2:
        if t.shape[0] != 1:
            raise SampleError(f"{path}: key '{key}' has shape {list(t.shape)}, expected [seq] or [1, seq]")
        t = t[0]
    if t.shape[0] != seq:
        raise SampleError(f"{path}: key '{key}' has {t.shape[0]} entries, expected {seq} (one per token)")
    return t != 0


def _read_legacy(path: Path, data) -> Sample:
    hs = _need(data, "hidden_states", path, LEGACY_PT)
    if not isinstance(hs, (list, tuple)) or len(hs) < 2:
        raise SampleError(
            f"{path}: key 'hidden_states' should be a list of at least 2 tensors [seq, hidden] "
            f"(fc inputs then the verifier's last hidden state), got {type(hs).__name__}"
            + (f" of length {len(hs)}" if isinstance(hs, (list, tuple)) else "")
        )
    ids = _ids(_need(data, "input_ids", path, LEGACY_PT), "input_ids", path)
    chunks = []
    for i, t in enumerate(hs):
        t = _tensor(t, f"hidden_states[{i}]", path, (2,), "[seq, hidden]")
        width = chunks[0].shape[1] if chunks else t.shape[1]
        if t.shape[0] != ids.shape[0] or t.shape[1] != width or not t.is_floating_point():
            raise SampleError(
                f"{path}: key 'hidden_states[{i}]' has shape {list(t.shape)}, expected "
                f"[{ids.shape[0]}, {width}] (one row per input id, all entries as wide as hidden_states[0]) of floats, got {t.dtype}"
            )
        chunks.append(t)
    mask = _mask(_need(data, "loss_mask", path, LEGACY_PT), "loss_mask", path, ids.shape[0])
    _check_legacy_length(path, ids.shape[0])
    n = len(chunks)
    return Sample(
        path=path, layout=LEGACY_PT, input_ids=ids, loss_mask=mask, chunks=tuple(chunks),
        chunk_names=tuple(f"hidden_states[{i}]" for i in range(n)),
        fc_chunks=tuple(range(n - 1)), target_chunk=n - 1,
        chunk_layer_ids=_legacy_layer_ids(path, n),
    )


def _directory_json(path: Path):
    """A JSON file shared by every sample in a directory (``sample_lengths.json``, ``data_config.json``), parsed
    once per version of the file rather than once per sample; callers only read the result."""
    st = path.stat()
    return _parse_json(str(path), st.st_mtime_ns, st.st_size)


@functools.lru_cache(maxsize=8)
def _parse_json(path: str, mtime_ns: int, size: int):
    return json.loads(Path(path).read_text())


def _check_legacy_length(path: Path, seq: int) -> None:
    """``data_{i}.pt`` must have the length its directory's ``sample_lengths.json`` records for ``i``."""
    lengths_file = path.parent / LEGACY_LENGTHS
    index = path.stem[len("data_"):] if path.stem.startswith("data_") else None
    if index is None or not lengths_file.is_file():
        return
    try:
        lengths = _directory_json(lengths_file)
    except (OSError, json.JSONDecodeError) as e:
        raise SampleError(f"{lengths_file}: not valid JSON ({e}); fix or remove it") from e
    want = lengths.get(index) if isinstance(lengths, dict) else None
    if want is not None and want != seq:
        raise SampleError(f"{path}: key 'input_ids' has {seq} tokens but {lengths_file} field '{index}' says {want}; "
                          "the sample and the index disagree (a file from another run?): regenerate or remove one")


def _legacy_layer_ids(path: Path, n: int) -> tuple[int | None, ...]:
    """Layer ids of the stored tensors from the legacy generator's ``data_config.json``, if present."""
    cfg = path.parent / LEGACY_DATA_CONFIG
    if not cfg.is_file():
        return (None,) * n
    try:
        doc = _directory_json(cfg)
    except (OSError, json.JSONDecodeError) as e:
        raise SampleError(f"{cfg}: not valid JSON ({e}); fix or remove it") from e
    ids = doc.get("hidden_states", {}).get("layer_ids") if isinstance(doc, dict) else None
    if ids is None:
        return (None,) * n
    if not isinstance(ids, list) or len(ids) != n or not all(isinstance(i, int) and not isinstance(i, bool) for i in ids):
        raise SampleError(
            f"{cfg}: field 'hidden_states.layer_ids' = {ids!r} should list {n} integers, one per stored "
            f"tensor of {path.name}; fix the file or remove it"
        )
    # The legacy generator captured after decoder layer idx: its ids are already layer ids.
    return tuple(ids)


def _read_hs_safetensors(path: Path) -> Sample:
    from safetensors import SafetensorError
    from safetensors.torch import load_file

    try:
        data = load_file(str(path), device="cpu")
    except (SafetensorError, OSError) as e:
        raise SampleError(f"{path}: not a readable safetensors file: {e}") from e
    hs = _tensor(_need(data, "hidden_states", path, HS_SAFETENSORS), "hidden_states", path, (3,),
                 "[seq, layers, hidden]")
    _floats(hs, "hidden_states", path)
    if hs.shape[1] < 2:
        raise SampleError(f"{path}: key 'hidden_states' has {hs.shape[1]} layers, expected at least 2")
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
        raise SampleError(f"{path}: 'hidden_state' has {final.shape[0]} positions, 'aux_hidden_state' {aux.shape[0]}")
    h = final.shape[1]
    if aux.shape[1] % h or aux.shape[1] == 0:
        raise SampleError(
            f"{path}: key 'aux_hidden_state' is {aux.shape[1]} wide, not a multiple of the hidden size {h} "
            "taken from 'hidden_state'"
        )
    ids = _ids(_need(data, "input_ids", path, SPECFORGE_CKPT), "input_ids", path, seq=final.shape[0])
    mask = _mask(_need(data, "loss_mask", path, SPECFORGE_CKPT), "loss_mask", path, final.shape[0])
    k = aux.shape[1] // h
    chunks = tuple(aux[:, i * h:(i + 1) * h] for i in range(k)) + (final,)
    return Sample(
        path=path, layout=SPECFORGE_CKPT, input_ids=ids, loss_mask=mask, chunks=chunks,
        chunk_names=tuple(f"aux_hidden_state[..., {i * h}:{(i + 1) * h}]" for i in range(k)) + ("hidden_state",),
        fc_chunks=tuple(range(k)), target_chunk=k, chunk_layer_ids=(None,) * (k + 1),
    )
