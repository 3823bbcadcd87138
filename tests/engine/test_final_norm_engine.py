"""The post-norm final state through a real server (issue 20 section 1): a draft trained on HF ``hidden_states[N]``,
with manifest ``[-1, 1, "final_norm"]`` written by ``manifest write --fail-closed``, served by ``sglang.Engine`` on
CPU with the plugin, on a 6-layer tiny Llama target (support/tiny_models.py ``build_family_target``).

The Engine starting at all means the three runtime gates passed, the first-batch self-check among them (the
``final_norm`` chunk bit-equal to the final norm's own output, serving/selfcheck.py). The capture dump's prefill batch
must then be HF ``hidden_states[0, 2, N]``: ``[0]`` bit-exact, ``[2]`` and the post-norm ``[N]`` within the fp32
tolerance, and the last chunk not the pre-norm state (which is what ``[-1, 1, N-1]`` feeds:
tests/engine/test_families_capture.py, tests/inprocess/test_target_capture.py). The same draft is then served with a
multi-step tree (3 steps, topk 2, 6 draft tokens): the final-norm hook runs on every target forward, verify batches
included, and its per-forward check (serving/capture.py) must pass there too. Two Engine starts in one subprocess.
"""

import json

import torch
from safetensors.torch import load_file

from sglang_eagle3_capture import releases
from sglang_eagle3_capture.config_keys import IDS_KEY, is_fail_closed
from sglang_eagle3_capture.doctor.manifest_write import write_draft_manifest
from sglang_eagle3_capture.layer_ids import FINAL_NORM
from support.engine_harness import engine_run, greedy, run_engines
from support.hf_reference import hf_greedy, hf_hidden_states, hf_layer_outputs, load_hf
from support.tiny_models import FAMILY_TARGETS, build_family_target, build_tiny_draft
from support.tolerances import TOLERANCES

N = 6
IDS = [-1, 1, FINAL_NORM]
PROMPTS = [[5, 6, 7, 8, 9, 10], [11, 12, 13]]  # one prefill batch of both (9 rows)
NEW_TOKENS = 4
TOL = TOLERANCES[torch.float32]


def test_engine_feeds_the_post_norm_final_state_for_final_norm(tmp_path):
    target = build_family_target("llama", tmp_path / "target", num_hidden_layers=N)
    draft = build_tiny_draft(tmp_path / "draft", target_dir=target, num_aux=len(IDS))
    written = write_draft_manifest(draft, IDS, target, fail_closed=True)
    assert written.config_written  # no stock id list says final_norm: config.json gets the fail-closed object
    assert is_fail_closed(json.loads((draft / "config.json").read_text())["eagle_config"][IDS_KEY])
    dump = tmp_path / "dump"
    server = FAMILY_TARGETS["llama"].server_args
    tree = dict(speculative_num_steps=3, speculative_eagle_topk=2, speculative_num_draft_tokens=6)
    runs = [engine_run(target, PROMPTS, draft_path=draft, sampling_params=greedy(NEW_TOKENS), engine_kwargs=server),
            engine_run(target, PROMPTS, draft_path=draft, sampling_params=greedy(NEW_TOKENS),
                       engine_kwargs={**server, **tree})]
    results = run_engines(runs, plugins="eagle3_capture", env={"SGLANG_EAGLE3_CAPTURE_DUMP": str(dump)}, timeout=1200)
    hf = load_hf(target)
    expected = hf_greedy(hf, PROMPTS, NEW_TOKENS)
    for result in results:  # chain, then tree
        assert [o["output_ids"] for o in result["outputs"]] == expected
        assert all(o["meta_info"]["spec_verify_ct"] > 0 for o in result["outputs"])  # EAGLE-3 ran: the check passed
    result = results[0]

    prompt_ids = [t for p in PROMPTS for t in p]
    prefills = []
    for meta_path in sorted(dump.glob("*.json")):
        meta = json.loads(meta_path.read_text())
        assert meta["layer_ids"] == IDS and meta["final_norm_output"] and meta["loop_indices"] == [0, 2]
        tensors = load_file(str(meta_path.with_suffix(".safetensors")))
        if meta["forward_mode"] == "EXTEND" and tensors["input_ids"].tolist() == prompt_ids:
            prefills.append(tensors)
    assert len(prefills) == 2, "no prefill dump from one of the two schedulers"  # one per Engine
    hidden = hf.config.hidden_size
    post = [torch.cat(per) for per in zip(*(hf_hidden_states(hf, p) for p in PROMPTS))]  # rows as batched
    pre = [torch.cat(per) for per in zip(*(hf_layer_outputs(hf, p) for p in PROMPTS))]
    for prefill in prefills:
        embed, layer1, last = prefill["aux_hidden_states"].split(hidden, dim=-1)
        assert torch.equal(embed, post[0])
        torch.testing.assert_close(layer1, post[2], **TOL)
        torch.testing.assert_close(last, post[N], **TOL)  # HF hidden_states[N]: after the final norm
        assert not torch.allclose(last, pre[N], **TOL)  # not the pre-norm state layer id N-1 names
    diffs = [float((c - r).abs().max()) for c, r in zip((embed, layer1, last), (post[0], post[2], post[N]))]
    print(f"llama through sglang.Engine {releases.installed_sglang_version()}: manifest {IDS} -> HF hidden_states"
          f"[0, 2, {N}], max |diff| per chunk {diffs}; startup {result['startup_s']:.1f} s")
