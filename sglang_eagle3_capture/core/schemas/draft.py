"""A draft's ``config.json``: as every format reader sees it, as SGLang's ``LlamaForCausalLMEagle3`` reads it, and
as speculators writes it (read by ``convert``).

Policy: these are HF configs, full of keys nobody here knows, so unknown keys are kept everywhere except in the
speculators top level, which ``convert`` refuses to carry unless it understands every setting. What is strict is what
changes what the fc receives or the math SGLang's draft class runs: the capture-id lists, the dimensions, the math
flags, the layer count, the RoPE kind. Each field is declared once and shared by the records that read it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ..config_keys import CONVENTION_KEY, FAIL_CLOSED_KEY, IDS_KEY, LAYER_ID_CONVENTION, is_vllm_fail_closed
from ..errors import InputError
from ..layer_ids import FINAL_NORM
from ..records import Anything, Bool, Const, Field, Float, Int, ListOf, MapOf, Nested, OneOf, Optional, Record, Str

MAX_DIM = 1 << 24  # no draft dimension comes near it; bounds what a config alone can make this package allocate
MAX_IDS = 100_000  # ids in one list: more than any target has layers
MATH_FLAGS = ("norm_before_fc", "fc_norm", "norm_output", "norm_before_residual")
SGLANG_ARCH = "LlamaForCausalLMEagle3"
SPECULATORS_ARCHS = ("Eagle3DraftModel", "Eagle3Speculator")

DIM = Int(lo=1, hi=MAX_DIM)
IDS = ListOf(Int(), max_len=MAX_IDS)  # ranges are checked against the target (layer_ids.check_layer_ids)
# eagle_config's list may also carry the layer id "final_norm" where it is marked as this package's layer ids (the
# reader refuses it in an unmarked list: no stock id means the final norm's output)
MARKABLE_IDS = ListOf(OneOf((Int(), Const(FINAL_NORM))), max_len=MAX_IDS)
OBJECT = MapOf(Anything())
FLAG = Optional(Bool())


@dataclass(frozen=True)
class Positive(Float):
    """A finite number above 0 (an epsilon, a RoPE theta)."""

    def describe(self) -> str:
        return "a positive finite number"

    def check(self, value: Any, path: str) -> float:
        if super().check(value, path) <= 0:
            raise self._refuse(value, path)
        return float(value)


def _dim(name: str, fix: str, required: bool = True) -> Field:
    return Field(name, DIM if required else Optional(DIM), fix, required=required)


def _flag(name: str) -> Field:
    return Field(name, FLAG, f'write "{name}": true or false (as the draft was trained)', required=False)


# --- fields shared by several records --------------------------------------------------------------------------------
_IDS_FIX = "list the layers the fc consumes, e.g. [2, 30, 58]"


@dataclass(frozen=True)
class TopIds(OneOf):
    """The top-level id list, or the vLLM fail-closed value (config_keys.VLLM_FAIL_CLOSED_IDS, accepted only beside a
    manifest by each reader); anything else is held to ``IDS``, whose error names the item."""

    def check(self, value: Any, path: str) -> Any:
        return value if is_vllm_fail_closed(value) else IDS.check(value, path)


TOP_IDS = Field(IDS_KEY, Optional(TopIds((IDS, ListOf(OneOf((Int(), Str(max_len=4000))), max_len=2)))), _IDS_FIX,
                required=False)
ARCHITECTURES = Field("architectures", Optional(ListOf(Str(max_len=200))), f'write e.g. ["{SGLANG_ARCH}"]',
                      required=False)
NUM_AUX = Field("num_aux_hidden_states", Optional(Int(lo=1, hi=MAX_IDS)),
                "set it to the number of hidden states the fc consumes", required=False)
HIDDEN = _dim("hidden_size", "copy hidden_size from the draft's training config")
HEADS = _dim("num_attention_heads", "copy num_attention_heads from the draft's training config")
INTERMEDIATE = _dim("intermediate_size", "copy intermediate_size from the draft's training config")
VOCAB = _dim("vocab_size", "copy vocab_size (the target's vocabulary) from the draft's training config")
KV_HEADS = _dim("num_key_value_heads", "copy num_key_value_heads from the draft's training config, or remove it",
                required=False)
HEAD_DIM = _dim("head_dim", "copy head_dim from the draft's training config, or remove it", required=False)
DRAFT_VOCAB = _dim("draft_vocab_size", "set it to the draft's lm_head rows, or remove it (lm_head from the target)",
                   required=False)
FLAGS = tuple(_flag(name) for name in (*MATH_FLAGS, "use_aux_norm"))

# The fail-closed object (config_keys.FAIL_CLOSED_IDS) passes the schema; each reader then accepts it only beside a
# manifest (policy.declared_ids, draft_checks.plan_draft) and the format readers refuse it (it is no training format).
FAIL_CLOSED = MapOf(Str(max_len=4000), max_len=1)


@dataclass(frozen=True)
class IdsOrFailClosed(OneOf):
    """An id list, or the fail-closed object; a list's error names its item (``...layer_ids[1]``), as ``IDS``'s."""

    def check(self, value: Any, path: str) -> Any:
        return (FAIL_CLOSED if isinstance(value, dict) else MARKABLE_IDS).check(value, path)


EAGLE_CONFIG = Record("eagle_config", (
    Field(IDS_KEY, Optional(IdsOrFailClosed((MARKABLE_IDS, FAIL_CLOSED))),
          _IDS_FIX + f" (or {{{FAIL_CLOSED_KEY!r}: ...}}, written by sglang-eagle3-capture, beside the draft's "
          "eagle3_manifest.json)", required=False),
    Field("layer_ids", Optional(IDS), _IDS_FIX, required=False),  # vLLM's older reader
    Field(CONVENTION_KEY, Str(choices=(LAYER_ID_CONVENTION,)), f"set it to {LAYER_ID_CONVENTION!r} or remove it",
          required=False),
    Field("use_aux_hidden_state", Const(True), "remove it (an EAGLE-3 draft always consumes target hidden states)",
          required=False, default=True),
    _flag("norm_before_fc"),
), unknown="keep", error=InputError, fix="write eagle_config as an object")

# What every format reader relies on (formats.check_draft_config), whatever the format.
DRAFT_CONFIG = Record("draft config.json", (
    ARCHITECTURES,
    Field("eagle_config", Optional(Nested(EAGLE_CONFIG)), "write eagle_config as an object", required=False),
    Field("speculators_config", Optional(OBJECT), "re-save the draft with speculators", required=False),
    Field("transformer_layer_config", Optional(OBJECT), "re-save the draft with speculators", required=False),
    Field("rope_parameters", Optional(OBJECT), "correct the config (or re-save the draft)", required=False),
    Field("rope_scaling", Optional(OBJECT), "correct the config (or re-save the draft)", required=False),
    TOP_IDS,
    NUM_AUX,
), unknown="keep", error=InputError, fix="point at the draft's config.json")

_ROPE_FIX = "use a draft trained with default or YaRN full neox RoPE"
ROPE_TYPES = ("default", "yarn")  # what SGLang's get_rope builds for the Llama draft and draft.model computes alike
_YARN = "copy it from the rope parameters the draft was trained with"


def _yarn_number(name: str, kind: Any = None) -> Field:
    return Field(name, Optional(kind or Positive()), _YARN, required=False)


# SGLang reads ``rope_type``, else ``type`` (layers/rotary_embedding/factory.py get_rope); the YaRN keys are what it
# passes on to YaRNScalingRotaryEmbedding (layers/rotary_embedding/yarn.py), read only where the type is yarn.
ROPE = Record("rope parameters", (
    Field("rope_type", Optional(Str(choices=ROPE_TYPES)), _ROPE_FIX, required=False),
    Field("type", Optional(Str(choices=ROPE_TYPES)), _ROPE_FIX, required=False),
    Field("rope_theta", Positive(), "set rope_theta to the draft's RoPE base", required=False),
    _yarn_number("factor"),
    _yarn_number("original_max_position_embeddings", Int(lo=1, hi=1 << 40)),
    _yarn_number("beta_fast"), _yarn_number("beta_slow"),
    _yarn_number("attn_factor"), _yarn_number("extrapolation_factor", Float(lo=0)),
    _yarn_number("mscale", Float(lo=0)), _yarn_number("mscale_all_dim", Float(lo=0)),
    Field("truncate", FLAG, _YARN, required=False),
), unknown="keep", error=InputError, fix=_ROPE_FIX)

_ROPE = Optional(Nested(ROPE))
# The fields SGLang's LlamaForCausalLMEagle3 (llama_eagle3.py, llama.py) reads (draft.config.DraftConfig).
SGLANG_DRAFT = Record("SGLang EAGLE-3 draft config.json", (
    Field("architectures", ListOf(Str(max_len=200), min_len=1), f'write ["{SGLANG_ARCH}"] (SGLang builds the class '
          "architectures[0] names)"),
    Field("model_type", Optional(Str(max_len=200)), "convert a llama draft", required=False),
    Field("hidden_act", Str(choices=("silu",)), "convert a llama/silu draft", required=False, default="silu"),
    HIDDEN, HEADS, INTERMEDIATE, VOCAB, KV_HEADS, HEAD_DIM, DRAFT_VOCAB,
    _dim("num_hidden_layers", "copy num_hidden_layers (the draft's decoder layers, usually 1)"),
    Field("target_hidden_size", DIM, "remove the field or set it to the target's hidden size (SGLang cannot build "
          "null)", required=False),
    NUM_AUX,
    Field("rms_norm_eps", Positive(), "copy rms_norm_eps from the draft's training config", required=False,
          default=1e-6),
    Field("rope_theta", Positive(), "set rope_theta to the draft's RoPE base", required=False, default=10000.0),
    Field("rope_parameters", _ROPE, _ROPE_FIX, required=False),
    Field("rope_scaling", _ROPE, _ROPE_FIX, required=False),
    Field("original_max_position_embeddings", Optional(Int(lo=1, hi=1 << 40)), _YARN, required=False),
    Field("partial_rotary_factor", Float(lo=1, hi=1), _ROPE_FIX, required=False, default=1),
    Field("rope_is_neox_style", Const(True), _ROPE_FIX, required=False, default=True),
    Field("bias", FLAG, 'write "bias": true or false (the fc\'s bias)', required=False),
    Field("attention_bias", FLAG, 'write "attention_bias": true or false', required=False),
    Field("tie_word_embeddings", FLAG, 'write "tie_word_embeddings": true or false', required=False),
    Field("eagle_config", Optional(Nested(EAGLE_CONFIG)), "write eagle_config as an object", required=False),
    Field("quantization_config", Const(None), "verify models unquantized drafts only (SGLang would quantize the "
          "layers): verify the unquantized draft", required=False),
    *FLAGS,
), unknown="keep", error=InputError, fix="point at the draft's config.json")

# The tensors a one-layer SGLang draft holds follow from these (checkpoint.expected_eagle3_tensors).
TENSOR_DIMS = Record("draft dimensions", (HIDDEN, HEADS, INTERMEDIATE, VOCAB, KV_HEADS, HEAD_DIM, DRAFT_VOCAB),
                     unknown="keep", error=InputError, fix="point at the draft's config.json")

_FAITHFUL = "this draft cannot be converted faithfully"
_NO = Optional(Const(False))
# What SGLang's LlamaForCausalLMEagle3 (llama_eagle3.py on llama.py) cannot run with the math the draft was trained
# with, declared once and read by every format's convert path (SGLANG_LAYOUT, TRANSFORMER_LAYER): its qkv has no bias
# (q/k/v biases are dropped without a word, o_proj gets one from nowhere), its LlamaMLP neither bias nor any
# activation but silu, a tied head is the embedding (the trained lm_head is dropped), a quantization config makes it
# quantize the layers, llama4_text reads another MLP width, and it builds num_hidden_layers decoder layers.
HONOURED = (
    Field("model_type", Str(choices=("llama",)), f"{_FAITHFUL}: SGLang's LlamaForCausalLMEagle3 is a Llama layer (a "
          "qwen3 draft has q/k norms it has no place for)", required=False, default="llama"),
    Field("num_hidden_layers", Const(1), f"{_FAITHFUL}: only one-layer drafts are converted", required=False,
          default=1),
    Field("attention_bias", _NO, f"{_FAITHFUL}: SGLang's EAGLE-3 qkv has no bias", required=False, default=False),
    Field("mlp_bias", _NO, f"{_FAITHFUL}: SGLang's LlamaMLP has no bias", required=False, default=False),
    Field("hidden_act", Str(choices=("silu",)), f"{_FAITHFUL}: SGLang's LlamaMLP supports only silu", required=False,
          default="silu"),
    Field("tie_word_embeddings", _NO, f"{_FAITHFUL}: untie the embeddings (SGLang would use the embedding as lm_head "
          "and drop the trained one)", required=False, default=False),
    Field("quantization_config", Const(None), f"{_FAITHFUL}: convert an unquantized draft (SGLang would quantize "
          "its layers)", required=False),
)

# speculators' transformer_layer_config: an HF LlamaConfig (kept keys), strict where SGLang's class would differ.
TRANSFORMER_LAYER = Record("speculators transformer_layer_config", (
    HIDDEN, HEADS, INTERMEDIATE, VOCAB, KV_HEADS, HEAD_DIM,
    Field("layer_types", Optional(ListOf(Str(max_len=200))), "re-save the draft with speculators", required=False),
    *HONOURED,
), unknown="keep", error=InputError, fix="re-save the draft with speculators")

# What convert needs of a draft already in SGLang's layout (doctor.formats.sglang_eagle_config); the rest is copied
# as is.
SGLANG_LAYOUT = Record("SGLang-layout draft config.json", (
    Field("architectures", ListOf(Str(choices=(SGLANG_ARCH,)), min_len=1, max_len=1), f"only {SGLANG_ARCH} drafts "
          "(SpecForge/SGLang format) or speculators Eagle-3 drafts are converted"),
    *HONOURED,
    *FLAGS,
), unknown="keep", error=InputError, fix="point at the draft's config.json")

_METADATA_FIX = "re-save the draft with speculators"
# speculators 0.9.0 Eagle3SpeculatorConfig's top level: convert carries these or keeps them as metadata, and
# refuses any other key (a setting it does not understand could change the math).
SPECULATORS = Record("speculators Eagle-3 config.json", (
    Field("speculators_model_type", Const("eagle3"), "only speculators 'eagle3' drafts are converted"),
    Field("architectures", ListOf(Str(choices=SPECULATORS_ARCHS)),
          f"point at a draft saved as {' or '.join(SPECULATORS_ARCHS)}", required=False, default=[]),
    Field("draft_vocab_size", DIM, "set it to the draft's lm_head rows"),
    Field("target_hidden_size", Optional(DIM), "set it to the target's hidden size, or null", required=False),
    TOP_IDS,
    Field("tie_word_embeddings", Const(False), "untie the embeddings (tied draft embeddings are not converted)",
          required=False, default=False),
    Field("transformer_layer_config", Nested(TRANSFORMER_LAYER), "re-save the draft with speculators"),
    *(_flag(name) for name in MATH_FLAGS),
    *(Field(name, Anything(), _METADATA_FIX, required=False) for name in (
        "speculators_version", "speculators_config", "auto_map", "dtype", "torch_dtype", "transformers_version",
        "embed_requires_grad", "_name_or_path")),
), unknown="refuse", error=InputError,
    fix="convert only drafts whose every setting is understood (speculators 0.9.0 Eagle-3 keys)")

RECORDS = (EAGLE_CONFIG, DRAFT_CONFIG, ROPE, SGLANG_DRAFT, SGLANG_LAYOUT, TENSOR_DIMS, TRANSFORMER_LAYER, SPECULATORS)
