"""Bailing-MoE, Ling, Sarvam-MoE (bailing_moe.py, sarvam_moe.py:1407): set_eagle3 1098 (+1), BailingMoEModel.forward 808
(list 826-841), final norm 846-849; embedding word_embeddings (777), attention ``attention`` (661).
"""

from ..releases.schema import ALWAYS_SHIFT
from .schema import Family

MODULE = "sglang.srt.models.bailing_moe"

FAMILY = Family(
    name="bailing_moe",
    architectures=("BailingMoEForCausalLM", "BailingMoeForCausalLM", "BailingMoeV2ForCausalLM",
                   "SarvamMoEForCausalLM"),
    causal_lms=((MODULE, "BailingMoEForCausalLM"),),
    models=((MODULE, "BailingMoEModel"),),
    stock_rule=ALWAYS_SHIFT,
    embed_tokens="word_embeddings",
    attn="attention",
)
