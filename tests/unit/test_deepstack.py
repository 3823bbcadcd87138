"""What a layer id names on a deepstack target (Qwen3-VL), as ``inspect`` reports it (doctor/deepstack.py,
docs/families.md ``qwen3_vl``): SGLang 0.5.19-0.5.23 feed a deepstack layer's output after the deepstack add, 0.5.17-
0.5.18 before it (the release table's ``deepstack_before_add``), HF ``hidden_states`` before it. A draft listing a
deepstack layer id whose provenance does not say which it was trained on is ambiguous (exit 3, both readings named);
one whose provenance says the other order than the serving release's is mis-wired (exit 1). The order itself was
measured through sglang.Engine with an image (tests/engine/test_families_engine.py)."""

from __future__ import annotations

import json

import pytest

from sglang_eagle3_capture.core.families import family_of
from sglang_eagle3_capture.core.families.schema import DEEPSTACK_AFTER, DEEPSTACK_BEFORE
from sglang_eagle3_capture.core.target_config import deepstack_layer_count
from sglang_eagle3_capture.doctor import release_table
from support.cli import run
from support.tiny_models import build_tiny_draft

ARCH = "Qwen3VLForConditionalGeneration"
TEXT = {"num_hidden_layers": 6, "hidden_size": 64, "num_attention_heads": 4, "max_position_embeddings": 512,
        "vocab_size": 256}


def _target(tmp_path, deepstack=(8, 16, 24)):
    target = tmp_path / "target"
    target.mkdir()
    (target / "config.json").write_text(json.dumps({"architectures": [ARCH], "text_config": TEXT,
                                                    "vision_config": {"deepstack_visual_indexes": list(deepstack)}}))
    return target


def _draft(capsys, tmp_path, target, ids, *, deepstack=None, manifest=True):
    draft = build_tiny_draft(tmp_path / "draft", target_dir=target, eagle_aux_layer_ids=None if manifest else ids,
                             num_aux=len(ids))
    if manifest:
        extra = ["--deepstack", deepstack] if deepstack else []
        rc, _, err = run(capsys, "manifest", "write", draft, f"--layer-ids={','.join(map(str, ids))}", "--target",
                                target, *extra)
        assert rc == 0, err
    return draft


def _inspect(capsys, draft, target, version, *extra):
    rc, out, err = run(capsys, "inspect", draft, "--target", target, "--sglang", version, "--json", *extra)
    return rc, json.loads(out) if out.strip() else err


def test_the_deepstack_layers_are_read_from_the_vision_config(tmp_path):
    family = family_of(ARCH)
    cfg = json.loads((_target(tmp_path, (3, 7)) / "config.json").read_text())
    assert deepstack_layer_count(cfg, family) == 2
    assert deepstack_layer_count({"architectures": [ARCH]}, family) is None
    assert deepstack_layer_count(cfg, family_of("LlamaForCausalLM")) == 0
    assert family_of("Qwen2_5_VLForConditionalGeneration").deepstack is None  # Qwen2.5-VL has no deepstack


def test_the_release_table_says_where_each_release_takes_a_deepstack_layer():
    """0.5.17/0.5.18: ``hidden_states + residual`` appended, then ``post_residual_addition`` in the next layer
    (qwen3_vl.py l.1164-1181 in 0.5.18); 0.5.19 on: ``add_`` / ``add_to_output`` after the layer (0.5.19 l.1231-1241,
    0.5.23 l.1263-1272), before the next capture."""
    before = [r.version for r in release_table.all_releases() if r.supported and "qwen3_vl" in r.deepstack_before_add]
    assert before == ["0.5.17", "0.5.18"]


def test_a_manifest_on_a_deepstack_layer_without_its_order_is_ambiguous(tmp_path, capsys):
    target = _target(tmp_path)
    draft = _draft(capsys, tmp_path, target, [-1, 1, 4])
    rc, r = _inspect(capsys, draft, target, "0.5.23")
    assert rc == 3 and r["verdict"] == "ambiguous", r
    who = [" ".join(x["trained_by"]) for x in r["ambiguous_readings"]]
    assert len(who) == 2 and who[0].startswith(DEEPSTACK_BEFORE) and who[1].startswith(DEEPSTACK_AFTER)
    assert all(x["layer_ids"] == [-1, 1, 4] for x in r["ambiguous_readings"])


@pytest.mark.parametrize("order, version, rc", [
    (DEEPSTACK_AFTER, "0.5.23", 0), (DEEPSTACK_AFTER, "0.5.19", 0), (DEEPSTACK_AFTER, "0.5.18", 1),
    (DEEPSTACK_BEFORE, "0.5.23", 1), (DEEPSTACK_BEFORE, "0.5.17", 0),
])
def test_a_manifest_that_states_its_order_is_checked_against_the_serving_release(tmp_path, capsys, order, version, rc):
    target = _target(tmp_path)
    draft = _draft(capsys, tmp_path, target, [-1, 1, 4], deepstack=order)
    got, r = _inspect(capsys, draft, target, version)
    assert got == rc and r["verdict"] == ("consistent" if rc == 0 else "mis-wired"), r
    assert not r["ambiguous_readings"]


def test_ids_past_the_deepstack_layers_are_not_affected(tmp_path, capsys):
    target = _target(tmp_path)
    draft = _draft(capsys, tmp_path, target, [-1, 3, 5])
    rc, r = _inspect(capsys, draft, target, "0.5.23")
    assert rc == 0 and r["verdict"] == "consistent", r
    assert not any(c.startswith("deepstack") for c in r["checks"])


@pytest.mark.parametrize("trained_with, rc", [(None, 3), ("hf-hidden-states", 1), ("layer-output", 1),
                                              ("sglang==0.5.23", 0), ("sglang==0.5.17", 1)])
def test_a_config_without_a_manifest_is_read_with_trained_with(tmp_path, capsys, trained_with, rc):
    """[0, 2, 4] reads as layer ids [0, 2, 4] under every trainer and release (always +1, no last layer), so only the
    deepstack order decides: HF hidden_states and layer hooks are before the add, SGLang 0.5.23 after it."""
    target = _target(tmp_path)
    draft = _draft(capsys, tmp_path, target, [0, 2, 4], manifest=False)
    extra = () if trained_with is None else ("--trained-with", trained_with)
    got, r = _inspect(capsys, draft, target, "0.5.23", *extra)
    assert got == rc and r["verdict"] == {3: "ambiguous", 1: "mis-wired", 0: "consistent"}[rc], r
