"""Names of the draft ``config.json`` fields this package reads or writes, spelled once.

- :data:`IDS_KEY`: the capture-id list, nested in ``eagle_config`` (SGLang, SpecForge, Model Optimizer)
  or at the top level (speculators, read by vLLM as HF hidden-state indices);
- :data:`CONVENTION_KEY` = :data:`LAYER_ID_CONVENTION` next to the nested ids marks them as this
  package's layer ids (-1 = embedding, k = output of decoder layer k);
- :data:`CONVERTED_MARKER_KEY`: written by ``convert`` (and ``manifest write --fail-closed``); its nested ids are
  then loop indices chosen so that stock SGLang reads them right, or :data:`FAIL_CLOSED_IDS`, and the manifest it
  names is the statement of the wiring;
- :data:`FAIL_CLOSED_IDS`: the nested ids' value where no id list makes every supported stock SGLang release feed
  the manifest exactly: an object, which every stock ``set_eagle3_layers_to_capture`` rejects at startup
  (``layer_ids[0]`` raises ``KeyError: 0``, ``val + 1`` a ``TypeError``), so a server without the plugin refuses the
  draft instead of feeding its fc other hidden states. Only a reader holding the draft's manifest accepts it
  (:func:`is_fail_closed`);
- :data:`VLLM_FAIL_CLOSED_IDS`: the top-level ids' value (the key stock vLLM reads first, SGLang never) where no id list
  makes stock vLLM feed the manifest exactly: a list of an integer and a string, which every stock vLLM model that
  keeps its ids as ``tuple(sorted(set(ids)))`` rejects while the model runner loads the model (``TypeError``), and
  whose 0 makes the models that keep them unsorted (DeepSeek) fail at their first forward (index 0, the embedding,
  has no residual there). Only a reader holding the draft's manifest accepts it (:func:`is_vllm_fail_closed`).
"""

from typing import Any

IDS_KEY = "eagle_aux_hidden_state_layer_ids"
CONVENTION_KEY = "eagle_aux_hidden_state_layer_ids_convention"
LAYER_ID_CONVENTION = "sglang-eagle3-capture/layer-id"
CONVERTED_MARKER_KEY = "eagle3_capture_manifest"
FAIL_CLOSED_KEY = "sglang-eagle3-capture"
FAIL_CLOSED_IDS = {FAIL_CLOSED_KEY: "stock SGLang cannot feed this draft's fc what it was trained on; its inputs are "
                                    "the layer ids in eagle3_manifest.json: serve it with the sglang-eagle3-capture "
                                    "plugin (docs/troubleshooting.md)"}


def is_fail_closed(value: Any) -> bool:
    """True when ``value`` (a draft config's ``eagle_config`` ids) is the fail-closed object: :data:`FAIL_CLOSED_IDS`
    or any other text under its one key."""
    return isinstance(value, dict) and list(value) == [FAIL_CLOSED_KEY]

VLLM_FAIL_CLOSED_IDS = [0, f"{FAIL_CLOSED_KEY}: stock vLLM cannot feed this draft's fc what it was trained on; its "
                           "inputs are the layer ids in eagle3_manifest.json: serve it with the sglang-eagle3-capture "
                           "vLLM plugin (docs/vllm.md)"]


def is_vllm_fail_closed(value: Any) -> bool:
    """True when ``value`` (a draft config's top-level ids) is the vLLM fail-closed value :data:`VLLM_FAIL_CLOSED_IDS`
    (any text after its key)."""
    return (isinstance(value, list) and len(value) == 2 and type(value[0]) is int and value[0] == 0
            and isinstance(value[1], str) and value[1].startswith(f"{FAIL_CLOSED_KEY}:"))
