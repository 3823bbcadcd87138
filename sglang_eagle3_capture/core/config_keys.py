"""Names of the draft ``config.json`` fields this package reads or writes, spelled once, and the fail-closed values
that make a stock engine refuse a draft it would feed other hidden states (docs/manifest.md)."""

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
    """``value`` (``eagle_config``'s ids) is :data:`FAIL_CLOSED_IDS` or any other text under its one key."""
    return isinstance(value, dict) and list(value) == [FAIL_CLOSED_KEY]

VLLM_FAIL_CLOSED_IDS = [0, f"{FAIL_CLOSED_KEY}: stock vLLM cannot feed this draft's fc what it was trained on; its "
                           "inputs are the layer ids in eagle3_manifest.json: serve it with the sglang-eagle3-capture "
                           "vLLM plugin (docs/vllm.md)"]


def is_vllm_fail_closed(value: Any) -> bool:
    """``value`` (the top-level ids) is :data:`VLLM_FAIL_CLOSED_IDS` (any text after its key)."""
    return (isinstance(value, list) and len(value) == 2 and type(value[0]) is int and value[0] == 0
            and isinstance(value[1], str) and value[1].startswith(f"{FAIL_CLOSED_KEY}:"))
