"""Names of the draft ``config.json`` fields this package reads or writes, spelled once.

- :data:`IDS_KEY`: the capture-id list, nested in ``eagle_config`` (SGLang, SpecForge, Model Optimizer)
  or at the top level (speculators, read by vLLM as HF hidden-state indices);
- :data:`CONVENTION_KEY` = :data:`LAYER_ID_CONVENTION` next to the nested ids marks them as this
  package's layer ids (-1 = embedding, k = output of decoder layer k);
- :data:`CONVERTED_MARKER_KEY`: written by ``convert``; its nested ids are then loop indices chosen so
  that stock SGLang reads them right, and the manifest it names is the statement of the wiring.
"""

IDS_KEY = "eagle_aux_hidden_state_layer_ids"
CONVENTION_KEY = "eagle_aux_hidden_state_layer_ids_convention"
LAYER_ID_CONVENTION = "sglang-eagle3-capture/layer-id"
CONVERTED_MARKER_KEY = "eagle3_capture_manifest"
