"""The Qwen3-Next family: ``Qwen3NextForCausalLM`` (SGLang's models/qwen3_next.py).

Gated DeltaNet (linear attention, ``Qwen3HybridLinearDecoderLayer``, qwen3_next.py:527) and gated full-attention
layers (``Qwen3HybridAttentionDecoderLayer``, 608) alternate (``full_attention_interval``); both take the same
capture. ``set_eagle3_layers_to_capture`` (1286; returns early off the last pipeline rank, 1287, and the class asserts
a single stage, 1036) adds 1 and calls ``Qwen3NextModel.set_eagle3_layers_to_capture`` (954), which sets
``_is_layer_to_capture = True`` on ``self.layers[i]`` and never clears it (loop index N raises ``IndexError``).
``Qwen3NextModel.forward`` (964; its embeddings parameter is ``inputs_embeds``, 970, and it has no
``pp_proxy_tensors``) reads the flag (991-993) and captures the residual stream entering layer ``i`` into an
``AuxHiddenStateList`` (982); loop index 0 is the embedding; the last layer's output is completed
(``residual_batch.complete_output``, 996) and normed unless the batch is idle (997-1000), a ``GemmaRMSNorm``.
The same hook, forward parameters and flag in 0.5.17-0.5.23 (0.5.17-0.5.20: a plain list, l.954 in 0.5.17, through
``prepare_attn_and_capture_last_layer_outputs``, which captures the embedding at layer 0).
"""

from ..releases.schema import ALWAYS_SHIFT
from .schema import FORWARD_PARAMS, N_INDEX_ERROR, Family

MODULE = "sglang.srt.models.qwen3_next"

FAMILY = Family(
    name="qwen3_next",
    architectures=("Qwen3NextForCausalLM",),
    causal_lms=((MODULE, "Qwen3NextForCausalLM"),),
    models=((MODULE, "Qwen3NextModel"),),
    stock_rule=ALWAYS_SHIFT,
    stock_past_loop=N_INDEX_ERROR,
    layer_flag="_is_layer_to_capture",
    forward_params=(*FORWARD_PARAMS[:4], "inputs_embeds"),
    embeds_param="inputs_embeds",
    attn=None,
)
