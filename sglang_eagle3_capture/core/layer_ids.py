"""The one layer-id convention, every rule derived from it, and the only place that does layer-id arithmetic.

The convention is docs/manifest.md's: ``-1`` is the embedding output, ``k`` the residual stream after decoder layer
``k`` (SGLang loop index ``k + 1``), ``"final_norm"`` (:data:`FINAL_NORM`) the final norm's output. Layer id
``N-1`` has loop index ``N``, which no capture loop reaches; it exists only at the final norm's input (transformers'
``hidden_states[N]`` is the post-norm state: 5.19 ``utils/output_capturing.py``, ``tie_last_hidden_states``).
SGLang's own ``set_eagle3_layers_to_capture`` readings differ per class and release (``+1`` always, or only when
``ids[0] == 1``); this package never relies on them and translates with :func:`hidden_state_index`.
"""

from __future__ import annotations

from collections import Counter
from typing import Any, Iterable, Sequence

from .errors import InputError, brief

__all__ = ["EMBEDDING_LAYER_ID", "FINAL_NORM", "check_layer_ids", "hidden_state_index",
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
    """SGLang capture-loop index of the integer ``layer_id`` (``-1 -> 0``, ``2 -> 3``); ``ValueError`` for
    :data:`FINAL_NORM`, which has none."""
    if not is_int(layer_id):
        raise ValueError(f"layer id {layer_id!r} has no capture-loop index (only integer layer ids do)")
    return layer_id + 1


def layer_id_of_index(index: int) -> int:
    """Inverse of :func:`hidden_state_index`."""
    return index - 1


def hidden_state_indices(layer_ids: Iterable[int | str]) -> list[int | str]:
    """:func:`hidden_state_index` over a list, order kept; :data:`FINAL_NORM` is kept as it is."""
    return [i if i == FINAL_NORM else hidden_state_index(i) for i in layer_ids]


def last_layer_id(num_hidden_layers: int) -> int:
    """Layer id of the last decoder layer's output (``N-1``): loop index ``N``, past the capture loop."""
    return num_hidden_layers - 1


def layer_ids_of_loop(loop_indices: Iterable[int], num_hidden_layers: int) -> tuple[int, ...]:
    """The layer ids a stock loop hands on for ``layers_to_capture = loop_indices``: ascending, each once, only the
    indices the loop reaches (``0..N-1``)."""
    # linear in the ids, whatever num_hidden_layers says (it comes from user files)
    reached = sorted(i for i in set(loop_indices) if isinstance(i, int) and 0 <= i < num_hidden_layers)
    return tuple(layer_id_of_index(i) for i in reached)


def split_capture(layer_ids: Sequence[int | str], num_hidden_layers: int
                  ) -> tuple[tuple[int, ...], bool, tuple[int, ...]]:
    """``(loop indices, last, chunk order)`` for validated ``layer_ids`` (fc order): the ascending indices the loop
    captures; whether the last layer's output is appended (then the final norm's output, if listed); ``chunk
    order[j]`` is fc chunk ``j``'s position in that sequence. ``[60, -1]`` on 61 layers: ``((0,), True, (1, 0))``."""

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
    """Validate ``layer_ids`` for an ``num_hidden_layers``-layer target (``None``: no upper bound) in linear time;
    raises :class:`InputError` naming ``file`` and ``field``. :data:`FINAL_NORM` may appear once, anywhere."""

    fix = ("list the layers the fc consumes, each once, e.g. [-1, 2, 30] (-1 = embedding output, k = output of "
           f"decoder layer k, \"{FINAL_NORM}\" = the final norm's output)")
    if isinstance(layer_ids, (str, bytes)) or not isinstance(layer_ids, Sequence):
        raise InputError(file, field, f"expected a list of integers, got {type(layer_ids).__name__}", fix)
    if len(layer_ids) == 0:
        raise InputError(file, field, "the list of layer ids is empty", fix)
    for k, i in enumerate(layer_ids):
        if not is_layer_id(i):
            raise InputError(file, None if field is None else f"{field}[{k}]", f"layer id {brief(i, 40)} is not an "
                             f"integer (nor \"{FINAL_NORM}\")", fix)
    hi = None if num_hidden_layers is None else last_layer_id(num_hidden_layers)
    bad = [i for i in layer_ids if i != FINAL_NORM and (i < EMBEDDING_LAYER_ID or (hi is not None and i > hi))]
    if bad:
        rng = f"[-1, {hi}]" if hi is not None else "[-1, N-1]"
        raise InputError(file, field, f"layer ids {_capped(bad)} are outside {rng} for a target with "
                         f"{num_hidden_layers} decoder layers", fix)
    dups = sorted((i for i, n in Counter(layer_ids).items() if n > 1),
                  key=lambda i: (i == FINAL_NORM, 0 if i == FINAL_NORM else i))
    if dups:
        raise InputError(file, field, f"duplicate layer ids {_capped(dups)}: each hidden state may be fed to the fc "
                         "once", fix)
    return tuple(layer_ids)


def _capped(ids: list[int]) -> list:
    return ids if len(ids) <= 8 else [*ids[:8], "..."]
