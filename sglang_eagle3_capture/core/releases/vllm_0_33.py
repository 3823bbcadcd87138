"""vLLM 0.33.0 (wheel commit 4ba787ec9): how its two model runners pick an EAGLE-3 draft's target layers.

Read in the wheel and run on fake configs (docs/releases.md):

- Model Runner V2, the default (``vllm/config/vllm.py`` l.730-767): ``v1/worker/gpu/spec_decode/eagle/eagle3_utils.py::
  get_eagle3_aux_layers_from_config`` (l.113-150) reads the top-level ``eagle_aux_hidden_state_layer_ids``, then
  ``eagle_config["layer_ids"]``; never the nested ``eagle_config["eagle_aux_hidden_state_layer_ids"]``, so an
  SGLang/SpecForge draft silently gets the default ``(2, N//2, N-3)`` (logged at INFO only).
- The V1 runner (``VLLM_USE_V2_MODEL_RUNNER=0``): ``v1/worker/gpu_model_runner.py::_get_eagle3_aux_layers_from_config``
  (l.5190-5225) reads the top-level key, then the nested ``eagle_aux_hidden_state_layer_ids``.
- Both use an id as an HF index, never shifted: ``interfaces.py`` l.1616-1650 (sorted, duplicates dropped; 0 is the
  embedding, N the last layer's output before the final norm); ``deepseek_v2.py`` l.1561-1587 computes
  ``hidden_states + residual`` before layer 0 and crashes there.
"""

from .schema import EngineReader

READERS = (
    EngineReader("vLLM 0.33 Model Runner V2 (default)",
                 ("eagle_aux_hidden_state_layer_ids", "eagle_config.layer_ids"),
                 embedding_crashes=("deepseek_v2",),
                 note="does not read eagle_config.eagle_aux_hidden_state_layer_ids"),
    EngineReader("vLLM 0.33 V1 runner (VLLM_USE_V2_MODEL_RUNNER=0)",
                 ("eagle_aux_hidden_state_layer_ids", "eagle_config.eagle_aux_hidden_state_layer_ids"),
                 embedding_crashes=("deepseek_v2",)),
)
