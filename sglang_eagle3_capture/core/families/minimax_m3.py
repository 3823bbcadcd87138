"""The MiniMax-M3 family: ``MiniMaxM3SparseForCausalLM`` (SGLang's models/minimax_m3.py, text-only checkpoints) and
``MiniMaxM3SparseForConditionalGeneration`` (models/minimax_m3_vl.py, the published MiniMax-M3 checkpoint), which
share one decoder stack, ``MiniMaxM3Model`` (minimax_m3_vl.py:138 builds it from ``text_config``).

Both causal LMs' ``set_eagle3_layers_to_capture`` (minimax_m3.py:2056, minimax_m3_vl.py:246) add 1 to explicit ids,
set ``self.model.layers_to_capture`` and set ``_is_layer_to_capture = True`` on ``self.model.layers[i]`` for the
indices in range: never cleared (a second configuration adds to the first). ``MiniMaxM3Model.forward`` (1901) reads
the flag, not the list (1944-1949), and captures the gathered residual entering layer ``i`` into an
``AuxHiddenStateList`` through ``captured_last_layer_outputs=``; loop index 0 is the embedding in every release. It
captures loop index N itself at ``final_norm(..., capture=...)`` when ``self.end_layer in layers_to_capture``
(1954-1965, 0.5.23 only; before, N is dropped silently); the plugin never lists N: its own final-norm hook takes the
last layer's output, as for every family. Under two-batch overlap no layer captures (1923-1930).

Release differences: 0.5.17's ``MiniMaxM3SparseForCausalLM.set_eagle3_layers_to_capture`` sets no flag (stock
0.5.17 captures nothing; the plugin sets them), and 0.5.17's ``MiniMaxM3SparseForConditionalGeneration`` has no
``set_eagle3_layers_to_capture`` at all (the release table's ``absent_hooks``). Without explicit ids the VL class
captures ``[3, N//2 + 1, N - 2]`` (its default, like explicit ids, gets +1: minimax_m3_vl.py:261-263), the text class
``[2, N//2, N - 3]``.
"""

from ..releases.schema import ALWAYS_SHIFT
from .schema import Family

MODULE = "sglang.srt.models.minimax_m3"
VL_MODULE = "sglang.srt.models.minimax_m3_vl"

FAMILY = Family(
    name="minimax_m3",
    architectures=("MiniMaxM3SparseForCausalLM", "MiniMaxM3SparseForConditionalGeneration"),
    causal_lms=((MODULE, "MiniMaxM3SparseForCausalLM"), (VL_MODULE, "MiniMaxM3SparseForConditionalGeneration")),
    models=((MODULE, "MiniMaxM3Model"),),
    stock_rule=ALWAYS_SHIFT,
    layer_flag="_is_layer_to_capture",
    text_config=("MiniMaxM3SparseForConditionalGeneration",),
)
