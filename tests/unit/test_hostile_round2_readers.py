"""Issue 21 part 4, round 2, over every reader each class applies to (table-driven):

1. ``convert`` refuses, for every source format, a setting SGLang's ``LlamaForCausalLMEagle3`` would run with other
   math than the draft was trained with (one declaration: ``core.schemas.draft.HONOURED``), and ``verify``'s reader
   takes what ``convert`` writes;
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
from safetensors.torch import save_file

from sglang_eagle3_capture.core.checkpoint import tensor_index
from sglang_eagle3_capture.core.draft_config import DraftConfig
from sglang_eagle3_capture.core.errors import InputError
from sglang_eagle3_capture.doctor.convert import convert
from sglang_eagle3_capture.doctor.model import check_checkpoint
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
    with pytest.raises(InputError) as e:
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
    with pytest.raises(InputError) as e:
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
    with pytest.raises(InputError) as e:
        DraftConfig.from_dict({**GOOD, key: value}, "c.json")
    assert e.value.file == "c.json" and e.value.field in (key, "num_attention_heads") and e.value.fix


def test_verify_reader_refuses_a_draft_without_architectures():
    cfg = dict(GOOD)
    del cfg["architectures"]
    with pytest.raises(InputError) as e:
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


# ---- 2. tensors outside dense CPU float/int, in every sample layout and the dump -----------------------------------

SEQ, H, K = 5, 8, 3


def _as(kind: str, t: torch.Tensor) -> torch.Tensor:
    """``t``'s shape as a tensor of ``kind``."""
    if kind == "sparse":
        return t.float().to_sparse()
    if kind == "quantized":
        return torch.quantize_per_tensor(t.float(), 0.1, 0, torch.qint8)
    if kind == "meta":
        return torch.empty(t.shape, dtype=t.dtype, device="meta")
    if kind == "stride-0":  # a few bytes claiming 10^12 rows
        return torch.zeros((1, *t.shape[1:]), dtype=t.dtype).expand(10**12, *t.shape[1:])
    if kind == "fp4":
        return torch.zeros(t.shape, dtype=torch.uint8).view(torch.float4_e2m1fn_x2)
    dtype = {"e8m0": torch.float8_e8m0fnu, "complex": torch.complex64, "fp8-e4m3": torch.float8_e4m3fn,
             "fp8-e5m2": torch.float8_e5m2, "uint16": torch.uint16, "uint32": torch.uint32, "uint64": torch.uint64,
             "bool": torch.bool}[kind]
    return t.abs().to(dtype) if dtype.is_floating_point and "e8m0" in kind else t.to(dtype)


def _sample(layout: str) -> dict:
    g = torch.Generator().manual_seed(0)
    ids = torch.randint(0, 100, (SEQ,), generator=g)
    hs = [torch.randn(SEQ, H, generator=g) for _ in range(K + 1)]
    if layout == "legacy":
        return {"input_ids": ids, "hidden_states": hs, "loss_mask": torch.ones(SEQ, dtype=torch.long)}
    if layout == "hs":
        return {"hidden_states": torch.stack(hs, dim=1), "token_ids": ids}
    if layout in ("ckpt", "ckpt.gz"):
        return {"input_ids": ids[None], "loss_mask": torch.ones(1, SEQ, dtype=torch.long),
                "hidden_state": hs[-1][None], "aux_hidden_state": torch.cat(hs[:-1], dim=-1)[None]}
    return {"aux_hidden_states": torch.cat(hs[:-1], dim=-1), "positions": torch.arange(SEQ), "input_ids": ids}


# layout -> (file name, the hidden-state key and how to reach it, the id key)
LAYOUTS = {"legacy": ("data_0.pt", "hidden_states[0]", "input_ids"),
           "hs": ("hs_0.safetensors", "hidden_states", "token_ids"),
           "ckpt": ("s.ckpt", "hidden_state", "input_ids"),
           "ckpt.gz": ("s.ckpt.gz", "hidden_state", "input_ids"),
           "dump": ("batch_0.safetensors", "aux_hidden_states", "input_ids")}


def _put(d: dict, key: str, kind: str) -> None:
    if key == "hidden_states[0]":
        d["hidden_states"][0] = _as(kind, d["hidden_states"][0])
    else:
        d[key] = _as(kind, d[key])


def _write(tmp: Path, layout: str, d: dict) -> Path:
    import gzip
    import io

    name = LAYOUTS[layout][0]
    path = tmp / name
    if name.endswith(".safetensors"):
        save_file(d, str(path))
    else:
        buf = io.BytesIO()
        torch.save(d, buf)
        path.write_bytes(gzip.compress(buf.getvalue()) if name.endswith(".gz") else buf.getvalue())
    return path


def _read(tmp: Path, layout: str, path: Path):
    from sglang_eagle3_capture.doctor.compare import read_dump
    from sglang_eagle3_capture.doctor.samples import load_sample

    return read_dump(tmp)[0][1] if layout == "dump" else load_sample(path)


TORCH_ONLY = ("sparse", "quantized", "meta", "stride-0")  # torch.save keeps these; safetensors cannot hold them
REFUSED = (*TORCH_ONLY, "fp4", "e8m0", "complex", "uint32", "bool")
CASES = [(layout, kind) for layout in LAYOUTS for kind in REFUSED
         if not (kind in TORCH_ONLY and LAYOUTS[layout][0].endswith(".safetensors"))]


@pytest.mark.parametrize("layout,kind", CASES, ids=[f"{a}-{b}" for a, b in CASES])
def test_a_hidden_state_outside_dense_float_is_refused_naming_file_and_key(tmp_path, layout, kind):
    d = _sample(layout)
    key = LAYOUTS[layout][1]
    _put(d, key, kind)
    path = _write(tmp_path, layout, d)
    assert path.stat().st_size < 64 << 10
    with pytest.raises(InputError) as e:
        _read(tmp_path, layout, path)
    assert e.value.file == str(path) and e.value.field == key and e.value.fix


IDS_REFUSED = [(layout, kind) for layout in LAYOUTS for kind in ("sparse", "meta", "stride-0", "complex", "fp8-e4m3")
               if not (kind in TORCH_ONLY and LAYOUTS[layout][0].endswith(".safetensors"))]


@pytest.mark.parametrize("layout,kind", IDS_REFUSED, ids=[f"{a}-{b}" for a, b in IDS_REFUSED])
def test_ids_outside_dense_integers_are_refused_naming_file_and_key(tmp_path, layout, kind):
    d = _sample(layout)
    key = LAYOUTS[layout][2]
    ids = d[key]
    d[key] = _as(kind, ids[0] if ids.dim() == 2 else ids)[None] if ids.dim() == 2 and kind != "stride-0" else \
        _as(kind, ids)
    path = _write(tmp_path, layout, d)
    with pytest.raises(InputError) as e:
        _read(tmp_path, layout, path)
    assert e.value.file == str(path) and e.value.field == key and e.value.fix


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("kind", ["fp8-e4m3", "fp8-e5m2"])
def test_fp8_hidden_states_are_read_as_float32(tmp_path, layout, kind):
    d = _sample(layout)
    key = LAYOUTS[layout][1]
    _put(d, key, kind)
    stored = d["hidden_states"][0] if key == "hidden_states[0]" else d[key]
    got = _read(tmp_path, layout, _write(tmp_path, layout, d))
    if layout == "dump":
        t = got["aux_hidden_states"]
    else:
        t = got.chunks[0] if layout in ("legacy", "hs") else got.chunks[-1]
        stored = stored[:, 0] if layout == "hs" else stored[0] if stored.dim() == 3 else stored
    assert t.dtype == torch.float32 and torch.equal(t, stored.float())


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("kind", ["uint16", "uint32", "uint64"])
def test_unsigned_ids_are_read_as_int64_and_past_int64_refused(tmp_path, layout, kind):
    d = _sample(layout)
    key = LAYOUTS[layout][2]
    want = d[key].reshape(-1)
    d[key] = d[key].to(getattr(torch, kind))
    got = _read(tmp_path, layout, _write(tmp_path, layout, d))
    ids = got[key] if layout == "dump" else got.input_ids
    assert ids.dtype == torch.int64 and torch.equal(ids.reshape(-1), want)
    if kind == "uint64":
        d[key] = torch.full(d[key].shape, 2**63, dtype=torch.uint64)
        path = _write(tmp_path, layout, d)
        with pytest.raises(InputError) as e:
            _read(tmp_path, layout, path)
        assert e.value.field == key


@pytest.mark.parametrize("kind", ["sparse", "stride-0", "meta"])
def test_verify_exits_2_on_such_a_sample(tmp_path, capsys, kind):
    from support.fixture import fixture_dir

    fx = fixture_dir()
    d = torch.load(fx / "samples" / "data_0.pt", weights_only=True)
    d["hidden_states"][1] = _as(kind, d["hidden_states"][1])
    bad = tmp_path / "data_0.pt"
    torch.save(d, bad)
    rc, _, err = run(capsys, "verify", fx / "draft", "--data", bad, "--target", fx / "target", "--no-progress")
    assert rc == 2 and str(bad) in err and "field 'hidden_states[1]'" in err


# ---- 3. every compressed container a sample reader opens is bounded ----------------------------------------------

def _deflated(d: dict) -> bytes:
    """``torch.save(d)`` with every zip record deflated (torch's reader inflates them; torch.save never writes so)."""
    import io
    import zipfile

    buf, out = io.BytesIO(), io.BytesIO()
    torch.save(d, buf)
    src = zipfile.ZipFile(buf)
    with zipfile.ZipFile(out, "w", compression=zipfile.ZIP_DEFLATED) as z:
        for info in src.infolist():
            z.writestr(info.filename, src.read(info.filename))
    return out.getvalue()


BOMB_LAYOUTS = {"legacy": "data_0.pt", "ckpt": "s.ckpt", "ckpt.gz": "s.ckpt.gz"}


@pytest.mark.parametrize("layout", BOMB_LAYOUTS)
def test_a_deflated_torch_zip_record_is_bounded_in_every_container(tmp_path, monkeypatch, layout):
    """A record inflating past 16x its file (here 8 MiB of zeros in a ~10 KB file, the budget's floor lowered from
    64 MiB to 1 MiB so the test stays small) is refused before torch.load reads it; within the bound it loads."""
    import gzip

    from sglang_eagle3_capture.doctor import samples

    monkeypatch.setattr(samples, "MIN_BUDGET", 1 << 20)
    d = _sample(layout)
    small = _deflated(d)
    d["padding"] = torch.zeros(2 << 20)  # 8 MiB, deflates to a few KB: an unknown key is kept, so it would load
    data = _deflated(d)
    path = tmp_path / BOMB_LAYOUTS[layout]
    gz = layout == "ckpt.gz"
    path.write_bytes(gzip.compress(data) if gz else data)
    assert path.stat().st_size < 64 << 10
    with pytest.raises(InputError) as e:
        samples.load_sample(path)
    assert e.value.file == str(path) and e.value.field == "<data>" and e.value.fix
    path.write_bytes(gzip.compress(small) if gz else small)
    assert samples.load_sample(path).chunks


@pytest.mark.parametrize("key", ["hidden_state", "aux_hidden_state", "input_ids", "loss_mask"])
def test_a_batch_2_specforge_ckpt_is_refused_not_read_as_its_first_row(tmp_path, key):
    from sglang_eagle3_capture.doctor.samples import load_sample

    d = _sample("ckpt")
    d[key] = torch.cat([d[key], d[key]])  # SpecForge writes one sample per file: a second row is another sample
    path = _write(tmp_path, "ckpt", d)
    with pytest.raises(InputError) as e:
        load_sample(path)
    assert e.value.file == str(path) and e.value.field == key and e.value.fix


def test_verify_reader_refuses_a_quantized_draft_it_cannot_model():
    with pytest.raises(InputError) as e:
        DraftConfig.from_dict({**GOOD, "quantization_config": {"quant_method": "fp8"}}, "c.json")
    assert e.value.field == "quantization_config" and e.value.fix


def test_verify_finds_the_embedding_in_fp8_samples(tmp_path):
    """fp8 samples are upcast when read; the stored embedding chunk is still found exactly (as fp8 rounded it)."""
    from sglang_eagle3_capture.doctor.samples import load_sample
    from sglang_eagle3_capture.doctor.verify import _embedding_hits

    embed = torch.randn(100, H)
    d = _sample("legacy")
    d["hidden_states"] = [embed[d["input_ids"]].to(torch.float8_e4m3fn), *(t.to(torch.float8_e4m3fn)
                                                                          for t in d["hidden_states"][1:])]
    sample = load_sample(_write(tmp_path, "legacy", d))
    assert sample.chunks[0].dtype == torch.float32 and _embedding_hits([sample], embed) == [[0]]
