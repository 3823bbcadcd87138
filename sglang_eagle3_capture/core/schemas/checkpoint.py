"""A draft's checkpoint files: the safetensors index (``model.safetensors.index.json``) and each safetensors header.

Both decide which bytes become which weight, so ``weight_map`` and every header entry are strict; the index's
``metadata`` and any other key it holds are kept as written (``convert`` copies them), as are the header's
``__metadata__`` strings.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ..errors import InputError
from ..records import Field, Int, ListOf, MapOf, Optional, Record, Str

REEXPORT = "re-export or re-download the checkpoint"

# safetensors 0.8's dtypes and their sizes in bits (sub-byte types pack; a tensor's bytes must come out whole).
DTYPE_BITS = {"BOOL": 8, "U8": 8, "I8": 8, "F8_E5M2": 8, "F8_E4M3": 8, "F8_E8M0": 8, "F4": 4, "F6_E2M3": 6,
              "F6_E3M2": 6, "I16": 16, "U16": 16, "F16": 16, "BF16": 16, "I32": 32, "U32": 32, "F32": 32, "C64": 64,
              "F64": 64, "I64": 64, "U64": 64}
MAX_DIMS = 16


@dataclass(frozen=True)
class ShardName(Str):
    """A shard file name next to the index: never a path that leaves the checkpoint directory (absolute, ``..``)
    or enters a subdirectory (two shards could then share a name)."""

    nonempty: bool = True

    def describe(self) -> str:
        return "a shard file name in the checkpoint directory (no directory part)"

    def check(self, value: Any, path: str) -> str:
        name = super().check(value, path)
        if "/" in name or "\\" in name or name in (".", "..") or "\0" in name:
            raise self._refuse(value, path)
        return name


INDEX = Record("safetensors index", (
    Field("weight_map", MapOf(ShardName()), "keep every shard next to the index and list each tensor by its shard's "
          f"file name; {REEXPORT}"),
), unknown="keep", error=InputError, fix=REEXPORT)

HEADER = Record("safetensors header", (
    Field("__metadata__", Optional(MapOf(Str())), REEXPORT, required=False),
), unknown="keep", error=InputError, fix=REEXPORT)  # the other keys are tensors, each a TENSOR

TENSOR = Record("safetensors tensor entry", (
    Field("dtype", Str(choices=tuple(DTYPE_BITS)), REEXPORT),
    Field("shape", ListOf(Int(lo=0), max_len=MAX_DIMS), REEXPORT),
    Field("data_offsets", ListOf(Int(lo=0), min_len=2, max_len=2), REEXPORT),
), unknown="keep", error=InputError, fix=REEXPORT)

RECORDS = (INDEX, HEADER, TENSOR)
