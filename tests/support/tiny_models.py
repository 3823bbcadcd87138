"""Tiny, seeded, deterministic checkpoints for the tests (built in well under a second each).

- ``build_tiny_target``: a DeepSeek-V3 built with HF transformers' own ``DeepseekV3Config`` and
  ``DeepseekV3ForCausalLM`` (random weights from a fixed seed), saved with ``save_pretrained`` as
  safetensors. MLA dims, experts and vocab are small. ``config.json`` also carries the keys SGLang
  0.5.23's CPU path reads that transformers does not write: yarn ``rope_scaling`` (CPU rope supports only
  deepseek_yarn, ``layers/rotary_embedding/factory.py::get_rope_cpu``) and ``moe_layer_freq``
  (``models/deepseek_v2.py``), as real DeepSeek-V3 configs do.
- ``build_family_target``: the same for every other target family (:data:`FAMILY_TARGETS`: Llama, TeleFLM, Qwen2,
  Qwen3, Qwen3-MoE, Qwen2-MoE, GPT-OSS, GLM-4.5, MiniMax-M2, GLM-4.7-Flash, Apertus, Gemma 4, MiniMax-M3 text and VL,
  LongCat-Flash, Bailing-MoE, Qwen3.5 text, MoE and VL, Qwen3-Next), 6 layers, hidden 64 (LongCat 256), with
  transformers' own classes and the keys SGLang's CPU path reads. Where SGLang reads another config or weight layout
  than transformers writes (MiniMax-M3, LongCat-Flash), transformers' own checkpoint goes to ``hf/`` (the reference
  ``hf_reference.load_hf`` loads) and the directory itself holds the same weights as SGLang loads them; Bailing-MoE
  has no transformers class (see :func:`_build_bailing`).
- ``build_tiny_draft``: an EAGLE-3 draft in the layout SGLang's ``LlamaForCausalLMEagle3``
  (``models/llama_eagle3.py``) loads: config.json + model.safetensors with ``fc``, ``midlayer.*``,
  ``norm``, ``lm_head``, ``d2t``, ``t2d``. The embedding comes from the target at load time.

Nothing here imports sglang.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field, replace
from pathlib import Path

import torch

from fixtures.target import YARN  # yarn rope as in DeepSeek-V3's config, scaled down; SGLang's CPU rope needs it

TINY_TARGET_CONFIG = dict(
    vocab_size=256,
    hidden_size=64,
    intermediate_size=128,
    moe_intermediate_size=32,
    num_attention_heads=4,
    num_key_value_heads=4,
    n_shared_experts=1,
    n_routed_experts=8,
    num_experts_per_tok=2,
    n_group=2,
    topk_group=1,
    kv_lora_rank=32,
    q_lora_rank=48,
    qk_rope_head_dim=16,
    qk_nope_head_dim=16,
    v_head_dim=16,
    first_k_dense_replace=1,
    max_position_embeddings=512,
    num_nextn_predict_layers=0,
    tie_word_embeddings=False,
    # 0.1 rather than HF's 0.02: every layer moves the residual stream visibly and greedy outputs vary
    initializer_range=0.1,
)

# Keys transformers does not write but SGLang's DeepSeek CPU path reads (present in real V3 configs).
_SGLANG_CONFIG_KEYS = {"moe_layer_freq": 1, "topk_method": "noaux_tc", "scoring_func": "sigmoid"}

DRAFT_VOCAB_SIZE = 128

# The other target families (docs/families.md): transformers' own config and model class per family, the keys
# SGLang's CPU path reads that transformers does not write, and the server args their SGLang class needs on CPU.
_FAMILY_COMMON = dict(vocab_size=256, hidden_size=64, num_attention_heads=4, num_key_value_heads=2,
                      max_position_embeddings=512, tie_word_embeddings=False, initializer_range=0.1)
_MOE = dict(moe_intermediate_size=32, num_experts_per_tok=2)


# vLLM's CPU attention takes head sizes [32, 64, 80, 96, 112, 128, 160, 192, 224, 256, 512] only
# (v1/attention/backends/cpu_attn.py:69 in 0.32): the common hidden 64 over 4 heads (16) does not load there.
VLLM_DIMS = dict(hidden_size=256, num_attention_heads=4, num_key_value_heads=2, head_dim=64, intermediate_size=256)
# DeepSeek-V3 on vLLM's CPU build: the AMX MLA backend (chosen where the CPU has AMX) takes bf16 weights and these MLA
# head sizes (with the fixtures' 16-wide heads, amx_mla.py:303 raises "invalid weight input features 16"); its
# fallback CPU_MLA shares no KV block size with the draft's attention (block 16 against multiples of 32).
VLLM_MLA_DIMS = dict(hidden_size=256, qk_nope_head_dim=128, qk_rope_head_dim=64, v_head_dim=128, kv_lora_rank=512,
                     q_lora_rank=256, intermediate_size=256, moe_intermediate_size=64)

JSON_NULL = object()  # an extra_keys value written as JSON null (None removes the key)


@dataclass(frozen=True)
class TinyFamilyTarget:
    """How to build one family's tiny target: ``config_class``/``model_class`` in transformers, their kwargs,
    keys added to config.json after ``save_pretrained``, and ServerArgs overrides for SGLang on CPU.
    ``architecture`` (when set) replaces ``architectures[0]``: an SGLang class that loads the same checkpoint.
    ``outer`` (when set): ``config_class`` is a wrapper whose decoder config is its ``text_config``; ``config`` (with
    the common keys) and ``extra_keys`` become that ``text_config``, and ``outer`` holds the wrapper's own kwargs
    (``vision_config``; ``tie_word_embeddings``, False unless given). ``renames`` rewrite checkpoint name prefixes after
    ``save_pretrained``.

    ``sglang_config``: keys of SGLang's config.json only (None removes one), and ``weight_layout``: the
    transformers conversion mapping (``conversion_mapping.py``) whose reversal writes the weight names SGLang loads;
    with either, transformers' own checkpoint is saved to ``hf/`` as the reference. ``config_class`` None: no
    transformers class (Bailing-MoE), ``config`` is the config.json SGLang reads."""

    config_class: str | None
    model_class: str | None
    config: dict
    extra_keys: dict = field(default_factory=dict)
    server_args: dict = field(default_factory=dict)
    architecture: str | None = None
    outer: dict | None = None
    sglang_config: dict = field(default_factory=dict)
    weight_layout: str | None = None
    transposed: tuple[str, ...] = ()  # tensors (name suffixes) saved with dims 1 and 2 swapped: the published layout
    vl_of: str | None = None  # the text target whose checkpoint is this multimodal class's language model
    renames: tuple[tuple[str, str], ...] = ()

    @property
    def has_hf_class(self) -> bool:
        """True when transformers has the model class (the in-process proof's reference is HF)."""
        return self.model_class is not None


_MROPE = {"rope_type": "default", "rope_theta": 10000.0, "mrope_section": [4, 2, 2], "mrope_interleaved": True}
_QWEN3_VISION = dict(depth=3, hidden_size=32, intermediate_size=64, num_heads=2, out_hidden_size=64, patch_size=16,
                     num_position_embeddings=64, deepstack_visual_indexes=[0, 1, 2])
# The special tokens' ids inside the tiny vocabulary (tiny_vl.py's tokenizer has them at the same ids).
VISION_TOKENS = {"<|vision_start|>": 250, "<|vision_end|>": 251, "<|image_pad|>": 252, "<|video_pad|>": 253}
# The multimodal models need nothing beyond harness.ENGINE_DEFAULTS (whose memory fraction leaves room for their
# multimodal reservation in SGLang's KV-budget profile).
_VL_ARGS: dict = {}
_VISION_TOKENS = dict(vision_start_token_id=250, vision_end_token_id=251, image_token_id=252, video_token_id=253)


def _layer_types(n: int) -> list[str]:
    return ["sliding_attention" if i % 2 == 0 else "full_attention" for i in range(n)]


# The hybrid linear-attention families (Qwen3.5, Qwen3-Next): Gated DeltaNet layers with full attention every third
# layer (both kinds among the 6), two key heads shared by four value heads (the GQA of the real models). SGLang builds
# the layer kinds from ``full_attention_interval`` (configs/qwen3_next.py ``layers_block_type``), which real configs
# carry and transformers does not write (it writes ``layer_types``, the same list). On CPU SGLang's mamba state pool
# needs the overlap schedule off (arg_groups/mamba_hook.py:158: auto picks ``extra_buffer``, whose snapshots need a
# GPU, mamba_hook.py:120) and an explicit slot count (the CPU runtime's memory fraction leaves no room to size it).
_HYBRID_INTERVAL = 3
_HYBRID = dict(intermediate_size=128, head_dim=16, linear_conv_kernel_dim=4, linear_key_head_dim=16,
               linear_value_head_dim=16, linear_num_key_heads=2, linear_num_value_heads=4)
_HYBRID_KEYS = {"full_attention_interval": _HYBRID_INTERVAL}
HYBRID_SERVER_ARGS = {"disable_overlap_schedule": True, "max_mamba_cache_size": 16}


def _hybrid_layer_types(n: int) -> list[str]:
    return ["full_attention" if (i + 1) % _HYBRID_INTERVAL == 0 else "linear_attention" for i in range(n)]


# Qwen3.5's vision-language checkpoint (Qwen3_5ForConditionalGeneration): the decoder above in text_config, a one-block
# vision tower that the text-only prompts never reach, and the vision special tokens inside the tiny vocabulary.
_QWEN3_5_VISION = dict(depth=1, hidden_size=32, intermediate_size=64, num_heads=2, out_hidden_size=64, patch_size=16,
                       num_position_embeddings=64)


FAMILY_TARGETS = {
    "llama": TinyFamilyTarget("LlamaConfig", "LlamaForCausalLM", dict(intermediate_size=128)),
    # TeleFLMModel.forward calls super().forward(): the Llama checkpoint served by SGLang's TeleFLM class (use_mup
    # off, the same math); transformers loads it as Llama (model_type "llama").
    "teleflm": TinyFamilyTarget("LlamaConfig", "LlamaForCausalLM", dict(intermediate_size=128),
                                architecture="TeleFLMForCausalLM"),
    "qwen2": TinyFamilyTarget("Qwen2Config", "Qwen2ForCausalLM", dict(intermediate_size=128)),
    "qwen3": TinyFamilyTarget("Qwen3Config", "Qwen3ForCausalLM", dict(intermediate_size=128, head_dim=16)),
    "qwen3_moe": TinyFamilyTarget("Qwen3MoeConfig", "Qwen3MoeForCausalLM",
                                  dict(intermediate_size=128, num_experts=8, decoder_sparse_step=1, mlp_only_layers=[],
                                       norm_topk_prob=True, head_dim=16, **_MOE)),
    "qwen2_moe": TinyFamilyTarget("Qwen2MoeConfig", "Qwen2MoeForCausalLM",
                                  dict(intermediate_size=128, shared_expert_intermediate_size=64, num_experts=8,
                                       decoder_sparse_step=1, mlp_only_layers=[], norm_topk_prob=False, **_MOE)),
    # SGLang's GPT-OSS asserts an attention backend from its list: intel_amx passes and falls back to torch_native
    # (plus the CPU runtime's B5) on a CPU without AMX; moe "auto" would pick triton_kernel (wrong layout on CPU).
    "gpt_oss": TinyFamilyTarget("GptOssConfig", "GptOssForCausalLM",
                                dict(intermediate_size=64, num_local_experts=4, num_experts_per_tok=2, head_dim=16,
                                     sliding_window=8),
                                server_args={"attention_backend": "intel_amx", "moe_runner_backend": "triton"}),
    "glm4_moe": TinyFamilyTarget("Glm4MoeConfig", "Glm4MoeForCausalLM",
                                 dict(intermediate_size=128, n_routed_experts=8, n_shared_experts=1, n_group=1,
                                      topk_group=1, first_k_dense_replace=1, head_dim=16, partial_rotary_factor=0.5,
                                      use_qk_norm=True, **_MOE)),
    # minimax_m2.py reads scoring_func (required), rotary_dim (else head_dim), use_routing_bias and qk_norm_type,
    # which real MiniMax-M2 configs carry and transformers 5.19 does not write (the CPU runtime's B6 for q/k norm).
    "minimax_m2": TinyFamilyTarget("MiniMaxM2Config", "MiniMaxM2ForCausalLM",
                                   dict(intermediate_size=32, num_local_experts=8, num_experts_per_tok=2, head_dim=16,
                                        rotary_dim=8, use_qk_norm=True),
                                   extra_keys={"scoring_func": "sigmoid", "rotary_dim": 8, "use_routing_bias": True,
                                               "qk_norm_type": "per_layer"}),
    # MLA like DeepSeek: the same CPU keys (yarn rope_scaling, first_k_dense_replace, moe_layer_freq, ...).
    # rms_norm_eps 1e-6: SGLang's q_a/kv_a latent norms use config.rms_norm_eps (deepseek_v2.py:2077/2163), HF's
    # Glm4MoeLite hard-codes 1e-6 there; with the config's default 1e-5 the two models differ by ~2e-5 (not capture).
    "glm4_moe_lite": TinyFamilyTarget("Glm4MoeLiteConfig", "Glm4MoeLiteForCausalLM",
                                      dict(intermediate_size=128, n_routed_experts=8, n_shared_experts=1, n_group=1,
                                           topk_group=1, kv_lora_rank=32, q_lora_rank=48, qk_rope_head_dim=16,
                                           qk_nope_head_dim=16, v_head_dim=16, num_key_value_heads=4, rms_norm_eps=1e-6,
                                           **_MOE),
                                      extra_keys={"first_k_dense_replace": 1, "moe_layer_freq": 1,
                                                  "num_nextn_predict_layers": 0, **_SGLANG_CONFIG_KEYS}),
    # xIELU MLP (no gate_proj); rope "default" instead of the config's llama3 scaling default (not under test here).
    "apertus": TinyFamilyTarget("ApertusConfig", "ApertusForCausalLM",
                                dict(intermediate_size=128, rope_parameters={"rope_type": "default",
                                                                             "rope_theta": 10000.0})),
    # Sliding (window 8) and full attention alternating, no per-layer embeddings, no KV sharing, no MoE; SGLang's
    # Gemma 4 asserts a backend from its list (arg_groups/model_hook.py:636-660): intel_amx, as for GPT-OSS.
    "gemma4": TinyFamilyTarget("Gemma4TextConfig", "Gemma4ForCausalLM",
                               dict(intermediate_size=128, head_dim=16, sliding_window=8, hidden_size_per_layer_input=0,
                                    vocab_size_per_layer_input=256, num_kv_shared_layers=0, per_layer_config={}),
                               extra_keys={"swa_num_key_value_heads": 2, "swa_head_dim": 16},
                               server_args={"attention_backend": "intel_amx"}),
    # EXAONE MoE (K-EXAONE's shape): sliding-window layers with RoPE and a global NoPE layer, "LLLG" spelled out in
    # layer_types (window 8, longer than every prompt), layer 0 dense, the others MoE (sigmoid routing with a
    # correction bias, 8 experts, top 2, one shared expert). is_moe_layer, which real configs carry and SGLang reads
    # (exaone_moe.py:497), is added from mlp_layer_types. rope_theta 1e6, the real models' value: SGLang reads
    # getattr(config, "rope_theta", 1000000) (exaone_moe.py:436), which transformers 5 keeps in rope_parameters only
    # (with HF's default 1e4 the two models differ by 0.2 after layer 0). sliding_window_pattern null: real configs say
    # "LLLG" there too, but SGLang's model reads only layer_types and sliding_window; the pattern is read only by the
    # backend assert (fa3/triton/trtllm_mha, arg_groups/model_hook.py:667-681), and of those only triton exists on CPU,
    # where SGLang 0.5.23's ExaoneMoE crashes on its sliding layers (no get_attention_sliding_window_size, so
    # triton_backend.py:1824 finds no window indices). With the key null, torch_native runs the same layers; an absent
    # key is not enough: transformers' ExaoneMoeConfig defaults it to 4 (configuration_exaone_moe.py:103).
    "exaone_moe": TinyFamilyTarget("ExaoneMoeConfig", "ExaoneMoeForCausalLM",
                                   dict(intermediate_size=128, head_dim=16, num_experts=8, num_shared_experts=1,
                                        first_k_dense_replace=1, n_group=1, topk_group=1, sliding_window=8,
                                        rope_parameters={"rope_type": "default", "rope_theta": 1000000.0}, **_MOE),
                                   extra_keys={"sliding_window_pattern": JSON_NULL}),
    # transformers' MiniMax-M3 text model (minimax_m3_vl). SGLang reads the checkpoint's own keys, which transformers'
    # MiniMaxM3VLTextConfig drops (sparse_attention_config, moe_layer_freq) or rewrites (hidden_act "swigluoai" ->
    # "silu"), so its config.json is a text_config as the published checkpoint carries it (model_type "minimax_m2",
    # which SGLang parses keeping every key), and its weights are written through transformers' "minimax_m3_vl"
    # conversion mapping reversed (w1/w2/w3 experts, gate_proj/up_proj, block_sparse_moe), less the VL prefixes.
    # Every attention layer is dense: SGLang's sparse-attention kernels take bf16/fp16 queries only
    # (kernels/ops/attention/minimax_sparse/common/utils.py:51). The shared expert is intermediate_size wide in SGLang
    # (minimax_m3.py:455), hence shared_intermediate_size = intermediate_size. Partial RoPE: HF reads
    # rope_parameters.partial_rotary_factor, SGLang rotary_dim.
    "minimax_m3": TinyFamilyTarget("MiniMaxM3VLTextConfig", "MiniMaxM3VLForCausalLM",
                                   dict(intermediate_size=32, shared_intermediate_size=32, dense_intermediate_size=128,
                                        num_local_experts=8, num_experts_per_tok=2, head_dim=16, rotary_dim=8,
                                        rms_norm_eps=1e-6,
                                        rope_parameters={"rope_type": "default", "rope_theta": 10000.0,
                                                         "partial_rotary_factor": 0.5}),
                                   architecture="MiniMaxM3SparseForCausalLM",
                                   sglang_config={"model_type": "minimax_m2", "hidden_act": "swigluoai",
                                                  "use_gemma_norm": True, "qk_norm_type": "per_head",
                                                  "use_qk_norm": True, "n_shared_experts": 1,
                                                  "scoring_func": "sigmoid", "use_routing_bias": True},
                                   weight_layout="minimax_m3_vl"),
    # LongCat-Flash (MLA like DeepSeek: the CPU runtime's B1). hidden 256: SGLang's zero (identity) experts are
    # computed in blocks of 256 channels (kernels/ops/moe/ep_moe_kernels.py:1929-1938, none at all below 256).
    # routed_scaling_factor 1: SGLang adds the zero experts' output unscaled (longcat_flash.py:331-335) where HF
    # scales every routed weight (modeling_longcat_flash.py:147); at 1 both compute the same model. rms_norm_eps 1e-6:
    # HF's q_a/kv_a latent norms hard-code it, SGLang's read the config (as for GLM-4.7-Flash). RoPE: SGLang's MLA
    # runs only deepseek_yarn on CPU, and SGLang's LongcatFlashConfig with transformers 5.19 cannot validate "yarn"
    # (it sets max_position_embeddings after PretrainedConfig.__init__ validates) nor run without rope_scaling
    # (configs/longcat_flash.py:102 sets rope_scaling, an alias of rope_parameters in transformers 5, to None;
    # models/longcat_flash.py:377 then fails): SGLang's config.json has the same yarn as "deepseek_yarn"
    # rope_scaling, HF's (in hf/) has it as rope_parameters.
    # MiniMax-M3 as published: MiniMaxM3SparseForConditionalGeneration around the text target above (its weights under
    # language_model., its config as text_config), a one-layer vision tower config SGLang's CLIPVisionConfig accepts
    # (minimax_vl_common.py:40-64) and no vision weights (text prompts never run the tower; SGLang leaves its
    # parameters as allocated). The reference is the text model, HF's in hf/.
    "minimax_m3_vl": TinyFamilyTarget("MiniMaxM3VLTextConfig", "MiniMaxM3VLForCausalLM", {},
                                      architecture="MiniMaxM3SparseForConditionalGeneration", vl_of="minimax_m3",
                                      sglang_config={"model_type": "minimax_m3_vl", "projector_hidden_size": 64,
                                                     "image_token_index": 250, "video_token_index": 251,
                                                     "vision_config": {
                                                         "model_type": "clip_vision_model", "hidden_size": 32,
                                                         "intermediate_size": 64, "num_hidden_layers": 1,
                                                         "num_attention_heads": 2, "num_channels": 3,
                                                         "image_size": 28, "patch_size": 14, "hidden_act": "gelu",
                                                         "layer_norm_eps": 1e-5, "position_embedding_type": "rope",
                                                         "rope_mode": "3d", "rope_theta": 10000.0,
                                                         "vision_segment_max_frames": None,
                                                         "img_token_compression_config": {
                                                             "temporal_patch_size": 2, "spatial_merge_size": 2}}}),
    "longcat_flash": TinyFamilyTarget("LongcatFlashConfig", "LongcatFlashForCausalLM",
                                      dict(hidden_size=256, num_key_value_heads=4, ffn_hidden_size=128,
                                           expert_ffn_hidden_size=32, n_routed_experts=8, zero_expert_num=2,
                                           moe_topk=2, kv_lora_rank=32, q_lora_rank=48, qk_rope_head_dim=16,
                                           qk_nope_head_dim=16, v_head_dim=16, head_dim=16, rms_norm_eps=1e-6,
                                           routed_scaling_factor=1.0, initializer_range=0.05,
                                           rope_parameters=dict(YARN)),
                                      sglang_config={"rope_parameters": None, "rope_theta": YARN["rope_theta"],
                                                     "rope_scaling": {**{k: v for k, v in YARN.items()
                                                                         if k not in ("type", "rope_theta")},
                                                                      "rope_type": "deepseek_yarn"}}),
    # No transformers class: config.json and the weights as inclusionAI's Ling-2.0 checkpoints carry them (see
    # _build_bailing), read by SGLang through trust_remote_code like the published checkpoints.
    "bailing_moe": TinyFamilyTarget(None, None,
                                    dict(model_type="bailing_moe_v2", intermediate_size=128,
                                         moe_intermediate_size=32, head_dim=16, hidden_act="silu",
                                         use_qkv_bias=False, use_bias=False, use_qk_norm=True, rms_norm_eps=1e-6,
                                         norm_head=False, embedding_dropout=0.0, rope_theta=10000.0,
                                         partial_rotary_factor=0.5,
                                         rope_parameters={"rope_type": "default", "rope_theta": 10000.0},
                                         num_experts=8, num_shared_experts=1, num_experts_per_tok=2, n_group=2,
                                         topk_group=1, routed_scaling_factor=2.5, norm_topk_prob=True,
                                         first_k_dense_replace=1, score_function="sigmoid",
                                         moe_router_enable_expert_bias=True, router_dtype="fp32",
                                         torch_dtype="float32"),
                                    architecture="BailingMoeV2ForCausalLM",
                                    server_args={"trust_remote_code": True}),
    "qwen3_5": TinyFamilyTarget("Qwen3_5TextConfig", "Qwen3_5ForCausalLM", dict(_HYBRID), extra_keys=_HYBRID_KEYS,
                                server_args=HYBRID_SERVER_ARGS),
    "qwen3_5_moe": TinyFamilyTarget("Qwen3_5MoeTextConfig", "Qwen3_5MoeForCausalLM",
                                    dict(_HYBRID, num_experts=8, shared_expert_intermediate_size=64, **_MOE),
                                    extra_keys=_HYBRID_KEYS, server_args=HYBRID_SERVER_ARGS),
    "qwen3_next": TinyFamilyTarget("Qwen3NextConfig", "Qwen3NextForCausalLM",
                                   dict(_HYBRID, num_experts=8, shared_expert_intermediate_size=64,
                                        decoder_sparse_step=1, mlp_only_layers=[], norm_topk_prob=True, **_MOE),
                                   extra_keys=_HYBRID_KEYS, server_args=HYBRID_SERVER_ARGS),
    "qwen3_5_vl": TinyFamilyTarget("Qwen3_5Config", "Qwen3_5ForConditionalGeneration", dict(_HYBRID),
                                   extra_keys=_HYBRID_KEYS, server_args=HYBRID_SERVER_ARGS,
                                   outer=dict(vision_config=dict(_QWEN3_5_VISION), **_VISION_TOKENS)),
    # Vision-language wrappers (docs/families.md): the decoder as above in text_config, a 2-block vision tower; mrope
    # sections sum to head_dim / 2. Qwen3-VL's deepstack adds vision features to the outputs of decoder layers 0-2
    # (three deepstack_visual_indexes). Their image path (processor, tokenizer) is tests/support/tiny_vl.py's.
    "qwen2_5_vl": TinyFamilyTarget("Qwen2_5_VLConfig", "Qwen2_5_VLForConditionalGeneration",
                                   dict(intermediate_size=128, rope_parameters=_MROPE),
                                   outer=dict(vision_config=dict(depth=2, hidden_size=32, intermediate_size=64,
                                                                      num_heads=2, out_hidden_size=64, patch_size=14,
                                                                      window_size=28, fullatt_block_indexes=[1]),
                                                   **_VISION_TOKENS), server_args=_VL_ARGS),
    "qwen3_vl": TinyFamilyTarget("Qwen3VLConfig", "Qwen3VLForConditionalGeneration",
                                 dict(intermediate_size=128, head_dim=16, rope_parameters=_MROPE),
                                 outer=dict(vision_config=_QWEN3_VISION, **_VISION_TOKENS), server_args=_VL_ARGS),
    "qwen3_vl_moe": TinyFamilyTarget("Qwen3VLMoeConfig", "Qwen3VLMoeForConditionalGeneration",
                                     dict(intermediate_size=128, head_dim=16, rope_parameters=_MROPE, num_experts=8,
                                          decoder_sparse_step=1, mlp_only_layers=[], norm_topk_prob=True,
                                          num_experts_per_tok=2, moe_intermediate_size=16),
                                     outer=dict(vision_config=_QWEN3_VISION, **_VISION_TOKENS),
                                     server_args=_VL_ARGS,
                                     transposed=("experts.gate_up_proj", "experts.down_proj")),
}
# Llama 4 as SGLang serves it: Llama4ForConditionalGeneration (mllama4.py; its text-only class Llama4ForCausalLM loads
# neither the routed experts nor Llama 4's RoPE pairing: docs/families.md). The text model is Maverick's shape: dense
# and MoE layers alternate (interleave step 2: layers 1, 3, 5 MoE), RoPE layers with chunked attention (chunk 16, longer
# than every prompt) and a NoPE layer (3) with temperature tuning (floor_scale 2 so short prompts scale it); no q/k norm
# (Maverick's setting; SGLang's non-CUDA path computes Scout's in bf16, llama4.py:353-358). A 1-layer vision tower that
# is not run: a single-file checkpoint has no index, so SGLang serves it text-only (mllama4.py:459-466), as it does
# text-only Llama 4 checkpoints. CPU runtime: B10 (router weight on the MoE input), B11 (in-place RoPE).
FAMILY_TARGETS["llama4"] = TinyFamilyTarget(
    "Llama4Config", "Llama4ForConditionalGeneration",
    dict(intermediate_size=32, intermediate_size_mlp=128, head_dim=16, num_local_experts=4, num_experts_per_tok=1,
         interleave_moe_layer_step=2, use_qk_norm=False, attention_chunk_size=16, floor_scale=2),
    outer=dict(vision_config=dict(hidden_size=32, num_hidden_layers=1, num_attention_heads=2, intermediate_size=64,
                                  vision_output_dim=64, image_size=28, patch_size=14, projector_input_dim=64,
                                  projector_output_dim=64), boi_token_index=250, eoi_token_index=251,
               image_token_index=252))
# Gemma 3's sliding window (4, shorter than the 5- and 6-token prompts: the window masks keys) and full attention
# alternate, local and global rope. SGLang's Gemma3ForCausalLM always uses the embedding as the LM head
# (gemma3_causal.py:787-793, and its load_weights skips lm_head.weight): the checkpoint ties them.
FAMILY_TARGETS["gemma3"] = TinyFamilyTarget(
    "Gemma3TextConfig", "Gemma3ForCausalLM",
    dict(intermediate_size=128, head_dim=16, sliding_window=4, query_pre_attn_scalar=16, tie_word_embeddings=True))
# The multimodal wrappers around the Gemma text models, each with a one-layer vision tower (loaded, not run: text-only
# prompts), LM head tied as the real checkpoints are. transformers 5.19 saves Gemma 3's SigLIP tower as
# ``vision_tower.*``; SGLang's loader (gemma3_mm.py:481-520) and the hub's Gemma 3 checkpoints name it
# ``vision_tower.vision_model.*``, which transformers loads back as well. SGLang's Gemma 4 wrapper ties its head when
# text_config says so (gemma4_mm.py:254-260).
FAMILY_TARGETS["gemma3_mm"] = replace(
    FAMILY_TARGETS["gemma3"], config_class="Gemma3Config", model_class="Gemma3ForConditionalGeneration",
    outer=dict(vision_config=dict(model_type="siglip_vision_model", hidden_size=32, intermediate_size=64,
                                  num_hidden_layers=1, num_attention_heads=2, image_size=56, patch_size=14,
                                  vision_use_head=False), mm_tokens_per_image=4, tie_word_embeddings=True),
    renames=(("vision_tower.", "vision_tower.vision_model."),))
FAMILY_TARGETS["gemma4_mm"] = replace(
    FAMILY_TARGETS["gemma4"], config_class="Gemma4Config", model_class="Gemma4ForConditionalGeneration",
    config={**FAMILY_TARGETS["gemma4"].config, "tie_word_embeddings": True},
    outer=dict(vision_config=dict(model_type="gemma4_vision", hidden_size=32, intermediate_size=64,
                                  num_hidden_layers=1, num_attention_heads=2, num_key_value_heads=2, head_dim=16,
                                  position_embedding_size=64), tie_word_embeddings=True))



def _family_config_kwargs(name: str, num_hidden_layers: int, dims: dict | None = None) -> dict:
    layers = "num_layers" if name == "longcat_flash" else "num_hidden_layers"  # HF: num_hidden_layers = 2 * num_layers
    kwargs = {**_FAMILY_COMMON, **FAMILY_TARGETS[name].config, **(dims or {}), layers: num_hidden_layers}
    if name in ("gpt_oss", "gemma4", "gemma3", "gemma4_mm", "gemma3_mm"):
        kwargs["layer_types"] = _layer_types(num_hidden_layers)
    if name == "exaone_moe":  # "LLLG": every fourth layer global
        kwargs["layer_types"] = ["full_attention" if i % 4 == 3 else "sliding_attention"
                                 for i in range(num_hidden_layers)]
    if "linear_num_value_heads" in kwargs:  # a Gated DeltaNet hybrid
        kwargs["layer_types"] = _hybrid_layer_types(num_hidden_layers)
    if name == "glm4_moe_lite":
        kwargs["mlp_layer_types"] = ["dense"] + ["sparse"] * (num_hidden_layers - 1)
        kwargs["rope_parameters"] = dict(YARN)
    if name == "minimax_m3":  # the checkpoint's own keys, which transformers' config also reads (legacy names)
        kwargs.update(_minimax_m3_layer_keys(num_hidden_layers))
    return kwargs


def _minimax_m3_layer_keys(n: int) -> dict:
    """MiniMax-M3's per-layer keys as its checkpoint states them: layer 0 a dense MLP, no sparse-attention layer."""
    dense = [0] * n
    return {"moe_layer_freq": [0] + [1] * (n - 1),
            "sparse_attention_config": {"sparse_attention_freq": dense, "sparse_disable_index_value": dense,
                                        "sparse_num_index_heads": 2, "sparse_index_dim": 16, "sparse_block_size": 128,
                                        "sparse_topk_blocks": 16, "sparse_local_block": 1, "sparse_init_block": 0}}


def build_family_target(name: str, out_dir, *, num_hidden_layers: int = 6, seed: int = 0,
                        dims: dict | None = None) -> Path:
    """Write the tiny random checkpoint of :data:`FAMILY_TARGETS` ``[name]`` (fp32, seeded, transformers' own class)
    to ``out_dir`` and return it; load it back for reference outputs with ``hf_reference.load_hf``. ``dims`` replace
    config keys (e.g. :data:`VLLM_DIMS`: a head size vLLM's CPU attention takes)."""
    import transformers

    spec = FAMILY_TARGETS[name]
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    if not spec.has_hf_class:
        return _build_bailing(out, spec, num_hidden_layers, seed)
    if spec.vl_of is not None:
        return _wrap_as_multimodal(build_family_target(spec.vl_of, out, num_hidden_layers=num_hidden_layers,
                                                       seed=seed), spec)
    kwargs = _family_config_kwargs(name, num_hidden_layers, dims)
    extra = dict(spec.extra_keys)
    if spec.outer is not None:  # the text config's keys go into text_config, the wrapper's own into the top level
        kwargs = {"tie_word_embeddings": False, **spec.outer, "text_config": {**kwargs, **extra}}
        extra = {}
    config = getattr(transformers, spec.config_class)(**kwargs)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = getattr(transformers, spec.model_class)(config).to(torch.float32).eval()
    if spec.sglang_config or spec.weight_layout:
        model.save_pretrained(out / "hf", safe_serialization=True)  # the reference, as transformers writes it
    if spec.weight_layout:
        _set_checkpoint_layout(model, spec.weight_layout)
    model.save_pretrained(out, safe_serialization=True)
    if spec.transposed:
        _transpose_saved(out / "model.safetensors", spec.transposed)
    if spec.renames:
        _rename_weights(out / "model.safetensors", spec.renames)
    if "rope_parameters" in config.to_dict() and name == "glm4_moe_lite":
        extra["rope_scaling"] = config.rope_parameters
    if spec.architecture is not None:
        extra["architectures"] = [spec.architecture]
    if name == "exaone_moe":  # which layers are MoE, as real EXAONE MoE configs say it (SGLang reads only this)
        extra["is_moe_layer"] = [t == "sparse" for t in config.mlp_layer_types]
    if name == "minimax_m3":
        extra.update(_minimax_m3_layer_keys(num_hidden_layers))
    _update_json(out / "config.json", {**extra, **spec.sglang_config})
    return out


def _wrap_as_multimodal(out: Path, spec: TinyFamilyTarget) -> Path:
    """Turn the text checkpoint in ``out`` into ``spec.architecture``'s: weights under ``language_model.``, the text
    config as ``text_config`` beside ``spec.sglang_config`` (``hf/``, the reference, stays the text model)."""
    from safetensors.torch import load_file, save_file

    weights = load_file(str(out / "model.safetensors"))
    save_file({f"language_model.{k}": v for k, v in weights.items()}, str(out / "model.safetensors"))
    text = {k: v for k, v in json.loads((out / "config.json").read_text()).items() if k != "architectures"}
    config = {"architectures": [spec.architecture], "text_config": text, "tie_word_embeddings": False,
              "torch_dtype": "float32", **spec.sglang_config}
    (out / "config.json").write_text(json.dumps(config, indent=2, sort_keys=True))
    return out


def _set_checkpoint_layout(model, model_type: str) -> None:
    """Make ``model.save_pretrained`` write the weight names of ``model_type``'s original checkpoints: transformers
    reverses the conversions a model was loaded with, ``model._weight_conversions`` (core_model_loading.py:1803-1810),
    here the mapping registered for ``model_type`` less its renames of whole prefixes (``^language_model``...: a
    multimodal checkpoint's, not the text model's)."""
    from transformers.conversion_mapping import get_checkpoint_conversion_mapping

    mapping = get_checkpoint_conversion_mapping(model_type)
    model._weight_conversions = [c for c in mapping if not any(p.startswith("^") for p in c.source_patterns)]


_BAILING_CONFIG_PY = '''"""The config class of this test checkpoint (sglang-eagle3-capture's tiny_models.py),
loaded through ``trust_remote_code`` as Ling checkpoints load theirs: every config.json key becomes an attribute."""

from transformers import PretrainedConfig


class BailingMoeV2Config(PretrainedConfig):
    model_type = "bailing_moe_v2"
'''


def _build_bailing(out: Path, spec: TinyFamilyTarget, num_hidden_layers: int, seed: int) -> Path:
    """A Bailing-MoE (Ling-2.0) checkpoint without a transformers class: config.json with ``auto_map`` to a config
    class of our own (``configuration_bailing_moe_v2.py``, every key an attribute), and seeded random weights (std
    0.1; norms 1 + 0.1 noise) under the names inclusionAI's checkpoints use, which
    ``BailingMoEForCausalLM.load_weights`` (bailing_moe.py:945-1088) reads: ``attention.query_key_value`` (fused),
    ``attention.dense``, ``attention.{query,key}_layernorm``, dense ``mlp.{gate,up,down}_proj`` below
    ``first_k_dense_replace``, then ``mlp.gate`` (+ ``expert_bias``), ``mlp.experts.E.*`` and
    ``mlp.shared_experts.*``."""
    c = {**_FAMILY_COMMON, **spec.config, "num_hidden_layers": num_hidden_layers, "architectures": [spec.architecture],
         "auto_map": {"AutoConfig": "configuration_bailing_moe_v2.BailingMoeV2Config"}}
    c.pop("initializer_range")
    h, hd, heads, kv = c["hidden_size"], c["head_dim"], c["num_attention_heads"], c["num_key_value_heads"]
    gen = torch.Generator().manual_seed(seed)

    def rand(*shape, std=0.1):
        return torch.randn(*shape, generator=gen) * std

    def mlp(prefix: str, inter: int) -> dict:
        return {f"{prefix}.gate_proj.weight": rand(inter, h), f"{prefix}.up_proj.weight": rand(inter, h),
                f"{prefix}.down_proj.weight": rand(h, inter)}

    w = {"model.word_embeddings.weight": rand(c["vocab_size"], h, std=1.0), "model.norm.weight": 1 + rand(h),
         "lm_head.weight": rand(c["vocab_size"], h)}
    for i in range(num_hidden_layers):
        p = f"model.layers.{i}"
        w |= {f"{p}.input_layernorm.weight": 1 + rand(h), f"{p}.post_attention_layernorm.weight": 1 + rand(h),
              f"{p}.attention.query_key_value.weight": rand((heads + 2 * kv) * hd, h),
              f"{p}.attention.dense.weight": rand(h, heads * hd),
              f"{p}.attention.query_layernorm.weight": 1 + rand(hd),
              f"{p}.attention.key_layernorm.weight": 1 + rand(hd)}
        if i < c["first_k_dense_replace"]:
            w |= mlp(f"{p}.mlp", c["intermediate_size"])
            continue
        w |= {f"{p}.mlp.gate.weight": rand(c["num_experts"], h), f"{p}.mlp.gate.expert_bias": rand(c["num_experts"])}
        for e in range(c["num_experts"]):
            w |= mlp(f"{p}.mlp.experts.{e}", c["moe_intermediate_size"])
        w |= mlp(f"{p}.mlp.shared_experts", c["moe_intermediate_size"] * c["num_shared_experts"])
    from safetensors.torch import save_file

    save_file(w, str(out / "model.safetensors"))
    (out / "config.json").write_text(json.dumps(c, indent=2, sort_keys=True))
    (out / "configuration_bailing_moe_v2.py").write_text(_BAILING_CONFIG_PY)
    return out


def _transpose_saved(path: Path, suffixes: tuple[str, ...]) -> None:
    """Store the fused expert tensors as the published Qwen3-VL-MoE checkpoints do, ``[E, H, 2I]`` / ``[E, I, H]``:
    SGLang's loader transposes them (qwen3_vl_moe.py:320), transformers 5.19 too on load (its conversion mapping's
    ``Transpose(1, 2)``), but it saves its own ``[E, 2I, H]`` / ``[E, H, I]``. The sizes are chosen non-square."""
    from safetensors.torch import load_file, save_file

    tensors = load_file(str(path))
    for name in [n for n in tensors if n.endswith(suffixes)]:
        tensors[name] = tensors[name].transpose(1, 2).contiguous()
    save_file(tensors, str(path), metadata={"format": "pt"})


def _rename_weights(path: Path, renames: tuple[tuple[str, str], ...]) -> None:
    from safetensors.torch import load_file, save_file

    tensors = load_file(str(path))
    for old, new in renames:
        tensors = {(new + k[len(old):] if k.startswith(old) else k): v for k, v in tensors.items()}
    save_file(tensors, str(path), metadata={"format": "pt"})


def _update_json(path: Path, extra: dict) -> None:
    data = json.loads(path.read_text())
    if isinstance(extra.get("text_config"), dict):  # keys of a wrapper's text config are added to it
        data["text_config"].update(extra.pop("text_config"))
    data.update(extra)
    for key in [k for k, v in extra.items() if v is None]:  # None removes a key
        del data[key]
    data.update({k: None for k, v in extra.items() if v is JSON_NULL})  # JSON_NULL writes null
    path.write_text(json.dumps(data, indent=2, sort_keys=True))


def build_tiny_target(
    out_dir, *, num_hidden_layers: int = 6, seed: int = 0, dtype: torch.dtype = torch.float32, **overrides
) -> Path:
    """Write a tiny random DeepSeek-V3 checkpoint to ``out_dir`` and return its path.

    ``overrides`` replace entries of ``TINY_TARGET_CONFIG`` (any ``DeepseekV3Config`` keyword). The same
    arguments always give byte-identical weights. Load it back for reference outputs with
    ``transformers.DeepseekV3ForCausalLM.from_pretrained(path)``.
    """
    from transformers import DeepseekV3Config, DeepseekV3ForCausalLM

    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    kwargs = {**TINY_TARGET_CONFIG, "rope_parameters": dict(YARN), **overrides}
    config = DeepseekV3Config(num_hidden_layers=num_hidden_layers, **kwargs)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = DeepseekV3ForCausalLM(config).to(dtype).eval()
    model.save_pretrained(out, safe_serialization=True)
    _update_json(out / "config.json", {**_SGLANG_CONFIG_KEYS, "rope_scaling": config.rope_parameters})
    return out


def _draft_config(target: dict, eagle_aux_layer_ids, config_overrides) -> dict:
    hidden = target["hidden_size"]
    heads = target["num_attention_heads"]
    eagle_config = {"use_aux_hidden_state": True}
    if eagle_aux_layer_ids is not None:
        eagle_config["eagle_aux_hidden_state_layer_ids"] = list(eagle_aux_layer_ids)
    config = {
        "architectures": ["LlamaForCausalLMEagle3"],
        "model_type": "llama",
        "hidden_size": hidden,
        "intermediate_size": 2 * hidden,
        "num_hidden_layers": 1,
        "num_attention_heads": heads,
        "num_key_value_heads": heads,
        "head_dim": hidden // heads,
        "hidden_act": "silu",
        "rms_norm_eps": target.get("rms_norm_eps", 1e-6),
        "max_position_embeddings": target["max_position_embeddings"],
        "rope_theta": 10000.0,
        "vocab_size": target["vocab_size"],
        "draft_vocab_size": DRAFT_VOCAB_SIZE,
        "tie_word_embeddings": False,
        "torch_dtype": "float32",
        "eagle_config": eagle_config,
    }
    config.update(config_overrides or {})
    return config


def _draft_weights(config: dict, num_aux: int, target_hidden: int, seed: int) -> dict:
    gen = torch.Generator().manual_seed(seed)

    def randn(*shape):
        return torch.randn(*shape, generator=gen) * 0.05

    h, inter = config["hidden_size"], config["intermediate_size"]
    q_out = config["num_attention_heads"] * config["head_dim"]
    kv_out = config["num_key_value_heads"] * config["head_dim"]
    draft_vocab, vocab = config["draft_vocab_size"], config["vocab_size"]
    t2d = torch.zeros(vocab, dtype=torch.bool)
    t2d[:draft_vocab] = True  # the draft vocabulary is target ids 0..draft_vocab-1
    return {
        "fc.weight": randn(h, num_aux * target_hidden),
        "midlayer.input_layernorm.weight": torch.ones(h),
        "midlayer.hidden_norm.weight": torch.ones(h),
        "midlayer.post_attention_layernorm.weight": torch.ones(h),
        "midlayer.self_attn.q_proj.weight": randn(q_out, 2 * h),  # attention sees cat([embeds, hidden])
        "midlayer.self_attn.k_proj.weight": randn(kv_out, 2 * h),
        "midlayer.self_attn.v_proj.weight": randn(kv_out, 2 * h),
        "midlayer.self_attn.o_proj.weight": randn(h, q_out),
        "midlayer.mlp.gate_proj.weight": randn(inter, h),
        "midlayer.mlp.up_proj.weight": randn(inter, h),
        "midlayer.mlp.down_proj.weight": randn(h, inter),
        "norm.weight": torch.ones(h),
        "lm_head.weight": randn(draft_vocab, h),
        "d2t": torch.zeros(draft_vocab, dtype=torch.int64),  # target id = draft id + d2t[draft id]
        "t2d": t2d,
    }


def build_tiny_draft(
    out_dir,
    *,
    target_dir,
    eagle_aux_layer_ids: list[int] | None = None,
    num_aux: int | None = None,
    seed: int = 0,
    config_overrides: dict | None = None,
    weight_overrides: dict[str, torch.Tensor] | None = None,
) -> Path:
    """Write a tiny random EAGLE-3 draft for the target in ``target_dir`` and return its path.

    ``eagle_config.eagle_aux_hidden_state_layer_ids`` is ``eagle_aux_layer_ids`` verbatim (the key is
    omitted when None, so SGLang uses its default). ``fc`` takes ``num_aux`` target hidden states
    (default: ``len(eagle_aux_layer_ids)``, else 3). ``config_overrides`` update config.json;
    ``weight_overrides`` replace or add tensors by checkpoint name (e.g. ``"fc.weight"``).
    """
    from safetensors.torch import save_file

    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    target = json.loads((Path(target_dir) / "config.json").read_text())
    target = {**target, **target.get("text_config", {})}  # a wrapper's decoder dimensions (Kimi-K2.5, VL)
    if num_aux is None:
        num_aux = len(eagle_aux_layer_ids) if eagle_aux_layer_ids else 3
    config = _draft_config(target, eagle_aux_layer_ids, config_overrides)
    weights = _draft_weights(config, num_aux, target["hidden_size"], seed)
    weights.update(weight_overrides or {})
    save_file({k: v.contiguous() for k, v in weights.items()}, str(out / "model.safetensors"))
    (out / "config.json").write_text(json.dumps(config, indent=2, sort_keys=True))
    return out
