"""A draft's ``config.json`` as every format reader, SGLang's ``LlamaForCausalLMEagle3`` and speculators see it:
strict where a value changes what the fc receives or the math SGLang runs, unknown keys kept (refused only in the
speculators top level, which ``convert`` carries only when it understands every setting)."""

from __future__ import annotations

from typing import Any, Literal

import msgspec

from ..config_keys import CONVENTION_KEY, FAIL_CLOSED_KEY, IDS_KEY, LAYER_ID_CONVENTION, is_vllm_fail_closed
from ..layer_ids import FINAL_NORM
from ..records import Custom, Record, exactly, fix, integer, list_of, map_of, number, record, text

MAX_DIM = 1 << 24  # no draft dimension comes near it; bounds what a config alone can make this package allocate
MAX_IDS = 100_000  # ids in one list: more than any target has layers
MATH_FLAGS = ("norm_before_fc", "fc_norm", "norm_output", "norm_before_residual")
SGLANG_ARCH = "LlamaForCausalLMEagle3"
SPECULATORS_ARCHS = ("Eagle3DraftModel", "Eagle3Speculator")

DIM = integer(1, MAX_DIM)
IDS = list_of(int, max_len=MAX_IDS)  # ranges are checked against the target (layer_ids.check_layer_ids)
# "final_norm" is read only where the list is marked as this package's layer ids (no stock id means it)
MARKABLE_IDS = list_of(int | Literal[FINAL_NORM], max_len=MAX_IDS)
OBJECT = map_of(Any)
FLAG = bool | None
POSITIVE = number(positive=True)  # an epsilon, a RoPE theta
_IDS_FIX = "list the layers the fc consumes, e.g. [2, 30, 58]"


def _flag(name: str) -> Any:
    return fix(FLAG, f'write "{name}": true or false (as the draft was trained)')


class TopIds(Custom):
    """The top-level id list, or the vLLM fail-closed value (accepted only beside a manifest by each reader)."""

    takes = ("list",)

    @classmethod
    def check(cls, value: Any) -> Any:
        return value if is_vllm_fail_closed(value) else msgspec.convert(value, IDS, strict=True)


TOP_IDS = fix(TopIds | None, _IDS_FIX)
ARCHITECTURES = fix(list_of(text(200)) | None, f'write e.g. ["{SGLANG_ARCH}"]')
NUM_AUX = fix(integer(1, MAX_IDS) | None, "set it to the number of hidden states the fc consumes")
HIDDEN = fix(DIM, "copy hidden_size from the draft's training config")
HEADS = fix(DIM, "copy num_attention_heads from the draft's training config")
INTERMEDIATE = fix(DIM, "copy intermediate_size from the draft's training config")
VOCAB = fix(DIM, "copy vocab_size (the target's vocabulary) from the draft's training config")
KV_HEADS = fix(DIM | None, "copy num_key_value_heads from the draft's training config, or remove it")
HEAD_DIM = fix(DIM | None, "copy head_dim from the draft's training config, or remove it")
DRAFT_VOCAB = fix(DIM | None, "set it to the draft's lm_head rows, or remove it (lm_head from the target)")

# The fail-closed object passes here; each reader accepts it only beside a manifest, the format readers refuse it.
FAIL_CLOSED = map_of(text(4000), max_len=1)

_ROPE_FIX = "use a draft trained with default or YaRN full neox RoPE"
ROPE_TYPES = ("default", "yarn")  # what SGLang's get_rope builds for the Llama draft and draft.model computes alike
_YARN = "copy it from the rope parameters the draft was trained with"
YARN_NUMBER, YARN_SCALE = fix(POSITIVE | None, _YARN), fix(number(0) | None, _YARN)
ORIGINAL_MAX = fix(integer(1, 1 << 40) | None, _YARN)
_FAITHFUL = "this draft cannot be converted faithfully"
_NO = exactly(False) | None
_METADATA = fix(Any, "re-save the draft with speculators")


@record("write eagle_config as an object", name="eagle_config")
class EAGLE_CONFIG(Record, rename={"ids": IDS_KEY, "convention": CONVENTION_KEY}):
    ids: fix(MARKABLE_IDS | FAIL_CLOSED | None, _IDS_FIX + f" (or {{{FAIL_CLOSED_KEY!r}: ...}}, written by "
             "sglang-eagle3-capture, beside the draft's eagle3_manifest.json)") = None
    layer_ids: fix(IDS | None, _IDS_FIX) = None  # vLLM's older reader
    convention: fix(Literal[LAYER_ID_CONVENTION], f"set it to {LAYER_ID_CONVENTION!r} or remove it") = None
    use_aux_hidden_state: fix(exactly(True), "remove it (an EAGLE-3 draft always consumes target hidden states)"
                              ) = True
    norm_before_fc: _flag("norm_before_fc") = None


# What every format reader relies on (formats.check_draft_config), whatever the format.
@record("point at the draft's config.json", name="draft config.json")
class DRAFT_CONFIG(Record, rename={"ids": IDS_KEY}):
    architectures: ARCHITECTURES = None
    eagle_config: fix(EAGLE_CONFIG | None, "write eagle_config as an object") = None
    speculators_config: fix(OBJECT | None, "re-save the draft with speculators") = None
    transformer_layer_config: fix(OBJECT | None, "re-save the draft with speculators") = None
    rope_parameters: fix(OBJECT | None, "correct the config (or re-save the draft)") = None
    rope_scaling: fix(OBJECT | None, "correct the config (or re-save the draft)") = None
    ids: TOP_IDS = None
    num_aux_hidden_states: NUM_AUX = None


# SGLang reads ``rope_type``, else ``type`` (layers/rotary_embedding/factory.py get_rope); the YaRN keys are what it
# passes on to YaRNScalingRotaryEmbedding (layers/rotary_embedding/yarn.py), read only where the type is yarn.
@record(_ROPE_FIX, name="rope parameters")
class ROPE(Record):
    rope_type: fix(Literal[ROPE_TYPES] | None, _ROPE_FIX) = None
    type: fix(Literal[ROPE_TYPES] | None, _ROPE_FIX) = None
    rope_theta: fix(POSITIVE, "set rope_theta to the draft's RoPE base") = None
    factor: YARN_NUMBER = None
    original_max_position_embeddings: ORIGINAL_MAX = None
    beta_fast: YARN_NUMBER = None
    beta_slow: YARN_NUMBER = None
    attn_factor: YARN_NUMBER = None
    extrapolation_factor: YARN_SCALE = None
    mscale: YARN_SCALE = None
    mscale_all_dim: YARN_SCALE = None
    truncate: fix(FLAG, _YARN) = None


@record("point at the draft's config.json", name="draft dimensions")
class TENSOR_DIMS(Record, kw_only=True):
    hidden_size: HIDDEN
    num_attention_heads: HEADS
    intermediate_size: INTERMEDIATE
    vocab_size: VOCAB
    num_key_value_heads: KV_HEADS = None
    head_dim: HEAD_DIM = None
    draft_vocab_size: DRAFT_VOCAB = None


# The fields SGLang's LlamaForCausalLMEagle3 (llama_eagle3.py, llama.py) reads (draft.config.DraftConfig).
@record("point at the draft's config.json", name="SGLang EAGLE-3 draft config.json")
class SGLANG_DRAFT(Record, kw_only=True):  # fields in the order they are judged: architectures first
    architectures: fix(list_of(text(200), min_len=1), f'write ["{SGLANG_ARCH}"] (SGLang builds the class '
                       "architectures[0] names)")
    model_type: fix(text(200) | None, "convert a llama draft") = None
    hidden_act: fix(Literal["silu"], "convert a llama/silu draft") = "silu"
    hidden_size: HIDDEN
    num_attention_heads: HEADS
    intermediate_size: INTERMEDIATE
    vocab_size: VOCAB
    num_key_value_heads: KV_HEADS = None
    head_dim: HEAD_DIM = None
    draft_vocab_size: DRAFT_VOCAB = None
    num_hidden_layers: fix(DIM, "copy num_hidden_layers (the draft's decoder layers, usually 1)")
    target_hidden_size: fix(DIM, "remove the field or set it to the target's hidden size (SGLang cannot build null)"
                            ) = None
    num_aux_hidden_states: NUM_AUX = None
    rms_norm_eps: fix(POSITIVE, "copy rms_norm_eps from the draft's training config") = 1e-6
    rope_theta: fix(POSITIVE, "set rope_theta to the draft's RoPE base") = 10000.0
    rope_parameters: fix(ROPE | None, _ROPE_FIX) = None
    rope_scaling: fix(ROPE | None, _ROPE_FIX) = None
    original_max_position_embeddings: ORIGINAL_MAX = None
    partial_rotary_factor: fix(number(1, 1), _ROPE_FIX) = 1
    rope_is_neox_style: fix(exactly(True), _ROPE_FIX) = True
    bias: fix(FLAG, 'write "bias": true or false (the fc\'s bias)') = None
    attention_bias: fix(FLAG, 'write "attention_bias": true or false') = None
    tie_word_embeddings: fix(FLAG, 'write "tie_word_embeddings": true or false') = None
    eagle_config: fix(EAGLE_CONFIG | None, "write eagle_config as an object") = None
    quantization_config: fix(None, "verify models unquantized drafts only (SGLang would quantize the layers): verify "
                             "the unquantized draft") = None
    norm_before_fc: _flag("norm_before_fc") = None
    fc_norm: _flag("fc_norm") = None
    norm_output: _flag("norm_output") = None
    norm_before_residual: _flag("norm_before_residual") = None
    use_aux_norm: _flag("use_aux_norm") = None


# What SGLang's LlamaForCausalLMEagle3 (llama_eagle3.py on llama.py) cannot run with the trained math, for convert.
class HONOURED(Record, kw_only=True):
    model_type: fix(Literal["llama"], f"{_FAITHFUL}: SGLang's LlamaForCausalLMEagle3 is a Llama layer (a qwen3 "
                    "draft has q/k norms it has no place for)") = "llama"
    num_hidden_layers: fix(Literal[1], f"{_FAITHFUL}: only one-layer drafts are converted") = 1
    attention_bias: fix(_NO, f"{_FAITHFUL}: SGLang's EAGLE-3 qkv has no bias") = False
    mlp_bias: fix(_NO, f"{_FAITHFUL}: SGLang's LlamaMLP has no bias") = False
    hidden_act: fix(Literal["silu"], f"{_FAITHFUL}: SGLang's LlamaMLP supports only silu") = "silu"
    tie_word_embeddings: fix(_NO, f"{_FAITHFUL}: untie the embeddings (SGLang would use the embedding as lm_head "
                             "and drop the trained one)") = False
    quantization_config: fix(None, f"{_FAITHFUL}: convert an unquantized draft (SGLang would quantize its layers)"
                             ) = None


@record("re-save the draft with speculators", name="speculators transformer_layer_config")
class TRANSFORMER_LAYER(HONOURED, kw_only=True):
    hidden_size: HIDDEN
    num_attention_heads: HEADS
    intermediate_size: INTERMEDIATE
    vocab_size: VOCAB
    num_key_value_heads: KV_HEADS = None
    head_dim: HEAD_DIM = None
    layer_types: fix(list_of(text(200)) | None, "re-save the draft with speculators") = None


# What convert needs of a draft already in SGLang's layout (doctor.formats.SGLangEagleConfigFormat); the rest is copied.
@record("point at the draft's config.json", name="SGLang-layout draft config.json")
class SGLANG_LAYOUT(HONOURED, kw_only=True):
    architectures: fix(list_of(Literal[SGLANG_ARCH], min_len=1, max_len=1), f"only {SGLANG_ARCH} drafts "
                       "(SpecForge/SGLang format) or speculators Eagle-3 drafts are converted")
    norm_before_fc: _flag("norm_before_fc") = None
    fc_norm: _flag("fc_norm") = None
    norm_output: _flag("norm_output") = None
    norm_before_residual: _flag("norm_before_residual") = None
    use_aux_norm: _flag("use_aux_norm") = None


# speculators 0.9.0 Eagle3SpeculatorConfig's top level: convert carries these (or as metadata), refuses any other key.
@record("convert only drafts whose every setting is understood (speculators 0.9.0 Eagle-3 keys)",
        name="speculators Eagle-3 config.json")
class SPECULATORS(Record, forbid_unknown_fields=True, kw_only=True, rename={"ids": IDS_KEY}):
    speculators_model_type: fix(Literal["eagle3"], "only speculators 'eagle3' drafts are converted")
    architectures: fix(list_of(Literal[SPECULATORS_ARCHS]), f"point at a draft saved as "
                       f"{' or '.join(SPECULATORS_ARCHS)}") = []
    draft_vocab_size: fix(DIM, "set it to the draft's lm_head rows")
    target_hidden_size: fix(DIM | None, "set it to the target's hidden size, or null") = None
    ids: TOP_IDS = None
    tie_word_embeddings: fix(exactly(False), "untie the embeddings (tied draft embeddings are not converted)") = False
    transformer_layer_config: fix(TRANSFORMER_LAYER, "re-save the draft with speculators")
    norm_before_fc: _flag("norm_before_fc") = None
    fc_norm: _flag("fc_norm") = None
    norm_output: _flag("norm_output") = None
    norm_before_residual: _flag("norm_before_residual") = None
    speculators_version: _METADATA = None
    speculators_config: _METADATA = None
    auto_map: _METADATA = None
    dtype: _METADATA = None
    torch_dtype: _METADATA = None
    transformers_version: _METADATA = None
    embed_requires_grad: _METADATA = None
    _name_or_path: _METADATA = None


RECORDS = (EAGLE_CONFIG, DRAFT_CONFIG, ROPE, SGLANG_DRAFT, SGLANG_LAYOUT, TENSOR_DIMS, TRANSFORMER_LAYER, SPECULATORS)
