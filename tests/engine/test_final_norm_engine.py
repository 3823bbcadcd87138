"""The post-norm final state through a real server (issue 20 section 1): a draft trained on HF ``hidden_states[N]``,
with manifest ``[-1, 1, "final_norm"]`` written by ``manifest write --fail-closed``, served by ``sglang.Engine`` on
CPU with the plugin, on a 6-layer tiny Llama target (support/tiny_models.py ``build_family_target``).

The Engine starting at all means the three runtime gates passed, the first-batch self-check among them (the
``final_norm`` chunk bit-equal to the final norm's own output, core/sglang/selfcheck.py). The capture dump's prefill
batch must then be HF ``hidden_states[0, 2, N]``: ``[0]`` bit-exact, ``[2]`` and the post-norm ``[N]`` within the fp32
tolerance, and the last chunk not the pre-norm state (which is what ``[-1, 1, N-1]`` feeds:
tests/engine/test_families_capture.py, tests/inprocess/test_target_capture.py).

Two Engine starts in one subprocess:
- a 3-step chain (topk 1, 4 draft tokens) at TP 2 (gloo; the CPU runtime's B4): every rank feeds the same tensor,
  and the verify batches (``TARGET_VERIFY``: the last committed token and the draft tokens, whose final-norm output
  the hook takes on every target forward, not only the checked first batch) are compared row by row with HF run on
  the request's committed tokens followed by that batch's tokens;
- a multi-step tree (3 steps, topk 2, 6 draft tokens) at TP 1: its per-forward check (core/capture.py) must pass
  there too, and its prefill is compared as above.
"""

import json

import torch
from safetensors.torch import load_file

from sglang_eagle3_capture.core import releases
from sglang_eagle3_capture.core.config_keys import IDS_KEY, is_fail_closed
from sglang_eagle3_capture.core.layer_ids import FINAL_NORM
from sglang_eagle3_capture.doctor.manifest_write import write_draft_manifest
from support.engine_harness import engine_run, greedy, run_engines
from support.hf_reference import hf_greedy, hf_hidden_states, hf_layer_outputs, load_hf
from support.tiny_models import FAMILY_TARGETS, build_family_target, build_tiny_draft
from support.tolerances import TOLERANCES

N = 6
IDS = [-1, 1, FINAL_NORM]
PROMPTS = [[5, 6, 7, 8, 9, 10], [11, 12, 13]]  # one prefill batch of both (9 rows)
NEW_TOKENS = 4
TOL = TOLERANCES[torch.float32]


CHAIN = dict(speculative_num_steps=3, speculative_eagle_topk=1, speculative_num_draft_tokens=4)
TREE = dict(speculative_num_steps=3, speculative_eagle_topk=2, speculative_num_draft_tokens=6)


def _batches(dump) -> list[tuple[dict, dict]]:
    out = []
    for meta_path in sorted(dump.glob("*.json")):
        meta = json.loads(meta_path.read_text())
        assert meta["layer_ids"] == IDS and meta["final_norm_output"] and meta["loop_indices"] == [0, 2]
        out.append((meta, load_file(str(meta_path.with_suffix(".safetensors")))))
    return out


def _verify_reference(hf, sequences, tensors, n_draft):
    """HF's ``hidden_states[0, 2, N]`` (post-norm) and the pre-norm ``[N]`` for every row of a chain verify batch: each
    request's rows are its last committed token and its draft tokens at consecutive positions; HF runs on the
    request's committed tokens (``sequences``: prompt + greedy output, which equal HF's) followed by those rows."""
    ids, pos = tensors["input_ids"].tolist(), tensors["positions"].tolist()
    assert len(ids) % n_draft == 0
    post, pre = [], []
    for start in range(0, len(ids), n_draft):
        rows, p0 = ids[start:start + n_draft], pos[start]
        assert pos[start:start + n_draft] == list(range(p0, p0 + n_draft))
        owners = [s for s in sequences if len(s) > p0 and s[p0] == rows[0]]
        assert len(owners) == 1, (p0, rows)  # the request whose committed token this is
        context = owners[0][:p0] + rows
        states, before = hf_hidden_states(hf, context), hf_layer_outputs(hf, context)
        post.append(torch.cat([states[0], states[2], states[N]], -1)[p0:])
        pre.append(before[N][p0:])
    return torch.cat(post), torch.cat(pre)


def test_engine_feeds_the_post_norm_final_state_for_final_norm(tmp_path):
    target = build_family_target("llama", tmp_path / "target", num_hidden_layers=N)
    draft = build_tiny_draft(tmp_path / "draft", target_dir=target, num_aux=len(IDS))
    written = write_draft_manifest(draft, IDS, target, fail_closed=True)
    assert written.config_written  # no stock id list says final_norm: config.json gets the fail-closed object
    assert is_fail_closed(json.loads((draft / "config.json").read_text())["eagle_config"][IDS_KEY])
    dump = tmp_path / "dump"
    server = FAMILY_TARGETS["llama"].server_args
    runs = [engine_run(target, PROMPTS, draft_path=draft, sampling_params=greedy(NEW_TOKENS),
                       engine_kwargs={**server, **CHAIN, "tp_size": 2}),
            engine_run(target, PROMPTS, draft_path=draft, sampling_params=greedy(NEW_TOKENS),
                       engine_kwargs={**server, **TREE})]
    env = {"SGLANG_EAGLE3_CAPTURE_DUMP": str(dump), "SGLANG_EAGLE3_CAPTURE_DUMP_MAX": "8",
           "SGLANG_CPU_OMP_THREADS_BIND": "0|1"}  # TP 2 on CPU: SGLang asserts ranks <= bound NUMA nodes otherwise
    results = run_engines(runs, plugins="eagle3_capture", env=env, timeout=1500)
    hf = load_hf(target)
    expected = hf_greedy(hf, PROMPTS, NEW_TOKENS)
    for result in results:  # chain at TP 2, then tree
        assert [o["output_ids"] for o in result["outputs"]] == expected
        assert all(o["meta_info"]["spec_verify_ct"] > 0 for o in result["outputs"])  # EAGLE-3 ran: the check passed

    hidden = hf.config.hidden_size
    prompt_ids = [t for p in PROMPTS for t in p]
    post = [torch.cat(per) for per in zip(*(hf_hidden_states(hf, p) for p in PROMPTS))]  # rows as batched
    pre = [torch.cat(per) for per in zip(*(hf_layer_outputs(hf, p) for p in PROMPTS))]
    batches = _batches(dump)
    prefills = [t for m, t in batches if m["forward_mode"] == "EXTEND" and t["input_ids"].tolist() == prompt_ids]
    assert len(prefills) == 3, "a prefill dump is missing"  # TP 2's two ranks, then the tree's one
    for prefill in prefills:
        embed, layer1, last = prefill["aux_hidden_states"].split(hidden, dim=-1)
        assert torch.equal(embed, post[0])
        torch.testing.assert_close(layer1, post[2], **TOL)
        torch.testing.assert_close(last, post[N], **TOL)  # HF hidden_states[N]: after the final norm
        assert not torch.allclose(last, pre[N], **TOL)  # not the pre-norm state layer id N-1 names
    diffs = {"prefill": [float((c - r).abs().max()) for c, r in zip(prefill["aux_hidden_states"].split(hidden, -1),
                                                                     (post[0], post[2], post[N]))]}

    # The chain's verify batches, per rank (the tree's are tree-masked: not referenced here). Its two schedulers
    # started first: their dump runs (start time, then a random token) sort before the tree's one scheduler.
    runs = sorted({(m["run"], m["pid"], m["tp_rank"]) for m, _ in batches})
    assert [r[2] for r in runs] in ([0, 1, 0], [1, 0, 0]), runs
    chain_ranks = {pid: rank for _, pid, rank in runs[:2]}
    sequences = [p + o for p, o in zip(PROMPTS, expected)]
    verify = {rank: [t for m, t in batches if m["pid"] == pid and m["forward_mode"] == "TARGET_VERIFY"]
              for pid, rank in chain_ranks.items()}
    assert verify[0] and len(verify[0]) == len(verify[1]), {r: len(v) for r, v in verify.items()}
    worst = [0.0, 0.0, 0.0]
    for mine, other in zip(verify[0], verify[1]):
        assert torch.equal(mine["aux_hidden_states"], other["aux_hidden_states"])  # replicated residual stream
        reference, before = _verify_reference(hf, sequences, mine, CHAIN["speculative_num_draft_tokens"])
        got = mine["aux_hidden_states"]
        assert torch.equal(got[:, :hidden], reference[:, :hidden])  # the embedding of the verified tokens
        torch.testing.assert_close(got, reference, **TOL)
        assert not torch.allclose(got[:, 2 * hidden:], before, **TOL)  # post-norm in verify batches too
        worst = [max(w, float((g - r).abs().max())) for w, g, r in zip(worst, got.split(hidden, -1),
                                                                       reference.split(hidden, -1))]
    diffs["verify"] = worst
    print(f"llama through sglang.Engine {releases.installed_sglang_version()}: manifest {IDS} -> HF hidden_states"
          f"[0, 2, {N}], max |diff| per chunk {diffs} ({len(verify[0])} verify batches per rank at TP 2); "
          f"startup {results[0]['startup_s']:.1f} s (TP 2 chain), {results[1]['startup_s']:.1f} s (tree)")
