"""core/sglang/plugin.py's register() in fresh interpreters, as SGLang's spawned processes are: it imports no model
code, and the patch (or, for an unsupported SGLang, the startup guard) lands when the ModelRunner components are
imported."""

import json
import subprocess
import sys

import sglang_cpu_patches

from sglang_eagle3_capture.core import releases

LAZY = r"""
import json, logging, sys
logging.basicConfig(level=logging.INFO, stream=sys.stdout, format="LOG %(message)s")
from sglang_eagle3_capture.core import after_import, releases
from sglang_eagle3_capture.core.sglang import draft, plugin, target
from sglang.srt.plugins import load_plugins
TRIGGER = releases.check_sglang_version().trigger_module
def hooks():  # actions armed for the trigger module (the CPU runtime's sitecustomize arms others)
    return sum(len(f.pending.get(TRIGGER, ())) for f in sys.meta_path if isinstance(f, after_import._AfterImportFinder))
load_plugins()  # what every SGLang process runs first
plugin.register()  # a second call, as a launcher calling load_plugins twice would
before = {"hooks": hooks(), "patched": target.is_patched(),
          "model_code": [m for m in ("sglang.srt.models.deepseek_v2", TRIGGER) if m in sys.modules]}
import sglang.srt.model_executor.model_runner  # what a scheduler imports before building its ModelRunner
after = {"hooks": hooks(), "patched": target.is_patched(), "draft_head": draft.is_draft_head_patched()}
plugin.register()
print("RESULT " + json.dumps({"before": before, "after": after, "still": target.is_patched()}))
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
    assert len(patched_lines) == 1 and f"sglang {releases.installed_sglang_version()}" in patched_lines[0]


DEFERRED_GUARD = r"""
import json
from sglang_eagle3_capture.core import releases
from sglang_eagle3_capture.core.sglang import guard, plugin, target
releases.installed_sglang_version = lambda: "0.5.16"  # older than the table: refused
try:
    plugin.register()
except releases.UnsupportedSGLangVersion:
    pass  # SGLang's load_plugins logs and swallows it
armed_before = guard.is_armed()
import sglang.srt.model_executor.model_runner as mr  # what a scheduler imports: the guard lands now
print("RESULT " + json.dumps({"before": armed_before, "guarded": guard.is_armed(),
                              "on_initialize": getattr(mr.ModelRunner.initialize, "__eagle3_capture_guard__", False),
                              "patched": target.is_patched()}))
"""


def test_unsupported_sglang_guard_is_installed_when_the_model_runner_is_imported_later():
    """In SGLang's own processes register() runs before the ModelRunner modules are imported, so the guard is
    installed later, by the import trigger, after register() has raised."""
    env = {**sglang_cpu_patches.cpu_env(), "SGLANG_PLUGINS": "eagle3_capture"}
    proc = subprocess.run([sys.executable, "-c", DEFERRED_GUARD], env=env, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    result = json.loads([line for line in proc.stdout.splitlines() if line.startswith("RESULT ")][0][7:])
    assert result == {"before": False, "guarded": True, "on_initialize": True, "patched": False}
