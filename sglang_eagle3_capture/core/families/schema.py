"""The shape of a target family's facts: a frozen record, standard library only."""

from __future__ import annotations

from dataclasses import dataclass

from ..releases.schema import Seam

PACKED = "packed"  # AuxHiddenStatePacker: one [T, K*H] tensor, chunks in ascending loop order
LIST = "list"  # AuxHiddenStateList (a plain list before 0.5.21): K [T, H] tensors in ascending loop order
CONTAINERS = (PACKED, LIST)

# What stock SGLang does with loop index N (the last layer's output, past the loop) when a draft asks for it.
N_COUNT_ERROR = "count-error"  # the packer raises "captured k of K aux hidden states" (or asserts, 0.5.17-0.5.19)
N_INDEX_ERROR = "index-error"  # setattr on self.layers[N] at configuration: IndexError
N_DROPPED = "dropped"  # the list is one short, silently; the draft's fc then fails on its input width
STOCK_PAST_LOOP = (N_COUNT_ERROR, N_INDEX_ERROR, N_DROPPED)

# Where the plugin takes the residual stream entering a captured decoder layer (loop index i >= 0).
STREAM_FROM_LOOP = "loop"  # the stock loop's own capture: the complete stream (routing only)
# The operands of layers[i]'s input norm: ``x + residual`` when it is handed the pair, ``x`` alone (copied) when it is
# handed none (layer 0, the embedding). For a loop that appends the hidden half of an unsummed ``(hidden, residual)``
# pair (Gemma 3 from 0.5.17), whose sum exists only inside the next layer's input norm.
STREAM_FROM_INPUT_NORM = "input-norm"
STREAM_FROM = (STREAM_FROM_LOOP, STREAM_FROM_INPUT_NORM)

# Where the causal LM's pipeline group is read (stock set_eagle3_layers_to_capture returns early off the last rank).
PP_FROM_MODEL = "model"  # self.pp_group
PP_FROM_RUNTIME = "runtime"  # runtime_context.get_parallel().pp_group

# Where a deepstack layer id's tensor is taken relative to SGLang's (or a trainer's) add of the deepstack embedding to
# that layer's output on image/video tokens (docs/families.md, qwen3_vl): HF ``hidden_states[k+1]`` is BEFORE.
DEEPSTACK_BEFORE = "before-add"
DEEPSTACK_AFTER = "after-add"
DEEPSTACK_ORDERS = (DEEPSTACK_BEFORE, DEEPSTACK_AFTER)

# Every decoder stack's forward in the supported releases: one signature for all (docs/families.md; each family file
# cites its forward's lines, and the seam probe checks the parameter names against the installed release).
FORWARD_PARAMS = ("self", "input_ids", "positions", "forward_batch", "input_embeds", "pp_proxy_tensors")


@dataclass(frozen=True)
class Family:
    """SGLang model classes that share one capture loop, and how that loop captures.

    - ``architectures``: HF ``architectures[0]`` values served by these classes; the compatibility unit of a
      manifest (a draft trained on one serves any other with the same layer count and hidden size).
    - ``causal_lms``: ``(module, class)`` of every class that defines ``set_eagle3_layers_to_capture`` (its
      subclasses inherit it); ``models``: ``(module, class)`` of every decoder stack that defines its own
      ``forward`` (one that inherits it needs no entry), reached from the causal LM as ``model_attr``;
      ``forward_params``: that forward's parameter names; ``embeds_param``: the one of them that hands the stack
      embeddings instead of ids (``inputs_embeds`` in Qwen3-Next's forward, ``input_embeds`` elsewhere).
    - ``container``: what the loop hands on (:data:`PACKED` or :data:`LIST`); ``layer_flag``: a per-layer
      attribute the loop reads instead of ``layers_to_capture`` (Qwen2/3-MoE ``_is_layer_to_capture``, never
      cleared by SGLang); ``pp_group``: where the causal LM's pipeline group is read (:data:`PP_FROM_MODEL`
      or :data:`PP_FROM_RUNTIME`).
    - ``final_norm``: the decoder stack's final norm attribute; a forward hook on it sees the last layer's
      output (layer id N-1, loop index N, which no loop of these families reaches itself).
    - ``stock_rule``: how stock SGLang reads explicit ids (:mod:`~sglang_eagle3_capture.core.releases.schema`
      rules; a release file may override it); ``stock_past_loop``: what stock SGLang does with loop index N
      (``N_*``; a release's ``final_norm_captures`` says where the family captures it itself).
    - ``text_config``: architectures whose decoder dimensions live in ``config.json: text_config``;
      ``layer_count_keys``: the config keys SGLang reads the decoder layer count from, the first present wins
      (LongCat-Flash: ``num_layers`` where ``num_hidden_layers`` is absent).
    - ``deepstack``: the dotted ``config.json`` path of the list whose length is the number of decoder layers whose
      output SGLang adds visual (deepstack) features to on image/video tokens (Qwen3-VL); the ids of those layers
      name another tensor in SGLang than in HF ``hidden_states`` (docs/families.md). None: no deepstack.
    - ``model_attrs``: ``(class name, attribute)`` of a causal LM whose decoder stack is not ``model_attr`` (a
      multimodal wrapper that configures its language model itself: Gemma 4's ``language_model``).
    - ``stream_from``: where the plugin takes the residual stream entering captured layer ``i``
      (:data:`STREAM_FROM_LOOP`: the loop's own capture; :data:`STREAM_FROM_INPUT_NORM`: ``layers[i]``'s input
      norm operands, for a loop that captures a layer's branch output apart from its residual).
    - ``layers``, ``embed_tokens``, ``input_norm``, ``attn``: the decoder stack's layer list and embedding, and a
      decoder layer's input norm and attention module (the same names in every family and release, 0.5.17-0.5.23;
      dotted into a pair where a layer holds two, LongCat-Flash's ``input_layernorm.0``): where the first-batch
      self-check (:mod:`sglang_eagle3_capture.core.sglang.selfcheck`) takes its references; ``attn`` None where the
      layers share no attention module name (hybrid stacks: ``linear_attn`` on linear layers, the attention itself on
      full-attention layers), so the check does not take that route there.
    """

    name: str
    architectures: tuple[str, ...]
    causal_lms: tuple[tuple[str, str], ...]
    models: tuple[tuple[str, str], ...]
    stock_rule: str
    container: str = LIST
    stock_past_loop: str = N_DROPPED
    layer_flag: str | None = None
    pp_group: str = PP_FROM_MODEL
    forward_params: tuple[str, ...] = FORWARD_PARAMS
    embeds_param: str = "input_embeds"
    model_attr: str = "model"
    final_norm: str = "norm"
    text_config: tuple[str, ...] = ()
    layer_count_keys: tuple[str, ...] = ("num_hidden_layers",)
    deepstack: str | None = None
    model_attrs: tuple[tuple[str, str], ...] = ()
    stream_from: str = STREAM_FROM_LOOP
    layers: str = "layers"
    embed_tokens: str = "embed_tokens"
    input_norm: str = "input_layernorm"
    attn: str | None = "self_attn"

    def __post_init__(self) -> None:
        if self.container not in CONTAINERS or self.stock_past_loop not in STOCK_PAST_LOOP:
            raise ValueError(f"family {self.name}: container {self.container!r} / stock_past_loop "
                             f"{self.stock_past_loop!r} not in {CONTAINERS} / {STOCK_PAST_LOOP}")
        if self.pp_group not in (PP_FROM_MODEL, PP_FROM_RUNTIME) or not self.causal_lms or not self.models:
            raise ValueError(f"family {self.name}: needs causal_lms, models and a known pp_group")
        if self.embeds_param not in self.forward_params:
            raise ValueError(f"family {self.name}: embeds_param {self.embeds_param!r} not in {self.forward_params}")
        at_norms = self.stream_from == STREAM_FROM_INPUT_NORM
        if self.stream_from not in STREAM_FROM or (at_norms and self.container != LIST):
            raise ValueError(f"family {self.name}: stream_from {self.stream_from!r} not in {STREAM_FROM} "
                             "(input-norm needs a list container)")

    def stack_attr(self, model_class: str) -> str:
        """The attribute of causal LM class ``model_class`` that holds its decoder stack."""
        return dict(self.model_attrs).get(model_class, self.model_attr)

    @property
    def model_classes(self) -> tuple[str, ...]:
        """Names of the decoder stacks whose forward the patch wraps."""
        return tuple(cls for _, cls in self.models)

    def seams(self, absent_hooks: tuple[str, ...] = ()) -> tuple[Seam, ...]:
        """The attributes this family's capture patch replaces (or adds), applied all or nothing; ``absent_hooks``:
        causal LMs (class names) whose ``set_eagle3_layers_to_capture`` the release lacks, left out."""
        out = [Seam("target.set_eagle3", m, cls, "set_eagle3_layers_to_capture", ("self", "layer_ids"))
               for m, cls in self.causal_lms if cls not in absent_hooks]
        for m, cls in self.models:
            out.append(Seam("target.forward", m, cls, "forward", self.forward_params))
            out.append(Seam("target.feed_slot", m, cls, "_eagle3_capture_feed", None))
        return tuple(out)
