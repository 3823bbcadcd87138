"""``verify`` on a draft without a manifest whose config.json ids are ambiguous: it ranks every reading of the ids on
training samples stored with every layer, and names the one the draft was trained on (doctor/verify.py).

The committed fixture's draft was trained on layer ids [-1, 0, 1] of a 7-layer DeepSeek-V3. Written as
``eagle_config`` ids ``[0, 1, 2]`` (no manifest), the list means layer ids [0, 1, 2] to a layer-output hook or
SGLang 0.5.11, and [-1, 0, 1] to SGLang 0.5.15.post1 and later (as loop indices): ``inspect`` says ambiguous.
"""

import json
import shutil

import pytest

from fixtures.language import Language
from fixtures.samples import make_samples
from sglang_eagle3_capture.core import releases
from support.cli import run
from support.fixture import fixture_dir


@pytest.fixture(scope="module")
def fx():
    return fixture_dir()


@pytest.fixture(scope="module")
def ambiguous_draft(fx, tmp_path_factory):
    d = tmp_path_factory.mktemp("ambiguous") / "draft"
    shutil.copytree(fx / "draft", d)
    (d / "eagle3_manifest.json").unlink()
    cfg = json.loads((d / "config.json").read_text())
    cfg.pop("eagle_aux_hidden_state_layer_ids", None)
    cfg["eagle_config"] = {"use_aux_hidden_state": True, "eagle_aux_hidden_state_layer_ids": [0, 1, 2]}
    (d / "config.json").write_text(json.dumps(cfg))
    return d


@pytest.fixture(scope="module")
def all_layers(fx, tmp_path_factory):
    info = json.loads((fx / "fixture.json").read_text())
    out = tmp_path_factory.mktemp("all-layers")
    return make_samples(fx / "target", out, n=24, seed=11, layer_ids=list(range(-1, info["num_hidden_layers"])),
                        lang=Language(**info["language"]))


def test_inspect_calls_the_config_ambiguous(fx, ambiguous_draft, capsys):
    rc, out, _ = run(capsys, "inspect", ambiguous_draft, "--target", fx / "target", "--json")
    r = json.loads(out)
    assert rc == 3 and r["verdict"] == "ambiguous"
    assert {tuple(x["layer_ids"]) for x in r["ambiguous_readings"]} == {(0, 1, 2), (-1, 0, 1)}


def test_verify_names_the_reading_the_draft_was_trained_on(fx, ambiguous_draft, all_layers, capsys):
    rc, out, err = run(capsys, "verify", ambiguous_draft, "--data", all_layers, "--target", fx / "target", "--json",
                       "--no-progress", "--threads", "1", "--max-combinations", "0")
    r = json.loads(out)
    assert rc == 0 and r["declared_by"] == "ambiguous config" and not r["ambiguous"], r["summary"]
    tops = {tuple(w["layer_ids"]): w["top1"] for w in r["wirings"] if w["layer_ids"] and None not in w["layer_ids"]}
    assert tops[(-1, 0, 1)] - tops[(0, 1, 2)] >= 0.05  # measured here, not assumed
    assert "--layer-ids=-1,0,1" in r["summary"] and releases.newest().version in r["summary"]


def test_verify_without_a_manifest_needs_the_target(ambiguous_draft, all_layers, capsys):
    rc, _, err = run(capsys, "verify", ambiguous_draft, "--data", all_layers, "--no-progress")
    assert rc == 2 and f"{ambiguous_draft / 'eagle3_manifest.json'}: field '<file>': " in err


def test_verify_scores_no_stock_reading_that_would_crash(fx, ambiguous_draft, all_layers, capsys):
    # [0, 1, 2] as loop indices captures the embedding at loop index 0, which crashes some releases' DeepSeek loop
    # (embedding_crashes): such a release feeds nothing, so it is listed as not scored, like a crashing vLLM runner
    from sglang_eagle3_capture.doctor.readings import releases_label, stock_by_release

    cfg = json.loads((ambiguous_draft / "config.json").read_text())
    n = json.loads((fx / "fixture.json").read_text())["num_hidden_layers"]
    crashing = [releases_label(v) for v, c in stock_by_release(cfg, n, family="deepseek_v2") if c.problem]
    assert crashing, "the fixture no longer has a crashing release; pick other ids"
    rc, out, _ = run(capsys, "verify", ambiguous_draft, "--data", all_layers, "--target", fx / "target", "--json",
                     "--no-progress", "--threads", "1", "--max-combinations", "0")
    r = json.loads(out)
    names = [w["name"] for w in r["wirings"]] + [w["name"] for w in r["unbuildable"]]
    for label in crashing:
        assert not any(name.startswith(f"{label} [") for name in names), label
        assert any(note.startswith(f"not scored: {label} ") for note in r["notes"]), label
