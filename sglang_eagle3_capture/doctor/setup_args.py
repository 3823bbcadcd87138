"""``inspect DRAFT --target T -- ARGS``: the launch_server arguments resolved as the server resolves them (SGLang's own
parser, ``prepare_server_args``, ``ServerArgs.resolve_once``) into its startup report (docs/setup-report.md). Offline:
another draft or target path, or a model path not on this machine, is refused; so is what SGLang refuses (exit 2)."""

from __future__ import annotations

import argparse
import contextlib
import io
import logging
from pathlib import Path
from typing import Any, NamedTuple, Sequence

from ..core import releases
from ..core.errors import InputError, brief, cut, shown
from ..observe.report import FIELDS, SetupReport, build
from ..observe.sglang_report import facts_from_server_args, requested_from_argv

FIX = "give the arguments exactly as launch_server takes them, after `--`"
DEVICE_FIX = ("; a launch without --device resolves for the accelerator SGLang finds on this machine: pass the "
              "server's --device after `--`")


class Resolved(NamedTuple):
    server_args: Any
    notes: list[str]  # SGLang's WARNINGs while resolving that name a reported field
    argv: list[str]  # the arguments it resolved


def _parser() -> argparse.ArgumentParser:
    """SGLang's own launch_server parser, raising instead of printing; ``--model-path`` optional (``--target``)."""
    from sglang.srt.server_args import ServerArgs

    parser = argparse.ArgumentParser(prog="launch_server", add_help=False, exit_on_error=False)
    ServerArgs.add_cli_args(parser)
    for action in parser._actions:
        if action.dest == "model_path":
            action.required = False
    return parser


@contextlib.contextmanager
def _sglang_speaking(notes: list[str]):
    """While SGLang parses and resolves: its stderr kept (the last line is its parser's error), its WARNINGs that name
    a field noted (on SGLang's own logger, which ``prepare_server_args``'s ``basicConfig(force=True)`` leaves alone)."""
    def emit(record: logging.LogRecord) -> None:
        if any(f in (text := record.getMessage()) for f in FIELDS):
            notes.append(cut(shown(text), 300))

    handler, err = logging.Handler(logging.WARNING), io.StringIO()
    handler.emit = emit
    logging.getLogger("sglang").addHandler(handler)
    try:
        with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
            yield err
    finally:
        logging.getLogger("sglang").removeHandler(handler)


@contextlib.contextmanager
def _root_logger_kept():
    """The root logger as it was, after ``prepare_server_args``'s ``basicConfig(force=True)`` dropped its handlers."""
    root = logging.getLogger()
    handlers, level = root.handlers[:], root.level
    try:
        yield
    finally:
        root.handlers[:] = handlers
        root.setLevel(level)


def _merged(argv: list[str], parser: argparse.ArgumentParser) -> list[str]:
    """``argv`` with its ``--config`` YAML merged as ``prepare_server_args`` merges it (where the release can)."""
    if "--config" not in argv:
        return argv
    try:
        from sglang.srt.utils.server_args_config_parser import ConfigArgumentMerger
    except ImportError:
        return argv
    try:
        return list(ConfigArgumentMerger(parser).merge_config_with_args(list(argv)))
    except Exception as e:  # noqa: BLE001 - SGLang's merger raises ValueError, yaml's errors, OSError
        raise InputError(None, "--config", f"SGLang cannot merge it: {type(e).__name__}: {cut(shown(e), 300)}",
                         "pass a YAML file of launch_server options (keys as the flags, without --)") from None


def _refused(said: str | io.StringIO) -> InputError:
    """The parser's refusal; ``said``: its message, or its stderr (the last line is the error)."""
    if isinstance(said, io.StringIO):
        said = (said.getvalue().strip().splitlines() or ["it exited"])[-1]
    return InputError(None, "--", f"launch_server's parser refuses the arguments: {cut(shown(said), 300)}", FIX)


def _parse(parser: argparse.ArgumentParser, argv: list[str], err: io.StringIO) -> argparse.Namespace:
    try:
        return parser.parse_args(argv)
    except SystemExit:
        raise _refused(err) from None
    except argparse.ArgumentError as e:
        raise _refused(str(e)) from None


def _with_paths(argv: list[str], given: argparse.Namespace, draft: str, target: str | None) -> list[str]:
    """``argv`` with ``DRAFT`` and ``--target`` as the draft and model paths where it names none."""
    def same(a: str, b: str) -> bool:
        return Path(a).resolve() == Path(b).resolve()

    argv = list(argv)
    if given.speculative_draft_model_path is None:
        argv += ["--speculative-draft-model-path", str(draft)]
    elif not same(given.speculative_draft_model_path, draft):
        raise InputError(None, "--speculative-draft-model-path", f"{brief(given.speculative_draft_model_path)} is not "
                         f"the draft being inspected ({brief(str(draft))})", "drop it after `--` (DRAFT is used) or "
                         "inspect that draft")
    target_dir = None if target is None else str(Path(target).parent if Path(target).is_file() else target)
    model = given.model_path
    if model is None:
        if target_dir is None:
            raise InputError(None, "--target", "no target: the launch_server arguments need --model-path",
                             "pass --target TARGET (or --model-path after `--`)")
        argv += ["--model-path", target_dir]
    elif not Path(model).exists():
        raise InputError(None, "--model-path", f"{brief(model)} is not a path on this machine (a hub id?): inspect "
                         "resolves a launch offline and never downloads", "pass the model's local directory (e.g. "
                         "the snapshot `huggingface-cli download ID` prints) as --model-path or --target")
    elif target_dir is not None and not same(model, target_dir):
        raise InputError(None, "--model-path", f"{brief(model)} is not the target being inspected "
                         f"({brief(target_dir)}): the server would load {brief(model)}", "drop --target (the "
                         "launch's --model-path is the target), or pass the same model to both")
    return argv


def resolve(argv: Sequence[str], draft: str, target: str | None) -> Resolved:
    from sglang.srt import server_args as sglang_server_args

    notes: list[str] = []
    parser = _parser()
    with _sglang_speaking(notes) as err:
        merged = _merged(list(argv), parser)
        given = _parse(parser, merged, err)
        merged = _with_paths(merged, given, draft, target)
        try:
            prepare = getattr(sglang_server_args, "prepare_server_args", None)
            with _root_logger_kept():
                server_args = (prepare(merged) if prepare is not None else
                               sglang_server_args.ServerArgs.from_cli_args(_parse(parser, merged, err)))
            if hasattr(server_args, "resolve_once"):
                server_args.resolve_once()
        except SystemExit:
            raise _refused(err) from None
        except Exception as e:  # noqa: BLE001 - whatever SGLang's resolution raises, the server would fail the same
            raise InputError(None, "--", f"SGLang {releases.installed_sglang_version()} refuses the arguments: "
                             f"{type(e).__name__}: {cut(shown(e), 300)}",
                             FIX + (DEVICE_FIX if given.device is None else "")) from None
    return Resolved(server_args, notes, merged)


def pp_indices() -> Any:
    """SGLang's ``get_pp_indices`` (the layers of a pipeline stage), as the server's resolution seam uses it."""
    from sglang.srt.distributed.utils import get_pp_indices

    return get_pp_indices


def setup_report(argv: Sequence[str], draft: str, target: str | None, *, plugin: bool) -> tuple[SetupReport, Any]:
    """The startup report SGLang would log for ``argv`` (resolved here), and the resolved ``ServerArgs``."""
    release = releases.installed_or_newest()
    sa, notes, merged = resolve(argv, draft, target)
    from sglang.srt.configs.model_config import ModelConfig

    try:  # the context length the server's target ModelRunner runs
        context_length = ModelConfig.from_server_args(sa).context_len
    except Exception:  # noqa: BLE001 - not known, as the server's report would say without a runner
        context_length = None
    requested = None if release.resolution_record else requested_from_argv(type(sa), merged)
    facts = facts_from_server_args(sa, release, draft_path=getattr(sa, "speculative_draft_model_path", None),
                                   target_path=getattr(sa, "model_path", None), plugin_active=plugin,
                                   context_length=context_length, requested=requested, notes=notes)
    return build(facts), sa
