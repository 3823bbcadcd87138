"""``manifest write``: a draft's ``eagle3_manifest.json`` from explicit layer ids and the target they refer to.

Everything is read and checked first (the target's dimensions, the ids against them, the draft's fc width when it has
weights, whether a manifest already stands there); the manifest is written last, atomically, so a command that
fails leaves the draft as it was. What stands at the manifest's path, valid or not, is the user's until ``force``.
When the draft's ``config.json`` would make stock SGLang feed other layers, the result carries a note saying so.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

from ..draft.checkpoint import fc_input_width, tensor_index, weights_present
from ..draft.convert import metadata_text
from ..errors import FormatError, UsageError, WeightsError
from ..families import family_of
from ..formats import load_draft_config
from ..manifest import Manifest, check_fc_width, check_target_bounds, manifest_path, write_manifest
from ..readings import stock_sglang_capture
from ..target_config import load_target_config, target_dims
from ..userfiles import is_directory, is_file, path_kind


@dataclass(frozen=True)
class Written:
    """What ``manifest write`` wrote, and what it could check."""

    path: Path
    manifest: Manifest
    fc_checked: bool
    note: str | None = None  # the draft's config.json disagrees with the manifest (what stock SGLang would feed)

    def lines(self) -> list[str]:
        """The command's report."""
        m = self.manifest
        checked = "fc width checked" if self.fc_checked else "no weights in DRAFT_DIR: fc width not checked"
        out = [f"wrote {self.path}: layer ids {list(m.layer_ids)} for {m.target_architecture} "
               f"({m.target_num_hidden_layers} layers, hidden {m.target_hidden_size}); {checked}"]
        return out if self.note is None else [*out, self.note]


def write_draft_manifest(draft_dir: str | Path, layer_ids: Sequence[int], target: str | Path, *,
                         source: str = "manual", note: str | None = None, force: bool = False) -> Written:
    """Check and write ``draft_dir``'s manifest (see the module doc); raises an ``InputError`` naming the file."""
    draft = Path(draft_dir)
    if not is_directory(draft, error=UsageError, fix="pass the draft checkpoint directory"):
        raise UsageError(draft, "DRAFT_DIR", "not a directory", "pass the draft checkpoint directory")
    target_cfg, target_file = load_target_config(target)
    arch, n_layers, hidden = target_dims(target_cfg, str(target_file))
    check_target_bounds(arch, n_layers, hidden, str(target_file))
    path = manifest_path(draft)
    kind = "missing" if force else path_kind(path, error=UsageError)
    if kind != "missing":
        raise UsageError(path, "<file>", "already exists" + ("" if kind == "file" else f" ({kind})"),
                         "pass --force to overwrite it")
    provenance = metadata_text({"source": source, "convention": "layer-id", **({"note": note} if note else {})})
    manifest = Manifest(tuple(layer_ids), arch, n_layers, hidden, provenance, path=path)
    fc_checked = weights_present(draft)
    if fc_checked:
        index = tensor_index(draft)
        if "fc.weight" not in index:
            raise WeightsError(draft, "fc.weight", "missing", "point at an EAGLE-3 draft checkpoint")
        check_fc_width(manifest, fc_input_width(index), file=index['fc.weight'].file)
    stock_note = _stock_note(draft / "config.json", manifest)
    return Written(write_manifest(draft, manifest), manifest, fc_checked, stock_note)


def _stock_note(cfg_path: Path, manifest: Manifest) -> str | None:
    """A note when stock SGLang, reading ``cfg_path``, would feed other layers than ``manifest`` names."""
    family = family_of(manifest.target_architecture)
    if family is None or not is_file(cfg_path, error=FormatError, fix="replace it with the draft's config.json"):
        return None
    stock = stock_sglang_capture(load_draft_config(cfg_path), manifest.target_num_hidden_layers, family=family)
    if stock.fed_layer_ids == manifest.layer_ids and not stock.problem:
        return None
    return (f"note: {cfg_path} disagrees with the manifest: {stock.describe()}; "
            "`sglang-eagle3-capture convert SRC DST --layer-ids=...` writes a config that agrees")
