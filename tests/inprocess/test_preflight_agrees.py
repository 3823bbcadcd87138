"""Issue 28: the preflight predicts the server. Every launch in the table goes through both, in this process:

- the server: SGLang's own ``prepare_server_args`` and ``resolve_once`` on the launch line (the ``--config`` merge
  included), SGLang's runtime context built from what it resolved, SGLang's ``ModelConfig`` and
  ``SpeculativeAlgorithm``, then the plugin's patched ``ModelRunner.init_spec_aux_hidden_state`` (its setup report,
  its resolution and policy) and its draft loader's checks on the draft config SGLang resolved (the class SGLang's
  registry picks);
- the preflight: ``inspect DRAFT -- LAUNCH LINE`` (doctor/inspect.py with doctor/setup_args.py).

They must agree on whether the server serves and, if not, on the file and field of the refusal; where it serves, on
the layer ids the plugin feeds, every reported setting (requested, effective, what changed it) and every finding.
A disagreement is a failure of this test, whichever side is wrong. The preflight-only contract (a model path other
than ``--target``, a hub id offline, a missing option value, no accelerator) is below the table.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import shutil
import socket
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from types import SimpleNamespace

import pytest

from fixtures.specs import SPECS
from sglang_eagle3_capture.core.errors import Eagle3CaptureError, InputError
from sglang_eagle3_capture.core.sglang import draft as draft_patch
from sglang_eagle3_capture.core.sglang import target as target_patch
from sglang_eagle3_capture.doctor.inspect import inspect_draft
from sglang_eagle3_capture.observe import sglang_report
from support import REPO
from support.cli import run

TINY = SPECS["tiny"].directory
DRAFT, TARGET = str(TINY / "draft"), str(TINY / "target")
CPU = ["--device", "cpu", "--attention-backend", "torch_native", "--skip-tokenizer-init"]
PATHS = ["--model-path", TARGET, "--speculative-draft-model-path", DRAFT]


def chain(steps, topk, tokens) -> list[str]:
    return ["--speculative-algorithm", "EAGLE3", "--speculative-num-steps", str(steps), "--speculative-eagle-topk",
            str(topk), "--speculative-num-draft-tokens", str(tokens)]


@dataclass(frozen=True)
class Outcome:
    """What a launch comes to: ``serves`` or ``bad-input`` (SGLang refuses the arguments) or ``refused`` (the
    plugin refuses, ``file``/``field`` naming why); where it serves, the ids fed, the settings and the findings."""

    status: str
    file: str | None = None
    field: str | None = None
    ids: tuple | None = None
    settings: tuple = ()
    findings: tuple = ()


def _report_parts(report) -> tuple[tuple, tuple]:
    if report is None:
        return (), ()
    settings = tuple((r["name"], repr(r["requested"]), repr(r["effective"]), r["changed_by"]) for r in report.settings)
    return settings, tuple((f.kind, f.field, f.file) for f in report.findings)


@contextlib.contextmanager
def _root_logger_kept():
    """prepare_server_args reconfigures the root logger (basicConfig(force=True)): put pytest's handlers back."""
    root = logging.getLogger()
    handlers, level = root.handlers[:], root.level
    try:
        yield
    finally:
        root.handlers[:] = handlers
        root.setLevel(level)


def server(argv: list[str]) -> Outcome:
    """The launch as the server meets it (module doc)."""
    from sglang.srt import runtime_context
    from sglang.srt.configs.model_config import ModelConfig
    from sglang.srt.model_executor.model_runner import ModelRunner
    from sglang.srt.models.registry import ModelRegistry
    from sglang.srt.server_args import prepare_server_args
    from sglang.srt.speculative.spec_info import SpeculativeAlgorithm

    try:
        with _root_logger_kept():
            server_args = prepare_server_args(list(argv))
        server_args.resolve_once()
    except (SystemExit, Exception):  # noqa: BLE001 - whatever SGLang raises, the server does not start
        return Outcome("bad-input")
    with runtime_context.use_context(runtime_context.create_context(server_args, role="test")), \
            target_patch.patched():
        spec = runtime_context.get_spec()
        runner = SimpleNamespace(server_args=server_args, model_config=ModelConfig.from_server_args(server_args),
                                 spec_algorithm=SpeculativeAlgorithm.from_string(spec.speculative_algorithm),
                                 is_draft_worker=False)
        report = sglang_report.at_resolution(runner)
        try:
            ModelRunner.init_spec_aux_hidden_state(runner)  # the plugin's resolution seam, patched
            declared = runner.spec_aux_config.eagle_aux_hidden_state_layer_ids
            draft_config = runner.spec_aux_config.draft_model_config
            if draft_config is not None and runner.spec_algorithm.is_eagle3():
                cls, _ = ModelRegistry.resolve_model_cls(draft_config.hf_config.architectures)
                if cls.__name__ in ("LlamaForCausalLMEagle3", "Eagle3DeepseekV2ForCausalLM"):  # the patched classes
                    draft_patch._draft_plan(draft_config.hf_config, cls.__name__ == "Eagle3DeepseekV2ForCausalLM")
        except Eagle3CaptureError as e:
            return Outcome("refused", e.file, e.field)
    ids = getattr(declared, "layer_ids", None)
    return Outcome("serves", ids=None if ids is None else tuple(ids), **_named(report))


def _named(report) -> dict:
    settings, findings = _report_parts(report)
    return {"settings": settings, "findings": findings}


def preflight(argv: list[str], draft: str) -> Outcome:
    """``inspect DRAFT -- LAUNCH LINE``."""
    try:
        r = inspect_draft(draft, None, launch_args=list(argv))
    except InputError as e:
        if e.file is None:  # an option of the launch line: SGLang refuses the arguments
            return Outcome("bad-input")
        return Outcome("refused", e.file, e.field)
    except Eagle3CaptureError as e:
        return Outcome("refused", e.file, e.field)
    if r.refusal is not None:
        return Outcome("refused", r.refusal["file"], r.refusal["field"])
    fed = tuple(r.declared.layer_ids) if r.plugin_active and r.verdict in ("consistent", "contradiction") else None
    return Outcome("serves", ids=fed, **_named(r.setup))


@pytest.fixture(autouse=True)
def _plugin_active(monkeypatch):
    monkeypatch.delenv("SGLANG_PLUGINS", raising=False)
    monkeypatch.delenv("SGLANG_EAGLE3_CAPTURE_STRICT", raising=False)
    monkeypatch.setattr("sglang_eagle3_capture.doctor.inspect.plugin_installed", lambda: True)


@pytest.fixture(scope="module")
def edited_draft(tmp_path_factory) -> str:
    """The bundled draft with an edited num_aux_hidden_states (2 for its 3 ids): the plugin's draft loader refuses."""
    d = tmp_path_factory.mktemp("edited") / "draft"
    shutil.copytree(DRAFT, d)
    cfg = json.loads((d / "config.json").read_text())
    cfg["num_aux_hidden_states"] = 2
    (d / "config.json").write_text(json.dumps(cfg))
    return str(d)


def _yaml(tmp_path: Path, lines: dict) -> str:
    path = tmp_path / "launch.yaml"
    path.write_text("".join(f"{k}: {v}\n" for k, v in lines.items()))
    return str(path)


# name -> (launch line builder(tmp_path, edited draft), the draft it serves, what both must come to (a sanity anchor:
# agreement alone would pass two sides that are wrong the same way))
LAUNCHES = {
    "the consistent chain": (lambda t, e: [*CPU, *PATHS, *chain(1, 1, 2)], None, "serves"),
    "the case behind the product (4 draft tokens rewritten to 2)": (lambda t, e: [*CPU, *PATHS, *chain(1, 1, 4)],
                                                                     None, "serves"),
    "--config holding the chain": (lambda t, e: [*PATHS, "--config", _yaml(t, {
        "device": "cpu", "attention-backend": "torch_native", "skip-tokenizer-init": "true",
        "speculative-algorithm": "EAGLE3", "speculative-num-steps": 1, "speculative-eagle-topk": 1,
        "speculative-num-draft-tokens": 4})], None, "serves"),
    "--config holding the model and draft paths": (lambda t, e: [*CPU, *chain(1, 1, 2), "--config", _yaml(t, {
        "model-path": TARGET, "speculative-draft-model-path": DRAFT})], None, "serves"),
    "--config overridden on the command line": (lambda t, e: [*CPU, *PATHS, "--config", _yaml(t, {
        "speculative-algorithm": "EAGLE3", "speculative-num-steps": 1, "speculative-eagle-topk": 1,
        "speculative-num-draft-tokens": 4}), "--speculative-num-draft-tokens", "2"], None, "serves"),
    "negative steps": (lambda t, e: [*CPU, *PATHS, *chain(-1, 1, 2)], None, "refused"),
    "topk 0": (lambda t, e: [*CPU, *PATHS, *chain(1, 0, 2)], None, "refused"),
    "more draft tokens than the tree has candidates": (lambda t, e: [*CPU, *PATHS, *chain(2, 2, 8)], None,
                                                       "refused"),
    "--config with topk 0": (lambda t, e: [*CPU, *PATHS, *chain(1, 1, 2), "--config", _yaml(t, {
        "speculative-eagle-topk": 0})], None, "serves"),  # the command line wins over the file
    "EAGLE with the EAGLE-3 draft": (lambda t, e: [*CPU, *PATHS, "--speculative-algorithm", "EAGLE",
                                                   "--speculative-num-steps", "1", "--speculative-eagle-topk", "1",
                                                   "--speculative-num-draft-tokens", "2"], None, "refused"),
    "no speculative algorithm": (lambda t, e: [*CPU, *PATHS], None, "serves"),
    "an edited num_aux_hidden_states": (lambda t, e: [*CPU, "--model-path", TARGET, "--speculative-draft-model-path",
                                                      e, *chain(1, 1, 2)], "edited", "refused"),
    "two-batch overlap": (lambda t, e: [*CPU, *PATHS, *chain(1, 1, 2), "--enable-two-batch-overlap"], None, None),
    "no --device on a machine SGLang finds no accelerator on": (lambda t, e: [*PATHS, *chain(1, 1, 2)], None, None),
}


@pytest.mark.parametrize("name", LAUNCHES)
def test_the_preflight_and_the_server_agree(name, tmp_path, edited_draft):
    build, which, anchor = LAUNCHES[name]
    argv = build(tmp_path, edited_draft)
    draft = edited_draft if which == "edited" else DRAFT
    on_server, on_preflight = server(argv), preflight(argv, draft)
    assert on_preflight == on_server
    if anchor is not None:
        assert on_server.status == anchor, on_server


def test_the_table_can_tell_the_sides_apart(tmp_path, edited_draft):
    """The comparison sees a setting, a finding and a refusal: a preflight that ignored --config would differ."""
    argv = LAUNCHES["--config holding the chain"][0](tmp_path, edited_draft)
    merged = server(argv)
    ignored = server([a for a in argv if a not in ("--config", argv[argv.index("--config") + 1])] + CPU)
    assert merged.findings and merged != ignored
    assert server(LAUNCHES["topk 0"][0](tmp_path, edited_draft)).field == "--speculative-eagle-topk"
    refused = server(LAUNCHES["an edited num_aux_hidden_states"][0](tmp_path, edited_draft))
    assert (refused.file, refused.field) == (str(Path(edited_draft) / "config.json"), "num_aux_hidden_states")


# ---- what only the preflight is asked --------------------------------------------------------------------------------

def test_a_model_path_other_than_the_target_is_refused_naming_it(capsys):
    other = SPECS["tiny-llama"].directory / "target"
    rc, _, err = run(capsys, "inspect", DRAFT, "--target", TARGET, "--", *CPU, "--model-path", other,
                     *chain(1, 1, 2))
    assert rc == 2 and "--model-path" in err
    with pytest.raises(InputError) as e:
        inspect_draft(DRAFT, TARGET, launch_args=[*CPU, "--model-path", str(other), *chain(1, 1, 2)])
    assert e.value.field == "--model-path"
    r = inspect_draft(DRAFT, None, launch_args=[*CPU, "--model-path", TARGET, *chain(1, 1, 2)])  # the launch's own
    assert r.verdict == "consistent"


def test_a_hub_id_is_refused_offline_without_a_network_request(monkeypatch, tmp_path, capsys):
    tried = []
    monkeypatch.setattr(socket.socket, "connect", lambda self, address: tried.append(address))
    monkeypatch.setattr(socket, "getaddrinfo", lambda *a, **k: tried.append(a) or [])
    hub = "meta-llama/Llama-3.1-8B"
    for launch in ([*CPU, "--model-path", hub, *chain(1, 1, 2)],
                   [*CPU, *chain(1, 1, 2), "--config", _yaml(tmp_path, {"model-path": hub})]):
        with pytest.raises(InputError) as e:
            inspect_draft(DRAFT, None, launch_args=launch)
        assert e.value.field == "--model-path" and not tried
        rc, _, err = run(capsys, "inspect", DRAFT, "--", *launch)
        assert rc == 2 and not tried and "Retry" not in err


@pytest.mark.parametrize("option", ["--model-path", "--speculative-draft-model-path", "--config",
                                    "--speculative-num-steps"])
def test_a_missing_option_value_is_one_usage_line_of_this_cli(capsys, option):
    rc, out, err = run(capsys, "inspect", DRAFT, "--target", TARGET, "--", *CPU, *chain(1, 1, 2), option)
    lines = [line for line in err.splitlines() if "warning:" not in line]
    assert rc == 2 and out == "" and len(lines) == 1 and lines[0].startswith("sglang-eagle3-capture: error:")
    assert "usage:" not in err


def test_no_accelerator_and_no_device_is_bad_input_not_a_bug():
    """In a process without this suite's CPU runtime (SGLANG_USE_CPU_ENGINE makes SGLang's platform the CPU), as a
    user runs it: SGLang finds no accelerator to default --device to, and says so; the CLI exits 2, never 70."""
    import torch

    if torch.cuda.is_available():
        pytest.skip("this machine has an accelerator: SGLang resolves the device")
    import sglang_cpu_patches

    env = {k: v for k, v in os.environ.items() if k not in sglang_cpu_patches.CPU_ENV}
    env["PYTHONPATH"] = str(REPO)  # this checkout's package, without cpu_runtime/
    done = subprocess.run([sys.executable, "-m", "sglang_eagle3_capture", "inspect", DRAFT, "--target", TARGET, "--",
                           *chain(1, 1, 2)], env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 2 and "internal error" not in done.stderr, done.stderr[-2000:]
    assert done.stdout == ""
