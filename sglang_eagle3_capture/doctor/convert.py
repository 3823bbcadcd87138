"""``convert``: a speculators- or SpecForge-format EAGLE-3 draft becomes an SGLang draft directory, written to a
temporary sibling and renamed (a failure leaves nothing); stock-safe ids or the fail-closed object in its config.
docs/formats-and-convert.md describes the output."""

from __future__ import annotations

import contextlib
import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping, Sequence

from ..core import checkpoint as ckpt
from ..core import manifest as mf
from ..core.config_keys import CONVERTED_MARKER_KEY, IDS_KEY
from ..core.errors import InputError, brief
from ..core.families import family_of
from ..core.manifest import MANIFEST_FILENAME, Manifest, write_manifest  # a module global: tests replace it
from ..core.target_config import load_target_config, target_dims
from ..core.userfiles import atomic_directory, finish_file, list_directory, os_problem, path_kind, write_file_atomic
from .formats import CONVENTION_LAYER_ID, SGLANG_ARCH, SGLangEagleConfigFormat, detect_format, load_draft_config
from .readings import fail_closed_eagle_config_ids, vllm_fail_closed_ids, with_stock_ids


@dataclass(frozen=True)
class ConvertReport:
    src: Path
    dst: Path
    source_format: str
    manifest: Manifest
    renamed: tuple[tuple[str, str], ...]
    dropped: tuple[str, ...]
    not_copied: tuple[str, ...]
    messages: tuple[str, ...]

    def lines(self) -> list[str]:
        out = [f"converted {self.source_format} draft {self.src} -> {self.dst}",
               f"layer ids {list(self.manifest.layer_ids)} (provenance: {self.manifest.provenance.get('source')})"]
        prefixes = ", ".join(sorted({a.split(".")[0] for a, _ in self.renamed}))
        out += [f"renamed {len(self.renamed)} tensors ({prefixes}.* -> SGLang names)"] if self.renamed else []
        out += [f"dropped training-only tensor {n}" for n in self.dropped]
        out += [f"not copied: {n}" for n in self.not_copied]
        return out + [f"note: {m}" for m in self.messages]


def _resolve_target(src_cfg: Mapping, target: Any, src: Path) -> tuple[Any, str]:
    if isinstance(target, Mapping):
        return target, "target config"
    if target is None:
        fld, file = "speculators_config.verifier.name_or_path", src / "config.json"
        verifier = (src_cfg.get("speculators_config") or {}).get("verifier") or {}
        if not isinstance(verifier, Mapping):
            raise InputError(file, "speculators_config.verifier", f"expected an object, got {brief(verifier)}",
                             "pass --target TARGET")
        target = verifier.get("name_or_path")
        if target is not None and not isinstance(target, str):
            raise InputError(file, fld, f"expected a path, got {brief(target)}", "pass --target TARGET")
        if not target or path_kind(Path(target) / "config.json") != "file":
            raise InputError(file, fld, f"no local target config ({brief(target)})",
                             "pass --target TARGET (the target model dir or its config.json)")
    data, path = load_target_config(target)
    return data, str(path)


def _name_map(index: Mapping, fmt: Any) -> dict[str, str]:
    """source name -> SGLang name, the training-only tensors left out."""
    mapping, produced = {}, set()  # a set: linear in the number of tensors
    for name in (n for n in index if not fmt.drops(n)):
        new = mapping[name] = ckpt.sglang_checkpoint_name(name)
        if new in produced:
            raise InputError(index[name].file, name, f"tensor maps to {new}, which another tensor also maps to",
                             "keep one of them")
        produced.add(new)
    return mapping


def _check_tensors(index, mapping, expected, src_dir: Path) -> None:
    files = ", ".join(str(f) for f in sorted({i.file for i in index.values()})) or str(src_dir)
    have = {mapping[n]: (n, index[n]) for n in mapping}
    for new, (old, info) in sorted(have.items()):
        if new not in expected:
            raise InputError(info.file, old, f"tensor not part of a {SGLANG_ARCH} draft with this config (SGLang "
                             "drops it silently)", "remove it, or convert only drafts whose every tensor is understood")
        shape, _ = expected[new]
        if info.shape != shape:
            raise InputError(info.file, old, f"tensor of shape {list(info.shape)}, but the config implies "
                             f"{list(shape)}", "the config and the weights disagree: re-export the draft")
    for new, (shape, required) in sorted(expected.items()):
        if required and new not in have:
            raise InputError(files, new, f"tensor missing (shape {list(shape)} expected)",
                             "convert a complete checkpoint")


def metadata_text(value: Any) -> Any:
    """``value`` with every string valid Unicode (surrogate escapes as ``\\xff``): JSON refuses lone surrogates."""
    if isinstance(value, str):
        return value.encode("utf-8", "surrogateescape").decode("utf-8", "backslashreplace")
    if isinstance(value, list):
        return [metadata_text(v) for v in value]
    if isinstance(value, dict):
        return {metadata_text(k): metadata_text(v) for k, v in value.items()}
    return value


@contextlib.contextmanager
def _utf8_path(path: Path, *, directory: bool = False):
    """A name safetensors (UTF-8 paths only) can open for ``path``: the path itself, else via /proc/self/fd."""
    try:
        os.fspath(path).encode("utf-8")
    except UnicodeEncodeError:
        flags = os.O_RDONLY | os.O_CLOEXEC | (os.O_DIRECTORY if directory else 0)
        fd = os.open(path.parent if directory else path, flags)
        try:
            yield f"/proc/self/fd/{fd}/{path.name}" if directory else f"/proc/self/fd/{fd}"
        finally:
            os.close(fd)
    else:
        yield str(path)


def _write_weights(src_dir: Path, out_dir: Path, dst: Path, mapping: Mapping[str, str]) -> None:
    """The renamed tensors, shard by shard, into ``out_dir``, fsynced with the umask's mode (safetensors': 0600)."""
    from safetensors.torch import load_file, save_file  # lazy: torch only when converting

    for f in ckpt.weight_files(src_dir):
        _, metadata = ckpt.read_safetensors_header(f)
        try:
            with _utf8_path(f) as name:
                tensors = load_file(name)
        except Exception as e:  # noqa: BLE001 - safetensors raises its own error type for corrupt data
            raise InputError(f, "<data>", f"cannot load ({brief(str(e).splitlines()[0], 160)})",
                             "re-export the checkpoint") from None
        renamed = {mapping[n]: t for n, t in tensors.items() if n in mapping}
        out = out_dir / f.name
        try:
            with _utf8_path(out, directory=True) as name:
                save_file(renamed, name, metadata=dict(metadata) or {"format": "pt"})
        except Exception as e:  # noqa: BLE001 - SafetensorError wraps the OSError (no space, file too large ...)
            problem = os_problem(e)[0] if isinstance(e, OSError) else brief(str(e).splitlines()[0], 160)
            raise InputError(dst / f.name, "<file>", f"cannot write ({problem})",
                             "free space or write DST elsewhere") from None
        finish_file(out)
    if path_kind(src_dir / ckpt.INDEX_FILENAME) != "missing":
        data = ckpt.read_index(src_dir)  # metadata and any other key kept as written
        data["weight_map"] = {mapping[n]: fn for n, fn in data["weight_map"].items() if n in mapping}
        write_file_atomic(out_dir / ckpt.INDEX_FILENAME, json.dumps(data, indent=2) + "\n")


def _check_dst(dst: Path) -> None:
    fix = "choose a new DST"
    if dst.is_symlink():
        raise InputError(dst, "DST", "is a symlink", "give the real path (convert never writes through a link)")
    parent_kind = path_kind(dst.parent, fix=fix)
    if parent_kind != "directory":
        what = {"missing": "does not exist", "file": "is a file"}.get(parent_kind, f"is {parent_kind}")
        raise InputError(dst.parent, "DST", f"the directory DST goes in {what}", "create it, or choose another DST")
    kind = path_kind(dst, fix=fix)
    if kind == "missing":
        return
    if kind == "directory" and os.path.ismount(dst):  # rename onto a mount point fails (EBUSY)
        raise InputError(dst, "DST", "is a mount point, which convert cannot replace with its finished copy",
                         f"write into a new directory inside it, e.g. {brief(str(dst / 'draft'), 200)}")
    if kind != "directory" or list_directory(dst, fix=fix):
        raise InputError(dst, "<dir>", "exists and is not an empty directory", fix)


def convert(src: str | os.PathLike, dst: str | os.PathLike, *, target: Any = None,
            layer_ids: Sequence[int] | None = None, trained_with: str | None = None) -> ConvertReport:
    """``layer_ids`` overrides the ids read (provenance ``manual``); ``trained_with`` settles ambiguous ids."""
    src, dst = Path(src), Path(dst)
    cfg_file = src / "config.json"
    cfg = load_draft_config(cfg_file)
    if CONVERTED_MARKER_KEY in cfg:
        raise InputError(cfg_file, CONVERTED_MARKER_KEY, "already converted", "use the directory as is")
    _check_dst(dst)
    src_manifest = mf.find_manifest(src)  # SRC's statement of the wiring, when it has one
    try:
        fmt, format_error = detect_format(cfg, file=str(cfg_file)), None
    except InputError as e:
        if layer_ids is None and src_manifest is None:
            raise
        fmt, format_error = SGLangEagleConfigFormat, e  # ids from the manifest or --layer-ids: SGLang's layout
    if trained_with is not None and path_kind(src / MANIFEST_FILENAME) != "missing":  # refused, never ignored
        raise InputError(None, "--trained-with", f"SRC has {MANIFEST_FILENAME}, which states the ids; --trained-with "
                         "only reads a config without one", "drop --trained-with (convert carries the manifest's ids)")
    if trained_with is not None and fmt is not SGLangEagleConfigFormat:
        raise InputError(None, "--trained-with", f"SRC is a {fmt.name} draft, whose config states how its ids count; "
                         "--trained-with only reads an SGLang-format config's ids", "drop --trained-with")
    out_cfg, messages = fmt.to_sglang_config(cfg, str(cfg_file))
    target_cfg, target_where = _resolve_target(cfg, target, src)
    arch, n_layers, hidden = target_dims(target_cfg, target_where)
    mf.check_target_bounds(arch, n_layers, hidden, target_where)
    if (family := family_of(arch)) is None:
        raise InputError(target_where, "architectures", f"{arch} has no target-family entry, so the capture ids "
                         "SGLang reads cannot be written", "convert for a supported target (docs/families.md)")

    resolved, read_error = None, format_error
    if format_error is None:
        fc_in_features = ckpt.draft_fc_in_features(src)  # weights that do not read are refused, whatever states the ids
        try:
            resolved = fmt.layer_ids(cfg, target_cfg, str(cfg_file), trained_with, fc_in_features=fc_in_features)
        except InputError as e:
            # refused with nothing else stating the ids, or with --trained-with (it reads these ids: never ignored)
            if trained_with is not None or (layer_ids is None and src_manifest is None):
                raise
            read_error = e
    if src_manifest is not None:  # SRC's own manifest states the wiring: carried as it is
        ids, path = src_manifest.layer_ids, src_manifest.path
        if layer_ids is not None and tuple(layer_ids) != ids:
            raise InputError(path, "layer_ids", f"is {list(ids)}, but --layer-ids says {list(layer_ids)}",
                             "drop --layer-ids (convert carries SRC's manifest), or correct the manifest first "
                             "(`sglang-eagle3-capture manifest write SRC --layer-ids=... --target TARGET --force`)")
        mf.check_target(src_manifest, target_cfg, where=target_where)
        prov = dict(src_manifest.provenance, carried_from=str(path.resolve()))
        messages.append(f"carried {path}: layer ids {list(ids)}, provenance kept")
        if resolved is not None and tuple(resolved.layer_ids) != ids:
            messages.append(f"{cfg_file} reads as layer ids {list(resolved.layer_ids)}; the manifest, which says "
                            f"{list(ids)}, is carried (it states what the fc was trained on)")
        elif read_error is not None:
            messages.append(f"{cfg_file}'s ids were not read ({read_error.problem}); the manifest is carried")
    elif layer_ids is None:
        ids, prov = resolved.layer_ids, dict(resolved.provenance)
        prov["file"] = str(cfg_file.resolve())  # the manifest travels; say exactly which file it came from
        messages += list(resolved.messages)
    else:
        ids = tuple(layer_ids)
        said = (f"{resolved.provenance['source']} read {list(resolved.layer_ids)}" if resolved is not None else
                f"the config could not be read: {read_error}")
        prov = {"source": "manual", "convention": CONVENTION_LAYER_ID, "note": f"given to convert; {said}"}
        if resolved is not None and tuple(resolved.layer_ids) != ids:
            messages.append(f"--layer-ids {list(ids)} overrides {list(resolved.layer_ids)} read from {cfg_file}")
    fail_closed = fail_closed_eagle_config_ids(ids, n_layers, family=family)
    if not fail_closed.exact and "fail_closed" not in prov:  # a carried record keeps the value the user wrote
        src_ec = cfg.get("eagle_config")
        prov["fail_closed"] = {"field": f"eagle_config.{IDS_KEY}", "source_value": (
            src_ec.get(IDS_KEY) if isinstance(src_ec, Mapping) else None), "stock_sglang": list(fail_closed.why)}
    prov = metadata_text(prov)
    manifest = Manifest(ids, arch, n_layers, hidden, prov, path=dst / MANIFEST_FILENAME,
                        expected=src_manifest.expected if src_manifest is not None else None)

    if (cfg_hidden := cfg.get("target_hidden_size")) not in (None, hidden):
        raise InputError(cfg_file, "target_hidden_size", f"is {brief(cfg_hidden)}, but target {target_where} "
                         f"field 'hidden_size' is {hidden}", "pass the target the draft was trained against")
    k = len(ids)
    out_cfg.update(target_hidden_size=hidden, num_aux_hidden_states=k)
    out_cfg["eagle_config"] = {**with_stock_ids(out_cfg.get("eagle_config"), fail_closed.value),
                               "use_aux_hidden_state": True}
    out_cfg[IDS_KEY] = vllm_fail_closed_ids(ids, n_layers, family=family).value  # read first by vLLM, never by SGLang
    out_cfg[CONVERTED_MARKER_KEY] = MANIFEST_FILENAME

    index = ckpt.tensor_index(src)
    mapping = _name_map(index, fmt)
    if "fc.weight" in index and ckpt.fc_input_width(index) != manifest.fc_in_features:
        fc = index["fc.weight"]
        origin = (f"{prov['file']} field '{prov['field']}'" if prov.get("field") else f"source '{prov['source']}'")
        raise InputError(fc.file, "fc.weight", f"tensor of input width {fc.shape[-1]}, but {origin} gives {k} "
                         f"layer ids {list(ids)} x target hidden_size {hidden} = {manifest.fc_in_features}",
                         "pass --layer-ids listing exactly the hidden states the fc was trained on, and the target "
                         "it was trained against")
    _check_tensors(index, mapping, ckpt.expected_eagle3_tensors(out_cfg, k, hidden, str(cfg_file)), src)

    if not fail_closed.exact:
        messages.append(f"no eagle_config ids make every supported stock SGLang feed the manifest's {list(ids)} (e.g. "
                        f"{fail_closed.why[-1]}); config.json carries the fail-closed object instead: stock SGLang "
                        "refuses to start with this draft, the sglang-eagle3-capture plugin serves it")

    written = {f.name for f in ckpt.weight_files(src)} | {ckpt.INDEX_FILENAME, "config.json"} | (
        {MANIFEST_FILENAME} if src_manifest is not None else set())  # a manifest is carried
    not_copied = tuple(n for n in list_directory(src, fix="make SRC readable") if n not in written)
    with atomic_directory(dst) as tmp:  # DST appears complete, or not at all
        _write_weights(src, tmp, dst, mapping)
        write_file_atomic(tmp / "config.json", json.dumps(out_cfg, indent=2) + "\n")
        write_manifest(tmp, manifest)
    renamed = tuple((a, b) for a, b in mapping.items() if a != b)
    dropped = tuple(n for n in index if fmt.drops(n))
    return ConvertReport(src, dst, fmt.name, manifest, renamed, dropped, not_copied, tuple(messages))
