"""The plugin through ``sglang.Engine``, installed as an entry point and never imported here, and the Engine harness
itself. One subprocess (one ``import sglang``) runs six Engines on the 6-layer tiny DeepSeek-V3 target, one after
another (support/engine_harness.py):

1. plain decoding: SGLang's real server stack on this CPU gives HF's greedy tokens;
2. EAGLE-3 (a 1-step chain) with a random draft that has no manifest, the plugin loaded: the plugin leaves stock
   wiring alone (no self-check), the tokens equal plain decoding's, and SGLang's accept-length figures add up;
3. the draft whose ``eagle3_manifest.json`` and marked ``eagle_config`` both say layer ids ``[5, -1, 1]``
   (non-ascending: the last layer's output first, then the embedding), TP 1: the scheduler process feeds the fc
   exactly that (the capture dump against HF), and the first-batch self-check passes (one INFO line);
4. the same at TP 2 over gloo: every rank, each in its own process, feeds the same tensor and passes;
5. the same at TP 2 with the manifest rewritten between the two ranks' reads (a start-up hook): refused at startup;
6. the same draft with the plugin excluded: stock SGLang reads ``[5, -1, 1]`` as loop indices and fails at the
   first forward (the plugin, not chance, is what serves 3 and 4).

The self-check's refusals (a sabotaged capture, before a server reports ready) are test_selfcheck_engine.py's; what
the self-check compares is tests/unit/test_selfcheck_unit.py's and tests/inprocess/test_selfcheck.py's.
"""

import json
import os
import re

import pytest
import torch
from safetensors.torch import load_file

from sglang_eagle3_capture.core import releases
from sglang_eagle3_capture.core.config_keys import CONVENTION_KEY, IDS_KEY, LAYER_ID_CONVENTION
from sglang_eagle3_capture.core.layer_ids import hidden_state_index
from sglang_eagle3_capture.core.manifest import MANIFEST_FILENAME, Manifest, write_manifest
from support import subprocess_env
from support.engine_harness import NO_PLUGINS, engine_run, greedy, run_engines
from support.hf_reference import hf_greedy, hf_layer_outputs
from support.servers import SELFCHECK_SITE
from support.tiny_models import build_tiny_draft
from support.tolerances import TOLERANCES

IDS = [5, -1, 1]  # 5: the last decoder layer's output, taken at the final norm
PROMPTS = [[5, 6, 7, 8, 9, 10], [11, 12, 13], [100, 3, 200, 45, 17]]
NEW_TOKENS = 8
PASSED = "eagle3-capture self-check passed"
RUNS = ("plain", "stock", "tp1", "tp2", "edited", "excluded")
EDITED = [-1, 1, 5]  # the same three layers in another fc order: a silent rewiring if one rank served it


# the runs only one test reads: started when that test is selected (-m release leaves both out)
ONLY_FOR = {"edited": "test_a_manifest_edited_between_the_ranks_reads_refuses_the_tp2_start",
            "excluded": "test_without_the_plugin_stock_sglang_misreads_the_ids"}


@pytest.fixture(scope="module")
def served(request, tiny_target_dir, tiny_draft_dir, tmp_path_factory):
    """{run name: (its result, its capture dump directory)} for the runs the selected tests read."""
    root = tmp_path_factory.mktemp("plugin_engine")
    ec = {"use_aux_hidden_state": True, IDS_KEY: IDS, CONVENTION_KEY: LAYER_ID_CONVENTION}
    draft = build_tiny_draft(root / "draft", target_dir=tiny_target_dir, num_aux=len(IDS),
                             config_overrides={"eagle_config": ec})
    write_manifest(draft, Manifest(tuple(IDS), "DeepseekV3ForCausalLM", 6, 64, {"source": "manual"}))
    # a draft declaring [5, -1, 1] by its manifest alone (no marked eagle_config ids the edit would contradict), which
    # the start-up hook rewrites between the two ranks' reads
    edited, markers = build_tiny_draft(root / "edited", target_dir=tiny_target_dir, num_aux=len(IDS)), root / "markers"
    write_manifest(edited, Manifest(tuple(IDS), "DeepseekV3ForCausalLM", 6, 64, {"source": "manual"}))
    markers.mkdir()
    site = os.pathsep.join([str(SELFCHECK_SITE), subprocess_env()["PYTHONPATH"]])
    dumps = {name: root / f"dump-{name}" for name in RUNS}
    info = {"log_level": "info"}
    described = dict(zip(RUNS, [
        engine_run(tiny_target_dir, PROMPTS, sampling_params=greedy(NEW_TOKENS)),
        engine_run(tiny_target_dir, PROMPTS, draft_path=tiny_draft_dir, sampling_params=greedy(NEW_TOKENS),
                   engine_kwargs=info),
        engine_run(tiny_target_dir, PROMPTS, draft_path=draft, sampling_params=greedy(NEW_TOKENS),
                   engine_kwargs=info, env={"SGLANG_EAGLE3_CAPTURE_DUMP": str(dumps["tp1"])}),
        engine_run(tiny_target_dir, PROMPTS, draft_path=draft, sampling_params=greedy(NEW_TOKENS),
                   engine_kwargs={**info, "tp_size": 2},  # SGLang's CPU path asserts ranks <= NUMA nodes otherwise
                   env={"SGLANG_EAGLE3_CAPTURE_DUMP": str(dumps["tp2"]), "SGLANG_CPU_OMP_THREADS_BIND": "0|1"}),
        engine_run(tiny_target_dir, PROMPTS, draft_path=edited, sampling_params=greedy(NEW_TOKENS), fails="start",
                   engine_kwargs={**info, "tp_size": 2},
                   env={"PYTHONPATH": site, "SGLANG_CPU_OMP_THREADS_BIND": "0|1",
                        "EAGLE3_TEST_EDIT_MANIFEST": json.dumps(EDITED), "EAGLE3_TEST_MARKERS": str(markers)}),
        engine_run(tiny_target_dir, PROMPTS, draft_path=draft, sampling_params=greedy(NEW_TOKENS), fails="serve",
                   env={"SGLANG_PLUGINS": NO_PLUGINS, "SGLANG_EAGLE3_CAPTURE_DUMP": str(dumps["excluded"])}),
    ]))
    selected = {item.originalname for item in request.session.items if item.module is request.module}
    names = [name for name in RUNS if name not in ONLY_FOR or ONLY_FOR[name] in selected]
    results = run_engines([described[name] for name in names], plugins="eagle3_capture", timeout=1800)
    out = {name: (result, dumps[name]) for name, result in zip(names, results)}
    if "edited" in out:
        out["edited"] = (out["edited"][0], edited / MANIFEST_FILENAME)
    return out


def _tokens(result):
    return [o["output_ids"] for o in result["outputs"]]


def _dumps(directory):
    """{tp_rank: [(tensors, metadata), ...]} in batch order."""
    out = {}
    for meta_path in sorted(directory.glob("*.json")):
        meta = json.loads(meta_path.read_text())
        out.setdefault(meta["tp_rank"], []).append((load_file(str(meta_path.with_suffix(".safetensors"))), meta))
    return out


def _passed(text: str) -> list[str]:
    return [line[line.index(PASSED):] for line in text.splitlines() if PASSED in line]


# The release-marked tests are the per-release proof .ci/run also runs against older supported releases.
@pytest.mark.release
def test_plain_decoding_gives_hf_greedy_tokens(served, hf_target):
    expected = hf_greedy(hf_target, PROMPTS, NEW_TOKENS)
    assert len(set(map(tuple, expected))) == len(PROMPTS)  # distinct continuations, so matching means something
    assert _tokens(served["plain"][0]) == expected


@pytest.mark.release
def test_without_a_manifest_stock_wiring_serves_unchecked(served):
    """The plugin loaded, a draft without manifest or marked ids: stock SGLang's own wiring (a WARNING says so), no
    self-check, the plain run's tokens, and SGLang's own accept-length figures consistent."""
    result, _ = served["stock"]
    assert _tokens(result) == _tokens(served["plain"][0])
    assert "running stock wiring" in result["log"] and _passed(result["log"]) == []
    total_tokens = total_verify = 0
    for out in result["outputs"]:
        meta = out["meta_info"]
        assert meta["completion_tokens"] == NEW_TOKENS and meta["spec_verify_ct"] >= 1  # speculation really ran
        assert meta["spec_accept_length"] == pytest.approx(meta["completion_tokens"] / meta["spec_verify_ct"])
        assert meta["spec_num_proposed_drafts"] == meta["spec_verify_ct"] * (2 - 1)  # num_draft_tokens - 1
        assert 0 <= meta["spec_num_correct_drafts"] <= meta["spec_num_proposed_drafts"]
        total_tokens += meta["completion_tokens"]
        total_verify += meta["spec_verify_ct"]
    # Server-wide: accepted tokens of verify steps / verify steps. The first token of each request comes from
    # prefill, not verify (scheduler_components/batch_result_processor.py); the harness sets decode_log_interval=1
    # so every step is folded into the lifetime counters.
    avg = result["server_info"]["internal_states"][0]["avg_spec_accept_length"]
    assert avg == pytest.approx((total_tokens - len(PROMPTS)) / total_verify)


def _check_rank(batches, hf_target):
    """The rank's dump: the plugin ran in a scheduler process and fed [5, -1, 1], -1 being the embedding."""
    hidden = hf_target.config.hidden_size
    emb = hf_target.model.embed_tokens
    for tensors, meta in batches:
        assert meta["process_title"].startswith("sglang::scheduler") and meta["pid"] != meta["ppid"]
        assert meta["layer_ids"] == IDS and meta["loop_indices"] == [0, 2] and meta["last_layer_at_final_norm"]
        assert meta["chunk_order"] == [2, 0, 1]
        assert meta["source"].endswith("eagle3_manifest.json: field 'layer_ids'")
        assert meta["sglang_version"] == releases.installed_sglang_version()
        chunks = tensors["aux_hidden_states"].split(hidden, dim=-1)
        with torch.no_grad():
            assert torch.equal(chunks[IDS.index(-1)], emb(tensors["input_ids"]))  # every batch: -1 is the embedding
    prefill, meta = batches[0]
    assert meta["forward_mode"] == "EXTEND"
    start = 0
    for prompt in PROMPTS:  # one prefill batch of the three prompts
        rows = slice(start, start + len(prompt))
        assert prefill["input_ids"][rows].tolist() == prompt
        hf = hf_layer_outputs(hf_target, prompt)  # [6]: the last layer's output before the final norm
        for chunk, layer_id in zip(prefill["aux_hidden_states"][rows].split(hidden, dim=-1), IDS):
            torch.testing.assert_close(chunk, hf[hidden_state_index(layer_id)], **TOLERANCES[torch.float32])
        start += len(prompt)


@pytest.mark.release
@pytest.mark.parametrize("run", ["tp1", "tp2"])
def test_every_rank_feeds_the_manifest_ids_and_passes_the_self_check(served, hf_target, run):
    result, dump = served[run]
    tp = {"tp1": 1, "tp2": 2}[run]
    assert _tokens(result) == _tokens(served["plain"][0])
    assert all(o["meta_info"]["spec_verify_ct"] > 0 for o in result["outputs"])  # EAGLE-3 really ran
    ranks = _dumps(dump)
    assert sorted(ranks) == list(range(tp))
    for rank in ranks:
        _check_rank(ranks[rank], hf_target)
    lines = _passed(result["log"])
    found = sorted(re.search(r"tp_rank (\d+), pid (\d+)", line).groups() for line in lines)
    assert [r for r, _ in found] == [str(r) for r in range(tp)]  # one line per rank
    assert len({pid for _, pid in found}) == tp  # each rank in its own process
    for line in lines:
        assert f"sglang {releases.installed_sglang_version()}; " in line and "hooks removed" in line
        for j, lid in enumerate(IDS):
            assert f"chunk {j} layer {lid}: max|diff| 0 (" in line
    if tp == 2:  # replicated residual stream: both ranks feed their drafts the same tensor
        assert torch.equal(ranks[0][0][0]["aux_hidden_states"], ranks[1][0][0]["aux_hidden_states"])


def test_a_manifest_edited_between_the_ranks_reads_refuses_the_tp2_start(served):
    """Each TP rank reads the manifest on its own; a start-up hook (support/selfcheck_site/) rewrites its layer ids
    after rank 0 read it and before rank 1 does: the ranks compare what they serve (core/ranks.py) and refuse the
    start before serving, naming the manifest and both ranks' ids (the comparison's cases, unchanged and removed
    among them, over SGLang's own TP group: test_ranks_agree_engine.py)."""
    result, manifest = served["edited"]
    log = result["log"]
    assert result["failed"] == "start"
    assert "TEST EDIT: TP rank 1 rewrote" in log, log[-4000:]
    line = next((x for x in log.splitlines() if "tensor-parallel ranks do not serve the same draft wiring" in x), None)
    assert line is not None, log[-4000:]
    assert f"{manifest}: field 'layer_ids': " in line and "DeploymentError" in log
    assert f"rank 0: layer ids {IDS}" in line and f"rank 1: layer ids {EDITED}" in line
    assert PASSED not in log


def test_without_the_plugin_stock_sglang_misreads_the_ids(served):
    """(Not release-marked: the message is 0.5.23's; on 0.5.17 the scheduler dies at the first forward too.)"""
    result, dump = served["excluded"]
    # stock: the first id 5 != 1, so [5, -1, 1] are loop indices; -1 is never reached (2 of 3 captured)
    assert "RuntimeError: captured 2 of 3 aux hidden states" in result["log"]
    assert not dump.exists() or not any(dump.iterdir())  # no plugin code ran
    assert "eagle3-capture:" not in result["log"]
