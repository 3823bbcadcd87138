"""The training samples ``verify`` and ``compare`` read (:mod:`sglang_eagle3_capture.doctor.samples`): one record
per on-disk layout, and the two JSON files speculators' legacy generator writes beside its samples.

A sample file is a dict of tensors, so its fields are :class:`Tensor` kinds (a JSON value never is one). Policy:
``keep`` everywhere, since pipelines add keys of their own and nothing here reads them; each declared key is typed
strictly (dense CPU tensors of the right dimensions, integer or floating point, finite; fp8 read as float32),
because its values are what the fc is scored on. The shapes that tie keys together (one row per token, K chunks of
the hidden size) are checked by the reader.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from typing import Any

from ..core.errors import InputError
from ..core.records import Bad, Field, Int, Kind, ListOf, Nested, Optional, Record, Str

LEGACY_PT = "speculators-legacy-pt"
HS_SAFETENSORS = "speculators-hs-safetensors"
SPECFORGE_CKPT = "specforge-ckpt"

REGENERATE = "re-generate the sample with the training pipeline"
DESCRIBES = "correct the file, or remove it (it only describes the samples)"


def _what(value: Any) -> str:
    """A value for a message without rendering it (a tensor's repr may be megabytes)."""
    if _is_tensor(value):
        return f"a {value.dim()}-D {value.dtype} tensor of shape {list(value.shape)}"
    return type(value).__name__


def _is_tensor(value: Any) -> bool:
    torch = sys.modules.get("torch")  # no tensor exists before torch is imported: this stays torch-free
    return torch is not None and isinstance(value, torch.Tensor)


# Dtypes by name (torch is imported only once a tensor exists). fp8 hidden states are real (DeepSeek-V3 serves in
# fp8): read, upcast to float32 for every check and all the math. Unsigned integers are read as int64 (torch
# implements few ops on uint16/32/64). Anything else (fp4 and other packed sub-byte types, the e8m0 scale type,
# quantized and complex tensors) is refused.
FLOATS = ("float16", "bfloat16", "float32", "float64")
FP8 = ("float8_e4m3fn", "float8_e4m3fnuz", "float8_e5m2", "float8_e5m2fnuz")
INTS = ("int8", "int16", "int32", "int64", "uint8")
UNSIGNED = ("uint16", "uint32", "uint64")


def _dtype(value: Any) -> str:
    return str(value.dtype).removeprefix("torch.")


def _dense(value: Any, path: str) -> None:
    """A dense CPU tensor whose elements each have their own bytes: never sparse, quantized or on another device
    (``meta`` holds no data), and never more elements than its storage holds (a stride-0 or overlapping view: a
    4 KB file could claim 10^12 rows, and every check would then allocate for each one)."""
    if str(value.layout) != "torch.strided":
        raise Bad(path, f"is a {str(value.layout).removeprefix('torch.')} tensor; expected a dense tensor")
    if value.device.type != "cpu":
        raise Bad(path, f"is on device {value.device.type!r} (holds no data here); expected a CPU tensor")
    if value.is_quantized:
        raise Bad(path, f"is a quantized {_dtype(value)} tensor; expected plain floats or integers")
    needed, held = value.numel() * value.element_size(), value.untyped_storage().nbytes()
    if value.numel() and needed > held:
        raise Bad(path, f"claims {value.numel()} elements of shape {list(value.shape)} (strides "
                  f"{list(value.stride())}) over a storage of {held} bytes: an expanded or overlapping view, not "
                  "stored data")


@dataclass(frozen=True)
class Tensor(Kind):
    """A dense CPU torch tensor of one of ``dims`` dimensions; ``values`` ``"float"`` (finite floating point),
    ``"int"`` (integers, not bool) or ``"any"`` (real numbers or bool). ``shape`` names the dimensions for messages,
    e.g. ``"[seq, hidden]"``. The value read is normalized: fp8 upcast to float32, uint16/32/64 read as int64."""

    shape: str
    dims: tuple[int, ...]
    values: str = "any"

    def describe(self) -> str:
        of = {"float": " of finite floats", "int": " of integers"}.get(self.values, "")
        return f"a tensor {self.shape}{of}"

    def check(self, value: Any, path: str) -> Any:
        if not _is_tensor(value) or value.dim() not in self.dims:
            raise Bad(path, f"expected {self.describe()}, got {_what(value)}")
        _dense(value, path)
        torch = sys.modules["torch"]
        dtype = _dtype(value)
        floats, ints = FLOATS + FP8, INTS + UNSIGNED
        allowed = {"float": floats, "int": ints}.get(self.values, floats + ints + ("bool",))
        if dtype not in allowed:
            want = {"float": "floating-point hidden states (float16/bfloat16/float32/float64 or fp8)",
                    "int": "integers"}.get(self.values, "real numbers or bool")
            raise Bad(path, f"holds {dtype}, expected {want}")
        if dtype in FP8:
            value = value.float()
        elif dtype in UNSIGNED:
            value = value.long()
            if value.numel() and bool((value < 0).any()):  # past int64: no token id or position is that large
                raise Bad(path, f"holds {dtype} values of 2**63 or more")
        if self.values == "float" and value.numel() and not bool(torch.isfinite(value).all()):
            raise Bad(path, f"holds {int((~torch.isfinite(value)).sum())} non-finite values (NaN or Inf)")
        return value


@dataclass(frozen=True)
class Tensors(ListOf):
    """A list (or tuple, as ``torch.save`` keeps it) of tensors."""

    def check(self, value: Any, path: str) -> list:
        if not isinstance(value, (list, tuple)) or not self.min_len <= len(value) <= self.max_len:
            count = f" of length {len(value)}" if isinstance(value, (list, tuple)) else ""
            raise Bad(path, f"expected {self.describe()}, got {_what(value)}{count}")
        return super().check(list(value), path)


def _layout(name: str, fix: str, fields: tuple[Field, ...]) -> Record:
    return Record(name, fields, unknown="keep", error=InputError, fix=fix)


_IDS = Tensor("[seq] (or [1, seq])", (1, 2), "int")
_MASK = Tensor("[seq] (or [1, seq])", (1, 2))

# speculators' VllmHiddenStatesGenerator (data_{i}.pt): the fc took cat(hidden_states[:-1]).
LEGACY = _layout(LEGACY_PT, "pass data_*.pt files written by speculators' legacy generator", (
    Field("input_ids", _IDS, REGENERATE),
    Field("hidden_states", Tensors(Tensor("[seq, hidden]", (2,), "float"), min_len=2),
          f"{REGENERATE} (fc inputs, then the verifier's last hidden state)"),
    Field("loss_mask", _MASK, REGENERATE),
))

# speculators' hs_{i}.safetensors (vLLM extract_hidden_states): the fc took hidden_states[:, :-1]. Its loss mask is
# row i of the datasets table beside the hidden_states/ directory (TABLE_ROW); a mask in the file is read when there is
# no table.
HS = _layout(HS_SAFETENSORS, "pass hs_*.safetensors files written by speculators", (
    Field("hidden_states", Tensor("[seq, layers, hidden]", (3,), "float"), REGENERATE),
    Field("token_ids", _IDS, REGENERATE),
    Field("loss_mask", _MASK, REGENERATE, required=False),
))

# speculators' offline data directory (speculators 0.9 train/data.py ArrowDataset, hs_connectors FileTransfer):
# DATA/state.json and DATA/data-*.arrow (a datasets table, save_to_disk) hold one row per sample, and
# DATA/hidden_states/hs_{row}.safetensors its hidden states. The trainer scores a sample where the row's loss_mask is
# set, and skips a sample whose file's token_ids differ from the row's input_ids.
TABLE_HS_DIR = "hidden_states"
TABLE_STATE = "state.json"
TABLE_FIX = "pass the directory speculators' prepare-data and offline data generation wrote, unchanged"
TABLE_FILE = Record("state.json data file", (
    Field("filename", Str(nonempty=True, max_len=255), "name a data-*.arrow file of this directory (no path)"),
), unknown="keep", error=InputError, fix=TABLE_FIX)
TABLE_STATE_RECORD = Record(TABLE_STATE, (
    Field("_data_files", ListOf(Nested(TABLE_FILE), min_len=1, max_len=100_000),
          'list the table\'s Arrow files ({"filename": "data-00000-of-00001.arrow"}, as datasets\' save_to_disk '
          'writes them)'),
), unknown="keep", error=InputError, fix=TABLE_FIX)
TABLE_ROW = _layout("speculators datasets table row", TABLE_FIX, (
    Field("input_ids", _IDS, TABLE_FIX),
    Field("loss_mask", _MASK, TABLE_FIX),
))

# SpecForge's scripts/prepare_hidden_states.py (*.ckpt, *.ckpt.gz): the fc took aux_hidden_state.
SPECFORGE = _layout(SPECFORGE_CKPT, "pass *.ckpt / *.ckpt.gz files written by SpecForge", (
    Field("input_ids", _IDS, REGENERATE),
    Field("loss_mask", _MASK, REGENERATE),
    Field("hidden_state", Tensor("[1, seq, hidden]", (2, 3), "float"), REGENERATE),
    Field("aux_hidden_state", Tensor("[1, seq, K*hidden]", (2, 3), "float"), REGENERATE),
))

LAYOUTS = {LEGACY_PT: LEGACY, HS_SAFETENSORS: HS, SPECFORGE_CKPT: SPECFORGE}

# data_config.json beside legacy samples: speculators writes many keys; only the stored layers are read. Their ids
# say which stored tensor is which layer, so they are typed strictly (distinct, one per tensor: checked by the reader).
DATA_CONFIG_FILENAME = "data_config.json"
STORED_LAYERS = Record("data_config.json hidden_states", (
    Field("layer_ids", Optional(ListOf(Int(lo=-1))),
          "list one layer id (>= -1, -1 = embedding output) per stored tensor, or remove the file", required=False),
), unknown="keep", error=InputError, fix=DESCRIBES)
DATA_CONFIG = Record("data_config.json", (
    Field("hidden_states", Optional(Nested(STORED_LAYERS)),
          'correct the file (speculators writes {"hidden_states": {"layer_ids": [...]}}), or remove it',
          required=False),
), unknown="keep", error=InputError, fix=DESCRIBES)

# sample_lengths.json beside legacy samples ({"i": seq_len}): only the entry of the sample being read is judged (the
# others describe other files), so the record is declared per index.
LENGTHS_FILENAME = "sample_lengths.json"


def sample_lengths(index: str) -> Record:
    """``sample_lengths.json`` as read for ``data_{index}.pt``."""
    return Record(LENGTHS_FILENAME, (
        Field(index, Int(lo=0), f"set it to data_{index}.pt's token count, or remove the file (it only describes "
              "the samples)", required=False),
    ), unknown="keep", error=InputError, fix=DESCRIBES)


RECORDS = (LEGACY, HS, SPECFORGE, STORED_LAYERS, DATA_CONFIG, sample_lengths("0"), TABLE_FILE, TABLE_STATE_RECORD,
           TABLE_ROW)
