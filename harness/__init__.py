"""Code the tests and the benchmarks share to run SGLang on this CPU (never shipped: the wheel takes only
``sglang_eagle3_capture*``; nothing under tests/ is imported from here).

- :func:`use_cpu_runtime`: cpu_runtime/ first on ``sys.path`` and ``PYTHONPATH`` (its stub ``sgl_kernel`` must
  win over the CUDA wheel), its environment set, its patches installed for when SGLang imports the patched modules;
- :data:`ENGINE_DEFAULTS`: the CPU settings every ``sglang.Engine`` / ``ServerArgs`` here starts from;
- ``sglang_inprocess``: SGLang's own ModelRunner in this process (one per process);
- ``servers``: ``python -m sglang.launch_server`` on CPU in a subprocess.

Importing this package imports only the standard library.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
CPU_RUNTIME_DIR = REPO / "cpu_runtime"

ENGINE_DEFAULTS = dict(
    device="cpu",
    attention_backend="torch_native",
    disable_cuda_graph=True,
    skip_tokenizer_init=True,
    dtype="float32",
    tp_size=1,
    # On CPU SGLang's KV budget is the free host memory after the weights load less (1 - fraction) x the free memory
    # before (mem_cache/kv_cache_configurator.py _profile_available_bytes): at 0.05 another process allocating 5% of
    # the free memory meanwhile (an Engine starting beside this one) fails the start. max_total_tokens caps the pool.
    mem_fraction_static=0.5,
    max_total_tokens=4096,
    random_seed=0,
    log_level="warning",
    decode_log_interval=1,  # fold spec counters into server_info avg_spec_accept_length every step
)


def use_cpu_runtime() -> None:
    """Set this process up to run SGLang on CPU (before anything imports sglang or sgl_kernel); idempotent."""
    if str(CPU_RUNTIME_DIR) in sys.path:
        sys.path.remove(str(CPU_RUNTIME_DIR))
    sys.path.insert(0, str(CPU_RUNTIME_DIR))
    import sglang_cpu_patches  # the standard library and the package's after-import helper only

    os.environ.update(sglang_cpu_patches.cpu_env())
    kernel = sys.modules.get("sgl_kernel")
    if kernel is not None and not str(getattr(kernel, "__file__", "")).startswith(str(CPU_RUNTIME_DIR)):
        raise RuntimeError("the real sgl_kernel was imported before the CPU runtime could put its stub first")
    sglang_cpu_patches.install_import_hook()
