"""The one layer-id convention, and the only place that does layer-id arithmetic.

A *layer id* is an integer in ``[-1, N-1]`` for a target with ``N`` decoder layers:

=========  ================================================  ==========  ==================
layer id   tensor                                            HF index    SGLang loop index
=========  ================================================  ==========  ==================
``-1``     embedding output (input to decoder layer 0)       0           0
``k >= 0`` residual stream after decoder layer ``k``, pre-norm ``k + 1``   ``k + 1``
=========  ================================================  ==========  ==================

"HF index" is the position in transformers' ``output_hidden_states``; "SGLang loop index" is
the ``i`` in ``DeepseekV2Model.forward``'s ``for i in range(...)`` loop whose
``layers_to_capture`` membership makes SGLang capture the residual stream *entering* layer ``i``.

NOTE: SGLang 0.5.23 ``DeepseekV2ForCausalLM.set_eagle3_layers_to_capture``
(sglang/srt/models/deepseek_v2.py) adds 1 only when ``layer_ids[0] == 1``; this package never
relies on that heuristic and always translates explicitly with :func:`hidden_state_index`.
"""

from __future__ import annotations

from typing import Iterable, Sequence

EMBEDDING_LAYER_ID = -1


class LayerIdError(ValueError):
    """A layer-id list that cannot be wired to the target."""


def hidden_state_index(layer_id: int) -> int:
    """Index into HF ``output_hidden_states`` (== SGLang capture-loop index) of ``layer_id``.

    Example::

        >>> [hidden_state_index(i) for i in (-1, 2, 30)]
        [0, 3, 31]
    """
    return layer_id + 1


def layer_id_of_index(index: int) -> int:
    """Inverse of :func:`hidden_state_index`: the layer id stored at HF / loop ``index``.

    Example::

        >>> [layer_id_of_index(i) for i in (0, 3, 31)]
        [-1, 2, 30]
    """
    return index - 1


def hidden_state_indices(layer_ids: Iterable[int]) -> list[int]:
    """:func:`hidden_state_index` over a list, order kept."""
    return [hidden_state_index(i) for i in layer_ids]


def check_layer_ids(layer_ids: Sequence[int], num_hidden_layers: int | None, *, where: str) -> tuple[int, ...]:
    """Validate ``layer_ids`` against a target with ``num_hidden_layers`` decoder layers.

    ``where`` names the file and field the ids came from; it is put in every error.
    ``num_hidden_layers=None`` checks everything except the upper bound.

    Example::

        >>> check_layer_ids([-1, 2, 30], 61, where="eagle3_manifest.json: layer_ids")
        (-1, 2, 30)
    """
    if isinstance(layer_ids, (str, bytes)) or not isinstance(layer_ids, Sequence):
        raise LayerIdError(f"{where}: expected a list of integers, got {type(layer_ids).__name__}")
    if len(layer_ids) == 0:
        raise LayerIdError(f"{where}: the list of layer ids is empty; list the layers the fc consumes, e.g. [-1, 2, 30]")
    for i in layer_ids:
        if isinstance(i, bool) or not isinstance(i, int):
            raise LayerIdError(f"{where}: layer id {i!r} is not an integer")
    hi = None if num_hidden_layers is None else num_hidden_layers - 1
    bad = [i for i in layer_ids if i < EMBEDDING_LAYER_ID or (hi is not None and i > hi)]
    if bad:
        rng = f"[-1, {hi}]" if hi is not None else "[-1, N-1]"
        raise LayerIdError(
            f"{where}: layer ids {bad} are outside {rng} for a target with "
            f"{num_hidden_layers} decoder layers (-1 = embedding output, k = output of decoder layer k)"
        )
    dups = sorted({i for i in layer_ids if list(layer_ids).count(i) > 1})
    if dups:
        raise LayerIdError(f"{where}: duplicate layer ids {dups}; each hidden state may be fed to the fc once")
    return tuple(layer_ids)
