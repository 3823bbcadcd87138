"""The vLLM plugin through real vLLM 0.32 on CPU (issue 27): with ``eagle3_manifest.json`` in the draft directory, vLLM
feeds the draft's fc exactly the manifest's hidden states in fc order, the first-batch self-check passes in vLLM's
worker, and a capture sabotaged after configuration, a manifest whose id count does not fit the fc, and a runner the
plugin did not wire are refused; the acceptance alarm reads vLLM's own counters.

One vLLM worker process runs every case one ``LLM`` after another (tests/support/vllm_harness.py), each start proving
something no other does: a Llama tiny target (fp32) with manifests ``[-1, 1, 4]``, ``[-1, 1, "final_norm"]`` and
``[4, -1, 1]`` (vLLM itself sorts ids: only the plugin can feed this order), a Qwen3 one with ``[4, -1,
"final_norm"]`` (all three properties in one start), DeepSeek-V3 (bf16) with ``[-1, 1, 4]``
(vLLM's inline capture cannot take the embedding there) and the same engine without speculation, the three refusals
and the alarm. What the fc received is read by a test-only spy on the draft's ``combine_hidden_states``
(tests/support/vllm_site); the reference is HF transformers' model of the same checkpoint.
"""

from __future__ import annotations

import json
from dataclasses import replace

import pytest
import torch

from sglang_eagle3_capture.core.layer_ids import EMBEDDING_LAYER_ID
from sglang_eagle3_capture.core.manifest import Manifest, find_manifest, write_manifest
from sglang_eagle3_capture.doctor.manifest_write import write_draft_manifest
from support.hf_reference import hf_greedy, load_hf
from support.tiny_models import VLLM_MLA_DIMS, build_tiny_draft, build_tiny_target
from support.tolerances import VLLM_TOLERANCES
from support.vllm_harness import (
    FAMILIES,
    MANIFESTS,
    NUM_LAYERS,
    PLUGIN,
    PROMPT,
    build_cases,
    hf_state,
    run_vllm,
    vllm_run,
)

NEW_TOKENS = 8
# Llama with each manifest the issue names; Qwen3 with one manifest that holds all three properties (the embedding, the
# post-norm state, an order vLLM would sort): each wiring property once per family, a start each.
CASES = [("llama", "ascending"), ("llama", "final-norm"), ("llama", "not-ascending"), ("qwen3", "mixed")]
assert {f for f, _ in CASES} == set(FAMILIES)
# vLLM's CPU build serves an MLA target beside an EAGLE-3 draft only where the CPU has AMX (AMX_MLA): without it the
# target takes CPU_MLA (KV block size 16 only) and the Llama draft CPU_ATTN (multiples of 32), so no block size fits
# both and the engine does not start (vllm/platforms/cpu.py:151-176, v1/worker/utils.py:555; seen on an AMD EPYC).
AMX = torch.cpu._is_amx_tile_supported()


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    root = tmp_path_factory.mktemp("vllm-plugin")
    targets, drafts = build_cases(root, CASES)
    runs = [vllm_run(f"{f}/{c}", targets[f], drafts[(f, c)], prompts=[PROMPT], max_tokens=NEW_TOKENS,
                     env={"SGLANG_EAGLE3_CAPTURE_ALARM_WINDOW": "4"} if (f, c) == ("llama", "ascending") else None)
            for f, c in CASES]
    # DeepSeek-V3: vLLM captures inline and fails at index 0, so the plugin takes the embedding from embed_input_ids
    if AMX:
        deepseek = build_tiny_target(root / "deepseek", num_hidden_layers=NUM_LAYERS, **VLLM_MLA_DIMS)
        ds_draft = build_tiny_draft(root / "deepseek-ascending", target_dir=deepseek, num_aux=3)
        write_draft_manifest(ds_draft, MANIFESTS["ascending"], deepseek, fail_closed=True)
        runs.append(vllm_run("deepseek/ascending", deepseek, ds_draft, prompts=[PROMPT], max_tokens=NEW_TOKENS,
                             llm_kwargs={"dtype": "bfloat16"}))
        runs.append(vllm_run("deepseek/plain", deepseek, None, prompts=[PROMPT], max_tokens=NEW_TOKENS,
                             llm_kwargs={"dtype": "bfloat16"}))  # bf16 greedy drifts from HF's: vLLM's own is the bar
        targets["deepseek"] = deepseek
    # the acceptance alarm from vLLM's own counters: the Llama [-1, 1, 4] draft's manifest claims position-0
    # acceptance 0.95 for the chain served (a random draft accepts about nothing), a window of 4 verify steps
    alarmed = drafts[("llama", "ascending")]
    manifest = find_manifest(alarmed)
    write_manifest(alarmed, replace(manifest, expected={
        "acceptance": [{"steps": 2, "topk": 1, "draft_tokens": 3, "per_position": [0.95, 0.9]}],
        "provenance": {"layer_ids": list(manifest.layer_ids)}}))
    # the self-check's own proof: the same deployment, its plan's first two fc chunks swapped after configuration
    runs.append(vllm_run("sabotage", targets["llama"], drafts[("llama", "ascending")], prompts=[PROMPT],
                         max_tokens=NEW_TOKENS, env={"EAGLE3_TEST_SABOTAGE": "permute"}))
    # the gate's own proof: the plugin loaded, but the runner it patches is not wired (its patch reverted)
    runs.append(vllm_run("unwired", targets["llama"], drafts[("llama", "ascending")], prompts=[PROMPT],
                         max_tokens=NEW_TOKENS, env={"EAGLE3_TEST_SABOTAGE": "unwire"}))
    # a manifest of two ids for an fc trained on three (config.json names the two as stock vLLM would read them)
    short = build_tiny_draft(root / "short", target_dir=targets["llama"], num_aux=3)
    write_manifest(short, Manifest((-1, 1), "LlamaForCausalLM", NUM_LAYERS, 256, {"source": "manual"}))
    config = json.loads((short / "config.json").read_text())
    (short / "config.json").write_text(json.dumps({**config, "eagle_aux_hidden_state_layer_ids": [0, 2]}))
    runs.append(vllm_run("short", targets["llama"], short, prompts=[PROMPT], max_tokens=NEW_TOKENS))
    results = {r["name"]: r for r in run_vllm(runs, plugins=PLUGIN)}
    return targets, drafts, short, results


@pytest.mark.parametrize("family,case", CASES)
def test_the_fc_is_fed_the_manifest_states_and_greedy_tokens_equal_hf(served, family, case):
    targets, drafts, _, results = served
    r = results[f"{family}/{case}"]
    assert r["ok"], r["error"] + r["log"][-3000:]
    hf = load_hf(targets[family])
    assert r["outputs"] == hf_greedy(hf, [PROMPT], NEW_TOKENS)
    fc = r["spy"][0]  # the draft's first fc input: the prompt's tokens, as the target computed them
    ids = MANIFESTS[case]
    hidden = fc.shape[-1] // len(ids)
    assert fc.shape == (len(PROMPT), len(ids) * hidden)
    for chunk, layer_id in zip(fc.split(hidden, dim=-1), ids):
        want = hf_state(hf, layer_id, NUM_LAYERS)
        if layer_id == EMBEDDING_LAYER_ID:
            assert torch.equal(chunk, want)
        else:
            torch.testing.assert_close(chunk, want, **VLLM_TOLERANCES[torch.float32])
    assert "eagle3-capture self-check passed" in r["log"]
    assert r["metrics"]["vllm:spec_decode_num_drafts"] > 0  # EAGLE-3 really ran


def test_a_capture_permuted_after_configuration_is_refused_by_the_self_check(served):
    _, drafts, _, results = served
    r = results["sabotage"]
    assert "TEST SABOTAGE permute" in r["log"]
    assert not r["ok"] and r["outputs"] is None
    (error,) = r["errors"]
    # field None: the self-check's refusal (the startup gate's, below, names field 'layer_ids')
    assert (error["type"], error["file"], error["field"]) == (
        "DeploymentError", str(find_manifest(drafts[("llama", "ascending")]).path), None)


def test_a_manifest_whose_id_count_does_not_fit_the_fc_is_refused_at_startup(served):
    *_, short, results = served
    r = results["short"]
    assert not r["ok"] and r.get("startup_s") is None  # LLM() itself failed: at startup, not at the first request
    (error,) = r["errors"]
    assert (error["type"], error["file"], error["field"]) == ("InputError", str(short / "eagle3_manifest.json"),
                                                              "layer_ids")


def test_a_runner_the_plugin_did_not_wire_is_refused_at_startup_by_the_gate(served):
    _, drafts, _, results = served
    r = results["unwired"]
    assert "TEST SABOTAGE unwire" in r["log"]
    assert not r["ok"] and r.get("startup_s") is None
    (error,) = r["errors"]
    assert (error["type"], error["file"], error["field"]) == (
        "DeploymentError", str(find_manifest(drafts[("llama", "ascending")]).path), "layer_ids")


@pytest.mark.skipif(not AMX, reason="vLLM's CPU build cannot start an MLA target beside an EAGLE-3 draft without AMX "
                    "(CPU_MLA's KV block size 16 and CPU_ATTN's multiples of 32 have none in common)")
def test_deepseek_gets_the_embedding_vllm_cannot_capture_and_the_manifest_layers(served):
    """bf16 (the AMX MLA backend's only dtype; tests/support/tiny_models.VLLM_MLA_DIMS): the embedding is routed, so
    bit-equal to HF's; the layers go through different bf16 kernels (MoE, MLA), so each chunk is shown to be its own
    layer's state: nearer HF's hidden state at its id than any other layer's. The self-check compares each chunk with
    the model's own modules in vLLM, bit for bit. Greedy tokens: vLLM's own without speculation (in bf16 HF's own
    greedy run drifts from vLLM's after 7 tokens on this target, measured: the kernels, not the wiring)."""
    targets, _, _, results = served
    r = results["deepseek/ascending"]
    assert r["ok"], (r["error"] or "") + r["log"][-3000:]
    assert "+ the embedding (embed_input_ids)" in r["log"]  # vLLM's own index 0 would raise a TypeError there
    assert "eagle3-capture self-check passed" in r["log"]
    plain = results["deepseek/plain"]
    assert plain["ok"] and r["outputs"] == plain["outputs"]  # EAGLE-3 changed no greedy token of the same engine
    hf = load_hf(targets["deepseek"]).to(torch.bfloat16)
    fc = r["spy"][0]
    states = [hf_state(hf, i, NUM_LAYERS).float() for i in range(-1, NUM_LAYERS)]  # layer ids -1 .. N-1
    ids = MANIFESTS["ascending"]
    for chunk, layer_id in zip(fc.split(fc.shape[-1] // len(ids), dim=-1), ids):
        if layer_id == EMBEDDING_LAYER_ID:
            assert torch.equal(chunk, hf_state(hf, layer_id, NUM_LAYERS))
        distance = [float((chunk.float() - s).norm() / s.norm()) for s in states]
        assert distance.index(min(distance)) == layer_id + 1, distance


def test_the_acceptance_alarm_fires_from_vllms_own_counters(served):
    """The Llama [-1, 1, 4] run: its manifest's expected block arms the alarm, vLLM's own counters fire it; the other
    runs, without one, arm none and say so."""
    *_, results = served
    r = results["llama/ascending"]
    assert r["ok"], (r["error"] or "") + r["log"][-3000:]
    assert r["metrics"]["vllm:spec_decode_num_drafts"] >= 4  # a full window of verify steps
    assert "acceptance alarm armed: position-0 acceptance expected 0.950" in r["log"]
    assert "ACCEPTANCE ALARM" in r["log"]
    quiet = results["llama/final-norm"]  # no expected block: no alarm, and said so
    assert "no acceptance alarm" in quiet["log"] and "ACCEPTANCE ALARM" not in quiet["log"]
