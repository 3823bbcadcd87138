"""Target families: SGLang model classes that share one capture loop, a module each (``FAMILY``) listed in
:data:`_MODULES`. Their citations are SGLang 0.5.23's lines unless a release is named; docs/families.md holds the
prose.
"""

from __future__ import annotations

import importlib

from .schema import LIST, PACKED, Family

__all__ = ["LIST", "PACKED", "Family", "all_families", "family_of", "text_config_architectures"]

_MODULES = (
    "deepseek_v2",
    "llama",
    "qwen2",
    "qwen3",
    "qwen_moe",
    "gpt_oss",
    "glm4_moe",
    "minimax_m2",
    "glm4_moe_lite",
    "apertus",
    "gemma4",
    "llama4",
    "exaone_moe",
    "minimax_m3",
    "bailing_moe",
    "longcat_flash",
    "qwen3_5",
    "qwen3_next",
    "qwen3_vl",
    "gemma3",
)
_FAMILIES: tuple[Family, ...] = tuple(importlib.import_module(f".{m}", __name__).FAMILY for m in _MODULES)


def all_families() -> tuple[Family, ...]:
    return _FAMILIES


def family_of(architecture: str | None) -> Family | None:
    """The family whose classes serve ``architecture``, or None when no entry covers it."""
    return next((f for f in _FAMILIES if architecture in f.architectures), None)


def text_config_architectures() -> frozenset[str]:
    """Architectures whose decoder dimensions live in ``text_config``."""
    return frozenset(a for f in _FAMILIES for a in f.text_config)
