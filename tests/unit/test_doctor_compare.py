"""``compare`` (doctor/compare.py) on dumps written by the package's own dump writer (``observe.dump.CaptureDump``)
from fixture samples.

No engine: the served tensors are built from the training tensors themselves, so the expected
verdicts follow from construction (exact copies, permuted chunks, decode rows whose context the batch
does not show). The engine-backed tests are in tests/engine/test_doctor_compare_served.py.
"""

import json

import pytest
import torch

from sglang_eagle3_capture.doctor.compare import MIN_LATE_RUN
from sglang_eagle3_capture.doctor.samples import load_sample
from sglang_eagle3_capture.observe.dump import CaptureDump
from support import cli
from support.fixture import fixture_dir


def run(capsys, *argv):
    """The command's exit status and its JSON report (status 0/1) or its error line (status 2)."""
    rc, out, err = cli.run(capsys, *argv)
    return rc, json.loads(out) if rc in (0, 1) else err


@pytest.fixture(scope="module")
def samples():
    return [load_sample(p) for p in sorted((fixture_dir() / "samples").glob("data_*.pt"))[:4]]


def write_dump(directory, batches, layer_ids=(-1, 1, 4)):
    """Each batch: a list of (sample, start, end, chunk order); rows are that sample's tokens start..end-1."""
    dump = CaptureDump(directory, metadata={"layer_ids": list(layer_ids), "tp_rank": 0}, max_batches=len(batches))
    for rows in batches:
        aux, ids, pos = [], [], []
        for s, a, b, order in rows:
            aux.append(torch.cat([s.chunks[i][a:b] for i in order], dim=-1))
            ids.append(s.input_ids[a:b])
            pos.append(torch.arange(a, b))
        dump(torch.cat(aux), torch.cat(ids), torch.cat(pos))
    return directory


def test_exact_copy_of_the_training_fc_input_matches(samples, tmp_path, capsys):
    d = write_dump(tmp_path / "d", [[(s, 0, s.seq_len, [0, 1, 2]) for s in samples[:3]]])
    rc, r = run(capsys, "compare", "--dump", d, "--data", *[s.path for s in samples], "--json")
    assert rc == 0 and r["rows_compared"] == sum(s.seq_len for s in samples[:3]) and r["rows_skipped"] == 0
    for c in r["served_chunks"]:
        best = {v["name"]: v for v in c["vs"]}[c["best_match"]]
        assert c["match"] and best["max_abs_diff"] == 0.0 and best["min_cos"] == pytest.approx(1.0)


def test_permuted_chunks_are_named(samples, tmp_path, capsys):
    d = write_dump(tmp_path / "d", [[(s, 0, s.seq_len, [1, 0, 2]) for s in samples[:2]]])
    rc, r = run(capsys, "compare", "--dump", d, "--data", *[s.path for s in samples], "--json")
    assert rc == 1 and not r["ok"]
    c0, c1, c2 = r["served_chunks"]
    assert ((c0["best_match"], c1["best_match"], c2["best_match"])
            == ("hidden_states[1]", "hidden_states[0]", "hidden_states[2]"))
    assert not c0["match"] and not c1["match"] and c2["match"]
    assert "served chunk 0 is hidden_states[1], but training fed hidden_states[0]" in r["summary"]


def test_short_late_runs_are_skipped_not_compared(samples, tmp_path, capsys):
    s = samples[0]
    p = s.seq_len - 2
    prefill = [(x, 0, x.seq_len - 2, [0, 1, 2]) for x in samples[:2]]
    # a verify-like run of two rows at p, p+1 carrying the wrong tensors: not comparable without its context
    decode = [(s, p, p + 2, [2, 1, 0])]
    d = write_dump(tmp_path / "d", [prefill, decode])
    rc, r = run(capsys, "compare", "--dump", d, "--data", *[x.path for x in samples], "--json")
    assert rc == 0 and r["rows_skipped"] == 2


def test_long_late_run_matching_one_sample_is_compared(samples, tmp_path, capsys):
    s = max(samples, key=lambda x: x.seq_len)
    assert s.seq_len >= MIN_LATE_RUN + 1
    d = write_dump(tmp_path / "d", [[(s, 1, s.seq_len, [2, 1, 0])]])  # a prefill after a cached first token
    rc, r = run(capsys, "compare", "--dump", d, "--data", *[x.path for x in samples], "--json")
    assert rc == 1 and r["rows_compared"] == s.seq_len - 1
    assert r["served_chunks"][0]["best_match"] == "hidden_states[2]"


def test_dump_of_another_width_is_a_clear_error(samples, tmp_path, capsys):
    d = tmp_path / "d"
    CaptureDump(d, metadata={"tp_rank": 0})(torch.zeros(4, 5), samples[0].input_ids[:4], torch.arange(4))
    rc, err = run(capsys, "compare", "--dump", d, "--data", samples[0].path)
    (batch,) = d.glob("*.safetensors")
    assert rc == 2 and f"{batch}: field 'aux_hidden_states': " in err and err.count("\n") == 1


def _one_batch(directory, sample, **meta):
    write_dump(directory, [[(sample, 0, sample.seq_len, [0, 1, 2])]])
    (meta_file,) = directory.glob("*.json")
    doc = json.loads(meta_file.read_text())
    doc.update(meta)
    meta_file.write_text(json.dumps(doc))
    return meta_file


def test_schema_policy_dump_metadata_is_kept_and_only_layer_ids_judged(samples, tmp_path):
    """doctor/sample_schema.py: a dump's metadata from a later version (one more key, a tab in a free-text value) is
    read; layer_ids, which compare reports and uses to tell runs apart, is typed strictly; the batch tensors too."""
    from safetensors.torch import load_file, save_file

    from sglang_eagle3_capture.core.errors import InputError
    from sglang_eagle3_capture.doctor import sample_schema as schema
    from sglang_eagle3_capture.doctor.compare import read_dump
    from support import schemas

    assert all(r in schemas.ALL and r.unknown == "keep" for r in (schema.BATCH, schema.METADATA))
    ok = _one_batch(tmp_path / "ok", samples[0], later_key={"x": 1}, process_title="sglang::\tscheduler")
    ((_, _, meta),) = read_dump(ok.parent)
    assert meta["later_key"] == {"x": 1} and meta["layer_ids"] == [-1, 1, 4]
    for i, bad in enumerate(([True, 1, 4], "-1,1,4", [-1, 1.0, 4])):
        meta_file = _one_batch(tmp_path / f"bad{i}", samples[0], layer_ids=bad)
        with pytest.raises(InputError) as e:
            read_dump(meta_file.parent)
        assert e.value.file == str(meta_file) and e.value.field.startswith("layer_ids") and e.value.fix, bad
    meta_file = _one_batch(tmp_path / "float-ids", samples[0])
    batch = meta_file.with_suffix(".safetensors")
    tensors = load_file(str(batch))
    save_file({**tensors, "input_ids": tensors["input_ids"].float()}, str(batch))
    with pytest.raises(InputError) as e:
        read_dump(batch.parent)
    assert (e.value.file, e.value.field) == (str(batch), "input_ids")
