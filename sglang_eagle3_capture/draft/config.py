"""The EAGLE-3 draft ``config.json`` as SGLang's ``LlamaForCausalLMEagle3`` resolves it.

Every field below mirrors one read in sglang/srt/models/llama_eagle3.py or llama.py (defaults as
transformers' ``LlamaConfig`` gives them); :class:`sglang_eagle3_capture.draft.model.Eagle3Draft`
builds its math from it. Anything SGLang would build differently, or not at all, is a
:class:`DraftFormatError` naming the file and field. How SGLang reads the math flags is a release fact
(:attr:`~sglang_eagle3_capture.releases.schema.Release.draft_flags`); :func:`resolve_flags` is the one
reader of them.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass
from typing import Any

from .. import releases
from ..errors import DraftFormatError
from ..formats.base import MATH_FLAGS as FLAG_FIELDS
from ..formats.base import MAX_DIM, check_dim  # noqa: F401  (draft dimensions: one definition, in formats)
from ..releases.schema import Release
from ..target_config import path_get
from ..userfiles import brief, shown


@functools.lru_cache(maxsize=1)
def default_release() -> Release:
    """The release whose draft rules apply when a caller names none: the installed SGLang's when it is supported
    (inside a server, the one running), else the newest supported. Read once per process from package metadata
    (SGLang is not imported)."""
    return releases.installed_or_newest()


def resolve_flags(cfg: Any, where: Any, release: Release | None = None, *,
                  error: type[Exception] = DraftFormatError, forbid_pair: bool = True) -> dict:
    """The draft math flags as SGLang ``release`` (default: :func:`default_release`) reads them from ``cfg``
    (a dict or an HF config object); a non-boolean value or the forbidden pair raises ``error`` (naming ``where``).

    ``forbid_pair``: refuse ``norm_before_fc`` with ``fc_norm`` (speculators forbids training the pair). SGLang's
    ``LlamaForCausalLMEagle3`` itself builds both, so readers that mirror what SGLang builds pass False.

    Example::

        >>> resolve_flags({"eagle_config": {"norm_before_fc": True}}, "config.json")["norm_before_fc"]
        True
        >>> resolve_flags({"eagle_config": {"fc_norm": True}}, "config.json")["fc_norm"]  # SGLang: top level only
        False
    """
    rel = default_release() if release is None else release
    flags = {}
    for name in FLAG_FIELDS:
        rule = rel.draft_flags[name]
        values = [(key, path_get(cfg, key)) for key in rule.keys]
        for key, value in values:
            if value is not None and not isinstance(value, bool):
                raise error(f"{shown(where)}: field '{key}': expected true or false, got {brief(value)}; fix: write "
                                     f'"{key.rsplit(".", 1)[-1]}": true or false')
        present = [v for _, v in values if v is not None]
        flags[name] = any(present) if rule.combine == "any" else bool(present[0]) if present else False
    if forbid_pair and flags["norm_before_fc"] and flags["fc_norm"]:
        raise error(f"{shown(where)}: field 'norm_before_fc': norm_before_fc and fc_norm are both true (speculators "
                             "forbids the pair); fix: keep only the flag the draft was trained with")
    return flags


@dataclass(frozen=True)
class DraftConfig:
    """The fields of a draft ``config.json`` that SGLang's ``LlamaForCausalLMEagle3`` reads."""

    hidden_size: int
    num_attention_heads: int
    num_key_value_heads: int
    head_dim: int
    intermediate_size: int
    num_hidden_layers: int
    vocab_size: int
    draft_vocab_size: int
    target_hidden_size: int
    num_aux_hidden_states: int
    rms_norm_eps: float = 1e-6
    rope_theta: float = 10000.0
    fc_bias: bool = False  # config "bias"
    attention_bias: bool = False
    norm_before_fc: bool = False
    fc_norm: bool = False
    tie_word_embeddings: bool = False
    lm_head_from_target: bool = False
    norm_before_residual: bool = False  # ignored by stock SGLang; the plugin's draft loader serves it

    @classmethod
    def from_dict(cls, cfg: dict, where: str = "config.json") -> "DraftConfig":
        """Resolve a draft ``config.json`` dict the way SGLang does; errors name ``where``, the field and the fix.

        Every field is type- and range-checked (SGLang would fail, or build something else, on the values refused):
        sizes are positive integers of at most :data:`MAX_DIM`, epsilons and RoPE theta positive finite numbers,
        flags true or false, nested settings objects."""
        def err(fld: str, problem: str, fix: str = "correct the config") -> DraftFormatError:
            return DraftFormatError(f"{shown(where)}: field '{fld}': {problem}; fix: {fix}")

        def need(key):
            if cfg.get(key) is None:
                raise DraftFormatError(f"{shown(where)}: field '{key}' is missing; fix: an EAGLE-3 draft config "
                                       "needs it")
            return cfg[key]

        def size(key, value):
            return check_dim(value, key, where)

        def number(key, value):
            if not isinstance(value, (int, float)) or isinstance(value, bool) or not math.isfinite(value) or value <= 0:
                raise err(key, f"expected a positive number, got {brief(value)}")
            return float(value)

        def boolean(key, default=False):
            value = cfg.get(key, default)
            if value is None:
                return default
            if not isinstance(value, bool):
                raise err(key, f"expected true or false, got {brief(value)}")
            return value

        if not isinstance(cfg, dict):
            raise err("<document>", f"expected a JSON object, got {type(cfg).__name__}",
                      "point at the draft's config.json")
        for key in ("eagle_config", "rope_parameters", "rope_scaling"):
            if cfg.get(key) is not None and not isinstance(cfg[key], dict):
                raise err(key, f"expected an object, got {brief(cfg[key])}")
        archs = cfg.get("architectures") or []
        if not isinstance(archs, list) or not all(isinstance(a, str) for a in archs):
            raise err("architectures", f"expected a list of class names, got {brief(archs)}",
                      'write ["LlamaForCausalLMEagle3"]')
        if archs and archs[0] != "LlamaForCausalLMEagle3":
            raise err("architectures", f"is {brief(archs)}; this reader handles ['LlamaForCausalLMEagle3'] drafts only",
                      "convert the draft to SGLang's format")
        if cfg.get("model_type") == "llama4_text" or cfg.get("hidden_act", "silu") != "silu":
            raise err("model_type", f"model_type {brief(cfg.get('model_type'))} / hidden_act "
                      f"{brief(cfg.get('hidden_act'))}: only llama drafts with silu are supported",
                      "convert a llama/silu draft")
        rope = cfg.get("rope_parameters") or cfg.get("rope_scaling") or {}
        rope_type = rope.get("rope_type", rope.get("type", "default"))
        neox = cfg.get("rope_is_neox_style", True)
        if rope_type != "default" or cfg.get("partial_rotary_factor", 1) != 1 or not neox:
            raise err("rope_parameters", f"{brief(rope)}: only default full neox RoPE is supported",
                      "use a draft trained with default RoPE")
        hidden = size("hidden_size", need("hidden_size"))
        heads = size("num_attention_heads", need("num_attention_heads"))
        if "target_hidden_size" in cfg and cfg["target_hidden_size"] is None:  # SGLang: hasattr -> Linear(None * k)
            raise DraftFormatError(f"{shown(where)}: field 'target_hidden_size' is null, which SGLang cannot build; "
                                   "fix: remove the field or set it to the target's hidden size")
        flags = resolve_flags(cfg, where, forbid_pair=False)  # SGLang builds what the flags say, the pair included
        eagle = cfg.get("eagle_config") or {}
        num_aux = cfg.get("num_aux_hidden_states")
        if num_aux is None:  # llama_eagle3.py: explicit attr > eagle_config layer_ids > default 3
            ids = eagle.get("eagle_aux_hidden_state_layer_ids")
            if ids is not None and not isinstance(ids, list):
                raise err("eagle_config.eagle_aux_hidden_state_layer_ids", f"expected a list, got {brief(ids)}")
            num_aux = len(ids) if ids else 3
        num_aux = size("num_aux_hidden_states", num_aux)
        vocab = size("vocab_size", need("vocab_size"))
        tie = boolean("tie_word_embeddings")
        dvs = cfg.get("draft_vocab_size")
        if dvs is not None:
            size("draft_vocab_size", dvs)
        if tie and dvs not in (None, vocab):
            raise err("draft_vocab_size", f"{dvs} differs from vocab_size {vocab} with tied embeddings",
                      "untie the embeddings or drop draft_vocab_size")
        kv = size("num_key_value_heads", cfg.get("num_key_value_heads") or heads)
        if heads % kv:
            raise err("num_key_value_heads", f"{kv} does not divide num_attention_heads {heads}")
        head_dim = cfg.get("head_dim") or hidden // heads
        if not head_dim:
            raise err("num_attention_heads", f"{heads} heads do not fit hidden_size {hidden} and no head_dim is given")
        layers = size("num_hidden_layers", need("num_hidden_layers"))
        rope_theta = rope.get("rope_theta", cfg.get("rope_theta", 10000.0))
        return cls(
            hidden_size=hidden, num_attention_heads=heads, num_key_value_heads=kv,
            head_dim=size("head_dim", head_dim), intermediate_size=size("intermediate_size", need("intermediate_size")),
            num_hidden_layers=layers, vocab_size=vocab, draft_vocab_size=dvs if dvs is not None else vocab,
            target_hidden_size=size("target_hidden_size", cfg.get("target_hidden_size", hidden)),
            num_aux_hidden_states=num_aux,
            rms_norm_eps=number("rms_norm_eps", cfg.get("rms_norm_eps", 1e-6)),
            rope_theta=number("rope_theta", rope_theta),
            fc_bias=boolean("bias"), attention_bias=boolean("attention_bias"),
            norm_before_fc=flags["norm_before_fc"], fc_norm=flags["fc_norm"],
            tie_word_embeddings=tie, lm_head_from_target=(not tie and dvs is None),
            norm_before_residual=flags["norm_before_residual"],
        )

    def to_sglang_config(self, **extra) -> dict:
        """A ``config.json`` dict that SGLang (and :meth:`from_dict`) reads back as this config."""
        c = self
        cfg = {"architectures": ["LlamaForCausalLMEagle3"], "model_type": "llama", "hidden_act": "silu",
               "hidden_size": c.hidden_size, "num_attention_heads": c.num_attention_heads,
               "num_key_value_heads": c.num_key_value_heads, "head_dim": c.head_dim,
               "intermediate_size": c.intermediate_size, "num_hidden_layers": c.num_hidden_layers,
               "vocab_size": c.vocab_size, "draft_vocab_size": c.draft_vocab_size,
               "target_hidden_size": c.target_hidden_size, "num_aux_hidden_states": c.num_aux_hidden_states,
               "rms_norm_eps": c.rms_norm_eps, "rope_parameters": {"rope_type": "default", "rope_theta": c.rope_theta},
               "bias": c.fc_bias, "attention_bias": c.attention_bias, "norm_before_fc": c.norm_before_fc,
               "fc_norm": c.fc_norm, "tie_word_embeddings": c.tie_word_embeddings, "torch_dtype": "float32",
               "norm_before_residual": c.norm_before_residual}
        if c.lm_head_from_target:
            del cfg["draft_vocab_size"]
        return {**cfg, **extra}

    @property
    def fc_in_features(self) -> int:
        """Width of the aux-hidden input the fc consumes (``num_aux * target_hidden_size``)."""
        return self.num_aux_hidden_states * self.target_hidden_size

    @property
    def o_proj_bias(self) -> bool:
        """llama.py gives o_proj a bias for ``attention_bias`` or ``bias``; llama_eagle3.py's qkv never has one."""
        return self.attention_bias or self.fc_bias
