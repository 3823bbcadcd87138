"""Test-only, for tests/test_plugin_engine.py's tp_size=2 run: the harness's CPU shim plus one patch.

SGLang 0.5.23 gives every CPU process group a PyNcclCommunicator: ``init_model_parallel_group``
(sglang/srt/distributed/parallel_state.py) defaults ``use_pynccl`` to True unless the platform is NPU/XPU
or out-of-tree, and ``GroupCoordinator.__init__`` then builds one when ``world_size > 1``, which fails on
CPU with "Expected a cuda device, but got: cpu". This adds, to the harness's lazy patch table
(tests/cpu_shim/sglang_cpu_patches.PATCHES), a default of ``use_pynccl=False`` (gloo only), then runs
the harness's own sitecustomize. Put this folder first on PYTHONPATH, the harness's shim after it.
"""

import importlib.util
import sys

import sglang_cpu_patches  # the harness's module (its folder is on PYTHONPATH after this one)


def _no_pynccl_on_cpu(parallel_state):
    original = parallel_state.init_model_parallel_group

    def init_model_parallel_group(*args, **kwargs):
        if kwargs.get("use_pynccl") is None:
            kwargs["use_pynccl"] = False
        return original(*args, **kwargs)

    parallel_state.init_model_parallel_group = init_model_parallel_group


sglang_cpu_patches.PATCHES.setdefault("sglang.srt.distributed.parallel_state", _no_pynccl_on_cpu)

_spec = importlib.util.spec_from_file_location("_harness_sitecustomize", sglang_cpu_patches.SHIM_DIR / "sitecustomize.py")
_module = importlib.util.module_from_spec(_spec)
sys.modules[_spec.name] = _module
_spec.loader.exec_module(_module)
