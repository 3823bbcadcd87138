"""The startup report of the effective speculative setup (observe/sglang_report.py) through real ``launch_server``
processes on CPU, on the bundled fixtures/tiny (its draft carries a manifest).

The case behind the product, ``--speculative-num-steps 1 --speculative-eagle-topk 1 --speculative-num-draft-tokens
4``: SGLang runs 2 draft tokens; the report (log block and JSON) names the rewrite with SGLang's own resolution step
and its source, and ``SGLANG_EAGLE3_CAPTURE_STRICT=1`` refuses to start naming the flag. (A consistent setting
starting in strict mode with a clean report is test_acceptance_metrics_engine.py's: its fixtures/tiny server runs
strict. Without strict mode a finding is one WARNING and serving goes on: tests/unit/test_setup_report.py, at the same
seam with stand-ins.)
"""

import json

import pytest

from fixtures.specs import SPECS
from harness.servers import READY, Server, server_env
from sglang_eagle3_capture.core import releases
from sglang_eagle3_capture.observe.report import REPORT_ENV, STRICT_ENV

TINY = SPECS["tiny"].directory
REWRITE = ["--speculative-num-draft-tokens", "4"]  # after the harness's steps 1, topk 1, draft tokens 2
REFUSAL = "DeploymentError: field '--speculative-num-draft-tokens': 4 was rewritten to 2"


def _env(tmp_path, **extra):
    return server_env(SGLANG_CUDA_COREDUMP_BEFORE_CRASH_WAIT_SECS="0", **{REPORT_ENV: str(tmp_path / "setup.json")},
                      **extra)


def _row(report, name):
    return next(r for r in report["settings"] if r["name"] == name)


@pytest.mark.release  # also where SGLang keeps no resolution record: the parsed arguments name the rewrite
def test_the_rewrite_is_reported_and_strict_mode_refuses_it(tmp_path):
    with Server(TINY / "target", tmp_path / "server.log", draft=TINY / "draft", env=_env(tmp_path, **{STRICT_ENV: "1"}),
                extra_args=REWRITE) as server:
        ready = server.wait(timeout=600)
        rc = server.exit_code(timeout=180)
        text = server.text()
    assert not ready and READY not in text, text[-3000:]
    assert rc not in (None, 0)
    record = releases.installed_or_newest().resolution_record
    by = "_handle_eagle_family" if record else "argument resolution (the parsed value differs from the effective one)"
    where = " (sglang/srt/arg_groups/speculative_hook.py:" if record else ""
    assert REFUSAL in text and f"by SGLang's {by}{where}" in text
    assert f"unset {STRICT_ENV}" in text  # the fix names the way out
    assert f"eagle3-capture:   num_draft_tokens: requested 4, effective 2 <- {by}" in text
    assert text.count("eagle3-capture: speculative setup (SGLang") == 1  # one report per server
    report = json.loads((tmp_path / "setup.json").read_text())
    row = _row(report, "num_draft_tokens")
    assert (row["requested"], row["effective"], row["changed_by"]) == (4, 2, by)
    assert row["source"].startswith("sglang/srt/arg_groups/speculative_hook.py:") if record else row["source"] is None
    assert [f["field"] for f in report["findings"]] == ["--speculative-num-draft-tokens"] and not report["ok"]
    assert report["trained"]["layer ids"] == [-1, 0, 1]
