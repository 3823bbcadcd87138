"""Tiny, seeded, deterministic checkpoints for the tests (built in well under a second each).

- ``build_tiny_target``: a DeepSeek-V3 built with HF transformers' own ``DeepseekV3Config`` and
  ``DeepseekV3ForCausalLM`` (random weights from a fixed seed), saved with ``save_pretrained`` as
  safetensors. MLA dims, experts and vocab are small. ``config.json`` also carries the keys SGLang
  0.5.23's CPU path reads that transformers does not write: yarn ``rope_scaling`` (CPU rope supports only
  deepseek_yarn, ``layers/rotary_embedding/factory.py::get_rope_cpu``) and ``moe_layer_freq``
  (``models/deepseek_v2.py``), as real DeepSeek-V3 configs do.
- ``build_family_target``: the same for every other target family (:data:`FAMILY_TARGETS`: Llama, TeleFLM, Qwen2,
  Qwen3, Qwen3-MoE, Qwen2-MoE, GPT-OSS, GLM-4.5, MiniMax-M2, GLM-4.7-Flash, Apertus), 6 layers, hidden 64,
  with transformers' own classes and the keys SGLang's CPU path reads.
- ``build_tiny_draft``: an EAGLE-3 draft in the layout SGLang's ``LlamaForCausalLMEagle3``
  (``models/llama_eagle3.py``) loads: config.json + model.safetensors with ``fc``, ``midlayer.*``,
  ``norm``, ``lm_head``, ``d2t``, ``t2d``. The embedding comes from the target at load time.

Nothing here imports sglang.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
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


@dataclass(frozen=True)
class TinyFamilyTarget:
    """How to build one family's tiny target: ``config_class``/``model_class`` in transformers, their kwargs,
    keys added to config.json after ``save_pretrained``, and ServerArgs overrides for SGLang on CPU.
    ``architecture`` (when set) replaces ``architectures[0]``: an SGLang class that loads the same checkpoint.
    ``outer`` (when set): ``config_class`` is a wrapper whose decoder config is its ``text_config``; ``config`` (with
    the common keys) becomes that ``text_config``, and ``outer`` holds the wrapper's own kwargs (``vision_config``)."""

    config_class: str
    model_class: str
    config: dict
    extra_keys: dict = field(default_factory=dict)
    server_args: dict = field(default_factory=dict)
    architecture: str | None = None
    outer: dict | None = None
    transposed: tuple[str, ...] = ()  # tensors (name suffixes) saved with dims 1 and 2 swapped: the published layout


_MROPE = {"rope_type": "default", "rope_theta": 10000.0, "mrope_section": [4, 2, 2], "mrope_interleaved": True}
_QWEN3_VISION = dict(depth=3, hidden_size=32, intermediate_size=64, num_heads=2, out_hidden_size=64, patch_size=16,
                     num_position_embeddings=64, deepstack_visual_indexes=[0, 1, 2])
# The special tokens' ids inside the tiny vocabulary (tiny_vl.py's tokenizer has them at the same ids).
VISION_TOKENS = {"<|vision_start|>": 250, "<|vision_end|>": 251, "<|image_pad|>": 252, "<|video_pad|>": 253}
# SGLang's multimodal model load takes more than the text families' 5% of free memory for its profile (its own
# "Loaded weights leave no GPU memory for the KV cache" otherwise); max_total_tokens still bounds the pool.
_VL_ARGS = {"mem_fraction_static": 0.2}
_VISION_TOKENS = dict(vision_start_token_id=250, vision_end_token_id=251, image_token_id=252, video_token_id=253)


def _layer_types(n: int) -> list[str]:
    return ["sliding_attention" if i % 2 == 0 else "full_attention" for i in range(n)]


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
    # triton_backend.py:1824 finds no window indices). Without the key, torch_native runs the same layers.
    "exaone_moe": TinyFamilyTarget("ExaoneMoeConfig", "ExaoneMoeForCausalLM",
                                   dict(intermediate_size=128, head_dim=16, num_experts=8, num_shared_experts=1,
                                        first_k_dense_replace=1, n_group=1, topk_group=1, sliding_window=8,
                                        rope_parameters={"rope_type": "default", "rope_theta": 1000000.0}, **_MOE),
                                   extra_keys={"sliding_window_pattern": None}),
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


def _family_config_kwargs(name: str, num_hidden_layers: int) -> dict:
    kwargs = {**_FAMILY_COMMON, **FAMILY_TARGETS[name].config, "num_hidden_layers": num_hidden_layers}
    if name in ("gpt_oss", "gemma4"):
        kwargs["layer_types"] = _layer_types(num_hidden_layers)
    if name == "exaone_moe":  # "LLLG": every fourth layer global
        kwargs["layer_types"] = ["full_attention" if i % 4 == 3 else "sliding_attention"
                                 for i in range(num_hidden_layers)]
    if name == "glm4_moe_lite":
        kwargs["mlp_layer_types"] = ["dense"] + ["sparse"] * (num_hidden_layers - 1)
        kwargs["rope_parameters"] = dict(YARN)
    return kwargs


def build_family_target(name: str, out_dir, *, num_hidden_layers: int = 6, seed: int = 0) -> Path:
    """Write the tiny random checkpoint of :data:`FAMILY_TARGETS` ``[name]`` (fp32, seeded, transformers' own class)
    to ``out_dir`` and return it; load it back for reference outputs with ``hf_reference.load_hf``."""
    import transformers

    spec = FAMILY_TARGETS[name]
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    kwargs = _family_config_kwargs(name, num_hidden_layers)
    if spec.outer is not None:
        kwargs = {**spec.outer, "text_config": kwargs, "tie_word_embeddings": False}
    config = getattr(transformers, spec.config_class)(**kwargs)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = getattr(transformers, spec.model_class)(config).to(torch.float32).eval()
    model.save_pretrained(out, safe_serialization=True)
    if spec.transposed:
        _transpose_saved(out / "model.safetensors", spec.transposed)
    extra = dict(spec.extra_keys)
    if "rope_parameters" in config.to_dict() and name == "glm4_moe_lite":
        extra["rope_scaling"] = config.rope_parameters
    if spec.architecture is not None:
        extra["architectures"] = [spec.architecture]
    if name == "exaone_moe":  # which layers are MoE, as real EXAONE MoE configs say it (SGLang reads only this)
        extra["is_moe_layer"] = [t == "sparse" for t in config.mlp_layer_types]
    _update_json(out / "config.json", extra)
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


def _update_json(path: Path, extra: dict) -> None:
    data = json.loads(path.read_text())
    data.update(extra)
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
    target = {**target, **target.get("text_config", {})}  # a multimodal target's decoder dimensions
    if num_aux is None:
        num_aux = len(eagle_aux_layer_ids) if eagle_aux_layer_ids else 3
    config = _draft_config(target, eagle_aux_layer_ids, config_overrides)
    weights = _draft_weights(config, num_aux, target["hidden_size"], seed)
    weights.update(weight_overrides or {})
    save_file({k: v.contiguous() for k, v in weights.items()}, str(out / "model.safetensors"))
    (out / "config.json").write_text(json.dumps(config, indent=2, sort_keys=True))
    return out
