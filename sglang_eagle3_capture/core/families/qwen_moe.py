"""The Qwen-MoE family: ``Qwen3MoeForCausalLM`` and ``Qwen2MoeForCausalLM`` (SGLang's models/qwen3_moe.py and
qwen2_moe.py), which share ``Qwen2MoeModel``.

Both causal LMs' ``set_eagle3_layers_to_capture`` (qwen3_moe.py:1128, qwen2_moe.py:1418) add 1 and call
``Qwen2MoeModel.set_eagle3_layers_to_capture`` (qwen2_moe.py:1153), which stores the list and sets
``_is_layer_to_capture = True`` on ``self.layers[i]``: never cleared (a second configuration adds to the first), and
loop index N raises ``IndexError`` there. ``Qwen2MoeModel.forward`` (1158; ``Qwen3MoeModel``, qwen3_moe.py:970,
inherits it) reads the flag, not the list (1199-1202), and captures the gathered residual entering layer ``i`` into
an ``AuxHiddenStateList`` (1178); loop index 0 is the embedding in every release; final norm ``final_norm(...,
skip_empty=True)`` (1208-1210); under two-batch overlap ``model_forward_stages`` runs every layer without capture.
``MellumForCausalLM`` (mellum.py:479) inherits all of it. ``Qwen2MoeForCausalLM`` has no ``get_embed_and_head`` in
any release, so SGLang's EAGLE-3 worker cannot start on it (its own AttributeError), whatever this plugin does.
"""

from ..releases.schema import ALWAYS_SHIFT
from .schema import N_INDEX_ERROR, Family

FAMILY = Family(
    name="qwen_moe",
    architectures=("Qwen3MoeForCausalLM", "Qwen2MoeForCausalLM", "MellumForCausalLM"),
    causal_lms=(("sglang.srt.models.qwen3_moe", "Qwen3MoeForCausalLM"),
                ("sglang.srt.models.qwen2_moe", "Qwen2MoeForCausalLM")),
    models=(("sglang.srt.models.qwen2_moe", "Qwen2MoeModel"),),
    stock_rule=ALWAYS_SHIFT,
    stock_past_loop=N_INDEX_ERROR,
    layer_flag="_is_layer_to_capture",
)
