"""What stock engines feed a draft's fc: the readings of a draft ``config.json`` the doctor compares.

:func:`stock_sglang_capture` mirrors, per release (:mod:`.releases`) and family (:mod:`.families`), SGLang's
``spec_aux_hidden_state.py::_resolve_eagle_aux_hidden_state`` (ids only from the nested ``eagle_config``, anything
else means the default), the family's ``set_eagle3_layers_to_capture`` (default ``[2, N//2, N-3]``, explicit ids
read by the release's stock rule) and the capture loop (ascending, ``0..N-1``; index ``N`` as the family's
``stock_past_loop`` says). The fail-closed object (:data:`.config_keys.FAIL_CLOSED_IDS`) makes every stock rule
raise at startup (:data:`_FAIL_CLOSED_PROBLEM`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping, Sequence

from . import families, releases
from .config_keys import IDS_KEY, VLLM_FAIL_CLOSED_IDS, is_fail_closed, is_vllm_fail_closed
from .errors import InputError, brief
from .families import Family
from .families.schema import N_COUNT_ERROR, N_INDEX_ERROR
from .layer_ids import (
    EMBEDDING_LAYER_ID,
    FINAL_NORM,
    hidden_state_indices,
    is_int,
    is_layer_id,
    last_layer_id,
    layer_ids_of_loop,
)
from .releases.schema import ALWAYS_SHIFT, KEEP_IF_MAX_IS_N, SHIFT_IF_FIRST_IS_1, EngineReader, Release
from .target_config import path_get

__all__ = ["FailClosedIds", "StockCapture", "default_low_mid_high_indices", "engine_capture", "family_named",
           "stock_on_vllm", "stock_rule", "stock_sglang_capture", "vllm_fail_closed_ids"]

@dataclass(frozen=True)
class StockCapture:
    """How one stock SGLang release wires a draft config on one target family."""

    sglang_version: str  # or another engine's reader name (``engine`` then "")
    family: str
    config_ids: tuple[int, ...] | None  # what SGLang read from eagle_config; None = absent -> default
    rule: str  # "default", "always-shift", "shifted (first id is 1)", "as loop indices", "no aux capture", ...
    loop_indices: tuple[int, ...]  # layers_to_capture as SGLang sets it
    fed_layer_ids: tuple[int, ...]  # what the fc receives, in the order it receives it
    problem: str | None  # None when SGLang would run; else what goes wrong
    engine: str = "SGLang"
    refuses_at_startup: bool = False  # the problem stops the server before it serves (nothing is ever fed)
    # it runs and fills the fc, but not with the hidden states fed_layer_ids name: what it feeds instead (None: it does)
    mis_fed: str | None = None

    def describe(self) -> str:
        """One line for humans."""
        if self.refuses_at_startup and not self.loop_indices:
            return f"stock SGLang {self.sglang_version}: {self.problem}"
        ids = "absent" if self.config_ids is None else list(self.config_ids)
        who, key = ("stock SGLang", "eagle_config ids") if self.engine == "SGLang" else ("", "config ids")
        out = (f"{who} {self.sglang_version}".strip() + f": {key} {ids} -> {self.rule} -> loop indices "
               f"{list(self.loop_indices)} -> fc fed layer ids {list(self.fed_layer_ids)}")
        return out + "".join(f" [{why}]" for why in (self.problem, self.mis_fed) if why)


def default_low_mid_high_indices(num_hidden_layers: int) -> list[int]:
    """The low/mid/high default ``[2, N//2, N-3]`` of EAGLE, vLLM, speculators and stock SGLang: HF indices (==
    SGLang loop indices), not layer ids."""
    n = num_hidden_layers
    return [2, n // 2, n - 3]


def _release_of(release: Release | str | None) -> Release:
    return releases.newest() if release is None else releases.get(release) if isinstance(release, str) else release


def family_named(family: Family | str) -> Family:
    if isinstance(family, Family):
        return family
    found = next((f for f in families.all_families() if f.name == family), None)
    if found is None:
        raise KeyError(f"no target family {family!r}; known: {', '.join(f.name for f in families.all_families())}")
    return found


def stock_rule(family: Family | str, release: Release | str | None = None) -> str:
    """How stock SGLang ``release`` reads explicit ids on ``family`` (the release's override, else the family's)."""
    fam = family_named(family)
    return _release_of(release).stock_rules.get(fam.name, fam.stock_rule)


def _int_ids(value: Any, field: str, file: Any) -> list[int]:
    """``value`` as a list of integer ids, or an :class:`InputError` naming ``file`` and ``field``."""
    if not isinstance(value, (list, tuple)) or not all(is_int(i) for i in value):
        raise InputError(file, field, f"expected a list of integer layer ids, got {brief(value)}",
                         "write the ids the draft was trained on as a JSON list of integers (or remove the field to "
                         "use the engine's default)")
    return list(value)


def _read_ids_like_sglang(draft_config: Mapping, file: Any) -> tuple[bool, list[int] | None]:
    """(use_aux_hidden_state, ids or None) as ``_resolve_eagle_aux_hidden_state`` reads them; ids that are not a
    list of integers raise :class:`InputError` naming ``file``."""
    ec = draft_config.get("eagle_config")
    if not isinstance(ec, Mapping):
        return True, None
    use_aux = ec.get("use_aux_hidden_state", True)
    ids = ec.get(IDS_KEY)
    carries_final_norm = isinstance(ids, (list, tuple)) and FINAL_NORM in ids and all(is_layer_id(i) for i in ids)
    if is_fail_closed(ids) or carries_final_norm:  # read as-is: see _FAIL_CLOSED_PROBLEM and _stock_on_token
        return bool(use_aux), ids
    return bool(use_aux), None if ids is None else _int_ids(ids, f"eagle_config.{IDS_KEY}", file)


def _stock_on_token(rel: Release, fam: Family, ids: list, n: int) -> StockCapture:
    """What stock ``rel`` does with ``ids`` that carry :data:`~.layer_ids.FINAL_NORM`: ``val + 1`` and ``max(ids)``
    raise a TypeError at startup; DeepSeek's heuristic with a first id other than 1 keeps the list as loop indices,
    where the string matches none, so fewer states are captured than the fc takes."""
    rule = stock_rule(fam, rel)
    if rule == SHIFT_IF_FIRST_IS_1 and ids[0] != 1:
        loop = [i for i in ids if is_int(i)]
        fed = layer_ids_of_loop(loop, n)
        short = (f"the loop captures {len(fed)} of the {len(ids)} states the fc takes ({FINAL_NORM!r} and any id "
                 "outside the loop match no loop index)")
        problem = (f"{short} and fails at the first forward ('captured {len(fed)} of {len(ids)} aux hidden states')"
                   if fam.stock_past_loop == N_COUNT_ERROR else
                   f"{short}, silently (its list is never counted), and the draft's fc fails at the first draft extend "
                   "on its input width")
        return StockCapture(rel.version, fam.name, tuple(ids), "as loop indices", tuple(loop), fed, problem)
    call = "`max(layer_ids) == num_layers`" if rule == KEEP_IF_MAX_IS_N else "`[val + 1 for val in layer_ids]`"
    return StockCapture(rel.version, fam.name, tuple(ids), "fails on the token", (), (),
                        f"eagle_config.{IDS_KEY} holds {FINAL_NORM!r}, this package's layer id for the final norm's "
                        f"output, which stock SGLang cannot read: set_eagle3_layers_to_capture raises a TypeError at "
                        f"startup ({call} over a string)", refuses_at_startup=True)


def _loop_indices_by_rule(rule: str, ids: list[int], n: int) -> tuple[str, list[int]]:
    if rule == ALWAYS_SHIFT:
        return "always-shift", hidden_state_indices(ids)
    if rule == SHIFT_IF_FIRST_IS_1:
        if ids and ids[0] == 1:
            return "shifted (first id is 1)", hidden_state_indices(ids)
        return "as loop indices", list(ids)
    if rule == KEEP_IF_MAX_IS_N:
        if ids and max(ids) == n:
            return "as loop indices (max is N)", list(ids)
        return "shifted", hidden_state_indices(ids)
    raise ValueError(f"unknown stock rule {rule!r}")


def stock_sglang_capture(draft_config: Mapping, num_hidden_layers: int, *, family: Family | str,
                         release: Release | str | None = None, file: Any = None) -> StockCapture:
    """What stock SGLang ``release`` (default: the newest supported) would capture for ``draft_config`` on an
    ``N``-layer target of ``family``; ``file`` is named in an error about its ids."""
    rel, fam, n = _release_of(release), family_named(family), num_hidden_layers
    use_aux, ids = _read_ids_like_sglang(draft_config, file)
    if use_aux and fam.name in rel.absent_families:
        closed = is_fail_closed(ids)
        why = ("the fail-closed object stops it at startup (AttributeError where the class has no "
               "set_eagle3_layers_to_capture, TypeError where it inherits another model file's hook)" if closed else
               "nothing is fed")
        return StockCapture(rel.version, fam.name, None if ids is None or closed else tuple(ids), "no EAGLE-3 capture",
                            (), (), f"SGLang {rel.version} has no EAGLE-3 capture for the {fam.name} family (its "
                            f"model file or its set_eagle3_layers_to_capture is added in a later release): {why}",
                            refuses_at_startup=closed)
    if not use_aux:
        return StockCapture(rel.version, fam.name, None, "no aux capture", (), (),
                            "eagle_config.use_aux_hidden_state is false: nothing is captured and the fc is skipped "
                            "(SGLang's width check), so the draft never sees target layers")
    if is_fail_closed(ids):
        return StockCapture(rel.version, fam.name, None, "fail-closed", (), (), _FAIL_CLOSED_PROBLEM[
            stock_rule(fam, rel)], refuses_at_startup=True)
    if ids is None:
        config_ids, rule, loop = None, "default", default_low_mid_high_indices(n)
    elif FINAL_NORM in ids:
        return _stock_on_token(rel, fam, list(ids), n)
    else:
        config_ids = tuple(ids)
        rule, loop = _loop_indices_by_rule(stock_rule(fam, rel), list(ids), n)
    fed = layer_ids_of_loop(loop, n)
    if n in loop and fam.name in rel.final_norm_captures:  # the family captures loop index N at its final norm
        fed = (*fed, last_layer_id(n))
    problem = _stock_problem(fam, rel, loop, fed, n)
    at_startup = fam.stock_past_loop == N_INDEX_ERROR and any(i >= n for i in loop)
    return StockCapture(rel.version, fam.name, config_ids, rule, tuple(loop), fed, problem,
                        refuses_at_startup=at_startup and problem is not None,
                        mis_fed=None if problem else _branch_outputs(fam, rel, fed))


def _branch_outputs(fam: Family, rel: Release, fed: tuple[int, ...]) -> str | None:
    """What stock ``rel`` feeds in place of layer ids >= 0 on a family whose loop captures branch outputs."""
    wrong = [i for i in fed if i != EMBEDDING_LAYER_ID]
    if fam.name not in rel.branch_captures or not wrong:
        return None
    return (f"for layer ids {wrong} SGLang {rel.version} feeds each layer's branch output (its last norm's output, "
            "without the residual it returns beside it), not the residual stream the ids name (HF hidden_states[k+1])")


_FAIL_CLOSED_REFUSED = (f"eagle_config.{IDS_KEY} is sglang-eagle3-capture's fail-closed object (no id list expresses "
                        "the manifest to stock SGLang), so the server refuses to start: set_eagle3_layers_to_capture "
                        "raises ")
# NOTE: what each stock rule's set_eagle3_layers_to_capture (e.g. models/deepseek_v2.py, models/llama.py,
# models/gpt_oss.py in 0.5.23) does with a one-key object, called from the target ModelRunner's initialisation.
_FAIL_CLOSED_PROBLEM = {
    SHIFT_IF_FIRST_IS_1: _FAIL_CLOSED_REFUSED + "KeyError: 0 (`if layer_ids and layer_ids[0] == 1`)",
    ALWAYS_SHIFT: _FAIL_CLOSED_REFUSED + 'TypeError: can only concatenate str (not "int") to str (`[val + 1 for val '
                                         'in layer_ids]`)',
    KEEP_IF_MAX_IS_N: _FAIL_CLOSED_REFUSED + 'TypeError: can only concatenate str (not "int") to str (`max(layer_ids) '
                                             '== num_layers` is false, then `[val + 1 for val in layer_ids]`)',
}


def _stock_problem(fam: Family, rel: Release, loop: list[int], fed: tuple[int, ...], n: int) -> str | None:
    """What goes wrong when stock ``rel`` captures ``loop`` on ``fam`` (None: it runs and feeds ``fed``)."""
    if fam.name in rel.embedding_crashes and EMBEDDING_LAYER_ID in fed:
        return (f"{rel.version} computes hidden_states + residual with residual None at loop index 0: TypeError at "
                "the first forward")
    past = sorted(i for i in set(loop) if i >= n)
    if fam.stock_past_loop == N_INDEX_ERROR and past:
        return (f"loop indices {past} are never reached (the loop runs 0..{n - 1}): SGLang sets a capture flag on "
                f"self.layers[{past[0]}] while configuring and fails with IndexError at startup")
    if len(fed) == len(loop):
        return None
    missed = sorted(set(loop) - set(hidden_state_indices(fed)))
    what = (f"loop indices {missed} are never reached (the loop runs 0..{n - 1}) or repeat: SGLang captures "
            f"{len(fed)} of {len(loop)} states")
    if fam.stock_past_loop == N_COUNT_ERROR:
        return f"{what} and fails at the first forward ('captured {len(fed)} of {len(loop)} aux hidden states')"
    return (f"{what}, silently (its list is never counted), and the draft's fc fails at the first draft extend on "
            f"its input width ({len(fed)} hidden states where it takes {len(loop)})")


@dataclass(frozen=True)
class FailClosedIds:
    """What ``convert`` and ``manifest write --fail-closed`` write per engine: ``value`` (the ids, or the engine's
    fail-closed value); ``exact``: every stock runner feeds the manifest's ids from it; ``why``: what it does else."""

    value: Any
    exact: bool
    why: tuple[str, ...] = ()


def engine_capture(draft_config: Mapping, num_hidden_layers: int, *, family: Family | str,
                   reader: EngineReader, file: Any = None) -> StockCapture:
    """What another engine's runner (``reader``) feeds the fc for ``draft_config``; ``file`` is named in an error.

    Mirrors vLLM's ``_get_eagle3_aux_layers_from_config`` (0.32 ``v1/worker/gpu_model_runner.py:5251-5285``; Model
    Runner V2's ``eagle3_utils.py``): the first truthy key of ``reader.keys`` decides; only a list or tuple counts
    (else the default, silently); the ids are HF indices, sorted and deduplicated, so a string in the list raises
    while the model loads, except on a ``reader.unsorted`` family, whose loop captures only the integers.
    """
    fam, n = family_named(family), num_hidden_layers
    key, ids = next(((k, v) for k in reader.keys if (v := path_get(draft_config, k))), (None, None))
    if ids is not None and not isinstance(ids, (list, tuple)):
        what = "the SGLang fail-closed object" if is_fail_closed(ids) else brief(ids, 40)
        config_ids, rule, loop = None, f"{key}: {what}, not a list -> default", default_low_mid_high_indices(n)
        ids = None
    elif ids is None:
        config_ids, rule, loop = None, "default", default_low_mid_high_indices(n)
    elif any(isinstance(i, str) for i in ids):
        what = "the vLLM fail-closed value" if is_vllm_fail_closed(ids) else f"an id list with {brief(ids, 60)}"
        if fam.name not in reader.unsorted:
            return StockCapture(reader.name, fam.name, None, f"{key}: {what}", (), (),
                                f"{key} is {what}: sorted(set(ids)) over an integer and a string raises a TypeError "
                                "while the model runner loads the model (interfaces.py, _set_aux_hidden_state_layers)",
                                engine="", refuses_at_startup=True)
        config_ids, rule = None, f"{key}: {what}, its integers as HF indices"
        loop = sorted({i for i in ids if is_int(i)})
        ids = list(ids)
    else:
        ids = _int_ids(ids, key, file)
        config_ids, rule = tuple(ids), f"{key} as HF indices"
        loop = sorted(set(ids))
    fed = tuple(i - 1 for i in loop if 0 <= i <= n)  # HF index N is the last layer's output there
    problem = None
    if fam.name in reader.embedding_crashes and 0 in loop:
        problem = "its capture loop computes hidden_states + residual before layer 0: TypeError at the first forward"
    elif len(fed) != len(loop) or (ids is not None and len(loop) != len(ids)):
        problem = f"ids outside [0, {n}], repeated or not integers: fewer hidden states reach the fc than it takes"
    return StockCapture(reader.name, fam.name, config_ids, rule, tuple(loop), fed, problem, engine="")


def stock_on_vllm(draft_config: Mapping, num_hidden_layers: int, *, family: Family | str) -> list[StockCapture]:
    """What each vLLM model runner of each release in the table, stock, makes of ``draft_config`` (oldest first)."""
    return [engine_capture(draft_config, num_hidden_layers, family=family, reader=r) for r in releases.other_engines()]


def vllm_fail_closed_ids(layer_ids: Sequence, num_hidden_layers: int, *, family: Family | str) -> FailClosedIds:
    """The top-level ``eagle_aux_hidden_state_layer_ids`` (read first by every stock vLLM runner, never by SGLang)
    that makes every vLLM runner in the table feed ``layer_ids`` exactly or refuse to start: the HF indices when each
    runner feeds them exactly, else :data:`~.config_keys.VLLM_FAIL_CLOSED_IDS` (for an fc order that is not ascending,
    ``"final_norm"``, or layer id -1 on a family vLLM captures inline)."""
    fam = family_named(family)
    if FINAL_NORM in layer_ids:
        return FailClosedIds(list(VLLM_FAIL_CLOSED_IDS), False, (f"no stock vLLM index names the final norm's output "
                                                                  f"({FINAL_NORM!r}): index N is the last layer's "
                                                                  "output before it",))
    ids = hidden_state_indices(layer_ids)
    why = [c.describe() for c in stock_on_vllm({IDS_KEY: ids}, num_hidden_layers, family=fam)
           if c.fed_layer_ids != tuple(layer_ids) or c.problem]
    return FailClosedIds(ids, True) if not why else FailClosedIds(list(VLLM_FAIL_CLOSED_IDS), False, tuple(why))
