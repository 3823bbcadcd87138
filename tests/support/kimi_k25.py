"""A tiny Kimi-K2.5 target (``KimiK25ForConditionalGeneration``): the tiny DeepSeek-V3 language model
(support/tiny_models.py ``TINY_TARGET_CONFIG``, the yarn rope and SGLang's CPU keys) under ``text_config``, plus a
tiny MoonViT vision tower and patch-merger projector, built with transformers' own ``Kimi_K25ForConditionalGeneration``
(seeded, well under a second) and written in the naming the released checkpoint uses.

Why not ``save_pretrained`` as it is: transformers 5.19 reads the released naming through its ``kimi_k25`` weight
conversion (conversion_mapping.py: ``vision_tower.encoder.blocks.N.wqkv`` split into q/k/v and permuted for its
half-split rope, ``norm0/norm1`` -> ``norm1/norm2``, ``mlp.fc0/fc1`` -> ``fc1/fc2``, ``mm_projector.proj.0/2`` ->
``in_proj/out_proj``, ``language_model.model`` -> ``model.language_model``), and ``save_pretrained`` runs those
rules backwards, fusing and un-permuting the tensors correctly, but three names come out in neither naming: its
``blocks -> layers`` rule, reversed, renames the language model's ``layers`` to ``blocks``;
``vision_tower.patch_embed.proj`` comes out under ``vision_tower.encoder.``; the projector's ``pre_norm`` keeps the
``model.`` prefix. :func:`build_tiny_kimi_k25` puts those three back to the released names, which are what SGLang's
``KimiK25ForConditionalGeneration.load_weights`` (models/kimi_k25.py:862-893) reads (``wqkv.`` -> ``attn.qkv_proj.``,
``wo.`` -> ``attn.proj.``, ``mm_projector.proj.0/2`` -> ``linear_1/2``, ``language_model.`` stripped for
``DeepseekV3ForCausalLM``) and what ``Kimi_K25ForConditionalGeneration.from_pretrained`` loads back bit-identical
(the builder checks that HF's load of the written checkpoint equals the model it came from).

config.json is what both read from one file: SGLang's own ``KimiK25Config`` (configs/kimi_k25.py, registered for
model_type ``kimi_k25``) and transformers' ``Kimi_K25Config``. The released checkpoint's vision keys use the
``vt_*`` names SGLang's projector reads (``config.vt_hidden_size``, models/kimi_k25.py:600), while SGLang's MoonViT
reads ``hidden_size``/``num_attention_heads``/``num_hidden_layers``/``intermediate_size`` (whose defaults are the
released model's) and transformers reads those and ``pos_emb_*``/``rope_parameters``/``projection_hidden_size``: all
are written, with equal values. ``architectures[0]`` is SGLang's class name (the released config's).

Nothing here imports sglang.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import torch

from fixtures.target import YARN
from support.tiny_models import _SGLANG_CONFIG_KEYS, TINY_TARGET_CONFIG

ARCHITECTURE = "KimiK25ForConditionalGeneration"  # SGLang's class (models/kimi_k25.py), the released config's

# The tiny MoonViT: head_dim 8 (SGLang's 2-D rope needs head_dim % 4 == 0), a 2x2 patch merger into 4*16 = 64.
VISION = dict(patch_size=4, hidden_size=16, num_attention_heads=2, num_hidden_layers=1, intermediate_size=32,
              merge_kernel_size=[2, 2])
_POS_EMB = dict(height=4, width=4, time=2)

# What save_pretrained's reversed renaming gets wrong (module doc), mapped to the released names.
_RELEASED_NAMES = (
    (re.compile(r"^language_model\.model\.blocks\."), "language_model.model.layers."),
    (re.compile(r"^vision_tower\.encoder\.patch_embed\."), "vision_tower.patch_embed."),
    (re.compile(r"^model\.mm_projector\."), "mm_projector."),
)


def released_name(saved: str) -> str:
    """The released checkpoint's name for a tensor ``save_pretrained`` wrote as ``saved``."""
    for pattern, repl in _RELEASED_NAMES:
        saved = pattern.sub(repl, saved)
    return saved


def kimi_config(num_hidden_layers: int = 6):
    """transformers' ``Kimi_K25Config`` for the tiny model (text: the tiny DeepSeek-V3; no tied embedding, as the
    released model)."""
    from transformers import DeepseekV3Config, Kimi_K25Config

    text = DeepseekV3Config(num_hidden_layers=num_hidden_layers,
                            **{**TINY_TARGET_CONFIG, "rope_parameters": dict(YARN)})
    # the text model's initializer_range (0.1) for the tower too: at transformers' 0.02 its attention is nearly
    # uniform and the vision rope changes its output by about 2e-5, within the tolerance
    vision = dict(VISION, pos_emb_height=_POS_EMB["height"], pos_emb_width=_POS_EMB["width"],
                  pos_emb_time=_POS_EMB["time"], rope_parameters={"rope_type": "axial", "rope_theta": 10000.0},
                  initializer_range=TINY_TARGET_CONFIG["initializer_range"])
    return Kimi_K25Config(text_config=text.to_dict(), vision_config=vision,
                          projection_hidden_size=VISION["hidden_size"], tie_word_embeddings=False)


def _sglang_vision_keys(text_hidden_size: int) -> dict:
    """The released checkpoint's vision_config keys (SGLang's KimiK25VisionConfig and its projector read them)."""
    v = VISION
    return dict(init_pos_emb_height=_POS_EMB["height"], init_pos_emb_width=_POS_EMB["width"],
                init_pos_emb_time=_POS_EMB["time"], pos_emb_type="divided_fixed", vt_hidden_size=v["hidden_size"],
                vt_num_attention_heads=v["num_attention_heads"], vt_num_hidden_layers=v["num_hidden_layers"],
                vt_intermediate_size=v["intermediate_size"], mm_hidden_size=v["hidden_size"],
                text_hidden_size=text_hidden_size, merge_type="sd2_tpool", video_attn_type="spatial_temporal",
                mm_projector_type="patchmerger", projector_hidden_act="gelu", projector_ln_eps=1e-5)


def load_hf_kimi_k25(model_dir):
    """The checkpoint in ``model_dir`` as transformers' ``Kimi_K25ForConditionalGeneration`` (fp32, eval mode), the
    reference. Its config class is named explicitly: once SGLang is imported, ``AutoConfig`` maps model_type
    ``kimi_k25`` to SGLang's own ``KimiK25Config`` (utils/hf_transformers/common.py registers it), which
    transformers' model class does not accept."""
    from transformers import Kimi_K25Config, Kimi_K25ForConditionalGeneration

    config = Kimi_K25Config.from_pretrained(str(model_dir))
    return Kimi_K25ForConditionalGeneration.from_pretrained(str(model_dir), config=config, dtype=torch.float32).eval()


def build_tiny_kimi_k25(out_dir, *, num_hidden_layers: int = 6, seed: int = 0) -> Path:
    """Write the tiny Kimi-K2.5 checkpoint (fp32, seeded: the same arguments give the same weights) to ``out_dir``
    and return it. Load it back for reference outputs with :func:`load_hf_kimi_k25`."""
    from safetensors.torch import load_file, save_file
    from transformers import Kimi_K25ForConditionalGeneration

    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    config = kimi_config(num_hidden_layers)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = Kimi_K25ForConditionalGeneration(config).to(torch.float32).eval()
    model.save_pretrained(out, safe_serialization=True)
    weights = out / "model.safetensors"
    saved = load_file(str(weights))
    save_file({released_name(k): v for k, v in saved.items()}, str(weights), metadata={"format": "pt"})

    cfg = json.loads((out / "config.json").read_text())
    text = cfg["text_config"]
    text.update(_SGLANG_CONFIG_KEYS, rope_scaling=text["rope_parameters"], architectures=["DeepseekV3ForCausalLM"],
                model_type="kimi_k2")  # the released config's; transformers and SGLang read it as DeepSeek-V3
    cfg["vision_config"].update(_sglang_vision_keys(text["hidden_size"]))
    cfg.update(architectures=[ARCHITECTURE], media_placeholder_token_id=cfg["image_token_id"])
    (out / "config.json").write_text(json.dumps(cfg, indent=2, sort_keys=True))

    reloaded = load_hf_kimi_k25(out).state_dict()
    own = model.state_dict()
    wrong = sorted(k for k in own if k not in reloaded or not torch.equal(own[k], reloaded[k]))
    if wrong or set(reloaded) != set(own):
        raise AssertionError(f"transformers does not read {weights} back as the model it came from: {wrong[:5]}")
    return out
