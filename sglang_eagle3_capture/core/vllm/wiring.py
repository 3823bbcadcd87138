"""What the vLLM plugin does at its seams (docs/vllm.md, "How the plugin hooks vLLM"): :func:`resolve` wires the
manifest into the V1 runner, :func:`fc_input` puts vLLM's captures into fc order on every real batch (the first batch
runs the self-check), and the gate refuses an unwired draft or, on Model Runner V2, :func:`verify_v2` checks vLLM's own
capture."""

from __future__ import annotations

import functools
import os
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from .. import (
    policy,
    releases,
    selfcheck,  # engine-neutral: references, comparison, message
)
from ..capture import plan_capture, to_fc_order
from ..config_keys import IDS_KEY
from ..errors import DeploymentError
from ..layer_ids import EMBEDDING_LAYER_ID, FINAL_NORM, hidden_state_indices
from ..logs import get_logger
from ..manifest import check_fc_width, find_manifest
from ..releases.schema import NORM_OPERANDS, VllmRelease
from ..target_config import target_dims

logger = get_logger(__name__)

PLAN = "_eagle3_capture_plan"  # on the runner: the CapturePlan it feeds (None: stock wiring)
EMBED = "_eagle3_capture_embedding"  # on the runner: True when the embedding is taken outside vLLM's loop
CHECK = "_eagle3_capture_selfcheck"  # on the runner: the pending first-batch self-check
_STATE: dict[str, Any] = {"release": None, "unserved": None}  # what plugin.register() found in this process


def set_state(release: VllmRelease | None, unserved: str | None) -> None:
    """Record the release this process serves (None: none) and why the capture is not active (None: it is)."""
    _STATE.update(release=release, unserved=unserved)


# ----------------------------------------------------------------------------------------------- the deployment


def _draft_dir(spec: Any) -> str | None:
    draft = getattr(getattr(spec, "draft_model_config", None), "model", None)
    return None if draft is None else str(draft)


def _draft_config(spec: Any) -> dict:
    """The draft's config.json as vLLM parsed it (the keys the readers look at)."""
    hf = spec.draft_model_config.hf_config
    out = {}
    for key in (IDS_KEY, "eagle_config", "num_aux_hidden_states", "dflash_config", "target_layer_ids"):
        value = getattr(hf, key, None)
        if value is not None:
            out[key] = value.to_dict() if hasattr(value, "to_dict") else value
    return out


def deployment(spec: Any, target_config: Any, unserved: str | None) -> policy.VllmDeployment:
    """The :class:`policy.VllmDeployment` of this worker's speculative config."""
    draft = _draft_dir(spec) or "DRAFT"
    manifest = find_manifest(draft) if Path(draft).is_dir() else None
    version = releases.installed_vllm_version() or "unknown"
    return policy.VllmDeployment(release=_STATE["release"] or releases.vllm_get(version), version=version,
                                 draft=draft, manifest=manifest, draft_config=_draft_config(spec),
                                 config_file=str(Path(draft) / "config.json"), target_config=target_config,
                                 unserved=unserved)


def _is_eagle3(spec: Any) -> bool:
    return spec is not None and getattr(spec, "method", None) == "eagle3"


def decoder_stack(model: Any) -> Any:
    """The decoder stack vLLM captures in (its ``set_aux_hidden_state_layers`` unwraps a model the same way)."""
    parent = model.get_language_model() if hasattr(model, "get_language_model") else getattr(
        model, "language_model", model)
    return getattr(parent, "model", parent)


# ----------------------------------------------------------------------------------------------- the seams


def resolve(runner: Any, original: Any) -> None:
    """The resolution: wire the manifest (module doc) or run vLLM's own setup for a draft that declares nothing."""
    spec = runner.speculative_config
    if not getattr(runner, "use_aux_hidden_state_outputs", False) or not _is_eagle3(spec):
        return original(runner)
    release = _STATE["release"]
    decision = policy.decide_vllm(deployment(spec, runner.model_config.hf_config, None))
    if decision.layer_ids is None:
        setattr(runner, PLAN, None)
        return original(runner)
    manifest = find_manifest(_draft_dir(spec))
    n = target_dims(runner.model_config.hf_config, "target config (--model)")[1]
    # Eagle3LlamaForCausalLM.model.fc, built from the draft's config.json (llama_eagle3.py:242; its ``input_size``: the
    # CPU build repacks the weight after loading and leaves ``weight`` empty)
    fc = runner.drafter.model.model.fc
    check_fc_width(manifest, int(fc.input_size), file=manifest.path, field="layer_ids")
    plan = plan_capture(decision.layer_ids, n, where=decision.file)
    inline = decision.family.name in release.embedding_crashes and EMBEDDING_LAYER_ID in decision.layer_ids
    indices = [i for i in plan.loop_indices if not (inline and i == 0)] + ([n] if plan.captures_last_layer else [])
    if not indices:  # vLLM's model then returns no aux list at all, and its runner unpacks one (gpu_model_runner:4218)
        raise DeploymentError(decision.file, decision.field, f"is {list(plan.layer_ids)}: none of them is a state "
                              f"vLLM's capture loop takes on {type(runner.model).__name__} (the embedding is taken "
                              "apart there, the final norm's output is the model's own), and vLLM runs EAGLE-3 only "
                              "with one", "serve this draft with SGLang, or with a manifest that names at least one "
                              "decoder layer")
    runner.model.set_aux_hidden_state_layers(tuple(indices))
    setattr(runner, PLAN, plan)
    setattr(runner, EMBED, inline)
    stack = decoder_stack(runner.model)
    setattr(runner, CHECK, _arm(stack, plan, n, decision.file, release))
    logger.info("eagle3-capture: vLLM %s runs %s with %s speculative tokens; the draft's fc is fed layer ids %s (from "
                "%s: field '%s') = vLLM indices %s%s%s, chunk order %s (%s, pid %d)", releases.installed_vllm_version(),
                spec.method, spec.num_speculative_tokens, list(plan.layer_ids), decision.file, decision.field,
                indices, " + the embedding (embed_input_ids)" if inline else "",
                " + the final norm's output" if plan.captures_final_norm else "", list(plan.chunk_order),
                type(runner.model).__name__, os.getpid())


def fc_input(runner: Any, plan: Any, out: Any, input_ids: Any, inputs_embeds: Any) -> Any:
    """``(hidden_states, [fc input])`` for the target model's output ``out`` (module doc)."""
    hidden, aux = out
    aux = list(aux)
    if getattr(runner, EMBED, False):
        embedding = inputs_embeds if inputs_embeds is not None else runner.model.embed_input_ids(input_ids)
        aux.insert(0, embedding)
    loop = len(plan.loop_indices)
    last = aux[loop] if plan.captures_last_layer else None
    fed = to_fc_order(aux[:loop], plan, last, hidden if plan.captures_final_norm else None)
    return hidden, [fed]


def _forward(original: Any) -> Any:
    @functools.wraps(original)
    def _model_forward(self, input_ids=None, positions=None, intermediate_tensors=None, inputs_embeds=None,
                       **model_kwargs):
        plan = getattr(self, PLAN, None)
        check = getattr(self, CHECK, None)
        if plan is None:
            return original(self, input_ids=input_ids, positions=positions,
                            intermediate_tensors=intermediate_tensors, inputs_embeds=inputs_embeds, **model_kwargs)
        if check is None:
            out = original(self, input_ids=input_ids, positions=positions,
                           intermediate_tensors=intermediate_tensors, inputs_embeds=inputs_embeds, **model_kwargs)
            return fc_input(self, plan, out, input_ids, inputs_embeds)
        session = selfcheck.Session(check, verify_output=False)
        session.take_inputs(decoder_stack(self.model), input_ids=input_ids, inputs_embeds=inputs_embeds)
        try:
            with _eager():
                out = original(self, input_ids=input_ids, positions=positions,
                               intermediate_tensors=intermediate_tensors, inputs_embeds=inputs_embeds, **model_kwargs)
            hidden, fed = fc_input(self, plan, out, input_ids, inputs_embeds)
            session.verify(fed[0], hidden.shape[0])
        finally:
            session.close()
        check.report(session)
        setattr(self, CHECK, None)
        return hidden, fed

    return _model_forward


class _eager:
    """For the checked forward: vLLM's compiled stack and CUDA-graph wrapper run the plain modules, so the check's
    hooks fire (``forward_context.skip_compiled``, ``cudagraph_runtime_mode`` NONE; ``compilation/decorators.py:534``,
    ``compilation/cuda_graph.py:247``); restored after."""

    def __enter__(self) -> None:
        from vllm.config import CUDAGraphMode
        from vllm.forward_context import get_forward_context, is_forward_context_available

        self.ctx = get_forward_context() if is_forward_context_available() else None
        if self.ctx is not None:
            self.saved = (self.ctx.skip_compiled, self.ctx.cudagraph_runtime_mode)
            self.ctx.skip_compiled, self.ctx.cudagraph_runtime_mode = True, CUDAGraphMode.NONE

    def __exit__(self, *exc: Any) -> None:
        if self.ctx is not None:
            self.ctx.skip_compiled, self.ctx.cudagraph_runtime_mode = self.saved


def _v2_release(runner: Any) -> VllmRelease | None:
    """The supported release whose Model Runner V2 ``runner`` is (its ``vllm.v2`` seam's class in the MRO), or None."""
    release = releases.vllm_get(releases.installed_vllm_version())
    if release is None or not release.supported or not release.has("vllm.v2"):
        return None
    seam = release.seam("vllm.v2")
    is_v2 = any(c.__module__ == seam.module and c.__name__ == seam.owner for c in type(runner).__mro__)
    return release if is_v2 else None


def verify_v2(worker: Any, runner: Any, spec: Any, release: VllmRelease, load: Any) -> None:
    """Model Runner V2 runs ``load`` (the model and the drafter) with vLLM's own capture, which the plugin serves only
    when it feeds the fc exactly the manifest's states in fc order: decoder-stream states in ascending order (V2
    concatenates its captures by index, ``spec_decode/target_dependent_ar/speculator.py``), not the embedding on a
    family that captures inline. Checked on the manifest before ``load`` (so a fail-closed config.json never reaches
    vLLM's reader) and on the loaded model after it (the indices it captures, the fc's width); else refused."""
    d = deployment(spec, worker.vllm_config.model_config.hf_config, None)
    decision = policy.decide_vllm(d)
    if decision.layer_ids is None:
        return load()
    ids, m = decision.layer_ids, d.manifest
    if FINAL_NORM in ids:
        _refuse_v2(decision, release, d.draft, f"'{FINAL_NORM}' is not a state Model Runner V2 captures (index N is "
                   "the last layer's output before the final norm)")
    if EMBEDDING_LAYER_ID in ids and decision.family.name in release.embedding_crashes:
        _refuse_v2(decision, release, d.draft, f"vLLM captures inline on {decision.family.name} and fails at index 0 "
                   "(the embedding)")
    if list(ids) != sorted(set(ids)):
        _refuse_v2(decision, release, d.draft, "Model Runner V2 concatenates its captures in ascending layer order")
    load()
    if getattr(runner, "speculator", None) is not None:  # only the last pipeline stage holds the drafter
        check_fc_width(m, int(runner.speculator.model.model.fc.input_size), file=m.path, field="layer_ids")
    wanted = tuple(hidden_state_indices(ids))
    captured = tuple(sorted(set(getattr(decoder_stack(runner.model), release.stack["aux_layers"]))))
    if captured != wanted:
        _refuse_v2(decision, release, d.draft, f"the loaded model captures the vLLM indices {list(captured)}, the "
                   f"manifest needs {list(wanted)}")
    logger.info("eagle3-capture: vLLM %s runs %s with %s speculative tokens on Model Runner V2 (not patched): vLLM's "
                "own capture feeds the draft's fc layer ids %s (from %s: field '%s') = vLLM indices %s, verified on "
                "the loaded model (pid %d)", release.version, spec.method, spec.num_speculative_tokens, list(ids),
                decision.file, decision.field, list(wanted), os.getpid())


def _refuse_v2(decision: Any, release: VllmRelease, draft: str, why: str) -> None:
    v1 = ("set VLLM_USE_V2_MODEL_RUNNER=0 (the plugin feeds any manifest through the V1 runner), or "
          if release.has("vllm.resolve") else "")
    raise DeploymentError(decision.file, decision.field, f"is {list(decision.layer_ids)}, which vLLM "
                          f"{release.version}'s Model Runner V2 cannot feed the fc exactly: {why}",
                          f"{v1}serve the draft with SGLang and the sglang-eagle3-capture plugin; for ascending "
                          f"decoder-layer ids, `sglang-eagle3-capture manifest write {draft} --force --fail-closed` "
                          "writes the top-level ids Model Runner V2 reads")


def _gate(original: Any) -> Any:
    @functools.wraps(original)
    def load_model(self, *args, **kwargs):
        spec = getattr(self.vllm_config, "speculative_config", None)
        runner = getattr(self, "model_runner", None)
        v2 = _v2_release(runner) if _is_eagle3(spec) and runner is not None else None
        if v2 is not None:
            return verify_v2(self, runner, spec, v2, lambda: original(self, *args, **kwargs))
        original(self, *args, **kwargs)
        if not _is_eagle3(spec):
            return
        wired = runner is not None and hasattr(runner, PLAN)
        unserved = None if wired else (_STATE["unserved"] or f"this worker's model runner "
                                       f"({type(runner).__name__} in {type(runner).__module__}) is not the one the "
                                       "plugin patches")
        policy.decide_vllm(deployment(spec, self.vllm_config.model_config.hf_config, unserved))

    return load_model


def _resolve_wrapper(original: Any) -> Any:
    @functools.wraps(original)
    def _setup_eagle3_aux_hidden_state_outputs(self):
        return resolve(self, original)

    return _setup_eagle3_aux_hidden_state_outputs


WRAPPERS = {"vllm.resolve": _resolve_wrapper, "vllm.feed": _forward, "vllm.gate": _gate}


# ----------------------------------------------------------------------------------------------- the self-check


class VllmSelfCheck(selfcheck.SelfCheck):
    """The first-batch self-check in a vLLM worker: the core's check (the same references, bound and message), its
    context and fix said for vLLM."""

    def context(self) -> str:
        return f"pid {os.getpid()}, vllm {releases.installed_vllm_version()}"

    def fix(self) -> str:
        versions = ", ".join(r.version for r in releases.vllm_supported())
        return (f"serve with a vLLM release the vLLM plugin supports ({versions}) and sglang-eagle3-capture "
                "unmodified, and remove anything else that patches the model's capture (plugins, sitecustomize); if "
                "it persists, report it with this message and the server arguments")


def _arm(stack: Any, plan: Any, n: int, where: str, release: VllmRelease) -> VllmSelfCheck | None:
    if not selfcheck.enabled():
        logger.warning("eagle3-capture: %s=0: the first-batch self-check is off; the fc wiring is not verified in this "
                       "process (pid %d)", selfcheck.ENV, os.getpid())
        return None
    s = release.stack
    # the decoder stack's names under the family table's attribute names, which is what the check reads
    stack_names = SimpleNamespace(layers=s["layers"], embed_tokens=s["embed"], input_norm=s["input_norm"],
                                  attn=s["attn"], final_norm=s["final_norm"], forward_params=tuple(s["forward_params"]),
                                  embeds_param=s["embeds_param"])
    return VllmSelfCheck(stack, plan, stack_names, (NORM_OPERANDS,), num_hidden_layers=n, where=where)


__all__ = ["CHECK", "EMBED", "PLAN", "WRAPPERS", "VllmSelfCheck", "decoder_stack", "deployment", "fc_input", "resolve",
           "set_state", "verify_v2"]
