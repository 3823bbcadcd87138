"""WHAT the target captures: layer ids -> SGLang capture-loop indices, and the chunks in fc order.

SGLang 0.5.23's ``DeepseekV2Model.forward`` (sglang/srt/models/deepseek_v2.py) runs
``for i in range(start_layer, end_layer)`` and, when ``i in self.layers_to_capture``, lets decoder
layer ``i`` copy the residual stream *entering* it into an ``AuxHiddenStatePacker``
(layers/aux_hidden_states.py; the copy happens in ``layer_boundary/stage.py::_prepare_attention``
through ``capture_gathered``). Loop index ``i`` is therefore HF ``output_hidden_states[i]``: 0 is the
embedding output (``residual/add_norm.py::init_residual`` returns the embedding itself), ``k + 1`` the
output of decoder layer ``k``. The packer writes the captures side by side in *ascending loop order*,
whatever order ``layers_to_capture`` lists them in.

A :class:`CapturePlan` states, for a list of layer ids in fc order, which loop indices SGLang must
capture and how to permute the K packed chunks into fc order. The permutation is fixed when the plan
is made, so the forward runs the same ops for every batch (CUDA-graph and torch.compile safe).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Sequence

from .layer_ids import LayerIdError, check_layer_ids, hidden_state_index, layer_id_of_index


@dataclass(frozen=True)
class CapturePlan:
    """Which hidden states the target feeds the draft's fc, and in what order.

    ``layer_ids[j]`` is fc chunk ``j``; ``loop_indices`` is the ascending list SGLang's loop captures
    (so the packer's chunk ``c`` is ``loop_indices[c]``); ``chunk_order[j]`` is the packer chunk that
    becomes fc chunk ``j``.
    """

    layer_ids: tuple[int, ...]
    loop_indices: tuple[int, ...]
    chunk_order: tuple[int, ...]
    where: str

    @property
    def is_identity(self) -> bool:
        """True when the packer already writes the chunks in fc order (ascending layer ids)."""
        return self.chunk_order == tuple(range(len(self.chunk_order)))


def plan_capture(layer_ids: Sequence[int], num_hidden_layers: int, *, where: str) -> CapturePlan:
    """Validate ``layer_ids`` (fc order) for an ``N``-layer target and return the :class:`CapturePlan`.

    ``where`` names the file and field the ids came from; every error carries it.

    Example::

        >>> p = plan_capture([30, -1, 2], 61, where="eagle3_manifest.json: layer_ids")
        >>> p.loop_indices, p.chunk_order
        ((0, 3, 31), (2, 0, 1))
    """
    ids = check_layer_ids(list(layer_ids), num_hidden_layers, where=where)
    unreachable = [i for i in ids if hidden_state_index(i) >= num_hidden_layers]
    if unreachable:
        raise LayerIdError(
            f"{where}: layer id {unreachable[0]} is the output of the last decoder layer of a "
            f"{num_hidden_layers}-layer target; SGLang 0.5.23's DeepseekV2Model.forward captures only the "
            f"residual entering decoder layers 0..{num_hidden_layers - 1}, so it can feed ids "
            f"-1..{layer_id_of_index(num_hidden_layers - 1)} only. Fix: serve a draft trained on ids within "
            f"[-1, {layer_id_of_index(num_hidden_layers - 1)}]"
        )
    loop = tuple(sorted(hidden_state_index(i) for i in ids))
    order = tuple(loop.index(hidden_state_index(i)) for i in ids)
    return CapturePlan(layer_ids=ids, loop_indices=loop, chunk_order=order, where=where)


def check_stage(plan: CapturePlan, start_layer: int, end_layer: int, *, pp_size: int) -> None:
    """Raise unless every captured loop index runs on the pipeline stage ``[start_layer, end_layer)``.

    Only the last pipeline stage captures (``set_eagle3_layers_to_capture`` returns early elsewhere), and
    its loop covers only its own layers; the embedding (loop index 0) is computed on the first stage.

    Example::

        >>> check_stage(plan_capture([2, 3], 6, where="x"), 3, 6, pp_size=2)
    """
    missing = [layer_id_of_index(i) for i in plan.loop_indices if not start_layer <= i < end_layer]
    if missing:
        raise LayerIdError(
            f"{plan.where}: layer ids {missing} are captured at the input of decoder layers outside "
            f"[{start_layer}, {end_layer}), the layers of the last pipeline stage (--pp-size {pp_size}); SGLang "
            "0.5.23 captures EAGLE-3 hidden states on the last stage only, so they would never reach the draft. "
            "Fix: serve with --pp-size 1, or set SGLANG_PP_LAYER_PARTITION so the last stage starts at or before "
            f"decoder layer {min(plan.loop_indices)}"
        )


def to_fc_order(aux: Any, plan: CapturePlan) -> Any:
    """Permute the packed ``[T, K*H]`` aux tensor (ascending loop order) into fc order.

    Returns a new tensor (one copy) when the order differs, else ``aux`` itself. Shape-only logic, so
    the same kernels run for every batch.
    """
    if plan.is_identity:
        return aux
    import torch

    k = len(plan.chunk_order)
    h = aux.shape[-1] // k
    return torch.cat([aux.narrow(-1, c * h, h) for c in plan.chunk_order], dim=-1)


class FcFeed:
    """What the capture patch installs on one ``DeepseekV2Model`` (``_eagle3_capture_feed``).

    Called with the packed aux tensor the model is about to return; permutes it into fc order (when
    ``plan`` is not the identity) and hands it to the optional dump. ``layers`` is the very list object
    put in ``layers_to_capture``: if anything replaces that list afterwards, the plan no longer describes
    the packer's chunks and the forward raises rather than feed the draft mislabelled states.
    """

    __slots__ = ("plan", "layers", "dump")

    def __init__(self, plan: CapturePlan | None, layers: list, dump: Any = None) -> None:
        self.plan = None if plan is None or plan.is_identity else plan
        self.layers = layers
        self.dump = dump

    def __call__(self, model: Any, aux: Any, input_ids: Any, positions: Any, forward_batch: Any) -> Any:
        """Return ``aux`` in fc order (and dump it when a dump is configured)."""
        if model.layers_to_capture is not self.layers:
            raise RuntimeError(
                f"eagle3-capture: DeepseekV2Model.layers_to_capture was replaced after set_eagle3_layers_to_capture "
                f"configured it (now {model.layers_to_capture}, configured {self.layers}); call "
                "set_eagle3_layers_to_capture again instead of writing layers_to_capture"
            )
        if self.plan is not None:
            aux = to_fc_order(aux, self.plan)
        if self.dump is not None:
            self.dump(aux, input_ids, positions, getattr(forward_batch, "forward_mode", None))
        return aux
