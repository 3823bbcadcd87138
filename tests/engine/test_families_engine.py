"""Llama, Qwen3, Qwen3-MoE, Gemma 4 and Gemma 3 (sliding/full attention alternating) targets served by
``sglang.Engine`` with the plugin and an EAGLE-3 draft whose manifest is ``[-1, 1, 4]`` (6-layer tiny targets,
support/tiny_models.py ``build_family_target``). Gemma 3's window (4) is shorter than the prompts and the generated
sequences, so its sliding layers mask keys in prefill, decode and verify alike; stock SGLang would feed its draft
layer branch outputs (docs/families.md), the plugin feeds the residual streams HF's ``hidden_states`` hold.

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
from support.hf_reference import hf_greedy, hf_layer_outputs, load_hf
from support.tiny_models import FAMILY_TARGETS, build_family_target, build_tiny_draft
from support.tolerances import TOLERANCES

IDS = [-1, 1, 4]
HF_INDICES = [0, 2, 5]  # layer id k is HF hidden_states[k + 1]; -1 is the embedding
PROMPTS = [[5, 6, 7, 8, 9, 10], [11, 12, 13]]  # one prefill batch of both (9 rows)
NEW_TOKENS = 4
SERVED = ("llama", "qwen3", "qwen3_moe", "gemma4", "gemma3")


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
    hidden = hf.config.hidden_size
    reference = [torch.cat(per) for per in zip(*(hf_layer_outputs(hf, p) for p in PROMPTS))]  # rows as batched
    chunks = prefill["aux_hidden_states"].split(hidden, dim=-1)
    assert len(chunks) == len(IDS)
    assert torch.equal(chunks[0], reference[0])  # HF hidden_states[0]: the embedding, routed, not computed
    for chunk, index in zip(chunks[1:], HF_INDICES[1:]):
        torch.testing.assert_close(chunk, reference[index], **TOLERANCES[torch.float32])
        assert not torch.allclose(chunk, reference[index - 1], **TOLERANCES[torch.float32])  # not off by one
    with torch.no_grad():
        emb = hf.model.embed_tokens
        for tensors, _ in batches:  # every batch (prefill, draft extend, verify): chunk 0 is the embedding
            assert torch.equal(tensors["aux_hidden_states"][:, :hidden], emb(tensors["input_ids"]))
    diffs = [float((c - reference[i]).abs().max()) for c, i in zip(chunks, HF_INDICES)]
    print(f"{name} ({meta['model_class']}) through sglang.Engine {releases.installed_sglang_version()}: manifest {IDS} "
          f"-> HF hidden_states{HF_INDICES}, max |diff| per chunk {diffs}")
