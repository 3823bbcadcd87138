"""Where the target's ids come from, and every startup refusal (core/sglang/resolution.py), through SGLang's own
resolution.

Each test calls the real ``ModelRunner.init_spec_aux_hidden_state`` (what ``ModelRunner.__init__`` runs before
the model is loaded; the plugin's resolution seam) with the patch applied, the tiny DeepSeek-V3 target's
``ModelConfig`` and a draft directory, and checks what SGLang's config ends up holding or the refusal's message.
"""

import logging
from types import SimpleNamespace

import pytest

from sglang_eagle3_capture.core.config_keys import CONVENTION_KEY, IDS_KEY, LAYER_ID_CONVENTION
from sglang_eagle3_capture.core.errors import DeploymentError, InputError
from sglang_eagle3_capture.core.manifest import Manifest, write_manifest
from sglang_eagle3_capture.core.sglang import target as target_patch
from sglang_eagle3_capture.core.sglang.resolution import DeclaredLayerIds, resolve_target_capture
from support.resolution import resolve_through_sglang
from support.tiny_models import build_tiny_draft


@pytest.fixture(autouse=True)
def _patched():
    with target_patch.patched():
        yield


def _draft(tmp_path, target, *, ids=None, marked=None, manifest=None, name="draft", **cfg):
    """A tiny EAGLE-3 draft: eagle_config ids ``ids`` (or marked layer ids ``marked``), optional manifest."""
    overrides = dict(cfg)
    if marked is not None:
        overrides["eagle_config"] = {"use_aux_hidden_state": True, IDS_KEY: marked, CONVENTION_KEY: LAYER_ID_CONVENTION}
    n_aux = len(marked or ids or manifest or [0, 0, 0])
    path = build_tiny_draft(tmp_path / name, target_dir=target, eagle_aux_layer_ids=ids, num_aux=n_aux,
                            config_overrides=overrides)
    if manifest is not None:
        write_manifest(path, Manifest(tuple(manifest), "DeepseekV3ForCausalLM", 6, 64, {"source": "manual"}))
    return path


def _resolve(runner, draft, **kwargs):
    return resolve_through_sglang(runner, draft, **kwargs)


@pytest.mark.release
def test_manifest_ids_are_handed_to_the_capture_patch(runner, tiny_target_dir, tmp_path):
    draft = _draft(tmp_path, tiny_target_dir, ids=[0, 2, 4], manifest=[-1, 1, 3])
    cfg = _resolve(runner, draft)
    assert cfg.eagle_use_aux_hidden_state is True
    declared = cfg.eagle_aux_hidden_state_layer_ids
    assert isinstance(declared, DeclaredLayerIds) and declared.layer_ids == (-1, 1, 3)
    assert (declared.file, declared.field) == (str(draft / "eagle3_manifest.json"), "layer_ids")


def test_non_ascending_manifest_agrees_with_the_same_captured_set(runner, tiny_target_dir, tmp_path):
    draft = _draft(tmp_path, tiny_target_dir, ids=[0, 2, 4], manifest=[3, -1, 1])
    assert _resolve(runner, draft).eagle_aux_hidden_state_layer_ids.layer_ids == (3, -1, 1)


def test_marked_eagle_config_ids_are_layer_ids(runner, tiny_target_dir, tmp_path):
    draft = _draft(tmp_path, tiny_target_dir, marked=[-1, 1, 3])
    declared = _resolve(runner, draft).eagle_aux_hidden_state_layer_ids
    assert declared.layer_ids == (-1, 1, 3)
    assert (declared.file, declared.field) == (str(draft / "config.json"), f"eagle_config.{IDS_KEY}")


def test_the_last_layer_output_is_accepted(runner, tiny_target_dir, tmp_path):
    # Layer id N-1 (5 here) is past SGLang's capture loop; the patch takes it at the final norm.
    draft = _draft(tmp_path, tiny_target_dir, marked=[5, -1, 1])
    assert _resolve(runner, draft).eagle_aux_hidden_state_layer_ids.layer_ids == (5, -1, 1)


def test_neither_runs_stock_wiring_with_a_warning(runner, tiny_target_dir, tmp_path, caplog):
    draft = _draft(tmp_path, tiny_target_dir, ids=[-1, 1, 3])
    with caplog.at_level(logging.WARNING, logger="sglang_eagle3_capture"):
        cfg = _resolve(runner, draft)
    assert cfg.eagle_aux_hidden_state_layer_ids == [-1, 1, 3]  # untouched: stock SGLang decides
    (msg,) = [r.getMessage() for r in caplog.records if "stock wiring" in r.getMessage()]
    assert "eagle_config ids [-1, 1, 3] -> as loop indices -> loop indices [-1, 1, 3]" in msg
    assert "captured 2 of 3 aux hidden states" in msg  # what stock SGLang will do with it
    assert "sglang-eagle3-capture manifest write" in msg


def test_manifest_disagreeing_with_marked_ids_is_refused(runner, tiny_target_dir, tmp_path):
    draft = _draft(tmp_path, tiny_target_dir, marked=[-1, 1, 3], manifest=[-1, 2, 3])
    with pytest.raises(DeploymentError) as e:
        _resolve(runner, draft)
    assert (e.value.file, e.value.field) == (str(draft / "eagle3_manifest.json"), "layer_ids")
    assert "is [-1, 2, 3]" in e.value.problem and "[-1, 1, 3] (marked as layer ids)" in e.value.problem
    assert "make them equal" in e.value.fix


def test_manifest_disagreeing_with_stock_ids_is_refused(runner, tiny_target_dir, tmp_path):
    # eagle_config [1, 2, 3] means loop indices [2, 3, 4] to SGLang 0.5.23 (first id 1: +1), not [0, 2, 4].
    draft = _draft(tmp_path, tiny_target_dir, ids=[1, 2, 3], manifest=[-1, 1, 3])
    with pytest.raises(DeploymentError) as e:
        _resolve(runner, draft)
    assert (e.value.file, e.value.field) == (str(draft / "eagle3_manifest.json"), "layer_ids")
    assert "(loop indices [0, 2, 4])" in e.value.problem
    assert "shifted (first id is 1) -> loop indices [2, 3, 4]" in e.value.problem
    assert f"set eagle_config.{IDS_KEY} to [-1, 1, 3] and eagle_config.{CONVENTION_KEY}" in e.value.fix


def test_unknown_convention_value_is_refused(runner, tiny_target_dir, tmp_path):
    draft = _draft(tmp_path, tiny_target_dir, eagle_config={"use_aux_hidden_state": True, IDS_KEY: [0, 2, 4],
                                                            CONVENTION_KEY: "hf-index"})
    with pytest.raises(DeploymentError) as e:
        _resolve(runner, draft)
    assert (e.value.file, e.value.field) == (str(draft / "config.json"), f"eagle_config.{CONVENTION_KEY}")
    assert "'hf-index'" in e.value.problem and LAYER_ID_CONVENTION in e.value.fix


@pytest.mark.release
@pytest.mark.parametrize("ids, fragment", [([-1, 1, 9], "outside [-1, 5]"), ([-2, 1, 3], "outside [-1, 5]"),
                                           ([-1, 6], "outside [-1, 5]"), ([1, 1, 3], "duplicate layer ids [1]")])
def test_ids_outside_the_capturable_range_are_refused(runner, tiny_target_dir, tmp_path, ids, fragment):
    draft = _draft(tmp_path, tiny_target_dir, marked=ids)
    with pytest.raises(DeploymentError) as e:
        _resolve(runner, draft)
    assert (e.value.file, e.value.field) == (str(draft / "config.json"), f"eagle_config.{IDS_KEY}")
    assert fragment in e.value.problem and e.value.fix


def test_manifest_for_another_target_is_refused(runner, tiny_target_dir, tmp_path):
    draft = _draft(tmp_path, tiny_target_dir, ids=[0, 2, 4])
    write_manifest(draft, Manifest((-1, 1, 3), "DeepseekV3ForCausalLM", 61, 64, {"source": "manual"}))
    with pytest.raises(InputError) as e:
        _resolve(runner, draft)
    assert "num_hidden_layers" in str(e.value) and "61" in str(e.value)


def test_pipeline_stage_without_the_captured_layers_is_refused(runner, tiny_target_dir, tmp_path):
    draft = _draft(tmp_path, tiny_target_dir, marked=[-1, 1, 3])
    with pytest.raises(DeploymentError) as e:
        _resolve(runner, draft, pp_size=2)  # 6 layers: the last stage runs layers [3, 6)
    assert (e.value.file, e.value.field) == (str(draft / "config.json"), f"eagle_config.{IDS_KEY}")
    assert "layer ids [-1, 1]" in e.value.problem and "outside [3, 6)" in e.value.problem
    assert "--pp-size 2" in e.value.problem and "--pp-size 1" in e.value.fix


def test_two_batch_overlap_is_refused(runner, tiny_target_dir, tmp_path):
    draft = _draft(tmp_path, tiny_target_dir, ids=[0, 2, 4])
    with pytest.raises(DeploymentError) as e:
        _resolve(runner, draft, enable_two_batch_overlap=True)
    assert (e.value.file, e.value.field) == (None, "--enable-two-batch-overlap")
    assert "skips the aux-hidden-state capture" in e.value.problem and "DeepseekV3ForCausalLM" in e.value.problem
    assert "drop --enable-two-batch-overlap" in e.value.fix


@pytest.mark.parametrize("declared", [False, True])
def test_eagle_with_an_eagle3_draft_is_refused(runner, tiny_target_dir, tmp_path, declared):
    draft = _draft(tmp_path, tiny_target_dir, ids=[0, 2, 4], manifest=[-1, 1, 3] if declared else None)
    with pytest.raises(DeploymentError) as e:
        _resolve(runner, draft, algorithm="EAGLE")
    assert (e.value.file, e.value.field) == (None, "--speculative-algorithm")
    assert f"EAGLE with the EAGLE-3 draft {draft}" in e.value.problem
    assert "accept length falls to about 1.0" in e.value.problem and "--speculative-algorithm EAGLE3" in e.value.fix


def test_declared_ids_for_a_target_outside_every_family_are_refused(runner, tiny_target_dir, tmp_path):
    draft = _draft(tmp_path, tiny_target_dir, marked=[-1, 1, 3])
    falcon = SimpleNamespace(hf_config=SimpleNamespace(architectures=["FalconForCausalLM"]))
    with pytest.raises(DeploymentError) as e:
        _resolve(runner, draft, model_config=falcon)
    assert (e.value.file, e.value.field) == ("target config (--model-path)", "architectures")
    assert "FalconForCausalLM" in e.value.problem and "KimiK25ForConditionalGeneration" in e.value.problem
    assert "llama (LlamaForCausalLM" in e.value.problem and e.value.fix  # the supported families, by name


@pytest.mark.parametrize("archs", ["LlamaForCausalLM", None, [7]])
def test_declared_ids_for_a_target_without_an_architecture_list_name_the_field(runner, tiny_target_dir, tmp_path,
                                                                                archs):
    draft = _draft(tmp_path, tiny_target_dir, marked=[-1, 1, 3])
    odd = SimpleNamespace(hf_config=SimpleNamespace(architectures=archs))
    with pytest.raises(DeploymentError) as e:  # a string once read as its first character, "L"
        _resolve(runner, draft, model_config=odd)
    assert (e.value.file, e.value.field) == ("target config (--model-path)", "architectures") and e.value.fix
    assert "not a list naming the target class" in e.value.problem


def test_a_target_without_an_architecture_list_and_no_declared_ids_runs_stock_wiring(runner, tiny_target_dir,
                                                                                       tmp_path):
    draft = _draft(tmp_path, tiny_target_dir, ids=[0, 2, 4])
    odd = SimpleNamespace(hf_config=SimpleNamespace(architectures="LlamaForCausalLM"))
    assert _resolve(runner, draft, model_config=odd).eagle_aux_hidden_state_layer_ids == [0, 2, 4]


def test_disabled_aux_capture_with_declared_ids_is_refused(runner, tiny_target_dir, tmp_path):
    draft = _draft(tmp_path, tiny_target_dir, eagle_config={"use_aux_hidden_state": False, IDS_KEY: [0, 2, 4]},
                   manifest=[-1, 1, 3])
    with pytest.raises(DeploymentError) as e:
        _resolve(runner, draft)
    assert (e.value.file, e.value.field) == (str(draft / "config.json"), "eagle_config.use_aux_hidden_state")
    assert e.value.fix


def test_incomplete_patch_is_caught_where_the_ids_are_handed_out(runner, tiny_target_dir, tmp_path):
    from sglang.srt.models.deepseek_v2 import DeepseekV2ForCausalLM

    draft = _draft(tmp_path, tiny_target_dir, manifest=[-1, 1, 3])
    patched = DeepseekV2ForCausalLM.set_eagle3_layers_to_capture
    DeepseekV2ForCausalLM.set_eagle3_layers_to_capture = patched.__wrapped__  # as if that part failed
    try:
        with pytest.raises(DeploymentError) as e:
            _resolve(runner, draft)
    finally:
        DeepseekV2ForCausalLM.set_eagle3_layers_to_capture = patched
    assert (e.value.file, e.value.field) == (str(draft / "eagle3_manifest.json"), "layer_ids") and e.value.fix
    assert "capture patch is incomplete" in e.value.problem
    assert "set_eagle3_layers_to_capture=original" in e.value.problem


def test_draft_workers_and_other_algorithms_are_left_alone(runner, tiny_target_dir, tmp_path):
    draft = _draft(tmp_path, tiny_target_dir, ids=[0, 2, 4], manifest=[-1, 1, 3])
    assert _resolve(runner, draft, algorithm="NGRAM").eagle_aux_hidden_state_layer_ids is None


def test_a_hub_draft_path_cannot_be_searched_for_a_manifest_and_says_so(runner, tiny_target_dir, caplog):
    from sglang.srt.speculative.spec_info import SpeculativeAlgorithm

    ec = {"use_aux_hidden_state": True, IDS_KEY: [-1, 1, 3], CONVENTION_KEY: LAYER_ID_CONVENTION}
    draft_hf = SimpleNamespace(architectures=["LlamaForCausalLMEagle3"], eagle_config=ec)
    config = SimpleNamespace(eagle_use_aux_hidden_state=True)
    with caplog.at_level(logging.WARNING, logger="sglang_eagle3_capture"):
        declared = resolve_target_capture(config=config, server_args=runner.model_runner.server_args,
                                          model_config=runner.model_runner.model_config,
                                          spec_algorithm=SpeculativeAlgorithm.EAGLE3, is_draft_worker=False,
                                          draft_path="some-org/some-eagle3-draft", draft_hf_config=lambda: draft_hf)
    assert declared.layer_ids == (-1, 1, 3)  # marked eagle_config ids still count
    (msg,) = [r.getMessage() for r in caplog.records if "not a local directory" in r.getMessage()]
    assert "some-org/some-eagle3-draft" in msg and "Fix: download the draft and pass its local directory" in msg
