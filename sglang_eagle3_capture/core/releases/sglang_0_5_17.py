"""SGLang 0.5.17 (wheel built 2026-08-08): as 0.5.18, without the ``cuda-tile`` pin; run on CPU
(docs/releases.md). ``init_spec_aux_hidden_state`` model_runner.py l.505-513 (called l.325);
``get_parallel().tp_rank`` raises AssertionError until the TP group exists (through 0.5.20)."""

from dataclasses import replace

from . import sglang_0_5_18
from .schema import PROVEN_CPU_ENGINE

RELEASE = replace(sglang_0_5_18.RELEASE, version="0.5.17", built="2026-08-08", proven=PROVEN_CPU_ENGINE,
                  install_excludes=(),
                  # minimax_m3_vl.py: no set_eagle3_layers_to_capture (nor get_embed_and_head) before 0.5.18
                  absent_hooks=("MiniMaxM3SparseForConditionalGeneration",))
