"""The CPU runtime's stand-ins for Llama 4 (B10, B11): two CPU paths SGLang's ``Llama4ForCausalLM`` takes on a CPU
without AMX, where a CUDA (or AMX) path behaves otherwise. Never shipped; registered in
``sglang_cpu_patches.PATCHES``. Lines are SGLang 0.5.23's; both are feature-detected (a release without the function
or the module is left alone).

B10  sglang.srt.layers.moe.fused_moe_native
    ``moe_forward_native`` (fused_moe_native.py:61-69), which ``UnquantizedFusedMoEMethod.forward_cpu`` calls when the
    layer has no AMX backend (layers/quantization/unquant.py:1381-1392), raises ``NotImplementedError`` when
    ``moe_runner_config.apply_router_weight_on_input`` is set, as ``Llama4MoE`` sets it (models/llama4.py:126: top-1
    sigmoid routing, the expert sees ``x * weight``). SGLang's own CPU route for such a layer, the AMX one
    (unquant.py:1354-1361), first calls ``layers/moe/topk.py::apply_topk_weights_cpu`` (1224-1234: ``x *
    topk_weights``, the weights replaced by ones) and then runs the experts; we do exactly that before the original
    function, with a copy of the runner config that no longer asks for it. Every other call goes to the original.
B11  sglang.srt.models.llama4
    ``Llama4Attention.forward`` (llama4.py:330-337) calls ``self.rotary_emb(positions, q_view, k_view)`` on views of
    its fused ``qk`` buffer, discards the result (``q_out_unused``) and reads ``qk`` again: it relies on the rotary
    embedding writing in place, as ``RotaryEmbedding.forward_cuda`` does (``apply_rope_with_cos_sin_cache_inplace``,
    layers/rotary_embedding/base.py:453-475; only the NPU branch rebuilds ``qk`` from the result, 335-336). On a CPU
    without AMX ``forward_cpu`` returns ``forward_native``'s new tensors (base.py:448-451, 321-361) and the RoPE
    layers would run with no rotary embedding at all (the tiny target's layer 0 then differs from HF by 0.4). We wrap
    the ``get_rope`` that llama4.py calls (290) so that the module it builds for Llama 4 also writes its result into
    the query and key it is handed, as the CUDA kernel does; its return value is unchanged.
"""

import copy
import functools

_PATCHED = "_sglang_cpu_shim_patched"


def patch_router_weight_on_input(fused_moe_native_module):
    """B10: ``moe_forward_native`` applies the router weight to the input itself (see the module doc)."""
    if getattr(fused_moe_native_module, _PATCHED, False):
        return
    original = getattr(fused_moe_native_module, "moe_forward_native", None)
    if original is None:
        return

    @functools.wraps(original)
    def moe_forward_native(layer, x, topk_output, moe_runner_config):
        if not moe_runner_config.apply_router_weight_on_input:
            return original(layer, x, topk_output, moe_runner_config)
        from sglang.srt.layers.moe.topk import apply_topk_weights_cpu

        topk_weights, topk_ids, rest = topk_output
        x, topk_weights = apply_topk_weights_cpu(True, topk_weights, x)
        config = copy.copy(moe_runner_config)
        config.apply_router_weight_on_input = False
        return original(layer, x, type(topk_output)(topk_weights, topk_ids, rest), config)

    fused_moe_native_module.moe_forward_native = moe_forward_native
    setattr(fused_moe_native_module, _PATCHED, True)


def _writes_in_place(rope):
    forward = rope.forward

    @functools.wraps(forward)
    def in_place(positions, query, key, *args, **kwargs):
        q, k = forward(positions, query, key, *args, **kwargs)
        if q is not query:
            query.copy_(q.view(query.shape))
        if k is not key:
            key.copy_(k.view(key.shape))
        return q, k

    rope.forward = in_place  # an instance attribute: nn.Module.__call__ looks forward up on the instance
    return rope


def patch_llama4_rope_in_place(llama4_module):
    """B11: the rotary embeddings ``Llama4Attention`` builds write in place on CPU (see the module doc)."""
    if getattr(llama4_module, _PATCHED, False):
        return
    original = getattr(llama4_module, "get_rope", None)
    if original is None:
        return

    @functools.wraps(original)
    def get_rope(*args, **kwargs):
        return _writes_in_place(original(*args, **kwargs))

    llama4_module.get_rope = get_rope
    setattr(llama4_module, _PATCHED, True)
