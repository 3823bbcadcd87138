"""The one layer-id convention (docs/manifest.md): -1 = embedding = HF 0 = loop 0; k = after layer k = HF k+1."""

import pytest

from sglang_eagle3_capture.layer_ids import (
    EMBEDDING_LAYER_ID,
    LayerIdError,
    check_layer_ids,
    hidden_state_index,
    hidden_state_indices,
    layer_id_of_index,
)


def test_seed_case_maps_to_hf_indices():
    # The motivating fix: cat([embed, HF[3], HF[31]]) is layer ids [-1, 2, 30].
    assert hidden_state_indices([-1, 2, 30]) == [0, 3, 31]


def test_embedding_is_index_zero():
    assert hidden_state_index(EMBEDDING_LAYER_ID) == 0
    assert layer_id_of_index(0) == EMBEDDING_LAYER_ID


@pytest.mark.parametrize("layer_id", range(-1, 61))
def test_round_trip(layer_id):
    assert layer_id_of_index(hidden_state_index(layer_id)) == layer_id
    assert hidden_state_index(layer_id) == layer_id - EMBEDDING_LAYER_ID


def test_order_is_kept():
    assert hidden_state_indices([30, -1, 2]) == [31, 0, 3]


def test_check_accepts_full_range():
    assert check_layer_ids([-1, 0, 60], 61, where="x") == (-1, 0, 60)


@pytest.mark.parametrize(
    "ids, n, fragment",
    [
        ([-2, 1], 61, "outside [-1, 60]"),
        ([0, 61], 61, "outside [-1, 60]"),
        ([1, 1], 61, "duplicate layer ids [1]"),
        ([], 61, "empty"),
        ([0, "3"], 61, "not an integer"),
        ([0, True], 61, "not an integer"),
        ("0,1", 61, "expected a list"),
        ([0, 2.0], 61, "not an integer"),
    ],
)
def test_check_rejects_with_where(ids, n, fragment):
    with pytest.raises(LayerIdError) as e:
        check_layer_ids(ids, n, where="draft/eagle3_manifest.json: layer_ids")
    assert "draft/eagle3_manifest.json: layer_ids" in str(e.value)
    assert fragment in str(e.value)


def test_check_without_layer_count_still_rejects_below_embedding():
    assert check_layer_ids([-1, 500], None, where="x") == (-1, 500)
    with pytest.raises(LayerIdError, match="outside"):
        check_layer_ids([-3], None, where="x")
