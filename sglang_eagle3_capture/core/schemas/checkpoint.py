"""A draft's safetensors index and headers: they decide which bytes become which weight, so ``weight_map`` and every
header entry are strict; any other key is kept as written (``convert`` copies it)."""

from __future__ import annotations

from typing import Annotated, Literal

from msgspec import Meta

from ..records import Record, fix, integer, list_of, map_of, record, text

REEXPORT = "re-export or re-download the checkpoint"

# safetensors 0.8's dtypes and their sizes in bits (sub-byte types pack; a tensor's bytes must come out whole).
DTYPE_BITS = {"BOOL": 8, "U8": 8, "I8": 8, "F8_E5M2": 8, "F8_E4M3": 8, "F8_E8M0": 8, "F4": 4, "F6_E2M3": 6,
              "F6_E3M2": 6, "I16": 16, "U16": 16, "F16": 16, "BF16": 16, "I32": 32, "U32": 32, "F32": 32, "C64": 64,
              "F64": 64, "I64": 64, "U64": 64}
MAX_DIMS = 16

# A shard file name next to the index: never absolute, ``..`` or in a subdirectory (two shards could share a name).
SHARD_NAME = Annotated[str, Meta(min_length=1, max_length=10_000, pattern=r"^(?!\.\.?$)[^/\\\x00]+$",
                                description="a shard file name in the checkpoint directory (no directory part)")]


@record(REEXPORT, name="safetensors index")
class INDEX(Record):
    weight_map: fix(map_of(SHARD_NAME), "keep every shard next to the index and list each tensor by its shard's file "
                    f"name; {REEXPORT}")


@record(REEXPORT, name="safetensors header")
class HEADER(Record, rename={"meta": "__metadata__"}):  # the other keys are tensors, each a TENSOR
    meta: fix(map_of(text()) | None, REEXPORT) = None


@record(REEXPORT, name="safetensors tensor entry")
class TENSOR(Record):
    dtype: fix(Literal[tuple(DTYPE_BITS)], REEXPORT)
    shape: fix(list_of(integer(lo=0), max_len=MAX_DIMS), REEXPORT)
    data_offsets: fix(list_of(integer(lo=0), min_len=2, max_len=2), REEXPORT)


RECORDS = (INDEX, HEADER, TENSOR)
