"""The Engine harness (support/engine_harness.py) runs SGLang's real server stack (sglang.Engine, spawned scheduler)
on CPU.

One subprocess for the whole module runs two Engines in turn: plain, then EAGLE-3 (num_steps=1, topk=1,
2 draft tokens) with a random tiny draft; each serves the same prompts in one batch.
"""

import pytest

from support.engine_harness import engine_run, greedy, run_engines
from support.hf_reference import hf_greedy

PROMPTS = [[5, 6, 7, 8, 9, 10], [11, 12, 13], [100, 3, 200, 45, 17]]
MAX_NEW_TOKENS = 12


@pytest.fixture(scope="module")
def runs(tiny_target_dir, tiny_draft_dir):
    return run_engines([
        engine_run(tiny_target_dir, PROMPTS, sampling_params=greedy(MAX_NEW_TOKENS)),
        engine_run(tiny_target_dir, PROMPTS, draft_path=tiny_draft_dir, sampling_params=greedy(MAX_NEW_TOKENS)),
    ])


@pytest.fixture(scope="module")
def plain_run(runs):
    return runs[0]


@pytest.fixture(scope="module")
def eagle3_run(runs):
    return runs[1]


def _tokens(run):
    return [o["output_ids"] for o in run["outputs"]]


def test_engine_greedy_matches_hf_generate(plain_run, hf_target):
    expected = hf_greedy(hf_target, PROMPTS, MAX_NEW_TOKENS)
    assert len(set(map(tuple, expected))) == len(PROMPTS)  # distinct continuations, so matching means something
    assert _tokens(plain_run) == expected


def test_eagle3_run_matches_plain_run(eagle3_run, plain_run):
    assert _tokens(eagle3_run) == _tokens(plain_run)


def test_eagle3_reports_accept_length(eagle3_run):
    total_tokens = total_verify = 0
    for out in eagle3_run["outputs"]:
        meta = out["meta_info"]
        assert meta["completion_tokens"] == MAX_NEW_TOKENS
        # Speculation really ran: SGLang only reports these for requests that went through verify.
        assert meta["spec_verify_ct"] >= 1
        assert meta["spec_accept_length"] >= 1.0
        assert meta["spec_accept_length"] == pytest.approx(meta["completion_tokens"] / meta["spec_verify_ct"])
        assert meta["spec_num_proposed_drafts"] == meta["spec_verify_ct"] * (2 - 1)  # num_draft_tokens - 1
        assert 0 <= meta["spec_num_correct_drafts"] <= meta["spec_num_proposed_drafts"]
        total_tokens += meta["completion_tokens"]
        total_verify += meta["spec_verify_ct"]
    # Server-wide: accepted tokens of verify steps / verify steps, summed over requests. The first token of
    # each request comes from prefill, not verify (scheduler_components/batch_result_processor.py); the
    # harness sets decode_log_interval=1 so every step is folded into the lifetime counters.
    avg = eagle3_run["server_info"]["internal_states"][0]["avg_spec_accept_length"]
    assert avg >= 1.0
    assert avg == pytest.approx((total_tokens - len(PROMPTS)) / total_verify)
