"""The post-norm final state, the layer id "final_norm" (issue 20 section 1), without SGLang: the convention, the
manifest (token, version), the CLI, the fail-closed choice and the FcFeed's hook. The capture against HF transformers
is tests/inprocess/test_target_capture.py; through a server, tests/engine/test_final_norm_engine.py."""

from __future__ import annotations

import json
import shutil
from types import SimpleNamespace

import pytest
import torch

from fixtures.specs import SPECS
from sglang_eagle3_capture.core import policy, releases
from sglang_eagle3_capture.core.capture import CaptureError, FcFeed, plan_capture
from sglang_eagle3_capture.core.config_keys import CONVENTION_KEY, IDS_KEY, LAYER_ID_CONVENTION, is_fail_closed
from sglang_eagle3_capture.core.errors import DeploymentError, InputError
from sglang_eagle3_capture.core.families import all_families
from sglang_eagle3_capture.core.layer_ids import FINAL_NORM, check_layer_ids, split_capture
from sglang_eagle3_capture.core.manifest import Manifest, manifest_from_dict, read_manifest
from sglang_eagle3_capture.core.schemas.manifest import VERSIONS
from sglang_eagle3_capture.doctor.cli import parse_layer_ids
from sglang_eagle3_capture.doctor.manifest_write import write_draft_manifest
from sglang_eagle3_capture.doctor.readings import fail_closed_eagle_config_ids, stock_safe_eagle_config_ids
from support.cli import run

WHERE = "draft/eagle3_manifest.json: field 'layer_ids'"
N = 7


def _doc(ids, version):
    return {"format": "sglang-eagle3-capture.manifest", "version": version, "layer_ids": ids,
            "target": {"architecture": "LlamaForCausalLM", "num_hidden_layers": N, "hidden_size": 96}}


# ----------------------------------------------------------------------------------------------- the convention

@pytest.mark.parametrize("ids", [[-1, 1, FINAL_NORM], [FINAL_NORM, -1, 1], [-1, FINAL_NORM, N - 1], [FINAL_NORM]])
def test_the_token_is_a_layer_id_once_anywhere_in_fc_order(ids):
    assert check_layer_ids(ids, N, file="m.json") == tuple(ids)


@pytest.mark.parametrize("ids, field", [([-1, FINAL_NORM, FINAL_NORM], "layer_ids"), ([-1, "final"], "layer_ids[1]"),
                                        ([-1, "Final_Norm"], "layer_ids[1]"), ([FINAL_NORM, N], "layer_ids")])
def test_the_token_twice_or_misspelt_is_refused_naming_the_field(ids, field):
    with pytest.raises(InputError) as e:
        check_layer_ids(ids, N, file="m.json")
    assert (e.value.file, e.value.field) == ("m.json", field) and e.value.fix


@pytest.mark.parametrize("ids, loop, last, order", [
    ([-1, 1, FINAL_NORM], (0, 2), False, (0, 1, 2)),
    ([FINAL_NORM, -1, 1], (0, 2), False, (2, 0, 1)),
    ([N - 1, FINAL_NORM, -1], (0,), True, (1, 2, 0)),  # the norm's input (N-1) comes before its output
    ([FINAL_NORM], (), False, (0,)),
])
def test_the_final_norm_output_is_appended_after_the_norm_input(ids, loop, last, order):
    assert split_capture(ids, N) == (loop, last, order)
    p = plan_capture(ids, N, where=WHERE)
    assert p.captures_final_norm and not p.is_identity and FINAL_NORM not in p.loop_indices


def test_n_minus_1_alone_does_not_capture_the_final_norm_output():
    p = plan_capture([-1, 1, N - 1], N, where=WHERE)
    assert p.captures_last_layer and not p.captures_final_norm


# ----------------------------------------------------------------------------------------------- the manifest

def test_a_manifest_with_the_token_is_written_as_version_2_and_read_back(tmp_path):
    m = Manifest((-1, 1, FINAL_NORM), "LlamaForCausalLM", N, 96)
    assert m.to_dict()["version"] == 2 and m.fc_in_features == 3 * 96
    back = manifest_from_dict(json.loads(json.dumps(m.to_dict())))
    assert back.layer_ids == (-1, 1, FINAL_NORM)
    assert Manifest((-1, 1, N - 1), "LlamaForCausalLM", N, 96).to_dict()["version"] == 1  # older readers read it


def test_version_1_with_the_token_is_refused_naming_the_version_field():
    # an older package reads version 1: a document it could not read must not claim it
    with pytest.raises(InputError) as e:
        manifest_from_dict(_doc([-1, 1, FINAL_NORM], 1), path="d/eagle3_manifest.json")
    assert (str(e.value.file), e.value.field) == ("d/eagle3_manifest.json", "version") and e.value.fix
    assert manifest_from_dict(_doc([-1, 1, 6], 2)).layer_ids == (-1, 1, 6)  # version 2 without it reads too


@pytest.mark.parametrize("doc, field", [(_doc([-1, 1, FINAL_NORM], max(VERSIONS) + 1), "version"),
                                        (_doc([-1, FINAL_NORM, FINAL_NORM], 2), "layer_ids"),
                                        (_doc([-1, "final"], 2), "layer_ids[1]")])
def test_bad_version_or_token_is_refused(doc, field):
    with pytest.raises(InputError) as e:
        manifest_from_dict(doc, path="d/eagle3_manifest.json")
    assert e.value.field == field and e.value.fix


def test_cli_layer_ids_take_the_token():
    assert parse_layer_ids("-1,2,final_norm") == [-1, 2, FINAL_NORM]
    assert parse_layer_ids("final_norm, -1") == [FINAL_NORM, -1]
    with pytest.raises(InputError) as e:
        parse_layer_ids("-1,2,finalnorm")
    assert e.value.field == "--layer-ids"


# ----------------------------------------------------------------------------------------------- fail-closed

@pytest.mark.parametrize("family", [f.name for f in all_families()])
def test_no_stock_id_list_expresses_the_token_so_it_is_written_fail_closed(family):
    got = fail_closed_eagle_config_ids([-1, 1, FINAL_NORM], N, family=family)
    assert not got.exact and is_fail_closed(got.value) and got.why
    with pytest.raises(ValueError):
        stock_safe_eagle_config_ids([-1, 1, FINAL_NORM], family=family)


def test_manifest_write_fail_closed_writes_the_object_for_the_token(tmp_path):
    spec = SPECS["tiny"].directory
    shutil.copytree(spec / "draft", tmp_path / "d")
    draft = tmp_path / "d"
    n = json.loads((spec / "target" / "config.json").read_text())["num_hidden_layers"]
    w = write_draft_manifest(draft, [-1, 1, FINAL_NORM], spec / "target", force=True, fail_closed=True)
    assert w.config_written
    ec = json.loads((draft / "config.json").read_text())["eagle_config"]
    assert is_fail_closed(ec[IDS_KEY])
    assert read_manifest(draft).layer_ids == (-1, 1, FINAL_NORM) and n > 2


def test_an_id_list_beside_a_manifest_with_the_token_is_refused(tmp_path):
    m = Manifest((-1, 1, FINAL_NORM), "DeepseekV3ForCausalLM", 6, 64, path=tmp_path / "m.json")
    ec = {IDS_KEY: [0, 2, 6]}  # what a stock-safe writer would put there for [-1, 1, 5]: means N-1 to SGLang
    d = policy.Deployment(release=releases.newest(), draft="D", manifest=m, eagle_config=ec,
                          config_file="D/config.json", architecture="DeepseekV3ForCausalLM", num_hidden_layers=6)
    with pytest.raises(DeploymentError) as e:
        policy.decide(d)
    assert (e.value.file, e.value.field) == (str(m.path), "layer_ids")
    assert policy.decide(policy.Deployment(release=releases.newest(), draft="D", manifest=m, eagle_config={},
                                           config_file="D/config.json", architecture="DeepseekV3ForCausalLM",
                                           num_hidden_layers=6)).layer_ids == (-1, 1, FINAL_NORM)


def _with_config_ids(tmp_path, fixture, ec):
    draft = tmp_path / fixture
    shutil.copytree(SPECS[fixture].directory / "draft", draft)
    (draft / "eagle3_manifest.json").unlink()
    cfg = json.loads((draft / "config.json").read_text())
    cfg["eagle_config"] = ec
    (draft / "config.json").write_text(json.dumps(cfg))
    return draft, SPECS[fixture].directory / "target"


def test_an_unmarked_config_id_list_naming_the_token_is_refused_naming_the_item(tmp_path, capsys):
    draft, target = _with_config_ids(tmp_path, "tiny-llama", {IDS_KEY: [-1, 1, FINAL_NORM]})
    rc, out, err = run(capsys, "inspect", draft, "--target", target)
    assert rc == 2 and err.count("\n") == 1 and out == ""
    assert f"{draft / 'config.json'}: field 'eagle_config.{IDS_KEY}[2]'" in err
    assert CONVENTION_KEY in err.split("fix:")[1]  # mark it, or declare it in a manifest


@pytest.mark.parametrize("fixture, stock_status", [
    ("tiny-llama", "refused-at-startup"),  # Llama adds 1 to every id: "final_norm" + 1 is a TypeError at startup
    ("tiny", "crash"),  # DeepSeek keeps ids whose first is not 1 as loop indices: the token captures nothing
])
def test_a_marked_config_id_list_may_name_the_token_and_stock_sglang_fails_on_it(tmp_path, capsys, fixture,
                                                                                 stock_status):
    ids = [-1, 1, FINAL_NORM]
    draft, target = _with_config_ids(tmp_path, fixture, {IDS_KEY: ids, CONVENTION_KEY: LAYER_ID_CONVENTION})
    rc, out, _ = run(capsys, "inspect", draft, "--target", target, "--json")
    report = json.loads(out)
    assert rc == 0 and report["declared"]["layer_ids"] == ids  # the plugin feeds the marked ids as declared
    rc, out, _ = run(capsys, "inspect", draft, "--target", target, "--stock", "--json")
    supported = {f"stock SGLang {v}" for v in releases.supported_versions()}
    rows = [r for r in json.loads(out)["stock_sglang"] if r["name"] in supported]
    assert rc == 1 and len(rows) == len(supported) and {r["status"] for r in rows} == {stock_status}, rows
    assert all(len(r["layer_ids"]) < len(ids) for r in rows)
    ec = {IDS_KEY: ids, CONVENTION_KEY: LAYER_ID_CONVENTION}
    arch = json.loads((target / "config.json").read_text())["architectures"][0]
    d = policy.Deployment(release=releases.newest(), draft="D", eagle_config=ec, config_file="D/config.json",
                          architecture=arch, num_hidden_layers=json.loads((target / "config.json").read_text())[
                              "num_hidden_layers"])
    assert policy.decide(d).layer_ids == tuple(ids)  # what the plugin decides at startup with the marked list


# ----------------------------------------------------------------------------------------------- the FcFeed

class _PairNorm(torch.nn.Module):
    """Stands in for SGLang's RMSNorm(x, residual) -> (normed, x + residual); without a residual, normed only."""

    def forward(self, x, residual=None):
        if residual is None:
            return x * 2
        return (x + residual) * 2, x + residual


def _model(layers):
    return SimpleNamespace(layers_to_capture=layers, norm=_PairNorm())


def test_feed_takes_the_norm_output_for_the_token_and_its_input_for_n_minus_1():
    p = plan_capture([FINAL_NORM, 5, -1], 6, where=WHERE)  # 6 layers: 5 = the norm's input, the token its output
    layers = list(p.loop_indices)
    model = _model(layers)
    feed = FcFeed(p, layers, model_name="LlamaModel")
    feed.attach(model)
    x, residual, embed = torch.randn(2, 3), torch.randn(2, 3), torch.randn(2, 3)
    normed, summed = model.norm(x, residual)
    out = feed(model, (normed, [embed]), None, None, None)
    assert torch.equal(out[1], torch.cat([normed, summed, embed], dim=-1))
    assert not torch.equal(normed, summed)  # the two meanings of "the last state" are different tensors
    with pytest.raises(CaptureError) as e:  # the norm did not run for this batch: never the previous batch's
        feed(model, (normed, [embed]), None, None, None)
    assert e.value.file == WHERE and e.value.fix
    feed.detach()


def test_feed_takes_a_single_tensor_norm_output_itself():
    p = plan_capture([-1, FINAL_NORM], 6, where=WHERE)
    layers = list(p.loop_indices)
    model = _model(layers)
    feed = FcFeed(p, layers, model_name="LlamaModel")
    feed.attach(model)
    x, embed = torch.randn(2, 3), torch.randn(2, 3)
    normed = model.norm(x)
    out = feed(model, (normed, [embed]), None, None, None)
    assert torch.equal(out[1], torch.cat([embed, normed], dim=-1))
    assert out[1].data_ptr() != normed.data_ptr()
    feed.detach()


# ----------------------------------------------------------------------------------------------- readers

def test_inspect_reads_a_speculators_trailing_final_layer_by_the_fc_width(tmp_path, capsys):
    """issue 20: speculators ids [0, 2, 7] on a 7-layer Llama whose fc takes 3 chunks are [-1, 1, 6] (speculators
    0.9's vLLM extraction stores index 7 before the final norm), never [-1, 1]; without weights: ambiguous, exit 3."""
    from sglang_eagle3_capture.doctor.inspect import inspect_draft
    from support.cli import run
    from support.draft_dirs import make_speculators_draft
    from support.tiny_models import build_family_target

    target = build_family_target("llama", tmp_path / "target", num_hidden_layers=7)
    draft = make_speculators_draft(tmp_path / "draft", target, [0, 2, 7])
    hidden = json.loads((target / "config.json").read_text())["hidden_size"]
    report = inspect_draft(draft, target)
    assert report.declared.layer_ids == (-1, 1, 6)
    assert any(f"{3 * hidden} = 3 ids" in c for c in report.checks)  # the width check is printed
    (draft / "model.safetensors").unlink()
    report = inspect_draft(draft, target)
    assert report.verdict == "ambiguous"
    assert {tuple(r.layer_ids) for r in report.ambiguous_readings} == {(-1, 1), (-1, 1, 6)}
    rc, _, _ = run(capsys, "inspect", draft, "--target", target)
    assert rc == 3


# ----------------------------------------------------------------------------------------------- verify: pre or post

def test_verify_tells_a_post_norm_target_state_from_a_pre_norm_one(tmp_path, capsys):
    """speculators' legacy samples store the last layer before the norm; SpecForge's .ckpt ``hidden_state`` after it.
    The post-norm state is made here with transformers' own final norm module of the fixture's target."""
    from transformers import AutoModelForCausalLM

    from support.cli import run
    from support.fixture import fixture_dir

    fx = fixture_dir()
    legacy = sorted((fx / "samples").glob("data_*.pt"))
    norm = AutoModelForCausalLM.from_pretrained(str(fx / "target"), dtype=torch.float32).model.norm
    (tmp_path / "sf").mkdir()
    for i, p in enumerate(legacy):
        s = torch.load(p, weights_only=True)
        hs = s["hidden_states"]
        with torch.no_grad():
            post = norm(hs[3].float()[None])
        torch.save({"input_ids": s["input_ids"], "loss_mask": s["loss_mask"], "hidden_state": post,
                    "aux_hidden_state": torch.cat(hs[:3], dim=-1)[None]}, tmp_path / "sf" / f"data_{i}.ckpt")
    found = {}
    for name, data in (("legacy", legacy), ("specforge", [tmp_path / "sf"])):
        rc, out, err = run(capsys, "verify", fx / "draft", "--data", *data, "--target", fx / "target", "--json",
                           "--no-progress")
        assert rc == 0, err
        found[name] = {n["name"]: n["reading"] for n in json.loads(out)["norm_states"]}
    assert found["legacy"] == {f"hidden_states[{i}]": "pre-norm" for i in range(4)}
    assert found["specforge"]["hidden_state"] == "post-norm"
    assert {v for k, v in found["specforge"].items() if k != "hidden_state"} == {"pre-norm"}


def test_verify_counts_each_samples_tokens_once_across_batches(capsys):
    """The first batch decides the stored tensors' names and is counted there; later batches in the loop: every
    token once, whatever the batch size (the total is read from the samples themselves)."""
    from support.cli import run
    from support.fixture import fixture_dir

    fx = fixture_dir()
    legacy = sorted((fx / "samples").glob("data_*.pt"))
    total = sum(torch.load(p, weights_only=True)["input_ids"].shape[0] for p in legacy)
    for batch in ("1", "5", "32"):
        rc, out, err = run(capsys, "verify", fx / "draft", "--data", *legacy, "--target", fx / "target", "--json",
                           "--no-progress", "--batch-size", batch)
        assert rc == 0, err
        assert {n["tokens"] for n in json.loads(out)["norm_states"]} == {total}, batch


# ----------------------------------------------------------------------------------------------- compare

def test_compare_tells_a_served_post_norm_chunk_from_a_pre_norm_training_one(tmp_path, capsys):
    """Cosine alone cannot (pre- and post-norm states are >= 0.996 cosine-similar on the fixtures): compare also holds
    each row's norm. Training fc input [embed, layer 0, X] (SpecForge .ckpt ``aux_hidden_state``), served
    [embed, layer 0, Y] from a dump whose layer ids say final_norm: matches only when X and Y are the same state."""
    from transformers import AutoModelForCausalLM

    from sglang_eagle3_capture.observe.dump import CaptureDump
    from support.cli import run
    from support.fixture import fixture_dir

    fx = fixture_dir()
    norm = AutoModelForCausalLM.from_pretrained(str(fx / "target"), dtype=torch.float32).model.norm
    legacy = sorted((fx / "samples").glob("data_*.pt"))[:3]
    rows = []
    for kind in ("pre", "post"):
        (tmp_path / kind).mkdir()
    for i, p in enumerate(legacy):
        s = torch.load(p, weights_only=True)
        hs = s["hidden_states"]
        with torch.no_grad():
            post = norm(hs[3].float()[None])[0]
        for kind, last in (("pre", hs[3]), ("post", post)):
            torch.save({"input_ids": s["input_ids"], "loss_mask": s["loss_mask"], "hidden_state": post[None],
                        "aux_hidden_state": torch.cat([hs[0], hs[1], last], dim=-1)[None]},
                       tmp_path / kind / f"data_{i}.ckpt")
        rows.append((s["input_ids"], torch.cat([hs[0], hs[1], post], dim=-1)))
    dump = CaptureDump(tmp_path / "dump", metadata={"layer_ids": [-1, 0, FINAL_NORM], "tp_rank": 0}, max_batches=1)
    dump(torch.cat([a for _, a in rows]), torch.cat([i for i, _ in rows]),
         torch.cat([torch.arange(i.shape[0]) for i, _ in rows]))
    result = {}
    for kind in ("pre", "post"):
        # a cosine bound the pre-norm state passes (0.996 here): only the norm check can tell them apart
        rc, out, _ = run(capsys, "compare", "--dump", tmp_path / "dump", "--data", tmp_path / kind, "--json",
                         "--min-cosine", "0.99")
        result[kind] = (rc, json.loads(out))
    rc, r = result["post"]
    assert rc == 0 and r["ok"] and [c["served_layer_id"] for c in r["served_chunks"]] == [-1, 0, FINAL_NORM]
    rc, r = result["pre"]
    assert rc == 1 and not r["ok"]
    c2 = r["served_chunks"][2]
    assert not c2["match"] and [c["match"] for c in r["served_chunks"][:2]] == [True, True]
    vs = {v["name"]: v for v in c2["vs"]}[c2["expected"]]
    assert vs["min_cos"] > 0.99 and vs["max_norm_deviation"] > 0.01  # the direction agrees, the scale does not


def test_an_sglang_format_list_naming_the_last_layer_has_a_pre_and_a_post_norm_reading():
    """A layer-output trainer's last id N-1: SpecForge's HF backend read HF hidden_states[N] (post-norm, final_norm),
    a hook on the layer (Model Optimizer) its pre-norm output (N-1). Nothing in the config says which."""
    from sglang_eagle3_capture.core.errors import AmbiguousLayerIds
    from sglang_eagle3_capture.doctor.formats import read_draft_config

    target = {"architectures": ["LlamaForCausalLM"], "num_hidden_layers": N, "hidden_size": 96}
    cfg = {"architectures": ["LlamaForCausalLMEagle3"], "eagle_config": {IDS_KEY: [1, 3, N - 1]}}
    with pytest.raises(AmbiguousLayerIds) as e:
        read_draft_config(cfg, target, file="c.json")
    assert (e.value.file, e.value.field, e.value.exit_code) == ("c.json", f"eagle_config.{IDS_KEY}", 3)
    assert {r.layer_ids for r in e.value.readings} == {(1, 3, N - 1), (1, 3, FINAL_NORM)}
    assert read_draft_config(cfg, target, trained_with="hf-hidden-states").layer_ids == (1, 3, FINAL_NORM)
    assert read_draft_config(cfg, target, trained_with="layer-output").layer_ids == (1, 3, N - 1)
    below = {"architectures": ["LlamaForCausalLMEagle3"], "eagle_config": {IDS_KEY: [1, 3, 4]}}
    assert read_draft_config(below, target, trained_with="hf-hidden-states").layer_ids == (1, 3, 4)  # no N: one meaning


def test_verify_names_a_post_norm_stored_tensor_final_norm_and_builds_the_manifest_from_it(tmp_path, capsys):
    """Samples whose last stored tensor is the final norm's output although data_config.json calls it layer N-1:
    verify reads it as final_norm (and says the label is wrong), so a manifest listing final_norm is built from it."""
    from transformers import AutoModelForCausalLM

    from support.cli import run
    from support.fixture import fixture_dir

    fx = fixture_dir()
    norm = AutoModelForCausalLM.from_pretrained(str(fx / "target"), dtype=torch.float32).model.norm
    data = tmp_path / "samples"
    data.mkdir()
    for p in (fx / "samples").iterdir():
        if p.suffix == ".pt":
            s = torch.load(p, weights_only=True)
            with torch.no_grad():
                s["hidden_states"][3] = norm(s["hidden_states"][3].float()[None])[0]
            torch.save(s, data / p.name)
        else:
            shutil.copy(p, data / p.name)
    draft = tmp_path / "d"
    shutil.copytree(fx / "draft", draft)
    write_draft_manifest(draft, [-1, 0, FINAL_NORM], fx / "target", force=True)
    rc, out, err = run(capsys, "verify", draft, "--data", data, "--target", fx / "target", "--json", "--no-progress")
    r = json.loads(out)
    assert {t["name"]: t["layer_id"] for t in r["stored_tensors"]}["hidden_states[3]"] == FINAL_NORM
    assert any("labelled layer 6" in n for n in r["notes"])
    manifest = next(w for w in r["wirings"] if w["is_manifest"])
    assert manifest["sources"][2] == "hidden_states[3]"
    assert rc == 1  # the fixture's draft was trained on [-1, 0, 1], which ranks first: the manifest is wrong


def test_convert_accepts_final_norm_and_writes_the_draft_fail_closed(tmp_path, capsys):
    from support.cli import run
    from support.draft_dirs import make_speculators_draft
    from support.tiny_models import build_family_target

    target = build_family_target("llama", tmp_path / "target", num_hidden_layers=N)
    src = make_speculators_draft(tmp_path / "src", target, [0, 2, N])
    rc, _, err = run(capsys, "convert", src, tmp_path / "dst", "--target", target, "--layer-ids=-1,1,final_norm")
    assert rc == 0, err
    assert read_manifest(tmp_path / "dst").layer_ids == (-1, 1, FINAL_NORM)
    cfg = json.loads((tmp_path / "dst" / "config.json").read_text())
    assert is_fail_closed(cfg["eagle_config"][IDS_KEY]) and cfg["num_aux_hidden_states"] == 3
