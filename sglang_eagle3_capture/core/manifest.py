"""The layer manifest (``eagle3_manifest.json`` in the draft directory; docs/manifest.md), declared in
:mod:`.schemas.manifest`: which target hidden states the draft's fc consumes, in fc order."""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping, Sequence

from . import records
from .errors import InputError, brief, cut, shown
from .layer_ids import FINAL_NORM, check_layer_ids
from .schemas import manifest as schema
from .schemas.manifest import FILENAME as MANIFEST_FILENAME
from .schemas.manifest import FINAL_NORM_VERSION, REWRITE, WRITE_EXPECTED, WRITE_HINT
from .schemas.manifest import FORMAT as MANIFEST_FORMAT
from .schemas.manifest import VERSION as MANIFEST_VERSION
from .target_config import architecture_family, decoder_field_prefix, target_dims
from .userfiles import path_kind, read_json_object, write_file_atomic

__all__ = ["MANIFEST_FILENAME", "MANIFEST_FORMAT", "MANIFEST_VERSION", "WRITE_HINT", "Manifest", "check_fc_width",
           "check_target", "check_target_bounds", "find_manifest", "manifest_from_dict", "manifest_path",
           "read_manifest", "write_manifest"]


def _document(layer_ids: Any, architecture: Any, num_hidden_layers: Any, hidden_size: Any, provenance: Any,
              expected: Any = None) -> dict:
    final = isinstance(layer_ids, list) and FINAL_NORM in layer_ids
    version = schema.EXPECTED_VERSION if expected is not None else FINAL_NORM_VERSION if final else MANIFEST_VERSION
    doc = {"format": MANIFEST_FORMAT, "version": version, "layer_ids": layer_ids,
           "target": {"architecture": architecture, "num_hidden_layers": num_hidden_layers, "hidden_size": hidden_size},
           "provenance": provenance}
    return doc if expected is None else {**doc, "expected": expected}


def _checked(doc: Any, file: Any) -> dict:
    """``doc`` read as a manifest: the header first (another format or version named as such), then the rest."""
    records.read(schema.HEAD, doc, file=file)
    m = records.read(schema.MANIFEST, doc, file=file)
    n = m["target"]["num_hidden_layers"]
    if FINAL_NORM in m["layer_ids"] and m["version"] < FINAL_NORM_VERSION:
        # an older reader would not know the token: the version says the document needs a reader that does
        raise InputError(file, "version", f"is {m['version']}, but field 'layer_ids' lists \"{FINAL_NORM}\", "
                         f"which version {FINAL_NORM_VERSION} introduced", f"set version to {FINAL_NORM_VERSION}; "
                         f"or {REWRITE}")
    try:
        check_layer_ids(m["layer_ids"], n, file=file, field="layer_ids")
    except InputError as e:
        raise InputError(e.file, e.field, e.problem, f"list each layer the fc consumes once, in fc order, within "
                         f"[-1, {n - 1}]; or {REWRITE}") from None
    return m


@dataclass(frozen=True)
class Manifest:
    """A validated manifest. Constructing one validates it (raises :class:`InputError`)."""

    layer_ids: tuple[int, ...]
    target_architecture: str
    target_num_hidden_layers: int
    target_hidden_size: int
    provenance: dict = field(default_factory=lambda: {"source": "manual"})
    path: Path | None = field(default=None, compare=False)
    expected: dict | None = None  # metadata (core.schemas.manifest.EXPECTED): what verify measured offline

    def __post_init__(self) -> None:
        ids, prov = self.layer_ids, self.provenance
        ids = list(ids) if isinstance(ids, Sequence) and not isinstance(ids, (str, bytes)) else ids
        doc = _document(ids, self.target_architecture, self.target_num_hidden_layers, self.target_hidden_size,
                        dict(prov) if isinstance(prov, Mapping) else prov, self.expected)
        m = _checked(doc, self.path if self.path is not None else MANIFEST_FILENAME)
        object.__setattr__(self, "layer_ids", tuple(m["layer_ids"]))
        object.__setattr__(self, "provenance", dict(m["provenance"]))

    @property
    def fc_in_features(self) -> int:
        return len(self.layer_ids) * self.target_hidden_size

    def expected_acceptance(self, steps: int, topk: int, draft_tokens: int) -> tuple[list[float] | None, str | None]:
        """``(per_position, None)`` for the served setting, or ``(None, why)``: metadata, never an error."""
        if self.expected is None:
            return None, "the manifest has no 'expected' block"
        if bad := records.problems(schema.EXPECTED, self.expected, "expected"):
            return None, f"field '{bad[0][0]}': {bad[0][1]}; {WRITE_EXPECTED}"
        measured = list(self.expected["provenance"]["layer_ids"])
        if measured != list(self.layer_ids):
            return None, (f"field 'expected.provenance.layer_ids': the figures were measured with layer ids "
                          f"{measured}, but the manifest's layer_ids are {list(self.layer_ids)}; {WRITE_EXPECTED}")
        served = f"{steps},{topk},{draft_tokens}"
        for entry in self.expected["acceptance"]:
            if (entry["steps"], entry["topk"], entry["draft_tokens"]) == (steps, topk, draft_tokens):
                if len(entry["per_position"]) != steps:
                    return None, (f"field 'expected.acceptance': the entry for {served} has "
                                  f"{len(entry['per_position'])} figures for {steps} draft positions; {WRITE_EXPECTED}")
                return list(entry["per_position"]), None
        have = " ".join(f"{e['steps']},{e['topk']},{e['draft_tokens']}" for e in self.expected["acceptance"])
        return None, (f"field 'expected.acceptance' has figures for the settings {brief(have, 200)}, not for the "
                      f"{served} served; write them with `sglang-eagle3-capture verify DRAFT --data SAMPLES "
                      f"--write-expected --settings {served}`")

    def to_dict(self) -> dict:
        return _document(list(self.layer_ids), self.target_architecture, self.target_num_hidden_layers,
                         self.target_hidden_size, dict(self.provenance), self.expected)


def manifest_from_dict(data: Any, *, path: Path | str | None = None) -> Manifest:
    """Parse and validate a manifest JSON document (``path`` only names the file in errors)."""
    m = _checked(data, path if path is not None else MANIFEST_FILENAME)
    t = m["target"]
    return Manifest(tuple(m["layer_ids"]), t["architecture"], t["num_hidden_layers"], t["hidden_size"],
                    m["provenance"], path=Path(path) if path is not None else None, expected=m.get("expected"))


def manifest_path(draft_dir_or_file: str | os.PathLike) -> Path:
    """The manifest file for a draft directory (or the file itself when given a file)."""
    p = Path(draft_dir_or_file)
    return p if p.suffix == ".json" and path_kind(p) != "directory" else p / MANIFEST_FILENAME


def read_manifest(draft_dir_or_file: str | os.PathLike) -> Manifest:
    """The manifest of a draft directory (or a manifest file); missing, or anything but a regular file, is an error."""
    path = manifest_path(draft_dir_or_file)
    if path_kind(path, fix=REWRITE) == "missing":
        draft = cut(shown(path.parent), 200, keep_end=True)  # a long path must not push the rest of the fix out
        raise InputError(path, "<file>", "no layer manifest found",
                         f"write one with `sglang-eagle3-capture manifest write {draft} "
                         "--layer-ids=... --target TARGET` (or convert the draft with `sglang-eagle3-capture "
                         "convert SRC DST`)")
    return manifest_from_dict(read_json_object(path, fix=f"replace it with a manifest file; {REWRITE}"), path=path)


def find_manifest(draft_dir: str | os.PathLike) -> Manifest | None:
    """The draft's manifest, or None only when nothing stands at its path (anything else invalid raises)."""
    return None if path_kind(manifest_path(draft_dir)) == "missing" else read_manifest(draft_dir)


def write_manifest(draft_dir: str | os.PathLike, manifest: Manifest) -> Path:
    """Write ``manifest`` to ``draft_dir/eagle3_manifest.json`` atomically; returns the path."""
    path = Path(draft_dir) / MANIFEST_FILENAME
    manifest_from_dict(manifest.to_dict(), path=path)  # re-validate what is about to be written
    return write_file_atomic(path, json.dumps(manifest.to_dict(), indent=2) + "\n",
                             fix="make the draft directory writable, or free space")


def check_fc_width(manifest: Manifest, fc_in_features: int, *, file: Any = None, field: str | None = "fc.weight"
                   ) -> None:
    """Raise unless the draft fc's input width (``file``'s tensor ``field``) is ``len(layer_ids) * hidden_size``."""
    if fc_in_features != manifest.fc_in_features:
        k, h = len(manifest.layer_ids), manifest.target_hidden_size
        hint = f" (the fc was trained on {fc_in_features // h} hidden states)" if fc_in_features % h == 0 else ""
        raise InputError(file, field, f"fc input width is {fc_in_features}, but manifest "
                         f"{shown(manifest.path or MANIFEST_FILENAME)} field 'layer_ids' lists {k} ids x field "
                         f"'target.hidden_size' {h} = {manifest.fc_in_features}{hint}", "list exactly the hidden "
                         "states the fc was trained on, and the target it was trained against")


def check_target_bounds(architecture: str, num_hidden_layers: int, hidden_size: int, where: Any) -> None:
    """Raise unless a manifest can hold these dimensions: one past its bounds is the target config's error."""
    doc = {"architecture": architecture, "num_hidden_layers": num_hidden_layers, "hidden_size": hidden_size}
    try:
        records.read(schema.TARGET, doc, file=where)
    except InputError as e:
        name = (e.field or "").rsplit(".", 1)[-1]
        field = "architectures" if name == "architecture" else decoder_field_prefix(architecture) + name
        raise InputError(where, field, e.problem, "point TARGET at the target model's own config.json (no real "
                         "model has such a value)") from None


def check_target(manifest: Manifest, target_hf_config: Any, where: Any) -> None:
    """Raise unless the target's HF config (dict or object) matches the manifest's family, layers and width."""
    arch, n_layers, hidden = target_dims(target_hf_config, where)
    mpath = shown(manifest.path or MANIFEST_FILENAME)
    fix = "serve the draft with the target it was trained against (or correct the manifest)"
    if architecture_family(arch) != architecture_family(manifest.target_architecture):
        raise InputError(where, "architectures", f"target architecture {arch} is not in the family of "
                         f"{manifest.target_architecture} named by manifest {mpath} field 'target.architecture'", fix)
    for fld, have, want in (("num_hidden_layers", n_layers, manifest.target_num_hidden_layers),
                            ("hidden_size", hidden, manifest.target_hidden_size)):
        if have != want:
            raise InputError(where, decoder_field_prefix(arch) + fld, f"is {have}, but manifest {mpath} field "
                             f"'target.{fld}' is {want}", fix)
