"""``inspect DRAFT --target T -- ARGS`` (doctor/setup_args.py): the launch_server arguments resolved by the installed
SGLang's own parser, and the startup report the server would log, on the bundled fixtures/tiny.

The case behind the product (steps 1, topk 1, draft tokens 4) is a rewrite (exit 1) named with SGLang's own step,
source and words; the consistent chain is exit 0 with the plugin and exit 1 with ``--stock`` (stock SGLang mis-wires
the bundled draft); EAGLE with the EAGLE-3 draft is refused by the plugin's policy and a contradiction of the report;
arguments SGLang refuses, or a second draft after ``--``, are bad input (exit 2).
"""

import json

import pytest

from fixtures.specs import SPECS
from support.cli import run

TINY = SPECS["tiny"].directory
CPU = ["--device", "cpu", "--attention-backend", "torch_native", "--skip-tokenizer-init"]
CHAIN = ["--speculative-algorithm", "EAGLE3", "--speculative-num-steps", "1", "--speculative-eagle-topk", "1"]


def _inspect(capsys, *args, launch=()):
    rc, out, err = run(capsys, "inspect", TINY / "draft", "--target", TINY / "target", "--json", *args, "--",
                       *CPU, *launch)
    return rc, (json.loads(out) if out.strip() else None), err


def _row(r, name):
    return next(s for s in r["setup"]["settings"] if s["name"] == name)


@pytest.fixture(autouse=True)
def _plugin_active(monkeypatch):
    monkeypatch.delenv("SGLANG_PLUGINS", raising=False)
    monkeypatch.setattr("sglang_eagle3_capture.doctor.inspect.plugin_installed", lambda: True)


def test_the_case_behind_the_product_is_a_rewrite_named_with_sglangs_step_and_rule(capsys):
    rc, r, _ = _inspect(capsys, launch=[*CHAIN, "--speculative-num-draft-tokens", "4"])
    assert rc == 1 and r["verdict"] == "contradiction"
    row = _row(r, "num_draft_tokens")
    assert (row["requested"], row["effective"], row["changed_by"]) == (4, 2, "_handle_eagle_family")
    assert row["source"].startswith("sglang/srt/arg_groups/speculative_hook.py:")
    assert "speculative_num_steps + 1" in row["rule"]  # SGLang's own WARNING, captured while it resolved
    assert [f["field"] for f in r["setup"]["findings"]] == ["--speculative-num-draft-tokens"]


def test_the_consistent_chain_is_consistent_with_the_plugin_and_mis_wired_stock(capsys):
    rc, r, _ = _inspect(capsys, launch=[*CHAIN, "--speculative-num-draft-tokens", "2"])
    assert (rc, r["verdict"], r["setup"]["ok"]) == (0, "consistent", True)
    assert "which the plugin prevents" in r["summary"]
    rc, r, _ = _inspect(capsys, "--stock", launch=[*CHAIN, "--speculative-num-draft-tokens", "2"])
    assert (rc, r["verdict"], r["plugin_active"]) == (1, "mis-wired", False)


def test_eagle_with_the_eagle3_draft_is_refused(capsys):
    rc, r, _ = _inspect(capsys, launch=["--speculative-algorithm", "EAGLE", "--speculative-num-steps", "1",
                                        "--speculative-eagle-topk", "1", "--speculative-num-draft-tokens", "2"])
    assert rc == 1 and r["verdict"] == "refused" and "--speculative-algorithm" in r["summary"]
    assert "--speculative-algorithm" in [f["field"] for f in r["setup"]["findings"]]


def test_arguments_sglang_refuses_and_another_draft_are_bad_input(capsys):
    rc, r, err = _inspect(capsys, launch=["--speculative-num-steps", "not-a-number"])
    assert rc == 2 and r is None and "'--'" in err
    rc, r, err = _inspect(capsys, launch=["--speculative-draft-model-path", str(TINY / "target")])
    assert rc == 2 and "--speculative-draft-model-path" in err
