"""The GPT-OSS family: ``GptOssForCausalLM`` (SGLang's models/gpt_oss.py).

``set_eagle3_layers_to_capture`` (gpt_oss.py:1337): from 0.5.17 explicit ids are kept as loop indices when their
maximum is N, else each gets +1 (before 0.5.17 always +1). ``GptOssModel.forward`` (688) captures the residual
stream entering layer ``i`` into an ``AuxHiddenStateList`` (710) through ``capture_output=``; loop index 0 is the
embedding from 0.5.17 (``hidden_states + residual`` crashed before); from 0.5.17 GPT-OSS itself captures loop
index N at ``final_norm(..., capture=...)`` when ``self.end_layer in layers_to_capture`` (726-737). The plugin never
puts N in ``layers_to_capture``: the last layer's output comes from its own final-norm hook, as for every family.
The final norm is skipped when the batch has 0 rows (726).
"""

from ..releases.schema import KEEP_IF_MAX_IS_N
from .schema import Family

MODULE = "sglang.srt.models.gpt_oss"

FAMILY = Family(
    name="gpt_oss",
    architectures=("GptOssForCausalLM",),
    causal_lms=((MODULE, "GptOssForCausalLM"),),
    models=((MODULE, "GptOssModel"),),
    stock_rule=KEEP_IF_MAX_IS_N,
)
