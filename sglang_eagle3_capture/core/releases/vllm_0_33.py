"""vLLM 0.33.0 (wheel commit 4ba787ec9): how its two model runners pick an EAGLE-3 draft's target layers, and the V1
runner's seams the vLLM plugin serves (read in the wheel and run on fake configs; seam-probed statically by
tests/unit/test_vllm_release_seams_static.py; not run, as no CPU build of 0.33 exists):

- Model Runner V2, the default (``vllm/config/vllm.py`` l.730-767): ``v1/worker/gpu/spec_decode/eagle/eagle3_utils.py::
  get_eagle3_aux_layers_from_config`` (l.113-150) reads the top-level ``eagle_aux_hidden_state_layer_ids``, then
  ``eagle_config["layer_ids"]``; never the nested ``eagle_config["eagle_aux_hidden_state_layer_ids"]``, so an
  SGLang/SpecForge draft silently gets the default ``(2, N//2, N-3)`` (logged at INFO only). The plugin does not
  patch it: its gate serves a manifest there only when V2's own capture of the loaded model is the manifest's
  (``load_model`` l.385, ``set_eagle3_aux_hidden_state_layers`` l.414; ascending decoder-stream ids), else refuses
  (``VLLM_USE_V2_MODEL_RUNNER=0`` selects the V1 runner, which the plugin feeds any manifest).
- The V1 runner (``VLLM_USE_V2_MODEL_RUNNER=0``): ``v1/worker/gpu_model_runner.py::_get_eagle3_aux_layers_from_config``
  (l.5190-5225) reads the top-level key, then the nested ``eagle_aux_hidden_state_layer_ids``;
  ``_setup_eagle3_aux_hidden_state_outputs`` l.5169, ``_model_forward`` l.3586, as in 0.32.
- Both use an id as an HF index, never shifted: ``interfaces.py`` l.1616-1650 (sorted, duplicates dropped; 0 is the
  embedding, N the last layer's output before the final norm); ``deepseek_v2.py`` l.1561-1587 computes
  ``hidden_states + residual`` before layer 0 and crashes there, and assigns the ids unsorted (l.1955).
"""

from .schema import PROVEN_SEAM_PROBE, EngineReader, VllmRelease
from .vllm_0_32 import RUNNER, STACK, V1_READER_KEYS, V1_SEAMS

READERS = (
    EngineReader("vLLM 0.33 Model Runner V2 (default)",
                 ("eagle_aux_hidden_state_layer_ids", "eagle_config.layer_ids"),
                 embedding_crashes=("deepseek_v2",),
                 note="does not read eagle_config.eagle_aux_hidden_state_layer_ids", unsorted=("deepseek_v2",)),
    EngineReader("vLLM 0.33 V1 runner (VLLM_USE_V2_MODEL_RUNNER=0)", V1_READER_KEYS,
                 embedding_crashes=("deepseek_v2",), unsorted=("deepseek_v2",)),
)

RELEASE = VllmRelease(version="0.33.0", built="2026-11-01", supported=True, proven=PROVEN_SEAM_PROBE, readers=READERS,
                      trigger_module=RUNNER, seams=V1_SEAMS, runner="V1 GPUModelRunner (VLLM_USE_V2_MODEL_RUNNER=0)",
                      embedding_crashes=("deepseek_v2",), stack=STACK)
