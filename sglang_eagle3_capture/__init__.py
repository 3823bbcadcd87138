"""sglang-eagle3-capture: explicit, checked EAGLE-3 hidden-state wiring for DeepSeek-V2-family targets in SGLang.

Importing this package imports neither SGLang nor CUDA; SGLang is imported only inside the
functions that patch it.
"""

from __future__ import annotations

from ._compat import SUPPORTED_SGLANG_VERSIONS, UnsupportedSGLangVersion, check_sglang_version
from .layer_ids import EMBEDDING_LAYER_ID, LayerIdError, check_layer_ids, hidden_state_index, layer_id_of_index

__version__ = "0.1.0"

__all__ = [
    "EMBEDDING_LAYER_ID",
    "LayerIdError",
    "SUPPORTED_SGLANG_VERSIONS",
    "UnsupportedSGLangVersion",
    "__version__",
    "check_layer_ids",
    "check_sglang_version",
    "hidden_state_index",
    "layer_id_of_index",
]
