"""The one layer-id convention (docs/manifest.md): -1 = embedding = HF 0 = loop 0; k = after layer k = HF k+1."""

import pytest

from sglang_eagle3_capture.core.errors import InputError
from sglang_eagle3_capture.core.layer_ids import (
    EMBEDDING_LAYER_ID,
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
    assert check_layer_ids([-1, 0, 60], 61, file="x") == (-1, 0, 60)


@pytest.mark.parametrize(
    "ids, n, field",
    [
        ([-2, 1], 61, "layer_ids"),
        ([0, 61], 61, "layer_ids"),
        ([1, 1], 61, "layer_ids"),
        ([], 61, "layer_ids"),
        ([0, "3"], 61, "layer_ids[1]"),
        ([0, True], 61, "layer_ids[1]"),
        ("0,1", 61, "layer_ids"),
        ([0, 2.0], 61, "layer_ids[1]"),
    ],
)
def test_check_rejects_naming_file_and_field(ids, n, field):
    with pytest.raises(InputError) as e:
        check_layer_ids(ids, n, file="draft/eagle3_manifest.json")
    assert (e.value.file, e.value.field) == ("draft/eagle3_manifest.json", field) and e.value.fix


def test_check_names_the_callers_field():
    with pytest.raises(InputError) as e:
        check_layer_ids([0, None], 61, file="config.json", field="eagle_config.eagle_aux_hidden_state_layer_ids")
    assert e.value.field == "eagle_config.eagle_aux_hidden_state_layer_ids[1]"


def test_check_without_layer_count_still_rejects_below_embedding():
    assert check_layer_ids([-1, 500], None, file="x") == (-1, 500)
    with pytest.raises(InputError) as e:
        check_layer_ids([-3], None, file="x")
    assert (e.value.file, e.value.field) == ("x", "layer_ids")
