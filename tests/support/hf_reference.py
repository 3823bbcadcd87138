"""HF transformers' own model classes (DeepSeek-V3 and every other target family) as the reference for SGLang's
outputs (no sglang import)."""

from __future__ import annotations

import torch


def load_hf(model_dir, *, as_sglang_stores_it: bool = False):
    """The checkpoint in ``model_dir`` as transformers' own model, fp32, eval mode.

    ``as_sglang_stores_it``: round the parameters SGLang keeps in a lower precision whatever ``--dtype`` says, so
    that the comparison measures the capture, not that rounding. Only GPT-OSS's attention sinks: SGLang keeps them
    in bf16 unless the attention backend is trtllm_mha (models/gpt_oss.py:425-431), about 1e-4 on the tiny target.
    """
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(str(model_dir), dtype=torch.float32).eval()
    if as_sglang_stores_it and model.config.model_type == "gpt_oss":
        with torch.no_grad():
            for layer in model.model.layers:
                layer.self_attn.sinks.copy_(layer.self_attn.sinks.to(torch.bfloat16).float())
    return model


@torch.no_grad()
def hf_greedy(model, prompts: list[list[int]], max_new_tokens: int) -> list[list[int]]:
    """``generate(do_sample=False)`` per prompt (no padding), EOS ignored like SGLang's ``ignore_eos``."""
    out = []
    for prompt in prompts:
        ids = model.generate(torch.tensor([prompt]), do_sample=False, max_new_tokens=max_new_tokens, eos_token_id=None)
        new = ids[0, len(prompt):].tolist()
        assert len(new) == max_new_tokens, f"HF generate stopped early: {new}"
        out.append(new)
    return out


@torch.no_grad()
def hf_hidden_states(model, prompt: list[int]) -> tuple[torch.Tensor, ...]:
    """``output_hidden_states`` for one prompt, each ``[T, H]``: [0] embeddings, [k] after k layers, [-1] normed."""
    return tuple(h[0] for h in model(torch.tensor([prompt]), output_hidden_states=True).hidden_states)


@torch.no_grad()
def hf_layer_outputs(model, prompt: list[int]) -> tuple[torch.Tensor, ...]:
    """Like :func:`hf_hidden_states`, but [N] is the last decoder layer's output *before* the final norm.

    transformers applies ``model.model.norm`` before storing ``hidden_states[N]``; the pre-norm value is
    the norm's input, read with a forward pre-hook.
    """
    seen = {}
    hook = model.model.norm.register_forward_pre_hook(lambda module, args: seen.__setitem__("x", args[0][0].clone()))
    try:
        states = hf_hidden_states(model, prompt)
    finally:
        hook.remove()
    return (*states[:-1], seen["x"])
