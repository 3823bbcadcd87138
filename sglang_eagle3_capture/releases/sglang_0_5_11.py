"""SGLang 0.5.11 (wheel built 2026-05-07): refused, kept for the doctor's stock readings.

``models/deepseek_v2.py`` l.2362-2374: ``set_eagle3_layers_to_capture`` always adds 1
(``[val + 1 for val in layer_ids]``); the capture loop computes ``hidden_states + residual`` inline
(l.2106), which fails at loop index 0 (no residual yet), so the embedding cannot be captured.
"""

from .schema import ALWAYS_SHIFT, PROVEN_REFUSED, Release

RELEASE = Release(
    version="0.5.11",
    built="2026-05-07",
    supported=False,
    proven=PROVEN_REFUSED,
    refused_because="its DeepSeek capture loop adds hidden_states + residual inline and crashes at the embedding",
    stock_rules={"deepseek_v2": ALWAYS_SHIFT},
    embedding_crashes=("deepseek_v2",),
)
