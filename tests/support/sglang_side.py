"""SGLang-side bodies that need a process of their own (one in-process ModelRunner per process): each runs in a
child forked by the ``forked`` fixture (support/forked.py), reads its inputs from files or arguments and writes what
SGLang produced with ``torch.save``. The comparisons stay in the tests."""

from __future__ import annotations

import json
import types

import torch


def prefill_to_file(target_dir: str, prompts: str, out: str) -> None:
    """SGLang's in-process ModelRunner on a target, one prefill of ``prompts`` (JSON token-id lists)."""
    from harness.sglang_inprocess import get_runner

    result = get_runner(target_dir).prefill(json.loads(prompts))
    torch.save({"hidden": result.hidden, "next_token_ids": result.next_token_ids}, out)


def draft_extend_to_file(draft_dir: str, io_path: str, out: str) -> None:
    """SGLang's ModelRunner on a draft dir, one extend batch of ``io["ids"]`` with the target's packed aux hidden
    states ``io["aux"]`` handed in where SGLang's EAGLE-3 worker puts them (``forward_batch.spec_info``); the logits
    through SGLang's own ``lm_head`` weight, its greedy picks and its hot-token map."""
    import sglang.srt.models.llama_eagle3 as llama_eagle3

    from harness.sglang_inprocess import get_runner

    io = torch.load(io_path)
    original = llama_eagle3.LlamaModel.forward

    def forward(self, input_ids, positions, forward_batch, input_embeds=None, pp_proxy_tensors=None):
        forward_batch.spec_info = types.SimpleNamespace(hidden_states=io["aux"])  # [T, K*H], token order
        return original(self, input_ids, positions, forward_batch, input_embeds, pp_proxy_tensors)

    llama_eagle3.LlamaModel.forward = forward
    runner = get_runner(draft_dir)
    assert type(runner.model).__name__ == "LlamaForCausalLMEagle3"
    result = runner.prefill(io["ids"])
    vocab = runner.model.config.draft_vocab_size  # ParallelLMHead pads its rows
    logits = torch.nn.functional.linear(result.hidden, runner.model.lm_head.weight[:vocab])
    torch.save({"logits": logits, "next_token_ids": result.next_token_ids, "hot_token_id": runner.model.hot_token_id},
               out)


def parameters_to_file(model_dir: str, out: str) -> None:
    """Every parameter SGLang's own loader put into the model built from ``model_dir``, its class and hot-token map."""
    from harness.sglang_inprocess import get_runner

    model = get_runner(model_dir).model
    params = {n: p.detach().clone() for n, p in model.named_parameters()}
    params["<class>"] = type(model).__name__
    params["<hot_token_id>"] = model.hot_token_id
    torch.save(params, out)
