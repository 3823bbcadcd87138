"""capture.py without SGLang: layer ids -> loop indices, fc-order permutation, stage check, FcFeed guard."""

from types import SimpleNamespace

import pytest
import torch

from sglang_eagle3_capture.capture import CapturePlan, FcFeed, check_stage, plan_capture, to_fc_order
from sglang_eagle3_capture.layer_ids import LayerIdError, hidden_state_index

WHERE = "draft/eagle3_manifest.json: field 'layer_ids'"


def test_seed_case_is_ascending_embedding_first():
    p = plan_capture([-1, 2, 30], 61, where=WHERE)
    assert p.layer_ids == (-1, 2, 30)
    assert p.loop_indices == tuple(hidden_state_index(i) for i in (-1, 2, 30)) == (0, 3, 31)
    assert p.chunk_order == (0, 1, 2) and p.is_identity


@pytest.mark.parametrize("ids", [[1, 2, 3], [-1], [0, 59], [59, -1]])
def test_no_heuristic_decides_the_offset(ids):
    # SGLang 0.5.23 adds 1 only when ids[0] == 1; the plan always translates through hidden_state_index.
    p = plan_capture(ids, 61, where=WHERE)
    assert sorted(p.loop_indices) == sorted(hidden_state_index(i) for i in ids)


def test_non_ascending_ids_get_a_fixed_permutation():
    p = plan_capture([30, -1, 2], 61, where=WHERE)
    assert p.loop_indices == (0, 3, 31)  # the packer writes ascending loop order
    assert p.chunk_order == (2, 0, 1) and not p.is_identity  # fc chunk j <- packer chunk chunk_order[j]


def test_to_fc_order_routes_chunks_exactly():
    h = 5
    chunks = [torch.randn(7, h) for _ in range(3)]  # packer order: loop 0, 3, 31
    packed = torch.cat(chunks, dim=-1)
    p = plan_capture([30, -1, 2], 61, where=WHERE)
    out = to_fc_order(packed, p)
    assert torch.equal(out, torch.cat([chunks[2], chunks[0], chunks[1]], dim=-1))
    assert out.data_ptr() != packed.data_ptr()
    ident = plan_capture([-1, 2, 30], 61, where=WHERE)
    assert to_fc_order(packed, ident) is packed


def test_last_layer_output_is_refused_with_the_fix():
    with pytest.raises(LayerIdError) as e:
        plan_capture([-1, 2, 60], 61, where=WHERE)
    msg = str(e.value)
    assert WHERE in msg and "layer id 60" in msg and "last decoder layer" in msg
    assert "Fix: serve a draft trained on ids within [-1, 59]" in msg


@pytest.mark.parametrize("ids, fragment", [([-2, 3], "outside [-1, 60]"), ([0, 61], "outside [-1, 60]"),
                                           ([3, 3], "duplicate")])
def test_out_of_range_ids_are_refused(ids, fragment):
    with pytest.raises(LayerIdError) as e:
        plan_capture(ids, 61, where=WHERE)
    assert WHERE in str(e.value) and fragment in str(e.value)


def test_stage_check_names_pp_size_and_fix():
    p = plan_capture([-1, 2, 30], 61, where=WHERE)
    check_stage(p, 0, 61, pp_size=1)
    with pytest.raises(LayerIdError) as e:
        check_stage(p, 30, 61, pp_size=2)
    msg = str(e.value)
    assert "layer ids [-1, 2]" in msg and "--pp-size 2" in msg and "Fix: serve with --pp-size 1" in msg
    assert "decoder layer 0" in msg


def test_feed_refuses_a_replaced_capture_list():
    p = plan_capture([3, -1], 6, where=WHERE)
    layers = list(p.loop_indices)
    feed = FcFeed(p, layers)
    model = SimpleNamespace(layers_to_capture=layers)
    aux = torch.arange(12.0).reshape(2, 6)
    assert torch.equal(feed(model, aux, None, None, None), torch.cat([aux[:, 3:], aux[:, :3]], dim=-1))
    model.layers_to_capture = list(layers)  # equal content, different list: someone rewrote it
    with pytest.raises(RuntimeError, match="layers_to_capture was replaced"):
        feed(model, aux, None, None, None)


def test_identity_feed_keeps_no_plan():
    p = plan_capture([-1, 3], 6, where=WHERE)
    assert FcFeed(p, list(p.loop_indices)).plan is None
    assert isinstance(FcFeed(plan_capture([3, -1], 6, where=WHERE), []).plan, CapturePlan)
