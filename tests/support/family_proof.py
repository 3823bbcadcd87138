"""The SGLang side of the per-family capture proof (tests/engine/test_families_capture.py): SGLang's own class for a
family, loaded through its ModelRunner with the capture patch applied, one prefill of :data:`PROMPTS` per case of
:data:`CASES`, and what the model handed its LogitsProcessor saved with ``torch.save``. It runs in a child process
forked by :mod:`support.forked` (SGLang allows one in-process ModelRunner per process)."""

from __future__ import annotations

import torch

from sglang_eagle3_capture.core import families
from sglang_eagle3_capture.core.families.schema import STREAM_FROM_INPUT_NORM
from sglang_eagle3_capture.core.layer_ids import FINAL_NORM
from sglang_eagle3_capture.doctor.readings import stock_safe_eagle_config_ids
from support.tiny_models import FAMILY_TARGETS

N_LAYERS = 6
PROMPTS = [[5, 6, 7, 8, 9, 10], [11, 12, 13], [100, 3, 200, 45, 17]]
# name -> declared layer ids, configured in this order in one process (a reconfiguration must replace the last).
CASES = {
    "manifest": [-1, 1, 4],  # the draft: HF hidden_states[0, 2, 5]
    "permuted": [3, -1, 1],  # loop [0, 2, 4]: a permutation of the stock capture below
    "last-layer": [5, -1, 2],  # 5 = N-1: taken at the final norm, first in fc order
    "reconfigured-from": [-1, 1],
    "reconfigured": [2, 4],  # after [-1, 1]: nothing of the previous configuration may remain (Qwen-MoE flags)
    "last-alone": [5],
    "final-norm": [-1, 1, FINAL_NORM],  # HF hidden_states[0, 2, N]: the post-norm final state
    "pre-norm-last": [-1, 1, 5],  # the same slots with N-1: the pre-norm state, which differs
    "final-norm-first": [FINAL_NORM, 5, -1],  # both meanings side by side, out of loop order
}


def run_family(name: str, model_dir: str, out_path: str) -> None:
    """Subprocess body: SGLang's class for ``name`` on ``model_dir``, patched, one prefill per case, saved."""
    from harness.sglang_inprocess import get_runner
    from sglang_eagle3_capture.core.sglang import selfcheck, target
    from sglang_eagle3_capture.core.sglang.resolution import DeclaredLayerIds

    target.apply()
    assert target.is_patched(), target.status()
    runner = get_runner(model_dir, **FAMILY_TARGETS[name].server_args)
    model = runner.model
    family = families.family_of(type(model).__name__)
    cls = type(model).__name__
    if cls in dict(family.model_attrs):  # a wrapper that names its decoder stack (Gemma's language_model)
        stack = getattr(model, family.stack_attr(cls))
    else:  # a wrapper that delegates to its language model (Llama 4), or holds the stack itself (MiniMax-M3's,
        # Qwen3.5's and the Qwen-VL classes)
        lm = getattr(model, "language_model", model) if cls in family.text_config else model
        stack = getattr(lm, family.model_attr)
    norm = getattr(stack, family.final_norm)
    result = {"model_class": type(model).__name__, "stack_class": type(stack).__name__,
              "stack_forward_marked": bool(getattr(type(stack).forward, "__eagle3_capture__", False)), "cases": {}}
    normed = []  # the final norm's own output per forward (output[0] of norm(hidden, residual)): this test's hook
    norm.register_forward_hook(lambda m, a, o: normed.append((o[0] if isinstance(o, tuple) else o).clone()))
    norm_input = []  # its input: the sum of its operands, as an fp32 RMSNorm forms it (this test's own pre-hook)
    norm.register_forward_pre_hook(lambda m, a, kw: norm_input.append(_operand_sum(*a, **kw)), with_kwargs=True)
    for case, ids in CASES.items():
        model.set_eagle3_layers_to_capture(DeclaredLayerIds(ids, f"test manifest ({case})", family=family.name))
        normed.clear()
        out = runner.prefill(PROMPTS)  # the first extend batch after configuration: the self-check runs on it
        assert len(normed) == 1, (case, len(normed))
        flagged = [i for i, layer in enumerate(stack.layers) if getattr(layer, family.layer_flag or "-", False)]
        result["cases"][case] = {"aux": out.aux, "hidden": out.hidden, "loop": list(stack.layers_to_capture),
                                 "fed": target.fed_layer_ids(model), "normed": normed[0],
                                 "norm_hooks": len(norm._forward_hooks) - 1,  # less this test's own hook
                                 "flagged": flagged, "selfcheck_passed": selfcheck.pending() == ()}
        result["next_token_ids"] = out.next_token_ids
    # Stock SGLang's own reading, through the patched method's stock path, of ids that mean loop [0, 2, 4].
    outs = {}  # each decoder layer's output for the stock run: (branch, residual) in a family that leaves them apart
    hooks = [layer.register_forward_hook(lambda m, a, o, i=i: outs.__setitem__(i, tuple(t.clone() for t in o)))
             for i, layer in enumerate(stack.layers)] if family.stream_from == STREAM_FROM_INPUT_NORM else []
    model.set_eagle3_layers_to_capture(stock_safe_eagle_config_ids([-1, 1, 3], family=family))
    out = runner.prefill(PROMPTS)
    result["stock"] = {"aux": out.aux, "loop": list(stack.layers_to_capture), "layer_out": outs}
    for h in hooks:
        h.remove()
    if family.stream_from == STREAM_FROM_INPUT_NORM:
        result["fused"] = _with_fused_input_norms(runner, stack, family)
    if not FAMILY_TARGETS[name].has_hf_class:  # the reference: stock SGLang's capture of every loop index 0..N-1
        model.set_eagle3_layers_to_capture(stock_safe_eagle_config_ids(list(range(-1, N_LAYERS - 1)), family=family))
        normed.clear()
        norm_input.clear()
        out = runner.prefill(PROMPTS)
        result["stock_every"] = {"aux": out.aux, "loop": list(stack.layers_to_capture), "normed": normed[0],
                                 "norm_input": norm_input[0], "next_token_ids": out.next_token_ids}
    torch.save(result, out_path)


def _operand_sum(x, residual=None, *rest, **kwargs):
    """``x + residual`` (``x`` without one) in fp32, rounded once to ``x``'s dtype."""
    residual = kwargs.get("residual", residual)
    return x.clone() if residual is None else (x.float() + residual.float()).to(x.dtype)


def _with_fused_input_norms(runner, stack, family) -> dict:
    """The manifest case and the stock capture again, every norm of the input norm's class doing what its
    ``forward_cuda`` does (Gemma3RMSNorm, layers/layernorm.py:1342-1348: ``gemma_fused_add_rmsnorm`` writes the normed
    output into x and x + residual into residual, in place), emulated around the method SGLang's fused-op dispatch
    resolved for it (kernels/fused_op.py ``BaseFusedOp.forward``: ``_forward_method``, forward_native on this CPU)."""
    from sglang_eagle3_capture.core.sglang import selfcheck
    from sglang_eagle3_capture.core.sglang.resolution import DeclaredLayerIds

    model = runner.model
    cls = type(getattr(stack.layers[0], family.input_norm))
    norms = [m for m in stack.modules() if type(m) is cls and m._forward_method is not None]

    def in_place(native):
        def forward(x, residual=None):
            if residual is None:
                return native(x)
            normed, summed = native(x, residual)
            residual.copy_(summed)
            x.copy_(normed)
            return x, residual
        return forward

    resolved = [m._forward_method for m in norms]
    for m, native in zip(norms, resolved):
        m._forward_method = in_place(native)
    try:
        model.set_eagle3_layers_to_capture(DeclaredLayerIds(CASES["manifest"], "test manifest (fused)",
                                                            family=family.name))
        aux = runner.prefill(PROMPTS).aux
        passed = selfcheck.pending() == ()
        model.set_eagle3_layers_to_capture(stock_safe_eagle_config_ids([-1, 1, 3], family=family))
        stock = runner.prefill(PROMPTS).aux
    finally:
        for m, native in zip(norms, resolved):
            m._forward_method = native
    assert len(norms) > 2 * len(stack.layers), len(norms)  # every layer's input and pre-feedforward norms, at least
    return {"aux": aux, "selfcheck_passed": passed, "stock_aux": stock, "stock_loop": list(stack.layers_to_capture)}
