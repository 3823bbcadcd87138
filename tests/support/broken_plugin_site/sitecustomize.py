"""Test-only start-up hook (never shipped, never imported by the package): the sglang-eagle3-capture plugin is
installed and named by ``SGLANG_PLUGINS``, but importing its entry point's module raises, as a plugin broken in the
server's environment would. SGLang's ``load_plugins_by_group`` then logs "Failed to load plugin eagle3_capture" and
the process serves on without it.

Put this folder first on PYTHONPATH, cpu_runtime/ after it: Python imports the first ``sitecustomize`` it finds, so
this one also installs the CPU runtime's patches.
"""

import sys

import sglang_cpu_patches

sglang_cpu_patches.install_import_hook()

BROKEN = "sglang_eagle3_capture.core.sglang.plugin"  # pyproject.toml's sglang.srt.plugins entry point module


class _BrokenPlugin:
    """A meta-path finder that fails every import of :data:`BROKEN`."""

    @staticmethod
    def find_spec(name, path=None, target=None):
        if name == BROKEN:
            print(f"TEST SABOTAGE: import {BROKEN} raises", flush=True)
            raise ImportError(f"test sabotage: {BROKEN} cannot be imported")
        return None


sys.modules.pop(BROKEN, None)
sys.meta_path.insert(0, _BrokenPlugin())
