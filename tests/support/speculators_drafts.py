"""Draft builders for the convert / CLI / bad-input tests.

``build_speculators_draft`` makes a tiny EAGLE-3 draft with the speculators package's own classes
(``Eagle3SpeculatorConfig`` + ``Eagle3DraftModel`` + ``save_pretrained``), so the files are exactly what
speculators writes. ``build_specforge_draft`` writes a SpecForge/SGLang-format draft by hand, shaped
like SpecForge's ``configs/deepseek-v3-671b-eagle3.json`` and its ``to_sglang`` export (``midlayer.*``).
"""

from __future__ import annotations

import json
from pathlib import Path

import torch

HIDDEN, VOCAB, DRAFT_VOCAB, HEADS, KV_HEADS, HEAD_DIM, INTER = 64, 256, 128, 4, 2, 16, 128


def write_target(out_dir: Path, *, architecture="KimiK25ForConditionalGeneration", num_hidden_layers=61,
                 hidden_size=HIDDEN) -> Path:
    """A target config.json (no weights); Kimi-K2.5 keeps decoder dims in text_config."""
    out_dir.mkdir(parents=True, exist_ok=True)
    dims = {"num_hidden_layers": num_hidden_layers, "hidden_size": hidden_size, "vocab_size": VOCAB}
    if architecture == "KimiK25ForConditionalGeneration":
        cfg = {"architectures": [architecture], "model_type": "kimi_k25",
               "text_config": {"architectures": ["DeepseekV3ForCausalLM"], "model_type": "kimi_k2", **dims}}
    else:
        cfg = {"architectures": [architecture], "model_type": "deepseek_v3", **dims}
    (out_dir / "config.json").write_text(json.dumps(cfg))
    return out_dir


def _vocab_maps(generator):
    targets = torch.sort(torch.randperm(VOCAB, generator=generator)[:DRAFT_VOCAB]).values
    d2t = targets - torch.arange(DRAFT_VOCAB)  # target_id = draft_id + d2t[draft_id]
    t2d = torch.zeros(VOCAB, dtype=torch.bool)
    t2d[targets] = True
    return d2t, t2d


def build_speculators_draft(out_dir: Path, *, ids=(0, 3, 31), norm_before_fc=True, fc_norm=False,
                            norm_before_residual=True, norm_output=True, model_type="llama", sliding_window=None,
                            seed=0) -> Path:
    """Save a tiny speculators Eagle-3 draft (random, finite weights) to ``out_dir``; returns it."""
    from speculators.config import SpeculatorsConfig, VerifierConfig
    from speculators.models.eagle3 import Eagle3SpeculatorConfig
    from speculators.models.eagle3.core import Eagle3DraftModel
    from speculators.proposals.greedy import GreedyTokenProposalConfig
    from transformers import LlamaConfig, Qwen3Config

    dims = dict(vocab_size=VOCAB, hidden_size=HIDDEN, intermediate_size=INTER, num_hidden_layers=1,
                num_attention_heads=HEADS, num_key_value_heads=KV_HEADS, head_dim=HEAD_DIM, max_position_embeddings=512,
                rms_norm_eps=1e-6, tie_word_embeddings=False)
    if sliding_window is not None:  # as speculators' create_transformer_layer_config writes it
        dims.update(sliding_window=sliding_window, use_sliding_window=True, layer_types=["sliding_attention"])
    tl = (LlamaConfig if model_type == "llama" else Qwen3Config)(**dims)
    cfg = Eagle3SpeculatorConfig(
        transformer_layer_config=tl, draft_vocab_size=DRAFT_VOCAB, norm_before_residual=norm_before_residual,
        norm_before_fc=norm_before_fc, fc_norm=fc_norm, norm_output=norm_output,
        eagle_aux_hidden_state_layer_ids=None if ids is None else list(ids),
        speculators_config=SpeculatorsConfig(
            algorithm="eagle3", proposal_methods=[GreedyTokenProposalConfig(speculative_tokens=3)],
            default_proposal_method="greedy",
            verifier=VerifierConfig(name_or_path=None, architectures=["KimiK25ForConditionalGeneration"])))
    model = Eagle3DraftModel(cfg)
    g = torch.Generator().manual_seed(seed)
    d2t, t2d = _vocab_maps(g)
    with torch.no_grad():
        for name, t in model.state_dict().items():
            if name == "d2t":
                t.copy_(d2t)
            elif name == "t2d":
                t.copy_(t2d)
            elif t.is_floating_point():  # speculators initialises embed/lm_head to NaN until verifier weights load
                t.copy_(torch.randn(t.shape, generator=g))
    model.save_pretrained(out_dir)
    return out_dir


def specforge_tensors(num_aux=3, seed=0) -> dict[str, torch.Tensor]:
    """SpecForge ``to_sglang`` export names (``midlayer.*``) with random values."""
    g = torch.Generator().manual_seed(seed)
    h, q, kv = HIDDEN, HEADS * HEAD_DIM, KV_HEADS * HEAD_DIM
    shapes = {
        "fc.weight": (h, num_aux * h), "midlayer.self_attn.q_proj.weight": (q, 2 * h),
        "midlayer.self_attn.k_proj.weight": (kv, 2 * h), "midlayer.self_attn.v_proj.weight": (kv, 2 * h),
        "midlayer.self_attn.o_proj.weight": (h, q), "midlayer.mlp.gate_proj.weight": (INTER, h),
        "midlayer.mlp.up_proj.weight": (INTER, h), "midlayer.mlp.down_proj.weight": (h, INTER),
        "midlayer.input_layernorm.weight": (h,), "midlayer.post_attention_layernorm.weight": (h,),
        "midlayer.hidden_norm.weight": (h,), "norm.weight": (h,), "lm_head.weight": (DRAFT_VOCAB, h),
    }
    out = {k: torch.randn(s, generator=g) for k, s in shapes.items()}
    out["d2t"], out["t2d"] = _vocab_maps(g)
    return out


def build_specforge_draft(out_dir: Path, *, ids=(1, 29, 57), tensors=None) -> Path:
    """A SpecForge/SGLang-format draft: LlamaForCausalLMEagle3 config with eagle_config ids, midlayer.* weights."""
    from safetensors.torch import save_file

    out_dir.mkdir(parents=True, exist_ok=True)
    cfg = {"architectures": ["LlamaForCausalLMEagle3"], "model_type": "llama",
           "eagle_config": {"eagle_aux_hidden_state_layer_ids": list(ids), "use_aux_hidden_state": True},
           "hidden_size": HIDDEN, "intermediate_size": INTER, "num_attention_heads": HEADS,
           "num_key_value_heads": KV_HEADS,
           "head_dim": HEAD_DIM, "num_hidden_layers": 1, "vocab_size": VOCAB, "draft_vocab_size": DRAFT_VOCAB,
           "max_position_embeddings": 512, "rms_norm_eps": 1e-6, "hidden_act": "silu", "tie_word_embeddings": False,
           "torch_dtype": "float32"}
    (out_dir / "config.json").write_text(json.dumps(cfg, indent=2))
    save_file(specforge_tensors(len(ids)) if tensors is None else tensors, str(out_dir / "model.safetensors"),
              metadata={"format": "pt"})
    return out_dir
