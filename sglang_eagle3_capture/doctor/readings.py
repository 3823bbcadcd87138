"""What stock engines feed a draft's fc, as the doctor shows it (one release's reading is
:func:`sglang_eagle3_capture.core.stock.stock_sglang_capture`, as the plugin's policy uses it), and the ``eagle_config``
ids that make stock SGLang feed a manifest's ids or refuse to start (docs/manifest.md)."""

from __future__ import annotations

from itertools import groupby
from typing import Any, Mapping, Sequence

from ..core.config_keys import CONVENTION_KEY, FAIL_CLOSED_IDS, IDS_KEY
from ..core.families import Family
from ..core.layer_ids import FINAL_NORM, hidden_state_indices
from ..core.releases.schema import ALWAYS_SHIFT, KEEP_IF_MAX_IS_N, SHIFT_IF_FIRST_IS_1, Release
from ..core.stock import (
    FailClosedIds,
    StockCapture,
    engine_capture,
    family_named,
    stock_on_vllm,
    stock_rule,
    stock_sglang_capture,
    vllm_fail_closed_ids,
)
from . import release_table

__all__ = ["engine_capture", "fail_closed_eagle_config_ids", "releases_label", "stock_by_release", "stock_on_supported",
           "stock_on_vllm", "stock_safe_eagle_config_ids", "vllm_fail_closed_ids", "with_stock_ids"]


def stock_by_release(draft_config: Mapping, num_hidden_layers: int, *, family: Family | str, file: Any = None
                     ) -> list[tuple[tuple[str, ...], StockCapture]]:
    """``[((version, ...), newest's StockCapture), ...]``: consecutive releases that feed (and fail) alike grouped."""
    captures = [(r.version, stock_sglang_capture(draft_config, num_hidden_layers, family=family, release=r, file=file))
                for r in release_table.all_releases()]
    groups = [list(g) for _, g in groupby(captures, key=lambda vc: (vc[1].fed_layer_ids, vc[1].problem is None,
                                                                    vc[1].mis_fed is None))]
    return [(tuple(version for version, _ in g), g[-1][1]) for g in groups]


def stock_on_supported(draft_config: Mapping, num_hidden_layers: int, *, family: Family | str,
                       file: Any = None) -> list[StockCapture]:
    return [stock_sglang_capture(draft_config, num_hidden_layers, family=family, release=r, file=file)
            for r in release_table.all_releases() if r.supported]


def releases_label(versions: Sequence[str]) -> str:
    """``stock SGLang A`` for one release, ``stock SGLang A .. B`` for consecutive releases ``A`` to ``B``."""
    return f"stock SGLang {versions[0]}" + (f" .. {versions[-1]}" if len(versions) > 1 else "")


def stock_safe_eagle_config_ids(layer_ids: Sequence[int], *, family: Family | str,
                                release: Release | str | None = None) -> list[int]:
    """The ``eagle_config`` ids that make stock ``release`` feed ``layer_ids``, as far as it can: the ids themselves
    (always-shift, keep-if-max-is-N), else loop indices with a leading 1 moved last (SGLang captures by membership)."""
    if FINAL_NORM in layer_ids:
        raise ValueError(f"layer ids {list(layer_ids)}: no stock SGLang id list captures {FINAL_NORM!r}")
    rule = stock_rule(family, release)
    if rule in (ALWAYS_SHIFT, KEEP_IF_MAX_IS_N):  # ids <= N-1 < N: both read them as output-of-layer ids
        return list(layer_ids)
    loop = hidden_state_indices(layer_ids)
    if rule == SHIFT_IF_FIRST_IS_1 and len(loop) > 1 and loop[0] == 1:
        loop = loop[1:] + loop[:1]
    return loop


def fail_closed_eagle_config_ids(layer_ids: Sequence[int], num_hidden_layers: int, *,
                                 family: Family | str) -> FailClosedIds:
    """:func:`stock_safe_eagle_config_ids` when every supported stock release then feeds ``layer_ids`` exactly, else
    :data:`~..core.config_keys.FAIL_CLOSED_IDS` (refused at startup), with why."""
    fam = family_named(family)
    if FINAL_NORM in layer_ids:
        why = (f"no stock SGLang release captures the final norm's output ({FINAL_NORM!r}): every stock capture loop "
               "takes residual streams, before the norm",)
        return FailClosedIds(dict(FAIL_CLOSED_IDS), False, why)
    ids = stock_safe_eagle_config_ids(layer_ids, family=fam)
    why = [c.describe() for c in stock_on_supported({"eagle_config": {IDS_KEY: ids}}, num_hidden_layers, family=fam)
           if c.fed_layer_ids != tuple(layer_ids) or c.problem or c.mis_fed]
    return FailClosedIds(ids, True) if not why else FailClosedIds(dict(FAIL_CLOSED_IDS), False, tuple(why))


def with_stock_ids(eagle_config: Any, value: Any) -> dict:
    """``eagle_config`` with ``value`` as its ids, minus the layer-id mark (it would say they are layer ids)."""
    out = {k: v for k, v in (eagle_config.items() if isinstance(eagle_config, Mapping) else ()) if k != CONVENTION_KEY}
    out[IDS_KEY] = value
    return out
