"""Draft checkpoint files: which safetensors files a draft has, what each holds, and tensor names.

Headers are parsed here without torch (8-byte little-endian header length, JSON header, data
offsets), so a truncated or corrupt file is reported with its name before anything is loaded.
Also the tensor set SGLang's ``LlamaForCausalLMEagle3`` (sglang/srt/models/llama_eagle3.py) needs for
a one-layer draft, as names and shapes (:func:`expected_eagle3_tensors`), and the mapping between
checkpoint names and module names (SGLang's legacy name map is a release fact).
"""

from __future__ import annotations

import math
import os
import struct
from dataclasses import dataclass
from pathlib import Path
from typing import Mapping

from ..errors import ConvertError, InputError, WeightsError
from ..userfiles import (
    brief,
    list_directory,
    open_regular,
    os_problem,
    parse_json,
    path_kind,
    read_json_object,
    require_file,
    shown,
)
from .config import check_dim, default_release, resolve_flags

INDEX_FILENAME = "model.safetensors.index.json"
SINGLE_FILENAME = "model.safetensors"
_UNSUPPORTED = ("pytorch_model.bin", "pytorch_model.bin.index.json", "model.pt")
SINGLE_LAYER_PREFIX = "midlayer."  # the one-layer draft's checkpoint prefix every SGLang release loads


def module_name(checkpoint_name: str) -> str:
    """The module (parameter) name SGLang's draft ``load_weights`` maps a checkpoint tensor name to: the
    optional ``model.`` prefix dropped and the legacy names of the release (:func:`.config.default_release`) renamed
    (``midlayer.`` -> ``layers.0.``).

    Example::

        >>> module_name("model.midlayer.hidden_norm.weight"), module_name("aux_norm_low.weight")
        ('layers.0.hidden_norm.weight', 'fc_norm.0.weight')
    """
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
    """The checkpoint tensor name(s) SGLang loads into parameter ``param`` (both draft classes), for messages.

    Example::

        >>> parameter_checkpoint_names("model.layers.0.self_attn.qkv_proj.weight")
        'layers.0.self_attn.{q,k,v}_proj.weight'
    """
    name = module_name(param).replace("fused_qkv_a_proj_with_mqa", "{q_a_proj,kv_a_proj_with_mqa}")
    return name.replace("qkv_proj", "{q,k,v}_proj").replace("gate_up_proj", "{gate,up}_proj")


@dataclass(frozen=True)
class TensorInfo:
    """One tensor in a safetensors file: where it is, its dtype string, shape and byte range in the data section."""

    file: Path
    dtype: str
    shape: tuple[int, ...]
    offsets: tuple[int, int] = (0, 0)


# safetensors 0.8's dtypes and their sizes in bits (sub-byte types pack; a tensor's bytes must come out whole).
DTYPE_BITS = {"BOOL": 8, "U8": 8, "I8": 8, "F8_E5M2": 8, "F8_E4M3": 8, "F8_E8M0": 8, "F4": 4, "F6_E2M3": 6,
              "F6_E3M2": 6, "I16": 16, "U16": 16, "F16": 16, "BF16": 16, "I32": 32, "U32": 32, "F32": 32, "C64": 64,
              "F64": 64, "I64": 64, "U64": 64}
MAX_HEADER_BYTES = 100_000_000  # safetensors' own limit
MAX_DIMS = 16
_FIX = "re-export or re-download the checkpoint"


def _is_uint(v) -> bool:
    return isinstance(v, int) and not isinstance(v, bool) and v >= 0


def read_safetensors_header(path: str | Path, *, error: type[InputError] = WeightsError,
                            fix: str = _FIX) -> tuple[dict[str, TensorInfo], dict[str, str]]:
    """``({name: TensorInfo}, metadata)`` of one safetensors file, checked the way safetensors checks it before it
    loads anything: a regular file (never a fifo or a device), a header of at most :data:`MAX_HEADER_BYTES` holding
    a strict JSON object (no duplicate names), every entry a known dtype, a shape of non-negative integers and
    offsets of exactly that many bytes, the entries tiling the data section, ``__metadata__`` strings only. Anything
    else raises ``error`` (:class:`WeightsError` by default) naming the file, the tensor or field and the fix. Time
    and memory are linear in the header's size; no tensor data is read."""
    p = Path(path)
    with open_regular(p, error=error, fix=fix, missing="missing") as f:
        try:
            size = os.fstat(f.fileno()).st_size
            head = f.read(8)
            if len(head) < 8:
                raise error(f"{shown(p)}: field '<header>': file is {size} bytes, too short for a safetensors header; "
                            f"fix: {fix}")
            (n,) = struct.unpack("<Q", head)
            if n > size - 8:
                raise error(f"{shown(p)}: field '<header>': header claims {n} bytes but the file has {size - 8} after "
                            f"the length field (truncated); fix: {fix}")
            if n > MAX_HEADER_BYTES:
                raise error(f"{shown(p)}: field '<header>': header of {n} bytes, more than safetensors' limit of "
                            f"{MAX_HEADER_BYTES}; fix: {fix}")
            raw = f.read(n)
        except OSError as e:
            problem, how = os_problem(e)
            raise error(f"{shown(p)}: field '<file>': cannot read ({problem}); fix: {how}") from None
    if not raw.lstrip().startswith(b"{"):
        raise error(f"{shown(p)}: field '<header>': not a safetensors header (no JSON object); fix: {fix}")
    header = parse_json(raw, where=p, error=error, fix=fix)
    if not isinstance(header, dict):
        raise error(f"{shown(p)}: field '<header>': not a safetensors header; fix: {fix}")
    metadata = header.pop("__metadata__", None)
    if metadata is None:
        metadata = {}
    if not isinstance(metadata, dict) or not all(isinstance(v, str) for v in metadata.values()):
        raise error(f"{shown(p)}: field '__metadata__': expected an object of strings, got {brief(metadata)}; "
                    f"fix: {fix}")
    tensors: dict[str, TensorInfo] = {}
    data_len = size - 8 - n
    for name, entry in header.items():
        where = f"{shown(p)}: tensor '{shown(name[:200])}'"
        if not isinstance(entry, dict):
            raise error(f"{where}: expected an object with dtype, shape and data_offsets, got {brief(entry)}; "
                        f"fix: {fix}")
        dtype, shape, offsets = entry.get("dtype"), entry.get("shape"), entry.get("data_offsets")
        if not isinstance(dtype, str) or dtype not in DTYPE_BITS:
            raise error(f"{where}: field 'dtype': unknown dtype {brief(dtype, 40)}; fix: {fix}")
        if not isinstance(shape, list) or len(shape) > MAX_DIMS or not all(_is_uint(d) for d in shape):
            raise error(f"{where}: field 'shape': expected a list of non-negative integers, got {brief(shape)}; "
                        f"fix: {fix}")
        if not isinstance(offsets, list) or len(offsets) != 2 or not all(_is_uint(o) for o in offsets) \
                or offsets[0] > offsets[1]:
            raise error(f"{where}: field 'data_offsets': expected [start, end] with 0 <= start <= end, got "
                        f"{brief(offsets)}; fix: {fix}")
        numel = math.prod(shape)
        bits = numel * DTYPE_BITS[dtype]
        if bits % 8 or offsets[1] - offsets[0] != bits // 8:
            raise error(f"{where}: field 'data_offsets': {brief(offsets)} spans {offsets[1] - offsets[0]} bytes, but "
                        f"shape {shape} of {dtype} needs {bits / 8:g}; fix: {fix}")
        if offsets[1] > data_len:
            raise error(f"{where}: data ends at byte {offsets[1]} but the file holds {data_len} data bytes "
                        f"(truncated); fix: {fix}")
        tensors[name] = TensorInfo(p, dtype, tuple(shape), (offsets[0], offsets[1]))
    end = 0
    for name, info in sorted(tensors.items(), key=lambda kv: kv[1].offsets):
        if info.offsets[0] != end:
            raise error(f"{shown(p)}: tensor '{shown(name[:200])}': field 'data_offsets': starts at byte "
                        f"{info.offsets[0]}, but the previous tensor ends at {end} (tensors must tile the data "
                        f"section, as safetensors requires); fix: {fix}")
        end = info.offsets[1]
    if end != data_len:
        raise error(f"{shown(p)}: field '<data>': the tensors cover {end} of its {data_len} data bytes; fix: {fix}")
    return tensors, metadata


def _shard_name(index: Path, name: str, fname) -> str:
    """A shard named in an index's ``weight_map``: a plain file name next to the index, never a path that leaves
    the checkpoint directory (absolute, ``..``) or enters a subdirectory (two shards could then share a name)."""
    fld = f"weight_map.{shown(name[:200])}"
    if not isinstance(fname, str) or not fname:
        raise WeightsError(f"{shown(index)}: field '{fld}': expected a shard file name, got {brief(fname)}; fix: "
                           "re-export the checkpoint")
    if "/" in fname or "\\" in fname or fname in (".", "..") or "\0" in fname:
        raise WeightsError(f"{shown(index)}: field '{fld}': {brief(fname, 80)} is not a file name in the checkpoint "
                           "directory (a path outside it or in a subdirectory); fix: keep every shard next to the "
                           "index and list it by its file name")
    return fname


def _files_and_map(d: Path) -> tuple[list[Path], dict[str, str] | None]:
    """The safetensors files of draft directory ``d`` and, when sharded, the index's ``weight_map``.

    As SGLang's loader: with an index, exactly the shards it lists (other ``*.safetensors`` are not loaded); without
    one, ``model.safetensors`` and nothing else (SGLang would load every ``*.safetensors`` in the directory, so a
    stray one is refused: it would silently override tensors)."""
    fix = "re-export the checkpoint"
    index = d / INDEX_FILENAME
    if path_kind(index, error=WeightsError, fix=fix) != "missing":
        doc = read_json_object(index, fix=fix, error=WeightsError)
        weight_map = doc.get("weight_map")
        if not isinstance(weight_map, dict) or not weight_map:
            raise WeightsError(f"{shown(index)}: field 'weight_map': expected an object mapping tensor names to shard "
                               f"files, got {brief(weight_map)}; fix: {fix}")
        files = sorted({_shard_name(index, name, fname) for name, fname in weight_map.items()})
        return [d / f for f in files], weight_map
    single = d / SINGLE_FILENAME
    kind = path_kind(single, error=WeightsError, fix=fix)
    if kind == "file":
        stray = [n for n in list_directory(d, error=WeightsError, fix="point at the draft checkpoint directory")
                 if n.endswith(".safetensors") and n != SINGLE_FILENAME and not n.startswith(".")]
        if stray:
            raise WeightsError(f"{shown(d / stray[0])}: field '<file>': a safetensors file besides {SINGLE_FILENAME} "
                               f"and no {INDEX_FILENAME}: SGLang's loader reads every *.safetensors then, so its "
                               f"tensors would silently override {SINGLE_FILENAME}'s (all: {brief(stray)}); fix: "
                               "remove it, or write an index listing the shards")
        return [single], None
    if kind != "missing":
        require_file(single, error=WeightsError, fix=f"replace it with the checkpoint file; {fix}")
    other = [n for n in _UNSUPPORTED if path_kind(d / n, error=WeightsError) != "missing"]
    if other:
        raise WeightsError(f"{shown(d / other[0])}: field '<file>': only safetensors checkpoints are read; fix: "
                           "re-save the draft with safetensors (e.g. save_pretrained(..., safe_serialization=True))")
    raise WeightsError(f"{shown(d)}: field '{SINGLE_FILENAME}': no weights found; fix: point at the draft checkpoint "
                       "directory")


def weights_present(draft_dir: str | Path) -> bool:
    """True when something stands where a draft's weights go (an index or ``model.safetensors``; whatever it is,
    :func:`tensor_index` then reads it or says what is wrong with it)."""
    d = Path(draft_dir)
    return any(path_kind(d / n, error=WeightsError) != "missing" for n in (INDEX_FILENAME, SINGLE_FILENAME))


def weight_files(draft_dir: str | Path) -> list[Path]:
    """The safetensors files of a draft directory (single file or sharded with an index)."""
    return _files_and_map(Path(draft_dir))[0]


def tensor_index(draft_dir: str | Path) -> dict[str, TensorInfo]:
    """Every tensor of a draft directory, by name; a name stored twice, or missing from a listed shard, is an error."""
    d = Path(draft_dir)
    files, weight_map = _files_and_map(d)
    out: dict[str, TensorInfo] = {}
    for f in files:
        if path_kind(f, error=WeightsError) == "missing":
            raise WeightsError(f"{shown(d / INDEX_FILENAME)}: field 'weight_map': lists {shown(f.name)}, which does "
                               "not exist; fix: copy every shard of the checkpoint")
        tensors, _ = read_safetensors_header(f)
        for name, info in tensors.items():
            if name in out:
                raise WeightsError(f"{shown(f)}: tensor '{shown(name[:200])}': also stored in "
                                   f"{shown(out[name].file.name)}; fix: re-export the checkpoint")
            out[name] = info
    for name, fname in (weight_map or {}).items():
        if name not in out or out[name].file.name != fname:
            raise WeightsError(f"{shown(d / INDEX_FILENAME)}: tensor '{shown(name[:200])}': listed in {shown(fname)} "
                               "but not stored there; fix: re-export")
    return out


_DIMS = ("hidden_size", "num_attention_heads", "intermediate_size", "vocab_size")
_OPTIONAL_DIMS = ("num_key_value_heads", "head_dim", "draft_vocab_size")


def config_dim(config: Mapping, key: str, where: str, *, required: bool = True,
               error: type[InputError] = ConvertError) -> int | None:
    """``config[key]`` as a positive integer (at most :data:`.config.MAX_DIM`), or ``error`` naming ``where`` and
    the field; ``None`` for an absent (or null) optional field."""
    v = config.get(key)
    if v is None and not required:
        return None
    if v is None:
        raise error(f"{shown(where)}: field '{key}': missing; fix: an EAGLE-3 draft config needs it")
    return check_dim(v, key, where, error=error)


def expected_eagle3_tensors(config: Mapping, num_aux: int, target_hidden_size: int,
                            where: str = "config.json") -> dict[str, tuple[tuple[int, ...], bool]]:
    """``{name: (shape, required)}`` of a one-layer ``LlamaForCausalLMEagle3`` draft in SGLang checkpoint naming.

    ``config`` is the flattened SGLang draft config (``hidden_size``, heads, ``draft_vocab_size``, flags).
    """
    h, heads, inter, vocab = (config_dim(config, k, where) for k in _DIMS)
    kv, hd, dvocab = (config_dim(config, k, where, required=False) for k in _OPTIONAL_DIMS)
    kv, hd, dvocab = kv or heads, hd or h // heads, dvocab or vocab
    if not hd:
        raise ConvertError(f"{shown(where)}: field 'num_attention_heads': {heads} heads do not fit hidden_size {h} and "
                           "no head_dim is given; fix: correct the config")
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


def fc_input_width(index: Mapping[str, TensorInfo]) -> int:
    """The input width of ``index["fc.weight"]`` (``[hidden, k x target hidden]``), or :class:`WeightsError` naming
    its file and the fix when the header does not give it a 2-D shape (``shape: []`` or a 1-D tensor is no fc)."""
    fc = index["fc.weight"]
    if len(fc.shape) != 2:
        raise WeightsError(f"{shown(fc.file)}: tensor 'fc.weight': shape {brief(list(fc.shape))}, expected 2-D "
                           f"[hidden, k x target hidden]; fix: {_FIX}")
    return fc.shape[1]
