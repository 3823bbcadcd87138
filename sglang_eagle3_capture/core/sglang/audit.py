"""The draft weight-load audit: every checkpoint tensor reaches a parameter, every parameter is written.

:class:`LoadAudit` wraps each parameter's ``weight_loader`` while SGLang's own ``load_weights`` runs; a tensor
SGLang drops, a parameter nothing wrote, or a bad shape is one :class:`DeploymentError`. Needs torch, not SGLang.
"""

from __future__ import annotations

from typing import Any

from ..checkpoint import parameter_checkpoint_names
from ..draft_checks import DraftPlan
from ..errors import DeploymentError


def audit_report(plan: DraftPlan, unconsumed: list, missing: list, shape_errors: list) -> None:
    """Raise one :class:`DeploymentError` listing every problem the weight load found (or return)."""
    lines = [f"{plan.where(name)}: not loaded into any parameter of SGLang's "
             f"{'Eagle3DeepseekV2ForCausalLM' if plan.mla else 'LlamaForCausalLMEagle3'} (SGLang would drop it "
             "silently, and serve different math than training)" for name in unconsumed]
    files = sorted({str(i.file) for i in plan.tensor_files.values()}) or [str(plan.config_file.parent)]
    lines += [f"{', '.join(files)}: tensor '{parameter_checkpoint_names(p)}': missing; "
              f"SGLang's parameter '{p}' would keep its random initial values" for p in missing]
    lines += shape_errors
    if lines:
        raise DeploymentError(plan.config_file.parent, None, f"the checkpoint does not match the model SGLang builds "
                              f"from {plan.config_file}: " + "; ".join(lines),
                              "re-export the draft with `sglang-eagle3-capture convert SRC DST`, or correct "
                              "config.json so it describes the checkpoint (the architecture, flags and sizes the draft "
                              "was trained with)")


def _source(plan: DraftPlan, tensor: str) -> tuple[Any, str]:
    """``(file, field)`` of a checkpoint tensor for an error: the file that holds it, and its name."""
    info = plan.tensor_files.get(tensor)
    return (info.file if info is not None else plan.config_file.parent), f"tensor {tensor}"


_STACKED = {"qkv_proj.weight": {"q", "k", "v"}, "gate_up_proj.weight": {0, 1}}  # fused params: shard ids


class LoadAudit:
    """Wraps every parameter's ``weight_loader`` to record which checkpoint tensor reached which parameter."""

    def __init__(self, model: Any, plan: DraftPlan) -> None:
        self.plan, self.params = plan, dict(model.named_parameters())
        self.fc = next(p for p in self.params if p.endswith("model.fc.weight"))
        self.written: dict = {}  # parameter -> shard ids written
        self.consumed, self.seen, self.special, self.errors = set(), [], {}, []
        self.current = None

    def stream(self, weights):
        """Pass ``weights`` through, noting the tensor being loaded; ``d2t``/``t2d`` are kept for checks."""
        for name, tensor in weights:
            self.current = name
            self.seen.append(name)
            if name.rsplit(".", 1)[-1] in ("d2t", "t2d"):
                self.special[name.rsplit(".", 1)[-1]] = (name, tensor)
                self.consumed.add(name)
            yield name, tensor

    def loader(self, pname: str, inner, default: bool):
        """A ``weight_loader`` for parameter ``pname`` that checks shapes, records, then calls ``inner``."""
        plan = self.plan

        def weight_loader(p, loaded, *args, **kwargs):
            name = self.current
            m = plan.manifest
            if m is not None and pname == self.fc and loaded.dim() == 2 and loaded.shape[1] != m.fc_in_features:
                self.errors.append(f"{plan.where(name)}: input width {loaded.shape[1]}, but manifest {m.path} "
                                   f"needs len(layer_ids) x target.hidden_size = {m.fc_in_features}")
                return None
            if default and not args and p.numel() != 1 and tuple(p.shape) != tuple(loaded.shape):
                self.errors.append(f"{plan.where(name)}: shape {list(loaded.shape)}, but SGLang's parameter "
                                   f"'{pname}' is {list(p.shape)}")
                return None
            try:
                out = inner(p, loaded, *args, **kwargs)
            except (AssertionError, ValueError, RuntimeError) as e:
                raise DeploymentError(*_source(plan, name), f"SGLang could not load it into '{pname}' ({e})",
                                      "re-export the draft with `sglang-eagle3-capture convert SRC DST`") from e
            self.consumed.add(name)
            self.written.setdefault(pname, set()).add(args[0] if args else kwargs.get("shard_id"))
            return out

        return weight_loader

    def unconsumed(self) -> list:
        """Checkpoint tensors that reached no parameter (the MLA loader fuses q_a/kv_a on the second of the pair)."""
        for name in self.seen:
            pair = name.replace("q_a_proj", "kv_a_proj_with_mqa") if "q_a_proj" in name else \
                name.replace("kv_a_proj_with_mqa", "q_a_proj")
            if pair != name and pair in self.consumed:
                self.consumed.add(name)
        return [n for n in self.seen if n not in self.consumed]

    def missing(self, expected: list) -> list:
        """Expected parameters nothing (or, for stacked ones, not every shard) was written into."""
        def shards(p):
            return next((s for suffix, s in _STACKED.items() if p.endswith(suffix)), set())
        return [p for p in expected if p not in self.written or not shards(p) <= self.written[p]]


def check_vocab_maps(model: Any, plan: DraftPlan, special: dict) -> None:
    """Check ``d2t`` (draft id -> target id offsets) and ``t2d`` (target-vocab mask) against the built model."""
    import torch

    vocab = model.config.vocab_size
    # The unsharded vocab: under tensor parallelism lm_head.weight holds only this rank's rows
    # (sglang/srt/layers/vocab_parallel_embedding.py VocabParallelEmbedding.num_embeddings).
    draft_vocab = int(getattr(model.lm_head, "num_embeddings", model.lm_head.weight.shape[0]))
    if "d2t" not in special:
        if draft_vocab != vocab:
            raise DeploymentError(plan.config_file.parent, "tensor d2t", f"missing, and the draft vocab "
                                  f"({draft_vocab}) is not the target vocab ({vocab}), so draft ids cannot be mapped "
                                  "to target ids", "export d2t")
        return
    name, d2t = special["d2t"]
    if d2t.dtype.is_floating_point or tuple(d2t.shape) != (draft_vocab,):
        raise DeploymentError(*_source(plan, name), f"{d2t.dtype} {list(d2t.shape)}, expected integer offsets of shape "
                              f"[{draft_vocab}] (draft_vocab_size)", "export d2t from the training run")
    target_ids = d2t.long() + torch.arange(draft_vocab)
    if bool((target_ids < 0).any() or (target_ids >= vocab).any()):
        raise DeploymentError(*_source(plan, name), f"maps draft ids outside the target vocab [0, {vocab})",
                              "export d2t for this target's tokenizer")
    if "t2d" in special:
        tname, t2d = special["t2d"]
        if t2d.dtype != torch.bool or tuple(t2d.shape) != (vocab,) or int(t2d.sum()) != draft_vocab \
                or not bool(t2d[target_ids].all()):
            raise DeploymentError(*_source(plan, tname), f"disagrees with d2t (expected a bool mask of shape [{vocab}] "
                                  f"that is true exactly at the {draft_vocab} target ids d2t maps to)",
                                  "export d2t and t2d from the same training run")
