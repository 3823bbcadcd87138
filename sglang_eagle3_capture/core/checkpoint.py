"""Draft checkpoint files: which safetensors files a draft has, their headers (parsed without torch), the tensors
SGLang's ``LlamaForCausalLMEagle3`` (models/llama_eagle3.py) needs for a one-layer draft, and their names."""

from __future__ import annotations

import math
import os
import struct
from dataclasses import dataclass
from pathlib import Path
from typing import Mapping

from . import records
from .draft_config import default_release, resolve_flags
from .errors import InputError, brief
from .schemas.checkpoint import DTYPE_BITS, HEADER, INDEX, REEXPORT, TENSOR
from .schemas.draft import TENSOR_DIMS
from .userfiles import list_directory, open_regular, os_error, parse_json, path_kind, read_json_object, require_file

INDEX_FILENAME = "model.safetensors.index.json"
SINGLE_FILENAME = "model.safetensors"
_UNSUPPORTED = ("pytorch_model.bin", "pytorch_model.bin.index.json", "model.pt")
SINGLE_LAYER_PREFIX = "midlayer."  # the one-layer draft's checkpoint prefix every SGLang release loads
MAX_HEADER_BYTES = 100_000_000  # safetensors' own limit


def module_name(checkpoint_name: str) -> str:
    """The module name SGLang's ``load_weights`` maps a checkpoint name to (``model.`` dropped, legacy renamed)."""
    name = checkpoint_name.removeprefix("model.")
    for legacy, new in default_release().legacy_weight_names.items():
        if name.startswith(legacy):
            name = new + name[len(legacy):]
    return name


def sglang_checkpoint_name(name: str) -> str:
    """The checkpoint name ``convert`` writes: the module name, layer 0 as ``midlayer.`` (every release loads it)."""
    name = module_name(name)
    return SINGLE_LAYER_PREFIX + name[len("layers.0."):] if name.startswith("layers.0.") else name


def parameter_checkpoint_names(param: str) -> str:
    """The checkpoint tensor name(s) SGLang loads into parameter ``param`` (``qkv_proj`` -> ``{q,k,v}_proj``)."""
    name = module_name(param).replace("fused_qkv_a_proj_with_mqa", "{q_a_proj,kv_a_proj_with_mqa}")
    return name.replace("qkv_proj", "{q,k,v}_proj").replace("gate_up_proj", "{gate,up}_proj")


@dataclass(frozen=True)
class TensorInfo:
    file: Path
    dtype: str
    shape: tuple[int, ...]
    offsets: tuple[int, int] = (0, 0)


def read_safetensors_header(path: str | Path, *, fix: str = REEXPORT) -> tuple[dict[str, TensorInfo], dict[str, str]]:
    """``({name: TensorInfo}, metadata)`` of one safetensors file, checked as safetensors checks it before loading
    (offsets span each shape's bytes and tile the data section); no tensor data is read."""
    p = Path(path)
    with open_regular(p, fix=fix, missing="missing") as f:
        try:
            size = os.fstat(f.fileno()).st_size
            head = f.read(8)
            if len(head) < 8:
                raise InputError(p, "<header>", f"file is {size} bytes, too short for a safetensors header", fix)
            (n,) = struct.unpack("<Q", head)
            if n > size - 8:
                raise InputError(p, "<header>", f"header claims {n} bytes but the file has {size - 8} after the "
                                 "length field (truncated)", fix)
            if n > MAX_HEADER_BYTES:
                raise InputError(p, "<header>", f"header of {n} bytes, more than safetensors' limit of "
                                 f"{MAX_HEADER_BYTES}", fix)
            raw = f.read(n)
        except OSError as e:
            raise os_error(p, "<file>", "cannot read", e) from None
    if not raw.lstrip().startswith(b"{"):
        raise InputError(p, "<header>", "not a safetensors header (no JSON object)", fix)
    header = records.read(HEADER, parse_json(raw, where=p, fix=fix), file=p, fix=fix)
    metadata = header.pop("__metadata__") or {}
    tensors: dict[str, TensorInfo] = {}
    data_len = size - 8 - n
    for name, entry in header.items():
        entry = records.read(TENSOR, entry, file=p, prefix=name, fix=fix)
        dtype, shape, offsets = entry["dtype"], entry["shape"], entry["data_offsets"]
        bits = math.prod(shape) * DTYPE_BITS[dtype]
        if offsets[0] > offsets[1] or bits % 8 or offsets[1] - offsets[0] != bits // 8:
            raise InputError(p, f"{name}.data_offsets", f"{brief(offsets)} spans {offsets[1] - offsets[0]} bytes, "
                             f"but shape {shape} of {dtype} needs {bits / 8:g}", fix)
        if offsets[1] > data_len:
            raise InputError(p, f"{name}.data_offsets", f"data ends at byte {offsets[1]} but the file holds "
                             f"{data_len} data bytes (truncated)", fix)
        tensors[name] = TensorInfo(p, dtype, tuple(shape), (offsets[0], offsets[1]))
    end = 0
    for name, info in sorted(tensors.items(), key=lambda kv: kv[1].offsets):
        if info.offsets[0] != end:
            raise InputError(p, f"{name}.data_offsets", f"starts at byte {info.offsets[0]}, but the previous tensor "
                             f"ends at {end} (tensors must tile the data section, as safetensors requires)", fix)
        end = info.offsets[1]
    if end != data_len:
        raise InputError(p, "<data>", f"the tensors cover {end} of its {data_len} data bytes", fix)
    return tensors, metadata


def read_index(d: Path) -> dict:
    index = d / INDEX_FILENAME
    doc = records.read(INDEX, read_json_object(index, fix=REEXPORT), file=index)
    if not doc["weight_map"]:
        raise InputError(index, "weight_map", "lists no tensor", INDEX.fix_of("weight_map"))
    return doc


def _files_and_map(d: Path) -> tuple[list[Path], dict[str, str] | None]:
    """The safetensors files of ``d`` and, when sharded, the index's ``weight_map``, as SGLang's loader reads them."""
    fix = "re-export the checkpoint"
    if path_kind(d / INDEX_FILENAME, fix=fix) != "missing":
        weight_map = read_index(d)["weight_map"]
        return [d / f for f in sorted(set(weight_map.values()))], weight_map
    single = d / SINGLE_FILENAME
    kind = path_kind(single, fix=fix)
    if kind == "file":
        stray = [n for n in list_directory(d, fix="point at the draft checkpoint directory")
                 if n.endswith(".safetensors") and n != SINGLE_FILENAME and not n.startswith(".")]
        if stray:
            raise InputError(d / stray[0], "<file>", f"a safetensors file besides {SINGLE_FILENAME} and no "
                             f"{INDEX_FILENAME}: SGLang's loader reads every *.safetensors then, so its tensors "
                             f"would silently override {SINGLE_FILENAME}'s (all: {brief(stray)})",
                             "remove it, or write an index listing the shards")
        return [single], None
    if kind != "missing":
        require_file(single, fix=f"replace it with the checkpoint file; {fix}")
    other = [n for n in _UNSUPPORTED if path_kind(d / n) != "missing"]
    if other:
        raise InputError(d / other[0], "<file>", "only safetensors checkpoints are read",
                         "re-save the draft with safetensors (e.g. save_pretrained(..., safe_serialization=True))")
    raise InputError(d, SINGLE_FILENAME, "no weights found", "point at the draft checkpoint directory")


def weights_present(draft_dir: str | Path) -> bool:
    """True when something stands where a draft's weights go (:func:`tensor_index` then reads it or refuses it)."""
    return any(path_kind(Path(draft_dir) / n) != "missing" for n in (INDEX_FILENAME, SINGLE_FILENAME))


def weight_files(draft_dir: str | Path) -> list[Path]:
    return _files_and_map(Path(draft_dir))[0]


def tensor_index(draft_dir: str | Path) -> dict[str, TensorInfo]:
    """Every tensor of a draft directory, by name; one stored twice or missing from its listed shard is refused."""
    d = Path(draft_dir)
    files, weight_map = _files_and_map(d)
    out: dict[str, TensorInfo] = {}
    for f in files:
        if path_kind(f) == "missing":
            raise InputError(d / INDEX_FILENAME, "weight_map", f"lists {f.name}, which does not exist",
                             "copy every shard of the checkpoint")
        tensors, _ = read_safetensors_header(f)
        for name, info in tensors.items():
            if name in out:
                raise InputError(f, name, f"tensor also stored in {out[name].file.name}", REEXPORT)
            out[name] = info
    for name, fname in (weight_map or {}).items():
        if name not in out or out[name].file.name != fname:
            raise InputError(d / INDEX_FILENAME, f"weight_map.{name}", f"tensor listed in {fname} but not stored "
                             "there", REEXPORT)
    return out


def expected_eagle3_tensors(config: Mapping, num_aux: int, target_hidden_size: int,
                            where: str = "config.json") -> dict[str, tuple[tuple[int, ...], bool]]:
    """``{name: (shape, required)}`` of a one-layer ``LlamaForCausalLMEagle3`` draft for the flattened ``config``."""
    dims = records.read(TENSOR_DIMS, config, file=where)
    h, heads, inter, vocab = (dims[k] for k in TENSOR_DIMS.names[:4])
    kv, hd = dims["num_key_value_heads"] or heads, dims["head_dim"] or h // heads
    dvocab = dims["draft_vocab_size"] or vocab
    if not hd:
        raise InputError(where, "num_attention_heads", f"{heads} heads do not fit hidden_size {h} and no head_dim "
                         "is given", "set head_dim, or correct num_attention_heads")
    t, attn, mlp = target_hidden_size, "midlayer.self_attn.", "midlayer.mlp."
    shapes = {"fc.weight": (h, num_aux * t), f"{attn}q_proj.weight": (heads * hd, 2 * h),
              f"{attn}k_proj.weight": (kv * hd, 2 * h), f"{attn}v_proj.weight": (kv * hd, 2 * h),
              f"{attn}o_proj.weight": (h, heads * hd), f"{mlp}gate_proj.weight": (inter, h),
              f"{mlp}up_proj.weight": (inter, h), f"{mlp}down_proj.weight": (h, inter),
              "midlayer.input_layernorm.weight": (h,), "midlayer.post_attention_layernorm.weight": (h,),
              "midlayer.hidden_norm.weight": (h,), "norm.weight": (h,), "lm_head.weight": (dvocab, h)}
    exp = {name: (shape, True) for name, shape in shapes.items()}
    exp.update({"embed_tokens.weight": ((vocab, h), False), "d2t": ((dvocab,), dvocab != vocab),
                "t2d": ((vocab,), dvocab != vocab)})
    if config.get("bias"):  # llama.py gives o_proj a bias for "bias" too: unloaded, SGLang would serve garbage there
        exp.update({"fc.bias": ((h,), True), f"{attn}o_proj.bias": ((h,), True)})
    flags = resolve_flags(config, where, forbid_pair=False)  # the tensors SGLang's class builds for these flags
    if flags["norm_before_fc"]:
        exp["input_norm.weight"] = ((num_aux * t,), True)
    if flags["fc_norm"]:
        exp.update({f"fc_norm.{i}.weight": ((t,), True) for i in range(num_aux)})
    return exp


def fc_input_width(index: Mapping[str, TensorInfo]) -> int:
    fc = index["fc.weight"]
    if len(fc.shape) != 2:
        raise InputError(fc.file, "fc.weight", f"tensor of shape {brief(list(fc.shape))}, expected 2-D [hidden, "
                         "k x target hidden]", REEXPORT)
    return fc.shape[1]


def draft_fc_in_features(draft_dir: str | Path) -> int | None:
    """The input width of the draft's ``fc.weight``; None without weights or without ``fc.weight``."""
    if not weights_present(draft_dir):
        return None
    index = tensor_index(draft_dir)
    return fc_input_width(index) if "fc.weight" in index else None
