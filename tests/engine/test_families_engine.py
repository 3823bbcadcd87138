"""Llama, Qwen3, Qwen3-MoE, Gemma 4 and Gemma 3 (sliding/full attention alternating) and Qwen3.5 (Gated DeltaNet
linear attention and gated full attention alternating, its state pool committed after each verify) targets served by
``sglang.Engine`` with the plugin and an EAGLE-3 draft whose manifest is ``[-1, 1, 4]`` (6-layer tiny targets,
support/tiny_models.py ``build_family_target``). Gemma 3's window (4) is shorter than the prompts and the generated
sequences, so its sliding layers mask keys in prefill, decode and verify alike; stock SGLang would feed its draft
layer branch outputs (docs/families.md), the plugin feeds the residual streams HF's ``hidden_states`` hold.

The Engines (these families as the session selects them: Llama, Qwen3 and Qwen3-MoE only in make test-extended; and
Qwen3-VL with an image, its own test below) run one after another in one subprocess (one ``import sglang``). The
capture dump (``SGLANG_EAGLE3_CAPTURE_DUMP``, written in each scheduler process) holds what the target handed the
draft's fc; its prefill batch (two prompts) must equal HF ``hidden_states[0, 2, 5]`` (``[0]`` bit-exact, the rest
within the fp32 tolerance).
Each Engine starting at all means the three runtime gates passed (resolution, configure, the first-batch self-check
that compares each fc chunk with the model's own modules); EAGLE-3 must then have verified drafts and produced HF's
greedy tokens.
"""

import json

import pytest
import torch
from safetensors.torch import load_file

from sglang_eagle3_capture.core import families, releases
from sglang_eagle3_capture.core.manifest import Manifest, write_manifest
from sglang_eagle3_capture.doctor.manifest_write import write_draft_manifest
from support.engine_harness import engine_run, greedy, run_engines
from support.hf_reference import assert_fc_input_is_hf, decoder_stack, hf_greedy, load_hf
from support.tiny_models import FAMILY_TARGETS, VISION_TOKENS, build_family_target, build_tiny_draft
from support.tiny_vl import add_processor, hf_image_inputs, write_image
from support.tolerances import TOLERANCES

IDS = [-1, 1, 4]
HF_INDICES = [0, 2, 5]  # layer id k is HF hidden_states[k + 1]; -1 is the embedding
PROMPTS = [[5, 6, 7, 8, 9, 10], [11, 12, 13]]  # one prefill batch of both (9 rows)
NEW_TOKENS = 4
SERVED = ("llama", "qwen3", "qwen3_moe", "gemma4", "qwen3_5", "gemma3")
# Served in make test: what only the Engine path shows for them (sliding-window masks in decode and verify; the
# linear-attention state committed after each verify). Llama, Qwen3 and Qwen3-MoE add nothing there that their
# in-process proof (test_families_capture.py) and the Llama Engine runs (test_final_norm_engine.py, the tiny-llama
# fixture) do not show: make test-extended serves them.
EXTENDED = ("llama", "qwen3", "qwen3_moe")
# Qwen3-VL with an image: layer ids 0-2 are the deepstack layers (SGLang adds the vision features to their outputs).
VL_IDS = [-1, 0, 1, 2, 4]
IMAGE = VISION_TOKENS["<|image_pad|>"]
VL_PROMPTS = [[5, 6, VISION_TOKENS["<|vision_start|>"], IMAGE, VISION_TOKENS["<|vision_end|>"], 7, 8], [11, 12, 13]]


@pytest.fixture(scope="module")
def served(request, tmp_path_factory):
    """{name: (target dir, its dump batches, its Engine result)} for the selected families, one subprocess."""
    root = tmp_path_factory.mktemp("families_engine")
    runs, targets = [], {}
    chosen = {item.callspec.params.get("name") for item in request.session.items
              if item.module is request.module and getattr(item, "callspec", None) is not None}
    names = [name for name in SERVED if name in chosen]
    for name in names:
        target = build_family_target(name, root / name / "target")
        arch = json.loads((target / "config.json").read_text())["architectures"][0]
        draft = build_tiny_draft(root / name / "draft", target_dir=target, num_aux=len(IDS))
        write_manifest(draft, Manifest(tuple(IDS), arch, 6, 64, {"source": "manual"}))
        targets[name] = (target, arch)
        runs.append(engine_run(target, PROMPTS, draft_path=draft, sampling_params=greedy(NEW_TOKENS),
                               engine_kwargs=FAMILY_TARGETS[name].server_args))
    vl_target = add_processor(build_family_target("qwen3_vl", root / "qwen3_vl" / "target"))
    image = write_image(root / "qwen3_vl" / "image.png")
    vl_draft = build_tiny_draft(root / "qwen3_vl" / "draft", target_dir=vl_target, num_aux=len(VL_IDS))
    write_draft_manifest(vl_draft, VL_IDS, vl_target, fail_closed=True)  # 5 ids: config.json says so too
    runs.append(engine_run(vl_target, VL_PROMPTS, draft_path=vl_draft, sampling_params=greedy(NEW_TOKENS),
                           engine_kwargs=FAMILY_TARGETS["qwen3_vl"].server_args, image_data=[[image], []]))
    targets["qwen3_vl"] = (vl_target, "Qwen3VLForConditionalGeneration")
    dump = root / "dump"
    results = run_engines(runs, plugins="eagle3_capture", env={"SGLANG_EAGLE3_CAPTURE_DUMP": str(dump)}, timeout=1800)
    batches = {}
    for meta_path in sorted(dump.glob("*.json")):
        meta = json.loads(meta_path.read_text())
        batches.setdefault(meta["model_class"], []).append((load_file(str(meta_path.with_suffix(".safetensors"))),
                                                            meta))
    out = {name: (targets[name][0], batches.get(targets[name][1], []), result)
           for name, result in zip((*names, "qwen3_vl"), results)}
    out["qwen3_vl"] = (*out["qwen3_vl"], image)
    return out


@pytest.mark.parametrize("name", [pytest.param(n, marks=[pytest.mark.extended] if n in EXTENDED else [])
                                  for n in SERVED])
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
        emb = decoder_stack(hf).embed_tokens
        for tensors, _ in batches:  # every batch (prefill, draft extend, verify): chunk 0 is the embedding
            assert torch.equal(tensors["aux_hidden_states"][:, :hidden], emb(tensors["input_ids"]))
    print(f"{name} ({meta['model_class']}) through sglang.Engine {releases.installed_sglang_version()}: manifest {IDS} "
          f"-> HF hidden_states{HF_INDICES}, max |diff| per chunk {diffs}")


def test_engine_serves_qwen3_vl_with_an_image_and_feeds_layer_ids_after_the_deepstack_add(served):
    """Qwen3-VL through sglang.Engine, a real multimodal request (an image in the first prompt, SGLang's own processor
    and vision tower on CPU): HF's greedy tokens with the same image, the self-check passing (the Engine started and
    drafted), and the fc fed, for the deepstack layer ids 0-2, HF's ``hidden_states[k+1]`` *plus* the deepstack
    embedding on image tokens (HF records its state before ``_deepstack_process``, SGLang's capture sees it after
    ``add_to_output``: docs/families.md), HF's own ``hidden_states[k+1]`` on text tokens and past the deepstack
    layers."""
    import transformers

    target, batches, result, image = served["qwen3_vl"]
    hf = transformers.Qwen3VLForConditionalGeneration.from_pretrained(str(target), dtype=torch.float32).eval()
    inputs = hf_image_inputs(target, VL_PROMPTS[0], image)
    ids = inputs["input_ids"][0]
    visual = ids == IMAGE
    assert int(visual.sum()) == 6  # 64x96 pixels: 4x6 patches of 16, merged 2x2
    with torch.no_grad():
        hf_out = hf.generate(**inputs, do_sample=False, max_new_tokens=NEW_TOKENS, eos_token_id=None)
    assert result["outputs"][0]["output_ids"] == hf_out[0, len(ids):].tolist()  # the image reached the model
    assert result["outputs"][1]["output_ids"] == hf_greedy(hf, VL_PROMPTS[1:], NEW_TOKENS)[0]
    assert all(o["meta_info"]["spec_verify_ct"] > 0 for o in result["outputs"])
    prefill, meta = batches[0]
    assert meta["family"] == "qwen3_vl" and meta["layer_ids"] == VL_IDS and meta["forward_mode"] == "EXTEND"
    lm = decoder_stack(hf)
    after_add = {}  # HF's stream after layer k's deepstack add (what its layer k+1 receives)
    process = lm._deepstack_process

    def record(hidden, mask, embeds):
        out = process(hidden, mask, embeds)
        after_add[len(after_add)] = out[0].clone()
        return out

    lm._deepstack_process = record
    with torch.no_grad():
        states = [h[0] for h in hf(**inputs, output_hidden_states=True).hidden_states]
    del lm._deepstack_process
    assert sorted(after_add) == [0, 1, 2]  # three deepstack layers (vision_config.deepstack_visual_indexes)
    hidden, tol = hf.config.get_text_config().hidden_size, TOLERANCES[torch.float32]
    chunks = prefill["aux_hidden_states"][:len(ids)].split(hidden, dim=-1)  # rows: the image prompt, as batched
    diffs = {}
    for layer_id, chunk in zip(VL_IDS, chunks):
        before = states[layer_id + 1]
        if layer_id == -1:  # text tokens: the embedding lookup, bit for bit (image tokens: SGLang's vision tower)
            assert torch.equal(chunk[~visual], before[~visual])
        torch.testing.assert_close(chunk[~visual], before[~visual], **tol)  # text tokens: no deepstack
        expected = after_add.get(layer_id, before)
        torch.testing.assert_close(chunk[visual], expected[visual], **tol)  # image tokens: after the add
        if layer_id in after_add:  # the other reading (HF hidden_states, before the add) is far on image tokens
            assert not torch.allclose(chunk[visual], before[visual], **tol), layer_id
        diffs[layer_id] = (float((chunk[~visual] - before[~visual]).abs().max()),
                           float((chunk[visual] - expected[visual]).abs().max()),
                           float((expected - before)[visual].abs().max()))
    print(f"qwen3_vl through sglang.Engine {releases.installed_sglang_version()} with an image: layer id -> max |diff| "
          f"(text tokens vs HF hidden_states[k+1], image tokens vs SGLang's reading, |deepstack add|) {diffs}")
