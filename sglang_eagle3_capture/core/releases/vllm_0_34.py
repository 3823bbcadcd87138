"""vLLM 0.34.0 (read in the wheel, not run): the V1 model runner is gone (``v1/worker/gpu_model_runner.py`` is absent;
``v1/worker/gpu/model_runner.py:206`` is the only runner), so the plugin's capture seams do not exist there. Its gate
(``v1/worker/gpu_worker.py:595`` ``Worker.load_model``, unchanged) serves a manifest only when Model Runner V2's own
capture of the loaded model is the manifest's (``load_model`` l.398, ``set_eagle3_aux_hidden_state_layers`` l.427), and
refuses the rest (the final norm's output, a non-ascending fc order, the embedding on DeepSeek).

Model Runner V2 (``v1/worker/gpu/model_runner.py:425-429``) calls ``eagle3_utils.set_eagle3_aux_hidden_state_layers``,
whose ``get_eagle3_aux_layers_from_config`` (``v1/worker/gpu/spec_decode/eagle/eagle3_utils.py:103-150``) reads the
top-level ``eagle_aux_hidden_state_layer_ids``, then DFlash's ``target_layer_ids`` (+1), DSpark's ids (+1, except
``deepseek_v41``), ``target_layer_ids`` (+1), then ``dflash_config.layer_ids`` / ``eagle_config.layer_ids``: never the
nested ``eagle_config.eagle_aux_hidden_state_layer_ids``. Ids are HF indices, ``tuple(sorted(set(...)))``
(``interfaces.py:1629-1630``) except DeepSeek's ``set_aux_hidden_state_layers`` (``deepseek_v2.py:1955``, unsorted).
"""

from .schema import PROVEN_SEAM_PROBE, EngineReader, VllmRelease
from .vllm_0_32 import STACK, V1_SEAMS

RELEASE = VllmRelease(
    version="0.34.0", built="2026-11-16", supported=True, proven=PROVEN_SEAM_PROBE,
    readers=(EngineReader("vLLM 0.34 Model Runner V2", ("eagle_aux_hidden_state_layer_ids", "eagle_config.layer_ids"),
                          embedding_crashes=("deepseek_v2",), unsorted=("deepseek_v2",),
                          note="does not read eagle_config.eagle_aux_hidden_state_layer_ids (the DFlash and DSpark "
                               "keys it reads before eagle_config.layer_ids are absent from EAGLE-3 drafts)"),),
    runner="Model Runner V2 (not patched: its capture verified at load)",
    seams=tuple(s for s in V1_SEAMS if s.role in ("vllm.gate", "vllm.v2", "vllm.metrics.init", "vllm.metrics.observe")),
    embedding_crashes=("deepseek_v2",), stack=STACK)
