"""SGLang 0.5.23 (wheel built 2026-10-30), the newest supported release; the older files derive from it. Read in
``sglang/srt/`` and run on CPU (docs/releases.md): the resolution seam ``ModelRunner.init_spec_aux_hidden_state``
(model_runner.py:596, called at 426 before the model loads; ids read only from ``eagle_config``,
spec_aux_hidden_state.py:132-196; ``draft_model_config`` 165-166); the draft classes (llama_eagle3.py: flags 173-175,
185-187, 207; legacy names 338-348; kimi_k25_eagle3.py); the self-check's gate ``ModelRunner.forward`` (1813) and
``PrefillCudaGraphRunner.can_replay_locally`` (prefill_cuda_graph_runner.py:1325).
"""

from .schema import FUSED_NORM, NORM_OPERANDS, PROVEN_CPU_ENGINE, RESIDUAL_STREAM, DraftFlag, Release, Seam

MODEL_RUNNER = "sglang.srt.model_executor.model_runner"
LLAMA_EAGLE3 = "sglang.srt.models.llama_eagle3"
MLA_EAGLE3 = "sglang.srt.models.kimi_k25_eagle3"
INIT = ("self", "config", "quant_config", "prefix")
PREFILL_GRAPH = "sglang.srt.model_executor.runner.prefill_cuda_graph_runner"
SCHEDULER = "sglang.srt.managers.scheduler"
SCHEDULE_BATCH = "sglang.srt.managers.schedule_batch"
MR_FORWARD = ("self", "forward_batch", "skip_attn_backend_init", "pp_proxy_tensors", "reinit_attn_backend",
              "split_forward_count")
REPLAY = ("self", "batch_size", "num_tokens", "input_embeds", "replace_embeds", "prefix_lens", "is_target_verify",
          "capture_hidden_mode", "return_logprob", "lora_ineligible")  # + per release, see eager_prefill()


def eager_prefill(*more: str) -> Seam:
    """The self-check's seam on ``PrefillCudaGraphRunner.can_replay_locally``, whose trailing parameters vary."""
    return Seam("selfcheck.eager_prefill", PREFILL_GRAPH, "PrefillCudaGraphRunner", "can_replay_locally",
                REPLAY + more)


def metrics_init(*more: str) -> Seam:
    """The metrics' seam ``Scheduler.init_metrics_collector`` (scheduler.py:806), whose parameters vary; the other is
    ``Req.update_spec_correct_drafts_histogram`` (schedule_batch.py:1566), called per verify step."""
    return Seam("metrics.init", SCHEDULER, "Scheduler", "init_metrics_collector", ("self", *more))


RELEASE = Release(
    version="0.5.23",
    built="2026-10-30",
    supported=True,
    proven=PROVEN_CPU_ENGINE,
    trigger_module=MODEL_RUNNER,
    seams=(
        Seam("resolve", MODEL_RUNNER, "ModelRunner", "init_spec_aux_hidden_state", ("self",)),
        Seam("draft.llama.__init__", LLAMA_EAGLE3, "LlamaForCausalLMEagle3", "__init__", INIT),
        Seam("draft.llama.load_weights", LLAMA_EAGLE3, "LlamaForCausalLMEagle3", "load_weights", ("self", "weights")),
        Seam("draft.llama.set_embed", LLAMA_EAGLE3, "LlamaForCausalLMEagle3", "set_embed", ("self", "embed")),
        Seam("draft.mla.__init__", MLA_EAGLE3, "Eagle3DeepseekV2ForCausalLM", "__init__", INIT),
        Seam("draft.mla.load_weights", MLA_EAGLE3, "Eagle3DeepseekV2ForCausalLM", "load_weights", ("self", "weights")),
        Seam("draft.mla.set_embed", MLA_EAGLE3, "Eagle3DeepseekV2ForCausalLM", "set_embed", ("self", "embed")),
        Seam("selfcheck.gate", MODEL_RUNNER, "ModelRunner", "forward", MR_FORWARD),
        eager_prefill("is_mixed", "batch_max_context_len", "contains_mm_inputs"),
        metrics_init(),
        Seam("metrics.verify", SCHEDULE_BATCH, "Req", "update_spec_correct_drafts_histogram",
             ("self", "num_correct_drafts")),
    ),
    selfcheck_routes=(NORM_OPERANDS, FUSED_NORM, RESIDUAL_STREAM),
    # gpt_oss.py l.726-737 (since 0.5.17: the capture loop rewrite); minimax_m3.py l.1954-1965 (0.5.23 only);
    # gemma4_causal.py l.1093-1094 and gemma3_causal.py l.671-672 append loop index N after the loop, the final norm's
    # input (0.5.17-0.5.23)
    final_norm_captures=("gpt_oss", "minimax_m3", "gemma4", "gemma3"),
    # gemma3_causal.py: a decoder layer returns (post_feedforward_layernorm output, residual) unsummed (l.408-410),
    # the loop appends the first (l.638-639, 656-657, 671-672); the same since 0.5.17 (0.5.15.post1 summed them)
    branch_captures=("gemma3",),
    draft_path_from="runtime_context",
    has_draft_model_config=True,
    resolution_record=True,  # arg_groups/overrides.py l.110-136; speculative_hook.py l.1255-1266 declares through it
    draft_flags={
        "norm_before_fc": DraftFlag(("eagle_config.norm_before_fc", "norm_before_fc")),
        "fc_norm": DraftFlag(("fc_norm", "use_aux_norm"), combine="any"),
        "norm_output": DraftFlag(("norm_output",)),
        "norm_before_residual": DraftFlag(("norm_before_residual",), native=False),
    },
    legacy_weight_names={"midlayer.": "layers.0.", "aux_norm_low.": "fc_norm.0.", "aux_norm_mid.": "fc_norm.1.",
                         "aux_norm_high.": "fc_norm.2."},
)
