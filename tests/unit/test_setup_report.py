"""The startup report of the effective speculative setup (observe/report.py) from plain data, and its reading of
SGLang-shaped objects (observe/sglang_report.py, with stand-ins: no SGLang here).

One table of cases: each names the facts that differ from a consistent EAGLE-3 chain on the bundled draft, and the
findings (kind and field) the report must name; the consistent case has none, so every case can fail."""

import json
from dataclasses import replace
from types import SimpleNamespace

import numpy as np
import pytest
from safetensors.numpy import save_file

from fixtures.specs import SPECS
from sglang_eagle3_capture.core import releases
from sglang_eagle3_capture.core.sglang import runtime
from sglang_eagle3_capture.core.sglang import target as target_patch
from sglang_eagle3_capture.observe import report as sr
from sglang_eagle3_capture.observe import sglang_report as serving

TINY = SPECS["tiny"].directory
RELEASE = releases.newest()
CHAIN = {"speculative_algorithm": "EAGLE3", "speculative_num_steps": 1, "speculative_eagle_topk": 1,
         "speculative_num_draft_tokens": 2, "speculative_draft_window_size": None, "attention_backend": "torch_native",
         "speculative_draft_attention_backend": None, "cuda_graph": False, "enable_torch_compile": False,
         "page_size": 1, "context_length": None}


def _draft(tmp_path, config=None, d2t=None, tokenizer=None, target_tokenizer=None, target=None):
    """A draft directory like the bundled one, with ``config`` merged into its config.json."""
    d, t = tmp_path / "draft", tmp_path / "target"
    d.mkdir(exist_ok=True)
    t.mkdir(exist_ok=True)
    cfg = {**json.loads((TINY / "draft" / "config.json").read_text()), **(config or {})}
    (d / "config.json").write_text(json.dumps(cfg))
    (d / "eagle3_manifest.json").write_text((TINY / "draft" / "eagle3_manifest.json").read_text())
    tcfg = {**json.loads((TINY / "target" / "config.json").read_text()), **(target or {})}
    (t / "config.json").write_text(json.dumps(tcfg))
    if d2t is not None:
        save_file({"d2t": np.asarray(d2t, dtype=np.int64)}, str(d / "model.safetensors"))
    for where, vocab in ((d, tokenizer), (t, target_tokenizer)):
        if vocab is not None:
            (where / "tokenizer.json").write_text(json.dumps({"model": {"vocab": vocab}}))
    return d, t


def _facts(tmp_path, *, requested=None, effective=None, record=(), plugin=True, draft_path=None, **draft_kw):
    d, t = _draft(tmp_path, **draft_kw)
    eff = {**CHAIN, **(effective or {})}
    asked = {**CHAIN, **(requested or {})}
    return sr.SetupFacts(RELEASE, asked, eff, record=list(record), sources={"_rewrite": "sglang/srt/x.py:7"},
                         draft=sr.read_draft_facts(str(d if draft_path is None else draft_path(d, t)), str(t)),
                         plugin_active=plugin)


CASES = {  # name: (_facts keyword arguments, [(kind, field)])
    "consistent chain": ({}, []),
    "draft tokens rewritten (the case behind the product)": (
        {"requested": {"speculative_num_draft_tokens": 4},
         "record": [("_rewrite", {"speculative_num_draft_tokens": 2})]},
        [(sr.REWRITTEN, "--speculative-num-draft-tokens")]),
    "a value SGLang chose where none was asked is no rewrite": (
        {"requested": {"speculative_num_steps": None}, "record": [("_auto", {"speculative_num_steps": 1})]}, []),
    "EAGLE with an EAGLE-3 draft": ({"effective": {"speculative_algorithm": "EAGLE"},
                                     "requested": {"speculative_algorithm": "EAGLE"}},
                                    [(sr.CONTRADICTION, "--speculative-algorithm")]),
    "no algorithm": ({"effective": {"speculative_algorithm": None}, "requested": {"speculative_algorithm": None}},
                     [(sr.CONTRADICTION, "--speculative-algorithm")]),
    "an EAGLE draft under EAGLE3": ({"config": {"architectures": ["LlamaForCausalLMEagle"]}},
                                    [(sr.CONTRADICTION, "--speculative-algorithm")]),
    "the target given as the draft": ({"draft_path": lambda d, t: t},
                                      [(sr.CONTRADICTION, "--speculative-draft-model-path")]),
    "a target-class config as the draft": ({"config": {"architectures": ["DeepseekV3ForCausalLM"]}},
                                           [(sr.CONTRADICTION, "--speculative-draft-model-path")]),
    "more steps than trained": ({"config": {"speculators_config": {"proposal_methods": [{"speculative_tokens": 3}]}},
                                 "effective": {"speculative_num_steps": 5}, "requested": {"speculative_num_steps": 5}},
                                [(sr.CONTRADICTION, "--speculative-num-steps")]),
    "as many steps as trained": ({"config": {"ttt_length": 3}, "effective": {"speculative_num_steps": 3},
                                  "requested": {"speculative_num_steps": 3}}, []),
    "trained window not served": ({"config": {"sliding_window": 64, "layer_types": ["sliding_attention"]}},
                                  [(sr.CONTRADICTION, "--speculative-draft-window-size")]),
    "trained window served": ({"config": {"sliding_window": 64, "layer_types": ["sliding_attention"]},
                               "effective": {"speculative_draft_window_size": 64},
                               "requested": {"speculative_draft_window_size": 64}}, []),
    "d2t in range": ({"d2t": [0] * 121}, []),
    "d2t out of range (absolute ids, not offsets)": ({"d2t": list(range(200, 321))},
                                                     [(sr.CONTRADICTION, "tensor d2t")]),
    "vocab sizes differ": ({"target": {"vocab_size": 300}}, [(sr.CONTRADICTION, "vocab_size")]),
    "tokenizers differ": ({"tokenizer": {"a": 0}, "target_tokenizer": {"b": 0}}, [(sr.CONTRADICTION, "tokenizer")]),
    "same tokenizer": ({"tokenizer": {"a": 0}, "target_tokenizer": {"a": 0}}, []),
    "context longer than the draft's positions": (
        {"config": {"max_position_embeddings": 256}, "effective": {"context_length": 512}},
        [(sr.CONTRADICTION, "--context-length")]),
    "a flag only the plugin serves, without the plugin": ({"config": {"norm_before_residual": True}, "plugin": False},
                                                          [(sr.CONTRADICTION, "norm_before_residual")]),
    "a flag only the plugin serves, with it": ({"config": {"norm_before_residual": True}}, []),
}


@pytest.mark.parametrize("name", CASES)
def test_each_case_names_its_findings(tmp_path, name):
    kwargs, expected = CASES[name]
    report = sr.build(_facts(tmp_path, **kwargs))
    assert [(f.kind, f.field) for f in report.findings] == expected, report.lines()
    assert all(f.fix and f.problem for f in report.findings)
    assert report.ok is (not expected)
    json.dumps(report.to_dict())  # JSON-ready


def test_a_rewrite_names_sglangs_step_its_source_and_rule(tmp_path):
    facts = _facts(tmp_path, requested={"speculative_num_draft_tokens": 4},
                   record=[("_rewrite", {"speculative_num_draft_tokens": 2})])
    facts = replace(facts, notes=["speculative_num_draft_tokens is adjusted (SGLang's words)"])
    report = sr.build(facts)
    row = next(r for r in report.settings if r["name"] == "num_draft_tokens")
    assert (row["requested"], row["effective"], row["changed_by"], row["source"]) == (4, 2, "_rewrite",
                                                                                      "sglang/srt/x.py:7")
    assert row["rule"] == "speculative_num_draft_tokens is adjusted (SGLang's words)"
    assert "_rewrite (sglang/srt/x.py:7)" in report.findings[0].problem
    assert report.trained["layer ids"] == [-1, 0, 1] and report.trained["vocab"] == "121 of 256"


def test_without_a_record_the_parsed_and_effective_values_are_compared(tmp_path):
    facts = replace(_facts(tmp_path, requested={"speculative_num_draft_tokens": 4}), record=None)
    report = sr.build(facts)
    assert [f.field for f in report.findings] == ["--speculative-num-draft-tokens"]
    assert "parsed arguments" in report.how
    unknown = sr.build(replace(facts, requested={}))  # an Engine built in Python: nothing parsed
    assert unknown.ok and all(r["requested"] == "?" for r in unknown.settings)


def test_strict_mode_refuses_naming_the_first_findings_flag(tmp_path):
    report = sr.build(_facts(tmp_path, requested={"speculative_num_draft_tokens": 4},
                             record=[("_rewrite", {"speculative_num_draft_tokens": 2})], target={"vocab_size": 300}))
    error = sr.strict_refusal(report)
    assert (error.file, error.field) == (None, "--speculative-num-draft-tokens")
    assert sr.STRICT_ENV in error.fix and "vocab_size" in error.problem  # the other finding is named too
    assert sr.strict_refusal(sr.build(_facts(tmp_path))) is None
    assert [sr.strict({sr.STRICT_ENV: v}) for v in ("1", "true", "0", "", "no")] == [True, True, False, False, False]


def test_the_report_path(tmp_path):
    assert sr.report_path({}) is None
    assert sr.report_path({"SGLANG_EAGLE3_CAPTURE_DUMP": "/d"}) == sr.Path("/d") / "report" / sr.REPORT_FILENAME
    assert sr.report_path({sr.REPORT_ENV: "/r.json", "SGLANG_EAGLE3_CAPTURE_DUMP": "/d"}) == sr.Path("/r.json")


def test_a_server_args_record_is_read_as_sglang_declares_it(tmp_path):
    d, t = _draft(tmp_path)
    sa = SimpleNamespace(**{**CHAIN, "speculative_num_draft_tokens": 4}, cuda_graph_config=None,
                         disable_cuda_graph=True)
    sa._raw_input = {"speculative_num_draft_tokens": 4, "page_size": None}
    sa._resolved_overrides = [("_handle_eagle_family", {"speculative_num_draft_tokens": 3}),
                              ("_handle_eagle_family", {"speculative_num_draft_tokens": 2}),
                              ("_other", {"page_size": 1})]
    facts = serving.facts_from_server_args(sa, RELEASE, draft_path=str(d), target_path=str(t), plugin_active=True,
                                           context_length=512)
    assert facts.effective["speculative_num_draft_tokens"] == 2  # the last declaration wins
    assert facts.requested["speculative_num_draft_tokens"] == 4 and facts.requested["page_size"] is None
    assert facts.effective["cuda_graph"] is False and facts.effective["context_length"] == 512
    report = sr.build(facts)
    assert [f.field for f in report.findings] == ["--speculative-num-draft-tokens"]
    old = replace(RELEASE, resolution_record=False)  # a release that assigns the fields in place
    sa.speculative_num_draft_tokens = 2
    facts = serving.facts_from_server_args(sa, old, draft_path=str(d), target_path=str(t), plugin_active=True,
                                           requested={"speculative_num_draft_tokens": 4})
    assert facts.record is None and facts.effective["speculative_num_draft_tokens"] == 2
    assert [f.field for f in sr.build(facts).findings] == ["--speculative-num-draft-tokens"]


def test_at_the_resolution_seam_rank_0_logs_one_block_one_warning_per_finding_and_the_json(tmp_path, caplog,
                                                                                            monkeypatch):
    d, t = _draft(tmp_path)
    sa = SimpleNamespace(**{**CHAIN, "speculative_num_draft_tokens": 4}, model_path=str(t))
    sa._raw_input, sa._resolved_overrides = {}, [("_handle_eagle_family", {"speculative_num_draft_tokens": 2})]
    runner = SimpleNamespace(is_draft_worker=False, server_args=sa, model_config=SimpleNamespace(context_len=512))
    monkeypatch.setattr(runtime, "draft_model_path", lambda server_args: str(d))  # read by at_resolution
    caplog.set_level("INFO", logger=serving.__name__)
    report = serving.at_resolution(runner, environ={sr.REPORT_ENV: str(tmp_path / "r.json")})
    warnings = [r.getMessage() for r in caplog.records if r.levelname == "WARNING"]
    assert len(warnings) == 1 and "REWRITTEN: --speculative-num-draft-tokens" in warnings[0]
    assert sr.STRICT_ENV in warnings[0]
    infos = [r.getMessage() for r in caplog.records if r.levelname == "INFO"]
    assert sum("speculative setup (SGLang" in m for m in infos) == 1
    assert json.loads((tmp_path / "r.json").read_text()) == json.loads(json.dumps(report.to_dict()))
    serving.refuse_if_strict(report, environ={})  # not strict: served with the WARNING
    with pytest.raises(sr.DeploymentError) as e:
        serving.refuse_if_strict(report, environ={sr.STRICT_ENV: "1"})
    assert e.value.field == "--speculative-num-draft-tokens" and e.value.fix
    caplog.clear()
    (tmp_path / "a-file").write_text("")  # a report path under a regular file: unwritable, even for root
    assert serving.at_resolution(runner, environ={sr.REPORT_ENV: str(tmp_path / "a-file" / "r.json")}) is not None
    unwritten = [r for r in caplog.records if "not written" in r.getMessage()]
    assert len(unwritten) == 1 and unwritten[0].levelname == "WARNING"  # and serving goes on


def test_a_report_that_cannot_be_built_is_one_warning_and_no_refusal(caplog):
    runner = SimpleNamespace(is_draft_worker=False)  # no server_args: the report cannot be built
    assert serving.at_resolution(runner, environ={sr.STRICT_ENV: "1"}) is None
    assert [r.levelname for r in caplog.records] == ["WARNING"]
    serving.refuse_if_strict(None, environ={sr.STRICT_ENV: "1"})  # nothing to refuse on
    assert serving.at_resolution(SimpleNamespace(is_draft_worker=True)) is None


def test_the_resolution_seam_reports_before_the_policy_and_refuses_after_it():
    import inspect

    source = inspect.getsource(target_patch._wrap_resolve)
    assert source.index("at_resolution") < source.index("resolve_target_capture") < source.index("refuse_if_strict")
