"""``inspect`` (doctor/inspect.py): the checks of the manifest against the target and the fc, with exit status 2.

The verdicts, checked against SGLang's own reading of the ids, are in tests/inprocess/test_doctor_inspect_sglang.py.
"""

import json

import pytest

from sglang_eagle3_capture.core import releases
from sglang_eagle3_capture.core.manifest import Manifest, write_manifest
from sglang_eagle3_capture.doctor import release_table
from support.cli import run
from support.draft_dirs import draft_with_manifest
from support.tiny_models import build_tiny_draft, build_tiny_target

N_LAYERS = 7
TRAINED_ON = (-1, 1, 4)  # the fixture's wiring: cat([embed, HF[2], HF[5]])


@pytest.fixture(scope="module")
def target(tmp_path_factory):
    return build_tiny_target(tmp_path_factory.mktemp("target7"), num_hidden_layers=N_LAYERS)


def draft_with(tmp_path, target, eagle_ids, manifest_ids=TRAINED_ON):
    return draft_with_manifest(tmp_path / "draft", target, eagle_ids, manifest_ids)


def test_target_that_disagrees_with_the_manifest(tmp_path, target, capsys):
    d = draft_with(tmp_path, target, eagle_ids=None)
    other = build_tiny_target(tmp_path / "t6", num_hidden_layers=6)
    rc, _, err = run(capsys, "inspect", d, "--target", other)
    assert rc == 2 and "num_hidden_layers" in err and "eagle3_manifest.json" in err


def test_fc_width_that_disagrees_with_the_manifest(tmp_path, target, capsys):
    d = build_tiny_draft(tmp_path / "draft", target_dir=target, num_aux=3)
    write_manifest(d, Manifest((-1, 4), "DeepseekV3ForCausalLM", N_LAYERS, 64, {"source": "manual"}))
    rc, _, err = run(capsys, "inspect", d)
    assert rc == 2 and "fc.weight" in err and "fc input width is 192" in err


def test_one_row_per_release_in_the_table_then_other_engines_then_the_default(tmp_path, target, capsys):
    d = draft_with(tmp_path, target, eagle_ids=[0, 2, 5])
    rc, out, _ = run(capsys, "inspect", d, "--json")
    r = json.loads(out)
    assert rc == 0 and r["verdict"] == "consistent"  # 0.5.23 takes [0, 2, 5] as loop indices: layer ids [-1, 1, 4]
    assert [w["name"] for w in r["stock_sglang"]] == \
        [f"stock SGLang {rel.version}" for rel in release_table.all_releases()] + \
        [reader.name for reader in releases.other_engines()] + ["stock default (no ids)"]
    vllm = {w["name"]: w for w in r["stock_sglang"]}
    # vLLM's default runner does not read the nested ids (its default: HF [2, 3, 4] of 6 layers); V1 reads them
    # as HF indices and crashes at index 0 on DeepSeek
    assert vllm["vLLM 0.33 Model Runner V2 (default)"]["layer_ids"] == [1, 2, 3]
    assert vllm["vLLM 0.33 V1 runner (VLLM_USE_V2_MODEL_RUNNER=0)"]["status"] == "crash"
    assert r["serving_release"] == releases.installed_or_newest().version


def _llama_manifest_draft(tmp_path, ids=(-1, 1, 4), eagle_ids=None):
    d = tmp_path / "llama-draft"
    d.mkdir()
    ec = {} if eagle_ids is None else {"eagle_aux_hidden_state_layer_ids": eagle_ids}
    (d / "config.json").write_text(json.dumps({"architectures": ["LlamaForCausalLMEagle3"], "hidden_size": 64,
                                               "eagle_config": ec}))
    write_manifest(d, Manifest(ids, "LlamaForCausalLM", N_LAYERS, 64, {"source": "manual"}))
    return d


def test_the_verdict_says_the_plugin_refuses_embedding_ids_where_the_release_cannot_capture_them(tmp_path, capsys,
                                                                                                monkeypatch):
    # a release whose Llama loop crashes at loop index 0: the plugin refuses layer id -1 there at startup
    # (core/sglang/resolution.py), so "feeds the manifest's ids instead" would be false
    crashing = next(r for r in releases.supported() if "llama" in r.embedding_crashes)
    monkeypatch.setattr("sglang_eagle3_capture.doctor.inspect.plugin_installed", lambda: True)
    d = _llama_manifest_draft(tmp_path)
    rc, out, _ = run(capsys, "inspect", d, "--sglang", crashing.version, "--json")
    r = json.loads(out)
    assert "feeds the manifest's ids instead" not in r["summary"]
    assert "plugin refuses to start" in r["summary"] and "layer id -1" in r["summary"]
    assert f"newest supported is {releases.newest().version}" in r["summary"]
    fine = next(r for r in reversed(releases.supported()) if "llama" not in r.embedding_crashes)
    rc, out, _ = run(capsys, "inspect", d, "--sglang", fine.version, "--json")
    r = json.loads(out)
    assert "refuses" not in r["summary"]


def test_the_verdict_says_the_plugin_refuses_an_unsupported_release(tmp_path, capsys, monkeypatch):
    unsupported = next(r for r in release_table.all_releases() if not r.supported)
    monkeypatch.setattr("sglang_eagle3_capture.doctor.inspect.plugin_installed", lambda: True)
    d = _llama_manifest_draft(tmp_path)
    rc, out, _ = run(capsys, "inspect", d, "--sglang", unsupported.version, "--json")
    r = json.loads(out)
    assert "feeds the manifest's ids instead" not in r["summary"]
    assert "plugin refuses to start" in r["summary"] and f"SGLang {unsupported.version} is a release" in r["summary"]


def test_the_verdict_says_the_plugin_refuses_stock_ids_that_contradict_the_manifest(tmp_path, capsys, monkeypatch):
    # the server refuses a manifest next to eagle_config ids that mean other layers to the serving release
    # (policy.declared_ids); inspect used to say the plugin would feed the manifest's ids instead
    monkeypatch.setattr("sglang_eagle3_capture.doctor.inspect.plugin_installed", lambda: True)
    d = _llama_manifest_draft(tmp_path, eagle_ids=[1, 2, 5])
    rc, out, _ = run(capsys, "inspect", d, "--json")
    r = json.loads(out)
    assert r["verdict"] == "refused" and rc == 1 and "feeds the manifest's ids instead" not in r["summary"]
    assert "plugin refuses to start" in r["summary"] and "field 'layer_ids'" in r["summary"]


class _Eagle3:
    """Stands in for SGLang's SpeculativeAlgorithm.EAGLE3 (what resolve_target_capture asks of it)."""

    name = "EAGLE3"

    def is_eagle(self):
        return True

    is_eagle3 = is_eagle

    def is_standalone(self):
        return False


AGREEMENT_CASES = {  # manifest ids, the draft config's eagle_config
    "manifest alone": ((-1, 1, 4), {}),
    "manifest without the embedding": ((1, 2, 4), {}),
    "manifest and stock ids": ((-1, 1, 4), {"eagle_aux_hidden_state_layer_ids": [0, 2, 5]}),
    "manifest and shifted stock ids": ((-1, 1, 4), {"eagle_aux_hidden_state_layer_ids": [1, 2, 5]}),
    "manifest and marked ids": ((5, 1), {"eagle_aux_hidden_state_layer_ids": [5, 1],
                                          "eagle_aux_hidden_state_layer_ids_convention":
                                              "sglang-eagle3-capture/layer-id"}),
    "manifest and other marked ids": ((5, 1), {"eagle_aux_hidden_state_layer_ids": [1, 5],
                                                "eagle_aux_hidden_state_layer_ids_convention":
                                                    "sglang-eagle3-capture/layer-id"}),
}


@pytest.mark.parametrize("release", [r.version for r in releases.supported()])
def test_inspect_and_the_server_decide_alike(tmp_path, capsys, monkeypatch, release):
    """For every supported release and case, inspect says the plugin refuses exactly when the server's resolution
    (resolve_target_capture, on the same files) refuses, with the same error."""
    from types import SimpleNamespace

    from sglang_eagle3_capture.core.errors import Eagle3CaptureError
    from sglang_eagle3_capture.core.sglang.resolution import resolve_target_capture
    from sglang_eagle3_capture.doctor.inspect import inspect_draft

    monkeypatch.setattr("sglang_eagle3_capture.doctor.inspect.plugin_installed", lambda: True)
    target = {"architectures": ["LlamaForCausalLM"], "num_hidden_layers": N_LAYERS, "hidden_size": 64}
    refused = set()
    for i, (name, (ids, ec)) in enumerate(AGREEMENT_CASES.items()):
        d = tmp_path / f"d{i}"
        d.mkdir()
        cfg = {"architectures": ["LlamaForCausalLMEagle3"], "hidden_size": 64, "eagle_config": ec}
        (d / "config.json").write_text(json.dumps(cfg))
        write_manifest(d, Manifest(ids, "LlamaForCausalLM", N_LAYERS, 64, {"source": "manual"}))
        summary = inspect_draft(d, sglang_version=release).summary
        try:
            declared = resolve_target_capture(
                config=SimpleNamespace(eagle_use_aux_hidden_state=True), server_args=SimpleNamespace(),
                model_config=SimpleNamespace(hf_config=target), spec_algorithm=_Eagle3(), is_draft_worker=False,
                draft_path=str(d), draft_hf_config=lambda cfg=cfg: cfg, release=release_table.get(release))
        except Eagle3CaptureError as e:
            assert f"plugin refuses to start: {e}" in summary, (name, summary)
            refused.add(name)
        else:
            assert declared.layer_ids == ids and "refuses" not in summary, (name, summary)
    assert "manifest and other marked ids" in refused and "manifest and marked ids" not in refused
