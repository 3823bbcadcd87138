"""Every target family's own SGLang class, with the capture patch applied, against HF transformers (docs/families.md).

SGLang allows one in-process ModelRunner per process (support/sglang_inprocess.py), so each family runs in a
process of its own, forked from one parent that imported torch and SGLang once (support/forked.py; the body is
support/family_proof.py): a tiny 6-layer target built with transformers' own class
(support/tiny_models.py ``build_family_target``) is loaded by SGLang's class through its ModelRunner, the patched
``set_eagle3_layers_to_capture`` receives declared layer ids as the plugin's resolution hands them on, and one
prefill of three prompts runs per case; what the model handed its LogitsProcessor is saved. This process compares
it with HF: the ``-1`` chunk ``torch.equal`` to ``hidden_states[0]``, every other chunk within the fp32 tolerance
of its HF index and outside it of both neighbours, layer id 5 (N-1) against HF's last layer output *before* the
final norm, ``final_norm`` ``torch.equal`` to SGLang's final norm output (taken by the subprocess's own hook) and
within the tolerance of HF ``hidden_states[N]``, and the chunks in the declared order.

A family transformers has no class for (Bailing-MoE) is proven against SGLang's own stock capture instead: the same
subprocess also runs stock SGLang's reading of ids that capture every loop index 0..N-1, and records the final norm's
operand sum (its input, taken by this test's own pre-hook); every chunk must be ``torch.equal`` to the stock capture
of its loop index (N-1: to that operand sum), ``final_norm`` to the norm's own output, and the first-batch self-check
(whose references come from the model's own modules) must pass, as for every family.

A family whose stock loop captures a layer's branch output apart from its residual (``stream_from="input-norm"``:
Gemma 3, plain and inside its multimodal wrapper) is also shown stock SGLang's capture: the branch output bit for
bit, far from HF's ``hidden_states`` (the test fails when SGLang fixes it: then the workaround goes), the plugin's
chunks the very sum ``branch + residual`` the next layer's input norm forms, and the same with a fused in-place input
norm (``Gemma3RMSNorm.forward_cuda``'s contract, emulated on CPU), where stock SGLang's embedding chunk is overwritten.
The multimodal wrappers run text-only prompts (the vision towers are loaded, not run).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from sglang_eagle3_capture.core import families
from sglang_eagle3_capture.core.families.schema import STREAM_FROM_INPUT_NORM
from sglang_eagle3_capture.core.layer_ids import FINAL_NORM, hidden_state_index
from support.family_proof import CASES, N_LAYERS, PROMPTS
from support.hf_reference import hf_hidden_states, hf_layer_outputs, load_hf
from support.tiny_models import FAMILY_TARGETS, build_family_target
from support.tolerances import TOLERANCES

STOCK_LOOP = [0, 2, 4]  # layer ids [-1, 1, 3] as loop indices: stock SGLang's own capture, for the reordering check
TOL = TOLERANCES[torch.float32]


def _close(a, b) -> bool:
    return a.shape == b.shape and torch.allclose(a, b, **TOL)


def _run_family(forked, name: str, model_dir: Path, out: Path) -> dict:
    rc, log = forked.call("support.family_proof:run_family", name, model_dir, out)
    assert rc == 0, log[-6000:]
    return torch.load(out)


def _references(name: str, model_dir, got: dict) -> tuple[list, int, bool]:
    """Per prompt ``(layer outputs [0..N], the final norm's output)`` to compare with, the hidden size, and whether
    they must be met bit for bit: HF transformers' (within the tolerance), or for a family without an HF class stock
    SGLang's own capture of every loop index and the final norm's operand sum and output (``torch.equal``)."""
    if FAMILY_TARGETS[name].has_hf_class:
        hf = load_hf(model_dir, as_sglang_stores_it=True)
        return [(hf_layer_outputs(hf, p), hf_hidden_states(hf, p)[N_LAYERS]) for p in PROMPTS], \
            hf.config.get_text_config().hidden_size, False
    hidden = json.loads((model_dir / "config.json").read_text())["hidden_size"]
    every = got["stock_every"]
    assert every["loop"] == list(range(N_LAYERS))
    return [((*every["aux"][rows].split(hidden, dim=-1), every["norm_input"][rows]), every["normed"][rows])
            for rows in _slices(PROMPTS)], hidden, True


@pytest.mark.parametrize("name", sorted(FAMILY_TARGETS))
def test_family_capture_matches_hf(name, forked, tmp_path):
    model_dir = build_family_target(name, tmp_path / name, num_hidden_layers=N_LAYERS)
    got = _run_family(forked, name, model_dir, tmp_path / "out.pt")
    arch = json.loads((model_dir / "config.json").read_text())["architectures"][0]
    family = families.family_of(arch)
    assert family is not None and got["model_class"] == arch
    assert got["stack_forward_marked"], got["stack_class"]  # its forward is one of the family patch's wrappers
    per_prompt, hidden, exact = _references(name, model_dir, got)
    diffs = {}
    for case, ids in CASES.items():
        c = got["cases"][case]
        assert c["loop"] == sorted(hidden_state_index(i) for i in ids if i not in (N_LAYERS - 1, FINAL_NORM)), case
        assert c["fed"] == tuple(ids), case  # what the draft-side check reads
        hooked = N_LAYERS - 1 in ids or FINAL_NORM in ids
        assert c["norm_hooks"] == (1 if hooked else 0), case  # the previous case's hook is gone
        assert c["selfcheck_passed"], case  # core/sglang/selfcheck.py took every chunk's reference and it matched
        if family.layer_flag is not None:
            assert c["flagged"] == c["loop"], case  # exactly the planned layers, none left from earlier cases
        assert c["aux"].shape == (sum(map(len, PROMPTS)), len(ids) * hidden), case
        case_diffs = [0.0] * len(ids)
        for (hf_out, hf_normed), rows in zip(per_prompt, _slices(PROMPTS)):
            chunks = c["aux"][rows].split(hidden, dim=-1)
            for j, (chunk, layer_id) in enumerate(zip(chunks, ids)):
                if layer_id == FINAL_NORM:
                    assert torch.equal(chunk, c["normed"][rows]), case  # the norm module's own output, bit for bit
                    if exact:
                        assert torch.equal(chunk, hf_normed), case
                    torch.testing.assert_close(chunk, hf_normed, **TOL, msg=lambda m: f"{case} final_norm: {m}")
                    assert not _close(chunk, hf_out[N_LAYERS]), case  # not the pre-norm state
                    case_diffs[j] = max(case_diffs[j], float((chunk - hf_normed).abs().max()))
                    continue
                index = hidden_state_index(layer_id)
                if layer_id == -1:
                    assert torch.equal(chunk, hf_out[0]), case  # the embedding: routed, never computed
                else:
                    if exact:  # the stock capture of the same loop index (N-1: the final norm's input)
                        assert torch.equal(chunk, hf_out[index]), (case, layer_id)
                    torch.testing.assert_close(chunk, hf_out[index], **TOL, msg=lambda m: f"{case} {layer_id}: {m}")
                    assert not _close(chunk, hf_out[index - 1]), (case, layer_id)  # an off-by-one cannot pass
                    if index < N_LAYERS:
                        assert not _close(chunk, hf_out[index + 1]), (case, layer_id)
                    else:
                        assert not _close(chunk, hf_normed), (case, layer_id)  # pre-norm, not what the LM head gets
                case_diffs[j] = max(case_diffs[j], float((chunk - hf_out[index]).abs().max()))
            torch.testing.assert_close(c["hidden"][rows], hf_normed, **TOL)  # the LM head's input is untouched
        diffs[case] = case_diffs
    stock = got["stock"]
    assert stock["loop"] == STOCK_LOOP and stock["aux"].shape[-1] == 3 * hidden
    s0, s2, s4 = stock["aux"].split(hidden, dim=-1)
    assert torch.equal(got["cases"]["manifest"]["aux"][:, :hidden], s0)
    if family.stream_from == STREAM_FROM_INPUT_NORM:
        diffs["stock"] = _stock_feeds_branch_outputs(got, per_prompt, hidden)
    else:  # the capture is a pure reordering of stock SGLang's own capture (same tensors, torch.equal)
        assert torch.equal(got["cases"]["permuted"]["aux"], torch.cat([s4, s0, s2], dim=-1))
    if exact:
        assert got["next_token_ids"] == got["stock_every"]["next_token_ids"]  # stock SGLang's own prediction
    else:
        hf = load_hf(model_dir, as_sglang_stores_it=True)
        with torch.no_grad():
            expected_next = [int(hf(torch.tensor([p])).logits[0, -1].argmax()) for p in PROMPTS]
        assert got["next_token_ids"] == expected_next  # the patched model still predicts what HF predicts
    print(f"{name} ({family.name}, {arch}): max |diff| per chunk vs {'stock SGLang' if exact else 'HF'} "
          f"{json.dumps(diffs)}")


def _stock_feeds_branch_outputs(got, per_prompt, hidden) -> list[float]:
    """Stock SGLang's chunks for loop indices 2 and 4 are layers 1 and 3's branch outputs (their decoder layers'
    ``output[0]``), not HF's hidden_states[2] and [4]; the plugin feeds ``output[0] + output[1]``, the sum the next
    layer's input norm forms; with a fused in-place input norm the plugin's chunks stay HF's and stock's embedding
    chunk is overwritten. Returns max |stock - HF| for loop indices 2 and 4."""
    stock, outs = got["stock"], got["stock"]["layer_out"]
    s0, s2, s4 = stock["aux"].split(hidden, dim=-1)
    fixed = "stock SGLang now feeds the residual stream here: drop stream_from='input-norm' and branch_captures"
    assert torch.equal(s2, outs[1][0]) and torch.equal(s4, outs[3][0]), fixed
    far = []
    for (hf_out, _), rows in zip(per_prompt, _slices(PROMPTS)):
        for chunk, index in ((s2, 2), (s4, 4)):
            assert not _close(chunk[rows], hf_out[index]), fixed
        far.append([float((s2[rows] - hf_out[2]).abs().max()), float((s4[rows] - hf_out[4]).abs().max())])
    streams = [outs[k][0] + outs[k][1] for k in (1, 3)]  # the next input norm's x + residual (forward_native's sum)
    assert torch.equal(got["cases"]["permuted"]["aux"], torch.cat([streams[1], s0, streams[0]], dim=-1))
    fused = got["fused"]
    f0 = fused["stock_aux"].split(hidden, dim=-1)[0]
    assert fused["stock_loop"] == STOCK_LOOP and not torch.equal(f0, s0)  # the embedding chunk overwritten in place
    assert fused["selfcheck_passed"] and torch.equal(fused["aux"], got["cases"]["manifest"]["aux"])
    return [max(d[0] for d in far), max(d[1] for d in far)]


def _slices(prompts):
    out, start = [], 0
    for p in prompts:
        out.append(slice(start, start + len(p)))
        start += len(p)
    return out
