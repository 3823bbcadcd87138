"""The tiny Kimi-K2.5 checkpoint (support/kimi_k25.py) as SGLang loads it: ``get_model`` (SGLang's own loader, as the
target worker runs it) builds ``KimiK25ForConditionalGeneration`` and its ``load_weights`` fills every parameter, the
vision tower and projector included (none keeps its initial value), and SGLang's vision tower and projector compute
what transformers' ``Kimi_K25ForConditionalGeneration`` computes from the same checkpoint on one image.
"""

import pytest
import torch

from support.kimi_k25 import ARCHITECTURE, VISION, build_tiny_kimi_k25, load_hf_kimi_k25
from support.tolerances import TOLERANCES


@pytest.fixture(scope="module")
def kimi_dir(tmp_path_factory):
    return build_tiny_kimi_k25(tmp_path_factory.mktemp("kimi") / "target")


def _sglang_model(kimi_dir, runner, monkeypatch):
    """SGLang's model for ``kimi_dir``, every parameter set to NaN right before its ``load_weights`` runs."""
    from sglang.srt.configs.device_config import DeviceConfig
    from sglang.srt.configs.load_config import LoadConfig
    from sglang.srt.configs.model_config import ModelConfig
    from sglang.srt.model_loader import get_model
    from sglang.srt.models.kimi_k25 import KimiK25ForConditionalGeneration

    original = KimiK25ForConditionalGeneration.load_weights

    def load_weights(self, weights):
        with torch.no_grad():
            for p in self.parameters():
                p.fill_(float("nan"))
        return original(self, weights)

    monkeypatch.setattr(KimiK25ForConditionalGeneration, "load_weights", load_weights)
    model_config = ModelConfig.from_server_args(runner.model_runner.server_args, model_path=str(kimi_dir))
    return get_model(model_config=model_config, load_config=LoadConfig(load_format="auto"),
                     device_config=DeviceConfig("cpu"))


def test_sglang_loads_every_parameter_and_its_vision_tower_matches_hf(kimi_dir, runner, monkeypatch):
    model = _sglang_model(kimi_dir, runner, monkeypatch)
    assert type(model).__name__ == ARCHITECTURE
    params = dict(model.named_parameters())
    assert any(n.startswith("vision_tower.") for n in params) and any(n.startswith("mm_projector.") for n in params)
    unwritten = sorted(n for n, p in params.items() if torch.isnan(p).any())
    assert not unwritten, f"parameters the checkpoint did not fill: {unwritten}"

    hf = load_hf_kimi_k25(kimi_dir)
    patch = VISION["patch_size"]
    grid = torch.tensor([[1, 4, 4]])  # one image of 4 x 4 patches: the position table's own size, 4 merged tokens
    pixels = torch.randn(16, 3, patch, patch, generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        ours = model.mm_projector(torch.cat(model.vision_tower(pixels, grid)))
        theirs = torch.cat(hf.model.get_image_features(pixels, grid).pooler_output)
    assert ours.shape == theirs.shape == (4, hf.config.text_config.hidden_size)
    torch.testing.assert_close(ours, theirs, **TOLERANCES[torch.float32])
