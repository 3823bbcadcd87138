"""``inspect``: a draft's declared wiring next to what stock SGLang would feed it.

The declared wiring is the draft's ``eagle3_manifest.json`` (or, without one, what its
``config.json`` reads as through :mod:`sglang_eagle3_capture.formats`). What stock SGLang would feed
comes from :func:`sglang_eagle3_capture.stock_wiring.stock_sglang_capture` only: 0.5.11's reading,
0.5.17+'s reading (0.5.23 is the installed, supported release) and the default used when the draft
config names no ids. Every row is shown as layer ids and HF ``output_hidden_states`` indices.

The verdict concerns the supported release (0.5.23): ``consistent`` when it feeds exactly the
manifest's ids in the manifest's order, ``mis-wired`` when it feeds other tensors, ``crash`` when it
would fail (e.g. ``captured 2 of 3 aux hidden states``).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .layer_ids import hidden_state_indices

SUPPORTED_READING = "0.5.23"
READINGS = (("0.5.11", "0.5.11"), ("0.5.17+", "0.5.17"), ("0.5.23", "0.5.23"))
PLUGIN_ENTRY_POINT = ("sglang.srt.plugins", "eagle3_capture")


@dataclass(frozen=True)
class WiringRow:
    """One way the fc could be fed: a name, layer ids in fc order, HF indices, and a status."""

    name: str
    layer_ids: tuple[int, ...]
    rule: str
    status: str  # "declared", "consistent", "mis-wired", "crash"
    problem: str | None = None

    @property
    def hf_indices(self) -> list[int]:
        """HF ``output_hidden_states`` indices of :attr:`layer_ids`."""
        return hidden_state_indices(self.layer_ids)

    def to_dict(self) -> dict:
        """JSON-ready form."""
        return {"name": self.name, "layer_ids": list(self.layer_ids), "hf_indices": self.hf_indices,
                "rule": self.rule, "status": self.status, "problem": self.problem}


@dataclass
class InspectReport:
    """Everything ``inspect`` prints; :attr:`verdict` decides the exit status."""

    draft_dir: str
    declared: WiringRow
    manifest: dict | None
    provenance: dict
    messages: list[str] = field(default_factory=list)
    readings: list[WiringRow] = field(default_factory=list)
    checks: list[str] = field(default_factory=list)
    plugin_installed: bool = False
    verdict: str = "consistent"
    summary: str = ""

    @property
    def ok(self) -> bool:
        """True when stock SGLang 0.5.23 feeds exactly the declared wiring."""
        return self.verdict == "consistent"

    def to_dict(self) -> dict:
        """JSON-ready form."""
        return {"draft_dir": self.draft_dir, "manifest": self.manifest, "provenance": self.provenance,
                "declared": self.declared.to_dict(), "messages": self.messages,
                "stock_sglang": [r.to_dict() for r in self.readings], "checks": self.checks,
                "plugin_installed": self.plugin_installed, "verdict": self.verdict, "summary": self.summary,
                "ok": self.ok}


def plugin_installed() -> bool:
    """True when this package's SGLang plugin entry point is registered in the environment."""
    from importlib.metadata import entry_points

    group, name = PLUGIN_ENTRY_POINT
    return any(ep.name == name for ep in entry_points(group=group))


def _status(fed: tuple[int, ...], problem: str | None, declared: tuple[int, ...]) -> str:
    if problem:
        return "crash"
    return "consistent" if tuple(fed) == tuple(declared) else "mis-wired"


def inspect_draft(draft_dir: str | Path, target: str | Path | None = None) -> InspectReport:
    """Build the :class:`InspectReport` for ``draft_dir`` (``target``: model dir or config.json, optional)."""
    from .draft_weights import WeightsError, tensor_index
    from .formats import load_json, read_draft_config
    from .manifest import check_fc_width, check_target, find_manifest, load_target_config, target_dims
    from .stock_wiring import stock_sglang_capture

    draft = Path(draft_dir)
    cfg_path = draft / "config.json"
    draft_cfg = load_json(cfg_path, "the draft's config.json")
    manifest = find_manifest(draft)
    target_cfg = None
    checks: list[str] = []
    if target is not None:
        target_cfg, target_file = load_target_config(target)
    if manifest is not None:
        if target_cfg is not None:
            check_target(manifest, target_cfg, where=str(target_file))
            checks.append(f"target {target_file}: architecture family, layer count and hidden size match the manifest")
        n_layers = manifest.target_num_hidden_layers
        declared = WiringRow(f"manifest ({manifest.path.name})", manifest.layer_ids, "as declared", "declared")
        prov, messages, mdict = dict(manifest.provenance), [], manifest.to_dict()
    else:
        if target_cfg is None:
            from .cli import UserError

            raise UserError(f"{draft / 'eagle3_manifest.json'}: field '<file>': no manifest, so the target's layer count "
                            "is unknown; fix: pass --target TARGET (the target model directory or its config.json)")
        resolved = read_draft_config(draft_cfg, target_cfg, file=str(cfg_path))
        n_layers = target_dims(target_cfg, str(target_file))[1]
        declared = WiringRow("no manifest: config.json read as", resolved.layer_ids,
                             resolved.provenance.get("convention", "?"), "declared")
        prov, messages, mdict = dict(resolved.provenance), list(resolved.messages), None
        messages.append(f"{draft}: no eagle3_manifest.json; the plugin would run stock wiring for this draft. Fix: "
                        f"sglang-eagle3-capture manifest write {draft} --layer-ids=... --target TARGET")
    readings = []
    for label, version in READINGS:
        c = stock_sglang_capture(draft_cfg, n_layers, version)
        readings.append(WiringRow(f"stock SGLang {label}", c.fed_layer_ids, _rule(c), _status(c.fed_layer_ids, c.problem, declared.layer_ids), c.problem))
    d = stock_sglang_capture({}, n_layers, SUPPORTED_READING)
    readings.append(WiringRow("stock default (no ids)", d.fed_layer_ids, _rule(d), _status(d.fed_layer_ids, d.problem, declared.layer_ids), d.problem))
    if manifest is not None:
        try:
            index = tensor_index(draft)
        except WeightsError as e:
            checks.append(f"fc width NOT checked: {e}")
        else:
            if "fc.weight" in index:
                check_fc_width(manifest, index["fc.weight"].shape[-1], where=f"{index['fc.weight'].file}: fc.weight")
                checks.append(f"fc.weight input width {index['fc.weight'].shape[-1]} = {len(manifest.layer_ids)} ids x "
                              f"hidden {manifest.target_hidden_size}")
            else:
                checks.append(f"fc width not checked: no fc.weight in {draft}")
    report = InspectReport(str(draft), declared, mdict, prov, messages, readings, checks, plugin_installed())
    _decide(report)
    return report


def _rule(c: Any) -> str:
    ids = "no eagle_config ids" if c.config_ids is None else f"eagle_config ids {list(c.config_ids)}"
    return f"{ids} -> {c.rule} -> loop indices {list(c.loop_indices)}"


def _decide(report: InspectReport) -> None:
    current = next(r for r in report.readings if r.name == f"stock SGLang {SUPPORTED_READING}")
    report.verdict = current.status
    want = f"layer ids {list(report.declared.layer_ids)} (HF {report.declared.hf_indices})"
    if current.status == "consistent":
        report.summary = f"stock SGLang {SUPPORTED_READING} feeds the fc exactly {want}"
    elif current.status == "crash":
        report.summary = f"stock SGLang {SUPPORTED_READING} would crash for this draft: {current.problem}"
    else:
        report.summary = (f"stock SGLang {SUPPORTED_READING} would MIS-WIRE this draft: it feeds layer ids "
                          f"{list(current.layer_ids)} (HF {current.hf_indices}) where the draft was trained on {want}")
    if current.status != "consistent":
        if report.manifest is not None and report.plugin_installed:
            report.summary += ("; the sglang-eagle3-capture plugin is installed and feeds the manifest's ids instead "
                               "(check the 'eagle3-capture:' log line at startup)")
        elif report.manifest is not None:
            report.summary += "; install sglang-eagle3-capture (its SGLang plugin reads the manifest) or convert the draft"
