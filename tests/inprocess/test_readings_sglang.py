"""core/stock.py against SGLang 0.5.23's own ``DeepseekV2ForCausalLM.set_eagle3_layers_to_capture`` (called on a
stand-in ``self``, in this process): the stock rule, and the ids ``convert`` writes for stock SGLang."""

import itertools

from harness.sglang_inprocess import sglang_layers_to_capture
from sglang_eagle3_capture.core.layer_ids import hidden_state_indices
from sglang_eagle3_capture.core.stock import stock_sglang_capture
from sglang_eagle3_capture.doctor.readings import stock_safe_eagle_config_ids

FAMILY = "deepseek_v2"


def eagle(ids, **extra):
    return {"eagle_config": {"eagle_aux_hidden_state_layer_ids": ids, **extra}}


def test_stock_rule_matches_sglang_0_5_23_source():
    for ids in ([1, 29, 57], [2, 30, 58], [0, 3, 31], [-1, 2, 30], [1], [3, 1, 2], [30, 58, 1], None):
        cfg = {} if ids is None else eagle(ids)
        assert stock_sglang_capture(cfg, 61, family=FAMILY, release="0.5.23").loop_indices == \
            tuple(sglang_layers_to_capture(ids, 61)), ids


def test_converted_eagle_config_ids_make_stock_0_5_23_feed_the_manifest():
    """Every ascending manifest on a 6-layer target is wired right by stock SGLang 0.5.23, but two kinds.

    Inexpressible for stock SGLang: a lone layer id 0 (a first id of 1 is always shifted), and the final
    layer's output (layer id N-1 = loop index N; DeepseekV2Model's capture loop stops at N-1).
    """
    n, checked = 6, 0
    for k in (1, 2, 3):
        for ids in itertools.combinations(range(-1, n), k):
            written = stock_safe_eagle_config_ids(ids, family=FAMILY)
            assert sorted(written) == sorted(hidden_state_indices(ids))
            c = stock_sglang_capture(eagle(written), n, family=FAMILY, release="0.5.23")
            if ids == (0,):
                assert c.fed_layer_ids == (1,)
                continue
            if n - 1 in ids:
                assert "never reached" in c.problem
                continue
            assert c.fed_layer_ids == ids and c.problem is None, (ids, written)
            assert set(sglang_layers_to_capture(written, n)) == set(hidden_state_indices(ids))
            checked += 1
    assert checked == 6 + 15 + 20 - 1  # C(6,k) over ids -1..4, less the lone [0]
