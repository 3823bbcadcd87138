"""The vLLM side of the one policy and of fail-closed, on plain data (issue 27): what stock vLLM's runners read
(``readings.engine_capture``), what ``convert`` and ``manifest write --fail-closed`` write at the top level for vLLM
(``readings.vllm_fail_closed_ids``), what the vLLM plugin decides (``policy.decide_vllm``), what ``inspect`` says."""

import json

import pytest

from sglang_eagle3_capture.core import policy, releases
from sglang_eagle3_capture.core.config_keys import FAIL_CLOSED_IDS, IDS_KEY, VLLM_FAIL_CLOSED_IDS, is_vllm_fail_closed
from sglang_eagle3_capture.core.errors import DeploymentError, InputError
from sglang_eagle3_capture.core.layer_ids import FINAL_NORM
from sglang_eagle3_capture.core.manifest import find_manifest
from sglang_eagle3_capture.core.stock import engine_capture, stock_on_vllm, vllm_fail_closed_ids
from sglang_eagle3_capture.doctor.formats import check_draft_config
from sglang_eagle3_capture.doctor.inspect import inspect_draft
from sglang_eagle3_capture.doctor.manifest_write import write_draft_manifest
from support.tiny_models import build_family_target, build_tiny_draft

N = 7
V1_032 = releases.vllm_get("0.32.0").readers[0]


@pytest.mark.parametrize("ids,family,value", [
    ([-1, 1, 4], "llama", [0, 2, 5]),  # vLLM id = layer id + 1
    ([-1, 1, 6], "llama", [0, 2, 7]),  # N-1: vLLM's index N, the last layer's output before the norm
    ([0, 1, 4], "deepseek_v2", [1, 2, 5]),
    ([4, -1, 1], "llama", VLLM_FAIL_CLOSED_IDS),  # vLLM sorts
    ([-1, 1, FINAL_NORM], "llama", VLLM_FAIL_CLOSED_IDS),  # no vLLM index is the norm's output
    ([-1, 1, 4], "deepseek_v2", VLLM_FAIL_CLOSED_IDS),  # inline capture: index 0 fails at the first forward
])
def test_the_top_level_value_is_exact_where_every_vllm_runner_can_say_it(ids, family, value):
    chosen = vllm_fail_closed_ids(ids, N, family=family)
    assert chosen.value == value and chosen.exact == (value != VLLM_FAIL_CLOSED_IDS)
    for c in stock_on_vllm({IDS_KEY: chosen.value}, N, family=family):
        if chosen.exact:
            assert (c.fed_layer_ids, c.problem) == (tuple(ids), None), c.describe()
        elif family == "llama":
            assert c.refuses_at_startup, c.describe()
        else:  # DeepSeek keeps its ids unsorted: its integer 0 fails at the first forward instead
            assert c.problem and "first forward" in c.problem, c.describe()


def test_sglangs_fail_closed_object_is_the_silent_default_to_stock_vllm():
    """The issue's finding: vLLM counts only a list (0.32 gpu_model_runner.py:5282)."""
    for reader in releases.other_engines():
        c = engine_capture({"eagle_config": {IDS_KEY: dict(FAIL_CLOSED_IDS)}}, N, family="llama", reader=reader)
        assert (c.fed_layer_ids, c.problem, c.refuses_at_startup) == ((1, 2, 3), None, False), c.describe()


@pytest.fixture(scope="module")
def target(tmp_path_factory):
    return build_family_target("llama", tmp_path_factory.mktemp("t") / "llama", num_hidden_layers=N)


@pytest.mark.parametrize("ids", [[-1, 1, 4], [4, -1, 1], [-1, 1, FINAL_NORM], [0, 3, 6]])
def test_fail_closed_drafts_are_fed_exactly_or_refused_at_startup_by_every_stock_engine(tmp_path, target, ids):
    draft = build_tiny_draft(tmp_path / "d", target_dir=target, num_aux=len(ids))
    write_draft_manifest(draft, ids, target, fail_closed=True)
    report = inspect_draft(draft, target, stock=True)
    assert "silently" not in report.stock_outcome and "silently" not in report.vllm_outcome
    rows = {r.name: r for r in report.readings}
    for reader in releases.other_engines():
        assert rows[reader.name].status in ("consistent", "refused-at-startup"), rows[reader.name]


def test_inspect_says_an_sglang_only_fail_closed_draft_is_silently_mis_fed_by_stock_vllm(tmp_path, target):
    draft = build_tiny_draft(tmp_path / "d", target_dir=target, num_aux=3,
                             config_overrides={"num_aux_hidden_states": 3})
    write_draft_manifest(draft, [4, -1, 1], target, fail_closed=True)
    config = json.loads((draft / "config.json").read_text())
    del config[IDS_KEY]  # as manifest write --fail-closed wrote it before vLLM was covered
    (draft / "config.json").write_text(json.dumps(config))
    report = inspect_draft(draft, target, stock=True)
    assert report.stock_outcome.startswith("refuses at startup")
    assert report.vllm_outcome.startswith("silently mis-fed")


def test_the_schema_takes_the_vllm_fail_closed_value_and_nothing_like_it():
    assert is_vllm_fail_closed(VLLM_FAIL_CLOSED_IDS)
    check_draft_config({IDS_KEY: list(VLLM_FAIL_CLOSED_IDS)})
    with pytest.raises(InputError) as e:
        check_draft_config({IDS_KEY: [0, "not ours"]})
    assert e.value.field.startswith(IDS_KEY)


def _deployment(draft, target_cfg=None, **kw):
    config = json.loads((draft / "config.json").read_text())
    return policy.VllmDeployment(release=releases.vllm_get("0.32.0"), version="0.32.0", draft=str(draft),
                                 manifest=find_manifest(draft), draft_config=config,
                                 config_file=str(draft / "config.json"), target_config=target_cfg, **kw)


def test_the_vllm_plugin_wires_a_fail_closed_manifest_and_refuses_what_stock_vllm_would_misread(tmp_path, target):
    draft = build_tiny_draft(tmp_path / "d", target_dir=target, num_aux=3)
    write_draft_manifest(draft, [4, -1, 1], target, fail_closed=True)
    target_cfg = json.loads((target / "config.json").read_text())
    assert policy.decide_vllm(_deployment(draft, target_cfg)).layer_ids == (4, -1, 1)
    manifest = str(draft / "eagle3_manifest.json")
    with pytest.raises(DeploymentError) as e:  # not served in this process (Model Runner V2, an unserved release, ...)
        policy.decide_vllm(_deployment(draft, unserved="Model Runner V2 ran"))
    assert (e.value.file, e.value.field) == (manifest, "layer_ids")
    with pytest.raises(DeploymentError) as e:  # a release outside the table
        policy.decide_vllm(policy.VllmDeployment(**{**_deployment(draft).__dict__,
                                                    "release": releases.vllm_get("0.31.0"), "version": "0.31.0"}))
    assert (e.value.file, e.value.field) == (manifest, "layer_ids")
    config = json.loads((draft / "config.json").read_text())
    (draft / "config.json").write_text(json.dumps({**config, IDS_KEY: [0, 2, 5]}))  # stock vLLM: sorted, mis-fed
    with pytest.raises(DeploymentError) as e:
        policy.decide_vllm(_deployment(draft))
    assert (e.value.file, e.value.field) == (manifest, "layer_ids")
    (draft / "eagle3_manifest.json").unlink()
    (draft / "config.json").write_text(json.dumps({**config, IDS_KEY: list(VLLM_FAIL_CLOSED_IDS)}))
    with pytest.raises(DeploymentError) as e:  # a value that stands for a manifest, without one
        policy.decide_vllm(_deployment(draft))
    assert (e.value.file, e.value.field) == (str(draft / "config.json"), IDS_KEY)


def test_a_draft_that_declares_nothing_is_stock_vllms(tmp_path, target):
    draft = build_tiny_draft(tmp_path / "d", target_dir=target, eagle_aux_layer_ids=[1, 3, 5])
    assert policy.decide_vllm(_deployment(draft)).layer_ids is None
