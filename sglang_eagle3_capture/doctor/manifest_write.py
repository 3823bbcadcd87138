"""``manifest write``: a draft's ``eagle3_manifest.json`` from explicit layer ids and their target, checked first and
written last, atomically. config.json is rewritten only with ``fail_closed`` (docs/manifest.md); the value it held goes
to ``provenance.fail_closed``, which a ``force`` rewrite hands on, so the user's original value is never lost."""

from __future__ import annotations

import contextlib
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NamedTuple, Sequence

from ..core.checkpoint import fc_input_width, tensor_index, weights_present
from ..core.config_keys import IDS_KEY, is_fail_closed, is_vllm_fail_closed
from ..core.errors import Eagle3CaptureError, InputError
from ..core.families import family_of
from ..core.manifest import Manifest, check_fc_width, check_target_bounds, manifest_path, read_manifest, write_manifest
from ..core.target_config import load_target_config, target_dims
from ..core.userfiles import is_directory, is_file, path_kind, read_bytes, write_file_atomic
from .convert import metadata_text
from .formats import load_draft_config
from .readings import fail_closed_eagle_config_ids as sglang_fail_closed_ids
from .readings import stock_on_supported, stock_on_vllm, vllm_fail_closed_ids, with_stock_ids


@dataclass(frozen=True)
class Written:
    path: Path
    manifest: Manifest
    fc_checked: bool
    note: str | None = None  # the draft's config.json disagrees with the manifest (what stock SGLang would feed)
    config_written: bool = False  # --fail-closed rewrote config.json

    def lines(self) -> list[str]:
        m = self.manifest
        checked = "fc width checked" if self.fc_checked else "no weights in DRAFT_DIR: fc width not checked"
        return [f"wrote {self.path}: layer ids {list(m.layer_ids)} for {m.target_architecture} "
                f"({m.target_num_hidden_layers} layers, hidden {m.target_hidden_size}); {checked}",
                *([] if self.note is None else [self.note])]


def write_draft_manifest(draft_dir: str | Path, layer_ids: Sequence[int], target: str | Path, *,
                         source: str = "manual", note: str | None = None, force: bool = False,
                         fail_closed: bool = False, deepstack: str | None = None) -> Written:
    """``fail_closed``: also rewrite config.json where stock SGLang would feed other layers."""
    draft = Path(draft_dir)
    if not is_directory(draft, fix="pass the draft checkpoint directory"):
        raise InputError(draft, "DRAFT_DIR", "not a directory", "pass the draft checkpoint directory")
    target_cfg, target_file = load_target_config(target)
    arch, n_layers, hidden = target_dims(target_cfg, str(target_file))
    check_target_bounds(arch, n_layers, hidden, str(target_file))
    path = manifest_path(draft)
    kind, earlier = path_kind(path), None
    if kind != "missing" and not force:
        raise InputError(path, "<file>", "already exists" + ("" if kind == "file" else f" ({kind})"),
                         "pass --force to overwrite it")
    with contextlib.suppress(Eagle3CaptureError):  # provenance.fail_closed of the manifest ``force`` replaces
        earlier = read_manifest(path).provenance.get("fail_closed") if kind == "file" else None
    earlier = dict(earlier) if isinstance(earlier, dict) else None
    provenance = metadata_text({"source": source, "convention": "layer-id", **({"note": note} if note else {}),
                                **({"deepstack": deepstack} if deepstack else {}),
                                **({"fail_closed": earlier} if earlier is not None else {})})
    manifest = Manifest(tuple(layer_ids), arch, n_layers, hidden, provenance, path=path)
    fc_checked = weights_present(draft)
    if fc_checked:
        index = tensor_index(draft)
        if "fc.weight" not in index:
            raise InputError(draft, "fc.weight", "missing", "point at an EAGLE-3 draft checkpoint")
        check_fc_width(manifest, fc_input_width(index), file=index['fc.weight'].file)
    cfg_path = draft / "config.json"
    change = _config_change(cfg_path, manifest)
    if change is None:
        return Written(write_manifest(draft, manifest), manifest, fc_checked)
    if not fail_closed:
        return Written(write_manifest(draft, manifest), manifest, fc_checked, f"note: {change.note}; pass "
                       f"--fail-closed to write that into {cfg_path} (the value it holds is kept in the manifest's "
                       "provenance)")
    record = {**change.record, **{k: v for k, v in (earlier or {}).items() if k in _ORIGINAL}}
    prov = dict(manifest.provenance, fail_closed=metadata_text(record))
    manifest = Manifest(manifest.layer_ids, arch, n_layers, hidden, prov, path=path)
    original = read_bytes(cfg_path, fix="make the draft's config.json readable")
    write_file_atomic(cfg_path, json.dumps(change.config, indent=2) + "\n",
                      fix="make the draft's config.json writable, or run without --fail-closed")
    try:
        written = write_manifest(draft, manifest)
    except BaseException:
        write_file_atomic(cfg_path, original)  # leave the draft as it was
        raise
    return Written(written, manifest, fc_checked, f"rewrote {cfg_path}: {change.what}", config_written=True)


# what the draft's config held before this package first rewrote it (manifest write's record, convert's)
_ORIGINAL = ("replaced_value", "replaced_num_aux_hidden_states", "source_value")


class ConfigChange(NamedTuple):
    """What ``--fail-closed`` writes into config.json: the new document, what changes, why, and the replaced value."""

    config: dict
    what: str
    note: str
    record: dict


def _config_change(cfg_path: Path, manifest: Manifest) -> ConfigChange | None:
    """None when every supported stock SGLang release and vLLM runner feeds the manifest's ids (or refuses the draft);
    else ``eagle_config``'s ids for SGLang, the top-level ids for vLLM (which reads them first; SGLang never does)."""
    family = family_of(manifest.target_architecture)
    if family is None or not is_file(cfg_path, fix="replace it with the draft's config.json"):
        return None
    cfg, n, ids = load_draft_config(cfg_path), manifest.target_num_hidden_layers, manifest.layer_ids
    wrong = [stock for stock in stock_on_supported(cfg, n, family=family, file=cfg_path)
             if not stock.refuses_at_startup and (stock.fed_layer_ids != ids or stock.problem or stock.mis_fed)]
    vllm = vllm_fail_closed_ids(ids, n, family=family)
    wrong_vllm = [] if cfg.get(IDS_KEY) == vllm.value else [
        c for c in stock_on_vllm(cfg, n, family=family)
        if not c.refuses_at_startup and (c.fed_layer_ids != ids or c.problem)]
    if not wrong and not wrong_vllm:
        return None
    new, whats, outcomes, notes = dict(cfg), [], [], []
    record = {"file": str(cfg_path)}
    if wrong:
        ec = cfg.get("eagle_config")
        ec = dict(ec) if isinstance(ec, dict) else {}
        value = sglang_fail_closed_ids(ids, n, family=family)
        new["eagle_config"] = with_stock_ids(ec, value.value)
        whats.append(f"eagle_config.{IDS_KEY} {_shown(ec.get(IDS_KEY))} -> {_shown(value.value)}")
        if is_fail_closed(value.value) and cfg.get("num_aux_hidden_states") is None:
            new["num_aux_hidden_states"] = len(ids)  # SGLang's and vLLM's draft classes count the fc's inputs from it
            whats[-1] += f", num_aux_hidden_states absent -> {len(ids)}"
        outcomes.append("ids every supported stock SGLang release reads as the manifest's" if value.exact else
                        "so that stock SGLang refuses to start with this draft (no id list can express "
                        f"{list(ids)} to it: {value.why[-1]})")
        notes.append(wrong[-1].describe())
        record.update({"field": f"eagle_config.{IDS_KEY}", "replaced_value": ec.get(IDS_KEY),
                       "replaced_num_aux_hidden_states": cfg.get("num_aux_hidden_states"),
                       "stock_sglang": wrong[-1].describe()})
    if wrong_vllm:
        new[IDS_KEY] = vllm.value
        whats.append(f"{IDS_KEY} {_shown(cfg.get(IDS_KEY))} -> {_shown(vllm.value)}")
        outcomes.append("HF indices every stock vLLM runner reads as the manifest's" if vllm.exact else
                        "so that stock vLLM refuses the draft (no id list can express "
                        f"{list(ids)} to it: {vllm.why[-1]})")
        notes.append(wrong_vllm[-1].describe())
        record.update({"top_level_field": IDS_KEY, "replaced_top_level_value": cfg.get(IDS_KEY),
                       "stock_vllm": wrong_vllm[-1].describe()})
    what = "; ".join(whats)
    return ConfigChange(new, what, f"{cfg_path} disagrees with the manifest: {'; '.join(notes)}; --fail-closed would "
                        f"set {what}, {'; '.join(outcomes)}", record)


def _shown(value: Any) -> str:
    return ("absent" if value is None else "the vLLM fail-closed value" if is_vllm_fail_closed(value) else
            "the fail-closed object" if is_fail_closed(value) else json.dumps(value))
