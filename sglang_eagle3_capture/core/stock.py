"""What stock engines feed a draft's fc: the readings of a draft ``config.json`` per release and family that the
doctor compares (docs/releases.md, docs/families.md).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping, Sequence

from . import families, releases
from .config_keys import IDS_KEY, VLLM_FAIL_CLOSED_IDS, is_fail_closed, is_vllm_fail_closed
from .errors import InputError, brief
from .families import Family
from .families.schema import N_COUNT_ERROR, N_INDEX_ERROR
from .layer_ids import EMBEDDING_LAYER_ID, FINAL_NORM, hidden_state_indices, is_int, is_layer_id, layer_ids_of_loop
from .releases.schema import ALWAYS_SHIFT, KEEP_IF_MAX_IS_N, SHIFT_IF_FIRST_IS_1, EngineReader, Release
from .target_config import path_get


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
    """EAGLE's, vLLM's, speculators' and stock SGLang's default: HF indices (== SGLang loop indices), not layer ids."""
    return [2, num_hidden_layers // 2, num_hidden_layers - 3]


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
    if not isinstance(value, (list, tuple)) or not all(is_int(i) for i in value):
        raise InputError(file, field, f"expected a list of integer layer ids, got {brief(value)}",
                         "write the ids the draft was trained on as a JSON list of integers (or remove the field to "
                         "use the engine's default)")
    return list(value)


def _stock_on_token(rel: Release, fam: Family, ids: list, n: int) -> StockCapture:
    """What stock ``rel`` does with ``ids`` that carry FINAL_NORM: a TypeError at startup, or (DeepSeek's heuristic,
    first id not 1) loop indices the string matches none of."""
    rule = stock_rule(fam, rel)
    if rule == SHIFT_IF_FIRST_IS_1 and ids[0] != 1:
        loop = [i for i in ids if is_int(i)]
        fed = layer_ids_of_loop(loop, n)
        problem = _shortfall(fam, f"the loop captures {len(fed)} of the {len(ids)} states the fc takes ({FINAL_NORM!r} "
                             "and any id outside the loop match no loop index)", len(fed), len(ids))
        return StockCapture(rel.version, fam.name, tuple(ids), "as loop indices", tuple(loop), fed, problem)
    call = "`max(layer_ids) == num_layers`" if rule == KEEP_IF_MAX_IS_N else "`[val + 1 for val in layer_ids]`"
    return StockCapture(rel.version, fam.name, tuple(ids), "fails on the token", (), (),
                        f"eagle_config.{IDS_KEY} holds {FINAL_NORM!r} (the final norm's output), which stock SGLang's "
                        f"set_eagle3_layers_to_capture fails on: TypeError at startup ({call} over a string)",
                        refuses_at_startup=True)


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


# What each stock rule's set_eagle3_layers_to_capture (e.g. models/deepseek_v2.py, models/llama.py,
# models/gpt_oss.py in 0.5.23) raises on the one-key fail-closed object, from the target ModelRunner's initialisation.
_CONCAT = 'TypeError: can only concatenate str (not "int") to str (`'
_FAIL_CLOSED_RAISES = {
    SHIFT_IF_FIRST_IS_1: "KeyError: 0 (`if layer_ids and layer_ids[0] == 1`)",
    ALWAYS_SHIFT: _CONCAT + "[val + 1 for val in layer_ids]`)",
    KEEP_IF_MAX_IS_N: _CONCAT + "max(layer_ids) == num_layers` is false, then `[val + 1 for val in layer_ids]`)",
}


def stock_sglang_capture(draft_config: Mapping, num_hidden_layers: int, *, family: Family | str,
                         release: Release | str | None = None, file: Any = None) -> StockCapture:
    """What stock SGLang ``release`` (default: the newest supported) captures for ``draft_config``."""
    rel, fam, n = _release_of(release), family_named(family), num_hidden_layers
    ec = draft_config.get("eagle_config")  # as SGLang's _resolve_eagle_aux_hidden_state reads it
    ec = ec if isinstance(ec, Mapping) else {}
    use_aux, ids = bool(ec.get("use_aux_hidden_state", True)), ec.get(IDS_KEY)
    carries_final_norm = isinstance(ids, (list, tuple)) and FINAL_NORM in ids and all(is_layer_id(i) for i in ids)
    if ids is not None and not is_fail_closed(ids) and not carries_final_norm:  # those two are read as-is
        ids = _int_ids(ids, f"eagle_config.{IDS_KEY}", file)
    if use_aux and fam.name in rel.absent_families:
        closed = is_fail_closed(ids)
        why = ("the fail-closed object stops it at startup (AttributeError where the class has no "
               "set_eagle3_layers_to_capture, TypeError where it inherits another model file's hook)" if closed else
               "nothing is fed")
        return StockCapture(rel.version, fam.name, None if ids is None or closed else tuple(ids), "no EAGLE-3 capture",
                            (), (), f"SGLang {rel.version} has no EAGLE-3 capture for the {fam.name} family (a later "
                            f"release adds it): {why}", refuses_at_startup=closed)
    if not use_aux:
        return StockCapture(rel.version, fam.name, None, "no aux capture", (), (), "eagle_config.use_aux_hidden_state "
                            "is false: nothing is captured and the fc is skipped: the draft never sees target layers")
    if is_fail_closed(ids):
        return StockCapture(rel.version, fam.name, None, "fail-closed", (), (), f"eagle_config.{IDS_KEY} is "
                            "sglang-eagle3-capture's fail-closed object (no id list expresses the manifest to stock "
                            "SGLang), so the server refuses to start: set_eagle3_layers_to_capture raises "
                            f"{_FAIL_CLOSED_RAISES[stock_rule(fam, rel)]}", refuses_at_startup=True)
    if ids is not None and FINAL_NORM in ids:
        return _stock_on_token(rel, fam, list(ids), n)
    config_ids = None if ids is None else tuple(ids)
    rule, loop = ("default", default_low_mid_high_indices(n)) if ids is None else _loop_indices_by_rule(
        stock_rule(fam, rel), list(ids), n)
    fed = layer_ids_of_loop(loop, n)
    if n in loop and fam.name in rel.final_norm_captures:  # loop index N, at the final norm: the last layer's output
        fed = (*fed, n - 1)
    problem = _stock_problem(fam, rel, loop, fed, n)
    at_startup = fam.stock_past_loop == N_INDEX_ERROR and any(i >= n for i in loop)
    wrong = [i for i in fed if i != EMBEDDING_LAYER_ID]  # a family whose loop captures branch outputs feeds those
    mis_fed = (f"for layer ids {wrong} SGLang {rel.version} feeds each layer's branch output (its last norm's output, "
               "without the residual it returns beside it), not the residual stream the ids name (HF hidden_states"
               "[k+1])") if fam.name in rel.branch_captures and wrong and not problem else None
    return StockCapture(rel.version, fam.name, config_ids, rule, tuple(loop), fed, problem,
                        refuses_at_startup=at_startup and problem is not None, mis_fed=mis_fed)


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
    return _shortfall(fam, f"loop indices {missed} are never reached (the loop runs 0..{n - 1}) or repeat: SGLang "
                      f"captures {len(fed)} of {len(loop)} states", len(fed), len(loop))


def _shortfall(fam: Family, what: str, got: int, takes: int) -> str:
    if fam.stock_past_loop == N_COUNT_ERROR:
        return f"{what} and fails at the first forward ('captured {got} of {takes} aux hidden states')"
    return (f"{what}, silently (its list is never counted), and the draft's fc fails at the first draft extend on "
            f"its input width ({got} hidden states where it takes {takes})")


@dataclass(frozen=True)
class FailClosedIds:
    """What ``convert`` and ``manifest write --fail-closed`` write per engine."""

    value: Any  # the ids, or the engine's fail-closed value
    exact: bool  # every stock runner feeds the manifest's ids from it
    why: tuple[str, ...] = ()  # what they do else


def engine_capture(draft_config: Mapping, num_hidden_layers: int, *, family: Family | str,
                   reader: EngineReader, file: Any = None) -> StockCapture:
    """What another engine's runner (``reader``) feeds the fc for ``draft_config``, as vLLM's
    ``_get_eagle3_aux_layers_from_config`` (0.32 ``v1/worker/gpu_model_runner.py:5251-5285``) reads it."""
    fam, n = family_named(family), num_hidden_layers
    key, ids = next(((k, v) for k in reader.keys if (v := path_get(draft_config, k))), (None, None))
    if not isinstance(ids, (list, tuple)):  # the first truthy key decides; only a list or tuple counts
        what = "the SGLang fail-closed object" if is_fail_closed(ids) else brief(ids, 40)
        rule = f"{key}: {what}, not a list -> default" if ids is not None else "default"
        config_ids, loop, ids = None, default_low_mid_high_indices(n), None
    elif any(isinstance(i, str) for i in ids):
        what = "the vLLM fail-closed value" if is_vllm_fail_closed(ids) else f"an id list with {brief(ids, 60)}"
        if fam.name not in reader.unsorted:
            return StockCapture(reader.name, fam.name, None, f"{key}: {what}", (), (),
                                f"{key} is {what}: sorted(set(ids)) over an integer and a string raises a TypeError "
                                "while the model runner loads the model (interfaces.py, _set_aux_hidden_state_layers)",
                                engine="", refuses_at_startup=True)
        config_ids, rule = None, f"{key}: {what}, its integers as HF indices"
        loop, ids = sorted({i for i in ids if is_int(i)}), list(ids)
    else:
        ids = _int_ids(ids, key, file)
        config_ids, rule, loop = tuple(ids), f"{key} as HF indices", sorted(set(ids))
    fed = tuple(i - 1 for i in loop if 0 <= i <= n)  # HF index N is the last layer's output there
    problem = None
    if fam.name in reader.embedding_crashes and 0 in loop:
        problem = "its capture loop computes hidden_states + residual before layer 0: TypeError at the first forward"
    elif len(fed) != len(loop) or (ids is not None and len(loop) != len(ids)):
        problem = f"ids outside [0, {n}], repeated or not integers: fewer hidden states reach the fc than it takes"
    return StockCapture(reader.name, fam.name, config_ids, rule, tuple(loop), fed, problem, engine="")


def stock_on_vllm(draft_config: Mapping, num_hidden_layers: int, *, family: Family | str) -> list[StockCapture]:
    """What each stock vLLM model runner in the table makes of ``draft_config`` (oldest first)."""
    return [engine_capture(draft_config, num_hidden_layers, family=family, reader=r) for r in releases.other_engines()]


def vllm_fail_closed_ids(layer_ids: Sequence, num_hidden_layers: int, *, family: Family | str) -> FailClosedIds:
    """The top-level ids (read first by every stock vLLM runner, never by SGLang) that make every vLLM runner feed
    ``layer_ids`` exactly (their HF indices) or refuse to start (VLLM_FAIL_CLOSED_IDS)."""
    fam = family_named(family)
    if FINAL_NORM in layer_ids:
        why = [f"no stock vLLM index names the final norm's output ({FINAL_NORM!r}): index N is the last layer's "
               "output before it"]
    else:
        ids = hidden_state_indices(layer_ids)
        why = [c.describe() for c in stock_on_vllm({IDS_KEY: ids}, num_hidden_layers, family=fam)
               if c.fed_layer_ids != tuple(layer_ids) or c.problem]
    return FailClosedIds(list(VLLM_FAIL_CLOSED_IDS), False, tuple(why)) if why else FailClosedIds(ids, True)
