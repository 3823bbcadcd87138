"""Fail closed without the plugin (issue 21 part 1), the parts that need no SGLang: which manifests stock SGLang can be
told (readings.fail_closed_eagle_config_ids), what every stock rule does with the fail-closed object, and that each of
the package's readers accepts it only beside a manifest. The real servers are tests/engine/test_fail_closed_engine.py;
SGLang's own ``set_eagle3_layers_to_capture`` on the object is tests/inprocess/test_fail_closed_sglang.py."""

from __future__ import annotations

import json
import shutil
from types import SimpleNamespace

import pytest

from fixtures.specs import SPECS
from sglang_eagle3_capture.core import policy, releases
from sglang_eagle3_capture.core.config_keys import FAIL_CLOSED_IDS, IDS_KEY, is_fail_closed
from sglang_eagle3_capture.core.draft_checks import plan_draft, sglang_chunk_counts
from sglang_eagle3_capture.core.draft_config import DraftConfig
from sglang_eagle3_capture.core.errors import DeploymentError, InputError
from sglang_eagle3_capture.core.families import all_families
from sglang_eagle3_capture.core.manifest import Manifest, read_manifest
from sglang_eagle3_capture.core.releases.schema import SHIFT_IF_FIRST_IS_1
from sglang_eagle3_capture.core.sglang.draft import _manifest_ids_for_counting
from sglang_eagle3_capture.core.sglang.guard import declares_layer_ids
from sglang_eagle3_capture.core.stock import stock_rule, stock_sglang_capture
from sglang_eagle3_capture.doctor import release_table
from sglang_eagle3_capture.doctor.formats import check_draft_config, read_draft_config
from sglang_eagle3_capture.doctor.inspect import inspect_draft
from sglang_eagle3_capture.doctor.manifest_write import write_draft_manifest
from sglang_eagle3_capture.doctor.readings import fail_closed_eagle_config_ids

N = 61
FIELD = f"eagle_config.{IDS_KEY}"
EC = {"eagle_config": {IDS_KEY: dict(FAIL_CLOSED_IDS), "use_aux_hidden_state": True}}


@pytest.mark.parametrize("ids, family, written", [
    ([-1, 2, 30], "deepseek_v2", [0, 3, 31]),  # loop indices, used as given (first is not 1)
    ([0, 29, 57], "deepseek_v2", [30, 58, 1]),  # first loop index 1 would be shifted: moved to the end
    ([0, 2, 30], "llama", [0, 2, 30]),  # always-shift: the layer ids themselves
    ([1, 29, 60], "gpt_oss", [1, 29, 60]),  # GPT-OSS captures N at its final norm
])
def test_expressible_manifests_get_ids_every_supported_release_feeds_exactly(ids, family, written):
    got = fail_closed_eagle_config_ids(ids, N, family=family)
    assert got.exact and got.value == written and not got.why
    for release in release_table.all_releases():
        if release.supported:
            c = stock_sglang_capture({"eagle_config": {IDS_KEY: got.value}}, N, family=family, release=release)
            assert c.fed_layer_ids == tuple(ids) and c.problem is None, c.describe()


@pytest.mark.parametrize("ids, family", [
    ([0], "deepseek_v2"),  # a lone layer id 0: loop [1] is read as output-of-layer 1
    ([-1, 2, N - 1], "deepseek_v2"),  # N-1: past the capture loop
    ([30, -1, 2], "deepseek_v2"),  # not ascending: captures arrive in loop order
    ([-1, 2, 30], "llama"),  # 0.5.17 .. 0.5.21 crash at the embedding
    ([2, 30, N - 1], "qwen_moe"),  # past the loop: IndexError at startup there, silent elsewhere
])
def test_inexpressible_manifests_get_the_fail_closed_object(ids, family):
    got = fail_closed_eagle_config_ids(ids, N, family=family)
    assert not got.exact and is_fail_closed(got.value) and got.why


@pytest.mark.parametrize("family", [f.name for f in all_families()])
def test_every_release_refuses_the_fail_closed_object_at_startup(family):
    for release in release_table.all_releases():
        c = stock_sglang_capture(EC, N, family=family, release=release)
        assert c.refuses_at_startup and c.problem and c.fed_layer_ids == (), (release.version, c)
        error = "KeyError: 0" if stock_rule(family, release) == SHIFT_IF_FIRST_IS_1 else "TypeError"
        assert error in c.problem, (release.version, c.problem)


def test_the_schema_takes_the_object_and_the_format_readers_refuse_it():
    assert check_draft_config({"architectures": ["LlamaForCausalLMEagle3"], **EC}, "c.json")
    with pytest.raises(InputError) as e:  # a list item keeps its own path
        check_draft_config({"eagle_config": {IDS_KEY: [1, "2"]}}, "c.json")
    assert e.value.field == f"{FIELD}[1]"
    with pytest.raises(InputError) as e:
        read_draft_config({"architectures": ["LlamaForCausalLMEagle3"], **EC},
                          {"architectures": ["DeepseekV3ForCausalLM"], "num_hidden_layers": N, "hidden_size": 64},
                          file="d/config.json")
    assert (e.value.file, e.value.field) == ("d/config.json", FIELD) and "manifest" in e.value.fix


def _deployment(manifest=None):
    return policy.Deployment(release=releases.newest(), draft="D", manifest=manifest, eagle_config=EC["eagle_config"],
                             config_file="D/config.json", architecture="DeepseekV3ForCausalLM", num_hidden_layers=6)


def test_the_plugin_wires_the_manifest_beside_the_object_and_refuses_the_object_alone(tmp_path):
    m = Manifest((-1, 0, 5), "DeepseekV3ForCausalLM", 6, 64, {"source": "manual"}, path=tmp_path / "m.json")
    assert policy.decide(_deployment(m)).layer_ids == (-1, 0, 5)
    with pytest.raises(DeploymentError) as e:
        policy.decide(_deployment())
    assert (e.value.file, e.value.field) == ("D/config.json", FIELD) and "eagle3_manifest.json" in e.value.fix
    cfg = tmp_path / "d"
    cfg.mkdir()
    (cfg / "config.json").write_text(json.dumps(EC))
    assert declares_layer_ids(cfg) == str(cfg / "config.json")  # the fallback guard counts it as a declaration


def test_draft_readers_need_the_manifest_and_a_count_beside_the_object(tmp_path):
    cfg = {"architectures": ["LlamaForCausalLMEagle3"], "hidden_size": 64, "num_attention_heads": 4,
           "intermediate_size": 128, "vocab_size": 100, "num_hidden_layers": 1, **EC}
    m = Manifest((-1, 0, 5), "DeepseekV3ForCausalLM", 6, 64, {"source": "manual"}, path=tmp_path / "m.json")
    with pytest.raises(DeploymentError) as e:
        plan_draft(cfg, None, None, mla=False)
    assert e.value.field == FIELD
    with pytest.raises(DeploymentError) as e:
        plan_draft(cfg, None, m, mla=True)
    assert e.value.field == "num_aux_hidden_states"
    with pytest.raises(InputError) as e:
        DraftConfig.from_dict(cfg, where="c.json")
    assert e.value.field == "num_aux_hidden_states"
    counted = {**cfg, "num_aux_hidden_states": 3}
    assert plan_draft(counted, None, m, mla=True).manifest is m
    assert {n for n, _ in sglang_chunk_counts(counted, mla=True).values()} == {3}
    assert DraftConfig.from_dict(counted, where="c.json").num_aux_hidden_states == 3


def test_the_mla_draft_counts_the_manifest_ids_while_sglang_builds_it(tmp_path):
    m = Manifest((-1, 0, 5), "DeepseekV3ForCausalLM", 6, 64, {"source": "manual"}, path=tmp_path / "m.json")
    config = SimpleNamespace(eagle_config={IDS_KEY: dict(FAIL_CLOSED_IDS)})
    with _manifest_ids_for_counting(config, SimpleNamespace(manifest=m)):
        assert config.eagle_config[IDS_KEY] == [0, 1, 6]  # len() == 3, what kimi_k25_eagle3 counts
    assert is_fail_closed(config.eagle_config[IDS_KEY])


def _fixture_draft(tmp_path):
    spec = SPECS["tiny"].directory
    shutil.copytree(spec / "draft", tmp_path / "d")
    return tmp_path / "d", spec / "target"


def test_manifest_write_says_what_it_would_change_and_changes_it_only_with_the_flag(tmp_path):
    draft, target = _fixture_draft(tmp_path)
    before = (draft / "config.json").read_bytes()
    w = write_draft_manifest(draft, [-1, 0, 6], target, force=True)
    assert (draft / "config.json").read_bytes() == before and not w.config_written
    assert "--fail-closed" in w.note and "fail-closed object" in w.note
    report = inspect_draft(draft, stock=True)
    assert report.stock_outcome == "silently mis-fed on every supported release"
    assert any("--fail-closed" in m for m in report.messages)

    w = write_draft_manifest(draft, [-1, 0, 6], target, force=True, fail_closed=True)
    cfg = json.loads((draft / "config.json").read_text())
    assert w.config_written and is_fail_closed(cfg["eagle_config"][IDS_KEY]) and cfg["num_aux_hidden_states"] == 3
    kept = read_manifest(draft).provenance["fail_closed"]
    assert kept["field"] == FIELD and kept["replaced_value"] is None  # the fixture's config had no ids
    report = inspect_draft(draft, stock=True)
    assert report.verdict == "refused-at-startup" and not report.ok
    assert report.stock_outcome == "refuses at startup on every supported release"
    assert write_draft_manifest(draft, [-1, 0, 6], target, force=True).note is None  # nothing left to change


def test_manifest_write_fail_closed_writes_ids_where_stock_sglang_can_be_told(tmp_path):
    draft, target = _fixture_draft(tmp_path)
    w = write_draft_manifest(draft, [-1, 0, 1], target, force=True, fail_closed=True)
    cfg = json.loads((draft / "config.json").read_text())
    assert w.config_written and cfg["eagle_config"][IDS_KEY] == [0, 1, 2]
    assert read_manifest(draft).provenance["fail_closed"]["replaced_value"] is None
    report = inspect_draft(draft, stock=True)
    assert report.ok and report.stock_outcome == "fed exactly on every supported release"
