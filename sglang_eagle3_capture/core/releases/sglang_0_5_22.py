"""SGLang 0.5.22 (wheel built 2026-10-15): as 0.5.23 for every seam the plugin uses (read from the wheel).

``init_spec_aux_hidden_state`` model_runner.py l.589-597 (called l.412); ``draft_model_config`` set at
spec_aux_hidden_state.py l.112-113; the Llama capture loop already uses ``capture_output=`` (llama.py l.484).
Pins ``cuda-tile==1.6.0rc5`` (docs/releases.md: how to install it here).
"""

from dataclasses import replace

from . import sglang_0_5_23
from .schema import PROVEN_SEAM_PROBE

RELEASE = replace(sglang_0_5_23.RELEASE, version="0.5.22", built="2026-10-15", proven=PROVEN_SEAM_PROBE,
                  install_excludes=("cuda-tile",),
                  # minimax_m3.py l.1734-1736: the final norm captures nothing; Gemma 4 (l.1092-1093) and Gemma 3
                  # (l.671-672) append loop index N as in 0.5.23
                  final_norm_captures=("gpt_oss", "gemma4", "gemma3"))
