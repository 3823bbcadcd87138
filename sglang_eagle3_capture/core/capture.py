"""WHAT the target captures: layer ids -> SGLang capture-loop indices, and the chunks in fc order (no SGLang import;
docs/how-it-works.md, "What the target captures"; ``stream_from="input-norm"``: docs/families.md)."""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Any, Sequence

from .errors import Eagle3CaptureError
from .layer_ids import FINAL_NORM, check_layer_ids, layer_ids_of_loop, split_capture
from .seams import attr_path


class CaptureError(Eagle3CaptureError, RuntimeError):
    """A forward whose captures do not belong to the batch; raised rather than feed the draft mislabelled states."""


@dataclass(frozen=True)
class CapturePlan:
    """The loop's ``loop_indices``, then the final norm's input and output when captured: chunk ``chunk_order[j]``."""

    layer_ids: tuple[int, ...]
    loop_indices: tuple[int, ...]
    chunk_order: tuple[int, ...]
    where: str
    captures_last_layer: bool = False
    captures_final_norm: bool = False

    @property
    def is_identity(self) -> bool:
        """True when the packer's output already is the fc input (ascending ids, nothing appended)."""
        return not self.hooks_final_norm and self.chunk_order == tuple(range(len(self.chunk_order)))

    @property
    def hooks_final_norm(self) -> bool:
        return self.captures_last_layer or self.captures_final_norm


def plan_capture(layer_ids: Sequence[int], num_hidden_layers: int, *, where: str) -> CapturePlan:
    """Validate ``layer_ids`` (fc order) for an ``N``-layer target; ``where`` (file and field) goes into every error."""
    ids = check_layer_ids(list(layer_ids), num_hidden_layers, file=where)
    loop, last, order = split_capture(ids, num_hidden_layers)
    return CapturePlan(layer_ids=ids, loop_indices=loop, chunk_order=order, where=where, captures_last_layer=last,
                       captures_final_norm=FINAL_NORM in ids)


def to_fc_order(aux: Any, plan: CapturePlan, last: Any = None, normed: Any = None) -> Any:
    """The fc input ``[T, K*H]``: a packed identity ``aux`` as is, else a new tensor (``last`` borrows storage)."""
    listed = isinstance(aux, (list, tuple))
    if plan.is_identity and not listed:
        return aux
    import torch
    n = len(plan.loop_indices)
    h = 0 if listed or not n else aux.shape[-1] // n
    chunks = list(aux) if listed and n else [aux.narrow(-1, c * h, h) for c in range(n)]
    for wanted, value in ((plan.captures_last_layer, last), (plan.captures_final_norm, normed)):
        if wanted:
            chunks.append(value.to(chunks[0].dtype) if chunks else value)
    return chunks[0].clone() if len(chunks) == 1 else torch.cat([chunks[c] for c in plan.chunk_order], dim=-1)


class FcFeed:
    """A decoder stack's ``_eagle3_capture_feed``: each forward's captures checked, in fc order, to the dump."""

    __slots__ = ("plan", "layers", "num_hidden_layers", "dump", "model_name", "final_norm", "stream_norms", "_last",
                 "_normed", "_streams", "_hooks", "__weakref__")

    def __init__(self, plan: CapturePlan | None, layers: list, dump: Any = None, num_hidden_layers: int = 0, *,
                 model_name: str, final_norm: str = "norm", stream_norms: tuple[str, str] | None = None) -> None:
        # layers: the very list in layers_to_capture; stream_norms: (layer list, input norm) attributes
        self.plan, self.layers, self.dump, self.num_hidden_layers = plan, layers, dump, num_hidden_layers
        self.model_name, self.final_norm, self.stream_norms = model_name, final_norm, stream_norms
        # what the hooks took for this batch, until __call__: the final norm's hidden + residual and output, and
        # loop index -> the stream entering that layer
        self._last = self._normed = None
        self._streams: dict[int, Any] = {}
        self._hooks: list = []

    def fed_layer_ids(self, current_loop: Any) -> tuple[int, ...] | None:
        """The layer ids fed to the draft, in fc order; None when ``current_loop`` is not the configured list."""
        if current_loop is not self.layers:
            return None
        return tuple(self.plan.layer_ids) if self.plan else layer_ids_of_loop(self.layers, self.num_hidden_layers)

    def attach(self, model: Any) -> None:
        """Hook the final norm when the plan needs it, and each captured layer's input norm under ``stream_norms``."""
        if self.plan is None:
            return
        if self.plan.hooks_final_norm:
            self._hooks.append(getattr(model, self.final_norm).register_forward_hook(self._take_last_layer_output))
        if self.stream_norms is not None:
            layers, norm = self.stream_norms  # the norm's name may be dotted into a pair, as the self-check reads it
            for i in self.plan.loop_indices:
                self._hooks.append(attr_path(getattr(model, layers)[i], norm).register_forward_pre_hook(
                    functools.partial(self._take_stream, i), with_kwargs=True))

    def detach(self) -> None:
        for hook in self._hooks:
            hook.remove()
        self._hooks.clear()

    def _take_last_layer_output(self, module: Any, args: tuple, output: Any) -> None:
        # RMSNorm(x, residual) returns (normed, x + residual); without a residual, x is the last layer's output
        self._normed, self._last = (output[0], output[1]) if isinstance(output, tuple) else (output, args[0])

    def _take_stream(self, i: int, module: Any, args: tuple, kwargs: dict) -> None:
        # Before a fused kernel (Gemma3RMSNorm.forward_cuda) overwrites both in place: x + residual is the sum the
        # norm forms, rounded once in x's dtype as forward_native computes it and the fused kernel stores it.
        x = args[0] if args else kwargs.get("x", kwargs.get("hidden_states"))
        residual = args[1] if len(args) > 1 else kwargs.get("residual")
        self._streams[i] = x.clone() if residual is None else x + residual

    def _taken_streams(self, aux: Any) -> list:
        """The streams the input-norm hooks took for this batch, in loop order, each checked against the loop's."""
        taken, self._streams = self._streams, {}
        for c, i in enumerate(self.plan.loop_indices):
            value, own = taken.get(i), aux[c]
            if value is None or value.shape != own.shape:
                raise CaptureError(self.plan.where, None, f"the stream entering {self.model_name}.layers[{i}] was not "
                                   f"taken at its input norm for this batch (got {_shape(value)}, the loop's capture "
                                   f"{tuple(own.shape)})", "serve with a supported SGLang release (this forward path "
                                   "does not run the decoder layers' input norms)")
        return [taken[i] for i in self.plan.loop_indices]

    def _last_layer_output(self, hidden: Any, aux: Any, taken: Any, what: str) -> Any:
        """The final-norm hook's tensor ``taken``, checked to belong to this batch (docs/how-it-works.md)."""
        if hidden.shape[0] == 0:  # an idle or empty batch skips the final norm
            return hidden.new_empty(hidden.shape)
        rows = aux[0].shape[0] if isinstance(aux, (list, tuple)) and aux else getattr(aux, "shape", (None,))[0]
        if taken is None or taken.shape != hidden.shape or (rows is not None and taken.shape[0] != rows):
            raise CaptureError(self.plan.where, None, f"{what} was not taken at {self.model_name}'s final norm for "
                               f"this batch (got {_shape(taken)}, hidden states {tuple(hidden.shape)}, loop captures "
                               f"with {rows} rows)", "serve with a supported SGLang release, or a draft that does not "
                               "use the last layer")
        return taken

    def _count(self, aux: Any) -> None:
        """Count a list of captures: SGLang counts a packed tensor (``AuxHiddenStatePacker``), never a list."""
        want = len(self.plan.loop_indices)
        got = 0 if aux is None else len(aux) if isinstance(aux, (list, tuple)) else want
        if got != want:
            raise CaptureError(self.plan.where, None, f"{self.model_name}.forward captured {got} of {want} aux "
                               "hidden states for this batch", "serve with a supported SGLang release (this forward "
                               "path does not capture every configured layer)")

    def __call__(self, model: Any, out: Any, input_ids: Any, positions: Any, forward_batch: Any) -> Any:
        """Return ``(hidden_states, fc input)`` for the model output ``out`` (and dump the fc input)."""
        hidden, aux = out if isinstance(out, tuple) else (out, None)
        if self.plan is not None:
            self._count(aux)
            if self.stream_norms is not None and self.plan.loop_indices:
                aux = self._taken_streams(aux)
            last, normed, self._last, self._normed = self._last, self._normed, None, None
            if self.plan.captures_last_layer:
                last = self._last_layer_output(hidden, aux, last, "the last decoder layer's output")
            if self.plan.captures_final_norm:
                normed = self._last_layer_output(hidden, aux, normed, "the final norm's output")
            aux = to_fc_order(aux, self.plan, last, normed)
        elif isinstance(aux, (list, tuple)):  # stock wiring with a dump: pack as LogitsProcessor would
            import torch
            aux = torch.cat(list(aux), dim=-1) if aux else None
        if aux is None:
            return out
        if self.dump is not None:
            self.dump(aux, batch_token_ids(input_ids, forward_batch), positions,
                      getattr(forward_batch, "forward_mode", None))
        return hidden, aux


def batch_token_ids(input_ids: Any, forward_batch: Any) -> Any:
    """The stack's ``input_ids``, else (``general_mm_embed_routine`` passes None) the ForwardBatch's, if any."""
    if input_ids is not None or getattr(forward_batch, "input_embeds", None) is not None:
        return input_ids
    return getattr(forward_batch, "input_ids", None)


def _shape(t: Any) -> tuple | None:
    return None if t is None else tuple(t.shape)
