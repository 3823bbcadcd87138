"""The manifest: round trip, the contract's document shape, and the checks against fc and target."""

import json

import pytest

from sglang_eagle3_capture.core.errors import InputError
from sglang_eagle3_capture.core.manifest import (
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
from sglang_eagle3_capture.core.schemas.manifest import VERSIONS
from sglang_eagle3_capture.core.target_config import target_dims
from support.cli import run

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
    with pytest.raises(InputError) as e:
        read_manifest(tmp_path)
    assert e.value.file == str(tmp_path / MANIFEST_FILENAME) and e.value.field == "<file>"
    assert "sglang-eagle3-capture manifest write" in e.value.fix and "--target" in e.value.fix


def test_find_manifest_raises_on_an_invalid_file(tmp_path):
    (tmp_path / MANIFEST_FILENAME).write_text("{not json")
    with pytest.raises(InputError) as e:
        find_manifest(tmp_path)
    assert e.value.file == str(tmp_path / MANIFEST_FILENAME) and e.value.field == "<document>" and e.value.fix


def test_manifest_order_is_kept_not_sorted(tmp_path):
    m = Manifest((30, -1, 2), "DeepseekV3ForCausalLM", 61, 7168, {"source": "manual"})
    write_manifest(tmp_path, m)
    assert read_manifest(tmp_path).layer_ids == (30, -1, 2)


def test_constructor_validates(tmp_path):
    with pytest.raises(InputError) as e:
        Manifest((-1, 2, 61), "DeepseekV3ForCausalLM", 61, 7168)
    assert (e.value.file, e.value.field) == (MANIFEST_FILENAME, "layer_ids") and "[-1, 60]" in e.value.fix
    with pytest.raises(InputError) as e:
        Manifest((-1,), "DeepseekV3ForCausalLM", 61, 0, path=tmp_path / "m.json")
    assert (e.value.file, e.value.field) == (str(tmp_path / "m.json"), "target.hidden_size") and e.value.fix


@pytest.mark.parametrize("ids", [5, "ab", None, b"\x00\x01"])
def test_constructor_rejects_ids_that_are_not_a_list(ids):
    with pytest.raises(InputError) as e:
        Manifest(ids, "DeepseekV3ForCausalLM", 61, 7168)
    assert (e.value.file, e.value.field) == (MANIFEST_FILENAME, "layer_ids") and e.value.fix


def test_constructor_keeps_ids_as_a_tuple():
    assert Manifest(range(3), "DeepseekV3ForCausalLM", 61, 7168).layer_ids == (0, 1, 2)
    assert Manifest([-1, 4], "DeepseekV3ForCausalLM", 61, 7168).layer_ids == (-1, 4)


def test_a_path_with_control_characters_is_escaped_in_a_layer_id_error(tmp_path):
    with pytest.raises(InputError) as e:
        Manifest((99,), "DeepseekV3ForCausalLM", 61, 7168, path=tmp_path / "a\x1bb.json")
    assert "\x1b" not in str(e.value) and (e.value.file, e.value.field) == (str(tmp_path / "a\\x1bb.json"), "layer_ids")


def _doc():
    return {"format": MANIFEST_FORMAT, "version": MANIFEST_VERSION, "layer_ids": [-1, 2],
            "target": {"architecture": "DeepseekV3ForCausalLM", "num_hidden_layers": 61, "hidden_size": 7168},
            "provenance": {"source": "manual"}}


@pytest.mark.parametrize("where", ["top", "target"])
@pytest.mark.parametrize("key", [7, None, (1, 2), 2.5])
def test_non_string_unknown_keys_name_the_key(where, key):
    doc = _doc()
    {"top": doc, "target": doc["target"]}[where][key] = 1
    with pytest.raises(InputError) as e:
        manifest_from_dict(doc)
    assert e.value.field == ("" if where == "top" else f"{where}.") + repr(key) and e.value.fix


def test_metadata_is_kept_as_it_is_never_refused(tmp_path):
    """The availability bug: a provenance key a later version adds, a tab in the note, a value of another type."""
    doc = _doc()
    doc["provenance"] = {"source": "manual", "note": "trained\tby hand\x1b[2J", "added_by_v2": {"x": [1]},
                         "inferred": "yes", "original_ids": ["0", True]}
    (tmp_path / MANIFEST_FILENAME).write_text(json.dumps(doc))
    m = read_manifest(tmp_path)
    assert m.provenance == doc["provenance"] and m.layer_ids == (-1, 2)
    assert m.to_dict()["provenance"] == doc["provenance"]  # and written back as it was
    doc.pop("provenance")
    assert manifest_from_dict(doc).provenance == {"source": "manual"}  # absent: the default


@pytest.mark.parametrize("mutate, field", [
    (lambda d: d.update(extra=1), "extra"),
    (lambda d: d["target"].update(num_layers=61), "target.num_layers"),
    (lambda d: d.update(version=max(VERSIONS) + 1), "version"),
    (lambda d: d.update(format="eagle"), "format"),
    (lambda d: d.update(format="eagle", version=max(VERSIONS) + 1, extra=1), "format"),  # the header is named first
    (lambda d: d.update(version=max(VERSIONS) + 1, layer_ids="x"), "version"),
])
def test_what_changes_the_fc_is_still_refused_naming_the_field(tmp_path, mutate, field):
    doc = _doc()
    mutate(doc)
    (tmp_path / MANIFEST_FILENAME).write_text(json.dumps(doc))
    with pytest.raises(InputError) as e:
        read_manifest(tmp_path)
    assert (e.value.file, e.value.field) == (str(tmp_path / MANIFEST_FILENAME), field) and e.value.fix
    assert e.value.exit_code == 2


def test_manifest_show_exits_2_on_a_refused_field_and_0_on_odd_metadata(tmp_path, capsys):
    doc = _doc()
    doc["provenance"]["note"] = "a\tb"
    (tmp_path / MANIFEST_FILENAME).write_text(json.dumps(doc))
    rc, out, _ = run(capsys, "manifest", "show", tmp_path)
    assert rc == 0 and "provenance.note: a\\tb" in out  # shown escaped
    doc["version"] = max(VERSIONS) + 1
    (tmp_path / MANIFEST_FILENAME).write_text(json.dumps(doc))
    rc, _, err = run(capsys, "manifest", "show", tmp_path)
    assert rc == 2 and err.count("\n") == 1 and "'version'" in err


def test_check_fc_width():
    m = _kimi_manifest()
    check_fc_width(m, 3 * 7168, file="d/model.safetensors")
    with pytest.raises(InputError) as e:
        check_fc_width(m, 4 * 7168, file="d/model.safetensors")
    assert (e.value.file, e.value.field) == ("d/model.safetensors", "fc.weight") and e.value.fix
    assert "trained on 4 hidden states" in e.value.problem


def test_check_target_family_and_text_config():
    m = _kimi_manifest()
    check_target(m, KIMI_K25, where="kimi/config.json")
    check_target(m, DSV3, where="dsv3/config.json")  # same family
    check_target(m, dict(DSV3, architectures=["DeepseekV32ForCausalLM"]), where="x")
    bad_layers = json.loads(json.dumps(KIMI_K25))
    bad_layers["text_config"]["num_hidden_layers"] = 60
    for cfg, file, field in ((dict(DSV3, architectures=["LlamaForCausalLM"]), "x", "architectures"),
                             (bad_layers, "kimi/config.json", "text_config.num_hidden_layers"),
                             (dict(DSV3, hidden_size=4096), "dsv3/config.json", "hidden_size")):
        with pytest.raises(InputError) as e:
            check_target(m, cfg, where=file)
        assert (e.value.file, e.value.field) == (file, field) and e.value.fix


def test_check_target_accepts_config_objects():
    from transformers import DeepseekV3Config

    cfg = DeepseekV3Config(num_hidden_layers=61, hidden_size=7168, architectures=["DeepseekV3ForCausalLM"])
    check_target(_kimi_manifest(), cfg, where="obj")
    assert target_dims(cfg, "obj") == ("DeepseekV3ForCausalLM", 61, 7168)


def test_fc_width_and_target_errors_escape_the_names_they_show(tmp_path):
    m = _kimi_manifest(path=tmp_path / "m\x1b.json")
    with pytest.raises(InputError) as e:
        check_fc_width(m, 4 * 7168, file="d\x1b/model.safetensors")
    assert "\x1b" not in str(e.value) and e.value.file == "d\\x1b/model.safetensors"
    for cfg in ({**DSV3, "architectures": ["Llama\x1bForCausalLM"]}, {**KIMI_K25, "text_config": {
            **KIMI_K25["text_config"], "hidden_size": 8}}):
        with pytest.raises(InputError) as e:
            check_target(m, cfg, where="t\x1b/config.json")
        assert "\x1b" not in str(e.value) and e.value.file == "t\\x1b/config.json"
