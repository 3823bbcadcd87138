"""The CPU runtime (cpu_runtime/, never shipped) without SGLang in this process: what a fresh interpreter gets.

That the patches are in effect in SGLang's own classes is in tests/inprocess/test_inprocess_harness.py.
"""

import subprocess
import sys

import sglang_cpu_patches


def test_sitecustomize_is_lazy_in_fresh_interpreters(tmp_path):
    """A fresh interpreter with the CPU runtime on PYTHONPATH (as SGLang's spawned processes are) has the patch
    hook installed for B1-B4 but imports neither torch nor sglang at start-up. That the hook patches the spawned
    scheduler is shown by tests/engine/test_plugin_engine.py's plain run: without B1 its first prefill fails."""
    code = (
        "import sys, sitecustomize, sglang_cpu_patches as p\n"
        "from sglang_eagle3_capture.core import after_import\n"
        "assert sitecustomize.__file__.startswith(str(p.SHIM_DIR)), sitecustomize.__file__\n"
        "hooks = [f for f in sys.meta_path if isinstance(f, after_import._AfterImportFinder)]\n"
        "assert len(hooks) == 1 and set(p.PATCHES) <= set(hooks[0].pending), 'no hook for B1-B4'\n"
        "assert not {'sglang', 'torch'} & set(sys.modules), 'start-up imported sglang/torch'\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], env=sglang_cpu_patches.cpu_env(), cwd=tmp_path,
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr[-3000:]
