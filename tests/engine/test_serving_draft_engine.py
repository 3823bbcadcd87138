"""The draft-head loader (core/sglang/draft.py) through sglang.Engine (subprocess, CPU runtime) with drafts produced
by ``convert`` from speculators' own checkpoints.

1. The target feeds the fc exactly the manifest's hidden states, in manifest order (the capture dump,
   ``SGLANG_EAGLE3_CAPTURE_DUMP``, compared with HF transformers' ``DeepseekV3ForCausalLM``), and a
   non-ascending manifest with the fc's column blocks permuted to match serves identically.
2. A draft the loader refuses stops the server at startup, naming the file and the tensor.
"""

import json
import shutil
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from sglang_eagle3_capture.core.layer_ids import hidden_state_index
from sglang_eagle3_capture.core.manifest import Manifest, read_manifest, write_manifest
from sglang_eagle3_capture.doctor.convert import convert
from support.draft_dirs import make_speculators_draft, rewrite_weights
from support.engine_harness import engine_run, run_engines
from support.hf_reference import hf_greedy, hf_hidden_states, load_hf
from support.tolerances import TOLERANCES

PLUGINS = "eagle3_capture"  # the package's entry point, exactly as installed
PROMPT = [5, 6, 7, 8, 9, 10, 11]
MAX_NEW = 6


@pytest.fixture(scope="module")
def converted(tmp_path_factory, tiny_target_dir):
    """A speculators 0.9.0 draft (HF indices [0, 3, 5] = layer ids [-1, 2, 4]) converted by ``convert``."""
    tmp = tmp_path_factory.mktemp("converted")
    src = make_speculators_draft(tmp / "spec", tiny_target_dir, [0, 3, 5], norm_before_fc=True,
                                 norm_before_residual=True)
    report = convert(src, tmp / "draft", target=tiny_target_dir)
    assert report.manifest.layer_ids == (-1, 2, 4)
    return tmp / "draft"


def _permuted(draft: Path, out: Path, order: list[int]) -> Path:
    """``draft`` with manifest ids and every per-chunk weight (fc columns, input_norm) in ``order``."""
    shutil.copytree(draft, out)
    m = read_manifest(draft)
    h, k = m.target_hidden_size, len(m.layer_ids)
    cols = torch.cat([torch.arange(j * h, (j + 1) * h) for j in order])
    rewrite_weights(out, lambda w: {**w, "fc.weight": w["fc.weight"][:, cols],
                                    "input_norm.weight": w["input_norm.weight"][cols]})
    assert sorted(order) == list(range(k))
    write_manifest(out, Manifest(tuple(m.layer_ids[j] for j in order), m.target_architecture,
                                 m.target_num_hidden_layers, m.target_hidden_size, m.provenance))
    return out


def _first_prefill(dump_dir: Path):
    metas = sorted(dump_dir.glob("*.json"))
    assert metas, f"no capture dump in {dump_dir}: the target-side patch did not run in the scheduler"
    first = json.loads(metas[0].read_text())
    return first, load_file(str(metas[0].with_suffix(".safetensors")))


@pytest.fixture(scope="module")
def served(tmp_path_factory, tiny_target_dir, converted):
    """The converted draft, its permuted twin and a draft the loader must refuse, three Engines in one subprocess:
    ``{name: (draft dir, its result, its dump directory)}``."""
    root = tmp_path_factory.mktemp("served")
    permuted = _permuted(converted, root / "permuted", [2, 0, 1])  # layer ids [4, -1, 2]
    bad = root / "bad"
    shutil.copytree(converted, bad)
    rewrite_weights(bad, lambda w: {**w, "midlayer.self_attn.q_norm.weight": torch.ones(16)})
    drafts = {"ascending": converted, "permuted": permuted, "bad": bad}
    dumps = {name: root / f"dump-{name}" for name in drafts}
    runs = [engine_run(tiny_target_dir, [PROMPT], draft_path=draft, fails="start" if name == "bad" else None,
                       sampling_params={"temperature": 0.0, "max_new_tokens": MAX_NEW, "ignore_eos": True},
                       env={"SGLANG_EAGLE3_CAPTURE_DUMP": str(dumps[name])})
            for name, draft in drafts.items()]
    results = run_engines(runs, plugins=PLUGINS, timeout=900)
    return {name: (drafts[name], result, dumps[name]) for name, result in zip(drafts, results)}


def test_converted_draft_gets_the_manifests_chunks_in_manifest_order(served, tiny_target_dir):
    runs = {name: (served[name][1], *_first_prefill(served[name][2])) for name in ("ascending", "permuted")}
    hf = load_hf(tiny_target_dir)
    hidden = hf_hidden_states(hf, PROMPT)
    embed = hf.get_input_embeddings().weight
    for name in ("ascending", "permuted"):
        draft = served[name][0]
        result, meta, tensors = runs[name]
        ids = list(read_manifest(draft).layer_ids)
        assert meta["layer_ids"] == ids
        assert tensors["input_ids"].tolist() == PROMPT
        chunks = tensors["aux_hidden_states"].chunk(len(ids), dim=-1)
        for layer_id, chunk in zip(ids, chunks):
            if layer_id == -1:  # the embedding output is a lookup: exact
                assert torch.equal(chunk, embed[torch.tensor(PROMPT)].to(chunk.dtype))
            else:
                torch.testing.assert_close(chunk, hidden[hidden_state_index(layer_id)], **TOLERANCES[torch.float32])
    # The permuted draft is the same function as the ascending one: identical chunks (moved), tokens and verify steps.
    (res_a, _, t_a), (res_p, _, t_p) = runs["ascending"], runs["permuted"]
    a, p = t_a["aux_hidden_states"].chunk(3, dim=-1), t_p["aux_hidden_states"].chunk(3, dim=-1)
    assert all(torch.equal(p[j], a[src]) for j, src in enumerate([2, 0, 1]))
    out_a, out_p = res_a["outputs"][0], res_p["outputs"][0]
    assert out_a["output_ids"] == out_p["output_ids"] == hf_greedy(hf, [PROMPT], MAX_NEW)[0]
    assert out_a["meta_info"]["spec_verify_ct"] == out_p["meta_info"]["spec_verify_ct"]


def test_server_refuses_a_draft_with_a_tensor_sglang_would_drop(served):
    bad, result, dump = served["bad"]
    assert result["failed"] == "start"  # refused at startup: no request was served
    assert f"{bad / 'model.safetensors'}: tensor 'midlayer.self_attn.q_norm.weight': not loaded" in result["log"]
