"""The manifest: round trip, the contract's document shape, and the checks against fc and target."""

import json
import re

import pytest

from sglang_eagle3_capture.errors import ManifestError
from sglang_eagle3_capture.manifest import (
    MANIFEST_FILENAME,
    MANIFEST_FORMAT,
    MANIFEST_VERSION,
    Manifest,
    check_fc_width,
    check_target,
    find_manifest,
    manifest_from_dict,
    read_manifest,
    write_manifest,
)
from sglang_eagle3_capture.target_config import target_dims

KIMI_K25 = {  # shaped like moonshotai/Kimi-K2.5 config.json (decoder dims in text_config)
    "architectures": ["KimiK25ForConditionalGeneration"],
    "model_type": "kimi_k25",
    "text_config": {"architectures": ["DeepseekV3ForCausalLM"], "model_type": "kimi_k2", "num_hidden_layers": 61,
                    "hidden_size": 7168, "vocab_size": 163840},
    "vision_config": {"hidden_size": 1152},
}
DSV3 = {"architectures": ["DeepseekV3ForCausalLM"], "model_type": "deepseek_v3", "num_hidden_layers": 61,
        "hidden_size": 7168}


def _kimi_manifest(path=None):
    prov = {"source": "speculators-config", "file": "config.json", "field": "eagle_aux_hidden_state_layer_ids",
            "original_ids": [0, 3, 31], "convention": "vllm-hf-index", "note": "motivating case"}
    return Manifest((-1, 2, 30), "KimiK25ForConditionalGeneration", 61, 7168, prov, path=path)


def test_write_read_round_trip_and_document_shape(tmp_path):
    m = _kimi_manifest()
    path = write_manifest(tmp_path, m)
    assert path == tmp_path / MANIFEST_FILENAME
    doc = json.loads(path.read_text())
    assert doc == {
        "format": MANIFEST_FORMAT, "version": MANIFEST_VERSION, "layer_ids": [-1, 2, 30],
        "target": {"architecture": "KimiK25ForConditionalGeneration", "num_hidden_layers": 61, "hidden_size": 7168},
        "provenance": m.provenance,
    }
    back = read_manifest(tmp_path)
    assert back == m and back.path == path
    assert read_manifest(path) == m  # a file path works too
    assert back.layer_ids == (-1, 2, 30) and isinstance(back.layer_ids, tuple)
    assert back.fc_in_features == 3 * 7168


def test_missing_manifest_names_the_write_command(tmp_path):
    assert find_manifest(tmp_path) is None
    with pytest.raises(ManifestError) as e:
        read_manifest(tmp_path)
    assert str(tmp_path / MANIFEST_FILENAME) in str(e.value)
    assert "sglang-eagle3-capture manifest write" in str(e.value) and "--target" in str(e.value)


def test_find_manifest_raises_on_an_invalid_file(tmp_path):
    (tmp_path / MANIFEST_FILENAME).write_text("{not json")
    with pytest.raises(ManifestError, match="not valid JSON"):
        find_manifest(tmp_path)


def test_manifest_order_is_kept_not_sorted(tmp_path):
    m = Manifest((30, -1, 2), "DeepseekV3ForCausalLM", 61, 7168, {"source": "manual"})
    write_manifest(tmp_path, m)
    assert read_manifest(tmp_path).layer_ids == (30, -1, 2)


def test_constructor_validates(tmp_path):
    with pytest.raises(ManifestError, match=r"field 'layer_ids'.*outside \[-1, 60\]"):
        Manifest((-1, 2, 61), "DeepseekV3ForCausalLM", 61, 7168)
    with pytest.raises(ManifestError, match=r"field 'target.hidden_size'"):
        Manifest((-1,), "DeepseekV3ForCausalLM", 61, 0)


@pytest.mark.parametrize("ids", [5, "ab", None, b"\x00\x01"])
def test_constructor_rejects_ids_that_are_not_a_list(ids):
    with pytest.raises(ManifestError, match=r"^eagle3_manifest.json: field 'layer_ids': expected a list of integers, "
                       rf"got {type(ids).__name__}; fix: "):
        Manifest(ids, "DeepseekV3ForCausalLM", 61, 7168)


def test_constructor_keeps_ids_as_a_tuple():
    assert Manifest(range(3), "DeepseekV3ForCausalLM", 61, 7168).layer_ids == (0, 1, 2)
    assert Manifest([-1, 4], "DeepseekV3ForCausalLM", 61, 7168).layer_ids == (-1, 4)


def test_a_path_with_control_characters_is_escaped_in_a_layer_id_error(tmp_path):
    with pytest.raises(ManifestError) as e:
        Manifest((99,), "DeepseekV3ForCausalLM", 61, 7168, path=tmp_path / "a\x1bb.json")
    assert "\x1b" not in str(e.value) and "a\\x1bb.json: field 'layer_ids'" in str(e.value)


@pytest.mark.parametrize("where", ["top", "target", "provenance"])
@pytest.mark.parametrize("key", [7, None, (1, 2), 2.5])
def test_non_string_unknown_keys_name_the_key(where, key):
    doc = {"format": MANIFEST_FORMAT, "version": MANIFEST_VERSION, "layer_ids": [-1, 2],
           "target": {"architecture": "DeepseekV3ForCausalLM", "num_hidden_layers": 61, "hidden_size": 7168},
           "provenance": {"source": "manual"}}
    {"top": doc, "target": doc["target"], "provenance": doc["provenance"]}[where][key] = 1
    prefix = "" if where == "top" else f"{where}."
    with pytest.raises(ManifestError, match=rf"field '{re.escape(prefix + repr(key))}': unknown key; fix: remove it"):
        manifest_from_dict(doc)


def test_check_fc_width():
    m = _kimi_manifest()
    check_fc_width(m, 3 * 7168, where="d/model.safetensors: fc.weight")
    with pytest.raises(ManifestError) as e:
        check_fc_width(m, 4 * 7168, where="d/model.safetensors: fc.weight")
    msg = str(e.value)
    assert msg.startswith("d/model.safetensors: fc.weight")
    assert "'layer_ids'" in msg and "'target.hidden_size'" in msg and "trained on 4 hidden states" in msg


def test_check_target_family_and_text_config():
    m = _kimi_manifest()
    check_target(m, KIMI_K25, where="kimi/config.json")
    check_target(m, DSV3, where="dsv3/config.json")  # same family
    check_target(m, dict(DSV3, architectures=["DeepseekV32ForCausalLM"]), where="x")
    with pytest.raises(ManifestError, match=r"x: target architecture LlamaForCausalLM .* 'target.architecture'"):
        check_target(m, dict(DSV3, architectures=["LlamaForCausalLM"]), where="x")
    bad_layers = json.loads(json.dumps(KIMI_K25))
    bad_layers["text_config"]["num_hidden_layers"] = 60
    with pytest.raises(ManifestError, match=r"kimi/config.json: field 'text_config.num_hidden_layers' is 60"
                                            r".*'target.num_hidden_layers' is 61"):
        check_target(m, bad_layers, where="kimi/config.json")
    with pytest.raises(ManifestError, match=r"field 'hidden_size' is 4096.*'target.hidden_size' is 7168"):
        check_target(m, dict(DSV3, hidden_size=4096), where="dsv3/config.json")


def test_check_target_accepts_config_objects():
    from transformers import DeepseekV3Config

    cfg = DeepseekV3Config(num_hidden_layers=61, hidden_size=7168, architectures=["DeepseekV3ForCausalLM"])
    check_target(_kimi_manifest(), cfg, where="obj")
    assert target_dims(cfg, "obj") == ("DeepseekV3ForCausalLM", 61, 7168)



def test_fc_width_and_target_errors_escape_the_names_they_show(tmp_path):
    m = _kimi_manifest(path=tmp_path / "m\x1b.json")
    with pytest.raises(ManifestError) as e:
        check_fc_width(m, 4 * 7168, where="d\x1b/model.safetensors: fc.weight")
    assert "\x1b" not in str(e.value) and str(e.value).startswith("d\\x1b/model.safetensors: fc.weight: ")
    for cfg in ({**DSV3, "architectures": ["Llama\x1bForCausalLM"]}, {**KIMI_K25, "text_config": {
            **KIMI_K25["text_config"], "hidden_size": 8}}):
        with pytest.raises(ManifestError) as e:
            check_target(m, cfg, where="t\x1b/config.json")
        assert "\x1b" not in str(e.value) and str(e.value).startswith("t\\x1b/config.json: ")
