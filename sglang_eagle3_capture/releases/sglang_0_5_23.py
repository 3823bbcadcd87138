"""SGLang 0.5.23 (wheel built 2026-10-30): the release every other release file is written against.

Read in the installed sources (``sglang/srt/``):

- ``model_executor/model_runner_components/spec_aux_hidden_state.py::_resolve_eagle_aux_hidden_state``
  (l.132-196) reads the capture ids from the draft's ``eagle_config`` only, inside
  ``ModelRunner.init_spec_aux_hidden_state`` (model_runner.py l.596, called at l.426 before the model
  is loaded); ``SpecAuxHiddenStateConfig.draft_model_config`` holds the draft's ModelConfig (l.165-166).
- ``models/llama_eagle3.py``: ``norm_before_fc`` from ``eagle_config`` then the top level (l.173-175),
  ``fc_norm`` or the legacy ``use_aux_norm`` (l.185-187), ``norm_output`` top level (l.207);
  ``norm_before_residual`` is not read. ``load_weights`` renames legacy names (l.338-348).
- Draft classes: ``LlamaForCausalLMEagle3`` (its ``set_embed`` is inherited from llama.py) and
  ``kimi_k25_eagle3.Eagle3DeepseekV2ForCausalLM``; ``speculative/eagle_worker_v2.py::EagleDraftWorker
  .init_attention_backends`` runs right after the target configured its capture.
"""

from .schema import PROVEN_CPU_ENGINE, DraftFlag, Release, Seam

SPEC_AUX = "sglang.srt.model_executor.model_runner_components.spec_aux_hidden_state"
LLAMA_EAGLE3 = "sglang.srt.models.llama_eagle3"
MLA_EAGLE3 = "sglang.srt.models.kimi_k25_eagle3"
WORKER = "sglang.srt.speculative.eagle_worker_v2"
INIT = ("self", "config", "quant_config", "prefix")

RELEASE = Release(
    version="0.5.23",
    built="2026-10-30",
    supported=True,
    proven=PROVEN_CPU_ENGINE,
    trigger_module=SPEC_AUX,
    seams=(
        Seam("resolve", SPEC_AUX, None, "_resolve_eagle_aux_hidden_state",
             ("config", "server_args", "model_config", "spec_algorithm", "is_draft_worker")),
        Seam("draft.llama.__init__", LLAMA_EAGLE3, "LlamaForCausalLMEagle3", "__init__", INIT),
        Seam("draft.llama.load_weights", LLAMA_EAGLE3, "LlamaForCausalLMEagle3", "load_weights", ("self", "weights")),
        Seam("draft.llama.set_embed", LLAMA_EAGLE3, "LlamaForCausalLMEagle3", "set_embed", ("self", "embed")),
        Seam("draft.mla.__init__", MLA_EAGLE3, "Eagle3DeepseekV2ForCausalLM", "__init__", INIT),
        Seam("draft.mla.load_weights", MLA_EAGLE3, "Eagle3DeepseekV2ForCausalLM", "load_weights", ("self", "weights")),
        Seam("draft.mla.set_embed", MLA_EAGLE3, "Eagle3DeepseekV2ForCausalLM", "set_embed", ("self", "embed")),
        Seam("draft.worker.init_attention_backends", WORKER, "EagleDraftWorker", "init_attention_backends", ("self",)),
    ),
    draft_path_from="runtime_context",
    has_draft_model_config=True,
    draft_flags={
        "norm_before_fc": DraftFlag(("eagle_config.norm_before_fc", "norm_before_fc")),
        "fc_norm": DraftFlag(("fc_norm", "use_aux_norm"), combine="any"),
        "norm_output": DraftFlag(("norm_output",)),
        "norm_before_residual": DraftFlag(("norm_before_residual",), native=False),
    },
    legacy_weight_names={"midlayer.": "layers.0.", "aux_norm_low.": "fc_norm.0.", "aux_norm_mid.": "fc_norm.1.",
                         "aux_norm_high.": "fc_norm.2."},
)
