"""The Qwen3.5 family: ``Qwen3_5ForCausalLM`` and ``Qwen3_5MoeForCausalLM`` (SGLang's models/qwen3_5_text.py, text-only
checkpoints) and ``Qwen3_5ForConditionalGeneration`` / ``Qwen3_5MoeForConditionalGeneration`` (models/qwen3_5.py, the
vision-language checkpoints), which share one decoder stack: ``qwen3_5.Qwen3_5ForCausalLM`` (its MoE subclass inherits
its forward). Gated DeltaNet (linear attention, ``Qwen3_5LinearDecoderLayer``, qwen3_5.py:1122) and gated
full-attention layers (``Qwen3_5AttentionDecoderLayer``, 1262) alternate (``full_attention_interval``); both take the
same capture at their ``attn_boundary.prepare(..., capture_gathered=...)`` (1207-1211, 1655-1659).

The text causal LMs' ``set_eagle3_layers_to_capture`` (qwen3_5_text.py:150) and the VL classes' (inherited from
``Qwen3VLForConditionalGeneration``, qwen3_vl.py:1777) add 1 and call the stack's own ``set_eagle3_layers_to_capture``
(qwen3_5.py:1894), which sets ``_is_layer_to_capture = True`` on ``self.layers[i]`` and never clears it (loop index N
raises ``IndexError`` there). The stack's forward (1908; ``input_deepstack_embeds`` from the VL wrapper) reads the flag
(1947-1953) and captures the residual stream entering layer ``i`` through the gathered path into an
``AuxHiddenStateList`` (1940); loop index 0 is the embedding (or the ``input_embeds`` the VL wrapper hands it); final
norm ``residual_batch.final_norm(..., self.norm, skip_empty=True)`` (1972-1978), a ``GemmaRMSNorm``.

Deepstack (VL checkpoints with images or video): the stack adds ``input_deepstack_embeds`` chunk ``k`` to the output of
layer ``k < 3`` *after* that layer's forward and before layer ``k + 1`` starts (1956-1967,
``residual_batch.add_to_output``), so the capture at layer ``k + 1``'s boundary (layer id ``k``) holds the stream after
the deepstack add. On text-only requests ``input_deepstack_embeds`` is empty and the add does not run.

The VL classes get the patched hook as an attribute of their own (the seam engine adds it to the subclass and deletes
it on revert), so Qwen3-VL's inherited hook is not theirs. The stack's layers have no common attention module
(``linear_attn`` on linear layers, the attention itself on full-attention layers): ``attn=None``.

Releases: 0.5.17-0.5.21 have both model files but no ``set_eagle3_layers_to_capture`` on the text causal LMs or on
the stack (only ``set_dflash_layers_to_capture``; qwen3_5_text.py and qwen3_5.py of those wheels); the VL classes
inherit Qwen3-VL's hook there, which sets only ``self.model.layers_to_capture`` (qwen3_vl.py:1766-1782 in 0.5.21),
which this loop does not read: stock SGLang captures nothing on them. Absent there (release files).
"""

from ..releases.schema import ALWAYS_SHIFT
from .schema import FORWARD_PARAMS, N_INDEX_ERROR, Family

MODULE = "sglang.srt.models.qwen3_5"
TEXT = "sglang.srt.models.qwen3_5_text"
VL = ("Qwen3_5ForConditionalGeneration", "Qwen3_5MoeForConditionalGeneration")

FAMILY = Family(
    name="qwen3_5",
    architectures=("Qwen3_5ForCausalLM", "Qwen3_5MoeForCausalLM", *VL),
    causal_lms=((TEXT, "Qwen3_5ForCausalLM"), *((MODULE, cls) for cls in VL)),
    models=((MODULE, "Qwen3_5ForCausalLM"),),
    stock_rule=ALWAYS_SHIFT,
    stock_past_loop=N_INDEX_ERROR,
    layer_flag="_is_layer_to_capture",
    forward_params=(*FORWARD_PARAMS, "input_deepstack_embeds"),
    text_config=VL,
    attn=None,
)
