"""Kimi-K2.5, the deployment this package was built for, through ``sglang.Engine`` on CPU: SGLang's
``KimiK25ForConditionalGeneration`` (models/kimi_k25.py: a vision tower and projector around ``DeepseekV3ForCausalLM``,
the decoder config under ``text_config``) serving each of SGLang's two EAGLE-3 draft classes with the plugin: the
Llama draft (``LlamaForCausalLMEagle3``) and SGLang's Kimi MLA draft (``Eagle3DeepseekV2ForCausalLM``,
models/kimi_k25_eagle3.py, chosen by its ``architectures[0]``), each carrying the manifest ``[-1, 1, 4]`` for the
6-layer tiny target (support/kimi_k25.py; drafts from support/draft_dirs.py).

Both Engines run one after another in one subprocess (one ``import sglang``). The capture dump
(``SGLANG_EAGLE3_CAPTURE_DUMP``, written in each scheduler) holds what the target handed the draft's fc; its prefill
batch (both prompts) must equal transformers' ``Kimi_K25ForConditionalGeneration`` ``hidden_states[0, 2, 5]`` on the
same text (its language model's: ``[0]`` bit-exact, the rest within the fp32 tolerance and not the neighbouring
index). Each Engine starting means the resolution, configure and first-batch self-check gates passed; the INFO line
of the self-check must be in the log once per Engine, every chunk exact against the model's own modules. EAGLE-3
must have verified drafts and produced HF's greedy tokens.

On this CPU two cpu_runtime patches stand in (B14: no multimodal front end for a checkpoint that ships no processor,
served on token ids; B15: the MLA draft's unconditional ``torch.cuda.synchronize`` in ``set_embed``).
"""

import json
from collections import defaultdict

import pytest
import torch
from safetensors.torch import load_file

from sglang_eagle3_capture.core import releases
from sglang_eagle3_capture.core.manifest import MANIFEST_FILENAME
from support.draft_dirs import make_draft, make_mla_draft
from support.engine_harness import engine_run, greedy, run_engines
from support.hf_reference import assert_fc_input_is_hf, hf_greedy
from support.kimi_k25 import build_tiny_kimi_k25, load_hf_kimi_k25

IDS = [-1, 1, 4]
HF_INDICES = [0, 2, 5]  # layer id k is HF hidden_states[k + 1]; -1 is the embedding
PROMPTS = [[5, 6, 7, 8, 9, 10], [11, 12, 13]]  # one prefill batch of both (9 rows)
NEW_TOKENS = 4
DRAFTS = {"llama": make_draft, "mla": make_mla_draft}  # LlamaForCausalLMEagle3, Eagle3DeepseekV2ForCausalLM
PASSED = "eagle3-capture self-check passed"


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    """The target dir, the Engine log, and {draft kind: (its dump batches, its Engine result)}, one subprocess."""
    root = tmp_path_factory.mktemp("kimi_k25_engine")
    target = build_tiny_kimi_k25(root / "target")
    runs = [engine_run(target, PROMPTS, draft_path=make(root / kind, target, IDS), sampling_params=greedy(NEW_TOKENS),
                       engine_kwargs={"log_level": "info"})
            for kind, make in DRAFTS.items()]
    dump, log = root / "dump", root / "engine.log"
    results = run_engines(runs, plugins="eagle3_capture", env={"SGLANG_EAGLE3_CAPTURE_DUMP": str(dump)}, timeout=1200,
                          keep_log=log)
    batches = defaultdict(list)  # by draft: the dump's "source" names the manifest the scheduler read
    for meta_path in sorted(dump.glob("*.json")):
        meta = json.loads(meta_path.read_text())
        kind = next(k for k in DRAFTS if meta["source"].startswith(str(root / k / MANIFEST_FILENAME)))
        batches[kind].append((load_file(str(meta_path.with_suffix(".safetensors"))), meta))
    return target, log.read_text(errors="replace"), {k: (batches[k], r) for k, r in zip(DRAFTS, results)}


@pytest.fixture(scope="module")
def hf(served):
    return load_hf_kimi_k25(served[0])


def test_each_engine_passed_the_first_batch_self_check(served):
    lines = [line[line.index(PASSED):] for line in served[1].splitlines() if PASSED in line]
    assert len(lines) == len(DRAFTS), lines  # one target process per Engine, each checked once
    for line in lines:
        assert all(f"chunk {j} layer {lid}: max|diff| 0 (" in line for j, lid in enumerate(IDS)), line


@pytest.mark.parametrize("kind", DRAFTS)
def test_engine_feeds_the_manifest_ids_as_hf_hidden_states(served, hf, kind):
    (batches, result) = served[2][kind]
    assert [o["output_ids"] for o in result["outputs"]] == hf_greedy(hf, PROMPTS, NEW_TOKENS)
    assert all(o["meta_info"]["spec_verify_ct"] > 0 for o in result["outputs"])  # EAGLE-3 verified drafts
    assert batches, f"no capture dump from the scheduler serving the {kind} draft"
    prefill, meta = batches[0]
    assert meta["family"] == "deepseek_v2" and meta["layer_ids"] == IDS and meta["loop_indices"] == HF_INDICES
    assert meta["process_title"].startswith("sglang::scheduler") and meta["pid"] != meta["ppid"]
    # Kimi's forward hands its decoder input_embeds only: the dump takes the batch's ids (capture.batch_token_ids)
    assert meta["forward_mode"] == "EXTEND" and prefill["input_ids"].tolist() == [t for p in PROMPTS for t in p]
    diffs = assert_fc_input_is_hf(prefill["aux_hidden_states"], hf, PROMPTS, HF_INDICES)  # [0] torch.equal
    hidden = hf.config.text_config.hidden_size
    with torch.no_grad():
        emb = hf.get_input_embeddings()
        for tensors, _ in batches:  # every batch (prefill, then verify): chunk 0 is the embedding of its tokens
            assert torch.equal(tensors["aux_hidden_states"][:, :hidden], emb(tensors["input_ids"]))
    print(f"Kimi-K2.5 ({meta['model_class']}) + {kind} draft through sglang.Engine "
          f"{releases.installed_sglang_version()}: manifest {IDS} -> HF hidden_states{HF_INDICES}, "
          f"max |diff| per chunk {diffs}, greedy tokens equal HF's, spec_verify_ct "
          f"{[o['meta_info']['spec_verify_ct'] for o in result['outputs']]}")
