"""The Qwen3-VL family: ``Qwen3VLForConditionalGeneration`` (SGLang's models/qwen3_vl.py) and the wrappers that
inherit its ``set_eagle3_layers_to_capture`` over a Qwen3-VL decoder stack: ``Qwen3VLMoeForConditionalGeneration``
(qwen3_vl_moe.py:197), ``Cosmos3ForConditionalGeneration`` (cosmos3.py:38), ``InternS1ProForConditionalGeneration``
(interns1pro.py:191).

``set_eagle3_layers_to_capture`` (qwen3_vl.py:1777) returns off the last pipeline rank, adds 1, and hands the loop
indices to the stack's own ``set_eagle3_layers_to_capture`` where it has one (the MoE stack's, qwen2_moe.py:1153, also
sets ``_is_layer_to_capture``, which the VL loop never reads), else sets ``layers_to_capture``. The stacks
``Qwen3LLMModel.forward`` (qwen3_vl.py:1207) and ``Qwen3MoeLLMModel.forward`` (qwen3_vl_moe.py:85; InternS1Pro's
``InternS1ProTextModel`` inherits it) capture the residual stream entering layer ``i`` through ``capture_output=``
(qwen3_vl.py:1234-1237) into an ``AuxHiddenStateList``; loop index 0 is ``input_embeds`` (the text embedding with the
vision features merged in on image/video tokens, ``general_mm_embed_routine``); loop index N is dropped; final norm
``residual_batch.final_norm(..., skip_empty=True)`` (1283-1290). The forward takes ``input_deepstack_embeds`` too.

DEEPSTACK (``deepstack`` below): on the inference path SGLang adds ``input_deepstack_embeds[k]`` to the output of
decoder layer ``k`` for ``k < len(vision_config.deepstack_visual_indexes)`` (``residual_batch.add_to_output``,
1263-1272; the MoE stack uses ``range(3)``, qwen3_vl_moe.py:63) before layer ``k+1``'s capture sees the stream, so
layer id ``k`` there names the state *after* the add on visual tokens; HF transformers' ``hidden_states[k+1]`` is
recorded at the decoder layer's output (``_can_record_outputs``, modeling_qwen3_vl.py:626-627), *before*
``_deepstack_process`` (837-842). Both were run on a tiny Qwen3-VL with an image (docs/families.md).
"""

from ..releases.schema import ALWAYS_SHIFT
from .schema import FORWARD_PARAMS, Family

MODULE = "sglang.srt.models.qwen3_vl"
ARCHITECTURES = ("Qwen3VLForConditionalGeneration", "Qwen3VLMoeForConditionalGeneration",
                 "Cosmos3ForConditionalGeneration", "InternS1ProForConditionalGeneration")

FAMILY = Family(
    name="qwen3_vl",
    architectures=ARCHITECTURES,
    causal_lms=((MODULE, "Qwen3VLForConditionalGeneration"),),
    models=((MODULE, "Qwen3LLMModel"), ("sglang.srt.models.qwen3_vl_moe", "Qwen3MoeLLMModel")),
    stock_rule=ALWAYS_SHIFT,
    forward_params=(*FORWARD_PARAMS, "input_deepstack_embeds"),
    text_config=ARCHITECTURES,
    deepstack="vision_config.deepstack_visual_indexes",
)
