"""Llama, Qwen3, Qwen3-MoE, Gemma 4 (sliding/full attention alternating) and Qwen3.5 (Gated DeltaNet linear attention
and gated full attention alternating, its state pool committed after each verify) targets served by ``sglang.Engine``
with the plugin and an EAGLE-3 draft whose manifest is ``[-1, 1, 4]`` (6-layer tiny targets, support/tiny_models.py
``build_family_target``).

The five Engines run one after another in one subprocess (one ``import sglang``). The capture dump
(``SGLANG_EAGLE3_CAPTURE_DUMP``, written in each scheduler process) holds what the target handed the draft's fc;
its prefill batch (two prompts) must equal HF ``hidden_states[0, 2, 5]`` (``[0]`` bit-exact, the rest within the
fp32 tolerance).
Each Engine starting at all means the three runtime gates passed (resolution, configure, the first-batch self-check
that compares each fc chunk with the model's own modules); EAGLE-3 must then have verified drafts and produced HF's
greedy tokens.
"""

import json

import pytest
import torch
from safetensors.torch import load_file

from sglang_eagle3_capture import families, releases
from sglang_eagle3_capture.manifest import Manifest, write_manifest
from support.engine_harness import engine_run, greedy, run_engines
from support.hf_reference import assert_fc_input_is_hf, hf_greedy, load_hf
from support.tiny_models import FAMILY_TARGETS, build_family_target, build_tiny_draft

IDS = [-1, 1, 4]
HF_INDICES = [0, 2, 5]  # layer id k is HF hidden_states[k + 1]; -1 is the embedding
PROMPTS = [[5, 6, 7, 8, 9, 10], [11, 12, 13]]  # one prefill batch of both (9 rows)
NEW_TOKENS = 4
SERVED = ("llama", "qwen3", "qwen3_moe", "gemma4", "qwen3_5")


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    """{name: (target dir, its dump batches, its Engine result)} for the families, one subprocess."""
    root = tmp_path_factory.mktemp("families_engine")
    runs, targets = [], {}
    for name in SERVED:
        target = build_family_target(name, root / name / "target")
        arch = json.loads((target / "config.json").read_text())["architectures"][0]
        draft = build_tiny_draft(root / name / "draft", target_dir=target, num_aux=len(IDS))
        write_manifest(draft, Manifest(tuple(IDS), arch, 6, 64, {"source": "manual"}))
        targets[name] = (target, arch)
        runs.append(engine_run(target, PROMPTS, draft_path=draft, sampling_params=greedy(NEW_TOKENS),
                               engine_kwargs=FAMILY_TARGETS[name].server_args))
    dump = root / "dump"
    results = run_engines(runs, plugins="eagle3_capture", env={"SGLANG_EAGLE3_CAPTURE_DUMP": str(dump)}, timeout=1200)
    batches = {}
    for meta_path in sorted(dump.glob("*.json")):
        meta = json.loads(meta_path.read_text())
        batches.setdefault(meta["model_class"], []).append((load_file(str(meta_path.with_suffix(".safetensors"))),
                                                            meta))
    return {name: (targets[name][0], batches.get(targets[name][1], []), result)
            for name, result in zip(SERVED, results)}


@pytest.mark.parametrize("name", SERVED)
def test_engine_feeds_the_manifest_ids_as_hf_hidden_states(served, name):
    target, batches, result = served[name]
    hf = load_hf(target)
    assert [o["output_ids"] for o in result["outputs"]] == hf_greedy(hf, PROMPTS, NEW_TOKENS)
    assert all(o["meta_info"]["spec_verify_ct"] > 0 for o in result["outputs"])  # EAGLE-3 ran: the check passed
    assert batches, f"no capture dump from the {name} scheduler"
    prefill, meta = batches[0]
    family = families.family_of(meta["model_class"])
    assert meta["family"] == family.name and meta["layer_ids"] == IDS and meta["loop_indices"] == [0, 2, 5]
    assert meta["process_title"].startswith("sglang::scheduler") and meta["pid"] != meta["ppid"]
    assert meta["forward_mode"] == "EXTEND" and prefill["input_ids"].tolist() == [t for p in PROMPTS for t in p]
    diffs = assert_fc_input_is_hf(prefill["aux_hidden_states"], hf, PROMPTS, HF_INDICES)  # [0] torch.equal
    hidden = hf.config.hidden_size
    with torch.no_grad():
        emb = hf.model.embed_tokens
        for tensors, _ in batches:  # every batch (prefill, draft extend, verify): chunk 0 is the embedding
            assert torch.equal(tensors["aux_hidden_states"][:, :hidden], emb(tensors["input_ids"]))
    print(f"{name} ({meta['model_class']}) through sglang.Engine {releases.installed_sglang_version()}: manifest {IDS} "
          f"-> HF hidden_states{HF_INDICES}, max |diff| per chunk {diffs}")
