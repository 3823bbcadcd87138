"""plugin.register(): SGLang's entry point finds it; idempotent; lazy; refuses what it cannot patch at startup."""

import json
import logging
import subprocess
import sys

import pytest

import sglang_cpu_patches
from sglang_eagle3_capture import draft_head, patch, plugin
from sglang_eagle3_capture.wiring import WiringError


@pytest.fixture(autouse=True)
def _clean():
    patch.revert()
    draft_head.revert_draft_head_patch()
    yield
    patch.revert()
    draft_head.revert_draft_head_patch()


def test_sglang_discovers_the_entry_point_and_honours_sglang_plugins(monkeypatch):
    from sglang.srt.plugins import GENERAL_PLUGINS_GROUP, load_plugins_by_group

    monkeypatch.setenv("SGLANG_PLUGINS", "eagle3_capture")
    found = load_plugins_by_group(GENERAL_PLUGINS_GROUP)
    assert found["eagle3_capture"][0] is plugin.register
    assert found["eagle3_capture"][1] == "sglang-eagle3-capture"
    monkeypatch.setenv("SGLANG_PLUGINS", "some_other_plugin")
    assert "eagle3_capture" not in load_plugins_by_group(GENERAL_PLUGINS_GROUP)


def test_register_is_idempotent_and_logs_once(caplog):
    import sglang.srt.model_executor.model_runner_components.spec_aux_hidden_state  # noqa: F401 (already imported)

    with caplog.at_level(logging.INFO, logger="sglang_eagle3_capture"):
        plugin.register()
        plugin.register()
    assert patch.is_patched() and draft_head.is_draft_head_patched()
    lines = [r.getMessage() for r in caplog.records
             if r.name == "sglang_eagle3_capture.plugin" and "eagle3-capture: patched" in r.getMessage()]
    assert len(lines) == 1
    assert "DeepseekV2ForCausalLM.set_eagle3_layers_to_capture" in lines[0] and "draft-head loader" in lines[0]
    assert "(sglang 0.5.23, pid " in lines[0]
    assert "tp_rank" in lines[0]


LAZY = r"""
import json, logging, sys
logging.basicConfig(level=logging.INFO, stream=sys.stdout, format="LOG %(message)s")
from sglang_eagle3_capture import draft_head, patch, plugin
from sglang.srt.plugins import load_plugins
load_plugins()  # what every SGLang process runs first
plugin.register()  # a second call, as a launcher calling load_plugins twice would
hooks = sum(type(f).__name__ == "_RunAfterImport" for f in sys.meta_path)
before = {"hooks": hooks, "patched": patch.is_patched(),
          "model_code": [m for m in ("sglang.srt.models.deepseek_v2", plugin.TRIGGER_MODULE) if m in sys.modules]}
import sglang.srt.model_executor.model_runner  # what a scheduler imports before building its ModelRunner
after = {"hooks": sum(type(f).__name__ == "_RunAfterImport" for f in sys.meta_path), "patched": patch.is_patched(),
         "draft_head": draft_head.is_draft_head_patched()}
plugin.register()
print("RESULT " + json.dumps({"before": before, "after": after, "still": patch.is_patched()}))
"""


def test_register_patches_only_processes_that_build_a_model_runner():
    """A fresh interpreter, as SGLang's spawned processes are: register() imports no model code; the patch
    lands when the ModelRunner components are imported, once."""
    env = {**sglang_cpu_patches.cpu_env(), "SGLANG_PLUGINS": "eagle3_capture"}
    proc = subprocess.run([sys.executable, "-c", LAZY], env=env, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    result = json.loads([line for line in proc.stdout.splitlines() if line.startswith("RESULT ")][0][7:])
    assert result["before"] == {"hooks": 1, "patched": False, "model_code": []}
    assert result["after"] == {"hooks": 0, "patched": True, "draft_head": True} and result["still"] is True
    patched_lines = [line for line in proc.stdout.splitlines() if "eagle3-capture: patched" in line
                     and "tp_rank" in line]
    assert len(patched_lines) == 1 and "sglang 0.5.23" in patched_lines[0]


DEFERRED_GUARD = r"""
import json
from sglang_eagle3_capture import _compat, patch, plugin
_compat.installed_sglang_version = lambda: "0.6.0"
try:
    plugin.register()
except _compat.UnsupportedSGLangVersion:
    pass  # SGLang's load_plugins logs and swallows it
from sglang.srt.model_executor.model_runner_components import spec_aux_hidden_state as m
import sglang.srt.model_executor.model_runner  # what a scheduler imports: the trigger runs the guard now
guard = m._resolve_eagle_aux_hidden_state  # apply_guard's wrapper (functools.wraps sets __wrapped__)
print("RESULT " + json.dumps({"guarded": hasattr(guard, "__wrapped__"), "patched": patch.is_patched()}))
"""


def test_unsupported_sglang_guard_is_installed_when_the_model_runner_is_imported_later():
    """In SGLang's own processes register() runs before the ModelRunner modules are imported, so the guard is
    installed later, by the import trigger, after register() has raised."""
    env = {**sglang_cpu_patches.cpu_env(), "SGLANG_PLUGINS": "eagle3_capture"}
    proc = subprocess.run([sys.executable, "-c", DEFERRED_GUARD], env=env, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    result = json.loads([line for line in proc.stdout.splitlines() if line.startswith("RESULT ")][0][7:])
    assert result == {"guarded": True, "patched": False}


def _resolve_eagle3(runner, draft):
    from sglang.srt.model_executor.model_runner_components.spec_aux_hidden_state import (
        resolve_spec_aux_hidden_state_config,
    )
    from sglang.srt.runtime_context import get_spec
    from sglang.srt.speculative.spec_info import SpeculativeAlgorithm

    with get_spec().override(speculative_draft_model_path=str(draft)):
        return resolve_spec_aux_hidden_state_config(
            server_args=runner.model_runner.server_args, model_config=runner.model_runner.model_config,
            spec_algorithm=SpeculativeAlgorithm.EAGLE3, is_draft_worker=False)


def test_unsupported_sglang_is_refused_at_startup(runner, tiny_draft_dir, monkeypatch):
    from sglang_eagle3_capture import _compat

    monkeypatch.setattr(_compat, "installed_sglang_version", lambda: "0.6.0")
    with pytest.raises(_compat.UnsupportedSGLangVersion):
        plugin.register()  # SGLang's load_plugins would log and swallow this ...
    assert not patch.is_patched()
    with pytest.raises(WiringError) as e:  # ... so the target's startup refuses instead
        _resolve_eagle3(runner, tiny_draft_dir)
    msg = str(e.value)
    assert "refuses EAGLE-3 on DeepseekV3ForCausalLM" in msg and "sglang 0.6.0 is not supported" in msg
    assert "pip install sglang==0.5.23" in msg and "SGLANG_PLUGINS" in msg


def test_a_patch_that_does_not_fit_is_refused_at_startup(runner, tiny_draft_dir, monkeypatch, caplog):
    from sglang.srt.models.deepseek_v2 import DeepseekV2ForCausalLM

    def set_eagle3_layers_to_capture(self, layer_ids, extra):  # a different SGLang's shape
        raise AssertionError

    monkeypatch.setattr(DeepseekV2ForCausalLM, "set_eagle3_layers_to_capture", set_eagle3_layers_to_capture)
    with caplog.at_level(logging.ERROR, logger="sglang_eagle3_capture"):
        plugin.register()  # logs; load_plugins would go on either way
    assert not patch.is_patched()
    assert any("target capture not patched" in r.getMessage() and "startup guard installed" in r.getMessage()
               for r in caplog.records)
    with pytest.raises(WiringError, match="the capture patch does not fit this SGLang .*set_eagle3_layers_to_capture"):
        _resolve_eagle3(runner, tiny_draft_dir)
