"""``plan`` and ``verify --write-expected`` on the bundled tiny-llama draft-ttt and its committed samples: the
manifest's ``expected`` block round-trips through ``read_manifest`` and nothing else in the manifest changes; no
flag, no write; every setting proposed runs as SGLang asked (the rule here; SGLang's own parser:
tests/inprocess/test_rollout_sglang.py); bad input exits 2 naming the file or field."""

from __future__ import annotations

import json
import shutil

import pytest

from fixtures.specs import SPECS
from sglang_eagle3_capture.core.errors import InputError
from sglang_eagle3_capture.core.manifest import MANIFEST_FILENAME, MANIFEST_VERSION, read_manifest
from sglang_eagle3_capture.core.schemas.manifest import EXPECTED_VERSION
from sglang_eagle3_capture.doctor.expected import (
    DEFAULT_SETTINGS,
    ExpectedReport,
    Setting,
    parse_settings,
    runs_as_asked,
    write_expected,
)
from support.cli import run

LLAMA = SPECS["tiny-llama"].directory
SAMPLES, TARGET = LLAMA / "samples", LLAMA / "target"
SETTINGS = "1,1,2 3,1,4 3,2,6"


@pytest.fixture
def draft(tmp_path):
    d = tmp_path / "draft-ttt"
    shutil.copytree(LLAMA / "draft-ttt", d)
    return d


def test_write_expected_round_trips_and_keeps_the_rest_of_the_manifest(capsys, draft):
    before = json.loads((draft / MANIFEST_FILENAME).read_text())
    rc, _, err = run(capsys, "verify", draft, "--data", SAMPLES, "--target", TARGET, "--no-progress",
                     "--write-expected")
    assert rc == 0, err
    after = json.loads((draft / MANIFEST_FILENAME).read_text())
    expected = after.pop("expected")
    # the version that says the document carries the block (the release before it refuses the key)
    assert (before.pop("version"), after.pop("version")) == (MANIFEST_VERSION, EXPECTED_VERSION)
    assert after == before  # every other field as it was
    m = read_manifest(draft)
    assert m.expected == expected and expected["provenance"]["layer_ids"] == list(m.layer_ids)
    got = {(e["steps"], e["topk"], e["draft_tokens"]) for e in expected["acceptance"]}
    assert got == {(s.steps, s.topk, s.draft_tokens) for s in DEFAULT_SETTINGS}
    for s in DEFAULT_SETTINGS:  # one entry per setting, as many figures as positions drafted
        figures, why = m.expected_acceptance(s.steps, s.topk, s.draft_tokens)
        assert why is None and len(figures) == s.steps
    assert m.expected_acceptance(5, 1, 6)[0][0] > 0.9
    prov = expected["provenance"]
    assert prov["data_files"] == 16 and prov["positions"] > 0 and prov["tool"].startswith("sglang-eagle3-capture")
    assert all(runs_as_asked(Setting(e["steps"], e["topk"], e["draft_tokens"])) is None
               for e in expected["acceptance"])


def test_verify_without_the_flag_writes_nothing(capsys, draft):
    raw = (draft / MANIFEST_FILENAME).read_bytes()
    rc, _, _ = run(capsys, "verify", draft, "--data", SAMPLES, "--target", TARGET, "--no-progress")
    assert rc == 0 and (draft / MANIFEST_FILENAME).read_bytes() == raw


def test_plan_ranks_the_settings_and_prints_the_flags(capsys):
    rc, out, err = run(capsys, "plan", LLAMA / "draft-ttt", "--data", SAMPLES, "--target", TARGET, "--settings",
                       SETTINGS, "--no-progress", "--json")
    assert rc == 0, err
    r = json.loads(out)
    got = [(s["steps"], s["topk"], s["draft_tokens"]) for s in r["settings"]]
    assert sorted(got) == [(1, 1, 2), (3, 1, 4), (3, 2, 6)]
    lengths = [s["accept_length"] for s in r["settings"]]
    assert lengths == sorted(lengths, reverse=True) and lengths[0] > 3.0  # the TTT draft rewards depth
    best = r["settings"][0]
    assert best["flags"] == (f"--speculative-num-steps {best['steps']} --speculative-eagle-topk {best['topk']} "
                             f"--speculative-num-draft-tokens {best['draft_tokens']}")
    for s in r["settings"]:  # accept length = 1 + the per-position acceptance summed (one definition)
        assert s["accept_length"] == pytest.approx(1 + sum(s["per_position"]), abs=1e-3)
    rc, out, _ = run(capsys, "plan", LLAMA / "draft-ttt", "--data", SAMPLES, "--target", TARGET, "--settings",
                     SETTINGS, "--no-progress")
    assert rc == 0 and f"best:      {best['flags']}" in out


def test_no_default_setting_is_one_sglang_rewrites():
    assert DEFAULT_SETTINGS and all(runs_as_asked(s) is None for s in DEFAULT_SETTINGS)
    assert all(s.draft_tokens == s.steps + 1 for s in DEFAULT_SETTINGS if s.topk == 1)


@pytest.mark.parametrize("text", ["1,1,4", "3,1,2", "2,2,1", "1,2,9", "3;1;4", "a,b,c"])
def test_a_setting_sglang_would_not_run_as_asked_is_refused(text):
    with pytest.raises(InputError) as e:
        parse_settings(text)
    assert e.value.field == "--settings"


def test_bad_input_exits_2_naming_the_field_or_file(capsys, tmp_path, draft):
    rc, _, err = run(capsys, "plan", draft, "--data", SAMPLES, "--settings", "1,1,4")
    assert rc == 2 and "--settings" in err
    (draft / MANIFEST_FILENAME).unlink()
    rc, _, err = run(capsys, "plan", draft, "--data", SAMPLES)
    assert rc == 2 and MANIFEST_FILENAME in err
    with pytest.raises(InputError) as e:  # nothing to write into
        write_expected(draft, ExpectedReport(str(draft), (-1, 4, 5), [], []))
    assert str(e.value.file).endswith(MANIFEST_FILENAME) and e.value.field == "<file>"
    rc, _, err = run(capsys, "plan", LLAMA / "draft-ttt", "--data", tmp_path / "missing")
    assert rc == 2 and "missing" in err
