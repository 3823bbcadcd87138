"""The startup report (:mod:`.report`) from SGLang's objects at the target ``ModelRunner``'s resolution seam
(docs/setup-report.md): rank 0 logs and writes it; in strict mode every target process refuses. Imports no SGLang."""

from __future__ import annotations

import argparse
import inspect
import json
import os
import re
import sys
from pathlib import Path
from typing import Any, Mapping, Sequence

from ..core import releases, switches
from ..core.errors import Eagle3CaptureError
from ..core.launch import effective_value  # the one reading of a resolved setting (also inspect's)
from ..core.logs import get_logger
from ..core.releases.schema import Release
from ..core.userfiles import PrivateDirectory, write_file_atomic
from . import report as report_mod
from .report import FIELDS, SetupFacts, SetupReport, read_draft_facts

logger = get_logger(__name__)


def _plain(value: Any) -> Any:
    """A JSON-ready form of a ServerArgs value (enums and config objects as their text)."""
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    plain = value is None or isinstance(value, (str, int, float, bool))
    return value if plain else getattr(value, "name", None) or str(value)


def _cuda_graph(values: Mapping[str, Any]) -> bool | None:
    """On/off from SGLang's ``cuda_graph_config`` phases where the release has one, else ``disable_cuda_graph``."""
    cfg, flag = values.get("cuda_graph_config"), values.get("disable_cuda_graph")
    if cfg is not None:  # a phase that is not there is disabled
        return any(getattr(getattr(cfg, p, None), "backend", "disabled") != "disabled" for p in ("decode", "prefill"))
    return None if flag is None else not flag


def locate(source: str) -> str | None:
    """``sglang/srt/...py:LINE`` defining the resolution step ``source``: from the loaded modules, else from the
    installed SGLang's argument sources."""
    head, _, rest = source.partition(".")
    for name, module in list(sys.modules.items()):
        obj = vars(module).get(head) if name.startswith("sglang.srt.") and module is not None else None
        for part in rest.split(".") if obj is not None and rest else ():
            obj = getattr(obj, part, None)
        if not callable(obj) or getattr(obj, "__module__", None) != name:
            continue
        try:
            file, line = inspect.getsourcefile(obj), inspect.getsourcelines(obj)[1]
        except (OSError, TypeError):
            return name
        return f"{Path(file).as_posix().split('site-packages/', 1)[-1]}:{line}"
    paths = list(getattr(sys.modules.get("sglang.srt"), "__path__", None) or ())  # a namespace package
    root = Path(paths[0]) if paths else None
    wanted = re.compile(rf"^\s*def {re.escape(source.rsplit('.', 1)[-1])}\(")
    for path in (root / "server_args.py", *sorted((root / "arg_groups").glob("*.py"))) if root else ():
        try:
            lines = path.read_text(errors="replace").splitlines()
        except OSError:
            continue
        n = next((n for n, text in enumerate(lines, 1) if wanted.match(text)), None)
        if n:
            return f"sglang/srt/{path.relative_to(root).as_posix()}:{n}"
    return None


def requested_from_argv(server_args_class: Any, argv: Sequence[str]) -> dict[str, Any]:
    """The fields launch_server's parser reads from ``argv``, unresolved; {} for no command line (a Python Engine)."""
    if "--model-path" not in argv and "--model" not in argv:
        return {}
    parser = argparse.ArgumentParser(add_help=False)
    server_args_class.add_cli_args(parser)
    args, _ = parser.parse_known_args(list(argv))
    out = {f: getattr(args, f) for f in FIELDS if hasattr(args, f)}
    if hasattr(args, "disable_cuda_graph"):
        out["cuda_graph"] = False if args.disable_cuda_graph else None
    return out


def facts_from_server_args(server_args: Any, release: Release, *, draft_path: str | None, target_path: str | None,
                           plugin_active: bool, context_length: int | None = None,
                           requested: Mapping[str, Any] | None = None, notes: Sequence[str] = ()) -> SetupFacts:
    """From SGLang's record and raw inputs where the release keeps them, else from ``requested``."""
    record = None
    names = (*FIELDS, "cuda_graph_config", "disable_cuda_graph")
    if release.resolution_record:
        record = [(str(s), dict(d)) for s, d in getattr(server_args, "_resolved_overrides", None) or ()]
        raw = getattr(server_args, "_raw_input", None) or {}
        asked = {f: raw.get(f, getattr(server_args, f, None)) for f in names}
        asked["cuda_graph"] = False if asked.get("disable_cuda_graph") else None
    else:
        asked = dict(requested or {})
    effective = {f: effective_value(server_args, release, f) for f in names}
    effective["cuda_graph"] = _cuda_graph(effective)
    if context_length is not None and effective.get("context_length") is None:
        effective["context_length"] = context_length
    changed = {s for s, d in record or () if any(f in d for f in FIELDS)}
    sources = {s: where for s in changed if (where := locate(s))}

    def kept(values: Mapping[str, Any]) -> dict[str, Any]:
        return {f: _plain(v) for f, v in values.items() if f in FIELDS}

    return SetupFacts(release=release, requested=kept(asked), effective=kept(effective),
                      record=None if record is None else [(s, kept(d)) for s, d in record], sources=sources,
                      draft=read_draft_facts(draft_path, target_path), plugin_active=plugin_active, notes=notes)


def _ranks() -> tuple[int | None, ...]:
    """TP, PP and DP rank from SGLang's runtime context; None where not published yet."""
    context = sys.modules.get("sglang.srt.runtime_context")
    try:
        p = context.get_parallel()
        return tuple(getattr(p, n, None) for n in ("tp_rank", "pp_rank", "dp_rank"))
    except Exception:  # noqa: BLE001 - older releases raise until the groups exist, see core/releases/
        return (None, None, None)


def _write(report: SetupReport, environ: Mapping[str, str]) -> None:
    path = report_mod.report_path(environ)
    if path is None:
        return
    text = json.dumps(report.to_dict(), indent=2) + "\n"
    try:
        if switches.read(switches.REPORT, environ):
            path.parent.mkdir(parents=True, exist_ok=True)
            write_file_atomic(path, text)
        else:  # in the dump directory, as private as the dump (created 0700, a hostile one refused)
            with PrivateDirectory.open(path.parent.parent) as dump, dump.subdirectory(path.parent.name) as sub:
                sub.write(path.name, text)
    except (OSError, Eagle3CaptureError) as e:
        logger.warning("eagle3-capture: the setup report was not written to %s (%s); serving goes on. Fix: point "
                       "%s at a writable file", path, e, report_mod.REPORT_ENV)
        return
    logger.info("eagle3-capture: setup report written to %s", path)


def at_resolution(model_runner: Any, environ: Mapping[str, str] | None = None) -> SetupReport | None:
    """This target process's report (None: a draft worker, no speculation, or one WARNING); rank 0 logs, writes it."""
    if getattr(model_runner, "is_draft_worker", False):
        return None
    environ = os.environ if environ is None else environ
    try:
        server_args = model_runner.server_args
        release = releases.installed_or_newest()
        requested = None if release.resolution_record else requested_from_argv(type(server_args), sys.argv)
        from ..core.sglang.runtime import draft_model_path  # SGLang's runtime state; the doctor never needs it

        draft, model_config = draft_model_path(server_args), getattr(model_runner, "model_config", None)
        facts = facts_from_server_args(server_args, release, draft_path=draft,
                                       target_path=getattr(server_args, "model_path", None), plugin_active=True,
                                       context_length=getattr(model_config, "context_len", None), requested=requested)
        if not draft and not facts.effective.get("speculative_algorithm"):
            return None  # no speculation: nothing to report
        report = report_mod.build(facts)
    except Exception as e:  # noqa: BLE001 - metadata never stops a server
        logger.warning("eagle3-capture: no speculative setup report (%s: %s); serving goes on", type(e).__name__, e)
        return None
    if all(r in (None, 0) for r in _ranks()):
        for line in report.lines():
            logger.info("eagle3-capture: %s", line)
        if not report_mod.strict(environ):
            for f in report.findings:
                logger.warning("eagle3-capture: %s (set %s=1 to refuse it)", f.line(), report_mod.STRICT_ENV)
        _write(report, environ)
    return report


def refuse_if_strict(report: SetupReport | None, environ: Mapping[str, str] | None = None) -> None:
    if report is not None and report_mod.strict(os.environ if environ is None else environ) and \
            (error := report_mod.strict_refusal(report)):
        raise error
