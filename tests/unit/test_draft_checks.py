"""core/draft_checks.py (and core/draft_config.py's flag reader): a draft config checked against its manifest before
SGLang builds anything (no SGLang here).

The chunk-count readers mirrored in ``sglang_chunk_counts`` are compared with SGLang's own functions in
tests/inprocess/test_serving_draft.py (``test_chunk_counts_match_sglangs_own_readers``).
"""

import json
from pathlib import Path

import pytest

from sglang_eagle3_capture.core.checkpoint import parameter_checkpoint_names
from sglang_eagle3_capture.core.draft_checks import plan_draft, sglang_chunk_counts
from sglang_eagle3_capture.core.draft_config import resolve_flags
from sglang_eagle3_capture.core.errors import DeploymentError, InputError
from sglang_eagle3_capture.core.manifest import read_manifest
from support.draft_dirs import make_draft, rewrite_config, target_manifest


@pytest.fixture
def draft(tmp_path, tiny_target_dir):
    return make_draft(tmp_path / "draft", tiny_target_dir, [-1, 1, 3])


def _plan(draft_dir, mla=False, window=None):
    cfg = json.loads((Path(draft_dir) / "config.json").read_text())
    return plan_draft(cfg, draft_dir, read_manifest(draft_dir), mla=mla, server_window=window)


def test_a_consistent_draft_plans(draft):
    plan = _plan(draft)
    assert plan.manifest.layer_ids == (-1, 1, 3)
    assert plan.flags == dict.fromkeys(("norm_before_fc", "fc_norm", "norm_output", "norm_before_residual"), False)
    assert plan.where("fc.weight") == f"{draft / 'model.safetensors'}: tensor 'fc.weight'"


# Each row: how to break the draft, the error type, the field it names, and a fragment of the problem.
BAD_CONFIGS = [
    ("num_aux_hidden_states disagrees with the manifest", lambda c: {**c, "num_aux_hidden_states": 2},
     DeploymentError, "num_aux_hidden_states", "lists 3"),
    ("eagle_config ids count disagrees (no num_aux)",
     lambda c: {**{k: v for k, v in c.items() if k != "num_aux_hidden_states"},
                "eagle_config": {"eagle_aux_hidden_state_layer_ids": [0, 2], "use_aux_hidden_state": True}},
     DeploymentError, "eagle_config.eagle_aux_hidden_state_layer_ids", "reads 2"),
    ("no ids anywhere: SGLang's default of 3 vs a 2-id manifest", None, DeploymentError,
     "<absent: SGLang's default of 3>", "reads 3"),
    ("use_aux_hidden_state false",
     lambda c: {**c, "eagle_config": {**c["eagle_config"], "use_aux_hidden_state": False}},
     DeploymentError, "eagle_config.use_aux_hidden_state", "is not true"),
    ("target_hidden_size disagrees with the manifest", lambda c: {**c, "target_hidden_size": 128},
     DeploymentError, "target_hidden_size", "'target.hidden_size' is 64"),
    ("norm_before_fc and fc_norm together", lambda c: {**c, "norm_before_fc": True, "fc_norm": True},
     DeploymentError, "norm_before_fc", "fc_norm"),
    ("a flag that is not a boolean", lambda c: {**c, "norm_output": "yes"},
     DeploymentError, "norm_output", "true or false"),
    ("trained with a sliding window the server does not use",
     lambda c: {**c, "sliding_window": 16, "layer_types": ["sliding_attention"]},
     DeploymentError, "sliding_window", "16-token"),
]


@pytest.mark.parametrize("what, edit, exc, field, fragment", BAD_CONFIGS, ids=[r[0] for r in BAD_CONFIGS])
def test_bad_config_is_refused_naming_file_and_field(tmp_path, tiny_target_dir, what, edit, exc, field, fragment):
    if edit is None:  # a 2-id manifest, and a config with no ids and no count
        d = make_draft(tmp_path / "d", tiny_target_dir, [1, 3])
        rewrite_config(d, lambda c: {k: v for k, v in c.items() if k not in ("num_aux_hidden_states", "eagle_config")})
    else:
        d = make_draft(tmp_path / "d", tiny_target_dir, [-1, 1, 3])
        rewrite_config(d, edit)
    with pytest.raises(exc) as e:
        _plan(d)
    assert (e.value.file, e.value.field) == (str(d / "config.json"), field)
    assert fragment in e.value.problem and e.value.fix


def test_matching_sliding_window_is_accepted(draft):
    rewrite_config(draft, lambda c: {**c, "sliding_window": 16, "layer_types": ["sliding_attention"]})
    assert _plan(draft, window=16).manifest.layer_ids == (-1, 1, 3)


def test_mla_draft_refuses_norm_before_residual(draft):
    rewrite_config(draft, lambda c: {**c, "norm_before_residual": True})
    assert _plan(draft, mla=False).flags["norm_before_residual"] is True  # the Llama class implements it
    with pytest.raises(DeploymentError) as e:
        _plan(draft, mla=True)
    assert (e.value.file, e.value.field) == (str(draft / "config.json"), "norm_before_residual") and e.value.fix


def test_missing_manifest_names_the_file_and_the_fix(tmp_path, tiny_target_dir):
    d = make_draft(tmp_path / "d", tiny_target_dir, manifest=False)
    with pytest.raises(InputError) as e:
        read_manifest(d)
    assert (e.value.file, e.value.field) == (str(d / "eagle3_manifest.json"), "<file>")
    assert "manifest write" in e.value.fix


def test_truncated_safetensors_names_the_file(draft):
    weights = draft / "model.safetensors"
    data = weights.read_bytes()
    weights.write_bytes(data[: len(data) - 100])
    with pytest.raises(InputError) as e:
        _plan(draft)
    assert e.value.file == str(weights) and e.value.field.endswith(".data_offsets")  # the tensor cut off
    assert "truncated" in e.value.problem


def test_flags_are_read_like_sglang_reads_them():
    # norm_before_fc: eagle_config first (llama_eagle3.LlamaModel); fc_norm: legacy use_aux_norm too.
    assert resolve_flags({"norm_before_fc": False, "eagle_config": {"norm_before_fc": True}}, "c")["norm_before_fc"]
    assert resolve_flags({"use_aux_norm": True}, "c")["fc_norm"]
    assert not any(resolve_flags({}, "c").values())


@pytest.mark.parametrize(
    "cfg, mla, expected",
    [
        ({"num_aux_hidden_states": 4, "eagle_config": {"eagle_aux_hidden_state_layer_ids": [1, 2]}}, False, {4}),
        ({"eagle_config": {"eagle_aux_hidden_state_layer_ids": [1, 2]}}, False, {2}),
        ({"eagle_aux_hidden_state_layer_ids": [1, 2, 3, 4]}, False, {3, 4}),  # Llama ignores top-level ids
        ({"eagle_aux_hidden_state_layer_ids": [1, 2, 3, 4]}, True, {4}),
        ({"num_aux_hidden_states": 2}, True, {2, 3}),  # the MLA class ignores num_aux_hidden_states
    ],
)
def test_chunk_counts_per_sglang_reader(cfg, mla, expected):
    assert {n for n, _ in sglang_chunk_counts(cfg, mla).values()} == expected


def test_checkpoint_names_for_parameters():
    assert parameter_checkpoint_names("model.fc.weight") == "fc.weight"
    assert parameter_checkpoint_names("lm_head.weight") == "lm_head.weight"
    assert parameter_checkpoint_names("model.midlayer.self_attn.fused_qkv_a_proj_with_mqa.weight") == \
        "layers.0.self_attn.{q_a_proj,kv_a_proj_with_mqa}.weight"


def test_manifest_for_another_target_width_is_refused(tmp_path, tiny_target_dir):
    d = make_draft(tmp_path / "d", tiny_target_dir)
    m = target_manifest(tiny_target_dir, [-1, 1, 3])
    (d / "eagle3_manifest.json").write_text(
        json.dumps({**m.to_dict(), "target": {**m.to_dict()["target"], "hidden_size": 32}}))
    with pytest.raises(DeploymentError) as e:
        _plan(d)
    assert (e.value.file, e.value.field) == (str(d / "config.json"), "hidden_size")
    assert "'target.hidden_size' is 32" in e.value.problem


def test_a_draft_path_with_control_characters_is_escaped_in_errors(tmp_path, tiny_target_dir):
    d = make_draft(tmp_path / "dr\x1baft", tiny_target_dir, [-1, 1, 3])
    cfg = {**json.loads((d / "config.json").read_text()), "num_aux_hidden_states": 2}
    with pytest.raises(DeploymentError) as e:
        plan_draft(cfg, d, read_manifest(d), mla=False)
    assert "\x1b" not in str(e.value) and "dr\\x1baft" in str(e.value)
    cfg = json.loads((d / "config.json").read_text())
    plan = plan_draft(cfg, d, read_manifest(d), mla=False)
    assert "\x1b" not in plan.where("fc.weight") and "\x1b" not in plan.where("no\x1bsuch")


def test_one_dimension_bound_and_one_flag_list_for_config_and_checkpoint():
    from sglang_eagle3_capture.core import checkpoint
    from sglang_eagle3_capture.core import draft_config as config
    from sglang_eagle3_capture.core.draft_config import DraftConfig
    from sglang_eagle3_capture.core.schemas.draft import DIM
    from sglang_eagle3_capture.doctor.formats import MATH_FLAGS, MAX_DIM

    assert config.FLAG_FIELDS is MATH_FLAGS and config.MAX_DIM == MAX_DIM == DIM.__metadata__[0].le
    assert not hasattr(checkpoint, "MAX_DIM")
    good = {"architectures": ["LlamaForCausalLMEagle3"], "hidden_size": 64, "num_attention_heads": 4,
            "intermediate_size": 128, "vocab_size": 256, "num_hidden_layers": 1}
    for bad in (0, True, 1.0, MAX_DIM + 1, "8"):
        with pytest.raises(InputError) as e:
            checkpoint.expected_eagle3_tensors({**good, "hidden_size": bad}, 3, 64, "c\x1b.json")
        assert (e.value.file, e.value.field) == ("c\\x1b.json", "hidden_size") and e.value.fix
        assert "\x1b" not in str(e.value)
        with pytest.raises(InputError) as e:
            DraftConfig.from_dict({**good, "hidden_size": bad}, "c.json")
        assert (e.value.file, e.value.field) == ("c.json", "hidden_size")
    assert DraftConfig.from_dict({**good, "hidden_size": MAX_DIM, "head_dim": 16}, "c.json").hidden_size == MAX_DIM


@pytest.fixture
def fresh_default_release():
    from sglang_eagle3_capture.core import draft_config as config

    config.default_release.cache_clear()
    yield config
    config.default_release.cache_clear()


def test_the_draft_rules_default_to_the_installed_release_not_the_newest(fresh_default_release, monkeypatch):
    from sglang_eagle3_capture.core import releases

    oldest = releases.supported()[0]
    monkeypatch.setattr(releases, "installed_sglang_version", lambda: oldest.version)
    assert fresh_default_release.default_release() is oldest


def test_without_a_supported_sglang_the_draft_rules_are_the_newest(fresh_default_release, monkeypatch):
    from sglang_eagle3_capture.core import releases

    monkeypatch.setattr(releases, "installed_sglang_version", lambda: None)
    assert fresh_default_release.default_release() is releases.newest()


def test_flags_and_weight_names_follow_the_default_release(monkeypatch):
    from dataclasses import replace

    from sglang_eagle3_capture.core import checkpoint, releases
    from sglang_eagle3_capture.core import draft_config as config
    from sglang_eagle3_capture.core.releases.schema import DraftFlag

    rel = releases.newest()
    other = replace(rel, draft_flags={**rel.draft_flags, "fc_norm": DraftFlag(("eagle_config.fc_norm",))},
                    legacy_weight_names={"old_fc.": "fc."})
    monkeypatch.setattr(config, "default_release", lambda: other)
    monkeypatch.setattr(checkpoint, "default_release", lambda: other)
    assert resolve_flags({"eagle_config": {"fc_norm": True}}, "config.json")["fc_norm"] is True
    assert checkpoint.module_name("old_fc.weight") == "fc.weight"


def test_the_forbidden_flag_pair_error_escapes_the_file_name():
    with pytest.raises(ValueError) as e:
        resolve_flags({"norm_before_fc": True, "fc_norm": True}, "c\x1b.json")
    assert (e.value.file, e.value.field) == ("c\\x1b.json", "norm_before_fc")
    assert str(e.value).startswith("c\\x1b.json: field 'norm_before_fc': ")
