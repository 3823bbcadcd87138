"""``inspect`` (doctor/inspect.py): the manifest next to what stock SGLang would feed, checked against SGLang itself.

What "stock SGLang 0.5.23" feeds is recomputed here from SGLang's own
``DeepseekV2ForCausalLM.set_eagle3_layers_to_capture`` (called on a stand-in ``self``) plus the
capture loop's rule (loop index ``i`` in ``range(N)``, ascending), not taken from the package.
The checks that need no SGLang are in tests/unit/test_doctor_inspect.py.
"""

import json

import pytest

from harness.sglang_inprocess import sglang_layers_to_capture
from sglang_eagle3_capture.core.layer_ids import layer_id_of_index
from sglang_eagle3_capture.doctor.readings import stock_safe_eagle_config_ids
from support.cli import run
from support.draft_dirs import draft_with_manifest
from support.tiny_models import build_tiny_target

N_LAYERS = 7
TRAINED_ON = (-1, 1, 4)  # the fixture's wiring: cat([embed, HF[2], HF[5]])


def sglang_0_5_23_feeds(eagle_ids, n_layers=N_LAYERS):
    """Layer ids SGLang 0.5.23's own code would capture (None: it would fail), from its set_eagle3_layers_to_capture."""
    loop = sglang_layers_to_capture(eagle_ids, n_layers)
    captured = [i for i in range(n_layers) if i in loop]  # DeepseekV2Model.forward's loop, ascending
    return None if len(captured) != len(loop) else [layer_id_of_index(i) for i in captured]


@pytest.fixture(scope="module")
def target(tmp_path_factory):
    return build_tiny_target(tmp_path_factory.mktemp("target7"), num_hidden_layers=N_LAYERS)


def draft_with(tmp_path, target, eagle_ids, manifest_ids=TRAINED_ON):
    return draft_with_manifest(tmp_path / "draft", target, eagle_ids, manifest_ids)


def test_stock_default_mis_wires_the_motivating_draft(tmp_path, target, capsys):
    d = draft_with(tmp_path, target, eagle_ids=None)  # no eagle_config ids: stock SGLang uses its default
    rc, out, err = run(capsys, "inspect", d, "--json", "--stock")  # stock SGLang's verdict
    assert (rc, err) == (1, "")
    r = json.loads(out)
    stock = {w["name"]: w for w in r["stock_sglang"]}["stock SGLang 0.5.23"]
    assert stock["layer_ids"] == sglang_0_5_23_feeds(None) != list(TRAINED_ON)
    assert stock["status"] == "mis-wired" and r["verdict"] == "mis-wired" and not r["ok"]
    assert r["declared"]["layer_ids"] == list(TRAINED_ON) and r["declared"]["hf_indices"] == [0, 2, 5]
    rc, text, _ = run(capsys, "inspect", d, "--stock")
    assert rc == 1 and "verdict:     MIS-WIRED" in text and str(stock["layer_ids"]) in text


def test_raw_ids_with_minus_one_crash_stock_sglang(tmp_path, target, capsys):
    d = draft_with(tmp_path, target, eagle_ids=list(TRAINED_ON))
    assert sglang_0_5_23_feeds(list(TRAINED_ON)) is None  # SGLang's loop never reaches index -1
    rc, out, _ = run(capsys, "inspect", d, "--target", target, "--stock")
    assert rc == 1 and "verdict:     CRASH" in out and "captured 2 of 3" in out


def test_converted_config_is_consistent_on_0_5_23_only(tmp_path, target, capsys):
    eagle = stock_safe_eagle_config_ids(TRAINED_ON, family="deepseek_v2")
    d = draft_with(tmp_path, target, eagle_ids=eagle)
    assert sglang_0_5_23_feeds(eagle) == list(TRAINED_ON)
    rc, out, err = run(capsys, "inspect", d, "--target", target, "--json")
    assert (rc, err) == (0, "")
    r = json.loads(out)
    by = {w["name"]: w for w in r["stock_sglang"]}
    assert r["verdict"] == "consistent" and by["stock SGLang 0.5.23"]["status"] == "consistent"
    assert by["stock SGLang 0.5.11"]["status"] != "consistent"  # 0.5.11 always shifts: another wiring or a crash
    assert any("fc.weight input width 192" in c for c in r["checks"])


def test_no_manifest_reads_the_config_and_needs_the_target(tmp_path, target, capsys):
    d = draft_with(tmp_path, target, eagle_ids=[0, 2, 5], manifest_ids=None)
    rc, _, err = run(capsys, "inspect", d)
    assert rc == 2 and "eagle3_manifest.json" in err and "--target" in err
    rc, out, _ = run(capsys, "inspect", d, "--target", target, "--json")
    r = json.loads(out)
    # [0, 2, 5] means outputs of layers 0, 2, 5 to a layer-output hook, but 0.5.15.post1+ use them as loop indices:
    # nothing in the checkpoint says which, so the verdict is ambiguous (exit 3) and names both readings
    assert rc == 3 and r["verdict"] == "ambiguous" and r["manifest"] is None
    readings = {tuple(x["layer_ids"]) for x in r["ambiguous_readings"]}
    assert readings == {(0, 2, 5), tuple(sglang_0_5_23_feeds([0, 2, 5]))}
    rc, out, _ = run(capsys, "inspect", d, "--target", target, "--json", "--trained-with", "layer-output")
    r = json.loads(out)
    assert r["declared"]["layer_ids"] == [0, 2, 5]
    assert ({w["name"]: w for w in r["stock_sglang"]}["stock SGLang 0.5.23"]["layer_ids"]
            == sglang_0_5_23_feeds([0, 2, 5]))
    assert rc == 1 and any("no eagle3_manifest.json" in m for m in r["messages"])
