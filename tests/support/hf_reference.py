"""HF transformers' own model classes (DeepSeek-V3 and every other target family) as the reference for SGLang's
outputs (no sglang import)."""

from __future__ import annotations

import torch


def load_hf(model_dir, *, as_sglang_stores_it: bool = False):
    """The checkpoint in ``model_dir`` as transformers' own model, fp32, eval mode (from ``model_dir/hf`` where the
    builder put transformers' own checkpoint beside the one SGLang loads).

    ``as_sglang_stores_it``: round the parameters SGLang keeps in a lower precision whatever ``--dtype`` says, so
    that the comparison measures the capture, not that rounding: GPT-OSS's attention sinks, which SGLang keeps in
    bf16 unless the attention backend is trtllm_mha (models/gpt_oss.py:425-431), about 1e-4 on the tiny target;
    Apertus's xIELU coefficients: SGLang creates ``alpha_p``, ``alpha_n`` and ``beta`` in bf16
    (layers/activation.py:322-342, ``XIELU(dtype=torch.bfloat16)``), loads the checkpoint into them and computes
    ``softplus(alpha_p)`` and ``beta + softplus(alpha_n)`` in bf16 (370-371), about 4e-3 on the tiny target; HF's
    parameters are set so that its fp32 formula yields those bf16 coefficients (to fp32 rounding).
    """
    import json
    from pathlib import Path

    import transformers

    # transformers' own checkpoint where the builder wrote another layout for SGLang beside it (tiny_models.py), then
    # the checkpoint's own class where transformers has it (a multimodal wrapper such as Llama 4's, which
    # AutoModelForCausalLM would not build from its composite config), else the causal-LM auto class.
    own = Path(model_dir) / "hf"
    source = own if own.is_dir() else Path(model_dir)
    arch = json.loads((source / "config.json").read_text())["architectures"][0]
    cls = getattr(transformers, arch, None) if arch.endswith("ForConditionalGeneration") else None
    model = (cls or transformers.AutoModelForCausalLM).from_pretrained(str(source), dtype=torch.float32).eval()
    if as_sglang_stores_it and model.config.model_type == "gpt_oss":
        with torch.no_grad():
            for layer in model.model.layers:
                layer.self_attn.sinks.copy_(layer.self_attn.sinks.to(torch.bfloat16).float())
    if as_sglang_stores_it and model.config.model_type == "apertus":
        with torch.no_grad():
            for layer in model.model.layers:
                act = layer.mlp.act_fn
                beta = act.beta.to(torch.bfloat16)
                coef_p = torch.nn.functional.softplus(act.alpha_p.to(torch.bfloat16)).float()
                coef_n = (beta + torch.nn.functional.softplus(act.alpha_n.to(torch.bfloat16))).float()
                act.alpha_p.copy_(torch.log(torch.expm1(coef_p)))  # HF: softplus(alpha_p) = coef_p
                act.alpha_n.copy_(torch.log(torch.expm1(coef_n - beta.float())))  # HF: beta + softplus(alpha_n)
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

    transformers applies the decoder stack's ``norm`` before storing ``hidden_states[N]``; the pre-norm value is
    the norm's input, read with a forward pre-hook.
    """
    seen = {}
    hook = decoder_stack(model).norm.register_forward_pre_hook(
        lambda module, args: seen.__setitem__("x", args[0][0].clone()))
    try:
        states = hf_hidden_states(model, prompt)
    finally:
        hook.remove()
    return (*states[:-1], seen["x"])


def decoder_stack(model):
    """The decoder stack (the module holding ``layers`` and the final ``norm``) of an HF causal LM or of a multimodal
    wrapper: ``model.model``, ``model.language_model.model`` (Llama 4) or ``model.model.language_model``."""
    for path in ("model", "language_model.model", "model.language_model"):
        stack = model
        for attr in path.split("."):
            stack = getattr(stack, attr, None)
        if stack is not None and hasattr(stack, "layers") and hasattr(stack, "norm"):
            return stack
    raise AttributeError(f"{type(model).__name__}: no decoder stack with layers and a final norm")


def assert_fc_input_is_hf(aux: torch.Tensor, model, prompts: list[list[int]], hf_indices: list[int]) -> list[float]:
    """Check the packed fc input ``aux`` (``[T, K*H]``) of one prefill batch of ``prompts`` (rows as batched) against
    HF's ``hidden_states[hf_indices[j]]`` per chunk ``j`` (index N: the last layer's output before the final norm,
    :func:`hf_layer_outputs`): index 0, the embedding, ``torch.equal`` (routed, not computed); every other chunk
    within the fp32 tolerance and outside it of both neighbouring indices (an off-by-one either way cannot pass).
    Returns the max |diff| per chunk."""
    from support.tolerances import TOLERANCES

    reference = [torch.cat(per) for per in zip(*(hf_layer_outputs(model, p) for p in prompts))]
    chunks = aux.split(aux.shape[-1] // len(hf_indices), dim=-1)
    assert len(chunks) == len(hf_indices)
    for chunk, index in zip(chunks, hf_indices):
        if index == 0:
            assert torch.equal(chunk, reference[0])
            continue
        torch.testing.assert_close(chunk, reference[index], **TOLERANCES[torch.float32])
        for neighbour in (index - 1, index + 1):
            if neighbour < len(reference):
                assert not torch.allclose(chunk, reference[neighbour], **TOLERANCES[torch.float32]), neighbour
    return [float((c - reference[i]).abs().max()) for c, i in zip(chunks, hf_indices)]
