"""CPU runtime (never shipped): patch SGLang for CPU in every Python process that has this folder on PYTHONPATH.

Python imports ``sitecustomize`` at start-up (``site`` module), so SGLang's spawned scheduler processes,
which start fresh interpreters and lose patches made in their parent, get the CPU patches too. Only the
standard library is imported here; the patches are applied lazily when SGLang imports the patched
modules (see ``sglang_cpu_patches.install_import_hook``).
"""

import sglang_cpu_patches

sglang_cpu_patches.install_import_hook()
