"""core/stock.py: what stock SGLang would feed a draft's fc, per release in the release table, on the DeepSeek-V2
family. Cross-checked against SGLang 0.5.23's own ``DeepseekV2ForCausalLM.set_eagle3_layers_to_capture`` in
tests/inprocess/test_readings_sglang.py.
"""

import pytest

from sglang_eagle3_capture.core.stock import stock_sglang_capture
from sglang_eagle3_capture.doctor import release_table

FAMILY = "deepseek_v2"


def eagle(ids, **extra):
    return {"eagle_config": {"eagle_aux_hidden_state_layer_ids": ids, **extra}}


@pytest.mark.parametrize("cfg, version, loop, fed, problem", [
    (eagle([1, 29, 57]), "0.5.23", (2, 30, 58), (1, 29, 57), None),  # SpecForge: shifted
    (eagle([1, 29, 57]), "0.5.11", (2, 30, 58), (1, 29, 57), None),
    (eagle([2, 30, 58]), "0.5.23", (2, 30, 58), (1, 29, 57), None),  # used as loop indices
    (eagle([2, 30, 58]), "0.5.11", (3, 31, 59), (2, 30, 58), None),  # the reported [2,30,58] -> [3,31,59]
    (eagle([0, 3, 31]), "0.5.23", (0, 3, 31), (-1, 2, 30), None),    # embedding via loop index 0
    (eagle([-1, 2, 30]), "0.5.23", (-1, 2, 30), (1, 29), "captured 2 of 3"),  # -1 never matches
    (eagle([-1, 2, 30]), "0.5.11", (0, 3, 31), (-1, 2, 30), "TypeError"),
    (eagle([31, 0, 3]), "0.5.23", (31, 0, 3), (-1, 2, 30), None),    # captured in ascending loop order
    ({"eagle_aux_hidden_state_layer_ids": [0, 3, 31]}, "0.5.23", (2, 30, 58), (1, 29, 57), None),  # top level ignored
    ({"eagle_config": {"use_aux_hidden_state": True}}, "0.5.11", (2, 30, 58), (1, 29, 57), None),  # no ids: default
    (eagle([0, 3, 61]), "0.5.23", (0, 3, 61), (-1, 2), "never reached"),
])
def test_stock_sglang_capture(cfg, version, loop, fed, problem):
    c = stock_sglang_capture(cfg, 61, family=FAMILY, release=release_table.get(version))
    assert (c.loop_indices, c.fed_layer_ids) == (loop, fed)
    assert (c.problem is None) if problem is None else (problem in c.problem)
    assert version in c.describe()


def test_stock_sglang_without_aux_capture_and_unknown_release():
    c = stock_sglang_capture(eagle([1, 2, 3], use_aux_hidden_state=False), 61, family=FAMILY)
    assert c.fed_layer_ids == () and "fc is skipped" in c.problem
    with pytest.raises(KeyError, match=r"no facts for SGLang 0\.5\.99; known: "):
        stock_sglang_capture(eagle([1]), 61, family=FAMILY, release="0.5.99")


@pytest.mark.parametrize("ids", [5, "0,3,31", [0, "3", 31], [0, 3.0, 31], [True, 3, 31], {"a": 1}])
def test_ids_that_are_not_a_list_of_integers_are_refused_naming_the_field(ids):
    # SGLang's parsed eagle_config reaches stock_sglang_capture as it is (core/sglang/resolution.py): a raw TypeError
    # from tuple()/max()/+1 used to escape
    from sglang_eagle3_capture.core.errors import InputError
    from sglang_eagle3_capture.core.releases import other_engines
    from sglang_eagle3_capture.doctor.readings import engine_capture

    for version in ("0.5.11", "0.5.23"):
        with pytest.raises(InputError) as e:
            stock_sglang_capture(eagle(ids), 61, family=FAMILY, release=release_table.get(version),
                                 file="draft/config.json")
        assert e.value.field == "eagle_config.eagle_aux_hidden_state_layer_ids" and e.value.fix
        assert e.value.file == "draft/config.json"  # the caller's file, never a placeholder
    for reader in other_engines():
        config = eagle(ids) | {"eagle_aux_hidden_state_layer_ids": ids}
        if not isinstance(ids, list):  # vLLM counts only a list or tuple (0.32 gpu_model_runner.py:5282): the default
            c = engine_capture(config, 61, family="llama", reader=reader)
            assert (c.config_ids, c.loop_indices, c.problem) == (None, (2, 30, 58), None), c.describe()
        elif any(isinstance(i, str) for i in ids):  # sorted(set(...)) over int and str: a TypeError at startup
            c = engine_capture(config, 61, family="llama", reader=reader)
            assert c.refuses_at_startup and not c.fed_layer_ids, c.describe()
        else:  # floats and booleans: no reading is guessed, and the error names the config file
            with pytest.raises(InputError) as e:
                engine_capture(config, 61, family=FAMILY, reader=reader, file="draft/config.json")
            assert e.value.field in reader.keys and e.value.fix and e.value.file == "draft/config.json"
