"""The shape of a target family's facts: a frozen record (docs/families.md explains each field)."""

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
STREAM_FROM_INPUT_NORM = "input-norm"  # x + residual at layers[i]'s input norm (Gemma 3: the loop's is a branch output)
STREAM_FROM = (STREAM_FROM_LOOP, STREAM_FROM_INPUT_NORM)

# Where the causal LM's pipeline group is read (stock set_eagle3_layers_to_capture returns early off the last rank).
PP_FROM_MODEL = "model"  # self.pp_group
PP_FROM_RUNTIME = "runtime"  # runtime_context.get_parallel().pp_group

# A deepstack layer id's tensor relative to the add of vision features to its output (HF hidden_states: before).
DEEPSTACK_BEFORE = "before-add"
DEEPSTACK_AFTER = "after-add"
DEEPSTACK_ORDERS = (DEEPSTACK_BEFORE, DEEPSTACK_AFTER)

# Every decoder stack's forward parameters, unless a family says otherwise (the seam probe checks them per release).
FORWARD_PARAMS = ("self", "input_ids", "positions", "forward_batch", "input_embeds", "pp_proxy_tensors")


@dataclass(frozen=True)
class Family:
    """SGLang model classes that share one capture loop, and how that loop captures (docs/families.md, the field table);
    ``architectures`` is the compatibility unit of a manifest."""

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
        """The attributes this family's patch replaces (or adds), all or nothing; ``absent_hooks``: causal LMs whose
        ``set_eagle3_layers_to_capture`` the release lacks, left out."""
        out = [Seam("target.set_eagle3", m, cls, "set_eagle3_layers_to_capture", ("self", "layer_ids"))
               for m, cls in self.causal_lms if cls not in absent_hooks]
        for m, cls in self.models:
            out.append(Seam("target.forward", m, cls, "forward", self.forward_params))
            out.append(Seam("target.feed_slot", m, cls, "_eagle3_capture_feed", None))
        return tuple(out)
