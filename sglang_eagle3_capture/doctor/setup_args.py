"""``inspect DRAFT --target T -- ARGS``: the launch_server arguments resolved by the installed SGLang's own parser
(``ServerArgs.add_cli_args``, ``from_cli_args`` and its resolution), read into the same startup report the server
logs (:mod:`sglang_eagle3_capture.observe.report`). SGLang is imported here only, and only when arguments are given.

``--model-path`` and ``--speculative-draft-model-path`` default to ``--target`` and ``DRAFT``; an argument that names
another draft is refused. What SGLang logs while resolving (its WARNINGs name the rule it applied) is kept with the
report. SGLang refusing the arguments is bad input (exit 2, its own message).
"""

from __future__ import annotations

import argparse
import contextlib
import io
import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Sequence

from ..core import releases
from ..core.errors import UsageError, brief, cut, shown
from ..observe.report import FIELDS, SetupReport, build
from ..observe.sglang_report import facts_from_server_args, requested_from_argv

FIX = "give the arguments exactly as launch_server takes them, after `--`"


@dataclass
class Resolved:
    """The resolved ``ServerArgs`` and what SGLang said while resolving it."""

    server_args: Any
    notes: list[str]


class _Notes(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        text = record.getMessage()
        if any(f in text for f in FIELDS):
            self.lines.append(cut(shown(text), 300))


def _with_paths(argv: Sequence[str], draft: str, target: str | None) -> list[str]:
    argv = list(argv)
    given = argparse.ArgumentParser(add_help=False)
    given.add_argument("--model-path", "--model")
    given.add_argument("--speculative-draft-model-path")
    known, _ = given.parse_known_args(argv)
    if known.speculative_draft_model_path is None:
        argv += ["--speculative-draft-model-path", str(draft)]
    elif Path(known.speculative_draft_model_path).resolve() != Path(draft).resolve():
        raise UsageError(None, "--speculative-draft-model-path", f"{brief(known.speculative_draft_model_path)} is not "
                         f"the draft being inspected ({brief(str(draft))})", "drop it after `--` (DRAFT is used) or "
                         "inspect that draft")
    if known.model_path is None:
        if target is None:
            raise UsageError(None, "--target", "no target: the launch_server arguments need --model-path",
                             "pass --target TARGET (or --model-path after `--`)")
        argv += ["--model-path", str(Path(target).parent if Path(target).is_file() else target)]
    return argv


def resolve(argv: Sequence[str], draft: str, target: str | None) -> Resolved:
    """Parse and resolve ``argv`` as launch_server would (module doc)."""
    from sglang.srt.server_args import ServerArgs

    argv = _with_paths(argv, draft, target)
    parser = argparse.ArgumentParser(prog="launch_server", add_help=False, exit_on_error=False)
    ServerArgs.add_cli_args(parser)
    notes, err = _Notes(), io.StringIO()
    root = logging.getLogger()
    root.addHandler(notes)
    try:
        with contextlib.redirect_stderr(err):
            args = parser.parse_args(argv)
            server_args = ServerArgs.from_cli_args(args)
            if hasattr(server_args, "resolve_once"):
                server_args.resolve_once()
    except SystemExit:
        said = (err.getvalue().strip().splitlines() or ["it exited"])[-1]
        raise UsageError(None, "--", f"launch_server's parser refuses the arguments: {cut(shown(said), 300)}",
                         FIX) from None
    except (argparse.ArgumentError, ValueError, TypeError, AssertionError, OSError) as e:
        raise UsageError(None, "--", f"SGLang {releases.installed_sglang_version()} refuses the arguments: "
                         f"{type(e).__name__}: {cut(shown(e), 300)}", FIX) from None
    finally:
        root.removeHandler(notes)
    return Resolved(server_args, notes.lines)


def setup_report(argv: Sequence[str], draft: str, target: str | None, *, plugin: bool) -> tuple[SetupReport, Any]:
    """The startup report SGLang would log for ``argv`` (resolved here), and the resolved ``ServerArgs``."""
    release = releases.installed_or_newest()
    resolved = resolve(argv, draft, target)
    sa = resolved.server_args
    requested = None if release.resolution_record else \
        requested_from_argv(type(sa), _with_paths(argv, draft, target))
    facts = facts_from_server_args(sa, release, draft_path=getattr(sa, "speculative_draft_model_path", None),
                                   target_path=getattr(sa, "model_path", None), plugin_active=plugin,
                                   requested=requested, notes=resolved.notes)
    return build(facts), sa
