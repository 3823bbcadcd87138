"""What every foreign draft format provides, and the helpers its readers share.

A format is one object in :data:`.FORMATS` with ``name``, ``detect(cfg)``, ``layer_ids(cfg, target_hf_config, file,
trained_with=None, *, fc_in_features=None)`` (a :class:`ResolvedLayerIds`, fc order), ``to_sglang_config(cfg,
file)`` and ``drops(tensor_name)`` (training-only tensors ``convert`` drops). ``cfg`` has always passed
:func:`.check_draft_config`."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ...core.errors import InputError, brief
from ...core.layer_ids import check_layer_ids
from ...core.schemas.draft import MATH_FLAGS, MAX_DIM, SGLANG_ARCH  # noqa: F401  (the one definition of each)

CONVENTION_SGLANG = "sglang-output-of-layer"
CONVENTION_VLLM = "vllm-hf-index"
CONVENTION_EAGLE_DEFAULT = "eagle-fixed-hf-index"
CONVENTION_LAYER_ID = "layer-id"


@dataclass(frozen=True)
class ResolvedLayerIds:
    """Layer ids read from a foreign format, in fc order, with provenance and messages for the user."""

    layer_ids: tuple[int, ...]
    provenance: dict
    messages: tuple[str, ...] = ()


@dataclass(frozen=True)
class Reading:
    """One possible meaning of an id list: the layer ids, and the trainers/releases behind it."""

    layer_ids: tuple[int | str, ...]
    who: tuple[str, ...]
    versions: tuple[str, ...] = ()  # the SGLang releases among ``who``

    def describe(self) -> str:
        """``layer ids [..]: who, who``."""
        return f"layer ids {list(self.layer_ids)}: {'; '.join(self.who)}"


def fc_chunks(fc_in_features: int | None, hidden_size: int) -> int | None:
    """How many target hidden states an fc of input width ``fc_in_features`` takes (None: unknown, or not a whole
    number of ``hidden_size`` chunks, which the fc-width checks report with the weights file)."""
    if fc_in_features is None or hidden_size <= 0 or fc_in_features % hidden_size:
        return None
    return fc_in_features // hidden_size


def validated(ids: list[int], n_layers: int, file: str, field: str | None, original: Any) -> tuple[int, ...]:
    """Range- and duplicate-checked layer ids; errors name ``file`` and ``field``."""
    try:
        return check_layer_ids(ids, n_layers, file=file, field=field)
    except InputError as e:
        raise InputError(file, field, f"{e.problem} (as written: {brief(original)})",
                         "correct the file, or pass --layer-ids explicitly") from e


def ascending(ids: list[int], where: str, messages: list[str]) -> list[int]:
    """Every capture loop appends in ascending order: the ids sorted, with a message when the file listed them
    otherwise."""
    if ids != sorted(ids):
        messages.append(f"{where}: listed as {ids}; the capture loop it was trained with appends hidden states in "
                        f"ascending layer order, so the fc saw them as {sorted(ids)}")
    return sorted(ids)
