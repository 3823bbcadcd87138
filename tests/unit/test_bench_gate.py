"""benchmarks/bench_e2e.py without servers: the figures it derives from SGLang's meta_info and /server_info, the
settings it runs, the rows it writes, and the CI gate (per fixture and setting, numbers of one run only)."""

import csv
import json
import sys
from types import SimpleNamespace

import pytest

from fixtures.specs import DRAFTS, SPECS
from support import REPO

sys.path.insert(0, str(REPO / "benchmarks"))
from bench_e2e import (  # noqa: E402
    ACCEPT_NOTE,
    CPU_NOTE,
    DEFAULT_DRAFT_NAME,
    DEFAULT_FIXTURES,
    DEFAULT_SETTINGS,
    FULL_SETTINGS,
    Limits,
    acceptance,
    effective_settings,
    fixture_path,
    fixture_runs,
    format_table,
    gate,
    gate_fixtures,
    parse_setting,
    ratio_se,
    rows_of,
    server_cmd,
    setting_label,
    settings_from,
    write_results,
)

LIMITS = Limits(offline=0.05, position=0.2, rate=0.2, length=0.3, min_drafts=2000)


def _spec_row(rate, length, first, setting=(3, 1, 4), drafts=2500, output=((1, 2, 3),), offline=None, later=None):
    steps, topk, tokens = setting
    later = [first * 0.9 ** k for k in range(1, steps)] if later is None else list(later)
    return {"accept_rate": rate, "accept_length": length, "per_position_acceptance": [first, *later],
            "proposed_drafts": drafts, "output_ids": [list(o) for o in output], "offline_accuracy": offline,
            "speculative_num_steps": steps, "speculative_eagle_topk": topk, "speculative_num_draft_tokens": tokens}


def _rows(manifest=(0.9, 3.7, 0.97), stock=(0.3, 1.8, 0.5), offline=0.98, manifest_later=None, **kw):
    return {"no_spec": {"output_ids": [[1, 2, 3]]},
            "stock": _spec_row(*stock, **{k: v for k, v in kw.items() if k != "output"}),
            "manifest": _spec_row(*manifest, offline=offline, later=manifest_later, **kw)}


def test_acceptance_from_meta_info():
    """Two requests' histograms add entry by entry; the figures follow the module docstring's definitions."""
    metas = [
        {"spec_verify_ct": 4, "spec_num_correct_drafts": 8, "spec_num_proposed_drafts": 12,
         "spec_correct_drafts_histogram": [1, 0, 1, 2]},  # 0*1 + 1*0 + 2*1 + 3*2 = 8 accepted
        {"spec_verify_ct": 2, "spec_num_correct_drafts": 1, "spec_num_proposed_drafts": 6,
         "spec_accept_histogram": [1, 1]},  # the older alias
    ]
    got = acceptance(metas, completion=20)
    assert got["accept_histogram"] == [2, 1, 1, 2] and sum(got["accept_histogram"]) == got["verify_ct"] == 6
    assert got["accept_length"] == pytest.approx(1 + 9 / 6, abs=1e-4)
    assert got["sglang_accept_length"] == pytest.approx(20 / 6, abs=1e-4)
    assert got["accept_rate"] == pytest.approx(9 / 18, abs=1e-4)
    # position k: verify steps that accepted at least k+1 draft tokens
    assert got["per_position_acceptance"] == pytest.approx([4 / 6, 3 / 6, 2 / 6], abs=1e-4)
    # standard errors over the two requests: accept rate 8/12 and 1/6 (ratio_se, checked below)
    assert got["accept_rate_se"] == pytest.approx(ratio_se([8, 1], [12, 6]), abs=1e-4)
    assert got["accept_length_se"] == pytest.approx(ratio_se([8, 1], [4, 2]), abs=1e-4)
    assert got["per_position_se"] == pytest.approx([ratio_se([3, 1], [4, 2]), ratio_se([3, 0], [4, 2]),
                                                    ratio_se([2, 0], [4, 2])], abs=1e-4)


def test_ratio_se_is_the_binomial_standard_error_for_independent_trials():
    """One Bernoulli trial per request: the textbook sqrt(p (1 - p) / n); equal ratios in every request: 0."""
    import random

    rng = random.Random(7)
    n, p = 4000, 0.3
    hits = [1 if rng.random() < p else 0 for _ in range(n)]
    phat = sum(hits) / n
    assert ratio_se(hits, [1] * n) == pytest.approx((phat * (1 - phat) / n) ** 0.5, rel=1e-3)
    assert ratio_se([2, 4, 6], [1, 2, 3]) == 0
    # two requests, 8 of 4 and 1 of 2: ratio 1.5, residuals 2 and -2, so sqrt(2/1 * 8) / 6
    assert ratio_se([8, 1], [4, 2]) == pytest.approx(4 / 6)
    assert ratio_se([1], [2]) is None and ratio_se([0, 0], [0, 0]) is None


def test_acceptance_without_a_histogram_derives_no_positions():
    got = acceptance([{"spec_verify_ct": 3, "spec_num_correct_drafts": 3, "spec_num_proposed_drafts": 3}], 7)
    assert got["per_position_acceptance"] is None and got["accept_histogram"] is None
    assert got["accept_rate"] == 1.0 and got["accept_length"] == 2.0
    # a histogram that does not add up to the verify steps is not trusted either
    bad = acceptance([{"spec_verify_ct": 3, "spec_num_correct_drafts": 1, "spec_num_proposed_drafts": 3,
                       "spec_correct_drafts_histogram": [1, 1]}], 5)
    assert bad["per_position_acceptance"] is None


def test_effective_settings_are_read_from_server_info():
    info = {"speculative_num_steps": 1, "speculative_eagle_topk": 1, "speculative_num_draft_tokens": 2,
            "attention_backend": "torch_native", "speculative_algorithm": "EAGLE3", "model_path": "x"}
    assert effective_settings(info) == {k: v for k, v in info.items() if k != "model_path"}


def test_settings_parse_and_default():
    assert parse_setting("3,2,6") == (3, 2, 6)
    for bad in ("3,2", "3,x,6", "0,1,2", "3,1,4,5"):
        with pytest.raises(ValueError):
            parse_setting(bad)
    ns = dict(speculative_num_steps=None, speculative_eagle_topk=None, speculative_num_draft_tokens=None)
    assert settings_from(SimpleNamespace(settings=None, **ns)) == list(DEFAULT_SETTINGS) == [(3, 1, 4)]
    assert settings_from(SimpleNamespace(settings=["1,1,2", "3,2,6"], **ns)) == [(1, 1, 2), (3, 2, 6)]
    # make demo DEMO_ARGS=--full: the 1-step chain, the 3-step chain and the tree
    assert settings_from(SimpleNamespace(settings=None, full=True, **ns)) == list(FULL_SETTINGS) == [
        (1, 1, 2), (3, 1, 4), (3, 2, 6)]
    with pytest.raises(ValueError, match="not both"):
        settings_from(SimpleNamespace(settings=["3,1,4"], full=True, **ns))
    # gpu_check.py names one setting with the three --speculative-* options
    legacy = dict(speculative_num_steps=3, speculative_eagle_topk=4, speculative_num_draft_tokens=8)
    assert settings_from(SimpleNamespace(settings=None, **legacy)) == [(3, 4, 8)]
    with pytest.raises(ValueError, match="not both"):
        settings_from(SimpleNamespace(settings=["1,1,2"], **legacy))


def test_server_cmd_runs_the_setting():
    args = SimpleNamespace(target="T", draft="D", tp_size=1, device="cpu", server_arg=[],
                           speculative_num_steps=1, speculative_eagle_topk=1, speculative_num_draft_tokens=2)
    cmd = server_cmd(args, "manifest", 1234, (3, 2, 6))
    flags = {cmd[i]: cmd[i + 1] for i in range(len(cmd) - 1) if cmd[i].startswith("--speculative")}
    assert (flags["--speculative-num-steps"], flags["--speculative-eagle-topk"],
            flags["--speculative-num-draft-tokens"]) == ("3", "2", "6")
    assert "--speculative-num-steps" in server_cmd(args, "stock", 1234)  # bench_load.py: the args' setting
    assert not any(c.startswith("--speculative") for c in server_cmd(args, "no_spec", 1234, (3, 2, 6)))
    # one server at a time: SGLang's own idle loop; several starting at once (make demo): the waiting ones sleep
    assert "--sleep-on-idle" not in cmd
    together = server_cmd(SimpleNamespace(**{**vars(args), "start_jobs": 3}), "manifest", 1234, (3, 1, 4))
    assert "--sleep-on-idle" in together
    # the memory the others take while one loads stays inside SGLang's KV budget check, as in the tests' harness
    from harness import ENGINE_DEFAULTS

    assert float(together[together.index("--mem-fraction-static") + 1]) == ENGINE_DEFAULTS["mem_fraction_static"]


def test_gate_passes_a_healthy_run():
    assert gate(_rows(), LIMITS, (3, 1, 4)) == []


@pytest.mark.parametrize("rows, fragment", [
    (_rows(manifest=(0.9, 3.7, 0.90)), "below the draft's offline accuracy"),
    (_rows(stock=(0.75, 1.8, 0.5)), "accept_rate 0.750 is not at least 0.2 below"),
    (_rows(stock=(0.3, 3.5, 0.5)), "accept_length 3.500 is not at least 0.3 below"),
    (_rows(stock=(0.3, 1.8, 0.8)), "stock acceptance at position 1 0.800 is not at least 0.2 below"),
    # a plugin whose later draft steps are fed the wrong states: position 1 right, 2 and 3 at stock's level or below
    (_rows(manifest_later=(0.05, 0.02)), "stock acceptance at position 2 0.450 is not at least 0.2 below"),
    (_rows(manifest=(None, None, 0.97)), "accept_rate not measured"),
    (_rows(output=((1, 2, 4),)), "manifest: greedy output differs"),
    (_rows(drafts=1999), "fewer than 2000"),
    (_rows(setting=(1, 1, 2)), "not the (3, 1, 4) asked for"),
])
def test_gate_fails(rows, fragment):
    problems = gate(rows, LIMITS, (3, 1, 4))
    assert any(fragment in p for p in problems), problems


def test_gate_position_falls_back_to_a_one_step_chains_accept_rate():
    rows = _rows(manifest=(0.97, 1.97, None), stock=(0.3, 1.3, None), setting=(1, 1, 2))
    for r in (rows["manifest"], rows["stock"]):
        r["per_position_acceptance"] = None
    assert gate(rows, LIMITS, (1, 1, 2)) == []
    rows["manifest"].update(speculative_num_steps=3, speculative_num_draft_tokens=4)
    assert any("first-position acceptance -" in p for p in gate(rows, LIMITS, (3, 1, 4)))


def test_gate_checks_every_fixture_and_setting_and_names_the_failing_one():
    by_fixture = {"tiny": {"3,1,4": _rows()},
                  "tiny-llama": {"1,1,2": _rows(setting=(1, 1, 2)),
                                 "3,1,4": _rows(stock=(0.85, 1.8, 0.5))}}
    problems = gate_fixtures(by_fixture, LIMITS)
    assert len(problems) == 1 and problems[0].startswith("tiny-llama 3,1,4: stock accept_rate 0.850"), problems
    assert gate_fixtures({"tiny": {"3,1,4": _rows()}}, LIMITS) == []


def test_rows_are_one_per_fixture_setting_and_variant(tmp_path):
    plain = {"fixture": "tiny", "setting": "", "variant": "no_spec", "accept_length": 1.0, "output_ids": [[1]]}
    by_setting = {s: {"no_spec": plain, **{v: {"fixture": "tiny", "setting": s, "variant": v, "accept_length": 2.0,
                                              "per_position_acceptance": [0.9], "output_ids": [[1]]}
                                          for v in ("stock", "manifest")}}
                  for s in ("1,1,2", "3,1,4")}
    rows = rows_of(by_setting)
    assert [(r["setting"], r["variant"]) for r in rows] == [
        ("", "no_spec"), ("1,1,2", "stock"), ("1,1,2", "manifest"), ("3,1,4", "stock"), ("3,1,4", "manifest")]
    write_results(rows, tmp_path)
    assert (tmp_path / "e2e.png").stat().st_size > 0  # accept length beside per-position acceptance, per fixture
    with open(tmp_path / "e2e.csv") as f:
        table = list(csv.DictReader(f))
    assert len(table) == 5 and json.loads(table[1]["per_position_acceptance"]) == [0.9]
    assert "output_ids" not in json.loads((tmp_path / "e2e.json").read_text())[0]


class _FakeServer:
    def __init__(self, job, log):
        self.job, self.log = job, log

    def close(self):
        self.log.append(("close", self.job))


def _fake_run(monkeypatch, fail_on=None):
    """run_fixture with servers replaced by a log of starts, measurements and closes."""
    import bench_e2e

    log = []

    def start_variant(args, variant, label="", setting=None):
        log.append(("start", (variant, setting)))
        return _FakeServer((variant, setting), log), 1.0

    def measure_variant(args, server, startup_s, variant, prompts, label="", setting=None):
        log.append(("measure", (variant, setting)))
        if (variant, setting) == fail_on:
            raise RuntimeError("no answer")
        server.close()
        return {"variant": variant, "setting": setting_label(setting), "output_tok_per_s": 1.0}

    monkeypatch.setattr(bench_e2e, "start_variant", start_variant)
    monkeypatch.setattr(bench_e2e, "measure_variant", measure_variant)
    args = SimpleNamespace(prompts=None, fixture=SPECS["tiny"].directory, num_prompts=2, prompt_seed=1,
                           fixture_mode=False, variants="no_spec,stock,manifest", start_jobs=2)
    return bench_e2e, args, log


def test_servers_start_in_groups_and_are_measured_one_at_a_time(monkeypatch):
    bench_e2e, args, log = _fake_run(monkeypatch)
    by_setting = bench_e2e.run_fixture(args, "tiny", [(1, 1, 2), (3, 1, 4)])
    jobs = [("no_spec", None), ("stock", (1, 1, 2)), ("manifest", (1, 1, 2)), ("stock", (3, 1, 4)),
            ("manifest", (3, 1, 4))]
    # groups of --start-jobs: both start, then each is measured and stopped before the next group starts
    assert log == [e for group in (jobs[0:2], jobs[2:4], jobs[4:]) for e in
                   [("start", j) for j in group] + [x for j in group for x in (("measure", j), ("close", j))]]
    assert by_setting["3,1,4"]["no_spec"] is by_setting["1,1,2"]["no_spec"]  # one no_spec server per fixture
    assert [r["setting"] for r in bench_e2e.rows_of(by_setting)] == ["", "1,1,2", "1,1,2", "3,1,4", "3,1,4"]


def test_a_failed_measurement_stops_the_servers_still_waiting(monkeypatch):
    bench_e2e, args, log = _fake_run(monkeypatch, fail_on=("no_spec", None))
    with pytest.raises(RuntimeError):
        bench_e2e.run_fixture(args, "tiny", [(3, 1, 4)])
    assert ("close", ("stock", (3, 1, 4))) in log and ("measure", ("stock", (3, 1, 4))) not in log


def test_table_names_the_drafts_and_ends_with_one_line_on_accept_length_and_cpu_speed():
    rows = [{"fixture": "tiny", "setting": "", "variant": "no_spec", "accept_length": 1.0, "output_tok_per_s": 90.0,
             "device": "cpu (2 cores)"},
            {"fixture": "tiny", "setting": "3,1,4", "variant": "manifest", "accept_length": 3.8, "accept_rate": 0.94,
             "per_position_acceptance": [0.98, 0.94, 0.9], "output_tok_per_s": 80.0, "device": "cpu (2 cores)",
             "draft": "fixtures/tiny/draft-ttt", "speculative_num_steps": 3, "speculative_eagle_topk": 1,
             "speculative_num_draft_tokens": 4}]
    lines = format_table(rows).splitlines()
    assert lines[-1] == f"{ACCEPT_NOTE} {CPU_NOTE}" and lines[-2] == "drafts: tiny: fixtures/tiny/draft-ttt"
    assert "0.98 0.94 0.90" in lines[3]
    gpu = [{**r, "device": "NVIDIA H200"} for r in rows]
    assert format_table(gpu).splitlines()[-1] == ACCEPT_NOTE  # the CPU runtime's cost is no GPU's


def test_default_fixtures_are_the_bundled_ones_and_names_resolve():
    assert set(DEFAULT_FIXTURES) <= set(SPECS)
    for name in DEFAULT_FIXTURES:
        assert fixture_path(name) == SPECS[name].directory
        # make demo and the gate serve each fixture's depth-capable draft, a committed one of specs.DRAFTS
        assert DRAFTS[f"{name}/{DEFAULT_DRAFT_NAME}"].ttt_steps > 1
        assert (SPECS[name].directory / DEFAULT_DRAFT_NAME / "config.json").is_file()
    assert fixture_path("fixtures/tiny-llama") == SPECS["tiny-llama"].directory.relative_to(REPO)


def test_offline_stock_row_is_the_installed_releases():
    """The doctor groups consecutive releases that feed the same into one row, ``stock SGLang A .. B``."""
    from bench_e2e import _stock_row_covers

    assert _stock_row_covers("stock SGLang 0.5.11 .. 0.5.23 [1, 2, 3]", "0.5.21")
    assert _stock_row_covers("stock SGLang 0.5.23 [1, 2, 3]", "0.5.23")
    assert _stock_row_covers("stock SGLang 0.5.23", "0.5.23")
    assert not _stock_row_covers("stock SGLang 0.5.11 .. 0.5.20 [1, 2, 3]", "0.5.21")
    assert not _stock_row_covers("stock default (no ids) [1, 2, 3]", "0.5.23")


def test_fixture_selection():
    """CI's older releases run ``--fixture tiny`` only (a Llama target's embedding needs SGLang >= 0.5.22)."""
    assert [label for label, _ in fixture_runs(None)] == ["tiny", "tiny-llama"]
    assert fixture_runs(["tiny"]) == [("tiny", SPECS["tiny"].directory)]
    assert [label for label, _ in fixture_runs(["tiny-llama", "tiny"])] == ["tiny-llama", "tiny"]
    assert fixture_runs(None, "/m/target", "/m/draft") == [("m", None)]
    # another draft on a fixture's target and prompts
    assert fixture_runs(["tiny-llama"], None, "fixtures/tiny-llama/draft-ttt") == [
        ("tiny-llama+draft-ttt", SPECS["tiny-llama"].directory)]
    with pytest.raises(ValueError, match="names one --fixture"):
        fixture_runs(None, None, "/m/draft")
    with pytest.raises(ValueError, match="at most one"):
        fixture_runs(["tiny", "tiny-llama"], "/m/target")
    with pytest.raises(ValueError, match="needs --draft"):
        fixture_runs(None, "/m/target")
