"""The doctor's figures on a real trainer's data and what the serving alarm makes of them (issue 30; issue 28's
bounded metadata and the command line's exit statuses).

- speculators' own offline layout (``fixtures/speculators_trained.py`` ``write_data``: a ``datasets`` table built by
  speculators' own preprocessing, ``hidden_states/hs_{row}.safetensors``): each sample's loss mask is its table row's,
  as ``datasets`` itself reads it, and ``verify`` counts on it exactly what it counts on the legacy layout of the same
  samples;
- a manifest the draft's own training record contradicts is never called consistent, and a stock reading with the
  manifest's ids is built as the manifest's row;
- the ``expected`` block: a version the release before it refuses, tied to the layer ids it was measured with,
  bounded, written only when ``verify`` says OK and from scored positions; the alarm's reference is the served
  setting's figure, and a mis-wired stream keeps it firing;
- every bad input of ``verify``, ``plan`` and ``verify --write-expected`` exits 2 (or the verdict's 3), never 70.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch
from safetensors.torch import load_file, save_file

from fixtures import speculators_trained as st
from fixtures.samples import make_samples
from fixtures.specs import SPECS
from sglang_eagle3_capture.core.errors import InputError
from sglang_eagle3_capture.core.manifest import (
    MANIFEST_FILENAME,
    Manifest,
    manifest_from_dict,
    read_manifest,
    write_manifest,
)
from sglang_eagle3_capture.core.schemas import manifest as schema
from sglang_eagle3_capture.doctor.candidates import build_candidates, label_fc_inputs
from sglang_eagle3_capture.doctor.convert import convert
from sglang_eagle3_capture.doctor.expected import MAX_TOPK, Setting, measure, write_expected
from sglang_eagle3_capture.doctor.samples import expand_data_paths, load_sample
from sglang_eagle3_capture.doctor.verify import verify
from sglang_eagle3_capture.observe import acceptance, metrics
from support.cli import run

TARGET = st.FIXTURE / "target"
LLAMA = SPECS["tiny-llama"].directory
TTT, SAMPLES = LLAMA / "draft-ttt", LLAMA / "samples"
N_SPEC = 16
SERVED, OTHER = Setting(1, 1, 2), Setting(5, 1, 6)


@pytest.fixture(scope="module")
def spec(tmp_path_factory) -> Path:
    """speculators' offline data directory for the first prompts the fixture serves (prompts.json's seed)."""
    d = tmp_path_factory.mktemp("spec") / "data"
    st.write_data(TARGET, d, n=N_SPEC, seed=6)
    return d


@pytest.fixture(scope="module")
def converted(tmp_path_factory) -> Path:
    return convert(st.OUT, tmp_path_factory.mktemp("conv") / "draft", target=TARGET).dst


def _with_ids(src: Path, dst: Path, ids) -> Path:
    """A copy of draft ``src`` whose manifest lists ``ids``, everything else (provenance, expected) as it was."""
    shutil.copytree(src, dst)
    m = read_manifest(dst)
    write_manifest(dst, dataclasses.replace(m, layer_ids=tuple(ids)))
    return dst


# --- speculators' layout -----------------------------------------------------------------------------------------


def test_each_hs_sample_takes_its_table_rows_loss_mask(spec):
    from datasets import load_from_disk  # speculators' trainer reads the table with it

    table = load_from_disk(str(spec))
    paths = expand_data_paths([spec])
    assert [p.parent.name for p in paths] == ["hidden_states"] * N_SPEC  # token_freq.pt beside the table is no sample
    for p in paths:
        s = load_sample(p)
        row = table[int(p.stem[len("hs_"):])]
        assert torch.equal(s.loss_mask, torch.as_tensor(row["loss_mask"]) != 0)  # hs files hold no mask: the table's
        assert 0 < int(s.loss_mask.sum()) < s.seq_len  # the response only: the prompt is not scored


def test_verify_counts_on_speculators_layout_what_it_counts_on_the_legacy_layout(spec, converted, tmp_path):
    make_samples(TARGET, tmp_path / "legacy", n=N_SPEC, seed=6, lang=st.language(), layer_ids=list(range(-1, 7)))
    on_spec = verify(converted, [spec], target=TARGET, progress=False, max_combinations=0)
    on_legacy = verify(converted, [tmp_path / "legacy"], target=TARGET, progress=False, max_combinations=0)
    a, b = on_spec.candidates.manifest, on_legacy.candidates.manifest
    assert on_spec.ok and (a.positions, a.correct_top1) == (b.positions, b.correct_top1) and a.positions > 0
    assert on_spec.vocabulary.restricted_correct == on_legacy.vocabulary.restricted_correct


def test_a_sample_whose_tokens_differ_from_its_row_is_refused(spec, tmp_path):
    data = Path(shutil.copytree(spec, tmp_path / "data"))
    p = data / "hidden_states" / "hs_2.safetensors"
    t = load_file(str(p))
    t["token_ids"] = t["token_ids"].roll(1)
    save_file(t, str(p))
    with pytest.raises(InputError) as e:
        load_sample(p)
    assert (e.value.file, e.value.field) == (str(p), "token_ids")
    p.rename(data / "hidden_states" / f"hs_{N_SPEC}.safetensors")  # past the table's rows
    with pytest.raises(InputError) as e:
        load_sample(data / "hidden_states" / f"hs_{N_SPEC}.safetensors")
    assert e.value.field == "<file>"


def test_a_table_row_whose_mask_is_not_one_per_token_is_refused(spec, tmp_path):
    from datasets import Dataset, load_from_disk

    rows = load_from_disk(str(spec)).with_format(None).to_dict()
    rows["loss_mask"][3] = rows["loss_mask"][3][:-1]
    data = Path(shutil.copytree(spec / "hidden_states", tmp_path / "data" / "hidden_states")).parent
    Dataset.from_dict(rows).save_to_disk(str(data))
    with pytest.raises(InputError) as e:
        load_sample(data / "hidden_states" / "hs_3.safetensors")
    assert e.value.field == "loss_mask[3]" and Path(e.value.file).parent == data


def test_a_table_naming_a_file_outside_its_directory_is_refused(spec, tmp_path):
    data = Path(shutil.copytree(spec, tmp_path / "data"))
    state = json.loads((data / "state.json").read_text())
    state["_data_files"][0]["filename"] = "../data-00000-of-00001.arrow"
    (data / "state.json").write_text(json.dumps(state))
    with pytest.raises(InputError) as e:
        load_sample(data / "hidden_states" / "hs_0.safetensors")
    assert (e.value.file, e.value.field) == (str(data / "state.json"), "_data_files[0].filename")


def test_hs_samples_without_their_table_are_scored_everywhere_said_so_and_plan_refuses(spec, converted, tmp_path,
                                                                                       capsys):
    alone = Path(shutil.copytree(spec / "hidden_states", tmp_path / "alone"))
    rc, out, _ = run(capsys, "verify", converted, "--data", alone, "--target", TARGET, "--no-progress", "--json")
    assert rc == 0 and any("carry no loss mask" in n for n in json.loads(out)["notes"])
    with pytest.raises(InputError) as e:
        measure(converted, [alone], target=TARGET, settings=[SERVED])
    assert e.value.field == "loss_mask" and Path(e.value.file).parent == alone
    rc, _, _ = run(capsys, "plan", converted, "--data", alone, "--target", TARGET, "--no-progress")
    assert rc == 2


# --- the draft's training record -----------------------------------------------------------------------------------


def test_a_manifest_its_training_record_contradicts_is_not_consistent(spec, converted, tmp_path, capsys):
    """convert kept speculators' ids ([0, 5, 7]) in the manifest's provenance; a manifest edited to [-1, 4, 5] since
    is FAIL on the draft's own samples (which store the recorded layers), and plan and --write-expected refuse it."""
    bad = _with_ids(converted, tmp_path / "bad", (-1, 4, 5))
    raw = (bad / MANIFEST_FILENAME).read_bytes()
    rc, out, err = run(capsys, "verify", bad, "--data", spec, "--target", TARGET, "--no-progress", "--json",
                       "--write-expected")
    r = json.loads(out)
    assert rc == 1 and r["contradiction"] and not r["ok"] and not r["ambiguous"], r["summary"]
    assert not any(w["is_manifest"] for w in r["wirings"])  # layer 5 is not stored: nothing stands in for it
    assert (bad / MANIFEST_FILENAME).read_bytes() == raw and "NOT written" in err
    with pytest.raises(InputError) as e:
        measure(bad, [spec], target=TARGET, settings=[SERVED])
    assert (e.value.file, e.value.field) == (str(bad / MANIFEST_FILENAME), "layer_ids")


def test_a_stock_reading_with_the_manifests_ids_is_built_as_the_manifests_row():
    """Samples that name none of their stored tensors: one labelling serves every wiring, so a stock reading that
    feeds the manifest's ids is the manifest's row, never 'not buildable' beside it."""
    ids = [None, None, None, None]
    labels = label_fc_inputs(ids, (0, 1, 2), (1, 2, 3), None, ids)
    cs = build_candidates(manifest_ids=(1, 2, 3), num_layers=7, stock=[("stock default", (1, 2, 3))],
                          chunk_ids=labels.ids, fc_chunks=(0, 1, 2))
    assert cs.manifest is not None and "stock default [1, 2, 3]" in cs.manifest.names
    assert not any("stock default" in u for u in cs.unbuildable) and not labels.contradiction
    recorded = label_fc_inputs(ids, (0, 1, 2), (1, 2, 3), ((1, 2, 4), "config.json"), ids)
    assert recorded.ids[:3] == [1, 2, 4] and recorded.contradiction


# --- the expected block ---------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def ttt_expected(tmp_path_factory) -> Path:
    """The TTT draft with the figures of a 1-step and a 5-step chain written by --write-expected's own code."""
    d = Path(shutil.copytree(TTT, tmp_path_factory.mktemp("ttt") / "draft"))
    write_expected(d, measure(d, [SAMPLES], settings=[SERVED, OTHER]))
    return d


def test_a_manifest_with_figures_carries_the_version_that_added_them(ttt_expected):
    doc = json.loads((ttt_expected / MANIFEST_FILENAME).read_text())
    assert doc["version"] == schema.EXPECTED_VERSION
    # the release before the block read version 1 (and 2) and refused the key: a document it cannot read must not
    # claim either; one without the block still claims 1
    assert schema.EXPECTED_VERSION not in (schema.VERSION, schema.FINAL_NORM_VERSION)
    plain = {k: v for k, v in doc.items() if k != "expected"}
    assert Manifest(**_fields(manifest_from_dict(plain))).to_dict()["version"] == schema.VERSION
    for old in (schema.VERSION, schema.FINAL_NORM_VERSION):  # what 0.2.0 wrote before: still read, figures and all
        m = manifest_from_dict({**doc, "version": old})
        assert m.expected_acceptance(1, 1, 2)[0] is not None


def _fields(m: Manifest) -> dict:
    return {f.name: getattr(m, f.name) for f in dataclasses.fields(m) if f.name != "path"}


def test_figures_measured_for_other_layer_ids_arm_no_alarm(ttt_expected, tmp_path, fresh, caplog):
    moved = _with_ids(ttt_expected, tmp_path / "moved", (-1, 5, 6))
    figures, why = read_manifest(moved).expected_acceptance(1, 1, 2)
    assert figures is None and "expected.provenance.layer_ids" in why
    caplog.set_level(logging.INFO, logger=metrics.__name__)
    counter = _counter(moved, SERVED)
    assert counter.alarm is None
    assert [r.levelno for r in caplog.records if "no acceptance alarm" in r.getMessage()] == [logging.WARNING]


@pytest.mark.parametrize("bloat", ["per_position", "acceptance"])
def test_what_is_read_of_the_block_is_bounded(ttt_expected, bloat):
    """300,000 figures (the probe's) are refused by length, before any is read, and arm nothing."""
    m = read_manifest(ttt_expected)
    block = json.loads(json.dumps(m.expected))
    if bloat == "per_position":
        block["acceptance"][0]["per_position"] = [0.5] * 300_000
    else:
        block["acceptance"] = block["acceptance"] * 150_000
    figures, why = dataclasses.replace(m, expected=block).expected_acceptance(1, 1, 2)
    assert figures is None and f"'expected.acceptance{'[0].per_position' if bloat == 'per_position' else ''}'" in why


def test_the_alarms_reference_is_the_served_settings_figure_and_a_miswired_stream_keeps_it_firing(ttt_expected, fresh):
    """Served at 1,1,2: the reference is the 1-step chain's figure, not the 5-step chain's. The stream a server
    feeding the fc other layers produces (the walk of wiring [-1, 5, 6] on the same samples, spread evenly) fires the
    alarm at its first full window and it never clears after."""
    m = read_manifest(ttt_expected)
    counter = _counter(ttt_expected, SERVED)
    assert counter.alarm.expected == m.expected_acceptance(1, 1, 2)[0][0] != m.expected_acceptance(5, 1, 6)[0][0]
    miswired = measure(_with_ids(TTT, ttt_expected.parent / "miswired", (-1, 5, 6)), [SAMPLES], settings=[SERVED])
    hist = miswired.figures[0].walk.histogram
    steps = sum(hist)
    stream = [(i + 1) * hist[1] // steps > i * hist[1] // steps for i in range(steps)]  # hist[1] accepted, evenly
    window = counter.settings.window
    states = []
    for i in range(5 * window):
        counter.record(int(stream[i % steps]))
        states.append(counter.alarm.firing)
    assert states[window - 1] and all(states[window - 1:])  # fires at the first full window, holds after it
    assert sum(stream) / steps < counter.alarm.expected - counter.settings.margin


def _counter(draft: Path, s: Setting):
    args = SimpleNamespace(speculative_algorithm="EAGLE3", speculative_num_steps=s.steps,
                           speculative_eagle_topk=s.topk, speculative_num_draft_tokens=s.draft_tokens,
                           speculative_draft_model_path=str(draft), model_path=str(TARGET), _resolved_overrides=[])
    counter = metrics._Counter(args, None, acceptance.Settings.from_environ({}))
    counter._start()
    return counter


@pytest.fixture
def fresh(monkeypatch):
    monkeypatch.setattr(metrics, "draft_model_path", lambda server_args: server_args.speculative_draft_model_path)


def test_zero_scored_positions_give_no_figures(tmp_path, capsys):
    data = _edited_samples(tmp_path, "data", lambda s: {**s, "loss_mask": torch.zeros_like(s["loss_mask"])})
    draft = Path(shutil.copytree(TTT, tmp_path / "draft"))
    with pytest.raises(InputError) as e:
        measure(draft, [data], settings=[SERVED])
    assert e.value.field == "--data"
    rc, _, _ = run(capsys, "plan", draft, "--data", data, "--no-progress")
    assert rc == 2
    raw = (draft / MANIFEST_FILENAME).read_bytes()
    rc, _, _ = run(capsys, "verify", draft, "--data", data, "--no-progress", "--write-expected")
    assert rc == 3 and (draft / MANIFEST_FILENAME).read_bytes() == raw  # verify: no scored position, ambiguous


EXPORT = textwrap.dedent("""
    import json, logging, sys
    from types import SimpleNamespace
    from prometheus_client import REGISTRY, generate_latest
    from prometheus_client.parser import text_string_to_metric_families
    from sglang_eagle3_capture.observe import metrics
    logging.basicConfig(level=logging.INFO, stream=sys.stderr)
    metrics.draft_model_path = lambda a: a.speculative_draft_model_path
    metrics.threading.Thread = lambda **kw: SimpleNamespace(start=lambda: None)  # flushed by hand below
    args = SimpleNamespace(speculative_algorithm="EAGLE3", speculative_num_steps=1, speculative_eagle_topk=1,
                           speculative_num_draft_tokens=2, speculative_draft_model_path=sys.argv[1], model_path="t",
                           _resolved_overrides=[])
    labels = {"model_name": "m", "position": "eu-west"}  # an --extra-metric-labels key named like the plugin's own
    context = SimpleNamespace(is_stats_logging_rank=True, enable_metrics=True, collector=SimpleNamespace(labels=labels))
    metrics._after_init(SimpleNamespace(metrics_collector_context=context, server_args=args))
    for n in (1, 1, 0):
        metrics._on_verify(n)
    metrics.flush()
    out = {}
    for family in text_string_to_metric_families(generate_latest(REGISTRY).decode()):
        for s in family.samples:
            if s.name.startswith(metrics.PREFIX):
                out.setdefault(s.name, []).append([s.labels, s.value])
    print(json.dumps({"counting": metrics._COUNTER is not None, "series": out}))
""")


def test_an_extra_label_named_like_the_plugins_own_neither_stops_counting_nor_exports_more_than_the_steps(
        ttt_expected):
    """SGLang's scheduler labels with ``position`` from --extra-metric-labels: counting, the alarm and the export go on
    with that label left off the plugin's series, one WARNING naming the fix; the expected gauges are one per position
    the server drafts."""
    import os

    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2])}
    env.pop("PROMETHEUS_MULTIPROC_DIR", None)
    p = subprocess.run([sys.executable, "-c", EXPORT, str(ttt_expected)], capture_output=True, text=True, env=env,
                       timeout=120)
    assert p.returncode == 0, p.stderr[-3000:]
    doc = json.loads(p.stdout)
    series = doc["series"]
    assert doc["counting"]
    accepted = series[f"{metrics.PREFIX}draft_position_accepted_total"]
    assert accepted == [[{"model_name": "m", "position": "0"}, 2.0]]
    assert len(series[f"{metrics.PREFIX}expected_position_acceptance"]) == SERVED.steps
    warned = [ln for ln in p.stderr.splitlines() if ln.startswith("WARNING") and "--extra-metric-labels" in ln]
    assert len(warned) == 1 and "acceptance counting stopped" not in p.stderr


# --- exit statuses of the commands ----------------------------------------------------------------------------------


def _edited_samples(tmp_path: Path, name: str, edit) -> Path:
    """The first three committed samples, each ``edit``ed (a dict of tensors in, one out), with their data config."""
    out = tmp_path / name
    out.mkdir()
    shutil.copy(SAMPLES / "data_config.json", out)
    for p in sorted(SAMPLES.glob("data_*.pt"))[:3]:
        torch.save(edit(torch.load(p, weights_only=True)), out / p.name)
    return out


def _short_samples(tmp_path: Path) -> Path:
    return _edited_samples(tmp_path, "short", lambda s: {"input_ids": s["input_ids"][:1],
                                                         "loss_mask": s["loss_mask"][:1],
                                                         "hidden_states": [h[:1] for h in s["hidden_states"]]})


def _narrow_samples(tmp_path: Path) -> Path:
    return _edited_samples(tmp_path, "narrow", lambda s: {**s, "hidden_states": [h[:, :32].contiguous()
                                                                                  for h in s["hidden_states"]]})


def _small_vocab_draft(tmp_path: Path) -> Path:
    """The TTT draft cut to a draft vocabulary of 8 (a topk of 10 is then past it)."""
    d = Path(shutil.copytree(TTT, tmp_path / "small-vocab"))
    w = load_file(str(d / "model.safetensors"))
    w["lm_head.weight"], w["d2t"] = w["lm_head.weight"][:8].clone(), w["d2t"][:8].clone()
    w["t2d"] = torch.zeros_like(w["t2d"])
    w["t2d"][torch.arange(8) + w["d2t"]] = True
    save_file(w, str(d / "model.safetensors"))
    cfg = json.loads((d / "config.json").read_text())
    (d / "config.json").write_text(json.dumps({**cfg, "draft_vocab_size": 8}))
    return d


def _no_fc_draft(tmp_path: Path) -> Path:
    d = Path(shutil.copytree(TTT, tmp_path / "no-fc"))
    w = load_file(str(d / "model.safetensors"))
    w.pop("fc.weight")
    save_file(w, str(d / "model.safetensors"))
    return d


# (case, how to build (draft, data, extra arguments), exit status per command: verify, plan, verify --write-expected)
CASES = {
    "samples of one token": (lambda t: (TTT, _short_samples(t), []), (3, 2, 3)),
    "samples of another width": (lambda t: (TTT, _narrow_samples(t), []), (2, 2, 2)),
    # verify already calls the cut draft AMBIGUOUS, so --write-expected writes nothing and exits with that verdict
    "topk past the draft vocabulary": (lambda t: (_small_vocab_draft(t), SAMPLES, ["--settings", "2,10,4"]),
                                       (None, 2, 3)),
    "topk past the bound": (lambda t: (TTT, SAMPLES, ["--settings", f"2,{MAX_TOPK + 1},4"]), (None, 2, 2)),
    "--dtype checkpoint without fc.weight": (lambda t: (_no_fc_draft(t), SAMPLES, ["--dtype", "checkpoint"]),
                                             (2, 2, 2)),
    "--threads 100000": (lambda t: (TTT, SAMPLES, ["--threads", "100000"]), (2, 2, 2)),
}
COMMANDS = (("verify",), ("plan",), ("verify", "--write-expected"))
TABLE = [pytest.param(case, command, want, id=f"{case}-{' '.join(command)}") for case, (_, wants) in CASES.items()
         for command, want in zip(COMMANDS, wants) if want is not None]  # verify takes --settings only to write


@pytest.mark.parametrize("case, command, want", TABLE)
def test_bad_input_exits_2_or_the_verdict_never_70(case, command, want, tmp_path, capsys):
    build, _ = CASES[case]
    draft, data, extra = build(tmp_path)
    draft = Path(shutil.copytree(draft, tmp_path / "draft"))
    raw = (draft / MANIFEST_FILENAME).read_bytes()
    rc, _, err = run(capsys, command[0], draft, "--data", data, "--no-progress", *command[1:], *extra)
    assert rc == want, err
    assert "internal error" not in err and (draft / MANIFEST_FILENAME).read_bytes() == raw


def test_the_bad_inputs_name_their_field(tmp_path):
    with pytest.raises(InputError) as e:
        measure(TTT, [_narrow_samples(tmp_path)], settings=[SERVED])
    assert e.value.field is None and e.value.file.endswith("data_0.pt")
    with pytest.raises(InputError) as e:
        measure(_small_vocab_draft(tmp_path), [SAMPLES], settings=[Setting(2, 10, 4)])
    assert e.value.field == "--settings"
    from sglang_eagle3_capture.doctor.expected import _dtype

    with pytest.raises(InputError) as e:
        _dtype(_no_fc_draft(tmp_path), "checkpoint")
    assert e.value.field == "fc.weight"

