"""Draft checkpoint files: which safetensors files a draft has, what each holds, and tensor names.

Headers are parsed here without torch (8-byte little-endian header length, JSON header, data
offsets), so a truncated or corrupt file is reported with its name before anything is loaded.
Also the tensor set SGLang's ``LlamaForCausalLMEagle3`` (sglang/srt/models/llama_eagle3.py) needs for
a one-layer draft, as names and shapes (:func:`expected_eagle3_tensors`), and the mapping between
checkpoint names and module names (SGLang's legacy name map is a release fact).
"""

from __future__ import annotations

import json
import struct
from dataclasses import dataclass
from pathlib import Path
from typing import Mapping

from .. import releases
from ..errors import WeightsError
from .config import resolve_flags

INDEX_FILENAME = "model.safetensors.index.json"
SINGLE_FILENAME = "model.safetensors"
_UNSUPPORTED = ("pytorch_model.bin", "pytorch_model.bin.index.json", "model.pt")
SINGLE_LAYER_PREFIX = "midlayer."  # the one-layer draft's checkpoint prefix every SGLang release loads


def module_name(checkpoint_name: str) -> str:
    """The module (parameter) name SGLang's draft ``load_weights`` maps a checkpoint tensor name to: the
    optional ``model.`` prefix dropped and the release's legacy names renamed (``midlayer.`` -> ``layers.0.``).

    Example::

        >>> module_name("model.midlayer.hidden_norm.weight"), module_name("aux_norm_low.weight")
        ('layers.0.hidden_norm.weight', 'fc_norm.0.weight')
    """
    name = checkpoint_name[len("model."):] if checkpoint_name.startswith("model.") else checkpoint_name
    for legacy, new in releases.newest().legacy_weight_names.items():
        if name.startswith(legacy):
            name = new + name[len(legacy):]
    return name


def sglang_checkpoint_name(name: str) -> str:
    """The checkpoint name ``convert`` writes for tensor ``name``: its module name, with layer 0 of the
    one-layer draft spelled ``midlayer.``, the name every SGLang release loads."""
    name = module_name(name)
    return SINGLE_LAYER_PREFIX + name[len("layers.0."):] if name.startswith("layers.0.") else name


def parameter_checkpoint_names(param: str) -> str:
    """The checkpoint tensor name(s) SGLang loads into parameter ``param`` (both draft classes), for messages.

    Example::

        >>> parameter_checkpoint_names("model.layers.0.self_attn.qkv_proj.weight")
        'layers.0.self_attn.{q,k,v}_proj.weight'
    """
    name = module_name(param).replace("fused_qkv_a_proj_with_mqa", "{q_a_proj,kv_a_proj_with_mqa}")
    return name.replace("qkv_proj", "{q,k,v}_proj").replace("gate_up_proj", "{gate,up}_proj")


@dataclass(frozen=True)
class TensorInfo:
    """One tensor in a safetensors file: where it is, its dtype string and shape."""

    file: Path
    dtype: str
    shape: tuple[int, ...]


def read_safetensors_header(path: str | Path) -> tuple[dict[str, TensorInfo], dict[str, str]]:
    """``({name: TensorInfo}, metadata)`` of one safetensors file; truncated/corrupt files raise :class:`WeightsError`."""
    p = Path(path)
    fix = "re-export or re-download the checkpoint"
    try:
        size = p.stat().st_size
        with p.open("rb") as f:
            head = f.read(8)
            if len(head) < 8:
                raise WeightsError(f"{p}: field '<header>': file is {size} bytes, too short for a safetensors header; fix: {fix}")
            (n,) = struct.unpack("<Q", head)
            if n > size - 8:
                raise WeightsError(f"{p}: field '<header>': header claims {n} bytes but the file has {size - 8} after the "
                                   f"length field (truncated); fix: {fix}")
            header = json.loads(f.read(n).decode("utf-8"))
    except OSError as e:
        raise WeightsError(f"{p}: field '<file>': cannot read ({e}); fix: {fix}") from e
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise WeightsError(f"{p}: field '<header>': not a safetensors header ({e}); fix: {fix}") from e
    if not isinstance(header, dict):
        raise WeightsError(f"{p}: field '<header>': not a safetensors header; fix: {fix}")
    metadata = header.pop("__metadata__", None) or {}
    tensors: dict[str, TensorInfo] = {}
    data_len = size - 8 - n
    for name, entry in header.items():
        try:
            dtype, shape, (start, end) = entry["dtype"], tuple(entry["shape"]), entry["data_offsets"]
        except (KeyError, TypeError, ValueError) as e:
            raise WeightsError(f"{p}: tensor '{name}': malformed header entry ({e}); fix: {fix}") from e
        if end > data_len or start > end:
            raise WeightsError(f"{p}: tensor '{name}': data ends at byte {end} but the file holds {data_len} data bytes "
                               f"(truncated); fix: {fix}")
        tensors[name] = TensorInfo(p, dtype, shape)
    return tensors, metadata


def _files_and_map(d: Path) -> tuple[list[Path], dict[str, str] | None]:
    """The safetensors files of draft directory ``d`` and, when sharded, the index's ``weight_map``."""
    index = d / INDEX_FILENAME
    if index.is_file():
        try:
            weight_map = json.loads(index.read_text(encoding="utf-8"))["weight_map"]
            files = sorted(set(weight_map.values()))
        except (json.JSONDecodeError, UnicodeDecodeError, KeyError, TypeError, AttributeError) as e:
            raise WeightsError(f"{index}: field 'weight_map': unreadable ({e}); fix: re-export the checkpoint") from e
        return [d / f for f in files], weight_map
    if (d / SINGLE_FILENAME).is_file():
        return [d / SINGLE_FILENAME], None
    other = [n for n in _UNSUPPORTED if (d / n).exists()]
    if other:
        raise WeightsError(f"{d / other[0]}: field '<file>': only safetensors checkpoints are read; fix: re-save the draft "
                           "with safetensors (e.g. save_pretrained(..., safe_serialization=True))")
    raise WeightsError(f"{d}: field '{SINGLE_FILENAME}': no weights found; fix: point at the draft checkpoint directory")


def weight_files(draft_dir: str | Path) -> list[Path]:
    """The safetensors files of a draft directory (single file or sharded with an index)."""
    return _files_and_map(Path(draft_dir))[0]


def tensor_index(draft_dir: str | Path) -> dict[str, TensorInfo]:
    """Every tensor of a draft directory, by name; a name stored twice, or missing from a listed shard, is an error."""
    d = Path(draft_dir)
    files, weight_map = _files_and_map(d)
    out: dict[str, TensorInfo] = {}
    for f in files:
        if not f.is_file():
            raise WeightsError(f"{d / INDEX_FILENAME}: field 'weight_map': lists {f.name}, which does not exist; "
                               "fix: copy every shard of the checkpoint")
        tensors, _ = read_safetensors_header(f)
        for name, info in tensors.items():
            if name in out:
                raise WeightsError(f"{f}: tensor '{name}': also stored in {out[name].file.name}; fix: re-export the checkpoint")
            out[name] = info
    for name, fname in (weight_map or {}).items():
        if name not in out or out[name].file.name != fname:
            raise WeightsError(f"{d / INDEX_FILENAME}: tensor '{name}': listed in {fname} but not stored there; fix: re-export")
    return out


def expected_eagle3_tensors(config: Mapping, num_aux: int, target_hidden_size: int,
                            where: str = "config.json") -> dict[str, tuple[tuple[int, ...], bool]]:
    """``{name: (shape, required)}`` of a one-layer ``LlamaForCausalLMEagle3`` draft in SGLang checkpoint naming.

    ``config`` is the flattened SGLang draft config (``hidden_size``, heads, ``draft_vocab_size``, flags).
    """
    h, heads = config["hidden_size"], config["num_attention_heads"]
    kv = config.get("num_key_value_heads") or heads
    hd = config.get("head_dim") or h // heads
    inter, vocab = config["intermediate_size"], config["vocab_size"]
    dvocab = config.get("draft_vocab_size") or vocab
    t = target_hidden_size
    exp: dict[str, tuple[tuple[int, ...], bool]] = {
        "fc.weight": ((h, num_aux * t), True),
        "midlayer.self_attn.q_proj.weight": ((heads * hd, 2 * h), True),
        "midlayer.self_attn.k_proj.weight": ((kv * hd, 2 * h), True),
        "midlayer.self_attn.v_proj.weight": ((kv * hd, 2 * h), True),
        "midlayer.self_attn.o_proj.weight": ((h, heads * hd), True),
        "midlayer.mlp.gate_proj.weight": ((inter, h), True),
        "midlayer.mlp.up_proj.weight": ((inter, h), True),
        "midlayer.mlp.down_proj.weight": ((h, inter), True),
        "midlayer.input_layernorm.weight": ((h,), True),
        "midlayer.post_attention_layernorm.weight": ((h,), True),
        "midlayer.hidden_norm.weight": ((h,), True),
        "norm.weight": ((h,), True),
        "lm_head.weight": ((dvocab, h), True),
        "embed_tokens.weight": ((vocab, h), False),
        "d2t": ((dvocab,), dvocab != vocab),
        "t2d": ((vocab,), dvocab != vocab),
    }
    if config.get("bias"):
        exp["fc.bias"] = ((h,), True)
    flags = resolve_flags(config, where, forbid_pair=False)  # the tensors SGLang's class builds for these flags
    if flags["norm_before_fc"]:
        exp["input_norm.weight"] = ((num_aux * t,), True)
    if flags["fc_norm"]:
        for i in range(num_aux):
            exp[f"fc_norm.{i}.weight"] = ((t,), True)
    return exp
