"""Per-position acceptance on SGLang's own ``/metrics`` and the acceptance alarm (serving/metrics.py), through real
``launch_server`` processes on CPU: the tiny-llama fixture's 4-step TTT draft at steps 3, topk 1, 4 draft tokens.

The scrape is parsed with ``prometheus_client``'s own parser. The counters must equal what SGLang itself reports:
the per-request ``spec_correct_drafts_histogram``, ``spec_num_correct_drafts`` and ``spec_verify_ct`` of every
response, and SGLang's own ``sglang:spec_verify_calls_total`` counter. The alarm's expected figures are the ones the
fixture's build recorded offline (fixtures/tiny-llama/draft-ttt/build.json, computed by fixtures/draft_train.py
from the held-out samples, not by the serving code): with the manifest's ids it stays quiet; with a manifest that
names stock SGLang's default ids for this target ([1, 2, 3], what stock SGLang feeds this draft), the mis-wiring
the self-check cannot see because the plugin feeds exactly what that manifest says, it fires.
"""

import json
import shutil
import time
import urllib.request

import pytest
from prometheus_client.parser import text_string_to_metric_families

from fixtures.specs import SPECS
from harness.servers import Server, server_env
from sglang_eagle3_capture.acceptance import LOG_EVERY_ENV, WINDOW_ENV

FIXTURE = SPECS["tiny-llama"].directory
DRAFT = FIXTURE / "draft-ttt"
STEPS = 3
SETTING = ["--speculative-num-steps", str(STEPS), "--speculative-eagle-topk", "1", "--speculative-num-draft-tokens",
           str(STEPS + 1), "--enable-metrics", "--mem-fraction-static", "0.1"]
WINDOW = 40  # verify steps; the documented default (200) would need a longer run than a test affords
LOG_EVERY = 25


def _draft_copy(tmp_path, name, layer_ids=None):
    """The draft-ttt fixture with an ``expected`` block from its build record (and other ids when given)."""
    out = tmp_path / name
    shutil.copytree(DRAFT, out)
    prefix = json.loads((DRAFT / "build.json").read_text())["offline_chain_accuracy"]["this_draft"]["prefix"]
    manifest = json.loads((out / "eagle3_manifest.json").read_text())
    manifest["expected"] = {"acceptance": [{"topk": 1, "per_position": prefix[:STEPS]}],
                            "provenance": {"tool": "fixtures/build_fixture.py", "file": "build.json"}}
    if layer_ids is not None:
        manifest["layer_ids"] = layer_ids
    (out / "eagle3_manifest.json").write_text(json.dumps(manifest))
    return out, prefix


def _scrape(server):
    time.sleep(2)  # the counters reach Prometheus every 0.5 s (serving/metrics.py FLUSH_SECONDS)
    with urllib.request.urlopen(f"http://127.0.0.1:{server.port}/metrics", timeout=60) as r:
        return r.read().decode()


def _serve(tmp_path, draft, name, n_prompts=24, max_new_tokens=48, extra_args=(), **env):
    """The responses' meta_info, the scrape before the requests (after SGLang's own warmup request) and after."""
    prompts = json.loads((FIXTURE / "prompts.json").read_text())[:n_prompts]
    env = server_env(SGLANG_CUDA_COREDUMP_BEFORE_CRASH_WAIT_SECS="0", **{WINDOW_ENV: str(WINDOW), **env})
    with Server(FIXTURE / "target", tmp_path / f"{name}.log", draft=draft, env=env,
                extra_args=[*SETTING, *extra_args]) as server:
        assert server.wait(timeout=900), server.text()[-3000:]
        before = _scrape(server)
        outs = [server.generate(p, max_new_tokens=max_new_tokens)["meta_info"] for p in prompts]
        after = _scrape(server)
        text = server.text()
    return outs, before, after, text


def _samples(scrape, name, before=None):
    """``{label value of position/accepted_drafts or None: value}`` summed over the other labels (less the same
    sums in the scrape ``before``)."""
    out = {}
    for family in text_string_to_metric_families(scrape):
        for s in family.samples:
            if s.name == name:
                key = s.labels.get("position", s.labels.get("accepted_drafts"))
                out[key] = out.get(key, 0) + s.value
    for key, value in (_samples(before, name) if before is not None else {}).items():
        out[key] -= value
    return out


# TP 2 (gloo, the CPU runtime's B4) with chunked prefill: both ranks run the batch, one counts
TP2 = dict(extra_args=["--tp-size", "2", "--chunked-prefill-size", "8"], SGLANG_CPU_OMP_THREADS_BIND="0|1")


@pytest.mark.parametrize("tp", [pytest.param(1, marks=pytest.mark.release), 2])
def test_per_position_counters_equal_sglangs_own_figures_and_the_alarm_stays_quiet(tp, tmp_path):
    draft, prefix = _draft_copy(tmp_path, "right")
    outs, before, scrape, text = _serve(tmp_path, draft, "right", **(TP2 if tp == 2 else {}),
                                        **{LOG_EVERY_ENV: str(LOG_EVERY)})
    hist = [0] * (STEPS + 1)
    for m in outs:
        for j, n in enumerate(m.get("spec_correct_drafts_histogram") or []):
            hist[j] += n
    verify = sum(m["spec_verify_ct"] for m in outs)
    assert verify >= WINDOW and sum(hist) == verify
    proposed = _samples(scrape, "sglang_eagle3_capture:draft_position_proposed_total", before)
    accepted = _samples(scrape, "sglang_eagle3_capture:draft_position_accepted_total", before)
    by_count = _samples(scrape, "sglang_eagle3_capture:verify_steps_by_accepted_drafts_total", before)
    assert {k: int(v) for k, v in proposed.items()} == {str(k): verify for k in range(STEPS)}
    assert {k: int(v) for k, v in accepted.items()} == {str(k): sum(hist[k + 1:]) for k in range(STEPS)}
    assert [int(by_count.get(str(j), 0)) for j in range(STEPS + 1)] == hist
    assert sum(accepted.values()) == sum(m["spec_num_correct_drafts"] for m in outs)
    # SGLang's own counter, warmup request included, against ours since the start
    assert sum(_samples(scrape, "sglang:spec_verify_calls_total").values()) == sum(
        _samples(scrape, "sglang_eagle3_capture:draft_position_proposed_total").values()) / STEPS
    assert _samples(scrape, "sglang_eagle3_capture:acceptance_alarm") == {None: 0.0}
    expected = _samples(scrape, "sglang_eagle3_capture:expected_position_acceptance")
    assert [expected[str(k)] for k in range(STEPS)] == pytest.approx(prefix[:STEPS])
    assert "acceptance alarm armed" in text and "ACCEPTANCE ALARM" not in text
    assert text.count("counting per-position acceptance in this scheduler") == 1  # one rank of tp
    logged = [ln for ln in text.splitlines() if f"acceptance over the last {LOG_EVERY} verify steps" in ln]
    assert len(logged) == sum(_samples(scrape, "sglang_eagle3_capture:draft_position_proposed_total").values()
                              ) // STEPS // LOG_EVERY


@pytest.mark.release
def test_stock_ids_in_the_manifest_fire_the_alarm(tmp_path):
    draft, prefix = _draft_copy(tmp_path, "stock-ids", layer_ids=[1, 2, 3])
    outs, _, scrape, text = _serve(tmp_path, draft, "stock-ids")
    assert sum(m["spec_verify_ct"] for m in outs) >= WINDOW
    assert "ACCEPTANCE ALARM" in text, text[-3000:]
    assert _samples(scrape, "sglang_eagle3_capture:acceptance_alarm") == {None: 1.0}
    recent = _samples(scrape, "sglang_eagle3_capture:recent_first_position_acceptance")[None]
    assert recent < prefix[0] - 0.15
    line = next(ln for ln in text.splitlines() if "ACCEPTANCE ALARM" in ln)
    assert "sglang-eagle3-capture inspect" in line and str(draft) in line
