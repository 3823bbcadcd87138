"""The layer manifest: the one statement of which target hidden states an EAGLE-3 draft's fc consumes.

``eagle3_manifest.json`` lives in the draft directory. Example::

    {"format": "sglang-eagle3-capture.manifest", "version": 1,
     "layer_ids": [-1, 2, 30],
     "target": {"architecture": "KimiK25ForConditionalGeneration", "num_hidden_layers": 61, "hidden_size": 7168},
     "provenance": {"source": "speculators-config", "file": "config.json",
                    "field": "eagle_aux_hidden_state_layer_ids", "original_ids": [0, 3, 31],
                    "convention": "vllm-hf-index"}}

Layer ids follow the one convention of :mod:`sglang_eagle3_capture.layer_ids` (``-1`` = embedding
output, ``k`` = output of decoder layer ``k``); the fc consumes their hidden states concatenated in
the listed order. Validation is strict: every error names the file, the field and the fix.
"""

from __future__ import annotations

import json
import os
import unicodedata
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping

from .errors import LayerIdError, ManifestError
from .layer_ids import check_layer_ids
from .target_config import architecture_family, decoder_field_prefix, is_int, target_dims
from .userfiles import brief, path_kind, read_json_object, shown, write_file_atomic

MANIFEST_FILENAME = "eagle3_manifest.json"
MANIFEST_VERSION = 1
MANIFEST_FORMAT = "sglang-eagle3-capture.manifest"

WRITE_HINT = "sglang-eagle3-capture manifest write DRAFT_DIR --layer-ids=-1,2,30 --target TARGET"

# Bounds no real target reaches: a manifest beyond them is a corrupt or hostile file (and every check stays cheap).
MAX_LAYERS = 100_000
MAX_HIDDEN_SIZE = 1 << 20
MAX_TEXT = 10_000  # characters in one provenance string

_TOP_KEYS = ("format", "version", "layer_ids", "target", "provenance")
_TARGET_KEYS = ("architecture", "num_hidden_layers", "hidden_size")
# provenance key -> (accepted types, required)
_PROVENANCE_KEYS: dict[str, tuple[tuple[type, ...], bool]] = {
    "source": ((str,), True),
    "file": ((str, type(None)), False),
    "field": ((str, type(None)), False),
    "original_ids": ((list, type(None)), False),
    "convention": ((str, type(None)), False),
    "inferred": ((bool,), False),
    "note": ((str, type(None)), False),
}

def _err(where: str, fld: str, problem: str, fix: str) -> ManifestError:
    return ManifestError(f"{shown(where)}: field '{fld}': {problem}; fix: {fix}")


def _key(key: Any) -> str:
    """An unknown key as an error shows it: a string as is (escaped, cut), anything else as its repr."""
    return shown(key[:80]) if isinstance(key, str) else brief(key, 40)


def _check_text(value: str, where: str, fld: str) -> None:
    """A manifest string is printed to terminals: no control characters, no lone surrogates, bounded length."""
    if len(value) > MAX_TEXT:
        raise _err(where, fld, f"{len(value)} characters (at most {MAX_TEXT})", "shorten it")
    for c in value:
        if unicodedata.category(c) in ("Cc", "Cs"):
            what = "a lone surrogate (not valid Unicode)" if "\ud800" <= c <= "\udfff" else "a control character"
            raise _err(where, fld, f"holds {what} U+{ord(c):04X}", "write it as plain printable text")


@dataclass(frozen=True)
class Manifest:
    """A validated manifest. Constructing one validates it (raises :class:`ManifestError`)."""

    layer_ids: tuple[int, ...]
    target_architecture: str
    target_num_hidden_layers: int
    target_hidden_size: int
    provenance: dict = field(default_factory=lambda: {"source": "manual"})
    path: Path | None = field(default=None, compare=False)

    def __post_init__(self) -> None:
        where = str(self.path) if self.path is not None else MANIFEST_FILENAME
        ids, prov = self.layer_ids, self.provenance
        object.__setattr__(self, "layer_ids", tuple(ids) if isinstance(ids, (list, tuple)) else ids)
        object.__setattr__(self, "provenance", dict(prov) if isinstance(prov, Mapping) else prov)
        _check_target_fields(
            {"architecture": self.target_architecture, "num_hidden_layers": self.target_num_hidden_layers,
             "hidden_size": self.target_hidden_size},
            where,
        )
        try:
            ids = check_layer_ids(self.layer_ids, self.target_num_hidden_layers,
                                  where=f"{shown(where)}: field 'layer_ids'")
        except LayerIdError as e:
            raise ManifestError(f"{e}; fix: list each layer the fc consumes once, in fc order, within "
                                f"[-1, {self.target_num_hidden_layers - 1}] (or rewrite it with `{WRITE_HINT}`)") from e
        object.__setattr__(self, "layer_ids", ids)
        _check_provenance(self.provenance, where)

    @property
    def fc_in_features(self) -> int:
        """Input width the draft's fc must have: ``len(layer_ids) * target_hidden_size``."""
        return len(self.layer_ids) * self.target_hidden_size

    def to_dict(self) -> dict:
        """The JSON document (``format``, ``version``, ``layer_ids``, ``target``, ``provenance``)."""
        return {
            "format": MANIFEST_FORMAT,
            "version": MANIFEST_VERSION,
            "layer_ids": list(self.layer_ids),
            "target": {"architecture": self.target_architecture, "num_hidden_layers": self.target_num_hidden_layers,
                       "hidden_size": self.target_hidden_size},
            "provenance": dict(self.provenance),
        }


def _check_target_fields(target: Mapping, where: str) -> None:
    arch = target.get("architecture")
    if not isinstance(arch, str) or not arch:
        raise _err(where, "target.architecture", f"expected a non-empty string, got {brief(arch)}",
                   "set it to the target's config.json architectures[0], e.g. \"DeepseekV3ForCausalLM\"")
    _check_text(arch, where, "target.architecture")
    for key, most in (("num_hidden_layers", MAX_LAYERS), ("hidden_size", MAX_HIDDEN_SIZE)):
        v = target.get(key)
        if not is_int(v) or v < 1:
            raise _err(where, f"target.{key}", f"expected a positive integer, got {brief(v)}",
                       f"copy {key} from the target's config.json")
        if v > most:
            raise _err(where, f"target.{key}", f"{v} is more than any model has (at most {most})",
                       f"copy {key} from the target's config.json")


def _check_provenance(prov: Any, where: str) -> None:
    if not isinstance(prov, Mapping):
        raise _err(where, "provenance", f"expected an object, got {type(prov).__name__}",
                   'write e.g. {"source": "manual"}')
    for key, value in prov.items():
        if key not in _PROVENANCE_KEYS:
            raise _err(where, f"provenance.{_key(key)}",
                       "unknown key",
                       f"remove it; known keys: {', '.join(_PROVENANCE_KEYS)} (free text goes in provenance.note)")
        types, _ = _PROVENANCE_KEYS[key]
        if not isinstance(value, types) or (bool not in types and isinstance(value, bool)):
            names = " or ".join("null" if t is type(None) else t.__name__ for t in types)
            raise _err(where, f"provenance.{key}", f"expected {names}, got {type(value).__name__}",
                       f"write provenance.{key} as {names}")
        if isinstance(value, str):
            _check_text(value, where, f"provenance.{key}")
        if key == "original_ids" and value is not None and (
                len(value) > MAX_LAYERS or not all(is_int(i) and abs(i) <= MAX_LAYERS for i in value)):
            raise _err(where, "provenance.original_ids", f"expected a list of integers (at most {MAX_LAYERS}), "
                       f"got {brief(value)}", "copy the ids exactly as the source file had them")
    for key, (_, required) in _PROVENANCE_KEYS.items():
        if required and not prov.get(key):
            raise _err(where, f"provenance.{key}", "missing or empty",
                       'say where the ids came from, e.g. "manual" or "speculators-config"')


def manifest_from_dict(data: Any, *, path: Path | str | None = None) -> Manifest:
    """Parse and validate a manifest JSON document (``path`` only names the file in errors)."""
    where = str(path) if path is not None else MANIFEST_FILENAME
    if not isinstance(data, dict):
        raise _err(where, "<document>", f"expected a JSON object, got {type(data).__name__}",
                   f"rewrite it with `{WRITE_HINT}`")
    for key in data:
        if key not in _TOP_KEYS:
            raise _err(where, _key(key), "unknown key",
                       f"remove it; a version-{MANIFEST_VERSION} manifest has only {', '.join(_TOP_KEYS)}")
    for key in _TOP_KEYS:
        if key not in data:
            raise _err(where, key, "missing", f"add it, or rewrite the manifest with `{WRITE_HINT}`")
    if data["format"] != MANIFEST_FORMAT:
        raise _err(where, "format", f"expected {MANIFEST_FORMAT!r}, got {brief(data['format'])}",
                   "this is not an sglang-eagle3-capture manifest; rewrite it with `" + WRITE_HINT + "`")
    version = data["version"]
    if not is_int(version):
        raise _err(where, "version", f"expected an integer, got {brief(version)}", f"set it to {MANIFEST_VERSION}")
    if version != MANIFEST_VERSION:
        raise _err(where, "version",
                   f"unknown manifest version {brief(version)} (this package reads version {MANIFEST_VERSION})",
                   "upgrade sglang-eagle3-capture, or rewrite the manifest with `" + WRITE_HINT + "`")
    ids = data["layer_ids"]
    if not isinstance(ids, list) or not all(is_int(i) for i in ids):
        raise _err(where, "layer_ids", f"expected a list of integers, got {brief(ids)}", "write e.g. [-1, 2, 30]")
    target = data["target"]
    if not isinstance(target, dict):
        raise _err(where, "target", f"expected an object, got {type(target).__name__}",
                   'write {"architecture": ..., "num_hidden_layers": ..., "hidden_size": ...}')
    for key in target:
        if key not in _TARGET_KEYS:
            raise _err(where, f"target.{_key(key)}", "unknown key",
                       f"remove it; target has only {', '.join(_TARGET_KEYS)}")
    for key in _TARGET_KEYS:
        if key not in target:
            raise _err(where, f"target.{key}", "missing", f"copy {key} from the target's config.json")
    return Manifest(
        layer_ids=tuple(ids),
        target_architecture=target["architecture"],
        target_num_hidden_layers=target["num_hidden_layers"],
        target_hidden_size=target["hidden_size"],
        provenance=data["provenance"],
        path=Path(path) if path is not None else None,
    )


def manifest_path(draft_dir_or_file: str | os.PathLike) -> Path:
    """The manifest file for a draft directory (or the file itself when given a file)."""
    p = Path(draft_dir_or_file)
    if p.suffix == ".json" and path_kind(p, error=ManifestError) != "directory":
        return p
    return p / MANIFEST_FILENAME


def read_manifest(draft_dir_or_file: str | os.PathLike) -> Manifest:
    """Read and validate the manifest of a draft directory (or a manifest file); missing is an error, and so is
    anything but a regular file standing where the manifest belongs (a directory, fifo, dangling symlink, loop)."""
    path = manifest_path(draft_dir_or_file)
    fix = f"rewrite it with `{WRITE_HINT}`"
    if path_kind(path, error=ManifestError, fix=fix) == "missing":
        raise ManifestError(
            f"{shown(path)}: field '<file>': no layer manifest found; fix: write one with "
            f"`sglang-eagle3-capture manifest write {shown(path.parent)} --layer-ids=... --target TARGET` "
            "(or convert the draft with `sglang-eagle3-capture convert SRC DST`)"
        )
    return manifest_from_dict(read_json_object(path, fix=f"replace it with a manifest file; {fix}"), path=path)


def find_manifest(draft_dir: str | os.PathLike) -> Manifest | None:
    """The draft's manifest, or ``None`` only when nothing stands at its path (anything else that is not a valid
    manifest file raises)."""
    if path_kind(manifest_path(draft_dir), error=ManifestError) == "missing":
        return None
    return read_manifest(draft_dir)


def write_manifest(draft_dir: str | os.PathLike, manifest: Manifest) -> Path:
    """Write ``manifest`` to ``draft_dir/eagle3_manifest.json`` atomically (a unique temporary file in the draft
    directory, fsynced, then renamed: readers see the old or the new manifest, concurrent writers never collide, the
    mode follows the umask); returns the path."""
    path = Path(draft_dir) / MANIFEST_FILENAME
    manifest_from_dict(manifest.to_dict(), path=path)  # re-validate what is about to be written
    return write_file_atomic(path, json.dumps(manifest.to_dict(), indent=2) + "\n", error=ManifestError,
                             fix="make the draft directory writable, or free space")


def check_fc_width(manifest: Manifest, fc_in_features: int, where: str) -> None:
    """Raise unless the draft fc's input width equals ``len(layer_ids) * target_hidden_size``.

    ``where`` names the weights file and tensor, e.g. ``"draft/model.safetensors: fc.weight"``.
    """
    if fc_in_features != manifest.fc_in_features:
        k, h = len(manifest.layer_ids), manifest.target_hidden_size
        hint = (f" (the fc was trained on {fc_in_features // h} hidden states)" if fc_in_features % h == 0 else "")
        raise ManifestError(
            f"{shown(where)}: fc input width is {fc_in_features}, but manifest "
            f"{shown(manifest.path or MANIFEST_FILENAME)} field 'layer_ids' lists {k} ids x field 'target.hidden_size' "
            f"{h} = {manifest.fc_in_features}{hint}; "
            "fix: list exactly the hidden states the fc was trained on, and the target it was trained against"
        )


def check_target(manifest: Manifest, target_hf_config: Any, where: str) -> None:
    """Raise unless the running target matches the manifest's (architecture family, layer count, hidden size).

    ``target_hf_config`` is the target's HF config (dict or object); ``where`` names it in errors.
    """
    arch, n_layers, hidden = target_dims(target_hf_config, where)
    mpath = shown(manifest.path or MANIFEST_FILENAME)
    if architecture_family(arch) != architecture_family(manifest.target_architecture):
        raise ManifestError(
            f"{shown(where)}: target architecture {shown(arch)} is not in the family of {manifest.target_architecture} "
            f"named by manifest {mpath} field 'target.architecture'; fix: serve the draft with the target it was "
            "trained against"
        )
    prefix = decoder_field_prefix(arch)
    for fld, have, want in (("num_hidden_layers", n_layers, manifest.target_num_hidden_layers),
                            ("hidden_size", hidden, manifest.target_hidden_size)):
        if have != want:
            raise ManifestError(
                f"{shown(where)}: field '{prefix}{fld}' is {have}, but manifest {mpath} field 'target.{fld}' is "
                f"{want}; fix: serve the draft with the target it was trained against (or correct the manifest)"
            )
