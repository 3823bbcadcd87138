"""SGLang 0.5.23 (wheel built 2026-10-30): the newest supported release; older release files derive from it.

Read in the installed sources (``sglang/srt/``) and run on CPU (docs/releases.md):

- ``model_executor/model_runner.py::ModelRunner.init_spec_aux_hidden_state`` (l.596, called at l.426, before
  ``initialize()`` -> ``load_model()``) sets ``self.spec_aux_config`` from
  ``model_runner_components/spec_aux_hidden_state.py::_resolve_eagle_aux_hidden_state`` (l.132-196), which reads
  the capture ids from the draft's ``eagle_config`` only; ``SpecAuxHiddenStateConfig.draft_model_config`` holds
  the draft's ModelConfig (l.165-166). The same method, with the same body, exists from 0.5.17 on: the plugin's
  one resolution seam. ``ModelRunner`` exists only once ``model_runner.py`` has finished executing, hence the
  trigger module.
- ``models/llama_eagle3.py``: ``norm_before_fc`` from ``eagle_config`` then the top level (l.173-175),
  ``fc_norm`` or the legacy ``use_aux_norm`` (l.185-187), ``norm_output`` top level (l.207);
  ``norm_before_residual`` is not read. ``load_weights`` renames legacy names by substring (l.338-348).
- Draft classes: ``LlamaForCausalLMEagle3`` (its ``set_embed`` is inherited from llama.py) and
  ``kimi_k25_eagle3.Eagle3DeepseekV2ForCausalLM``.
- Acceptance metrics (observe/metrics.py): see :func:`metrics_init`; ``SchedulerMetricsCollectorContext``
  (observability/metrics_collector.py l.326) says whether a scheduler is the stats-logging rank.
- ``runtime_context.get_spec()`` holds the resolved draft path (``server_args`` keeps the raw input since 0.5.19).
- The first-batch self-check's transient gate: ``ModelRunner.forward`` (l.1813: real batches only; dummy runs,
  graph warm-ups and captures call the model directly) and ``PrefillCudaGraphRunner.can_replay_locally``
  (model_executor/runner/prefill_cuda_graph_runner.py l.1325: whether a captured prefill graph replays the batch,
  also the DP-attention vote). Its references: a layer's input norm is a module call with ``(x, residual)``
  (``layer_boundary/residual/add_norm.py``), a method ``forward_with_allreduce_fusion`` under the all-reduce fusion
  (``layer_boundary/fusions/allreduce.py`` l.100-111), and ``forward_batch.residual_stream.residual`` holds the
  completed residual when the next layer's attention starts (``layer_boundary/stage.py::_prepare_attention``).
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
    """The acceptance metrics' seam on ``Scheduler.init_metrics_collector`` (l.806; called from ``__init__`` after
    ``load_plugins``), whose parameters vary; the other, ``Req.update_spec_correct_drafts_histogram``
    (schedule_batch.py l.1566), is SGLang's per-request record of one verify step, called from
    ``scheduler_components/batch_result_processor.py`` l.836."""
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
