"""sglang-eagle3-capture: explicit, checked EAGLE-3 hidden-state wiring for SGLang.

Importing this package imports neither SGLang nor torch; the names below that need them are resolved on first use
(:func:`__getattr__`). Layout: docs/development.md (``core/`` runs in SGLang's processes, ``observe/`` when switched
on, ``doctor/`` offline).

Example::

    import sglang_eagle3_capture as ec
    m = ec.read_manifest("/models/kimi-k25-eagle3")     # eagle3_manifest.json, strictly validated
    print(m.layer_ids)                                   # (-1, 2, 30): cat([embed, HF[3], HF[31]])
    with ec.capture_patched():                           # in-process use (the plugin does this in servers)
        ...
"""

from __future__ import annotations

import importlib

from .core.errors import Eagle3CaptureError, InputError, UnsupportedSGLangVersion
from .core.layer_ids import EMBEDDING_LAYER_ID, check_layer_ids, hidden_state_index, layer_id_of_index
from .core.releases import check_sglang_version, supported_versions

__version__ = "0.2.0"

# public name -> (module, attribute), imported on first access
_LAZY = {
    "apply_capture_patch": (".core.sglang.target", "apply"),
    "revert_capture_patch": (".core.sglang.target", "revert"),
    "is_capture_patched": (".core.sglang.target", "is_patched"),
    "capture_patched": (".core.sglang.target", "patched"),
    "apply_draft_head_patch": (".core.sglang.draft", "apply_draft_head_patch"),
    "revert_draft_head_patch": (".core.sglang.draft", "revert_draft_head_patch"),
    "is_draft_head_patched": (".core.sglang.draft", "is_draft_head_patched"),
    "Manifest": (".core.manifest", "Manifest"),
    "read_manifest": (".core.manifest", "read_manifest"),
    "write_manifest": (".core.manifest", "write_manifest"),
    "convert_draft": (".doctor.convert", "convert"),
}

__all__ = [
    "EMBEDDING_LAYER_ID",
    "Eagle3CaptureError",
    "InputError",
    "UnsupportedSGLangVersion",
    "__version__",
    "check_layer_ids",
    "check_sglang_version",
    "hidden_state_index",
    "layer_id_of_index",
    "supported_versions",
    *_LAZY,
]


def __getattr__(name: str):
    try:
        module, attr = _LAZY[name]
    except KeyError:
        raise AttributeError(f"module 'sglang_eagle3_capture' has no attribute {name!r}") from None
    value = getattr(importlib.import_module(module, __name__), attr)
    globals()[name] = value
    return value
