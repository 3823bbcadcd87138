"""Issue 28: ``inspect DRAFT -- ARGS`` predicts a real ``launch_server`` started with a ``--config`` file.

One CPU server on the bundled fixtures/tiny, its speculative chain (steps 1, topk 1, draft tokens 4: SGLang runs 2)
only in a YAML ``--config`` file, in strict mode: it refuses to start at the plugin's resolution seam, naming the
rewrite, and writes its setup report first. ``inspect`` on the same launch line must give the same report (every
setting as requested, effective and changed by, every finding) and the same refusal. The same comparison for every
launch of a table, against SGLang's own ``prepare_server_args`` in process, is tests/inprocess/test_preflight_agrees.py.
"""

import json

from fixtures.specs import SPECS
from harness.servers import READY, Server, server_env
from sglang_eagle3_capture.observe.report import REPORT_ENV, STRICT_ENV
from support.cli import run

TINY = SPECS["tiny"].directory


def _parts(report: dict) -> tuple[list, list]:
    settings = [(r["name"], r["requested"], r["effective"], r["changed_by"]) for r in report["settings"]]
    return settings, [(f["kind"], f["field"], f["file"]) for f in report["findings"]]


def test_inspect_predicts_a_server_started_with_a_config_file(tmp_path, capsys, monkeypatch):
    config = tmp_path / "launch.yaml"
    config.write_text(f"speculative-algorithm: EAGLE3\nspeculative-draft-model-path: {TINY / 'draft'}\n"
                      "speculative-num-steps: 1\nspeculative-eagle-topk: 1\nspeculative-num-draft-tokens: 4\n")
    env = server_env(SGLANG_CUDA_COREDUMP_BEFORE_CRASH_WAIT_SECS="0", **{REPORT_ENV: str(tmp_path / "setup.json"),
                                                                           STRICT_ENV: "1"})
    with Server(TINY / "target", tmp_path / "server.log", env=env, extra_args=["--config", str(config)]) as server:
        ready = server.wait(timeout=600)
        server.exit_code(timeout=180)
        text = server.text()
        launch_line = server.proc.args[server.proc.args.index("sglang.launch_server") + 1:]
    assert not ready and READY not in text, text[-3000:]
    assert "DeploymentError: field '--speculative-num-draft-tokens'" in text, text[-3000:]
    served = json.loads((tmp_path / "setup.json").read_text())

    monkeypatch.delenv("SGLANG_PLUGINS", raising=False)
    monkeypatch.setattr("sglang_eagle3_capture.doctor.inspect.plugin_installed", lambda: True)
    rc, out, err = run(capsys, "inspect", TINY / "draft", "--json", "--", *launch_line)
    predicted = json.loads(out)["setup"]
    assert rc == 1, err
    assert _parts(predicted) == _parts(served)
    assert [f["field"] for f in served["findings"]] == ["--speculative-num-draft-tokens"]
