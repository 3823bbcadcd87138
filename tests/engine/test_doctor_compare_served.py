"""``compare`` (doctor/compare.py): dumps from real ``sglang.Engine`` runs (stock wiring and plugin wiring)
against the fixture's samples; and a manifest whose provenance this version would not write still serves
(provenance is metadata: before issue 17 the manifest reader refused it and the server did not start).

Both runs load the plugin (it writes the dump); the "stock" run serves a copy of the fixture's draft
without its manifest, so the plugin leaves SGLang's own wiring in place (its default
``[2, N//2, N-3]``, as for the motivating draft). The plugin run serves the draft with its manifest. Both Engines run
in one subprocess.
The prompts are the fixture samples' own prompts, so every prefill row has a training row.
"""

import json
import shutil

import pytest

from fixtures.language import SEP
from sglang_eagle3_capture.core.layer_ids import layer_id_of_index
from sglang_eagle3_capture.core.manifest import MANIFEST_FILENAME
from sglang_eagle3_capture.doctor.samples import load_sample
from support.cli import run
from support.engine_harness import engine_run, greedy, run_engines
from support.fixture import fixture_dir

N_PROMPTS = 3


@pytest.fixture(scope="module")
def fx():
    return fixture_dir()


@pytest.fixture(scope="module")
def samples(fx):
    return sorted((fx / "samples").glob("data_*.pt"), key=lambda p: int(p.stem.split("_")[1]))[:N_PROMPTS]


@pytest.fixture(scope="module")
def served(fx, samples, tmp_path_factory):
    """Both Engines in one subprocess, their dumps: the plugin run serves a copy of the fixture's draft whose manifest
    provenance holds what this version would not write (a key a later version adds, a tab in its note: provenance is
    metadata, never a reason to stop SGLang); the stock run a copy without the manifest."""
    root = tmp_path_factory.mktemp("compare_served")
    plugin_draft, stock_draft = root / "plugin" / "draft", root / "stock" / "draft"
    for d in (plugin_draft, stock_draft):
        shutil.copytree(fx / "draft", d)
    (stock_draft / MANIFEST_FILENAME).unlink()
    doc = json.loads((plugin_draft / MANIFEST_FILENAME).read_text())
    doc["provenance"].update(note="trained\tby hand", added_by_a_later_version={"run": 7})
    (plugin_draft / MANIFEST_FILENAME).write_text(json.dumps(doc))
    prompts = []
    for p in samples:
        ids = load_sample(p).input_ids.tolist()
        prompts.append(ids[: ids.index(SEP) + 1])
    dumps = {"plugin": root / "dump_plugin", "stock": root / "dump_stock"}
    runs = [engine_run(fx / "target", prompts, draft_path=draft, sampling_params=greedy(4),
                       env={"SGLANG_EAGLE3_CAPTURE_DUMP": str(dumps[name])})
            for name, draft in (("plugin", plugin_draft), ("stock", stock_draft))]
    results = run_engines(runs, plugins="eagle3_capture")
    return {"dumps": dumps, "results": dict(zip(dumps, results)), "manifest": doc}


@pytest.fixture(scope="module")
def plugin_dump(served):
    return served["dumps"]["plugin"]


@pytest.fixture(scope="module")
def stock_dump(served):
    return served["dumps"]["stock"]


def test_a_manifest_with_unknown_provenance_and_a_tab_in_its_note_serves(served):
    out = served["results"]["plugin"]["outputs"][0]
    assert len(out["output_ids"]) == 4 and out["meta_info"]["spec_verify_ct"] > 0  # EAGLE-3 ran
    metas = [json.loads(p.read_text()) for p in sorted(served["dumps"]["plugin"].glob("*.json"))]
    assert metas and all(m["layer_ids"] == served["manifest"]["layer_ids"] for m in metas)  # wired from it


def test_plugin_serving_matches_training(plugin_dump, samples, capsys):
    rc, out, err = run(capsys, "compare", "--dump", plugin_dump, "--data", *samples, "--json")
    assert (rc, err) == (0, "")
    r = json.loads(out)
    assert r["ok"] and r["rows_compared"] > 0
    for c in r["served_chunks"]:
        assert c["match"] and c["best_match"] == c["expected"] == f"hidden_states[{c['index']}]"
    emb = {v["name"]: v for v in r["served_chunks"][0]["vs"]}["hidden_states[0]"]
    assert emb["max_abs_diff"] == 0.0  # the embedding is routed, not computed: exact
    rc, text, _ = run(capsys, "compare", "--dump", plugin_dump, "--data", *samples)
    assert rc == 0 and "verdict:     OK" in text


def test_stock_serving_names_the_mismatched_chunks(fx, stock_dump, samples, capsys):
    rc, out, err = run(capsys, "compare", "--dump", stock_dump, "--data", *samples, "--json")
    assert (rc, err) == (1, "")
    r = json.loads(out)
    n = json.loads((fx / "fixture.json").read_text())["num_hidden_layers"]
    fed = [layer_id_of_index(i) for i in (2, n // 2, n - 3)]  # SGLang's default loop indices, as layer ids
    assert all(ids == fed for ids in r["dump_layer_ids"])
    stored = [t["layer_id"] for t in r["training_tensors"]]
    chunks = r["served_chunks"]
    assert not r["ok"] and not any(c["match"] for c in chunks)
    for c, lid in zip(chunks, fed):
        if lid in stored:  # served a layer the data holds, but in the wrong slot: named exactly
            assert c["best_match"] == f"hidden_states[{stored.index(lid)}]"
            assert f"served chunk {c['index']} is {c['best_match']}, but training fed {c['expected']}" in r["summary"]
        else:
            assert f"served chunk {c['index']} matches no training tensor" in r["summary"]


def test_dump_without_matching_samples_is_a_clear_error(plugin_dump, samples, tmp_path, capsys):
    import torch

    for p in samples:  # the same samples with every token id changed: no served row has a training row
        s = torch.load(p, weights_only=True)
        s["input_ids"] = s["input_ids"] + 1000
        torch.save(s, tmp_path / p.name)
    rc, _, err = run(capsys, "compare", "--dump", plugin_dump, "--data", tmp_path)
    assert rc == 2 and err.startswith(f"sglang-eagle3-capture: error: {plugin_dump}: ") and "fix:" in err


def test_missing_dump_is_a_clear_error(tmp_path, samples, capsys):
    rc, _, err = run(capsys, "compare", "--dump", tmp_path, "--data", *samples)
    assert rc == 2 and err.startswith(f"sglang-eagle3-capture: error: {tmp_path}: ")
    assert "SGLANG_EAGLE3_CAPTURE_DUMP" in err.split("; fix: ")[1]  # the fix says how to write a dump
