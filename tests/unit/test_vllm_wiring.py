"""The vLLM adapter's resolution and feed on stand-in runner objects (no vLLM here): which indices vLLM is asked
for, and how its ascending captures, the embedding and the final norm's output become the fc input in manifest order.
tests/engine/test_vllm_plugin.py proves the same through real vLLM; this pins the arithmetic for every layout the
engine runs do not (DeepSeek's inline capture with the embedding last in fc order, the last layer's output)."""

from types import SimpleNamespace

import pytest
import torch

from sglang_eagle3_capture.core import releases
from sglang_eagle3_capture.core.errors import DeploymentError
from sglang_eagle3_capture.core.layer_ids import FINAL_NORM
from sglang_eagle3_capture.core.vllm import wiring
from sglang_eagle3_capture.doctor.manifest_write import write_draft_manifest
from support.tiny_models import build_family_target, build_tiny_draft, build_tiny_target

N, H = 7, 64


class _Model:
    def __init__(self):
        self.asked = None
        self.embed = torch.nn.Embedding(256, H)

    def set_aux_hidden_state_layers(self, layers):
        self.asked = layers

    def embed_input_ids(self, ids):
        return self.embed(ids)


def _runner(target, draft, ids):
    import json

    write_draft_manifest(draft, ids, target, fail_closed=True)
    cfg = json.loads((draft / "config.json").read_text())
    spec = SimpleNamespace(method="eagle3", num_speculative_tokens=2, draft_model_config=SimpleNamespace(
        model=str(draft), hf_config=SimpleNamespace(**cfg)))
    return SimpleNamespace(speculative_config=spec, use_aux_hidden_state_outputs=True,
                           model_config=SimpleNamespace(hf_config=json.loads((target / "config.json").read_text())),
                           drafter=SimpleNamespace(model=SimpleNamespace(model=SimpleNamespace(
                               fc=SimpleNamespace(input_size=len(ids) * H)))), model=_Model())


@pytest.fixture(autouse=True)
def _release(monkeypatch):
    monkeypatch.setenv("SGLANG_EAGLE3_CAPTURE_SELFCHECK", "0")
    wiring.set_state(releases.vllm_get("0.32.0"), None)


@pytest.mark.parametrize("family,ids,asked,embedding", [
    ("llama", [4, -1, 1], (0, 2, 5), False),
    ("llama", [-1, 6, FINAL_NORM], (0, 7), False),  # N-1 is vLLM's index N; the final norm's output is the model's
    ("deepseek_v2", [4, 1, -1], (2, 5), True),  # vLLM's index 0 raises there: the embedding from embed_input_ids
])
def test_vllm_is_asked_for_its_indices_and_the_fc_gets_manifest_order(tmp_path, family, ids, asked, embedding):
    target = (build_tiny_target(tmp_path / "t", num_hidden_layers=N) if family == "deepseek_v2" else
              build_family_target(family, tmp_path / "t", num_hidden_layers=N))
    runner = _runner(target, build_tiny_draft(tmp_path / "d", target_dir=target, num_aux=len(ids)), ids)
    wiring.resolve(runner, original=None)
    assert runner.model.asked == asked
    input_ids = torch.tensor([3, 1, 4, 1, 5])
    # vLLM's captures in ascending index order, each a distinct tensor; the model's output is the final norm's
    captures = {i: torch.full((5, H), float(i)) for i in asked}
    hidden = torch.full((5, H), -7.0)
    out, (fed,) = wiring.fc_input(runner, getattr(runner, wiring.PLAN), (hidden, [captures[i] for i in asked]),
                                  input_ids, None)
    assert out is hidden
    want = {FINAL_NORM: hidden, -1: runner.model.embed_input_ids(input_ids) if embedding else captures.get(0)}
    for chunk, layer_id in zip(fed.split(H, dim=-1), ids):
        expected = want[layer_id] if layer_id in want else captures[layer_id + 1]
        assert torch.equal(chunk, expected), layer_id


def test_a_manifest_vllm_captures_nothing_of_is_refused(tmp_path):
    target = build_tiny_target(tmp_path / "t", num_hidden_layers=N)
    runner = _runner(target, build_tiny_draft(tmp_path / "d", target_dir=target, num_aux=2), [-1, FINAL_NORM])
    with pytest.raises(DeploymentError) as e:
        wiring.resolve(runner, original=None)
    assert (e.value.file, e.value.field) == (str(tmp_path / "d" / "eagle3_manifest.json"), "layer_ids")
