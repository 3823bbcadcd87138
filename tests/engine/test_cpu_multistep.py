"""Multi-step and tree EAGLE-3 drafting on CPU (cpu_runtime B7: multi-step draft decode backend for torch_native,
B8: tree-masked target verify) through ``sglang.Engine``, on both bundled fixtures, with the plugin.

Per fixture one subprocess runs a plain Engine, then one Engine per speculative setting on the same prompts: greedy
output with speculation must equal greedy output without it, token for token (that is what makes the CPU runtime
trustworthy); SGLang's own server_info must report the setting it ran; and with the plugin feeding the fixture
draft the layers it was trained on, some verify must accept more than one draft token (accept length > 2), which
only a multi-step draft can do. (1, 1, 2) is test_engine_harness.py's; the full grid (1,1,2) (3,1,4) (5,1,6) (3,2,6)
(4,4,16) (2,4,8) on both fixtures was checked the same way when B7/B8 were written (cpu_runtime docstring).
"""

import json

import pytest

from fixtures.specs import SPECS
from support.engine_harness import engine_run, greedy, run_engines

MAX_NEW_TOKENS = 16
NUM_PROMPTS = 2
# (steps, topk, draft tokens): chains and trees, split over the fixtures to keep this module near 4 minutes.
SETTINGS = {
    "tiny": [(3, 1, 4), (3, 2, 6), (4, 4, 16)],
    "tiny-llama": [(5, 1, 6), (2, 4, 8)],
}
CASES = [(name, setting) for name, settings in SETTINGS.items() for setting in settings]


def _spec_kwargs(fixture_dir, steps, topk, draft_tokens) -> dict:
    return dict(speculative_algorithm="EAGLE3", speculative_draft_model_path=str(fixture_dir / "draft"),
                speculative_num_steps=steps, speculative_eagle_topk=topk, speculative_num_draft_tokens=draft_tokens)


@pytest.fixture(scope="module")
def runs():
    """{fixture name: {None: the plain run, (steps, topk, draft tokens): that EAGLE-3 run}}."""
    out = {}
    for name, settings in SETTINGS.items():
        directory = SPECS[name].directory
        prompts = json.loads((directory / "prompts.json").read_text())[:NUM_PROMPTS]
        described = [engine_run(directory / "target", prompts, sampling_params=greedy(MAX_NEW_TOKENS))]
        described += [engine_run(directory / "target", prompts, sampling_params=greedy(MAX_NEW_TOKENS),
                                 engine_kwargs=_spec_kwargs(directory, *s)) for s in settings]
        results = run_engines(described, plugins="eagle3_capture", timeout=900)
        out[name] = dict(zip([None, *settings], results))
    return out


def _tokens(run):
    return [o["output_ids"] for o in run["outputs"]]


@pytest.mark.parametrize(("name", "setting"), CASES, ids=[f"{n}-{s[0]}-{s[1]}-{s[2]}" for n, s in CASES])
def test_speculative_greedy_equals_plain(runs, name, setting):
    plain, spec = runs[name][None], runs[name][setting]
    assert len(set(map(tuple, _tokens(plain)))) == NUM_PROMPTS  # distinct continuations: equality means something
    assert _tokens(spec) == _tokens(plain)


@pytest.mark.parametrize(("name", "setting"), CASES, ids=[f"{n}-{s[0]}-{s[1]}-{s[2]}" for n, s in CASES])
def test_server_info_reports_the_setting(runs, name, setting):
    info = runs[name][setting]["server_info"]
    steps, topk, draft_tokens = setting
    assert info["speculative_algorithm"] == "EAGLE3"
    assert (info["speculative_num_steps"], info["speculative_eagle_topk"],
            info["speculative_num_draft_tokens"]) == (steps, topk, draft_tokens)
    assert info["attention_backend"] == "torch_native"


@pytest.mark.parametrize(("name", "setting"), CASES, ids=[f"{n}-{s[0]}-{s[1]}-{s[2]}" for n, s in CASES])
def test_multi_step_draft_accepts_more_than_one_token(runs, name, setting):
    run = runs[name][setting]
    metas = [o["meta_info"] for o in run["outputs"]]
    for meta in metas:
        assert meta["completion_tokens"] == MAX_NEW_TOKENS and meta["spec_verify_ct"] >= 1
        assert meta["spec_accept_length"] == pytest.approx(meta["completion_tokens"] / meta["spec_verify_ct"])
        # Each verify proposes one draft token per step: a chain of `steps`, the best `steps` levels of a tree.
        assert 0 <= meta["spec_num_correct_drafts"] <= meta["spec_verify_ct"] * setting[0]
    # A 1-step chain accepts at most 2 tokens per verify; more means the draft's later steps were accepted.
    assert max(m["spec_accept_length"] for m in metas) > 2
    # The scheduler's lifetime average (folded every decode_log_interval step, so its exact count of verify steps
    # depends on when the batch finished) is over 1 too.
    assert run["server_info"]["internal_states"][0]["avg_spec_accept_length"] > 1
