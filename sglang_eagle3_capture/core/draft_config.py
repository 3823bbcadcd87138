"""The EAGLE-3 draft ``config.json`` as SGLang's ``LlamaForCausalLMEagle3`` resolves it (each field mirrors one read
in models/llama_eagle3.py or llama.py); :func:`resolve_flags` is the one reader of the math flags (a release fact)."""

from __future__ import annotations

import functools
from dataclasses import dataclass, fields
from typing import Any

from . import records, releases
from .config_keys import IDS_KEY, is_fail_closed
from .errors import InputError, brief
from .releases.schema import Release
from .schemas.draft import MATH_FLAGS as FLAG_FIELDS
from .schemas.draft import MAX_DIM, SGLANG_ARCH, SGLANG_DRAFT  # noqa: F401  (MAX_DIM: the one bound)
from .target_config import path_get


@functools.lru_cache(maxsize=1)
def default_release() -> Release:
    """The installed SGLang's release when supported, else the newest."""
    return releases.installed_or_newest()


def resolve_flags(cfg: Any, where: Any, release: Release | None = None, *,
                  error: type[Exception] = InputError, forbid_pair: bool = True) -> dict:
    """The draft math flags as SGLang ``release`` reads them from ``cfg`` (dict or HF config); ``forbid_pair`` refuses
    ``norm_before_fc`` with ``fc_norm`` (speculators forbids the pair; SGLang builds both)."""
    rel = default_release() if release is None else release
    flags = {}
    for name in FLAG_FIELDS:
        rule = rel.draft_flags[name]
        values = [(key, path_get(cfg, key)) for key in rule.keys]
        for key, value in values:
            if value is not None and type(value) is not bool:
                raise error(where, key, f"expected true or false or null, got {brief(value)}",
                            f'write "{key.rsplit(".", 1)[-1]}": true or false')
        present = [v for _, v in values if v is not None]
        flags[name] = any(present) if rule.combine == "any" else bool(present[0]) if present else False
    if forbid_pair and flags["norm_before_fc"] and flags["fc_norm"]:
        raise error(where, "norm_before_fc", "norm_before_fc and fc_norm are both true (speculators forbids the pair)",
                    "keep only the flag the draft was trained with")
    return flags


@dataclass(frozen=True)
class Yarn:
    """What SGLang's ``get_rope`` hands ``YaRNScalingRotaryEmbedding`` (factory.py, yarn.py; their defaults)."""

    factor: float
    original_max_position_embeddings: int
    beta_fast: float = 32
    beta_slow: float = 1
    extrapolation_factor: float = 1
    attn_factor: float = 1
    mscale: float | None = None
    mscale_all_dim: float | None = None
    truncate: bool = True

    @classmethod
    def from_rope(cls, rope: dict, top_level_original: int | None, where: Any, field: str) -> "Yarn":
        """From a draft's yarn rope parameters (under ``field``); a top-level ``original_max_position_embeddings`` wins,
        as in llama.py's decoder layer."""
        original = top_level_original or rope.get("original_max_position_embeddings")
        for name, value in (("factor", rope.get("factor")), ("original_max_position_embeddings", original)):
            if value is None:
                raise InputError(where, f"{field}.{name}", "is missing for YaRN RoPE (SGLang would guess it and log "
                                 "a warning)", "copy it from the rope parameters the draft was trained with")
        optional = {k: rope[k] for k in ("beta_fast", "beta_slow", "extrapolation_factor", "attn_factor", "mscale",
                                         "mscale_all_dim", "truncate") if rope.get(k) is not None}
        return cls(factor=rope["factor"], original_max_position_embeddings=original, **optional)

    def to_dict(self) -> dict:
        return {k: v for k, v in vars(self).items() if v is not None}


@dataclass(frozen=True)
class DraftConfig:
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
    yarn: Yarn | None = None  # YaRN RoPE scaling; None: default RoPE
    fc_bias: bool = False  # config "bias"
    attention_bias: bool = False
    norm_before_fc: bool = False
    fc_norm: bool = False
    tie_word_embeddings: bool = False
    lm_head_from_target: bool = False
    norm_before_residual: bool = False  # ignored by stock SGLang; the plugin's draft loader serves it

    @classmethod
    def from_dict(cls, cfg: Any, where: Any = "config.json") -> "DraftConfig":
        """Resolve a draft ``config.json`` dict the way SGLang does (:data:`~.schemas.draft.SGLANG_DRAFT`, then what
        SGLang derives from it)."""
        c = records.read(SGLANG_DRAFT, cfg, file=where)
        archs = c["architectures"] or []
        if archs and archs[0] != SGLANG_ARCH:
            raise InputError(where, "architectures", f"is {archs[:4]}; this reader handles [{SGLANG_ARCH!r}] "
                             "drafts only", "convert the draft to SGLang's format")
        if c["model_type"] == "llama4_text":
            raise InputError(where, "model_type", "llama4_text drafts are not supported (only llama)",
                             "convert a llama/silu draft")
        rope_field = "rope_parameters" if c["rope_parameters"] is not None else "rope_scaling"
        rope = c[rope_field] or {}  # llama_eagle3.py / llama.py: rope_parameters when present, else rope_scaling
        kind = rope.get("rope_type") or rope.get("type") or "default"  # factory.py get_rope: rope_type, else type
        yarn = (Yarn.from_rope(rope, c["original_max_position_embeddings"], where, rope_field) if kind == "yarn"
                else None)
        hidden, heads, vocab = c["hidden_size"], c["num_attention_heads"], c["vocab_size"]
        flags = resolve_flags(cfg, where, forbid_pair=False)  # SGLang builds what the flags say, the pair included
        eagle = c["eagle_config"] or {}
        num_aux = c["num_aux_hidden_states"]
        if num_aux is None and is_fail_closed(eagle.get(IDS_KEY)):
            raise InputError(where, "num_aux_hidden_states", f"missing beside eagle_config.{IDS_KEY}, which is "
                             "sglang-eagle3-capture's fail-closed object (no count of the fc's inputs)",
                             "set num_aux_hidden_states to the number of layer ids in the draft's manifest")
        if num_aux is None:  # llama_eagle3.py: explicit attr > eagle_config layer_ids > default 3
            num_aux = len(eagle.get(IDS_KEY) or ()) or 3
        tie, dvs = bool(c["tie_word_embeddings"]), c["draft_vocab_size"]
        if tie and dvs not in (None, vocab):
            raise InputError(where, "draft_vocab_size", f"{dvs} differs from vocab_size {vocab} with tied "
                             "embeddings", "untie the embeddings or drop draft_vocab_size")
        kv = c["num_key_value_heads"] or heads
        if heads % kv:
            raise InputError(where, "num_key_value_heads", f"{kv} does not divide num_attention_heads {heads}",
                             "copy num_key_value_heads from the draft's training config")
        head_dim = c["head_dim"] or hidden // heads
        if not head_dim:
            raise InputError(where, "num_attention_heads", f"{heads} heads do not fit hidden_size {hidden} and "
                             "no head_dim is given", "set head_dim, or correct num_attention_heads")
        return cls(
            hidden_size=hidden, num_attention_heads=heads, num_key_value_heads=kv, head_dim=head_dim,
            intermediate_size=c["intermediate_size"], num_hidden_layers=c["num_hidden_layers"], vocab_size=vocab,
            draft_vocab_size=dvs if dvs is not None else vocab,
            target_hidden_size=c["target_hidden_size"] or hidden, num_aux_hidden_states=num_aux,
            rms_norm_eps=c["rms_norm_eps"], rope_theta=rope.get("rope_theta") or c["rope_theta"], yarn=yarn,
            fc_bias=bool(c["bias"]), attention_bias=bool(c["attention_bias"]),
            norm_before_fc=flags["norm_before_fc"], fc_norm=flags["fc_norm"],
            tie_word_embeddings=tie, lm_head_from_target=(not tie and dvs is None),
            norm_before_residual=flags["norm_before_residual"],
        )

    def to_sglang_config(self, **extra) -> dict:
        """A ``config.json`` dict that SGLang (and :meth:`from_dict`) reads back as this config."""
        dims = [f.name for f in fields(self)][:11]  # hidden_size .. rms_norm_eps, in the order written
        cfg = {"architectures": [SGLANG_ARCH], "model_type": "llama", "hidden_act": "silu",
               **{k: getattr(self, k) for k in dims}, "rope_parameters": self.rope_parameters, "bias": self.fc_bias,
               **{k: getattr(self, k) for k in ("attention_bias", "norm_before_fc", "fc_norm", "tie_word_embeddings")},
               "torch_dtype": "float32", "norm_before_residual": self.norm_before_residual}
        if self.lm_head_from_target:
            del cfg["draft_vocab_size"]
        return {**cfg, **extra}

    @property
    def rope_parameters(self) -> dict:
        """The ``rope_parameters`` SGLang (and :meth:`from_dict`) reads back as this config's RoPE."""
        yarn = {} if self.yarn is None else self.yarn.to_dict()
        return {"rope_type": "yarn" if yarn else "default", "rope_theta": self.rope_theta, **yarn}

    @property
    def fc_in_features(self) -> int:
        return self.num_aux_hidden_states * self.target_hidden_size

    @property
    def o_proj_bias(self) -> bool:
        """llama.py gives o_proj a bias for ``attention_bias`` or ``bias``; llama_eagle3.py's qkv never has one."""
        return self.attention_bias or self.fc_bias
