"""Names of the draft ``config.json`` fields this package reads or writes, spelled once.

:data:`IDS_KEY` holds the capture ids, nested in ``eagle_config`` (SGLang) or at the top level (speculators, read by
vLLM); :data:`CONVENTION_KEY` beside the nested ids marks them as this package's layer ids;
:data:`CONVERTED_MARKER_KEY` is written by ``convert`` and ``manifest write --fail-closed``.
:data:`FAIL_CLOSED_IDS` and :data:`VLLM_FAIL_CLOSED_IDS` stand in for ids no stock engine would read right: every
stock engine refuses them at startup or first forward, so a server without the plugin refuses the draft instead of
feeding its fc other hidden states (docs/manifest.md).
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
