"""WHAT the target captures: layer ids -> SGLang capture-loop indices, and the chunks in fc order.

No SGLang import. Every family in the table (:mod:`sglang_eagle3_capture.core.families`) runs the same kind of loop:
its decoder stack's forward runs ``for i in range(start_layer, end_layer)`` and, when loop index ``i`` is
selected (``i in self.layers_to_capture``, or Qwen-MoE's per-layer flag), copies the residual stream *entering*
decoder layer ``i`` (``layers/layer_boundary/stage.py::_prepare_attention``). Loop index ``i`` is therefore HF
``output_hidden_states[i]``: 0 is the embedding output, ``k + 1`` the output of decoder layer ``k``. The
captures come out in *ascending loop order*, whatever order the list has: packed side by side into one
``[T, K*H]`` tensor (DeepSeek's ``AuxHiddenStatePacker``, container ``packed``) or as a list of ``[T, H]``
tensors (``AuxHiddenStateList``, a plain list in older releases: container ``list``, which SGLang never counts).

No loop reaches index ``N`` (the output of the last decoder layer, layer id ``N-1``) for the plugin: that value
exists as the residual sum inside the final norm, ``residual_batch.final_norm(hidden_states, forward_batch,
self.norm)`` after the loop (a family in a release table's ``final_norm_captures``, such as GPT-OSS, captures it
there itself when N is in its list, which the plugin never puts there). The plugin reads it from ``self.norm``'s
output pair ``(normed, hidden + residual)`` with a forward hook (:meth:`FcFeed.attach`) and appends it after the
loop's chunks, which keeps the combined order ascending. The layer id ``"final_norm"`` (HF
``hidden_states[N]``, the post-norm state) is that norm's own output, ``output[0]`` of the pair (the output itself
for a norm called without a residual), taken by the same hook and appended after everything else.

A family whose loop appends only the hidden half of an unsummed ``(hidden, residual)`` pair (family table
``stream_from="input-norm"``: Gemma 3, in the releases whose table lists it in ``branch_captures``: its decoder
layer returns its branch output and the residual apart and leaves the sum to the next layer's input norm) hands on,
at loop index ``i >= 1``, the previous layer's branch output, not the stream. For it the feed takes the stream
entering each captured layer ``i`` at that layer's input norm instead, in a forward pre-hook: ``x + residual`` of
the operands (the very sum the norm forms, taken before a fused kernel overwrites both in place), ``x`` copied when
the norm gets no residual (layer 0: the embedding, which the layer then keeps as its residual and a fused kernel
updates in place). The loop's own list still runs and is counted; its tensors are not fed.

A :class:`CapturePlan` states, for a list of layer ids in fc order, which loop indices SGLang must
capture and how to permute the K chunks into fc order. The permutation is fixed when the plan is made, so
the forward runs the same ops for every batch (CUDA-graph and torch.compile safe).
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Any, Sequence

from .errors import Eagle3CaptureError
from .layer_ids import FINAL_NORM, check_layer_ids, layer_ids_of_loop, split_capture
from .seams import attr_path


class CaptureError(Eagle3CaptureError, RuntimeError):
    """A forward whose captures do not belong to the batch (:meth:`FcFeed._count`, :meth:`FcFeed._last_layer_output`);
    raised rather than feed the draft mislabelled states. A ``RuntimeError`` as before."""


@dataclass(frozen=True)
class CapturePlan:
    """Which hidden states the target feeds the draft's fc, and in what order.

    ``layer_ids[j]`` is fc chunk ``j``; ``loop_indices`` is the ascending list SGLang's loop captures
    (so the packer's chunk ``c`` is ``loop_indices[c]``); ``captures_last_layer`` adds the last decoder
    layer's output, taken at the final norm, as chunk ``len(loop_indices)``; ``captures_final_norm`` adds the final
    norm's output after that; ``chunk_order[j]`` is the chunk (in that combined order) that becomes fc chunk ``j``.
    """

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
        """True when a chunk comes from the final norm (its input, its output, or both)."""
        return self.captures_last_layer or self.captures_final_norm


def plan_capture(layer_ids: Sequence[int], num_hidden_layers: int, *, where: str) -> CapturePlan:
    """Validate ``layer_ids`` (fc order) for an ``N``-layer target and return the :class:`CapturePlan`.

    ``where`` names the file and field the ids came from; every error carries it.

    Example::

        >>> p = plan_capture([30, -1, 2], 61, where="eagle3_manifest.json")
        >>> p.loop_indices, p.chunk_order, p.captures_last_layer
        ((0, 3, 31), (2, 0, 1), False)
        >>> p = plan_capture([60, -1], 61, where="eagle3_manifest.json")
        >>> p.loop_indices, p.chunk_order, p.captures_last_layer
        ((0,), (1, 0), True)
        >>> p = plan_capture([-1, 1, "final_norm"], 7, where="eagle3_manifest.json")
        >>> p.loop_indices, p.chunk_order, p.captures_last_layer, p.captures_final_norm
        ((0, 2), (0, 1, 2), False, True)
    """
    ids = check_layer_ids(list(layer_ids), num_hidden_layers, file=where)
    loop, last, order = split_capture(ids, num_hidden_layers)
    return CapturePlan(layer_ids=ids, loop_indices=loop, chunk_order=order, where=where, captures_last_layer=last,
                       captures_final_norm=FINAL_NORM in ids)


def to_fc_order(aux: Any, plan: CapturePlan, last: Any = None, normed: Any = None) -> Any:
    """The fc input ``[T, K*H]``: the loop's captures ``aux`` in ascending loop order (the packed ``[T, K'*H]``
    tensor, or a list of ``[T, H]`` chunks; ``None`` when the loop captures nothing) plus ``last``, the last
    layer's output ``[T, H]`` when the plan captures it, plus ``normed``, the final norm's output ``[T, H]`` when
    the plan captures it, in fc order.

    Returns a packed ``aux`` itself when the plan is the identity, else a new tensor (one copy, so it never
    aliases the residual storage ``last`` borrows). Shape-only logic, so the same kernels run for every batch.
    """
    listed = isinstance(aux, (list, tuple))
    if plan.is_identity and not listed:
        return aux
    import torch

    chunks = []
    if plan.loop_indices:
        if listed:
            chunks = list(aux)
        else:
            h = aux.shape[-1] // len(plan.loop_indices)
            chunks = [aux.narrow(-1, c * h, h) for c in range(len(plan.loop_indices))]
    for wanted, value in ((plan.captures_last_layer, last), (plan.captures_final_norm, normed)):
        if wanted:
            chunks.append(value.to(chunks[0].dtype) if chunks else value)
    if len(chunks) == 1:
        return chunks[0].clone()
    return torch.cat([chunks[c] for c in plan.chunk_order], dim=-1)


class FcFeed:
    """What the capture patch installs on one decoder stack (``_eagle3_capture_feed``).

    Called with what the decoder stack's forward returns; permutes the loop's chunks into fc order, appends the last
    layer's output (taken by a forward hook on the final norm), packs a list into one tensor, and hands the fc input
    to the optional dump. ``plan`` is None under stock wiring (the dump alone). ``layers`` is the very list object put
    in ``layers_to_capture`` (:meth:`fed_layer_ids` reports nothing once it was replaced); ``model_name`` names the
    decoder stack in errors.

    That the chunks are the hidden states their layer ids name is proven once per process by the first-batch
    self-check (:mod:`.sglang.selfcheck`), not here. Two per-forward checks are left, each for what the first batch
    cannot prove of later ones: the count of a list of captures (:meth:`_count`) and the final-norm hook's tensor
    (:meth:`_last_layer_output`), state carried from the hook to this call, batch by batch.
    """

    __slots__ = ("plan", "layers", "num_hidden_layers", "dump", "model_name", "final_norm", "stream_norms", "_last",
                 "_normed", "_streams", "_hooks", "__weakref__")

    def __init__(self, plan: CapturePlan | None, layers: list, dump: Any = None, num_hidden_layers: int = 0, *,
                 model_name: str, final_norm: str = "norm", stream_norms: tuple[str, str] | None = None) -> None:
        self.plan = plan
        self.final_norm = final_norm  # the decoder stack's final norm attribute (the family table's)
        # (layer list, input norm) attributes: take each captured layer's entering stream at its input norm (module doc)
        self.stream_norms = stream_norms
        self.layers = layers
        self.num_hidden_layers = num_hidden_layers
        self.dump = dump
        self.model_name = model_name
        self._last = None  # the final norm's hidden + residual, between the hook and __call__
        self._normed = None  # the final norm's output, likewise
        self._streams: dict[int, Any] = {}  # loop index -> the stream entering that layer, likewise
        self._hooks: list = []

    def fed_layer_ids(self, current_loop: Any) -> tuple[int, ...] | None:
        """The layer ids this feed hands the draft, in fc order; None when ``current_loop`` (the model's
        ``layers_to_capture`` now) is not the list it was configured with."""
        if current_loop is not self.layers:
            return None
        if self.plan is not None:
            return tuple(self.plan.layer_ids)  # may include the last layer, taken outside the loop
        return layer_ids_of_loop(self.layers, self.num_hidden_layers)

    def attach(self, model: Any) -> None:
        """Hook the decoder stack ``model``'s final norm when the plan captures its input or its output, and each
        captured layer's input norm when the stream is taken there (``stream_norms``)."""
        if self.plan is None:
            return
        if self.plan.hooks_final_norm:
            self._hooks.append(getattr(model, self.final_norm).register_forward_hook(self._take_last_layer_output))
        if self.stream_norms is not None:
            layers, norm = self.stream_norms  # the norm's name may be dotted into a pair, as the self-check reads it
            for i in self.plan.loop_indices:
                module = attr_path(getattr(model, layers)[i], norm)
                self._hooks.append(module.register_forward_pre_hook(functools.partial(self._take_stream, i),
                                                                    with_kwargs=True))

    def detach(self) -> None:
        """Remove the hooks :meth:`attach` installed (a later configuration replaces this feed)."""
        for hook in self._hooks:
            hook.remove()
        self._hooks.clear()

    def _take_last_layer_output(self, module: Any, args: tuple, output: Any) -> None:
        # RMSNorm(x, residual) returns (normed, x + residual): the last layer's output, and the post-norm state.
        # Called with no residual (never in these families' final norms, kept for completeness), x itself is the
        # last layer's output and the output is the normed tensor.
        pair = isinstance(output, tuple)
        self._last = output[1] if pair else args[0]
        self._normed = output[0] if pair else output

    def _take_stream(self, i: int, module: Any, args: tuple, kwargs: dict) -> None:
        # Before the norm runs: a fused kernel (Gemma3RMSNorm.forward_cuda) overwrites x with the normed output and
        # residual with the sum, in place. x + residual is the sum the norm forms, rounded once in x's dtype as
        # forward_native computes it and as the fused kernel stores it (fp32 add, one rounding).
        x = args[0] if args else kwargs.get("x", kwargs.get("hidden_states"))
        residual = args[1] if len(args) > 1 else kwargs.get("residual")
        self._streams[i] = x.clone() if residual is None else x + residual

    def _taken_streams(self, aux: Any) -> list:
        """The streams the input-norm hooks took for this batch, in the loop's (ascending) order, each checked
        against the loop's own chunk of that index (same tokens, same width) on every forward."""
        taken, self._streams = self._streams, {}
        out = []
        for c, i in enumerate(self.plan.loop_indices):
            value, own = taken.get(i), aux[c]
            if value is None or value.shape != own.shape:
                got = None if value is None else tuple(value.shape)
                raise CaptureError(self.plan.where, None, f"the stream entering {self.model_name}.layers[{i}] was not "
                                   f"taken at its input norm for this batch (got {got}, the loop's capture "
                                   f"{tuple(own.shape)})", "serve with a supported SGLang release (this forward path "
                                   "does not run the decoder layers' input norms)")
            out.append(value)
        return out

    def _last_layer_output(self, hidden: Any, aux: Any, taken: Any, what: str) -> Any:
        """The final-norm hook's tensor ``taken`` (its input or its output, ``what``) for this batch. Checked on every
        forward, unlike anything else here: the self-check proves the first batch only, and a later batch whose path
        skips the hooked norm (or lays its tokens out otherwise at the norm than in the loop) would otherwise feed the
        previous batch's tensor, or rows of other tokens, without any error."""
        if hidden.shape[0] == 0:  # an idle or empty batch skips the final norm
            return hidden.new_empty(hidden.shape)
        rows = aux[0].shape[0] if isinstance(aux, (list, tuple)) and aux else getattr(aux, "shape", (None,))[0]
        if taken is None or taken.shape != hidden.shape or (rows is not None and taken.shape[0] != rows):
            got = None if taken is None else tuple(taken.shape)
            raise CaptureError(self.plan.where, None, f"{what} was not taken at {self.model_name}'s final norm for "
                               f"this batch (got {got}, hidden states {tuple(hidden.shape)}, loop captures with "
                               f"{rows} rows)", "serve with a supported SGLang release, or a draft that does not use "
                               "the last layer")
        return taken

    def _count(self, aux: Any) -> None:
        """A list of captures is counted on every forward (one ``len``): SGLang counts a packed tensor itself
        (``AuxHiddenStatePacker``) but never a list, and a later batch whose path captured fewer layers than the
        first (which the self-check proved) would otherwise hand the fc a narrower input or other layers' chunks."""
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
    """The token ids of the batch the fc input belongs to, for the dump: the decoder stack's own ``input_ids``, or,
    when a multimodal wrapper hands its decoder only the embeddings it computed from the batch's ids
    (``KimiK25ForConditionalGeneration.forward`` -> ``general_mm_embed_routine``, which calls the language model with
    ``input_ids=None``; docs/families.md cites the lines), the ForwardBatch's ``input_ids`` (a multimodal placeholder
    row holds SGLang's pad value there). None when the request itself served embeddings
    (``forward_batch.input_embeds``): no ids made those rows."""
    if input_ids is not None:
        return input_ids
    if getattr(forward_batch, "input_embeds", None) is not None:
        return None
    return getattr(forward_batch, "input_ids", None)
