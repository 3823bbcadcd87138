"""What stock engines feed a draft's fc, as the doctor shows it: every release in the table
(:func:`stock_by_release`), another engine's reader (:func:`engine_capture`, with the vLLM plugin's policy in core),
and the ``eagle_config`` ids that make stock SGLang feed a manifest's ids or refuse to start
(:func:`fail_closed_eagle_config_ids`; vLLM's top-level value: :func:`vllm_fail_closed_ids`). One release's reading
is :func:`sglang_eagle3_capture.core.stock.stock_sglang_capture`, the one the plugin's refusal policy uses.
"""

from __future__ import annotations

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

__all__ = ["FailClosedIds", "engine_capture", "fail_closed_eagle_config_ids", "releases_label", "stock_by_release",
           "stock_on_supported", "stock_on_vllm", "stock_safe_eagle_config_ids", "vllm_fail_closed_ids",
           "with_stock_ids"]


def stock_by_release(draft_config: Mapping, num_hidden_layers: int, *, family: Family | str, file: Any = None
                     ) -> list[tuple[tuple[str, ...], StockCapture]]:
    """What every release in the table feeds, oldest first, consecutive releases that feed the same (and fail
    the same way) grouped: ``[((version, ...), StockCapture of the newest of them), ...]`` (``file``: the config's
    path, for errors)."""
    out: list[tuple[tuple[str, ...], StockCapture]] = []
    for release in release_table.all_releases():
        c = stock_sglang_capture(draft_config, num_hidden_layers, family=family, release=release, file=file)
        last = out[-1][1] if out else None
        if last is not None and (last.fed_layer_ids, last.problem is None, last.mis_fed is None) == \
                (c.fed_layer_ids, c.problem is None, c.mis_fed is None):
            out[-1] = ((*out[-1][0], release.version), c)
        else:
            out.append(((release.version,), c))
    return out


def stock_on_supported(draft_config: Mapping, num_hidden_layers: int, *, family: Family | str,
                       file: Any = None) -> list[StockCapture]:
    """What each supported release in the table, stock, makes of ``draft_config`` (oldest first; ``file``: the
    config's path, for errors)."""
    return [stock_sglang_capture(draft_config, num_hidden_layers, family=family, release=r, file=file)
            for r in release_table.all_releases() if r.supported]


def releases_label(versions: Sequence[str]) -> str:
    """``stock SGLang A`` for one release, ``stock SGLang A .. B`` for consecutive releases ``A`` to ``B``."""
    return f"stock SGLang {versions[0]}" + (f" .. {versions[-1]}" if len(versions) > 1 else "")


def stock_safe_eagle_config_ids(layer_ids: Sequence[int], *, family: Family | str,
                                release: Release | str | None = None) -> list[int]:
    """The ``eagle_config.eagle_aux_hidden_state_layer_ids`` that make stock SGLang ``release`` feed ``layer_ids``
    on ``family`` (as far as it can: captures arrive in ascending order, and the loop never reaches layer N-1).

    For ``shift-if-first-is-1`` (DeepSeek, GLM-4.7-Flash): capture-loop indices, used as given when the first is
    not 1; when the first would be 1 (layer id 0 first) it is moved to the end, since SGLang captures by
    membership in ascending loop order. For ``always-shift`` and ``keep-if-max-is-N`` (GPT-OSS; layer ids are at
    most N-1, so never read as loop indices): the layer ids themselves.
    :mod:`.convert` writes these; the plugin's loader compares a converted config's ids with them.
    :data:`~..core.layer_ids.FINAL_NORM` has no stock expression at all (no stock loop or rule captures the final norm's
    output): ``ValueError``; :func:`fail_closed_eagle_config_ids` answers the fail-closed object for it.

    Example::

        >>> stock_safe_eagle_config_ids([-1, 2, 30], family="deepseek_v2")
        [0, 3, 31]
        >>> stock_safe_eagle_config_ids([0, 29, 57], family="deepseek_v2")
        [30, 58, 1]
    """
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
    """The ``eagle_config`` ids value that makes every supported stock SGLang release either feed ``layer_ids``
    exactly, in their order, or refuse to start: :func:`stock_safe_eagle_config_ids` when each supported release
    feeds them exactly from it, else :data:`~..core.config_keys.FAIL_CLOSED_IDS`. The inexpressible cases are those the
    stock rules and loops cannot reach: a lone layer id 0 on DeepSeek (read as output-of-layer), layer ``N-1`` (past
    the loop, except GPT-OSS), an fc order that is not ascending (captures arrive in loop order), layer id -1 where a
    release's loop crashes at the embedding, any layer id >= 0 where a release's loop captures branch outputs
    (``Release.branch_captures``: Gemma 3), and ``"final_norm"`` (the final norm's output: no stock release
    captures it, GPT-OSS's own final-norm capture included, which takes the norm's input).

    Example::

        >>> fail_closed_eagle_config_ids([-1, 2, 30], 61, family="deepseek_v2").value
        [0, 3, 31]
        >>> fail_closed_eagle_config_ids([30, 2], 61, family="deepseek_v2").exact
        False
        >>> fail_closed_eagle_config_ids([-1, 1, "final_norm"], 7, family="llama").exact
        False
    """
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
    """``eagle_config`` (a draft config's, or None) holding ``value`` (a :class:`FailClosedIds` value: stock-safe
    capture ids or the fail-closed object) as its ids, every other key kept but the layer-id mark: the ids it marked
    are now what stock SGLang reads, so a mark left beside them would tell the plugin they are layer ids (it would
    refuse them against the manifest, or feed other layers). ``convert`` and ``manifest write --fail-closed`` write
    the ids through this one function.

    Example::

        >>> with_stock_ids({IDS_KEY: [-1, 2, 30], CONVENTION_KEY: "sglang-eagle3-capture/layer-id"}, [0, 3, 31])
        {'eagle_aux_hidden_state_layer_ids': [0, 3, 31]}
    """
    out = {k: v for k, v in (eagle_config.items() if isinstance(eagle_config, Mapping) else ()) if k != CONVENTION_KEY}
    out[IDS_KEY] = value
    return out
