"""``--model-impl mindspore`` (docs/families.md, the ``mindspore.py`` row): SGLang then builds MindSporeForCausalLM
whatever the target's architecture (model_loader/utils.py:228-229), a MindSpore network with no torch decoder stack,
so a draft that declares layer ids is refused at startup by name, while stock wiring (no declaration) is left alone
and the same deployment with SGLang's own model classes is wired."""

from __future__ import annotations

import pytest

from sglang_eagle3_capture.core import policy, releases
from sglang_eagle3_capture.core.errors import DeploymentError
from sglang_eagle3_capture.core.manifest import Manifest


def _deployment(manifest, model_impl):
    return policy.Deployment(release=releases.newest(), draft="D", manifest=manifest, eagle_config={},
                             config_file="D/config.json", architecture="Qwen3ForCausalLM", num_hidden_layers=6,
                             model_impl=model_impl)


def test_a_declared_draft_on_the_mindspore_impl_is_refused_naming_the_flag(tmp_path):
    m = Manifest((-1, 1, 4), "Qwen3ForCausalLM", 6, 64, {"source": "manual"}, path=tmp_path / "m.json")
    with pytest.raises(DeploymentError) as e:
        policy.decide(_deployment(m, "mindspore"))
    assert e.value.field == "--model-impl" and "MindSporeForCausalLM" in e.value.problem and e.value.fix
    for impl in ("auto", "sglang"):  # SGLang's own classes: the qwen3 family wires the ids
        d = policy.decide(_deployment(m, impl))
        assert (d.family.name, d.layer_ids) == ("qwen3", (-1, 1, 4))
    stock = policy.decide(_deployment(None, "mindspore"))  # nothing declared: stock wiring, not the plugin's to refuse
    assert stock.layer_ids is None
