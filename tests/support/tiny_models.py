"""Tiny, seeded, deterministic checkpoints for the tests (built in well under a second each).

- ``build_tiny_target``: a DeepSeek-V3 built with HF transformers' own ``DeepseekV3Config`` and
  ``DeepseekV3ForCausalLM`` (random weights from a fixed seed), saved with ``save_pretrained`` as
  safetensors. MLA dims, experts and vocab are small. ``config.json`` also carries the keys SGLang
  0.5.23's CPU path reads that transformers does not write: yarn ``rope_scaling`` (CPU rope supports only
  deepseek_yarn, ``layers/rotary_embedding/factory.py::get_rope_cpu``) and ``moe_layer_freq``
  (``models/deepseek_v2.py``), as real DeepSeek-V3 configs do.
- ``build_tiny_draft``: an EAGLE-3 draft in the layout SGLang's ``LlamaForCausalLMEagle3``
  (``models/llama_eagle3.py``) loads: config.json + model.safetensors with ``fc``, ``midlayer.*``,
  ``norm``, ``lm_head``, ``d2t``, ``t2d``. The embedding comes from the target at load time.

Nothing here imports sglang.
"""

from __future__ import annotations

import json
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
    if num_aux is None:
        num_aux = len(eagle_aux_layer_ids) if eagle_aux_layer_ids else 3
    config = _draft_config(target, eagle_aux_layer_ids, config_overrides)
    weights = _draft_weights(config, num_aux, target["hidden_size"], seed)
    weights.update(weight_overrides or {})
    save_file({k: v.contiguous() for k, v in weights.items()}, str(out / "model.safetensors"))
    (out / "config.json").write_text(json.dumps(config, indent=2, sort_keys=True))
    return out
