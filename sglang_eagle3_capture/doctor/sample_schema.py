"""The files ``verify`` and ``compare`` read: one record per training-sample layout (:mod:`.samples`), the JSON files
beside them, and the capture dump. Unknown keys are kept (never read); declared tensors are typed strictly, since
the fc is scored on them; the shapes that tie keys together are checked by the readers."""
from __future__ import annotations

import functools
import sys
from typing import Any, Literal

import msgspec

from ..core.layer_ids import FINAL_NORM
from ..core.records import Custom, Record, fix, integer, list_of, record, text

LEGACY_PT, HS_SAFETENSORS, SPECFORGE_CKPT = "speculators-legacy-pt", "speculators-hs-safetensors", "specforge-ckpt"
DATA_CONFIG_FILENAME, LENGTHS_FILENAME = "data_config.json", "sample_lengths.json"  # beside legacy samples
TABLE_HS_DIR, TABLE_STATE = "hidden_states", "state.json"  # speculators' offline data directory
REGENERATE = "re-generate the sample with the training pipeline"
DESCRIBES = "correct the file, or remove it (it only describes the samples)"
TABLE_FIX = "pass the directory speculators' prepare-data and offline data generation wrote, unchanged"
DUMP_FIX = "point --dump at a directory written with SGLANG_EAGLE3_CAPTURE_DUMP, as the server wrote it"

# Dtypes by name (torch is imported only once a tensor exists). fp8 hidden states are real (DeepSeek-V3 serves in fp8):
# upcast to float32 for every check and all the math. Unsigned integers are read as int64 (torch implements few ops on
# them). Anything else (fp4 and other packed sub-byte types, e8m0, quantized and complex tensors) is refused.
FP8 = ("float8_e4m3fn", "float8_e4m3fnuz", "float8_e5m2", "float8_e5m2fnuz")
UNSIGNED = ("uint16", "uint32", "uint64")
_FLOATS = ("float16", "bfloat16", "float32", "float64", *FP8)
_INTS = ("int8", "int16", "int32", "int64", "uint8", *UNSIGNED)
_VALUES = {  # Tensor.values -> (dtypes taken, what a tensor of them holds, what a refusal says was expected)
    "float": (_FLOATS, " of finite floats", "floating-point hidden states (float16/bfloat16/float32/float64 or fp8)"),
    "int": (_INTS, " of integers", "integers"), "any": (_FLOATS + _INTS + ("bool",), "", "real numbers or bool")}


class Tensor(Custom):
    """A dense CPU tensor of ``dims`` dimensions (named ``shape`` in messages) holding ``values`` (see _VALUES)."""

    shape: str = ""
    dims: tuple[int, ...] = ()
    values: str = "any"

    @classmethod
    def check(cls, value: Any) -> Any:
        torch = sys.modules.get("torch")  # no tensor exists before torch is imported: this stays torch-free
        if torch is None or not isinstance(value, torch.Tensor) or value.dim() not in cls.dims:
            got = type(value).__name__  # never rendered: a tensor's repr may be megabytes
            if torch is not None and isinstance(value, torch.Tensor):
                got = f"a {value.dim()}-D {value.dtype} tensor of shape {list(value.shape)}"
            raise ValueError(f"expected a tensor {cls.shape}{_VALUES[cls.values][1]}, got {got}")
        dtype = str(value.dtype).removeprefix("torch.")
        # every element its own bytes: a stride-0 or overlapping view of a 4 KB file could claim 10^12 rows, and
        # every check would then allocate for each one; ``meta`` holds no data
        if str(value.layout) != "torch.strided":
            raise ValueError(f"is a {str(value.layout).removeprefix('torch.')} tensor; expected a dense tensor")
        if value.device.type != "cpu":
            raise ValueError(f"is on device {value.device.type!r} (holds no data here); expected a CPU tensor")
        if value.is_quantized:
            raise ValueError(f"is a quantized {dtype} tensor; expected plain floats or integers")
        if value.numel() and value.numel() * value.element_size() > (held := value.untyped_storage().nbytes()):
            raise ValueError(f"claims {value.numel()} elements of shape {list(value.shape)} (strides "
                             f"{list(value.stride())}) over a storage of {held} bytes: an expanded or overlapping "
                             "view, not stored data")
        allowed, _, want = _VALUES[cls.values]
        if dtype not in allowed:
            raise ValueError(f"holds {dtype}, expected {want}")
        if dtype in FP8:
            value = value.float()
        elif dtype in UNSIGNED:
            value = value.long()
            if value.numel() and bool((value < 0).any()):  # past int64: no token id or position is that large
                raise ValueError(f"holds {dtype} values of 2**63 or more")
        if cls.values == "float" and value.numel() and not bool(torch.isfinite(value).all()):
            raise ValueError(f"holds {int((~torch.isfinite(value)).sum())} non-finite values (NaN or Inf)")
        return value


def tensor(shape: str, dims: tuple[int, ...], values: str = "any") -> type[Tensor]:
    return type(f"Tensor{shape}", (Tensor,), {"shape": shape, "dims": dims, "values": values, "__slots__": ()})


_IDS = tensor("[seq] (or [1, seq])", (1, 2), "int")
_MASK = tensor("[seq] (or [1, seq])", (1, 2))


# speculators' VllmHiddenStatesGenerator (data_{i}.pt): the fc took cat(hidden_states[:-1]).
@record("pass data_*.pt files written by speculators' legacy generator", name=LEGACY_PT)
class LEGACY(Record):
    input_ids: fix(_IDS, REGENERATE)
    hidden_states: fix(list_of(tensor("[seq, hidden]", (2,), "float"), min_len=2),
                       f"{REGENERATE} (fc inputs, then the verifier's last hidden state)")
    loss_mask: fix(_MASK, REGENERATE)


# speculators' hs_{i}.safetensors (vLLM extract_hidden_states): the fc took hidden_states[:, :-1]. Its loss mask is
# row i of the datasets table beside the hidden_states/ directory (TABLE_ROW); one in the file is read when no table.
@record("pass hs_*.safetensors files written by speculators", name=HS_SAFETENSORS)
class HS(Record):
    hidden_states: fix(tensor("[seq, layers, hidden]", (3,), "float"), REGENERATE)
    token_ids: fix(_IDS, REGENERATE)
    loss_mask: fix(_MASK, REGENERATE) = None


# speculators' offline data directory (docs/formats-and-convert.md): DATA/state.json and DATA/data-*.arrow (a datasets
# table) hold one row per sample, scored where its loss_mask is set; DATA/hidden_states/hs_{row}.safetensors its states.
@record(TABLE_FIX, name="state.json data file")
class TABLE_FILE(Record):
    filename: fix(text(255, nonempty=True), "name a data-*.arrow file of this directory (no path)")


@record(TABLE_FIX, name=TABLE_STATE)
class TABLE_STATE_RECORD(Record):
    _data_files: fix(list_of(TABLE_FILE, min_len=1, max_len=100_000), 'list the table\'s Arrow files ({"filename": '
                     '"data-00000-of-00001.arrow"}, as datasets\' save_to_disk writes them)')


@record(TABLE_FIX, name="speculators datasets table row")
class TABLE_ROW(Record):
    input_ids: fix(_IDS, TABLE_FIX)
    loss_mask: fix(_MASK, TABLE_FIX)


# SpecForge's scripts/prepare_hidden_states.py (*.ckpt, *.ckpt.gz): the fc took aux_hidden_state.
@record("pass *.ckpt / *.ckpt.gz files written by SpecForge", name=SPECFORGE_CKPT)
class SPECFORGE(Record):
    input_ids: fix(_IDS, REGENERATE)
    loss_mask: fix(_MASK, REGENERATE)
    hidden_state: fix(tensor("[1, seq, hidden]", (2, 3), "float"), REGENERATE)
    aux_hidden_state: fix(tensor("[1, seq, K*hidden]", (2, 3), "float"), REGENERATE)


# data_config.json: of speculators' many keys only the stored layers' ids are read, strictly (they say which stored
# tensor is which layer; distinct, one per tensor: checked by the reader).
@record(DESCRIBES, name="data_config.json hidden_states")
class STORED_LAYERS(Record):
    layer_ids: fix(list_of(integer(lo=-1)) | None, "list one layer id (>= -1, -1 = embedding output) per stored "
                   "tensor, or remove the file") = None


@record(DESCRIBES, name="data_config.json")
class DATA_CONFIG(Record):
    hidden_states: fix(STORED_LAYERS | None, 'correct the file (speculators writes {"hidden_states": {"layer_ids": '
                       '[...]}}), or remove it') = None


# sample_lengths.json ({"i": seq_len}) as read for data_{index}.pt: only that sample's entry is judged (the others
# describe other files), so the record is declared per index.
@functools.cache
def sample_lengths(index: str) -> type[Record]:
    length = fix(integer(lo=0), f"set it to data_{index}.pt's token count, or remove the file (it only describes the "
                 "samples)")
    struct = msgspec.defstruct("SampleLengths", [("length", length, None)], bases=(Record,), rename={"length": index})
    return record(DESCRIBES, name=LENGTHS_FILENAME)(struct)


# The capture dump (observe/dump.py) as ``compare`` reads it back: each batch's tensors, what the fc received, and of
# its .json metadata only ``layer_ids`` (reported per served chunk, and telling one server run from another).
@record(DUMP_FIX, name="capture dump batch")
class BATCH(Record):
    aux_hidden_states: fix(tensor("[T, K*H]", (2,), "float"), DUMP_FIX)
    positions: fix(tensor("[T]", (1,), "int"), DUMP_FIX)
    input_ids: fix(tensor("[T]", (1,), "int"), DUMP_FIX) = None  # absent when embeddings were served


@record(DUMP_FIX, name="capture dump metadata")
class METADATA(Record):
    layer_ids: fix(list_of(int | Literal[FINAL_NORM], max_len=100_000) | None, DUMP_FIX) = None


RECORDS = (LEGACY, HS, SPECFORGE, STORED_LAYERS, DATA_CONFIG, sample_lengths("0"), TABLE_FILE, TABLE_STATE_RECORD,
           TABLE_ROW, BATCH, METADATA)
