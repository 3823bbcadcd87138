"""What stock SGLang (no plugin) would feed a draft's fc on a DeepSeek-V2-family target.

One function, :func:`stock_sglang_capture`, mirrors three pieces of SGLang, read in the installed
0.5.23 sources and, for 0.5.11, in the notes (../shared/notes/sglang-0.5.23-internals.md, section 1):

- ``model_runner_components/spec_aux_hidden_state.py::_resolve_eagle_aux_hidden_state``: the ids come
  only from the draft's nested ``eagle_config["eagle_aux_hidden_state_layer_ids"]``; any failure
  (no ``eagle_config``, a non-dict, a missing key) means ``None``, i.e. the default; a top-level key
  (speculators) is ignored;
- ``models/deepseek_v2.py::DeepseekV2ForCausalLM.set_eagle3_layers_to_capture``: default
  ``[2, N//2, N-3]`` as loop indices; explicit ids: 0.5.11 always shifts them (output-of-layer reading),
  0.5.17+ shifts only when the first id is 1, otherwise uses them as loop indices;
- ``DeepseekV2Model.forward``: loop index ``i`` in ``range(N)`` captures the residual stream entering
  layer ``i`` (HF index ``i``), in ascending order whatever the list order; 0.5.23's
  ``AuxHiddenStatePacker.finalize`` raises when fewer states are captured than ids were set.

The "shift" is SGLang's output-of-layer reading, which is exactly :func:`layer_ids.hidden_state_index`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping, Sequence

from .formats import default_low_mid_high_indices
from .layer_ids import hidden_state_indices, layer_id_of_index

# release -> rule for explicit ids
STOCK_SGLANG_RULES: dict[str, str] = {
    "0.5.11": "always-shift",
    "0.5.17": "shift-if-first-is-1",
    "0.5.23": "shift-if-first-is-1",
}


@dataclass(frozen=True)
class StockCapture:
    """How one stock SGLang release wires a draft config on a DeepSeek-V2-family target."""

    sglang_version: str
    config_ids: tuple[int, ...] | None  # what SGLang read from eagle_config; None = absent -> default
    rule: str  # "default", "always-shift", "shifted (first id is 1)", "as loop indices", "no aux capture"
    loop_indices: tuple[int, ...]  # layers_to_capture as SGLang sets it
    fed_layer_ids: tuple[int, ...]  # what the fc receives, in the order it receives it
    problem: str | None  # None when SGLang would run; else what goes wrong

    def describe(self) -> str:
        """One line for humans (used by the CLI)."""
        ids = "absent" if self.config_ids is None else list(self.config_ids)
        out = (f"stock SGLang {self.sglang_version}: eagle_config ids {ids} -> {self.rule} -> loop indices "
               f"{list(self.loop_indices)} -> fc fed layer ids {list(self.fed_layer_ids)}")
        return out + (f" [{self.problem}]" if self.problem else "")


def _read_ids_like_sglang(draft_config: Mapping) -> tuple[bool, Any]:
    """(use_aux_hidden_state, ids or None) exactly as ``_resolve_eagle_aux_hidden_state`` reads them."""
    ec = draft_config.get("eagle_config")
    if not isinstance(ec, Mapping):
        return True, None
    use_aux = ec.get("use_aux_hidden_state", True)
    return bool(use_aux), ec.get("eagle_aux_hidden_state_layer_ids")


def stock_sglang_capture(draft_config: Mapping, num_hidden_layers: int, sglang_version: str = "0.5.23") -> StockCapture:
    """What stock SGLang ``sglang_version`` would capture for ``draft_config`` on an ``N``-layer DeepSeek-V2 target.

    Example (a speculators config: top-level ids are ignored, the default applies)::

        >>> c = stock_sglang_capture({"eagle_aux_hidden_state_layer_ids": [0, 3, 31]}, 61)
        >>> c.loop_indices, c.fed_layer_ids
        ((2, 30, 58), (1, 29, 57))
    """
    if sglang_version not in STOCK_SGLANG_RULES:
        raise ValueError(f"unknown stock SGLang release {sglang_version!r}; known: {', '.join(STOCK_SGLANG_RULES)}")
    n = num_hidden_layers
    use_aux, ids = _read_ids_like_sglang(draft_config)
    if not use_aux:
        return StockCapture(sglang_version, None, "no aux capture", (), (),
                            "eagle_config.use_aux_hidden_state is false: nothing is captured and the fc is skipped "
                            "(SGLang's width check), so the draft never sees target layers")
    if ids is None:
        config_ids, rule, loop = None, "default", default_low_mid_high_indices(n)
    else:
        config_ids = tuple(ids)
        if STOCK_SGLANG_RULES[sglang_version] == "always-shift":
            rule, loop = "always-shift", hidden_state_indices(ids)
        elif ids and ids[0] == 1:
            rule, loop = "shifted (first id is 1)", hidden_state_indices(ids)
        else:
            rule, loop = "as loop indices", list(ids)
    captured = [i for i in range(n) if i in set(loop)]
    fed = tuple(layer_id_of_index(i) for i in captured)
    problem = None
    if sglang_version == "0.5.11" and 0 in captured:
        problem = "0.5.11 computes hidden_states + residual with residual None at loop index 0: TypeError at the first forward"
    elif len(captured) != len(loop):
        missed = sorted(set(loop) - set(captured))
        problem = (f"loop indices {missed} are never reached (the loop runs 0..{n - 1}) or repeat: SGLang captures "
                   f"{len(captured)} of {len(loop)} states and fails ('captured {len(captured)} of {len(loop)} aux "
                   "hidden states' in 0.5.23, an fc shape error in 0.5.11)")
    return StockCapture(sglang_version, config_ids, rule, tuple(loop), fed, problem)


def stock_safe_eagle_config_ids(layer_ids: Sequence[int]) -> list[int]:
    """The ``eagle_config.eagle_aux_hidden_state_layer_ids`` that :mod:`convert` writes for ``layer_ids``.

    Capture-loop (HF) indices, which stock SGLang >= 0.5.17 uses as given when the first is not 1.
    When the first would be 1 (layer id 0 first), it is moved to the end: SGLang captures by
    membership in ascending loop order, so the list order does not change what the fc receives.
    The plugin's loader compares a converted config's ids with this function's result.
    Stock SGLang cannot be made to feed a lone layer id 0, nor the final layer's output (layer id
    N-1 = loop index N, past DeepseekV2Model's capture loop); convert reports those cases.

    Example::

        >>> stock_safe_eagle_config_ids([-1, 2, 30]), stock_safe_eagle_config_ids([0, 29, 57])
        ([0, 3, 31], [30, 58, 1])
    """
    loop = hidden_state_indices(layer_ids)
    if len(loop) > 1 and loop[0] == 1:
        loop = loop[1:] + loop[:1]
    return loop
