"""The draft-head loader (core/sglang/draft.py, core/sglang/audit.py) on SGLang 0.5.23's own EAGLE-3 draft classes,
loaded by SGLang's own loader, on CPU.

Every draft is built and loaded with ``sglang.srt.model_loader.get_model`` in this process (after the
in-process target runner published SGLang's runtime state), exactly as the draft worker does it.
"""

import json
from types import SimpleNamespace

import pytest
import torch
from safetensors.torch import load_file

from sglang_eagle3_capture.core.draft_checks import sglang_chunk_counts
from sglang_eagle3_capture.core.errors import DeploymentError, InputError
from sglang_eagle3_capture.core.manifest import write_manifest
from sglang_eagle3_capture.core.sglang import target as capture_patch
from sglang_eagle3_capture.core.sglang.draft import (
    STATE_ATTR,
    apply_draft_head_patch,
    is_draft_head_patched,
    revert_draft_head_patch,
)
from sglang_eagle3_capture.core.sglang.resolution import DeclaredLayerIds
from support.draft_dirs import (
    load_draft,
    make_draft,
    make_mla_draft,
    make_speculators_draft,
    rewrite_config,
    rewrite_weights,
    target_manifest,
)
from support.resolution import resolve_through_sglang
from support.tolerances import TOLERANCES


@pytest.fixture(autouse=True)
def draft_patch(runner):
    assert apply_draft_head_patch() is True
    try:
        yield
    finally:
        revert_draft_head_patch()


def _sd(draft_dir):
    return load_file(str(draft_dir / "model.safetensors"))


def test_loads_every_tensor_into_sglangs_parameters(tmp_path, tiny_target_dir, runner):
    d = make_draft(tmp_path / "d", tiny_target_dir, [-1, 1, 3])
    model = load_draft(d, runner)
    assert type(model).__name__ == "LlamaForCausalLMEagle3"
    assert getattr(model, STATE_ATTR).manifest.layer_ids == (-1, 1, 3)
    sd, params = _sd(d), dict(model.named_parameters())
    assert torch.equal(params["model.fc.weight"], sd["fc.weight"])
    qkv = params["model.layers.0.self_attn.qkv_proj.weight"]
    assert torch.equal(qkv, torch.cat([sd[f"midlayer.self_attn.{x}_proj.weight"] for x in "qkv"]))
    assert torch.equal(model.hot_token_id, sd["d2t"] + torch.arange(sd["d2t"].shape[0]))


def _extra(w):
    return {**w, "layers.0.self_attn.q_norm.weight": torch.ones(16)}  # e.g. a Qwen3-style speculators draft


# Loader-level bad inputs: (id, how to break the draft, fragments the error must contain: file and tensor/field).
BAD_WEIGHTS = [
    ("extra tensor", _extra, ["model.safetensors", "tensor 'layers.0.self_attn.q_norm.weight'", "not loaded"]),
    ("missing fc.weight", lambda w: {k: v for k, v in w.items() if k != "fc.weight"},
     ["model.safetensors", "tensor 'fc.weight': missing"]),
    ("missing one shard of a fused parameter", lambda w: {k: v for k, v in w.items() if "k_proj" not in k},
     ["tensor 'layers.0.self_attn.{q,k,v}_proj.weight': missing"]),
    ("fc width disagrees with the manifest", lambda w: {**w, "fc.weight": w["fc.weight"][:, :128]},
     ["model.safetensors: tensor 'fc.weight'", "input width 128", "eagle3_manifest.json", "= 192"]),
    ("a norm of the wrong size", lambda w: {**w, "norm.weight": torch.ones(32)},
     ["model.safetensors: tensor 'norm.weight'", "shape [32]", "'model.norm.weight' is [64]"]),
    ("input_norm.weight without norm_before_fc (stock SGLang drops it)",
     lambda w: {**w, "input_norm.weight": torch.ones(192)},
     ["tensor 'input_norm.weight'", "not loaded"]),
    ("d2t of the wrong length", lambda w: {**w, "d2t": w["d2t"][:100]}, ["[128]"]),
    ("d2t and t2d disagree", lambda w: {**w, "t2d": torch.roll(w["t2d"], 1)}, ["disagrees with d2t"]),
    ("d2t missing with a reduced draft vocab", lambda w: {k: v for k, v in w.items() if k not in ("d2t", "t2d")},
     ["missing"]),
]
# The vocab-map checks raise on their own (the rest are lines of one load report): the tensor is the error's field.
FIELDS = {"d2t of the wrong length": "tensor d2t", "d2t and t2d disagree": "tensor t2d",
          "d2t missing with a reduced draft vocab": "tensor d2t"}


@pytest.mark.parametrize("what, edit, fragments", BAD_WEIGHTS, ids=[r[0] for r in BAD_WEIGHTS])
def test_bad_weights_fail_the_load_naming_file_and_tensor(tmp_path, tiny_target_dir, runner, what, edit, fragments):
    d = make_draft(tmp_path / "d", tiny_target_dir, [-1, 1, 3])
    rewrite_weights(d, edit)
    with pytest.raises(DeploymentError) as e:
        load_draft(d, runner)
    for fragment in fragments:
        assert fragment in str(e.value), (fragment, str(e.value))
    assert e.value.field == FIELDS.get(what) and e.value.fix and e.value.file


def test_without_the_patch_sglang_silently_drops_what_the_loader_refuses(tmp_path, tiny_target_dir, runner):
    d = make_draft(tmp_path / "d", tiny_target_dir, [-1, 1, 3])
    rewrite_weights(d, _extra)
    revert_draft_head_patch()
    model = load_draft(d, runner)  # stock SGLang 0.5.23: no error, the tensor is gone
    assert not hasattr(model, STATE_ATTR)
    assert not any("q_norm" in n for n, _ in model.named_parameters())


def test_without_a_manifest_sglangs_wiring_is_kept_but_tensors_are_still_checked(tmp_path, tiny_target_dir, runner,
                                                                                 caplog):
    d = make_draft(tmp_path / "d", tiny_target_dir, manifest=False)
    model = load_draft(d, runner)  # as the target side: no manifest -> SGLang's own wiring, with a warning
    assert getattr(model, STATE_ATTR).manifest is None
    assert "has no eagle3_manifest.json" in caplog.text and "manifest write" in caplog.text
    rewrite_weights(d, _extra)
    with pytest.raises(DeploymentError, match=r"tensor 'layers.0.self_attn.q_norm.weight': not loaded"):
        load_draft(d, runner)


@pytest.mark.parametrize("flag, norm_tensors", [("norm_before_fc", ["input_norm.weight"]),
                                                 ("fc_norm", [f"fc_norm.{i}.weight" for i in range(3)])])
def test_speculators_checkpoint_names_and_flags_load(tmp_path, tiny_target_dir, runner, flag, norm_tensors):
    # Written by speculators 0.9.0 itself: layers.0.*, input_norm/fc_norm.*, embed_tokens, d2t/t2d.
    src = make_speculators_draft(tmp_path / "spec", tiny_target_dir, [0, 2, 4], **{flag: True}, norm_output=True)
    rewrite_config(src, lambda c: {**c["transformer_layer_config"], "architectures": ["LlamaForCausalLMEagle3"],
                                   "draft_vocab_size": c["draft_vocab_size"], flag: True, "norm_output": True,
                                   "eagle_config": {"eagle_aux_hidden_state_layer_ids": [0, 2, 4]}})
    write_manifest(src, target_manifest(tiny_target_dir, [-1, 1, 3]))
    model = load_draft(src, runner)
    sd, params = _sd(src), dict(model.named_parameters())
    assert getattr(model, STATE_ATTR).flags[flag] and model.model.norm_output
    for name in norm_tensors + ["layers.0.hidden_norm.weight", "embed_tokens.weight"]:
        assert torch.equal(params[f"model.{name}"], sd[name]), name


def test_flag_and_tensor_must_agree(tmp_path, tiny_target_dir, runner):
    d = make_draft(tmp_path / "d", tiny_target_dir, [-1, 1, 3], config_overrides={"fc_norm": True})
    with pytest.raises(DeploymentError, match=r"tensor 'fc_norm.0.weight': missing"):
        load_draft(d, runner)


def test_chunk_counts_match_sglangs_own_readers(tmp_path, tiny_target_dir):
    from sglang.srt.models.kimi_k25_eagle3 import _get_eagle_aux_layer_count
    from sglang.srt.speculative.eagle_utils import get_draft_input_from_target_hidden_dim
    from sglang.srt.speculative.spec_info import SpeculativeAlgorithm
    from transformers import LlamaConfig

    for extra in ({"num_aux_hidden_states": 4}, {"eagle_config": {"eagle_aux_hidden_state_layer_ids": [1, 2]}},
                  {"eagle_aux_hidden_state_layer_ids": [1, 2, 3, 4]}, {}):
        cfg = LlamaConfig(hidden_size=64, **extra)
        ours = sglang_chunk_counts(cfg, mla=True)
        assert ours["kimi_k25_eagle3._get_eagle_aux_layer_count"][0] == _get_eagle_aux_layer_count(cfg)
        mr = SimpleNamespace(model_config=SimpleNamespace(hf_config=cfg, hidden_size=64),
                             spec_algorithm=SpeculativeAlgorithm.EAGLE3)
        assert ours["eagle_utils.get_draft_input_from_target_hidden_dim"][0] * 64 == \
            get_draft_input_from_target_hidden_dim(mr)


def _resolve(runner, draft):
    """The target's resolution of ``draft`` (the first runtime gate), where a target that does not match the manifest
    is refused since the draft side no longer re-checks it."""
    with capture_patch.patched():
        return resolve_through_sglang(runner, draft).eagle_aux_hidden_state_layer_ids


def test_target_mismatches_are_refused(tmp_path, tiny_target_dir, runner):
    cases = [({"num_hidden_layers": 8}, "num_hidden_layers"), ({"architecture": "LlamaForCausalLM"}, "architecture")]
    for i, (target_edit, fragment) in enumerate(cases):
        d = make_draft(tmp_path / f"d{i}", tiny_target_dir, [-1, 1, 3])
        m = target_manifest(tiny_target_dir, [-1, 1, 3]).to_dict()
        (d / "eagle3_manifest.json").write_text(json.dumps({**m, "target": {**m["target"], **target_edit}}))
        with pytest.raises(InputError) as e:
            _resolve(runner, d)
        assert fragment in str(e.value) and "eagle3_manifest.json" in str(e.value)


def test_target_hidden_size_mismatch_is_refused(tmp_path, tiny_target_dir, runner):
    d = make_draft(tmp_path / "d", tiny_target_dir, [-1, 1, 3], config_overrides={"target_hidden_size": 32})
    rewrite_weights(d, lambda w: {**w, "fc.weight": torch.randn(64, 96)})
    m = target_manifest(tiny_target_dir, [-1, 1, 3]).to_dict()
    (d / "eagle3_manifest.json").write_text(json.dumps({**m, "target": {**m["target"], "hidden_size": 32}}))
    with pytest.raises(DeploymentError) as e:
        load_draft(d, runner)  # target_hidden_size != hidden_size: SGLang cannot share the target's embedding
    assert "tensor 'embed_tokens.weight': missing" in e.value.problem and e.value.fix
    rewrite_weights(d, lambda w: {**w, "embed_tokens.weight": torch.randn(256, 64)})
    load_draft(d, runner)  # consistent with its manifest, so it loads ...
    with pytest.raises(InputError) as e:
        _resolve(runner, d)  # ... but the target's resolution refuses it
    assert "hidden_size" in str(e.value) and "32" in str(e.value)


def test_eagle_config_ids_that_name_other_layers_are_refused(tmp_path, tiny_target_dir, runner):
    d = make_draft(tmp_path / "d", tiny_target_dir, [-1, 1, 3])
    rewrite_config(d, lambda c: {**c, "eagle_config": {**c["eagle_config"],
                                                       "eagle_aux_hidden_state_layer_ids": [0, 2, 5]}})
    with pytest.raises(DeploymentError) as e:
        _resolve(runner, d)
    assert (e.value.file, e.value.field) == (str(d / "eagle3_manifest.json"), "layer_ids")
    assert "config.json field 'eagle_config" in e.value.problem and e.value.fix


@pytest.mark.parametrize("layer_ids", [[-1, 1, 3], [3, -1, 1]], ids=["ascending", "not ascending"])
def test_target_configured_by_the_capture_patch_feeds_the_declared_ids(tmp_path, tiny_target_dir, runner, layer_ids):
    d = make_draft(tmp_path / "d", tiny_target_dir, layer_ids)
    load_draft(d, runner)
    with capture_patch.patched():
        declared = _resolve(runner, d)
        assert declared.layer_ids == tuple(layer_ids)
        runner.model.set_eagle3_layers_to_capture(declared)
        try:
            assert capture_patch.fed_layer_ids(runner.model) == tuple(layer_ids)
            runner.model.set_eagle3_layers_to_capture(DeclaredLayerIds([-1, 3, 1], "test"))
            assert capture_patch.fed_layer_ids(runner.model) == (-1, 3, 1)
        finally:
            runner.reset_capture()


def _stand_in_attention(weight):
    """Attention replaced by a fixed linear map of its [embeds, hidden] input, to isolate the residual wiring."""

    class StandIn(torch.nn.Module):
        def __init__(self, returns_tuple):
            super().__init__()
            self.returns_tuple = returns_tuple

        def forward(self, *args, hidden_states=None, **kwargs):
            out = hidden_states @ weight
            return (out, None) if self.returns_tuple else out

    return StandIn


@pytest.mark.parametrize("norm_before_residual", [True, False])
def test_first_layer_matches_speculators_for_norm_before_residual(tmp_path, tiny_target_dir, runner,
                                                                   norm_before_residual):
    from speculators.models.eagle3.model_definitions import LlamaDecoderEagle3FirstLayer
    from transformers import LlamaConfig

    d = make_draft(tmp_path / "d", tiny_target_dir, [-1, 1, 3],
                   config_overrides={"norm_before_residual": norm_before_residual})
    rewrite_weights(d, lambda w: {k: (v + 0.3 * torch.randn_like(v) if k.endswith("norm.weight") else v)
                                  for k, v in w.items()})
    layer = load_draft(d, runner).model.layers[0]
    cfg = json.loads((d / "config.json").read_text())
    h = cfg["hidden_size"]
    ref_cfg = LlamaConfig(**{k: cfg[k] for k in ("hidden_size", "intermediate_size", "num_attention_heads",
                                                  "num_key_value_heads", "head_dim", "rms_norm_eps", "vocab_size")})
    sd = _sd(d)
    refs = {}
    for flag in (True, False):
        ref = LlamaDecoderEagle3FirstLayer(ref_cfg, 0, norm_before_residual=flag)
        ref.load_state_dict({k[len("midlayer."):]: v for k, v in sd.items() if k.startswith("midlayer.")}, strict=True)
        refs[flag] = ref
    attn_w = torch.randn(2 * h, h) * 0.1
    layer.self_attn = _stand_in_attention(attn_w)(returns_tuple=False)
    for ref in refs.values():
        ref.self_attn = _stand_in_attention(attn_w)(returns_tuple=True)
    embeds, hidden = torch.randn(5, h), torch.randn(5, h) * 3
    with torch.no_grad():
        out, residual = layer(torch.arange(5), embeds, hidden, None, None)
        ours = out + residual  # what the final norm adds before normalising
        expected = {f: r(torch.cat([embeds, hidden], -1)[None])[0] for f, r in refs.items()}
    torch.testing.assert_close(ours, expected[norm_before_residual], **TOLERANCES[torch.float32])
    assert not torch.allclose(ours, expected[not norm_before_residual], atol=1e-3)


def test_mla_draft_loads_fused_projections_and_adds_norm_before_fc(tmp_path, tiny_target_dir, runner):
    from transformers.models.llama.modeling_llama import LlamaRMSNorm

    d = make_mla_draft(tmp_path / "d", tiny_target_dir, [-1, 1, 3], config_overrides={"norm_before_fc": True})
    rewrite_weights(d, lambda w: {**w, "input_norm.weight": 1 + 0.3 * torch.randn(192)})
    model = load_draft(d, runner)
    assert type(model).__name__ == "Eagle3DeepseekV2ForCausalLM"
    sd, params = _sd(d), dict(model.named_parameters())
    fused = params["model.midlayer.self_attn.fused_qkv_a_proj_with_mqa.weight"]
    assert torch.equal(fused, torch.cat([sd["layers.0.self_attn.q_a_proj.weight"],
                                         sd["layers.0.self_attn.kv_a_proj_with_mqa.weight"]]))
    ref_norm = LlamaRMSNorm(192, eps=model.config.rms_norm_eps)
    ref_norm.weight.data.copy_(sd["input_norm.weight"])
    x = torch.randn(4, 192)
    with torch.no_grad():
        got = model.model.fc(x)[0]
        expected = torch.nn.functional.linear(ref_norm(x), sd["fc.weight"])
    torch.testing.assert_close(got, expected, **TOLERANCES[torch.float32])


def test_mla_draft_missing_half_of_a_fused_pair_is_refused(tmp_path, tiny_target_dir, runner):
    d = make_mla_draft(tmp_path / "d", tiny_target_dir, [-1, 1, 3])
    rewrite_weights(d, lambda w: {k: v for k, v in w.items() if "kv_a_proj_with_mqa" not in k})
    with pytest.raises(DeploymentError) as e:
        load_draft(d, runner)
    assert "tensor 'layers.0.self_attn.q_a_proj.weight': not loaded" in str(e.value)
    assert "layers.0.self_attn.{q_a_proj,kv_a_proj_with_mqa}.weight': missing" in str(e.value)


def test_set_embed_keeps_a_trained_embedding_and_shares_an_identical_one(tmp_path, tiny_target_dir, runner):
    target_embed = runner.model.model.embed_tokens.weight
    src = make_speculators_draft(tmp_path / "spec", tiny_target_dir, [0, 2, 4])
    rewrite_config(src, lambda c: {**c["transformer_layer_config"], "architectures": ["LlamaForCausalLMEagle3"],
                                   "draft_vocab_size": c["draft_vocab_size"],
                                   "eagle_config": {"eagle_aux_hidden_state_layer_ids": [0, 2, 4]}})
    write_manifest(src, target_manifest(tiny_target_dir, [-1, 1, 3]))
    same = load_draft(src, runner)
    same.set_embed(target_embed)  # the frozen copy equals the target's: shared, as stock SGLang does
    assert same.model.embed_tokens.weight is target_embed
    rewrite_weights(src, lambda w: {**w, "embed_tokens.weight": w["embed_tokens.weight"] + 1})
    trained = load_draft(src, runner)
    trained.set_embed(target_embed)
    assert torch.equal(trained.model.embed_tokens.weight, _sd(src)["embed_tokens.weight"])


def test_apply_is_idempotent_and_revert_is_exact():
    from sglang.srt.models.kimi_k25_eagle3 import Eagle3DeepseekV2ForCausalLM
    from sglang.srt.models.llama_eagle3 import LlamaForCausalLMEagle3
    from sglang.srt.speculative.eagle_worker_v2 import EagleDraftWorker

    classes = (LlamaForCausalLMEagle3, Eagle3DeepseekV2ForCausalLM, EagleDraftWorker)
    assert is_draft_head_patched() and apply_draft_head_patch() is False
    revert_draft_head_patch()
    before = [dict(vars(c)) for c in classes]
    assert not is_draft_head_patched()
    assert apply_draft_head_patch() is True
    assert LlamaForCausalLMEagle3.__name__ == "LlamaForCausalLMEagle3"  # SGLang keys MLA detection on the names
    assert ("set_embed" in vars(LlamaForCausalLMEagle3)
            and vars(LlamaForCausalLMEagle3)["__init__"] is not before[0]["__init__"])
    revert_draft_head_patch()
    assert [dict(vars(c)) for c in classes] == before
    apply_draft_head_patch()  # the fixture reverts
