"""The CI gate of benchmarks/bench_e2e.py compares numbers measured in one run; check it refuses what it must."""

import sys

import pytest

from support import REPO

sys.path.insert(0, str(REPO / "benchmarks"))
from bench_e2e import gate  # noqa: E402


def _rows(manifest_rate, offline, stock_rate, same_output=True, drafts=2500):
    ref = [[1, 2, 3]]
    return {
        "no_spec": {"output_ids": ref},
        "stock": {"accept_rate": stock_rate, "output_ids": ref, "proposed_drafts": drafts},
        "manifest": {"accept_rate": manifest_rate, "offline_accuracy": offline, "proposed_drafts": drafts,
                     "output_ids": ref if same_output else [[1, 2, 4]]},
    }


def test_gate_passes_a_healthy_run():
    assert gate(_rows(0.93, 0.95, 0.45), 0.05, 0.2, 2000) == []


@pytest.mark.parametrize("rows, fragment", [
    (_rows(0.85, 0.95, 0.45), "below the draft's offline accuracy"),
    (_rows(0.93, 0.95, 0.80), "not at least 0.2 below"),
    (_rows(0.93, 0.95, 0.45, same_output=False), "greedy output differs"),
    (_rows(0.93, 0.95, 0.45, drafts=1999), "fewer than 2000"),
])
def test_gate_fails(rows, fragment):
    problems = gate(rows, 0.05, 0.2, 2000)
    assert any(fragment in p for p in problems), problems
