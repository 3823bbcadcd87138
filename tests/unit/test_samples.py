"""Sample readers (doctor/samples.py): each training pipeline's on-disk layout, and clear errors for bad files.

Files are written the way each pipeline writes them (``torch.save`` of a dict for speculators' legacy
``.pt`` and SpecForge's ``.ckpt``/``.ckpt.gz``, ``safetensors.torch.save_file`` for ``hs_*.safetensors``),
then read back; the chunks must be the stored tensors exactly (``torch.equal``).
"""

from __future__ import annotations

import datetime
import gzip
import json

import pytest
import torch
from safetensors.torch import save_file

from sglang_eagle3_capture.core.errors import InputError
from sglang_eagle3_capture.doctor.samples import (
    HS_SAFETENSORS,
    LEGACY_PT,
    SPECFORGE_CKPT,
    expand_data_paths,
    load_sample,
)

SEQ, H = 9, 8


def _hidden(n, seed=0):
    g = torch.Generator().manual_seed(seed)
    return [torch.randn(SEQ, H, generator=g) for _ in range(n)]


def _ids(seed=0):
    return torch.randint(0, 100, (SEQ,), generator=torch.Generator().manual_seed(seed))


def _legacy(tmp_path, name="data_0.pt", **override):
    d = {"input_ids": _ids(), "hidden_states": _hidden(4), "loss_mask": torch.ones(SEQ, dtype=torch.long)}
    d.update(override)
    p = tmp_path / name
    torch.save(d, p)
    return p, d


def test_legacy_pt_reads_chunks_exactly_and_marks_training_fc_input(tmp_path):
    p, d = _legacy(tmp_path)
    s = load_sample(p)
    assert s.layout == LEGACY_PT
    assert torch.equal(s.input_ids, d["input_ids"])
    assert len(s.chunks) == 4 and all(torch.equal(a, b) for a, b in zip(s.chunks, d["hidden_states"]))
    # speculators standardize_data_v1: fc = cat(hidden_states[:-1]), verifier = hidden_states[-1]
    assert s.fc_chunks == (0, 1, 2) and s.target_chunk == 3
    assert s.chunk_layer_ids == (None,) * 4


def refused(path, field):
    """The InputError ``load_sample(path)`` raises: it names ``path`` and ``field`` and gives a fix."""
    with pytest.raises(InputError) as e:
        load_sample(path)
    assert (e.value.file, e.value.field) == (str(path), field) and e.value.fix, e.value
    return e.value


def test_legacy_data_config_gives_layer_ids(tmp_path):
    p, _ = _legacy(tmp_path)
    cfg = tmp_path / "data_config.json"
    cfg.write_text(json.dumps({"hidden_states": {"layer_ids": [2, 3, 4, 6]}}))
    assert load_sample(p).chunk_layer_ids == (2, 3, 4, 6)
    for bad in ([2, 3], [2, 3, 3, 4], [2, 3, -2, 4], [True, 3, 4, 6], "2,3,4,6"):
        cfg.write_text(json.dumps({"hidden_states": {"layer_ids": bad}}))
        with pytest.raises(InputError) as e:
            load_sample(p)
        assert e.value.file == str(cfg) and e.value.field.startswith("hidden_states.layer_ids") and e.value.fix, bad


def test_hs_safetensors(tmp_path):
    hs = torch.stack(_hidden(4), dim=1)  # [seq, layers, hidden]
    ids = _ids()
    p = tmp_path / "hs_0.safetensors"
    save_file({"hidden_states": hs, "token_ids": ids}, str(p))
    s = load_sample(p)
    assert s.layout == HS_SAFETENSORS and s.loss_mask is None
    assert torch.equal(s.input_ids, ids)
    assert all(torch.equal(s.chunks[i], hs[:, i]) for i in range(4))
    assert s.fc_chunks == (0, 1, 2) and s.target_chunk == 3


@pytest.mark.parametrize("gz", [False, True])
def test_specforge_ckpt_splits_aux_into_chunks(tmp_path, gz):
    aux = _hidden(3)
    final = _hidden(1, seed=5)[0]
    d = {
        "input_ids": _ids(),  # SpecForge writes row["input_ids"].view(-1)
        "loss_mask": torch.ones(SEQ, dtype=torch.long),
        "hidden_state": final.unsqueeze(0),
        "aux_hidden_state": torch.cat(aux, dim=-1).unsqueeze(0),
    }
    p = tmp_path / ("data_0.ckpt.gz" if gz else "data_0.ckpt")
    if gz:
        with gzip.open(p, "wb") as f:
            torch.save(d, f)
    else:
        torch.save(d, p)
    s = load_sample(p)
    assert s.layout == SPECFORGE_CKPT
    assert all(torch.equal(s.chunks[i], aux[i]) for i in range(3)) and torch.equal(s.chunks[3], final)
    assert s.fc_chunks == (0, 1, 2) and s.target_chunk == 3


def test_directory_expands_to_sample_files(tmp_path):
    _legacy(tmp_path, "data_1.pt")
    _legacy(tmp_path, "data_0.pt")
    (tmp_path / "notes.txt").write_text("x")
    assert [p.name for p in expand_data_paths([tmp_path])] == ["data_0.pt", "data_1.pt"]
    for bad in (tmp_path / "missing.pt", tmp_path / "empty"):
        (tmp_path / "empty").mkdir(exist_ok=True)
        with pytest.raises(InputError) as e:
            expand_data_paths([bad])
        assert e.value.file == str(bad) and e.value.fix


@pytest.mark.parametrize(
    "override, field",
    [
        ({"input_ids": None}, "input_ids"),
        ({"hidden_states": torch.zeros(4, SEQ, H)}, "hidden_states"),
        ({"hidden_states": _hidden(3)[:1]}, "hidden_states"),
        ({"hidden_states": _hidden(2) + [torch.zeros(SEQ, H + 1)]}, "hidden_states[2]"),
        ({"hidden_states": _hidden(2) + [torch.zeros(SEQ - 1, H)]}, "hidden_states[2]"),
        ({"hidden_states": _hidden(2) + [torch.zeros(SEQ)]}, "hidden_states[2]"),
        ({"hidden_states": _hidden(2) + [torch.full((SEQ, H), float("nan"))]}, "hidden_states[2]"),
        ({"hidden_states": _hidden(2) + [torch.zeros(SEQ, H, dtype=torch.long)]}, "hidden_states[2]"),
        ({"loss_mask": torch.ones(SEQ + 2)}, "loss_mask"),
        ({"input_ids": torch.zeros(SEQ)}, "input_ids"),
        ({"input_ids": torch.zeros(SEQ, dtype=torch.bool)}, "input_ids"),
        ({"input_ids": torch.zeros(2, SEQ, dtype=torch.long)}, "input_ids"),
    ],
)
def test_legacy_bad_files_name_file_and_key(tmp_path, override, field):
    p, _ = _legacy(tmp_path, **override)
    refused(p, field)


def test_missing_key_lists_expected_keys(tmp_path):
    p = tmp_path / "data_0.pt"
    torch.save({"input_ids": _ids(), "loss_mask": torch.ones(SEQ)}, p)
    e = refused(p, "hidden_states")
    assert "['input_ids', 'loss_mask']" in e.problem  # what the file has: a sample of another layout?


def test_layouts_keep_unknown_keys(tmp_path):
    # pipelines add keys of their own: a layout is read for its declared keys only
    p, _ = _legacy(tmp_path, extra=torch.zeros(3), note=torch.ones(1))
    assert load_sample(p).layout == LEGACY_PT
    q = tmp_path / "hs_0.safetensors"
    save_file({"hidden_states": torch.zeros(SEQ, 3, H), "token_ids": _ids(), "extra": torch.zeros(2)}, str(q))
    assert load_sample(q).layout == HS_SAFETENSORS


def test_a_sample_that_is_not_a_dict_is_named(tmp_path):
    p = tmp_path / "data_0.pt"
    torch.save([torch.zeros(3)], p)
    refused(p, "<document>")


def test_hs_safetensors_token_count_mismatch(tmp_path):
    p = tmp_path / "hs_3.safetensors"
    save_file({"hidden_states": torch.zeros(SEQ, 3, H), "token_ids": torch.zeros(SEQ - 1, dtype=torch.long)}, str(p))
    refused(p, "token_ids")


def test_specforge_aux_width_not_multiple(tmp_path):
    p = tmp_path / "data_0.ckpt"
    good = {"input_ids": _ids(), "loss_mask": torch.ones(SEQ), "hidden_state": torch.zeros(1, SEQ, H),
            "aux_hidden_state": torch.zeros(1, SEQ, 3 * H)}
    torch.save({**good, "aux_hidden_state": torch.zeros(1, SEQ, 3 * H - 1)}, p)
    refused(p, "aux_hidden_state")
    torch.save({**good, "hidden_state": torch.zeros(2, SEQ, H)}, p)  # one sample per file: never a silent [0]
    refused(p, "hidden_state")


def test_pickled_objects_are_refused(tmp_path):
    # any non-tensor global (here a datetime) must be refused by the weights_only unpickler
    p = tmp_path / "data_0.pt"
    torch.save({"input_ids": _ids(), "hidden_states": _hidden(2), "loss_mask": torch.ones(SEQ),
                "x": datetime.timedelta(days=1)}, p)
    assert "weights_only" in refused(p, "<data>").problem


def test_not_a_sample_file(tmp_path):
    p = tmp_path / "x.bin"
    p.write_bytes(b"abc")
    refused(p, "<file>")
    q = tmp_path / "hs_0.safetensors"
    q.write_bytes(b"garbage")
    refused(q, "<header>")


def test_legacy_sample_lengths_must_agree(tmp_path):
    p, _ = _legacy(tmp_path, "data_3.pt")
    lengths = tmp_path / "sample_lengths.json"
    lengths.write_text(json.dumps({"3": SEQ}))
    assert load_sample(p).seq_len == SEQ
    lengths.write_text(json.dumps({"3": SEQ + 1}))
    refused(p, "input_ids")
    for bad in ("9", True, -1, 9.0):
        lengths.write_text(json.dumps({"3": bad}))
        with pytest.raises(InputError) as e:
            load_sample(p)
        assert (e.value.file, e.value.field) == (str(lengths), "3") and e.value.fix, bad


def test_sample_lengths_judges_only_the_sample_read(tmp_path):
    # the index describes every file of the run: another sample's bad entry is that sample's problem
    p, _ = _legacy(tmp_path, "data_3.pt")
    (tmp_path / "sample_lengths.json").write_text(json.dumps({"3": SEQ, "4": "broken", "5": None}))
    assert load_sample(p).seq_len == SEQ


def test_schema_policy_samples_keep_unknown_keys_and_type_declared_ones_strictly():
    """doctor/sample_schema.py: forward-compatible (a pipeline's extra keys are kept), strict on what is scored."""
    from sglang_eagle3_capture.core import records
    from sglang_eagle3_capture.doctor import sample_schema as schema
    from support import schemas

    assert all(r in schemas.ALL for r in schema.RECORDS)
    assert all(r.unknown == "keep" and not r.metadata for r in schema.RECORDS)
    doc = {"model": "x", "hidden_states": {"layer_ids": [-1, 2], "dtype": "bf16"}, "later": {"key": 1}}
    assert records.read(schema.DATA_CONFIG, doc, file="data_config.json") == doc
    for bad in ([True, 2], [-2, 2], [1.0, 2], ["1", 2]):
        with pytest.raises(InputError) as e:
            records.read(schema.DATA_CONFIG, {"hidden_states": {"layer_ids": bad}}, file="data_config.json")
        assert e.value.field.startswith("hidden_states.layer_ids[") and e.value.fix, bad
    with pytest.raises(InputError) as e:
        records.read(schema.DATA_CONFIG, {"hidden_states": [1, 2]}, file="data_config.json")
    assert e.value.field == "hidden_states"
    ids = torch.zeros(SEQ, dtype=torch.long)
    for kind, ok, bad in ((schema.LEGACY.kind_of("input_ids"), ids, ids.float()),
                          (schema.HS.kind_of("hidden_states"), torch.zeros(SEQ, 2, H), torch.zeros(SEQ, H)),
                          (schema.SPECFORGE.kind_of("aux_hidden_state"), torch.zeros(1, SEQ, H),
                           torch.full((1, SEQ, H), float("inf")))):
        assert kind.check(ok) is ok
        with pytest.raises(ValueError):
            kind.check(bad)
