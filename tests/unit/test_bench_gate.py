"""The CI gate of benchmarks/bench_e2e.py compares numbers measured in one run; check it refuses what it must, for
every fixture it ran (fixtures/tiny and fixtures/tiny-llama by default, or those named by --fixture)."""

import sys

import pytest

from fixtures.specs import SPECS
from support import REPO

sys.path.insert(0, str(REPO / "benchmarks"))
from bench_e2e import DEFAULT_FIXTURES, fixture_path, fixture_runs, gate, gate_fixtures  # noqa: E402


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


def test_gate_checks_every_fixture_and_names_the_failing_one():
    by_fixture = {"tiny": _rows(1.0, 1.0, 0.24), "tiny-llama": _rows(0.99, 1.0, 0.85)}
    problems = gate_fixtures(by_fixture, 0.05, 0.2, 2000)
    assert len(problems) == 1 and problems[0].startswith("tiny-llama: stock accept rate 0.850"), problems
    assert gate_fixtures({"tiny": _rows(1.0, 1.0, 0.24)}, 0.05, 0.2, 2000) == []


def test_default_fixtures_are_the_bundled_ones_and_names_resolve():
    assert set(DEFAULT_FIXTURES) == set(SPECS)
    for name in DEFAULT_FIXTURES:
        assert fixture_path(name) == SPECS[name].directory
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
    with pytest.raises(ValueError, match="at most one"):
        fixture_runs(["tiny", "tiny-llama"], "/m/target")
    with pytest.raises(ValueError, match="needs --draft"):
        fixture_runs(None, "/m/target")
