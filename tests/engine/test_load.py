"""benchmarks/bench_load.py, CI-sized: a real server with the plugin under concurrent streaming clients, 10% of the
requests aborted mid-generation, a capture dump that cannot create its directory, then a second server stopped with
SIGTERM mid-load.

Checked (bench_load.problems): no failed request and no error in the server log besides the dump's one ERROR, the
server and its scheduler alive and the same processes afterwards, the accept rate of the completed requests within
0.01 of a sequential run of the same prompts; after SIGTERM no process left, only complete dump batches, nothing the
plugin names left in /tmp or /dev/shm. The full-size run's figures are in benchmarks/results/load.json.
"""

import json
import sys

import pytest

from support import REPO

sys.path.insert(0, str(REPO / "benchmarks"))
import bench_load  # noqa: E402

PROMPTS, CLIENTS = 48, 16


@pytest.mark.timeout(1500)
def test_load_aborts_dump_failure_and_sigterm(tmp_path):
    rc = bench_load.main(["--num-prompts", str(PROMPTS), "--concurrency", str(CLIENTS), "--out-dir", str(tmp_path),
                          "--log-dir", str(tmp_path / "logs"), "--sigterm-after", "1.5"])
    doc = json.loads((tmp_path / "load.json").read_text())
    load, term = doc["load"], doc["sigterm"]
    assert rc == 0 and doc["ok"], doc["problems"]
    assert load["aborted"] == round(0.1 * PROMPTS) and load["aborted_mid_generation"] >= 1
    assert load["completed"] >= PROMPTS - load["aborted"] and load["failed_requests"] == 0
    assert load["server_error_lines"] == 0 and load["dump_error_lines"] == 1 and load["scheduler_restarts"] == 0
    assert load["accept_rate_diff"] <= 0.01
    assert term["surviving_processes"] == 0 and term["plugin_stray_files"] == [] and term["dump_temporaries"] == []
    assert (tmp_path / "load.csv").read_text().startswith("run,")
