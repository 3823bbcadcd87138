"""The one layer-id convention, every rule derived from it, and the only place that does layer-id arithmetic.

A *layer id* is an integer in ``[-1, N-1]`` for a target with ``N`` decoder layers, or the token
``"final_norm"`` (:data:`FINAL_NORM`):

==============  ================================================  =============  ==================
layer id        tensor                                            HF index       SGLang loop index
==============  ================================================  =============  ==================
``-1``          embedding output (input to decoder layer 0)       0              0
``0..N-2``      residual stream after decoder layer ``k``         ``k + 1``      ``k + 1``
``N-1``         residual stream after the last layer, pre-norm    none           none (final norm's input)
``final_norm``  the final norm's output (post-norm)               ``N``          none (final norm's output)
==============  ================================================  =============  ==================

"HF index" is the position in transformers' ``output_hidden_states``; "SGLang loop index" is the
``i`` of an SGLang model's ``for i in range(start_layer, end_layer)`` loop whose
``layers_to_capture`` membership makes SGLang capture the residual stream *entering* layer ``i``.
NOTE: transformers' ``hidden_states[N]`` is the model's ``last_hidden_state``, *after* the final norm
(transformers 5.19 ``utils/output_capturing.py``, ``tie_last_hidden_states``); layer id ``N-1`` is the state
*before* it, as SGLang's and vLLM's capture loops see it. The two are different tensors: ``final_norm`` names the
first, ``N-1`` the second.

Rules every SGLang capture loop obeys (docs/how-it-works.md), and that this module encodes once:

- captures come out in **ascending loop order**, whatever order ``layers_to_capture`` lists them in;
- the loop runs ``i`` in ``0..N-1``, so loop index ``N`` (the last decoder layer's output, layer id
  ``N-1``) is **past the loop**: it exists only at the final norm.

NOTE: SGLang's ``set_eagle3_layers_to_capture`` readings of an id list differ per model class and
release (``+1`` always, or only when ``ids[0] == 1``); this package never relies on them and always
translates explicitly with :func:`hidden_state_index`.
"""

from __future__ import annotations

from collections import Counter
from typing import Any, Iterable, Sequence

from .errors import LayerIdError, brief

__all__ = ["EMBEDDING_LAYER_ID", "FINAL_NORM", "LayerIdError", "check_layer_ids", "hidden_state_index",
           "hidden_state_indices", "is_int", "is_layer_id", "last_layer_id", "layer_id_of_index", "layer_ids_of_loop",
           "split_capture"]

EMBEDDING_LAYER_ID = -1
FINAL_NORM = "final_norm"  # the final norm's output (HF hidden_states[N]); not a loop index, no arithmetic


def is_int(value: Any) -> bool:
    """An integer that is not a bool (JSON's ``true`` is not a layer count)."""
    return isinstance(value, int) and not isinstance(value, bool)


def is_layer_id(value: Any) -> bool:
    """An integer (not a bool) or the :data:`FINAL_NORM` token: the type of a layer id (ranges aside)."""
    return is_int(value) or value == FINAL_NORM


def hidden_state_index(layer_id: int) -> int:
    """SGLang capture-loop index of the integer ``layer_id`` (== its HF ``output_hidden_states`` index, except for
    ``N-1``, whose loop index ``N`` no loop reaches and whose HF index ``N`` holds the post-norm state instead).
    :data:`FINAL_NORM` has no loop index: ``ValueError``.

    Example::

        >>> [hidden_state_index(i) for i in (-1, 2, 30)]
        [0, 3, 31]
    """
    if not is_int(layer_id):
        raise ValueError(f"layer id {layer_id!r} has no capture-loop index (only integer layer ids do)")
    return layer_id + 1


def layer_id_of_index(index: int) -> int:
    """Inverse of :func:`hidden_state_index`: the layer id stored at HF / loop ``index``.

    Example::

        >>> [layer_id_of_index(i) for i in (0, 3, 31)]
        [-1, 2, 30]
    """
    return index - 1


def hidden_state_indices(layer_ids: Iterable[int | str]) -> list[int | str]:
    """:func:`hidden_state_index` over a list, order kept; :data:`FINAL_NORM` is kept as it is (it has no loop index).

    Example::

        >>> hidden_state_indices([-1, 1, "final_norm"])
        [0, 2, 'final_norm']
    """
    return [i if i == FINAL_NORM else hidden_state_index(i) for i in layer_ids]


def last_layer_id(num_hidden_layers: int) -> int:
    """Layer id of the last decoder layer's output (``N-1``): loop index ``N``, past the capture loop."""
    return num_hidden_layers - 1


def layer_ids_of_loop(loop_indices: Iterable[int], num_hidden_layers: int) -> tuple[int, ...]:
    """The layer ids a stock capture loop hands on for ``layers_to_capture = loop_indices``, in the order it
    hands them on: ascending, each once, only the indices the loop reaches (``0..N-1``).

    Example::

        >>> layer_ids_of_loop([30, 3, 0, 61], 61)
        (-1, 2, 29)
    """
    # linear in the ids, whatever num_hidden_layers says (it comes from user files)
    reached = sorted(i for i in set(loop_indices) if isinstance(i, int) and 0 <= i < num_hidden_layers)
    return tuple(layer_id_of_index(i) for i in reached)


def split_capture(layer_ids: Sequence[int | str], num_hidden_layers: int
                  ) -> tuple[tuple[int, ...], bool, tuple[int, ...]]:
    """How a capture loop can deliver ``layer_ids`` (fc order): ``(loop indices, last, chunk order)``.

    ``loop indices`` are the ascending indices the loop must capture; ``last`` says the last decoder
    layer's output (past the loop, the final norm's input) is appended after them, and the final norm's output
    comes after that when ``layer_ids`` lists :data:`FINAL_NORM`; ``chunk order[j]`` is the position, in that
    combined sequence, of fc chunk ``j``. Validate the ids first (:func:`check_layer_ids`).

    Example::

        >>> split_capture([30, -1, 2], 61)
        ((0, 3, 31), False, (2, 0, 1))
        >>> split_capture([60, -1], 61)
        ((0,), True, (1, 0))
        >>> split_capture(["final_norm", -1, 60], 61)
        ((0,), True, (2, 0, 1))
    """
    after_norm = hidden_state_index(last_layer_id(num_hidden_layers)) + 1  # sorts after loop index N, never a loop's

    def key(i: int | str) -> int:
        return after_norm if i == FINAL_NORM else hidden_state_index(i)

    indices = sorted(key(i) for i in layer_ids)
    position: dict[int, int] = {}
    for k, index in enumerate(indices):
        position.setdefault(index, k)  # first occurrence, as list.index, in linear time
    order = tuple(position[key(i)] for i in layer_ids)
    loop = [i for i in indices if i < after_norm]
    last = bool(loop) and loop[-1] == hidden_state_index(last_layer_id(num_hidden_layers))
    return tuple(loop[:-1] if last else loop), last, order


def check_layer_ids(layer_ids: Sequence[int], num_hidden_layers: int | None, *, file: Any = None,
                    field: str | None = "layer_ids") -> tuple[int, ...]:
    """Validate ``layer_ids`` against a target with ``num_hidden_layers`` decoder layers (linear time); raises
    :class:`LayerIdError` ``(file, field, problem, fix)``.

    ``file`` and ``field`` name where the ids came from (a non-integer item is named ``field[i]``);
    ``num_hidden_layers=None`` checks everything except the upper bound. :data:`FINAL_NORM` may appear once,
    anywhere in the list.

    Example::

        >>> check_layer_ids([-1, 2, 30], 61, file="eagle3_manifest.json")
        (-1, 2, 30)
        >>> check_layer_ids([-1, 1, "final_norm"], 7, file="eagle3_manifest.json")
        (-1, 1, 'final_norm')
    """
    fix = ("list the layers the fc consumes, each once, e.g. [-1, 2, 30] (-1 = embedding output, k = output of "
           f"decoder layer k, \"{FINAL_NORM}\" = the final norm's output)")
    if isinstance(layer_ids, (str, bytes)) or not isinstance(layer_ids, Sequence):
        raise LayerIdError(file, field, f"expected a list of integers, got {type(layer_ids).__name__}", fix)
    if len(layer_ids) == 0:
        raise LayerIdError(file, field, "the list of layer ids is empty", fix)
    for k, i in enumerate(layer_ids):
        if not is_layer_id(i):
            raise LayerIdError(file, None if field is None else f"{field}[{k}]", f"layer id {brief(i, 40)} is not an "
                               f"integer (nor \"{FINAL_NORM}\")", fix)
    hi = None if num_hidden_layers is None else last_layer_id(num_hidden_layers)
    bad = [i for i in layer_ids if i != FINAL_NORM and (i < EMBEDDING_LAYER_ID or (hi is not None and i > hi))]
    if bad:
        rng = f"[-1, {hi}]" if hi is not None else "[-1, N-1]"
        raise LayerIdError(file, field, f"layer ids {_few(bad)} are outside {rng} for a target with "
                           f"{num_hidden_layers} decoder layers", fix)
    dups = sorted((i for i, n in Counter(layer_ids).items() if n > 1),
                  key=lambda i: (i == FINAL_NORM, 0 if i == FINAL_NORM else i))
    if dups:
        raise LayerIdError(file, field, f"duplicate layer ids {_few(dups)}: each hidden state may be fed to the fc "
                           "once", fix)
    return tuple(layer_ids)


def _few(ids: list[int]) -> list:
    return ids if len(ids) <= 8 else [*ids[:8], "..."]
