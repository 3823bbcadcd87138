"""The target model's HF config: where its decoder dimensions are (``text_config`` for wrappers the family table
lists, such as Kimi-K2.5), and which family serves it."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Mapping

from .errors import InputError, brief
from .families import family_of, text_config_architectures
from .layer_ids import is_int
from .userfiles import is_directory, read_json_object


def cfg_get(cfg: Any, key: str, default: Any = None) -> Any:
    return cfg.get(key, default) if isinstance(cfg, Mapping) else getattr(cfg, key, default)


def path_get(cfg: Any, dotted: str) -> Any:
    """The value at a dotted path (``"eagle_config.norm_before_fc"``) of a dict or HF config; None where a step is not
    an object."""
    node = cfg
    for part in dotted.split("."):
        if node is None or isinstance(node, (str, bytes, int, float, list, tuple)):
            return None
        node = cfg_get(node, part)
    return node


def architecture(target_hf_config: Any, where: str) -> str:
    archs = cfg_get(target_hf_config, "architectures") or []
    if not isinstance(archs, (list, tuple)) or not archs or not isinstance(archs[0], str):
        raise InputError(where, "architectures", f"expected a list naming the target class, got {brief(archs)}",
                         "point TARGET at the target model's own config.json")
    return archs[0]


def decoder_field_prefix(arch: str) -> str:
    return "text_config." if arch in text_config_architectures() else ""


def target_dims(target_hf_config: Any, where: str) -> tuple[str, int, int]:
    """``(architecture, num_hidden_layers, hidden_size)`` of a target HF config, the layer count from the first of the
    family's ``layer_count_keys`` the config has (LongCat-Flash's ``num_layers``)."""
    arch = architecture(target_hf_config, where)
    prefix = decoder_field_prefix(arch)
    text = cfg_get(target_hf_config, "text_config") if prefix else target_hf_config
    if text is None:
        raise InputError(where, "text_config", f"{arch} keeps its decoder config in text_config, which is missing",
                         "point TARGET at the full model config.json")
    family = family_of(arch)
    layers = family.layer_count_keys if family is not None else ("num_hidden_layers",)
    layer_key = next((k for k in layers if cfg_get(text, k) is not None), layers[0])
    for key in (layer_key, "hidden_size"):
        if not is_int(v := cfg_get(text, key)) or v < 1:
            raise InputError(where, prefix + key, f"expected a positive integer, got {brief(v)}",
                             "point TARGET at the target model's own config.json")
    return arch, cfg_get(text, layer_key), cfg_get(text, "hidden_size")


def deepstack_layer_count(target_hf_config: Any, family: Any) -> int | None:
    """How many decoder layers get deepstack features added to their output (the length of the list at
    ``family.deepstack``); 0 for a family without deepstack, None when the config lacks the list."""
    if family is None or family.deepstack is None:
        return 0
    value = path_get(target_hf_config, family.deepstack)
    return len(value) if isinstance(value, (list, tuple)) else None


def load_target_config(target: str | os.PathLike) -> tuple[dict, Path]:
    """``(config, file)`` of a target's HF config, from a model directory or a ``config.json`` path."""
    p = Path(target)
    fix = "pass --target as the target model directory or its config.json"
    path = p / "config.json" if is_directory(p, fix=fix) else p
    return read_json_object(path, fix=fix, missing="target config not found"), path


def architecture_family(architecture: str) -> str:
    """Compatibility unit of an architecture: its family's name, else the architecture itself."""
    family = family_of(architecture)
    return family.name if family is not None else architecture
