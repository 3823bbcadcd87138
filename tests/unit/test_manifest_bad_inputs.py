"""Table of malformed inputs (manifest, draft config, weights, target): each ends in an error naming file and field.

Loader-level cases (the plugin inactive while -1 is requested, eagle_config disagreeing with the
manifest at server start, tensors SGLang's loader would drop, flags the draft loader does not
implement) belong to the draft-head loader's tests.
"""

import json
import re
import shutil
from dataclasses import dataclass
from typing import Callable

import pytest
from safetensors.torch import load_file, save_file

from sglang_eagle3_capture.core.errors import InputError
from sglang_eagle3_capture.core.manifest import MANIFEST_FILENAME, check_target, read_manifest
from sglang_eagle3_capture.core.schemas.manifest import VERSIONS
from sglang_eagle3_capture.doctor.convert import convert
from support.speculators_drafts import write_target

GOOD_MANIFEST = {
    "format": "sglang-eagle3-capture.manifest", "version": 1, "layer_ids": [-1, 2, 30],
    "target": {"architecture": "KimiK25ForConditionalGeneration", "num_hidden_layers": 61, "hidden_size": 64},
    "provenance": {"source": "speculators-config", "file": "config.json", "field": "eagle_aux_hidden_state_layer_ids",
                   "original_ids": [0, 3, 31], "convention": "vllm-hf-index"},
}


@dataclass
class Case:
    name: str
    kind: str  # "manifest": mutate the manifest document; "draft": mutate a speculators draft dir, then convert
    mutate: Callable
    file: str  # the error's .file (relative to the case dir)
    field: str  # a pattern the error's .field matches in full (re.fullmatch)


def assert_names(err, file, field) -> None:
    """``err`` names ``file`` and a field matching ``field``, and says how to fix it."""
    assert err.file == str(file), (err.file, str(err))
    assert err.field is not None and re.fullmatch(field, err.field), (err.field, str(err))
    assert err.fix, str(err)


def _m(fn):
    def mutate(doc):
        fn(doc)
        return doc
    return mutate


def _cfg(fn):
    def mutate(d):
        cfg = json.loads((d / "config.json").read_text())
        fn(cfg)
        (d / "config.json").write_text(json.dumps(cfg))
    return mutate


def _weights(fn):
    def mutate(d):
        t = load_file(str(d / "model.safetensors"))
        fn(t)
        save_file(t, str(d / "model.safetensors"), metadata={"format": "pt"})
    return mutate


def _truncate(d):
    p = d / "model.safetensors"
    p.write_bytes(p.read_bytes()[:-100])


def _only_bin(d):
    (d / "model.safetensors").rename(d / "pytorch_model.bin")


def _missing_shard(d):
    index = {"metadata": {}, "weight_map": {"fc.weight": "model-00002-of-00002.safetensors"}}
    (d / "model.safetensors").rename(d / "model-00001-of-00002.safetensors")
    (d / "model.safetensors.index.json").write_text(json.dumps(index))


CASES = [
    # --- manifest (provenance is metadata, never refused: tests/unit/test_manifest.py) ---
    Case("unknown key", "manifest", _m(lambda d: d.update(layer_id=[1])), MANIFEST_FILENAME, "layer_id"),
    Case("unknown version", "manifest", _m(lambda d: d.update(version=max(VERSIONS) + 1)), MANIFEST_FILENAME,
         "version"),
    Case("version wrong type", "manifest", _m(lambda d: d.update(version="1")), MANIFEST_FILENAME, "version"),
    Case("wrong format tag", "manifest", _m(lambda d: d.update(format="eagle")), MANIFEST_FILENAME, "format"),
    Case("ids as a string", "manifest", _m(lambda d: d.update(layer_ids="-1,2,30")), MANIFEST_FILENAME, "layer_ids"),
    Case("ids with a bool", "manifest", _m(lambda d: d.update(layer_ids=[True, 2])), MANIFEST_FILENAME,
         r"layer_ids\[0\]"),
    Case("empty ids", "manifest", _m(lambda d: d.update(layer_ids=[])), MANIFEST_FILENAME, "layer_ids"),
    Case("duplicate ids", "manifest", _m(lambda d: d.update(layer_ids=[-1, 2, 2])), MANIFEST_FILENAME, "layer_ids"),
    Case("id past the last layer", "manifest", _m(lambda d: d.update(layer_ids=[-1, 2, 61])), MANIFEST_FILENAME,
         "layer_ids"),
    Case("id below -1", "manifest", _m(lambda d: d.update(layer_ids=[-2, 2, 30])), MANIFEST_FILENAME,
         r"layer_ids\[0\]"),
    Case("hidden size as string", "manifest", _m(lambda d: d["target"].update(hidden_size="64")), MANIFEST_FILENAME,
         r"target\.hidden_size"),
    Case("unknown target key", "manifest", _m(lambda d: d["target"].update(num_layers=61)), MANIFEST_FILENAME,
         r"target\.num_layers"),
    Case("missing target", "manifest", _m(lambda d: d.pop("target")), MANIFEST_FILENAME, "target"),
    Case("provenance not an object", "manifest", _m(lambda d: d.update(provenance="manual")), MANIFEST_FILENAME,
         "provenance"),
    Case("not JSON", "manifest", lambda d: "{\"format\": ", MANIFEST_FILENAME, "<document>"),
    # --- draft config ---
    Case("unknown speculators setting", "draft", _cfg(lambda c: c.update(attn_temperature=0.5)), "config.json",
         "attn_temperature"),
    Case("both fc norms", "draft", _cfg(lambda c: c.update(fc_norm=True)), "config.json", "fc_norm"),
    Case("flag wrong type", "draft", _cfg(lambda c: c.update(norm_output="yes")), "config.json", "norm_output"),
    Case("two draft layers", "draft", _cfg(lambda c: c["transformer_layer_config"].update(num_hidden_layers=2)),
         "config.json", "transformer_layer_config.num_hidden_layers"),
    Case("ids out of range", "draft", _cfg(lambda c: c.update(eagle_aux_hidden_state_layer_ids=[0, 3, 70])),
         "config.json", "eagle_aux_hidden_state_layer_ids"),
    Case("config target hidden size mismatch", "draft", _cfg(lambda c: c.update(target_hidden_size=128)), "config.json",
         "target_hidden_size"),
    Case("config not JSON", "draft", lambda d: (d / "config.json").write_text("{"), "config.json", "<document>"),
    # --- weights ---
    Case("truncated safetensors", "draft", _truncate, "model.safetensors", r"[^ ]+\.data_offsets"),
    Case("missing fc.weight", "draft", _weights(lambda t: t.pop("fc.weight")), "model.safetensors", "fc.weight"),
    Case("extra tensor", "draft",
         _weights(lambda t: t.update({"layers.0.self_attn.rotary_emb.inv_freq": t["norm.weight"][:8].clone()})),
         "model.safetensors", "layers.0.self_attn.rotary_emb.inv_freq"),
    Case("wrong lm_head shape", "draft",
         _weights(lambda t: t.update({"lm_head.weight": t["lm_head.weight"][:64].clone()})),
         "model.safetensors", "lm_head.weight"),
    Case("fc width mismatch", "draft", _cfg(lambda c: c.update(eagle_aux_hidden_state_layer_ids=[0, 3])),
         "model.safetensors", "fc.weight"),
    Case("pytorch .bin only", "draft", _only_bin, "pytorch_model.bin", "<file>"),
    Case("index names a missing shard", "draft", _missing_shard, "model.safetensors.index.json", "weight_map"),
]


def test_table_is_big_enough():
    assert len(CASES) >= 15 and {c.kind for c in CASES} == {"manifest", "draft"}


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_bad_input_names_file_and_field(case, tmp_path, speculators_draft, kimi_target):
    if case.kind == "manifest":
        doc = case.mutate(json.loads(json.dumps(GOOD_MANIFEST)))
        (tmp_path / MANIFEST_FILENAME).write_text(doc if isinstance(doc, str) else json.dumps(doc))
        with pytest.raises(InputError) as e:
            read_manifest(tmp_path)
    else:
        d = tmp_path / "draft"
        shutil.copytree(speculators_draft, d)
        case.mutate(d)
        with pytest.raises(InputError) as e:
            convert(d, tmp_path / "out", target=kimi_target)
        assert not (tmp_path / "out").exists()
    base = tmp_path if case.kind == "manifest" else tmp_path / "draft"
    assert_names(e.value, base / case.file, case.field)


def test_target_hidden_size_mismatch_at_serve_time(tmp_path):
    (tmp_path / MANIFEST_FILENAME).write_text(json.dumps(GOOD_MANIFEST))
    m = read_manifest(tmp_path)
    target = {"architectures": ["KimiK25ForConditionalGeneration"],
              "text_config": {"num_hidden_layers": 61, "hidden_size": 7168}}
    with pytest.raises(InputError) as e:
        check_target(m, target, where="/models/kimi/config.json")
    assert_names(e.value, "/models/kimi/config.json", r"text_config\.hidden_size")
    assert str(tmp_path / MANIFEST_FILENAME) in e.value.problem  # the other side of the mismatch


def test_target_hidden_size_mismatch_at_convert_time(tmp_path, speculators_draft):
    target = write_target(tmp_path / "big", hidden_size=128)
    with pytest.raises(InputError) as e:
        convert(speculators_draft, tmp_path / "out", target=target)
    assert_names(e.value, speculators_draft / "model.safetensors", "fc.weight")
