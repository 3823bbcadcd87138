"""Per-position acceptance on SGLang's own ``/metrics`` and the acceptance alarm (observe/metrics.py), through real
``launch_server`` processes on CPU: the DeepSeek fixture's 1-step draft (every release), and the tiny-llama
fixture's 4-step TTT draft at steps 3, topk 1, 4 draft tokens under TP 2 with chunked prefill.

The scrape is parsed with ``prometheus_client``'s own parser. The counters must equal what SGLang itself reports:
the per-request ``spec_correct_drafts_histogram``, ``spec_num_correct_drafts`` and ``spec_verify_ct`` of every
response, and SGLang's own ``sglang:spec_verify_calls_total`` counter. The alarm's expected figures are the ones the
fixture's build recorded offline (fixture.json, draft-ttt/build.json: computed by fixtures/ from the held-out
samples, not by the serving code): with the manifest's ids it stays quiet; with a manifest that names stock SGLang's
default ids for the target ([1, 2, 3], what stock SGLang feeds the draft) and figures tied to those ids, the
mis-wiring the self-check cannot see because the plugin feeds exactly what that manifest says, it fires. The
fixtures/tiny server also runs in strict mode with the settings report written: a consistent setting starts and its
report is clean (one start for both).
"""

import json
import shutil
import time
import urllib.request
from concurrent.futures import ThreadPoolExecutor

import pytest
from prometheus_client.parser import text_string_to_metric_families

from fixtures.specs import SPECS
from harness.servers import Server, server_env
from sglang_eagle3_capture.core.schemas.manifest import EXPECTED_VERSION
from sglang_eagle3_capture.observe.acceptance import LOG_EVERY_ENV, WINDOW_ENV
from sglang_eagle3_capture.observe.report import REPORT_ENV, STRICT_ENV

TINY = SPECS["tiny"].directory  # DeepSeek-V3 tiny, its 1-step draft: every supported release serves it
LLAMA = SPECS["tiny-llama"].directory  # its 4-step TTT draft, for several positions (Llama layer id -1: 0.5.22 on)
WINDOW = 40  # verify steps; the documented default (200) would need a longer run than a test affords
LOG_EVERY = 25
CLIENTS = 8


def _training_figures(fixture):
    """Position acceptance the fixture's build recorded offline (fixtures/, from the held-out samples), and the ids
    stock SGLang feeds its draft."""
    if fixture == TINY:  # 1-step draft: teacher-forced top-1 of its training wiring (fixture.json)
        doc = json.loads((TINY / "fixture.json").read_text())["candidates"][0]["validation"]
        return [doc["training"]["top1"]], doc["sglang_default"]["layer_ids"]
    record = json.loads((LLAMA / "draft-ttt" / "build.json").read_text())["offline_chain_accuracy"]
    return record["this_draft"]["prefix"], record["this_draft_sglang_default"]["layer_ids"]


def _draft_copy(tmp_path, fixture, steps, stock_ids=False):
    """The fixture's draft with an ``expected`` block from its build record for the chain served (and stock SGLang's
    ids if asked). The block is tied to the manifest's ids (the ids it holds for, core/schemas/manifest.py): with stock
    ids it stands for a draft whose manifest and figures agree while its fc was trained on other layers (weights
    replaced after ``verify --write-expected``), what the alarm is for once stale figures arm nothing."""
    source = TINY / "draft" if fixture == TINY else LLAMA / "draft-ttt"
    out = tmp_path / ("stock-ids" if stock_ids else "draft")
    shutil.copytree(source, out)
    figures, stock = _training_figures(fixture)
    manifest = json.loads((out / "eagle3_manifest.json").read_text())
    if stock_ids:
        manifest["layer_ids"] = stock
    manifest["version"] = EXPECTED_VERSION
    manifest["expected"] = {"acceptance": [{"steps": steps, "topk": 1, "draft_tokens": steps + 1,
                                            "per_position": figures[:steps]}],
                            "provenance": {"tool": "fixtures/build_fixture.py", "layer_ids": manifest["layer_ids"]}}
    (out / "eagle3_manifest.json").write_text(json.dumps(manifest))
    return out, figures


def _setting(steps):
    return ["--speculative-num-steps", str(steps), "--speculative-eagle-topk", "1", "--speculative-num-draft-tokens",
            str(steps + 1), "--enable-metrics"]


def _scrape(server):
    time.sleep(2)  # the counters reach Prometheus every 0.5 s (observe/metrics.py FLUSH_SECONDS)
    with urllib.request.urlopen(f"http://127.0.0.1:{server.port}/metrics", timeout=60) as r:
        return r.read().decode()


def _serve(tmp_path, fixture, draft, steps, n_prompts=24, max_new_tokens=48, extra_args=(), **env):
    """The responses' meta_info, the scrape before the requests (after SGLang's own warmup request) and after."""
    prompts = json.loads((fixture / "prompts.json").read_text())[:n_prompts]
    env = server_env(SGLANG_CUDA_COREDUMP_BEFORE_CRASH_WAIT_SECS="0",
                     **{WINDOW_ENV: str(WINDOW), LOG_EVERY_ENV: str(LOG_EVERY), **env})
    with Server(fixture / "target", tmp_path / "server.log", draft=draft, env=env,
                extra_args=[*_setting(steps), *extra_args]) as server:
        assert server.wait(timeout=900), server.text()[-3000:]
        before = _scrape(server)
        with ThreadPoolExecutor(CLIENTS) as pool:  # concurrent clients: SGLang batches them, each counted per request
            outs = list(pool.map(lambda p: server.generate(p, max_new_tokens=max_new_tokens)["meta_info"], prompts))
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


# (fixture, steps, tp): TP 2 (gloo, the CPU runtime's B4) with chunked prefill, where both ranks run each batch and
# one counts
CASES = {"tiny-1step": (TINY, 1, 1), "tiny-llama-ttt-3step-tp2": (LLAMA, 3, 2)}
TP2 = dict(extra_args=["--tp-size", "2", "--chunked-prefill-size", "8"], SGLANG_CPU_OMP_THREADS_BIND="0|1")


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    """One server per case, started when a test first asks for it: ``(figures, its directory, responses' meta_info,
    scrape before, scrape after, log)``. The fixtures/tiny server also runs in strict mode with the settings report
    written (a consistent setting: test_a_consistent_setting_starts_in_strict_mode), one start for both checks."""
    cache = {}

    def get(case):
        if case not in cache:
            fixture, steps, tp = CASES[case]
            tmp = tmp_path_factory.mktemp(case)
            draft, figures = _draft_copy(tmp, fixture, steps)
            env = {STRICT_ENV: "1", REPORT_ENV: str(tmp / "setup.json")} if fixture == TINY else {}
            cache[case] = (figures, tmp, *_serve(tmp, fixture, draft, steps, **(TP2 if tp == 2 else {}), **env))
        return cache[case]

    return get


@pytest.mark.parametrize("case", [pytest.param("tiny-1step", marks=pytest.mark.release),
                                  "tiny-llama-ttt-3step-tp2"])
def test_per_position_counters_equal_sglangs_own_figures_and_the_alarm_stays_quiet(served, case):
    steps = CASES[case][1]
    figures, _, outs, before, scrape, text = served(case)
    hist = [0] * (steps + 1)
    for m in outs:
        for j, n in enumerate(m.get("spec_correct_drafts_histogram") or []):
            hist[j] += n
    verify = sum(m["spec_verify_ct"] for m in outs)
    assert verify >= WINDOW and sum(hist) == verify
    proposed = _samples(scrape, "sglang_eagle3_capture:draft_position_proposed_total", before)
    accepted = _samples(scrape, "sglang_eagle3_capture:draft_position_accepted_total", before)
    by_count = _samples(scrape, "sglang_eagle3_capture:verify_steps_by_accepted_drafts_total", before)
    assert {k: int(v) for k, v in proposed.items()} == {str(k): verify for k in range(steps)}
    assert {k: int(v) for k, v in accepted.items()} == {str(k): sum(hist[k + 1:]) for k in range(steps)}
    assert [int(by_count.get(str(j), 0)) for j in range(steps + 1)] == hist
    assert sum(accepted.values()) == sum(m["spec_num_correct_drafts"] for m in outs)
    # SGLang's own counter, its warmup request included, against ours since the start
    total = sum(_samples(scrape, "sglang_eagle3_capture:draft_position_proposed_total").values()) / steps
    assert sum(_samples(scrape, "sglang:spec_verify_calls_total").values()) == total
    assert _samples(scrape, "sglang_eagle3_capture:acceptance_alarm") == {None: 0.0}
    expected = _samples(scrape, "sglang_eagle3_capture:expected_position_acceptance")
    assert [expected[str(k)] for k in range(steps)] == pytest.approx(figures[:steps])
    assert "acceptance alarm armed" in text and "ACCEPTANCE ALARM" not in text
    assert text.count("counting per-position acceptance in this scheduler") == 1  # one rank of tp
    logged = [ln for ln in text.splitlines() if f"acceptance over the last {LOG_EVERY} verify steps" in ln]
    assert len(logged) == total // LOG_EVERY


# Not release-marked: the alarm is this package's arithmetic on the counters, the same on every release; the
# release-specific seams are what the tiny-1step case above proves on each release CI runs.
def test_stock_ids_in_the_manifest_fire_the_alarm(tmp_path):
    """The bundled DeepSeek draft with stock SGLang's default ids [1, 2, 3] in its manifest: the plugin feeds exactly
    that (the self-check passes), the draft was trained on [-1, 0, 1], position-0 acceptance collapses."""
    draft, figures = _draft_copy(tmp_path, TINY, 1, stock_ids=True)
    outs, _, scrape, text = _serve(tmp_path, TINY, draft, 1)
    assert sum(m["spec_verify_ct"] for m in outs) >= WINDOW
    assert "ACCEPTANCE ALARM" in text, text[-3000:]
    assert _samples(scrape, "sglang_eagle3_capture:acceptance_alarm") == {None: 1.0}
    recent = _samples(scrape, "sglang_eagle3_capture:recent_first_position_acceptance")[None]
    assert recent < figures[0] - 0.15
    line = next(ln for ln in text.splitlines() if "ACCEPTANCE ALARM" in ln)
    assert "sglang-eagle3-capture inspect" in line and str(draft) in line


@pytest.mark.release
def test_a_consistent_setting_starts_in_strict_mode(served):
    """The fixtures/tiny server above ran with SGLANG_EAGLE3_CAPTURE_STRICT=1 at steps 1, topk 1, 2 draft tokens, a
    setting SGLang runs as asked: it started, served, and its report is clean (the refusal of a rewritten setting is
    test_setup_report_engine.py's)."""
    _, tmp, outs, _, _, text = served("tiny-1step")
    assert all(m["completion_tokens"] > 0 for m in outs)
    assert "eagle3-capture:   no rewrites or contradictions" in text
    report = json.loads((tmp / "setup.json").read_text())
    rows = {r["name"]: r for r in report["settings"]}
    assert report["ok"] and rows["num_draft_tokens"]["effective"] == 2
    assert (rows["num_steps"]["effective"], rows["eagle_topk"]["effective"]) == (1, 1)
