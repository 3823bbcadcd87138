"""The plugin through ``sglang.Engine`` (subprocesses), installed as an entry point, never imported here.

The main draft's ``eagle3_manifest.json`` and its marked ``eagle_config`` both say layer ids ``[5, -1, 1]`` on
the 6-layer target (non-ascending, the last layer's output first, then the embedding). With the plugin the
scheduler feeds the fc exactly that; without it, stock SGLang reads ``[5, -1, 1]`` as loop indices and fails
at the first forward. A second draft declares ``[-1, 1, 4]`` through its manifest only. The ``release`` tests
are the per-release proof .ci/run also runs against older supported SGLang releases.
"""

import json

import pytest
import torch
from safetensors.torch import load_file

from sglang_eagle3_capture.core import releases
from sglang_eagle3_capture.core.config_keys import CONVENTION_KEY, IDS_KEY, LAYER_ID_CONVENTION
from sglang_eagle3_capture.core.layer_ids import hidden_state_index
from sglang_eagle3_capture.core.manifest import Manifest, write_manifest
from support.engine_harness import NO_PLUGINS, EngineRunError, greedy, run_engine
from support.hf_reference import hf_greedy, hf_layer_outputs
from support.tiny_models import build_tiny_draft
from support.tolerances import TOLERANCES

IDS = [5, -1, 1]  # 5: the last decoder layer's output, taken at the final norm
PROMPT = [5, 6, 7, 8, 9, 10]
NEW_TOKENS = 4


@pytest.fixture(scope="module")
def draft(tiny_target_dir, tmp_path_factory):
    ec = {"use_aux_hidden_state": True, IDS_KEY: IDS, CONVENTION_KEY: LAYER_ID_CONVENTION}
    path = build_tiny_draft(tmp_path_factory.mktemp("draft") / "d", target_dir=tiny_target_dir, num_aux=len(IDS),
                            config_overrides={"eagle_config": ec})
    write_manifest(path, Manifest(tuple(IDS), "DeepseekV3ForCausalLM", 6, 64, {"source": "manual"}))
    return path


def _dumps(directory):
    """{tp_rank: [(tensors, metadata), ...]} in batch order."""
    out = {}
    for meta_path in sorted(directory.glob("*.json")):
        meta = json.loads(meta_path.read_text())
        out.setdefault(meta["tp_rank"], []).append((load_file(str(meta_path.with_suffix(".safetensors"))), meta))
    return out


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
    assert meta["forward_mode"] == "EXTEND" and prefill["input_ids"].tolist() == PROMPT
    hf = hf_layer_outputs(hf_target, PROMPT)  # [6]: the last layer's output before the final norm
    for chunk, layer_id in zip(prefill["aux_hidden_states"].split(hidden, dim=-1), IDS):
        torch.testing.assert_close(chunk, hf[hidden_state_index(layer_id)], **TOLERANCES[torch.float32])


@pytest.mark.release
def test_plugin_feeds_manifest_ids_from_the_scheduler(tiny_target_dir, draft, hf_target, tmp_path):
    dump = tmp_path / "dump"
    result = run_engine(tiny_target_dir, [PROMPT], draft_path=draft, sampling_params=greedy(NEW_TOKENS),
                        plugins="eagle3_capture", env={"SGLANG_EAGLE3_CAPTURE_DUMP": str(dump)})
    assert result["outputs"][0]["output_ids"] == hf_greedy(hf_target, [PROMPT], NEW_TOKENS)[0]
    assert result["outputs"][0]["meta_info"]["spec_verify_ct"] > 0  # EAGLE-3 really ran
    ranks = _dumps(dump)
    assert list(ranks) == [0]
    _check_rank(ranks[0], hf_target)


def test_without_the_plugin_stock_sglang_misreads_the_ids(tiny_target_dir, draft, tmp_path):
    dump = tmp_path / "dump"
    with pytest.raises(EngineRunError) as e:
        run_engine(tiny_target_dir, [PROMPT], draft_path=draft, sampling_params=greedy(NEW_TOKENS),
                   plugins=NO_PLUGINS, env={"SGLANG_EAGLE3_CAPTURE_DUMP": str(dump)})
    # stock 0.5.23: first id 5 != 1, so [5, -1, 1] are loop indices; -1 is never reached (2 of 3 captured)
    assert "RuntimeError: captured 2 of 3 aux hidden states" in str(e.value)
    assert not dump.exists() or not any(dump.iterdir())  # no plugin code ran


def test_tp2_on_cpu_every_rank_feeds_the_manifest_ids(tiny_target_dir, draft, hf_target, tmp_path):
    """tp_size=2 over gloo. Needs, besides the CPU runtime (whose B4 keeps PyNccl off CPU groups):
    SGLANG_CPU_OMP_THREADS_BIND (SGLang's CPU path asserts ranks <= NUMA nodes otherwise)."""
    dump = tmp_path / "dump"
    env = {"SGLANG_EAGLE3_CAPTURE_DUMP": str(dump), "SGLANG_CPU_OMP_THREADS_BIND": "0|1"}
    result = run_engine(tiny_target_dir, [PROMPT], draft_path=draft, sampling_params=greedy(NEW_TOKENS),
                        engine_kwargs={"tp_size": 2}, plugins="eagle3_capture", env=env)
    assert result["outputs"][0]["output_ids"] == hf_greedy(hf_target, [PROMPT], NEW_TOKENS)[0]
    ranks = _dumps(dump)
    assert sorted(ranks) == [0, 1]
    assert ranks[0][0][1]["pid"] != ranks[1][0][1]["pid"]
    for rank in (0, 1):
        _check_rank(ranks[rank], hf_target)
    # Replicated residual stream: both ranks feed their drafts the same tensor.
    assert torch.equal(ranks[0][0][0]["aux_hidden_states"], ranks[1][0][0]["aux_hidden_states"])


@pytest.mark.release
def test_a_manifest_with_the_embedding_feeds_exactly_hf_hidden_states(tiny_target_dir, hf_target, tmp_path):
    """Manifest [-1, 1, 4], config.json without ids: the fc gets HF hidden_states[0, 2, 5], the embedding bit-exact."""
    ids = [-1, 1, 4]
    d = build_tiny_draft(tmp_path / "d", target_dir=tiny_target_dir, num_aux=len(ids))
    write_manifest(d, Manifest(tuple(ids), "DeepseekV3ForCausalLM", 6, 64, {"source": "manual"}))
    dump = tmp_path / "dump"
    result = run_engine(tiny_target_dir, [PROMPT], draft_path=d, sampling_params=greedy(NEW_TOKENS),
                        plugins="eagle3_capture", env={"SGLANG_EAGLE3_CAPTURE_DUMP": str(dump)})
    assert result["outputs"][0]["output_ids"] == hf_greedy(hf_target, [PROMPT], NEW_TOKENS)[0]
    (batches,) = _dumps(dump).values()
    prefill, meta = batches[0]
    assert meta["layer_ids"] == ids and meta["forward_mode"] == "EXTEND" and prefill["input_ids"].tolist() == PROMPT
    hidden = hf_target.config.hidden_size
    hf = hf_layer_outputs(hf_target, PROMPT)
    chunks = prefill["aux_hidden_states"].split(hidden, dim=-1)
    assert torch.equal(chunks[0], hf[0])  # HF hidden_states[0]: the embedding, routed, not computed
    for chunk, index in zip(chunks[1:], (2, 5)):
        torch.testing.assert_close(chunk, hf[index], **TOLERANCES[torch.float32])
    diffs = [float((c - hf[i]).abs().max()) for c, i in zip(chunks, (0, 2, 5))]
    print(f"sglang {releases.installed_sglang_version()}: manifest {ids} -> HF hidden_states[0, 2, 5], max |diff| "
          f"per chunk {diffs}")
