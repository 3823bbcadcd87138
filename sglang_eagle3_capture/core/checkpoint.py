"""Draft checkpoint files: which safetensors files a draft has, what each holds (headers parsed without torch, so a
truncated or corrupt file is named before anything is loaded), the tensors SGLang's ``LlamaForCausalLMEagle3``
(models/llama_eagle3.py) needs for a one-layer draft, and the checkpoint-to-module name map."""

from __future__ import annotations

import math
import os
import struct
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping

from . import records
from .draft_config import default_release, resolve_flags
from .errors import InputError, brief
from .schemas.checkpoint import DTYPE_BITS, HEADER, INDEX, REEXPORT, TENSOR
from .schemas.draft import TENSOR_DIMS
from .userfiles import list_directory, open_regular, os_problem, parse_json, path_kind, read_json_object, require_file

INDEX_FILENAME = "model.safetensors.index.json"
SINGLE_FILENAME = "model.safetensors"
_UNSUPPORTED = ("pytorch_model.bin", "pytorch_model.bin.index.json", "model.pt")
SINGLE_LAYER_PREFIX = "midlayer."  # the one-layer draft's checkpoint prefix every SGLang release loads
MAX_HEADER_BYTES = 100_000_000  # safetensors' own limit


def module_name(checkpoint_name: str) -> str:
    """The module name SGLang's draft ``load_weights`` maps a checkpoint tensor name to: ``model.`` dropped and the
    release's legacy names renamed (``model.midlayer.hidden_norm.weight`` -> ``layers.0.hidden_norm.weight``)."""
    name = checkpoint_name[len("model."):] if checkpoint_name.startswith("model.") else checkpoint_name
    for legacy, new in default_release().legacy_weight_names.items():
        if name.startswith(legacy):
            name = new + name[len(legacy):]
    return name


def sglang_checkpoint_name(name: str) -> str:
    """The checkpoint name ``convert`` writes for tensor ``name``: its module name, with layer 0 of the
    one-layer draft spelled ``midlayer.``, the name every SGLang release loads."""
    name = module_name(name)
    return SINGLE_LAYER_PREFIX + name[len("layers.0."):] if name.startswith("layers.0.") else name


def parameter_checkpoint_names(param: str) -> str:
    """The checkpoint tensor name(s) SGLang loads into parameter ``param``, for messages (``qkv_proj`` ->
    ``{q,k,v}_proj``)."""
    name = module_name(param).replace("fused_qkv_a_proj_with_mqa", "{q_a_proj,kv_a_proj_with_mqa}")
    return name.replace("qkv_proj", "{q,k,v}_proj").replace("gate_up_proj", "{gate,up}_proj")


@dataclass(frozen=True)
class TensorInfo:
    """One tensor in a safetensors file: where it is, its dtype string, shape and byte range in the data section."""

    file: Path
    dtype: str
    shape: tuple[int, ...]
    offsets: tuple[int, int] = (0, 0)


def _read(record: records.Record, doc: Any, path: Path, fix: str, prefix: str = "") -> dict:
    """``records.read`` saying ``fix`` (a header read for a sample or a dump says what to do there)."""
    try:
        return records.read(record, doc, file=path, prefix=prefix)
    except InputError as e:
        raise InputError(e.file, e.field, e.problem, fix) from None


def read_safetensors_header(path: str | Path, *, fix: str = REEXPORT) -> tuple[dict[str, TensorInfo], dict[str, str]]:
    """``({name: TensorInfo}, metadata)`` of one safetensors file, checked as safetensors checks it before loading
    (bounded strict header, offsets spanning each shape's bytes and tiling the data section); anything else raises
    ``InputError`` naming the file, the tensor or field and ``fix``. No tensor data is read."""
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
            problem, how = os_problem(e)
            raise InputError(p, "<file>", f"cannot read ({problem})", how) from None
    if not raw.lstrip().startswith(b"{"):
        raise InputError(p, "<header>", "not a safetensors header (no JSON object)", fix)
    header = _read(HEADER, parse_json(raw, where=p, fix=fix), p, fix)
    metadata = header.pop("__metadata__") or {}
    tensors: dict[str, TensorInfo] = {}
    data_len = size - 8 - n
    for name, entry in header.items():
        entry = _read(TENSOR, entry, p, fix, prefix=name)
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
    """The draft directory's ``model.safetensors.index.json`` (:data:`~.schemas.checkpoint.INDEX`): ``weight_map``
    a non-empty object of shard file names; ``metadata`` and any other key kept as written."""
    index = d / INDEX_FILENAME
    doc = records.read(INDEX, read_json_object(index, fix=REEXPORT), file=index)
    if not doc["weight_map"]:
        raise InputError(index, "weight_map", "lists no tensor", INDEX.fix_of("weight_map"))
    return doc


def _files_and_map(d: Path) -> tuple[list[Path], dict[str, str] | None]:
    """The safetensors files of draft directory ``d`` and, when sharded, the index's ``weight_map``: as SGLang's
    loader reads them, so a stray ``*.safetensors`` beside an unindexed ``model.safetensors`` is refused (SGLang
    would load it and silently override tensors)."""
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
    """True when something stands where a draft's weights go (an index or ``model.safetensors``; whatever it is,
    :func:`tensor_index` then reads it or says what is wrong with it)."""
    d = Path(draft_dir)
    return any(path_kind(d / n) != "missing" for n in (INDEX_FILENAME, SINGLE_FILENAME))


def weight_files(draft_dir: str | Path) -> list[Path]:
    """The safetensors files of a draft directory (single file or sharded with an index)."""
    return _files_and_map(Path(draft_dir))[0]


def tensor_index(draft_dir: str | Path) -> dict[str, TensorInfo]:
    """Every tensor of a draft directory, by name; a name stored twice, or missing from a listed shard, is an error."""
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
    """``{name: (shape, required)}`` of a one-layer ``LlamaForCausalLMEagle3`` draft in SGLang checkpoint naming, for
    the flattened draft ``config``; errors are :class:`InputError` naming ``where``."""
    dims = records.read(TENSOR_DIMS, config, file=where)
    h, heads, inter, vocab = (dims[k] for k in TENSOR_DIMS.names[:4])
    kv, hd = dims["num_key_value_heads"] or heads, dims["head_dim"] or h // heads
    dvocab = dims["draft_vocab_size"] or vocab
    if not hd:
        raise InputError(where, "num_attention_heads", f"{heads} heads do not fit hidden_size {h} and no head_dim "
                         "is given", "set head_dim, or correct num_attention_heads")
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
    if config.get("bias"):  # llama.py gives o_proj a bias for "bias" too: unloaded, SGLang would serve garbage there
        exp["fc.bias"] = ((h,), True)
        exp["midlayer.self_attn.o_proj.bias"] = ((h,), True)
    flags = resolve_flags(config, where, forbid_pair=False)  # the tensors SGLang's class builds for these flags
    if flags["norm_before_fc"]:
        exp["input_norm.weight"] = ((num_aux * t,), True)
    if flags["fc_norm"]:
        for i in range(num_aux):
            exp[f"fc_norm.{i}.weight"] = ((t,), True)
    return exp


def fc_input_width(index: Mapping[str, TensorInfo]) -> int:
    """The input width of ``index["fc.weight"]``, or :class:`InputError` when it is not 2-D."""
    fc = index["fc.weight"]
    if len(fc.shape) != 2:
        raise InputError(fc.file, "fc.weight", f"tensor of shape {brief(list(fc.shape))}, expected 2-D [hidden, "
                         "k x target hidden]", REEXPORT)
    return fc.shape[1]


def draft_fc_in_features(draft_dir: str | Path) -> int | None:
    """The input width of the draft's ``fc.weight``, or None when the directory holds no weights or no ``fc.weight``
    (weights that are there but unreadable raise, as :func:`tensor_index` does)."""
    if not weights_present(draft_dir):
        return None
    index = tensor_index(draft_dir)
    return fc_input_width(index) if "fc.weight" in index else None
