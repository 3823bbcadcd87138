"""target_config: errors escape the file name and the values they show; a directory that cannot be looked at."""

import errno
import os

import pytest

from sglang_eagle3_capture.core.errors import InputError
from sglang_eagle3_capture.core.target_config import load_target_config, target_dims


@pytest.mark.parametrize("cfg, fld", [
    ({"architectures": "x\x1by"}, "architectures"),
    ({"architectures": ["LlamaForCausalLM"], "num_hidden_layers": "\x1b[31m", "hidden_size": 8}, "num_hidden_layers"),
    ({"architectures": ["LlamaForCausalLM"], "num_hidden_layers": 2, "hidden_size": "x" * 5000}, "hidden_size"),
])
def test_errors_escape_the_file_and_the_value(cfg, fld):
    with pytest.raises(InputError) as e:
        target_dims(cfg, "t\x1b/config.json")
    assert (e.value.file, e.value.field) == ("t\\x1b/config.json", fld) and e.value.fix
    assert "\x1b" not in str(e.value) and len(str(e.value)) < 400


def test_counts_are_integers_not_bools():
    with pytest.raises(InputError) as e:
        target_dims({"architectures": ["LlamaForCausalLM"], "num_hidden_layers": True, "hidden_size": 8}, "c.json")
    assert e.value.field == "num_hidden_layers"
    assert target_dims({"architectures": ["LlamaForCausalLM"], "num_hidden_layers": 2, "hidden_size": 8}, "c") == (
        "LlamaForCausalLM", 2, 8)


def test_a_target_that_cannot_be_looked_at_is_an_input_error(tmp_path, monkeypatch):
    real = os.stat

    def stat(p, *a, **k):
        if os.fspath(p) == os.fspath(tmp_path / "t"):
            raise PermissionError(errno.EACCES, "Permission denied", os.fspath(p))
        return real(p, *a, **k)

    monkeypatch.setattr(os, "stat", stat)
    with pytest.raises(InputError) as e:
        load_target_config(tmp_path / "t")
    assert (e.value.file, e.value.field) == (str(tmp_path / "t"), "<file>") and "pass --target" in e.value.fix


class _HFConfig:  # an HF config object: attributes at the top, dicts inside
    eagle_config = {"norm_before_fc": True}


def test_path_get_reads_dicts_and_config_objects_never_attributes_of_json_values():
    from sglang_eagle3_capture.core.target_config import path_get

    assert path_get({"eagle_config": {"fc_norm": True}}, "eagle_config.fc_norm") is True
    assert path_get(_HFConfig(), "eagle_config.norm_before_fc") is True
    assert path_get({"eagle_config": "upper"}, "eagle_config.upper") is None
    assert path_get({"eagle_config": [1]}, "eagle_config.count") is None
    assert path_get({}, "eagle_config.fc_norm") is None
