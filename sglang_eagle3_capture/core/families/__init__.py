"""Target families: SGLang model classes that share one capture loop, one :class:`Family` record each. Citations are
SGLang 0.5.23's lines unless a release is named; docs/families.md holds the prose and a field table.
"""

from __future__ import annotations

from ..releases.schema import ALWAYS_SHIFT, KEEP_IF_MAX_IS_N, SHIFT_IF_FIRST_IS_1
from .schema import (
    FORWARD_PARAMS,
    LIST,
    N_COUNT_ERROR,
    N_INDEX_ERROR,
    PACKED,
    PP_FROM_RUNTIME,
    STREAM_FROM_INPUT_NORM,
    Family,
)

__all__ = ["LIST", "PACKED", "Family", "all_families", "family_of", "text_config_architectures"]


def _sg(module: str, cls: str) -> tuple[str, str]:
    return f"sglang.srt.models.{module}", cls


_FAMILIES: tuple[Family, ...] = (
    # DeepSeek-V2/V3/V3.2, Kimi-K2.5, GLM-5, Mistral-Large-3 (deepseek_v2.py): set_eagle3 3458,
    # DeepseekV2Model.forward 3094 (packer 3175), final norm 3238-3241; Kimi-K2.5 keeps its dimensions in text_config.
    Family(name="deepseek_v2",
           architectures=("DeepseekV2ForCausalLM", "DeepseekV3ForCausalLM", "DeepseekV32ForCausalLM",
                          "KimiK25ForConditionalGeneration", "GlmMoeDsaForCausalLM", "MistralLarge3ForCausalLM"),
           causal_lms=(_sg("deepseek_v2", "DeepseekV2ForCausalLM"),), models=(_sg("deepseek_v2", "DeepseekV2Model"),),
           stock_rule=SHIFT_IF_FIRST_IS_1, container=PACKED, stock_past_loop=N_COUNT_ERROR,
           text_config=("KimiK25ForConditionalGeneration",)),
    # Llama and the classes reusing its loop (llama.py; mistral.py:33, ministral3.py:162, teleflm.py:81): set_eagle3
    # llama.py:929 (+1), LlamaModel.forward 465 (list 485), TeleFLMModel.forward teleflm.py:59, final norm 498-500.
    Family(name="llama",
           architectures=("LlamaForCausalLM", "Phi3ForCausalLM", "InternLM3ForCausalLM", "IQuestCoderForCausalLM",
                          "MistralForCausalLM", "Ministral3ForCausalLM", "TeleFLMForCausalLM"),
           causal_lms=(_sg("llama", "LlamaForCausalLM"),),
           models=(_sg("llama", "LlamaModel"), _sg("teleflm", "TeleFLMModel")), stock_rule=ALWAYS_SHIFT),
    # Qwen2, Qwen2.5-VL (qwen2.py, qwen2_5_vl.py:670): set_eagle3 qwen2.py:781 and qwen2_5_vl.py:990 (+1),
    # Qwen2Model.forward 434 (list 455), final norm 468-470.
    Family(name="qwen2", architectures=("Qwen2ForCausalLM", "Qwen2_5_VLForConditionalGeneration"),
           causal_lms=(_sg("qwen2", "Qwen2ForCausalLM"), _sg("qwen2_5_vl", "Qwen2_5_VLForConditionalGeneration")),
           models=(_sg("qwen2", "Qwen2Model"),), stock_rule=ALWAYS_SHIFT,
           text_config=("Qwen2_5_VLForConditionalGeneration",)),
    # Qwen3 (qwen3.py): set_eagle3 778 (+1), Qwen3Model.forward 506 (list 523; inherited from Qwen2Model before
    # 0.5.21), final norm 535-537.
    Family(name="qwen3", architectures=("Qwen3ForCausalLM",), causal_lms=(_sg("qwen3", "Qwen3ForCausalLM"),),
           models=(_sg("qwen3", "Qwen3Model"),), stock_rule=ALWAYS_SHIFT),
    # Qwen3-MoE, Qwen2-MoE, Mellum (qwen3_moe.py, qwen2_moe.py, mellum.py:479): set_eagle3 qwen3_moe.py:1128 and
    # qwen2_moe.py:1418 (+1) into Qwen2MoeModel's 1153 (a never-cleared flag), forward 1158 (reads the flag 1199-1202,
    # list 1178), final norm 1208-1210.
    Family(name="qwen_moe", architectures=("Qwen3MoeForCausalLM", "Qwen2MoeForCausalLM", "MellumForCausalLM"),
           causal_lms=(_sg("qwen3_moe", "Qwen3MoeForCausalLM"), _sg("qwen2_moe", "Qwen2MoeForCausalLM")),
           models=(_sg("qwen2_moe", "Qwen2MoeModel"),), stock_rule=ALWAYS_SHIFT, stock_past_loop=N_INDEX_ERROR,
           layer_flag="_is_layer_to_capture"),
    # GPT-OSS (gpt_oss.py): set_eagle3 1337 (ids kept as loop indices when their maximum is N, else +1),
    # GptOssModel.forward 688 (list 710; loop index N captured at its final norm, 726-737).
    Family(name="gpt_oss", architectures=("GptOssForCausalLM",), causal_lms=(_sg("gpt_oss", "GptOssForCausalLM"),),
           models=(_sg("gpt_oss", "GptOssModel"),), stock_rule=KEEP_IF_MAX_IS_N),
    # GLM-4.5/4.6 (glm4_moe.py): set_eagle3 1269 (+1), Glm4MoeModel.forward 917 (list 948), final norm 973-977.
    Family(name="glm4_moe", architectures=("Glm4MoeForCausalLM",), causal_lms=(_sg("glm4_moe", "Glm4MoeForCausalLM"),),
           models=(_sg("glm4_moe", "Glm4MoeModel"),), stock_rule=ALWAYS_SHIFT),
    # MiniMax-M2 (minimax_m2.py): set_eagle3 1067 (+1; pipeline group from get_parallel(), 1068),
    # MiniMaxM2Model.forward 960 (list 980, capture 990-1006), final norm 1009-1011.
    Family(name="minimax_m2", architectures=("MiniMaxM2ForCausalLM",),
           causal_lms=(_sg("minimax_m2", "MiniMaxM2ForCausalLM"),), models=(_sg("minimax_m2", "MiniMaxM2Model"),),
           stock_rule=ALWAYS_SHIFT, pp_group=PP_FROM_RUNTIME),
    # GLM-4.7-Flash (glm4_moe_lite.py): set_eagle3 805 (DeepSeek's reading), Glm4MoeLiteModel.forward 610 (a list,
    # 647, not the packer), final norm 674-678.
    Family(name="glm4_moe_lite", architectures=("Glm4MoeLiteForCausalLM",),
           causal_lms=(_sg("glm4_moe_lite", "Glm4MoeLiteForCausalLM"),),
           models=(_sg("glm4_moe_lite", "Glm4MoeLiteModel"),), stock_rule=SHIFT_IF_FIRST_IS_1),
    # Apertus (apertus.py): set_eagle3 675 (+1), ApertusModel.forward 345 (list 365, capture 371-373), final norm
    # 378-380; a layer's input norm is attention_layernorm (265-268).
    Family(name="apertus", architectures=("ApertusForCausalLM",), causal_lms=(_sg("apertus", "ApertusForCausalLM"),),
           models=(_sg("apertus", "ApertusModel"),), stock_rule=ALWAYS_SHIFT, input_norm="attention_layernorm"),
    # Gemma 4 (gemma4_causal.py, gemma4_mm.py): set_eagle3 1495 (+1), Gemma4TextModel.forward 1024 (list 1059, capture
    # 1072-1074, loop index N itself 1093-1094), final norm 1096-1098; the multimodal class sets its language_model's
    # list itself (gemma4_mm.py:1155-1168).
    Family(name="gemma4", architectures=("Gemma4ForCausalLM", "Gemma4ForConditionalGeneration"),
           causal_lms=(_sg("gemma4_causal", "Gemma4ForCausalLM"), _sg("gemma4_mm", "Gemma4ForConditionalGeneration")),
           models=(_sg("gemma4_causal", "Gemma4TextModel"),), stock_rule=ALWAYS_SHIFT,
           forward_params=(*FORWARD_PARAMS[:5], "per_layer_inputs", "pp_proxy_tensors", "kwargs"),
           text_config=("Gemma4ForConditionalGeneration",),
           model_attrs=(("Gemma4ForConditionalGeneration", "language_model"),)),
    # Llama 4 (mllama4.py, llama4.py): Llama4ForCausalLM (546) inherits LlamaForCausalLM's set_eagle3 (+1) but builds
    # Llama4Model (477), so the hook is patched on it; forward 509 (list 522, capture 529-531), final norm 535-538;
    # the wrapper delegates (mllama4.py:971-973).
    Family(name="llama4", architectures=("Llama4ForConditionalGeneration",),
           causal_lms=(_sg("llama4", "Llama4ForCausalLM"),), models=(_sg("llama4", "Llama4Model"),),
           stock_rule=ALWAYS_SHIFT, text_config=("Llama4ForConditionalGeneration",)),
    # EXAONE MoE (exaone_moe.py): set_eagle3 866 (+1; pipeline group from get_parallel(), 867), ExaoneMoEModel.forward
    # 579 (list 599, capture 606-608), final norm 612-614.
    Family(name="exaone_moe", architectures=("ExaoneMoEForCausalLM", "ExaoneMoeForCausalLM"),
           causal_lms=(_sg("exaone_moe", "ExaoneMoEForCausalLM"),), models=(_sg("exaone_moe", "ExaoneMoEModel"),),
           stock_rule=ALWAYS_SHIFT, pp_group=PP_FROM_RUNTIME),
    # MiniMax-M3 (minimax_m3.py, minimax_m3_vl.py): set_eagle3 2056 and minimax_m3_vl.py:246 (+1, a never-cleared
    # _is_layer_to_capture), MiniMaxM3Model.forward 1901 (reads the flag 1944-1949; loop index N at its final norm
    # 1954-1965).
    Family(name="minimax_m3", architectures=("MiniMaxM3SparseForCausalLM", "MiniMaxM3SparseForConditionalGeneration"),
           causal_lms=(_sg("minimax_m3", "MiniMaxM3SparseForCausalLM"),
                       _sg("minimax_m3_vl", "MiniMaxM3SparseForConditionalGeneration")),
           models=(_sg("minimax_m3", "MiniMaxM3Model"),), stock_rule=ALWAYS_SHIFT, layer_flag="_is_layer_to_capture",
           text_config=("MiniMaxM3SparseForConditionalGeneration",)),
    # Bailing-MoE, Ling, Sarvam-MoE (bailing_moe.py, sarvam_moe.py:1407): set_eagle3 1098 (+1),
    # BailingMoEModel.forward 808 (list 826-841), final norm 846-849; embedding word_embeddings (777), attention
    # ``attention`` (661).
    Family(name="bailing_moe",
           architectures=("BailingMoEForCausalLM", "BailingMoeForCausalLM", "BailingMoeV2ForCausalLM",
                          "SarvamMoEForCausalLM"),
           causal_lms=(_sg("bailing_moe", "BailingMoEForCausalLM"),), models=(_sg("bailing_moe", "BailingMoEModel"),),
           stock_rule=ALWAYS_SHIFT, embed_tokens="word_embeddings", attn="attention"),
    # LongCat-Flash (longcat_flash.py): set_eagle3 1112 (+1, no pipeline group), LongcatFlashModel.forward 593 (a
    # plain list, snapshot 619-623), final norm 634-636; the layer count is num_layers where num_hidden_layers is
    # absent (configs/longcat_flash.py:81-83); a layer's norms and attentions are pairs, the first reads the stream
    # entering it.
    Family(name="longcat_flash", architectures=("LongcatFlashForCausalLM",),
           causal_lms=(_sg("longcat_flash", "LongcatFlashForCausalLM"),),
           models=(_sg("longcat_flash", "LongcatFlashModel"),), stock_rule=ALWAYS_SHIFT, pp_group=PP_FROM_RUNTIME,
           forward_params=FORWARD_PARAMS[:5], layer_count_keys=("num_hidden_layers", "num_layers"),
           input_norm="input_layernorm.0", attn="self_attn.0"),
    # Qwen3.5 (qwen3_5_text.py, qwen3_5.py): set_eagle3 qwen3_5_text.py:150, and on the VL classes Qwen3-VL's
    # (qwen3_vl.py:1777), set on them; the stack's qwen3_5.py:1894 (a never-cleared flag), forward 1908 (reads the
    # flag 1947-1953, list 1940), final norm 1972-1978.
    Family(name="qwen3_5",
           architectures=("Qwen3_5ForCausalLM", "Qwen3_5MoeForCausalLM", "Qwen3_5ForConditionalGeneration",
                          "Qwen3_5MoeForConditionalGeneration"),
           causal_lms=(_sg("qwen3_5_text", "Qwen3_5ForCausalLM"), _sg("qwen3_5", "Qwen3_5ForConditionalGeneration"),
                       _sg("qwen3_5", "Qwen3_5MoeForConditionalGeneration")),
           models=(_sg("qwen3_5", "Qwen3_5ForCausalLM"),), stock_rule=ALWAYS_SHIFT, stock_past_loop=N_INDEX_ERROR,
           layer_flag="_is_layer_to_capture", forward_params=(*FORWARD_PARAMS, "input_deepstack_embeds"),
           text_config=("Qwen3_5ForConditionalGeneration", "Qwen3_5MoeForConditionalGeneration"), attn=None),
    # Qwen3-Next (qwen3_next.py): set_eagle3 1286 (+1) into Qwen3NextModel's 954 (a never-cleared flag), forward 964
    # (inputs_embeds 970, reads the flag 991-993, list 982), final norm 997-1000.
    Family(name="qwen3_next", architectures=("Qwen3NextForCausalLM",),
           causal_lms=(_sg("qwen3_next", "Qwen3NextForCausalLM"),), models=(_sg("qwen3_next", "Qwen3NextModel"),),
           stock_rule=ALWAYS_SHIFT, stock_past_loop=N_INDEX_ERROR, layer_flag="_is_layer_to_capture",
           forward_params=(*FORWARD_PARAMS[:4], "inputs_embeds"), embeds_param="inputs_embeds", attn=None),
    # Qwen3-VL and the wrappers inheriting its hook (qwen3_vl.py; qwen3_vl_moe.py:197, cosmos3.py:38,
    # interns1pro.py:191): set_eagle3 1777 (+1), Qwen3LLMModel.forward 1207 and Qwen3MoeLLMModel.forward
    # (qwen3_vl_moe.py:85; capture qwen3_vl.py:1234-1237), final norm 1283-1290; deepstack is added to layer k's
    # output (1263-1272) before layer k+1 captures it (docs/families.md, qwen3_vl).
    Family(name="qwen3_vl",
           architectures=("Qwen3VLForConditionalGeneration", "Qwen3VLMoeForConditionalGeneration",
                          "Cosmos3ForConditionalGeneration", "InternS1ProForConditionalGeneration"),
           causal_lms=(_sg("qwen3_vl", "Qwen3VLForConditionalGeneration"),),
           models=(_sg("qwen3_vl", "Qwen3LLMModel"), _sg("qwen3_vl_moe", "Qwen3MoeLLMModel")), stock_rule=ALWAYS_SHIFT,
           forward_params=(*FORWARD_PARAMS, "input_deepstack_embeds"),
           text_config=("Qwen3VLForConditionalGeneration", "Qwen3VLMoeForConditionalGeneration",
                        "Cosmos3ForConditionalGeneration", "InternS1ProForConditionalGeneration"),
           deepstack="vision_config.deepstack_visual_indexes"),
    # Gemma 3 (gemma3_causal.py; gemma3_mm.py:543-545 delegates): set_eagle3 917 (+1, no pipeline group),
    # Gemma3TextModel.forward 619 (a plain list 638-639, 656-657; loop index N itself 671-672); a layer returns its
    # branch output and the residual unsummed (408-410).
    Family(name="gemma3", architectures=("Gemma3ForCausalLM", "Gemma3ForConditionalGeneration"),
           causal_lms=(_sg("gemma3_causal", "Gemma3ForCausalLM"),), models=(_sg("gemma3_causal", "Gemma3TextModel"),),
           stock_rule=ALWAYS_SHIFT, pp_group=PP_FROM_RUNTIME, forward_params=(*FORWARD_PARAMS[:5], "kwargs"),
           text_config=("Gemma3ForConditionalGeneration",), stream_from=STREAM_FROM_INPUT_NORM),
)


def all_families() -> tuple[Family, ...]:
    return _FAMILIES


def family_of(architecture: str | None) -> Family | None:
    """The family whose classes serve ``architecture``, or None when no entry covers it."""
    return next((f for f in _FAMILIES if architecture in f.architectures), None)


def text_config_architectures() -> frozenset[str]:
    """Architectures whose decoder dimensions live in ``text_config``."""
    return frozenset(a for f in _FAMILIES for a in f.text_config)
