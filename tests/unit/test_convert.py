"""``convert`` (doctor/convert.py): speculators (built by the speculators package itself) and SpecForge drafts ->
SGLang drafts, without SGLang.

Routing only, so tensors are compared with ``torch.equal``. SGLang parsing the converted config is in
tests/inprocess/test_convert_sglang_config.py; SGLang 0.5.23's own loader putting every tensor in place, in
tests/engine/test_convert_sglang_load.py.
"""

import json

import pytest
import torch
from safetensors.torch import load_file, save_file

from sglang_eagle3_capture.core.config_keys import CONVERTED_MARKER_KEY, is_fail_closed
from sglang_eagle3_capture.core.errors import InputError
from sglang_eagle3_capture.core.manifest import MANIFEST_FILENAME, read_manifest
from sglang_eagle3_capture.core.stock import stock_sglang_capture
from sglang_eagle3_capture.doctor.convert import convert
from support.speculators_drafts import build_specforge_draft, build_speculators_draft, write_target


@pytest.fixture(scope="module")
def converted(speculators_draft, kimi_target, tmp_path_factory):
    dst = tmp_path_factory.mktemp("conv") / "sglang_draft"
    return convert(speculators_draft, dst, target=kimi_target)


def test_speculators_checkpoint_converts_with_manifest_and_config(converted, speculators_draft):
    dst = converted.dst
    m = read_manifest(dst)
    assert m.layer_ids == (-1, 2, 30)
    assert ((m.target_architecture, m.target_num_hidden_layers, m.target_hidden_size)
            == ("KimiK25ForConditionalGeneration", 61, 64))
    assert m.provenance["source"] == "speculators-config" and m.provenance["original_ids"] == [0, 3, 31]
    assert m.provenance["file"] == str((speculators_draft / "config.json").resolve())
    cfg = json.loads((dst / "config.json").read_text())
    src = json.loads((speculators_draft / "config.json").read_text())
    assert cfg["architectures"] == ["LlamaForCausalLMEagle3"] and cfg["model_type"] == "llama"
    assert cfg["eagle_config"] == {"eagle_aux_hidden_state_layer_ids": [0, 3, 31], "use_aux_hidden_state": True}
    assert cfg[CONVERTED_MARKER_KEY] == MANIFEST_FILENAME
    assert ((cfg["target_hidden_size"], cfg["num_aux_hidden_states"], cfg["draft_vocab_size"])
            == (64, 3, src["draft_vocab_size"]))
    for flag in ("norm_before_fc", "fc_norm", "norm_output", "norm_before_residual"):
        assert cfg[flag] is src[flag], flag
    for key, value in src["transformer_layer_config"].items():  # flattened
        assert cfg[key] == value, key
    assert converted.not_copied == ("config.py",) and converted.dropped == ()
    assert any("norm_before_residual" in line for line in converted.messages)


def test_converted_weights_are_the_source_tensors_renamed(converted, speculators_draft):
    src = load_file(str(speculators_draft / "model.safetensors"))
    out = load_file(str(converted.dst / "model.safetensors"))
    expected_names = {("midlayer." + n[len("layers.0."):]) if n.startswith("layers.0.") else n for n in src}
    assert set(out) == expected_names
    for old, t in src.items():
        new = ("midlayer." + old[len("layers.0."):]) if old.startswith("layers.0.") else old
        assert out[new].dtype == t.dtype and torch.equal(out[new], t), old
    assert dict(converted.renamed) == {n: "midlayer." + n[len("layers.0."):] for n in src if n.startswith("layers.0.")}


def test_stock_sglang_0_5_23_would_feed_the_manifest(converted):
    cfg = json.loads((converted.dst / "config.json").read_text())
    stock = stock_sglang_capture(cfg, 61, family="deepseek_v2", release="0.5.23")
    assert stock.fed_layer_ids == (-1, 2, 30) and stock.problem is None
    assert not any("without the plugin" in line for line in converted.messages)


def test_specforge_draft_converts(tmp_path):
    src = build_specforge_draft(tmp_path / "sf", ids=(1, 29, 57))
    target = write_target(tmp_path / "dsv3", architecture="DeepseekV3ForCausalLM")
    report = convert(src, tmp_path / "out", target=target / "config.json")
    assert report.source_format == "sglang-eagle-config" and report.manifest.layer_ids == (1, 29, 57)
    cfg = json.loads((tmp_path / "out" / "config.json").read_text())
    # loop indices, used as given by 0.5.23
    assert cfg["eagle_config"]["eagle_aux_hidden_state_layer_ids"] == [2, 30, 58]
    assert stock_sglang_capture(cfg, 61, family="deepseek_v2").fed_layer_ids == (1, 29, 57)
    a, b = load_file(str(src / "model.safetensors")), load_file(str(tmp_path / "out" / "model.safetensors"))
    assert set(a) == set(b) and all(torch.equal(a[n], b[n]) for n in a)


def test_layer_ids_override_and_first_loop_index_1_is_reordered(speculators_draft, kimi_target, tmp_path):
    report = convert(speculators_draft, tmp_path / "out", target=kimi_target, layer_ids=[0, 2, 30])
    m = read_manifest(tmp_path / "out")
    assert m.layer_ids == (0, 2, 30) and m.provenance["source"] == "manual"
    assert "speculators-config read [-1, 2, 30]" in m.provenance["note"]
    assert any("overrides [-1, 2, 30]" in line for line in report.messages)
    cfg = json.loads((tmp_path / "out" / "config.json").read_text())
    assert cfg["eagle_config"]["eagle_aux_hidden_state_layer_ids"] == [3, 31, 1]  # not [1, ...]: 0.5.23 would shift it
    assert stock_sglang_capture(cfg, 61, family="deepseek_v2").fed_layer_ids == (0, 2, 30)


def test_non_ascending_override_makes_stock_sglang_refuse_the_draft(speculators_draft, kimi_target, tmp_path):
    report = convert(speculators_draft, tmp_path / "out", target=kimi_target, layer_ids=[30, -1, 2])
    m = read_manifest(tmp_path / "out")
    assert m.layer_ids == (30, -1, 2)
    assert any("fail-closed object" in line and "[30, -1, 2]" in line for line in report.messages)
    cfg = json.loads((tmp_path / "out" / "config.json").read_text())
    assert is_fail_closed(cfg["eagle_config"]["eagle_aux_hidden_state_layer_ids"]) and cfg["num_aux_hidden_states"] == 3
    assert stock_sglang_capture(cfg, 61, family="deepseek_v2").refuses_at_startup
    assert m.provenance["fail_closed"]["field"] == "eagle_config.eagle_aux_hidden_state_layer_ids"


def test_sharded_checkpoint_keeps_its_shards(speculators_draft, kimi_target, tmp_path):
    src = tmp_path / "sharded"
    src.mkdir()
    (src / "config.json").write_text((speculators_draft / "config.json").read_text())
    tensors = load_file(str(speculators_draft / "model.safetensors"))
    names = sorted(tensors)
    shards = {"model-00001-of-00002.safetensors": names[::2], "model-00002-of-00002.safetensors": names[1::2]}
    for fname, ns in shards.items():
        save_file({n: tensors[n] for n in ns}, str(src / fname), metadata={"format": "pt"})
    index = {"metadata": {}, "weight_map": {n: f for f, ns in shards.items() for n in ns}}
    (src / "model.safetensors.index.json").write_text(json.dumps(index))
    convert(src, tmp_path / "out", target=kimi_target)
    out_index = json.loads((tmp_path / "out" / "model.safetensors.index.json").read_text())
    for fname in shards:
        out = load_file(str(tmp_path / "out" / fname))
        assert all(out_index["weight_map"][n] == fname for n in out)
        assert len(out) == len(shards[fname])
    assert len(out_index["weight_map"]) == len(names)


def test_failure_leaves_no_output(tmp_path, kimi_target):
    src = build_speculators_draft(tmp_path / "q", model_type="qwen3")
    with pytest.raises(InputError) as e:
        convert(src, tmp_path / "out", target=kimi_target)
    assert (e.value.file, e.value.field) == (str(src / "config.json"), "transformer_layer_config.model_type")
    assert "cannot be converted faithfully" in e.value.fix
    assert not (tmp_path / "out").exists() and not (tmp_path / ".out.converting").exists()


def test_refuses_existing_output_and_reconversion(converted, speculators_draft, kimi_target, tmp_path):
    (tmp_path / "busy").mkdir()
    (tmp_path / "busy" / "x").write_text("x")
    with pytest.raises(InputError) as e:
        convert(speculators_draft, tmp_path / "busy", target=kimi_target)
    assert (e.value.file, e.value.field) == (str(tmp_path / "busy"), "<dir>") and e.value.fix
    with pytest.raises(InputError) as e:
        convert(converted.dst, tmp_path / "again", target=kimi_target)
    assert (e.value.file, e.value.field) == (str(converted.dst / "config.json"), CONVERTED_MARKER_KEY)


def test_target_defaults_to_a_local_verifier_path(tmp_path, kimi_target):
    src = build_speculators_draft(tmp_path / "d")
    cfg = json.loads((src / "config.json").read_text())
    cfg["speculators_config"]["verifier"]["name_or_path"] = str(kimi_target)
    (src / "config.json").write_text(json.dumps(cfg))
    assert convert(src, tmp_path / "out").manifest.target_num_hidden_layers == 61
    cfg["speculators_config"]["verifier"]["name_or_path"] = "moonshotai/Kimi-K2.5"
    (src / "config.json").write_text(json.dumps(cfg))
    with pytest.raises(InputError) as e:
        convert(src, tmp_path / "out2")
    assert (e.value.file, e.value.field) == (str(src / "config.json"), "speculators_config.verifier.name_or_path")
    assert "--target" in e.value.fix


def test_an_unknown_speculators_setting_is_refused_naming_it(tmp_path, kimi_target):
    # The speculators top level is strict (convert carries only settings it understands) ...
    src = build_speculators_draft(tmp_path / "d")
    cfg = json.loads((src / "config.json").read_text())
    (src / "config.json").write_text(json.dumps({**cfg, "future_setting": 1}))
    with pytest.raises(InputError) as e:
        convert(src, tmp_path / "out", target=kimi_target)
    assert (e.value.file, e.value.field) == (str(src / "config.json"), "future_setting") and e.value.fix
    # ... its transformer_layer_config (an HF LlamaConfig) keeps unknown keys, but a bool is not a dimension.
    tl = {**cfg["transformer_layer_config"], "future_layer_key": "x"}
    (src / "config.json").write_text(json.dumps({**cfg, "transformer_layer_config": tl}))
    assert convert(src, tmp_path / "out", target=kimi_target).manifest.layer_ids == (-1, 2, 30)
    (src / "config.json").write_text(json.dumps({**cfg, "transformer_layer_config": {**tl, "hidden_size": True}}))
    with pytest.raises(InputError) as e:
        convert(src, tmp_path / "out2", target=kimi_target)
    assert e.value.field == "transformer_layer_config.hidden_size"


def test_a_sharded_index_keeps_its_metadata_and_refuses_a_shard_path(speculators_draft, kimi_target, tmp_path):
    src = tmp_path / "sharded"
    src.mkdir()
    (src / "config.json").write_text((speculators_draft / "config.json").read_text())
    tensors = load_file(str(speculators_draft / "model.safetensors"))
    save_file(tensors, str(src / "model-00001-of-00001.safetensors"), metadata={"format": "pt"})
    index = {"metadata": {"total_size": 1, "note": "a\tb"}, "future_key": [1],
             "weight_map": dict.fromkeys(tensors, "model-00001-of-00001.safetensors")}
    (src / "model.safetensors.index.json").write_text(json.dumps(index))
    convert(src, tmp_path / "out", target=kimi_target)
    out = json.loads((tmp_path / "out" / "model.safetensors.index.json").read_text())
    assert (out["metadata"], out["future_key"]) == (index["metadata"], [1])
    index["weight_map"]["fc.weight"] = "../model-00001-of-00001.safetensors"
    (src / "model.safetensors.index.json").write_text(json.dumps(index))
    with pytest.raises(InputError) as e:
        convert(src, tmp_path / "out2", target=kimi_target)
    assert (e.value.file, e.value.field) == (str(src / "model.safetensors.index.json"), "weight_map.fc.weight")


def test_trained_with_is_never_ignored_when_layer_ids_override_an_unreadable_config(tmp_path):
    """``--layer-ids`` converts a draft whose config's ids do not read (noted in the provenance); ``--trained-with``
    says how those ids read, so there it is refused with the config's error, not dropped."""
    src = build_specforge_draft(tmp_path / "sf", ids=(1, 29, 29))
    target = write_target(tmp_path / "dsv3", architecture="DeepseekV3ForCausalLM") / "config.json"
    assert convert(src, tmp_path / "o1", target=target, layer_ids=[1, 29, 57]).manifest.layer_ids == (1, 29, 57)
    with pytest.raises(InputError) as e:
        convert(src, tmp_path / "o2", target=target, layer_ids=[1, 29, 57], trained_with="layer-output")
    assert (e.value.file, e.value.field) == (str(src / "config.json"), "eagle_config.eagle_aux_hidden_state_layer_ids")
    assert not (tmp_path / "o2").exists()
