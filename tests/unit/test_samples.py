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

from sglang_eagle3_capture.doctor.samples import (
    HS_SAFETENSORS,
    LEGACY_PT,
    SPECFORGE_CKPT,
    expand_data_paths,
    load_sample,
)
from sglang_eagle3_capture.errors import SampleError

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


def test_legacy_data_config_gives_layer_ids(tmp_path):
    p, _ = _legacy(tmp_path)
    (tmp_path / "data_config.json").write_text(json.dumps({"hidden_states": {"layer_ids": [2, 3, 4, 6]}}))
    assert load_sample(p).chunk_layer_ids == (2, 3, 4, 6)
    (tmp_path / "data_config.json").write_text(json.dumps({"hidden_states": {"layer_ids": [2, 3]}}))
    with pytest.raises(SampleError, match=r"data_config.json: field 'hidden_states.layer_ids'"):
        load_sample(p)


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
    with pytest.raises(SampleError, match="no such file"):
        expand_data_paths([tmp_path / "missing.pt"])


@pytest.mark.parametrize(
    "override, match",
    [
        ({"input_ids": None}, r"data_0.pt: key 'input_ids' should be a tensor"),
        ({"hidden_states": torch.zeros(4, SEQ, H)}, r"data_0.pt: key 'hidden_states' should be a list"),
        ({"hidden_states": _hidden(3)[:1]}, r"data_0.pt: key 'hidden_states' should be a list of at least 2"),
        ({"hidden_states": _hidden(2) + [torch.zeros(SEQ, H + 1)]}, r"data_0.pt: key 'hidden_states\[2\]' has shape"),
        ({"hidden_states": _hidden(2) + [torch.zeros(SEQ - 1, H)]}, r"data_0.pt: key 'hidden_states\[2\]' has shape"),
        ({"hidden_states": _hidden(2) + [torch.zeros(SEQ)]}, r"data_0.pt: key 'hidden_states\[2\]' has shape \[9\]"),
        ({"loss_mask": torch.ones(SEQ + 2)}, r"data_0.pt: key 'loss_mask' has 11 entries, expected 9"),
        ({"input_ids": torch.zeros(SEQ)}, r"data_0.pt: key 'input_ids' holds torch.float32"),
    ],
)
def test_legacy_bad_files_name_file_and_key(tmp_path, override, match):
    p, _ = _legacy(tmp_path, **override)
    with pytest.raises(SampleError, match=match):
        load_sample(p)


def test_missing_key_lists_expected_keys(tmp_path):
    p = tmp_path / "data_0.pt"
    torch.save({"input_ids": _ids(), "loss_mask": torch.ones(SEQ)}, p)
    with pytest.raises(SampleError,
                       match=r"data_0.pt: missing key 'hidden_states'.*found \['input_ids', 'loss_mask'\]"):
        load_sample(p)


def test_hs_safetensors_token_count_mismatch(tmp_path):
    p = tmp_path / "hs_3.safetensors"
    save_file({"hidden_states": torch.zeros(SEQ, 3, H), "token_ids": torch.zeros(SEQ - 1, dtype=torch.long)}, str(p))
    with pytest.raises(SampleError,
                       match=r"hs_3.safetensors: key 'token_ids' has 8 entries but the hidden states have 9"):
        load_sample(p)


def test_specforge_aux_width_not_multiple(tmp_path):
    p = tmp_path / "data_0.ckpt"
    torch.save({"input_ids": _ids(), "loss_mask": torch.ones(SEQ), "hidden_state": torch.zeros(1, SEQ, H),
                "aux_hidden_state": torch.zeros(1, SEQ, 3 * H - 1)}, p)
    with pytest.raises(SampleError, match=r"data_0.ckpt: key 'aux_hidden_state' is 23 wide, not a multiple of"):
        load_sample(p)


def test_pickled_objects_are_refused(tmp_path):
    # any non-tensor global (here a datetime) must be refused by the weights_only unpickler
    p = tmp_path / "data_0.pt"
    torch.save({"input_ids": _ids(), "hidden_states": _hidden(2), "loss_mask": torch.ones(SEQ),
                "x": datetime.timedelta(days=1)}, p)
    with pytest.raises(SampleError, match=r"data_0.pt: cannot be read by torch.load\(weights_only=True\)"):
        load_sample(p)


def test_not_a_sample_file(tmp_path):
    p = tmp_path / "x.bin"
    p.write_bytes(b"abc")
    with pytest.raises(SampleError, match="x.bin: unknown sample file type"):
        load_sample(p)
    q = tmp_path / "hs_0.safetensors"
    q.write_bytes(b"garbage")
    with pytest.raises(SampleError, match="hs_0.safetensors: not a readable safetensors file"):
        load_sample(q)


def test_legacy_sample_lengths_must_agree(tmp_path):
    p, _ = _legacy(tmp_path, "data_3.pt")
    (tmp_path / "sample_lengths.json").write_text(json.dumps({"3": SEQ}))
    assert load_sample(p).seq_len == SEQ
    (tmp_path / "sample_lengths.json").write_text(json.dumps({"3": SEQ + 1}))
    with pytest.raises(SampleError,
                       match=r"data_3.pt: key 'input_ids' has 9 tokens but .*sample_lengths.json field '3' says 10"):
        load_sample(p)
