"""Draft directories the tests build (draft-head loader, inspect, the draft replica), and loading them with SGLang's
own loader in-process.

- ``make_draft``: the harness's tiny Llama EAGLE-3 draft (support/tiny_models.py) plus a manifest; the
  ``eagle_config`` ids are what ``convert`` writes (``readings.stock_safe_eagle_config_ids``).
- ``draft_with_manifest``: the same draft with ``eagle_config`` ids verbatim and any manifest (for ``inspect``).
- ``make_mla_draft``: an ``Eagle3DeepseekV2ForCausalLM`` draft (kimi_k25_eagle3.py layout) for the tiny target.
- ``make_speculators_draft``: a checkpoint written by the speculators package itself (``Eagle3DraftModel``
  ``save_pretrained``), with the embedding copied from the target, as speculators training does.
- ``random_draft`` (with ``BASE``/``VARIANTS``, ``ragged_inputs``, ``mine_per_token``): seeded random drafts of every
  math variant, written by the package's own ``Eagle3Draft``, and its logits on a ragged batch.
- ``load_draft``: SGLang 0.5.23's ``get_model`` (model_loader) on a draft directory in this process,
  after the in-process target runner (support/sglang_inprocess.py) has published SGLang's runtime state.
"""

from __future__ import annotations

import json
from pathlib import Path

import torch
from safetensors.torch import load_file, save_file

from sglang_eagle3_capture.core.draft_config import Yarn
from sglang_eagle3_capture.core.manifest import Manifest, write_manifest
from sglang_eagle3_capture.doctor.model import DraftConfig, Eagle3Draft
from sglang_eagle3_capture.doctor.readings import stock_safe_eagle_config_ids
from support.tiny_models import DRAFT_VOCAB_SIZE, build_tiny_draft

FAMILY = "deepseek_v2"  # the tiny DeepSeek-V3 target's family


def target_manifest(target_dir, layer_ids, **provenance) -> Manifest:
    """A manifest for ``layer_ids`` against the target in ``target_dir``."""
    cfg = json.loads((Path(target_dir) / "config.json").read_text())
    dims = cfg.get("text_config", cfg)  # a wrapper (Kimi-K2.5) keeps the decoder's dimensions there
    return Manifest(tuple(layer_ids), cfg["architectures"][0], dims["num_hidden_layers"], dims["hidden_size"],
                    provenance or {"source": "manual"})


def rewrite_weights(draft_dir, fn) -> None:
    """Replace ``model.safetensors`` by ``fn(dict of tensors)``."""
    path = Path(draft_dir) / "model.safetensors"
    save_file({k: v.clone().contiguous() for k, v in fn(load_file(str(path))).items()}, str(path))


def rewrite_config(draft_dir, fn) -> None:
    """Replace ``config.json`` by ``fn(dict)``."""
    path = Path(draft_dir) / "config.json"
    path.write_text(json.dumps(fn(json.loads(path.read_text())), indent=2))


def make_draft(out_dir, target_dir, layer_ids=(-1, 1, 3), *, manifest=True, config_overrides=None, seed=0) -> Path:
    """The tiny Llama draft for ``layer_ids`` (fc order), with ``eagle3_manifest.json`` unless ``manifest=False``."""
    ids = list(layer_ids)
    cfg = {"num_aux_hidden_states": len(ids), **(config_overrides or {})}
    eagle_ids = stock_safe_eagle_config_ids(ids, family=FAMILY)
    out = build_tiny_draft(out_dir, target_dir=target_dir, eagle_aux_layer_ids=eagle_ids, seed=seed,
                           config_overrides=cfg)
    if manifest:
        write_manifest(out, target_manifest(target_dir, ids))
    return out


def draft_with_manifest(out_dir, target_dir, eagle_ids, manifest_ids) -> Path:
    """The tiny Llama draft with ``eagle_config`` ids ``eagle_ids`` verbatim (None: no ids, SGLang's default) and an
    fc for ``len(manifest_ids)`` chunks, plus a manifest for ``manifest_ids`` (None: no manifest, a 3-chunk fc)."""
    out = build_tiny_draft(out_dir, target_dir=target_dir, eagle_aux_layer_ids=eagle_ids,
                           num_aux=len(manifest_ids or (0, 0, 0)))
    if manifest_ids is not None:
        write_manifest(out, target_manifest(target_dir, manifest_ids))
    return out


def make_mla_draft(out_dir, target_dir, layer_ids=(-1, 1, 3), *, config_overrides=None, seed=0) -> Path:
    """A one-layer MLA EAGLE-3 draft in the checkpoint naming ``Eagle3DeepseekV2ForCausalLM.load_weights`` reads."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    t = json.loads((Path(target_dir) / "config.json").read_text())
    t = t.get("text_config", t)  # a wrapper (Kimi-K2.5) keeps the decoder's config there
    keys = ("hidden_size", "num_attention_heads", "num_key_value_heads", "q_lora_rank", "kv_lora_rank",
            "qk_rope_head_dim", "qk_nope_head_dim", "v_head_dim", "max_position_embeddings", "rope_scaling",
            "rms_norm_eps", "vocab_size")
    cfg = {k: t[k] for k in keys}
    ids = list(layer_ids)
    cfg.update(architectures=["Eagle3DeepseekV2ForCausalLM"], model_type="deepseek_v3", num_hidden_layers=1,
               intermediate_size=2 * t["hidden_size"], hidden_act="silu", draft_vocab_size=DRAFT_VOCAB_SIZE,
               tie_word_embeddings=False, torch_dtype="float32", rope_parameters=t["rope_scaling"],
               eagle_config={"eagle_aux_hidden_state_layer_ids": stock_safe_eagle_config_ids(ids, family=FAMILY),
                             "use_aux_hidden_state": True})
    cfg.update(config_overrides or {})
    h, heads = cfg["hidden_size"], cfg["num_attention_heads"]
    qk = cfg["qk_nope_head_dim"] + cfg["qk_rope_head_dim"]
    gen = torch.Generator().manual_seed(seed)

    def randn(*shape):
        return torch.randn(*shape, generator=gen) * 0.05

    t2d = torch.zeros(cfg["vocab_size"], dtype=torch.bool)
    t2d[:DRAFT_VOCAB_SIZE] = True
    a = "layers.0.self_attn."
    weights = {
        "fc.weight": randn(h, len(ids) * h),
        a + "q_a_proj.weight": randn(cfg["q_lora_rank"], 2 * h),
        a + "q_a_layernorm.weight": 1 + randn(cfg["q_lora_rank"]),
        a + "q_b_proj.weight": randn(heads * qk, cfg["q_lora_rank"]),
        a + "kv_a_proj_with_mqa.weight": randn(cfg["kv_lora_rank"] + cfg["qk_rope_head_dim"], 2 * h),
        a + "kv_a_layernorm.weight": 1 + randn(cfg["kv_lora_rank"]),
        a + "kv_b_proj.weight": randn(heads * (cfg["qk_nope_head_dim"] + cfg["v_head_dim"]), cfg["kv_lora_rank"]),
        a + "o_proj.weight": randn(h, heads * cfg["v_head_dim"]),
        "layers.0.mlp.gate_proj.weight": randn(2 * h, h),
        "layers.0.mlp.up_proj.weight": randn(2 * h, h),
        "layers.0.mlp.down_proj.weight": randn(h, 2 * h),
        "layers.0.input_layernorm.weight": 1 + randn(h),
        "layers.0.hidden_norm.weight": 1 + randn(h),
        "layers.0.post_attention_layernorm.weight": 1 + randn(h),
        "norm.weight": 1 + randn(h),
        "lm_head.weight": randn(DRAFT_VOCAB_SIZE, h),
        "d2t": torch.zeros(DRAFT_VOCAB_SIZE, dtype=torch.int64),
        "t2d": t2d,
    }
    save_file({k: v.contiguous() for k, v in weights.items()}, str(out / "model.safetensors"))
    (out / "config.json").write_text(json.dumps(cfg, indent=2))
    write_manifest(out, target_manifest(target_dir, ids))
    return out


def make_speculators_draft(out_dir, target_dir, vllm_ids, *, seed=0, **flags) -> Path:
    """A speculators 0.9.0 Eagle-3 checkpoint for the tiny target (ids in speculators' vLLM/HF-index convention)."""
    from speculators import SpeculatorsConfig, VerifierConfig
    from speculators.models.eagle3 import Eagle3SpeculatorConfig
    from speculators.models.eagle3.core import Eagle3DraftModel
    from speculators.proposals.greedy import GreedyTokenProposalConfig
    from transformers import LlamaConfig

    t = json.loads((Path(target_dir) / "config.json").read_text())
    h, heads = t["hidden_size"], t["num_attention_heads"]
    layer = LlamaConfig(vocab_size=t["vocab_size"], hidden_size=h, intermediate_size=2 * h, num_hidden_layers=1,
                        num_attention_heads=heads, num_key_value_heads=heads, head_dim=h // heads,
                        rms_norm_eps=t["rms_norm_eps"], max_position_embeddings=t["max_position_embeddings"])
    verifier = VerifierConfig(name_or_path=str(target_dir), architectures=t["architectures"])
    cfg = Eagle3SpeculatorConfig(
        transformer_layer_config=layer, draft_vocab_size=DRAFT_VOCAB_SIZE,
        eagle_aux_hidden_state_layer_ids=list(vllm_ids),
        speculators_config=SpeculatorsConfig(algorithm="eagle3", default_proposal_method="greedy", verifier=verifier,
                                             proposal_methods=[GreedyTokenProposalConfig(speculative_tokens=2)]),
        **flags)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = Eagle3DraftModel(cfg)
        target_embed = load_file(str(Path(target_dir) / "model.safetensors"))["model.embed_tokens.weight"]
        with torch.no_grad():
            model.embed_tokens.weight.copy_(target_embed)  # speculators' frozen copy of the verifier embedding
            model.lm_head.weight.normal_(0, 0.05)
            model.verifier_lm_head.weight.normal_(0, 0.05)
            for name, p in model.named_parameters():
                if name.endswith("norm.weight"):
                    p.add_(torch.randn_like(p) * 0.1)  # so every norm changes the math
            model.t2d.zero_()
            model.t2d[:DRAFT_VOCAB_SIZE] = True
            model.d2t.zero_()
    model.save_pretrained(str(out_dir))
    return Path(out_dir)


BASE = dict(hidden_size=64, num_attention_heads=4, num_key_value_heads=4, head_dim=16, intermediate_size=96,
            num_hidden_layers=1, vocab_size=256, draft_vocab_size=100, target_hidden_size=64,
            num_aux_hidden_states=3)
# Every branch of llama_eagle3.py's math that a config can switch on.
VARIANTS = {
    "plain": {},
    "all-options": dict(norm_before_fc=True, fc_norm=True, num_key_value_heads=2, target_hidden_size=48,
                        rope_theta=5000.0, rms_norm_eps=1e-5, fc_bias=True, attention_bias=True, num_hidden_layers=2),
    "tied": dict(tie_word_embeddings=True, draft_vocab_size=256),  # lm_head is embed_tokens
    # YaRN without mscale keys: magnitude 0.1 ln(4) + 1 on cos/sin; a ramp over the 8 frequencies of head_dim 16
    "yarn": dict(yarn=Yarn(factor=4.0, original_max_position_embeddings=64, beta_fast=8, beta_slow=1)),
    # what speculators copies from a DeepSeek-V3 / Kimi-K2.5 target (their config.json rope_scaling)
    "yarn-deepseek": dict(yarn=Yarn(factor=40.0, original_max_position_embeddings=4096, beta_fast=32, beta_slow=1,
                                    mscale=1.0, mscale_all_dim=1.0)),
}


def random_draft(out: Path, seed: int = 0, **overrides) -> Path:
    """A seeded random draft dir in SGLang's format; norms and d2t are non-trivial so they matter."""
    cfg = DraftConfig(**{**BASE, **overrides})
    torch.manual_seed(seed)
    model = Eagle3Draft(cfg)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "norm" in name or name.endswith(".bias"):
                p.uniform_(0.5, 1.5)
        hot = torch.randperm(cfg.vocab_size)[: cfg.draft_vocab_size].sort().values
        model.d2t.copy_(hot - torch.arange(cfg.draft_vocab_size))
    out.mkdir(parents=True, exist_ok=True)
    save_file(model.sglang_state_dict(), str(out / "model.safetensors"))
    (out / "config.json").write_text(json.dumps(cfg.to_sglang_config(), indent=2))
    return out


def ragged_inputs(cfg: DraftConfig, lengths=(9, 5, 12), seed: int = 1):
    gen = torch.Generator().manual_seed(seed)
    ids = [torch.randint(0, cfg.vocab_size, (n,), generator=gen) for n in lengths]
    aux = [torch.randn(n, cfg.fc_in_features, generator=gen) for n in lengths]
    return ids, aux


def padded(seqs, width):
    return torch.stack([torch.nn.functional.pad(s, [0, 0] * (s.dim() - 1) + [0, width - len(s)]) for s in seqs])


def mine_per_token(model: Eagle3Draft, ids, aux) -> torch.Tensor:
    """Our logits for ragged sequences, run as one right-padded batch, flattened to SGLang's [T, V]."""
    width = max(len(i) for i in ids)
    with torch.no_grad():
        logits = model(padded(ids, width), padded(aux, width))
    return torch.cat([logits[b, : len(i)] for b, i in enumerate(ids)])


def load_draft(draft_dir, runner):
    """Build and load ``draft_dir`` with SGLang's ``get_model``, as the draft worker does, in this process."""
    from sglang.srt.configs.device_config import DeviceConfig
    from sglang.srt.configs.load_config import LoadConfig
    from sglang.srt.configs.model_config import ModelConfig
    from sglang.srt.model_loader import get_model
    from sglang.srt.runtime_context import get_spec

    server_args = runner.model_runner.server_args
    model_config = ModelConfig.from_server_args(server_args, model_path=str(draft_dir), is_draft_model=True)
    with get_spec().override(speculative_draft_model_path=str(draft_dir)):
        return get_model(model_config=model_config, load_config=LoadConfig(load_format="auto"),
                         device_config=DeviceConfig("cpu"))
