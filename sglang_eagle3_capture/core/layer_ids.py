"""The layer-id convention of docs/manifest.md (``-1`` embedding output, ``k`` the stream after decoder layer ``k`` =
SGLang loop index ``k + 1``, ``"final_norm"`` the final norm's output) and the only place that does layer-id
arithmetic; SGLang's own ``set_eagle3_layers_to_capture`` readings differ per class and release, never relied on."""

from __future__ import annotations

from collections import Counter
from typing import Any, Iterable, Sequence

from .errors import InputError, brief

EMBEDDING_LAYER_ID = -1
FINAL_NORM = "final_norm"  # the final norm's output (HF hidden_states[N]); not a loop index, no arithmetic


def is_int(value: Any) -> bool:
    """An integer that is not a bool (JSON's ``true`` is not a layer count)."""
    return isinstance(value, int) and not isinstance(value, bool)


def is_layer_id(value: Any) -> bool:
    return is_int(value) or value == FINAL_NORM


def hidden_state_index(layer_id: int) -> int:
    """SGLang capture-loop index of an integer layer id (``-1 -> 0``); ValueError for FINAL_NORM, which has none."""
    if not is_int(layer_id):
        raise ValueError(f"layer id {layer_id!r} has no capture-loop index (only integer layer ids do)")
    return layer_id + 1


def layer_id_of_index(index: int) -> int:
    return index - 1


def hidden_state_indices(layer_ids: Iterable[int | str]) -> list[int | str]:
    """:func:`hidden_state_index` over a list, order kept; FINAL_NORM kept as it is."""
    return [i if i == FINAL_NORM else hidden_state_index(i) for i in layer_ids]


def last_layer_id(num_hidden_layers: int) -> int:
    """Layer id ``N-1``: loop index ``N``, which no capture loop reaches (taken at the final norm's input)."""
    return num_hidden_layers - 1


def layer_ids_of_loop(loop_indices: Iterable[int], num_hidden_layers: int) -> tuple[int, ...]:
    """The layer ids a stock loop hands on for ``layers_to_capture = loop_indices`` (only ``0..N-1`` are reached)."""
    reached = sorted(i for i in set(loop_indices) if isinstance(i, int) and 0 <= i < num_hidden_layers)
    return tuple(layer_id_of_index(i) for i in reached)


def split_capture(layer_ids: Sequence[int | str], num_hidden_layers: int
                  ) -> tuple[tuple[int, ...], bool, tuple[int, ...]]:
    """``(loop indices, last layer appended?, chunk order)``: ``[60, -1]`` on 61 layers ``((0,), True, (1, 0))``."""
    last_index = hidden_state_index(last_layer_id(num_hidden_layers))
    # FINAL_NORM sorts after loop index N, which is never a loop's
    keys = [last_index + 1 if i == FINAL_NORM else hidden_state_index(i) for i in layer_ids]
    indices = sorted(keys)
    position: dict[int, int] = {}
    for k, index in enumerate(indices):
        position.setdefault(index, k)  # first occurrence, as list.index, in linear time
    loop = [i for i in indices if i <= last_index]
    last = bool(loop) and loop[-1] == last_index
    return tuple(loop[:-1] if last else loop), last, tuple(position[k] for k in keys)


def check_layer_ids(layer_ids: Sequence[int], num_hidden_layers: int | None, *, file: Any = None,
                    field: str | None = "layer_ids") -> tuple[int, ...]:
    """Validate ``layer_ids`` for an ``N``-layer target (None: no upper bound), in linear time."""
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
    capped = lambda ids: ids if len(ids) <= 8 else [*ids[:8], "..."]  # noqa: E731
    if bad:
        raise InputError(file, field, f"layer ids {capped(bad)} are outside [-1, {'N-1' if hi is None else hi}] for a "
                         f"target with {num_hidden_layers} decoder layers", fix)
    dups = sorted((i for i, n in Counter(layer_ids).items() if n > 1),
                  key=lambda i: (i == FINAL_NORM, 0 if i == FINAL_NORM else i))
    if dups:
        raise InputError(file, field, f"duplicate layer ids {capped(dups)}: each hidden state may be fed to the fc "
                         "once", fix)
    return tuple(layer_ids)
