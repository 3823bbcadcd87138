"""Issue 21 part 4, round 2, over every reader each class applies to (table-driven):

1. ``convert`` refuses, for every source format, a setting SGLang's ``LlamaForCausalLMEagle3`` would run with other
   math than the draft was trained with (one declaration: ``schemas.draft.HONOURED``), and ``verify``'s reader takes
   what ``convert`` writes;
2. tensors outside dense CPU float/int in every sample layout and the capture dump: fp8 is read (upcast to float32),
   the rest refused with exit 2 naming the file and the key;
3. every compressed container a sample reader opens is bounded (gzip, and the zip records of a torch ``.ckpt``);
4. a draft config SGLang cannot build (no architecture, zero heads or head_dim, a list model_type) is refused by
   ``verify``'s reader naming the field.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from sglang_eagle3_capture.draft.checkpoint import tensor_index
from sglang_eagle3_capture.draft.config import DraftConfig
from sglang_eagle3_capture.draft.convert import convert
from sglang_eagle3_capture.draft.model import check_checkpoint
from sglang_eagle3_capture.errors import ConvertError, DraftFormatError
from support.cli import run
from support.speculators_drafts import (
    HIDDEN,
    VOCAB,
    build_specforge_draft,
    build_speculators_draft,
    specforge_tensors,
    write_target,
)

# ---- 1. convert refuses what SGLang's draft class cannot honour, in every format ------------------------------------

# (key, value): each makes SGLang's LlamaForCausalLMEagle3 build other math (or other layers) than was trained
UNHONOURED = [
    ("hidden_act", "gelu"),
    ("tie_word_embeddings", True),
    ("attention_bias", True),
    ("mlp_bias", True),
    ("model_type", "llama4_text"),
    ("quantization_config", {"quant_method": "fp8", "activation_scheme": "dynamic"}),
    ("num_hidden_layers", 2),
]


def _edit(path: Path, edit) -> None:
    cfg = json.loads(path.read_text())
    edit(cfg)
    path.write_text(json.dumps(cfg))


def _specforge(tmp: Path, key=None, value=None) -> Path:
    src = build_specforge_draft(tmp / "sf", ids=(1, 29, 57))
    if key is not None:
        _edit(src / "config.json", lambda c: c.update({key: value}))
    return src


def _eagle_default(tmp: Path, key=None, value=None) -> Path:
    src = _specforge(tmp, key, value)  # no id list anywhere: the EAGLE low/mid/high default reads it
    _edit(src / "config.json", lambda c: c.pop("eagle_config"))
    return src


def _speculators(tmp: Path, key=None, value=None) -> Path:
    src = build_speculators_draft(tmp / "spec")
    if key is not None:
        _edit(src / "config.json", lambda c: c["transformer_layer_config"].update({key: value}))
    return src


FORMATS = {"sglang-eagle-config": (_specforge, "DeepseekV3ForCausalLM", ""),
           "eagle-default": (_eagle_default, "DeepseekV3ForCausalLM", ""),
           "speculators": (_speculators, "KimiK25ForConditionalGeneration", "transformer_layer_config.")}


@pytest.mark.parametrize("fmt", FORMATS)
@pytest.mark.parametrize("key,value", UNHONOURED, ids=[k for k, _ in UNHONOURED])
def test_convert_refuses_what_sglang_cannot_honour_in_every_format(tmp_path, fmt, key, value):
    build, arch, prefix = FORMATS[fmt]
    src = build(tmp_path, key, value)
    target = write_target(tmp_path / "t", architecture=arch)
    with pytest.raises(ConvertError) as e:
        convert(src, tmp_path / "out", target=target)
    assert e.value.file == str(src / "config.json") and e.value.field == prefix + key and e.value.fix
    assert not (tmp_path / "out").exists()


def test_the_cli_exits_2_naming_the_setting(tmp_path, capsys):
    src = _specforge(tmp_path, "hidden_act", "gelu")
    target = write_target(tmp_path / "t", architecture="DeepseekV3ForCausalLM")
    rc, _, err = run(capsys, "convert", src, tmp_path / "out", "--target", target)
    assert rc == 2 and "field 'hidden_act'" in err


def test_an_fc_bias_needs_the_o_proj_bias_sglang_builds_with_it(tmp_path):
    """llama.py gives o_proj a bias whenever "bias" is set: without that tensor SGLang would serve uninitialised
    memory there, so convert refuses; with it the output is what verify's reader builds."""
    target = write_target(tmp_path / "t", architecture="DeepseekV3ForCausalLM")
    tensors = {**specforge_tensors(), "fc.bias": torch.randn(HIDDEN)}
    src = build_specforge_draft(tmp_path / "a", tensors=tensors)
    _edit(src / "config.json", lambda c: c.update(bias=True))
    with pytest.raises(ConvertError) as e:
        convert(src, tmp_path / "out_a", target=target)
    assert e.value.field == "midlayer.self_attn.o_proj.bias"
    tensors["midlayer.self_attn.o_proj.bias"] = torch.randn(HIDDEN)
    src = build_specforge_draft(tmp_path / "b", tensors=tensors)
    _edit(src / "config.json", lambda c: c.update(bias=True))
    convert(src, tmp_path / "out_b", target=target)
    _verify_reads(tmp_path / "out_b")


def _verify_reads(out: Path) -> None:
    cfg_path = out / "config.json"
    config = DraftConfig.from_dict(json.loads(cfg_path.read_text()), where=str(cfg_path))
    check_checkpoint(config, tensor_index(out), cfg_path, target_embed=torch.zeros(VOCAB, HIDDEN))


@pytest.mark.parametrize("fmt", FORMATS)
def test_verify_reads_what_convert_writes_in_every_format(tmp_path, fmt):
    build, arch, _ = FORMATS[fmt]
    convert(build(tmp_path), tmp_path / "out", target=write_target(tmp_path / "t", architecture=arch))
    _verify_reads(tmp_path / "out")


# ---- 4. what SGLang cannot build, verify's reader refuses ----------------------------------------------------------

GOOD = {"architectures": ["LlamaForCausalLMEagle3"], "model_type": "llama", "hidden_size": 64,
        "num_attention_heads": 4, "intermediate_size": 128, "vocab_size": 256, "num_hidden_layers": 1}
UNBUILDABLE = [("architectures", []), ("architectures", None), ("architectures", ["OtherModel"]),
               ("num_attention_heads", 0), ("head_dim", 0), ("num_key_value_heads", 0), ("num_hidden_layers", 0),
               ("model_type", ["llama"]), ("hidden_size", 2)]


@pytest.mark.parametrize("key,value", UNBUILDABLE, ids=[f"{k}={v}" for k, v in UNBUILDABLE])
def test_verify_reader_refuses_what_sglang_cannot_build(key, value):
    with pytest.raises(DraftFormatError) as e:
        DraftConfig.from_dict({**GOOD, key: value}, "c.json")
    assert e.value.file == "c.json" and e.value.field in (key, "num_attention_heads") and e.value.fix


def test_verify_reader_refuses_a_draft_without_architectures():
    cfg = dict(GOOD)
    del cfg["architectures"]
    with pytest.raises(DraftFormatError) as e:
        DraftConfig.from_dict(cfg, "c.json")
    assert e.value.field == "architectures"


def test_verify_refuses_an_empty_architectures_on_the_command_line(tmp_path, capsys):
    from support.fixture import fixture_dir

    fx = fixture_dir()
    draft = tmp_path / "d"
    draft.mkdir()
    for name in ("config.json", "eagle3_manifest.json", "model.safetensors"):
        (draft / name).write_bytes((fx / "draft" / name).read_bytes())
    _edit(draft / "config.json", lambda c: c.update(architectures=[]))
    rc, _, err = run(capsys, "verify", draft, "--data", fx / "samples", "--target", fx / "target", "--no-progress")
    assert rc == 2 and "field 'architectures'" in err
