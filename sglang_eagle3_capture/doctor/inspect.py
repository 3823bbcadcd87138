"""``inspect``: a draft's declared wiring next to what each release in :mod:`.release_table` feeds it; the verdict is
the serving release's (with the plugin when active here; with launch_server arguments, the server's own checks too).
Output: docs/troubleshooting.md section 1 and docs/setup-report.md."""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from importlib.metadata import entry_points
from pathlib import Path
from typing import Any, Mapping, Sequence

from ..core import launch, policy, releases
from ..core.checkpoint import draft_fc_in_features, fc_input_width, tensor_index, weights_present
from ..core.errors import AmbiguousLayerIds, Eagle3CaptureError, InputError
from ..core.families import Family, family_of
from ..core.layer_ids import hidden_state_indices
from ..core.manifest import MANIFEST_FILENAME, WRITE_HINT, check_fc_width, check_target, find_manifest
from ..core.stock import StockCapture, stock_sglang_capture
from ..core.target_config import load_target_config, target_dims
from . import deepstack, release_table
from .formats import DECIDE, load_draft_config, read_draft_config
from .readings import engine_capture
from .setup_args import pp_indices, setup_report

PLUGIN_ENTRY_POINT = ("sglang.srt.plugins", "eagle3_capture")


@dataclass(frozen=True)
class WiringRow:
    name: str
    layer_ids: tuple[int, ...]
    rule: str
    status: str  # "declared", "consistent", "mis-wired", "crash", "refused-at-startup"
    problem: str | None = None

    @property
    def hf_indices(self) -> list[int]:
        return hidden_state_indices(self.layer_ids)

    def to_dict(self) -> dict:
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
    serving_release: str = ""  # the release the verdict concerns
    ambiguous_readings: list = field(default_factory=list)  # formats.Reading, when ambiguous
    verdict: str = "consistent"  # or mis-wired, crash, refused-at-startup, refused, ambiguous, contradiction
    summary: str = ""
    plugin_active: bool = False  # the verdict is about a deployment with the plugin (False: stock SGLang)
    setup: Any = None  # setup_report.SetupReport, when launch_server arguments were given
    stock_outcome: str = ""  # without the plugin, every supported release: fed exactly, refuses, or mis-fed
    vllm_outcome: str = ""  # without the vLLM plugin, on every vLLM runner of the vLLM release table
    refusal: dict | None = None  # (file, field, problem, fix) of what the plugin would refuse at startup, if anything

    ok = property(lambda self: self.verdict == "consistent")
    ambiguous = property(lambda self: self.verdict == "ambiguous")  # the declared wiring cannot be read

    def to_dict(self) -> dict:
        return {"draft_dir": self.draft_dir, "manifest": self.manifest, "provenance": self.provenance,
                "declared": self.declared.to_dict(), "messages": self.messages,
                "stock_sglang": [r.to_dict() for r in self.readings], "checks": self.checks,
                "plugin_installed": self.plugin_installed, "serving_release": self.serving_release,
                "ambiguous_readings": [{"layer_ids": list(r.layer_ids), "trained_by": list(r.who)}
                                       for r in self.ambiguous_readings],
                "verdict": self.verdict, "summary": self.summary, "plugin_active": self.plugin_active,
                "setup": None if self.setup is None else self.setup.to_dict(), "stock_outcome": self.stock_outcome,
                "vllm_outcome": self.vllm_outcome, "refusal": self.refusal, "ok": self.ok}


def plugin_installed() -> bool:
    group, name = PLUGIN_ENTRY_POINT
    return any(ep.name == name for ep in entry_points(group=group))


def plugin_active(environ: Mapping[str, str] | None = None) -> bool:
    """Installed, and not left out by ``SGLANG_PLUGINS`` (a comma-separated whitelist; empty or unset loads all)."""
    environ = os.environ if environ is None else environ
    allowed = {x.strip() for x in environ.get("SGLANG_PLUGINS", "").split(",") if x.strip()}
    return plugin_installed() and (not allowed or PLUGIN_ENTRY_POINT[1] in allowed)


def _row(name: str, c: StockCapture, declared: tuple[int, ...]) -> WiringRow:
    key = "eagle_config ids" if c.engine == "SGLang" else "config ids"
    ids = f"no {key}" if c.config_ids is None else f"{key} {list(c.config_ids)}"
    rule = f"{ids} -> {c.rule} -> loop indices {list(c.loop_indices)}"
    if c.refuses_at_startup and not c.loop_indices:
        rule = ("eagle_config ids: the fail-closed object" if c.rule == "fail-closed" else
                f"{ids} -> {c.rule}" if c.engine == "SGLang" else c.rule)
    if c.mis_fed:  # it runs, but these ids' tensors are not what it feeds
        status = "mis-wired"
    elif c.problem:
        status = "refused-at-startup" if c.refuses_at_startup else "crash"
    else:
        status = "consistent" if tuple(c.fed_layer_ids) == tuple(declared) else "mis-wired"
    return WiringRow(name, c.fed_layer_ids, rule, status, c.mis_fed or c.problem)


def stock_rows(draft_cfg: dict, n_layers: int, family: Family, declared: tuple[int, ...],
               file: Any = None) -> list[WiringRow]:
    """One row per release in the table (oldest first), per other engine's reader (vLLM), then the no-ids default."""
    rows = [_row(f"stock SGLang {r.version}", stock_sglang_capture(draft_cfg, n_layers, family=family, release=r,
                                                                  file=file), declared)
            for r in release_table.all_releases()]
    rows += [_row(reader.name, engine_capture(draft_cfg, n_layers, family=family, reader=reader, file=file), declared)
             for reader in releases.other_engines()]
    return rows + [_row("stock default (no ids)", stock_sglang_capture({}, n_layers, family=family), declared)]


def inspect_draft(draft_dir: str | Path, target: str | Path | None = None, *, sglang_version: str | None = None,
                  trained_with: str | None = None, stock: bool = False,
                  launch_args: Sequence[str] | None = None) -> InspectReport:
    """``stock``: stock SGLang's verdict even where the plugin is active; ``launch_args``: launch_server arguments."""
    try:
        serving = releases.installed_or_newest() if sglang_version is None else release_table.get(sglang_version)
    except KeyError as e:
        raise InputError(None, "--sglang", f"{sglang_version}: {e.args[0]}", "name a release from that list") from None
    setup, served, stages = None, None, None
    if launch_args is not None:
        installed = releases.installed_sglang_version()
        if sglang_version is not None and sglang_version != installed:
            raise InputError(None, "--sglang", f"{sglang_version}, but the arguments after `--` are resolved by the "
                             f"installed SGLang {installed}", "drop --sglang, or inspect in an environment with "
                             f"SGLang {sglang_version}")
        setup, server_args = setup_report(launch_args, str(draft_dir), None if target is None else str(target),
                                          plugin=plugin_active() and not stock)
        served, stages = launch.read_launch(server_args, releases.installed_or_newest()), pp_indices()
        launch.check_launch(served)  # what SGLang accepts but cannot run: bad input, as the server refuses it
        target = served.model_path if target is None else target  # the same model (setup_args refuses another)
    draft = Path(draft_dir)
    cfg_path = draft / "config.json"
    draft_cfg, manifest, checks = load_draft_config(cfg_path), find_manifest(draft), []
    target_cfg, target_file = (None, None) if target is None else load_target_config(target)
    if manifest is not None:
        if target_cfg is not None:
            check_target(manifest, target_cfg, where=str(target_file))
            checks.append(f"target {target_file}: architecture family, layer count and hidden size match the manifest")
        arch, n_layers = manifest.target_architecture, manifest.target_num_hidden_layers
        declared = WiringRow(f"manifest ({manifest.path.name})", manifest.layer_ids, "as declared", "declared")
        prov, messages, mdict = dict(manifest.provenance), [], manifest.to_dict()
    else:
        if target_cfg is None:
            raise InputError(draft / MANIFEST_FILENAME, None, "no manifest, so the target's layer count is unknown",
                             "pass --target TARGET (the target model directory or its config.json)")
        arch, n_layers, hidden = target_dims(target_cfg, str(target_file))
        fc_width = draft_fc_in_features(draft)
        try:
            resolved = read_draft_config(draft_cfg, target_cfg, file=str(cfg_path), trained_with=trained_with,
                                         fc_in_features=fc_width)
        except AmbiguousLayerIds as e:
            return _ambiguous(draft, draft_cfg, arch, n_layers, serving, e)
        checks.append(_read_width_check(draft, resolved.layer_ids, hidden, fc_width, str(cfg_path)))
        declared = WiringRow("no manifest: config.json read as", resolved.layer_ids,
                             resolved.provenance.get("convention", "?"), "declared")
        prov, messages, mdict = dict(resolved.provenance), list(resolved.messages), None
        if prov.get("source") != "marked-eagle-config":  # marked ids the plugin feeds as declared (policy)
            messages.append(f"{draft}: no {MANIFEST_FILENAME}; the plugin would run stock wiring for this draft. Fix: "
                            f"{WRITE_HINT}")
    family = family_of(arch)
    if family is None:
        raise InputError(manifest.path if manifest is not None else target_file,
                         "target.architecture" if manifest is not None else "architectures",
                         f"{arch} has no target-family entry, so what stock SGLang feeds it is unknown",
                         "see docs/families.md for the supported families")
    readings = stock_rows(draft_cfg, n_layers, family, declared.layer_ids, str(cfg_path))
    if manifest is not None:
        checks.append(_fc_width_check(draft, manifest))
    report = InspectReport(str(draft), declared, mdict, prov, messages, readings, checks, plugin_installed(),
                           serving_release=serving.version, plugin_active=plugin_active() and not stock, setup=setup)
    deployment = launch.deployment(served, release=serving, draft_path=str(draft), manifest=manifest,
                                   draft_config=draft_cfg, target_config=target_cfg, architecture=arch,
                                   num_hidden_layers=n_layers, pp_indices=stages)
    refusal, feeds = plugin_outcome(deployment, draft_cfg, served, loader=report.plugin_active)
    if refusal is not None:
        report.refusal = {"file": refusal.file, "field": refusal.field, "problem": refusal.problem, "fix": refusal.fix}
    _decide(report, None if refusal is None else f"the sglang-eagle3-capture plugin refuses to start: {refusal}", feeds)
    report.stock_outcome = stock_outcome(readings)
    report.vllm_outcome = stock_outcome(readings, [r.name for r in releases.other_engines()], engine="vLLM")
    ds = deepstack.check(family, target_cfg, declared.layer_ids, prov, trained_with, serving)
    if ds is not None and report.verdict == "consistent":  # the ids are fed; which tensor each one names is not
        report.verdict = ds.verdict
        report.summary = f"{report.summary}; but {ds.summary}" if ds.verdict != "consistent" else report.summary
        report.ambiguous_readings = list(ds.readings) if ds.verdict == "ambiguous" else []
    if ds is not None:
        report.checks.append(f"deepstack: {ds.summary}" if ds.verdict == "consistent" else
                             f"deepstack layer ids {list(ds.affected)}: served {ds.served}, trained "
                             f"{ds.trained or 'unknown'}")
    if manifest is not None and "silently mis-fed" in report.stock_outcome + report.vllm_outcome:
        report.messages.append(f"without the plugin, stock SGLang or stock vLLM would feed this draft's fc other "
                               f"hidden states (SGLang: {report.stock_outcome}; vLLM: {report.vllm_outcome}). "
                               f"Fix: `sglang-eagle3-capture manifest write {draft} "
                               f"--layer-ids={','.join(map(str, manifest.layer_ids))} --target TARGET --force "
                               "--fail-closed` rewrites config.json so that it is fed exactly or refused at startup")
    return report


def stock_outcome(readings: Sequence[WiringRow], names: Sequence[str] | None = None, *, engine: str = "SGLang"
                  ) -> str:
    """What a server without the plugin does with the draft over the rows ``names`` (default: supported releases)."""
    if names is None:
        names = [f"stock SGLang {r.version}" for r in release_table.all_releases() if r.supported]
    words = {"consistent": "fed exactly", "refused-at-startup": "refuses at startup", "mis-wired": "silently mis-fed",
             "crash": "fails at the first forward"}
    by: dict[str, list[str]] = {}
    for r in (r for r in readings if r.name in set(names)):
        by.setdefault(words.get(r.status, r.status), []).append(r.name.removeprefix("stock SGLang "))
    if len(by) == 1:
        return f"{next(iter(by))} on every supported release" if engine == "SGLang" else \
            f"{next(iter(by))} on every runner of vLLM {', '.join(r.version for r in releases.vllm_releases())}"
    return "; ".join(f"{what} on {', '.join(versions)}" for what, versions in by.items())


def plugin_outcome(deployment: policy.Deployment, draft_cfg: Mapping, served: launch.Launch | None, *,
                   loader: bool) -> tuple[Eagle3CaptureError | None, tuple | None]:
    """``(refusal, layer ids)`` of the plugin at startup, by the server's own checks (the policy, then with ``loader``
    the loader's); a launch SGLang does not serve with its EAGLE worker never reaches the plugin: nothing refused."""
    if served is not None and not served.eagle_worker:
        return None, None
    try:
        decision = policy.decide(deployment)
        kind = launch.draft_class(draft_cfg, deployment.release)
        if loader and deployment.eagle3 and kind is not None:
            launch.check_draft(draft_cfg, deployment.draft, deployment.manifest, mla=kind == "mla",
                               server_window=None if served is None else served.draft_window,
                               read_weights=weights_present(Path(deployment.draft)))
    except Eagle3CaptureError as e:
        return e, None
    return None, decision.layer_ids


def _ambiguous(draft: Path, draft_cfg: dict, arch: str, n_layers: int, serving: releases.Release,
               error: AmbiguousLayerIds) -> InspectReport:
    family = family_of(arch)
    declared = WiringRow("no manifest: config.json ids", (), "ambiguous (see the readings)", "declared")
    rows = [WiringRow(w.name, w.layer_ids, w.rule, "crash" if w.problem and w.status != "mis-wired" else "n/a",
                      w.problem)
            for w in stock_rows(draft_cfg, n_layers, family, (), str(draft / "config.json"))
            ] if family is not None else []
    report = InspectReport(str(draft), declared, None, {}, [], rows, [], plugin_installed(),
                           serving_release=serving.version, ambiguous_readings=list(error.readings))
    report.verdict, report.summary = "ambiguous", ("the config's ids mean " + "; or ".join(
        r.describe() for r in error.readings) + f". Fix: {DECIDE}")
    return report


def _read_width_check(draft: Path, layer_ids: tuple, hidden: int, fc_width: int | None, cfg_file: str) -> str:
    """A line, or an InputError when the fc width contradicts the ids config.json reads as."""
    if fc_width is None:
        return f"fc width not checked: no fc.weight in {draft}"
    if fc_width != len(layer_ids) * hidden:
        raise InputError(cfg_file, None, f"reads as {len(layer_ids)} layer ids {list(layer_ids)}, but the draft's "
                         f"fc.weight input width is {fc_width} ({fc_width / hidden:g} x target hidden {hidden})",
                         "write the manifest with the ids the fc was trained on: `sglang-eagle3-capture manifest "
                         "write DRAFT --layer-ids=... --target TARGET`")
    return f"fc.weight input width {fc_width} = {len(layer_ids)} ids x hidden {hidden} (the ids config.json reads as)"


def _fc_width_check(draft: Path, manifest: Any) -> str:
    if not weights_present(draft):
        return f"fc width not checked: no weights in {draft}"
    index = tensor_index(draft)
    if "fc.weight" not in index:
        return f"fc width not checked: no fc.weight in {draft}"
    width = fc_input_width(index)
    check_fc_width(manifest, width, file=index['fc.weight'].file)
    return f"fc.weight input width {width} = {len(manifest.layer_ids)} ids x hidden {manifest.target_hidden_size}"


_SAFE = ("consistent", "refused-at-startup")  # what stock SGLang does that needs no plugin to prevent


def _decide(report: InspectReport, refusal: str | None, plugin_ids: tuple[int, ...] | None) -> None:
    """The verdict and summary: the serving release's stock row, then the plugin's outcome, then the launch's."""
    version, declared = report.serving_release, report.declared
    stock, want = f"stock SGLang {version}", f"layer ids {list(declared.layer_ids)} (HF {declared.hf_indices})"
    row = next(r for r in report.readings if r.name == stock)
    report.verdict = row.status
    if row.status == "consistent":
        report.summary = f"{stock} feeds the fc exactly {want}"
    elif row.status == "crash":
        report.summary = f"{stock} would crash for this draft: {row.problem}"
    elif row.status == "refused-at-startup":
        report.summary = (f"{stock} refuses to start with this draft, so it never feeds its fc other hidden states "
                          f"({row.problem})")
    elif row.problem:  # it feeds these ids' positions, but other tensors
        report.summary = f"{stock} would MIS-WIRE this draft: {row.problem}, where the draft was trained on {want}"
    else:
        report.summary = (f"{stock} would MIS-WIRE this draft: it feeds layer ids {list(row.layer_ids)} (HF "
                          f"{row.hf_indices}) where the draft was trained on {want}")
    if report.manifest is not None and row.status == "consistent":
        if refusal and report.plugin_installed:  # it refuses a declared-id deployment it cannot serve exactly
            report.summary += f"; but {refusal}"
    elif report.manifest is not None:
        if refusal is not None:
            report.summary += f"; {refusal}"
        elif report.plugin_installed:
            report.summary += ("; the sglang-eagle3-capture plugin is installed and feeds the manifest's ids instead "
                               "(check the 'eagle3-capture:' log line at startup)")
        else:
            report.summary += ("; install sglang-eagle3-capture (its SGLang plugin reads the manifest) or convert "
                               "the draft")
    if report.plugin_active and refusal is not None:
        report.verdict, report.summary = "refused", f"{refusal} (without the plugin: {report.summary})"
    elif report.plugin_active and plugin_ids is not None and tuple(plugin_ids) == tuple(declared.layer_ids):
        would = {"consistent": "feed the same", "crash": f"crash ({row.problem})",
                 "refused-at-startup": "refuse to start"}.get(
            row.status, f"MIS-WIRE it ({row.problem})" if row.problem else
            f"MIS-WIRE it with layer ids {list(row.layer_ids)} (HF {row.hf_indices})")
        report.verdict = "consistent"
        report.summary = (f"with the sglang-eagle3-capture plugin active here, SGLang {version} feeds the fc "
                          f"exactly {want}; without it stock SGLang {version} would {would}"
                          f"{'' if row.status in _SAFE else ', which the plugin prevents'} "
                          "(`inspect --stock` gives the stock verdict)")
    if report.setup is not None and report.setup.findings:
        first = report.setup.findings[0]
        more = f" (and {len(report.setup.findings) - 1} more)" if len(report.setup.findings) > 1 else ""
        report.summary += f"; the launch arguments: {first.line()}{more}"
        if report.verdict == "consistent":
            report.verdict = "contradiction"
