"""``verify`` (doctor/verify.py) on the motivating failure in miniature (the committed fixture, fixtures/tiny).

The fixture's draft was trained on ``cat([embed, h_a, h_b])`` of a tiny trained DeepSeek-V3; its
held-out samples are in speculators' legacy layout ``[embed, h_a, h_b, final]``. ``verify`` must
rank the manifest's wiring first by a wide margin, find the embedding exactly, and say so on other
layouts too. Accuracies are never hard-coded: they are compared with numbers measured in the same
run, including an independent, unbatched count made here with HF transformers' target as the
label source.
"""

import json
import shutil
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file, save_file
from transformers import DeepseekV3ForCausalLM

from fixtures.language import Language
from fixtures.samples import make_samples
from sglang_eagle3_capture.core.manifest import Manifest, read_manifest, write_manifest
from sglang_eagle3_capture.core.stock import stock_sglang_capture
from sglang_eagle3_capture.doctor.model import Eagle3Draft
from sglang_eagle3_capture.doctor.readings import releases_label, stock_by_release
from support.cli import run
from support.fixture import fixture_dir


def verify_json(capsys, draft, data, *extra):
    rc, out, err = run(capsys, "verify", draft, "--data", *data, "--json", "--no-progress", *extra)
    assert err == "" or rc != 2, err
    return rc, json.loads(out) if rc != 2 else err


@pytest.fixture(scope="module")
def fx():
    return fixture_dir()


@pytest.fixture(scope="module")
def legacy(fx):
    return sorted((fx / "samples").glob("data_*.pt"))


def by_name(report):
    return {w["name"]: w for w in report["wirings"]}


def wide_lead(a, b, n):
    """``a`` beats ``b`` (accuracies over the same ``n`` positions) by at least 3 standard errors of the difference."""
    se = ((a * (1 - a) + b * (1 - b)) / n) ** 0.5
    return a - b >= 3 * max(se, 1 / n)


def test_manifest_wiring_ranks_first_by_a_wide_margin(fx, capsys):
    rc, r = verify_json(capsys, fx / "draft", [fx / "samples"], "--target", fx / "target")
    assert rc == 0, r["summary"]
    ranked = r["wirings"]
    m = ranked[0]
    assert m["is_manifest"] and m["layer_ids"] == list(read_manifest(fx / "draft").layer_ids)
    wirings = [w for w in ranked[1:] if not w["reference"]]  # tensors an engine could feed instead
    assert len(wirings) >= 3 and all(wide_lead(m["top1"], w["top1"], m["positions"]) for w in wirings)
    assert wide_lead(m["top1"], by_name(r)["all zeros (tokens only)"]["top1"], m["positions"])
    # the stored embedding is found exactly, and the data's own label for it agrees
    assert r["embedding_check"]["embedding_tensor"] == "hidden_states[0]"
    assert [t["files_equal"] for t in r["embedding_check"]["per_tensor"]] == [r["files"], 0, 0, 0]
    assert r["stored_tensors"][0]["layer_id"] == -1
    assert r["throughput"]["draft_positions_per_s"] > 0


@torch.no_grad()
def independent_counts(fx, legacy, layer_slots):
    """Unbatched count: the draft on each sample alone, scored against the HF target's own argmax."""
    target = DeepseekV3ForCausalLM.from_pretrained(str(fx / "target"), torch_dtype=torch.float32).eval()
    draft = Eagle3Draft.from_pretrained(fx / "draft", target_embed=target.model.embed_tokens.weight)
    hits = total = 0
    for p in legacy:
        s = torch.load(p, weights_only=True)
        ids, mask = s["input_ids"], s["loss_mask"].bool()
        argmax = target(input_ids=ids[None]).logits[0].argmax(-1)  # the target's next token at each position
        aux = torch.cat([s["hidden_states"][i] for i in layer_slots], dim=-1)
        pred = draft.to_target_ids(draft(ids[None, 1:], aux[None, :-1])[0].argmax(-1))  # draft t: aux t, token t+1
        t = torch.arange(len(ids) - 1)
        scored = mask[1:] & (t + 2 < len(ids))
        hits += int(((pred == argmax[1:]) & scored).sum())
        total += int(scored.sum())
    return hits, total


def test_counts_equal_an_independent_unbatched_evaluation(fx, legacy, capsys):
    rc, r = verify_json(capsys, fx / "draft", [fx / "samples"], "--target", fx / "target", "--batch-size", "5")
    m = next(w for w in r["wirings"] if w["is_manifest"])
    hits, total = independent_counts(fx, legacy, [0, 1, 2])
    assert m["positions"] == total and round(m["top1"] * total) == hits
    shifted = by_name(r)["stored order shifted by +1 = stored[1,2,3]"]
    hits, total = independent_counts(fx, legacy, [1, 2, 3])
    assert shifted["positions"] == total and round(shifted["top1"] * total) == hits


def test_draft_copy_of_the_embedding_gives_the_same_result(fx, capsys):
    _, with_target = verify_json(capsys, fx / "draft", [fx / "samples"], "--target", fx / "target")
    _, draft_only = verify_json(capsys, fx / "draft", [fx / "samples"])
    assert draft_only["embedding_source"].startswith("draft") and with_target["embedding_source"].startswith("target")
    strip = lambda r: [(w["name"], w["top1"], w["topk"]) for w in r["wirings"]]  # noqa: E731
    assert strip(with_target) == strip(draft_only)


def test_other_layouts_give_the_same_counts(fx, legacy, tmp_path, capsys):
    (tmp_path / "sf").mkdir()
    (tmp_path / "hs").mkdir()
    for i, p in enumerate(legacy):
        s = torch.load(p, weights_only=True)
        hs = s["hidden_states"]
        torch.save({"input_ids": s["input_ids"], "loss_mask": s["loss_mask"], "hidden_state": hs[3][None],
                    "aux_hidden_state": torch.cat(hs[:3], dim=-1)[None]}, tmp_path / "sf" / f"data_{i}.ckpt")
        save_file({"hidden_states": torch.stack(hs, dim=1).contiguous(), "token_ids": s["input_ids"]},
                  str(tmp_path / "hs" / f"hs_{i}.safetensors"))
    _, ref = verify_json(capsys, fx / "draft", legacy)
    rc, sf = verify_json(capsys, fx / "draft", [tmp_path / "sf"])
    m_ref = next(w for w in ref["wirings"] if w["is_manifest"])
    m_sf = next(w for w in sf["wirings"] if w["is_manifest"])
    assert rc == 0 and sf["layout"] == "specforge-ckpt" and sf["wirings"][0]["is_manifest"]
    assert (m_sf["positions"], m_sf["top1"], m_sf["topk"]) == (m_ref["positions"], m_ref["top1"], m_ref["topk"])
    assert any("does not name its stored layers" in n for n in sf["notes"])
    # No loss mask: every position is scored, prompt positions the draft never trained on included, so the
    # ranking depends on the fixture; the layout must still be read and wired the same way.
    _, hs = verify_json(capsys, fx / "draft", [tmp_path / "hs"])
    m_hs = next(w for w in hs["wirings"] if w["is_manifest"])
    assert hs["layout"] not in (ref["layout"], sf["layout"]) and hs["positions"] > ref["positions"]
    assert m_hs["sources"] == [src.replace("hidden_states[", "hidden_states[:, ") for src in m_ref["sources"]]


def _with_manifest(fx, tmp_path, ids):
    draft = Path(shutil.copytree(fx / "draft", tmp_path / f"draft_{'_'.join(map(str, ids))}"))
    m = read_manifest(draft)
    write_manifest(draft, Manifest(tuple(ids), m.target_architecture, m.target_num_hidden_layers, m.target_hidden_size,
                                   {"source": "manual"}))
    return draft


def test_a_wrong_manifest_fails(fx, tmp_path, capsys):
    stored = json.loads((fx / "samples" / "data_config.json").read_text())["hidden_states"]["layer_ids"]
    wrong = stored[1:]  # the stored order shifted by one: forgot the embedding, took the final layer
    rc, r = verify_json(capsys, _with_manifest(fx, tmp_path, wrong), [fx / "samples"])
    assert rc == 1 and "NOT best" in r["summary"]
    assert r["wirings"][0]["name"].startswith("training pipeline's fc input")
    missing = next(i for i in range(-1, 7) if i not in stored)
    ids = sorted(stored[:2] + [missing])
    rc, r = verify_json(capsys, _with_manifest(fx, tmp_path, ids), [fx / "samples"])
    # the data cannot decide (exit 3, ambiguous), not a mis-wiring
    assert rc == 3 and "cannot be built" in r["summary"] and f"layer {missing} is not stored" in r["summary"]


def test_embedding_check_is_exact(fx, legacy, tmp_path, capsys):
    out = tmp_path / "data"
    out.mkdir()
    for p in legacy:
        s = torch.load(p, weights_only=True)
        e = s["hidden_states"][0]
        e[0, 0] = torch.nextafter(e[0, 0], torch.tensor(float("inf")))  # one ulp off in one element
        torch.save(s, out / p.name)
    shutil.copy(fx / "samples" / "data_config.json", out)
    _, r = verify_json(capsys, fx / "draft", [out])
    assert r["embedding_check"]["embedding_tensor"] is None
    assert [t["files_equal"] for t in r["embedding_check"]["per_tensor"]] == [0, 0, 0, 0]
    assert any("NOT the embedding lookup" in n for n in r["notes"])
    # the manifest's layer -1 is then built from the embedding lookup itself
    assert next(w for w in r["wirings"] if w["is_manifest"])["sources"][0] == "embed(input_ids)"


def test_progress_bar_and_text_report(fx, capsys):
    rc, out, err = run(capsys, "verify", fx / "draft", "--data", fx / "samples", "--top-k", "3")
    assert rc == 0 and "verify:" in err and "16/16" in err
    assert "rank  top-1  top-3" in out and "verdict:     OK" in out and "draft positions/s" in out


def test_draft_without_its_embedding_asks_for_the_target(fx, tmp_path, capsys):
    draft = tmp_path / "draft"
    shutil.copytree(fx / "draft", draft)
    weights = load_file(str(draft / "model.safetensors"))
    del weights["embed_tokens.weight"]  # SGLang-format drafts often carry none: the target's is used
    save_file(weights, str(draft / "model.safetensors"))
    rc, _, err = run(capsys, "verify", draft, "--data", fx / "samples", "--no-progress")
    # the draft's files are named, and the fix is the option that supplies the embedding
    assert rc == 2 and err.count("\n") == 1 and str(draft / "config.json") in err and "--target" in err.split("fix:")[1]


def test_bad_data_files_are_named(fx, legacy, tmp_path, capsys):
    s = torch.load(legacy[0], weights_only=True)
    s["loss_mask"] = s["loss_mask"][:-1]
    bad = tmp_path / "data_bad.pt"
    torch.save(s, bad)
    rc, _, err = run(capsys, "verify", fx / "draft", "--data", legacy[1], bad, "--no-progress")
    assert rc == 2 and f"{bad}: field 'loss_mask': " in err
    other = tmp_path / "hs_0.safetensors"
    save_file({"hidden_states": torch.zeros(3, 4, 8), "token_ids": torch.zeros(3, dtype=torch.long)}, str(other))
    rc, _, err = run(capsys, "verify", fx / "draft", "--data", legacy[0], other, "--no-progress")
    assert rc == 2 and err.startswith(f"sglang-eagle3-capture: error: {other}: ") and "fix:" in err


def test_all_layer_data_ranks_stock_sglang_wiring_below_the_manifest(fx, tmp_path, capsys):
    """With every layer stored (regenerated from the fixture's target), stock SGLang's own feed is buildable."""
    info = json.loads((fx / "fixture.json").read_text())
    n = info["num_hidden_layers"]
    make_samples(fx / "target", tmp_path / "all", n=24, seed=11, layer_ids=list(range(-1, n)),
                 lang=Language(**info["language"]))
    rc, r = verify_json(capsys, fx / "draft", [tmp_path / "all"], "--max-combinations", "0")  # named wirings only
    assert rc == 0 and r["wirings"][0]["is_manifest"]
    cfg = json.loads((fx / "draft" / "config.json").read_text())
    # one row per group of consecutive releases that feed the same, e.g. "stock SGLang 0.5.11 .. 0.5.23 [...]"
    label = next(releases_label(v) for v, _ in stock_by_release(cfg, n, family="deepseek_v2") if "0.5.23" in v)
    stock = [w for w in r["wirings"] if w["name"].startswith(f"{label} [")]
    assert len(stock) == 1
    assert stock[0]["layer_ids"] == list(
        stock_sglang_capture(cfg, n, family="deepseek_v2", release="0.5.23").fed_layer_ids)
    m = r["wirings"][0]
    assert wide_lead(m["top1"], stock[0]["top1"], m["positions"])


def test_samples_of_another_hidden_size_are_refused_with_a_fix(fx, legacy, tmp_path, capsys):
    s = torch.load(legacy[0], weights_only=True)
    s["hidden_states"] = [torch.cat([h, h], dim=-1) for h in s["hidden_states"]]
    wide = tmp_path / "data_0.pt"
    torch.save(s, wide)
    rc, _, err = run(capsys, "verify", fx / "draft", "--data", wide, "--no-progress")
    assert rc == 2 and err.startswith(f"sglang-eagle3-capture: error: {wide}: ") and "fix:" in err


def test_a_missing_target_tensor_is_none_only_when_it_is_absent(tmp_path):
    """``missing_ok`` (the target head's lm_head lookup, which then falls back to the tied embedding) covers a tensor
    the checkpoint does not hold, never a checkpoint that does not read."""
    from sglang_eagle3_capture.core.errors import InputError
    from sglang_eagle3_capture.doctor.verify import load_target_tensor

    save_file({"model.embed_tokens.weight": torch.ones(4, 2)}, str(tmp_path / "model.safetensors"))
    assert load_target_tensor(tmp_path, "lm_head.weight", missing_ok=True) is None
    assert load_target_tensor(tmp_path, "embed_tokens.weight", missing_ok=True).shape == (4, 2)
    with pytest.raises(InputError) as e:
        load_target_tensor(tmp_path, "lm_head.weight")
    assert (e.value.file, e.value.field) == (str(tmp_path), "*lm_head.weight")
    (tmp_path / "model.safetensors").write_bytes(b"\x08" + b"\0" * 7 + b"not json")
    with pytest.raises(InputError) as e:
        load_target_tensor(tmp_path, "lm_head.weight", missing_ok=True)
    assert (e.value.file, e.value.field) == (str(tmp_path / "model.safetensors"), "<header>")
