"""The first-batch self-check, engine-neutral (docs/self-check.md): each fc chunk of one checked forward compared with
the hidden state its layer id names, taken by a route that does not go through the capture; the engine adapters
(:mod:`.sglang.selfcheck`, :mod:`.vllm.wiring`) arm it and run it on their first real batch."""

from __future__ import annotations

import functools
import os
import time
import weakref
from dataclasses import dataclass
from typing import Any, Callable, Mapping

from . import switches
from .errors import DeploymentError
from .layer_ids import EMBEDDING_LAYER_ID, FINAL_NORM
from .logs import get_logger
from .releases.schema import FUSED_NORM, NORM_OPERANDS, RESIDUAL_STREAM
from .seams import attr_path

logger = get_logger(__name__)

ENV = switches.SELFCHECK.name
MAX_ROWS = 512  # token rows referenced and compared per chunk (the warmup request has a handful)
ULP_BOUND = 1  # allowed on the operand-sum routes (0 expected; docs/self-check.md)
_FUSED_METHODS = ("forward_with_allreduce_fusion", "forward_with_allreduce_fusion_quant_per_group")


def enabled(environ: Mapping[str, str] | None = None) -> bool:
    """True unless ``SGLANG_EAGLE3_CAPTURE_SELFCHECK`` turns it off; a value that does not read is refused."""
    return switches.read(switches.SELFCHECK, environ)


@dataclass
class Ref:
    """A hidden state taken by ``route`` (MAX_ROWS rows of ``source_rows``); ``rows``: the ones this rank can check."""

    value: Any
    route: str
    source_rows: int
    exact: bool
    rows: Any = None


class SelfCheck:
    """A pending check of one decoder stack; ``routes``: the release's ``selfcheck_routes`` (docs/self-check.md)."""

    def __init__(self, stack: Any, plan: Any, family: Any, routes: tuple[str, ...], *, num_hidden_layers: int,
                 where: str) -> None:
        self.stack_ref, self.stack_name = weakref.ref(stack), type(stack).__name__
        self.layer_ids, self.num_hidden_layers, self.where = tuple(plan.layer_ids), num_hidden_layers, where
        self.family, self.routes = family, tuple(routes)

    def context(self) -> str:
        """Where the check ran, for the log lines (an engine adapter says more)."""
        return f"pid {os.getpid()}"

    def fix(self) -> str:  # an engine adapter says its own
        return ("reinstall sglang-eagle3-capture unmodified and remove anything else that patches the model's capture "
                "(plugins, sitecustomize); if it persists, report it with this message and the server arguments")

    def attn_tp(self) -> tuple[int, int]:
        """``(rank, size)`` of this process's attention tensor parallelism: which slice of a batch it sees."""
        return 0, 1

    def report(self, session: "Session") -> None:  # the INFO line of a pass
        logger.info("eagle3-capture self-check passed (%s; %d tokens, checked forward %.1f ms, the check's own work "
                    "%.2f ms): %s; hooks removed", self.context(), session.tokens, session.elapsed_ms,
                    session.own_s * 1e3, "; ".join(f"chunk {j} layer {lid}: max|diff| {d:.3g} ({route})"
                                                   for j, lid, d, route in session.lines))


def _is_tensor(x: Any) -> bool:
    import torch
    return isinstance(x, torch.Tensor)


def _rounded_sum(module: Any, x: Any, residual: Any, post: Any, rows: int) -> Any:
    """``float(x) + float(residual) (+ float(post))`` rounded once, as SGLang's RMSNorm rounds the residual."""
    s = x[:rows].float() + residual[:rows].float()
    if _is_tensor(post):
        s = s + post[:rows].float()
    if getattr(module, "fp32_residual", False):
        return s
    return s.to(getattr(module, "override_orig_dtype", None) or x.dtype)


def _own_time(method: Callable) -> Callable:
    """Count the time spent in ``method`` as the check's own work (logged beside the checked forward's)."""

    @functools.wraps(method)
    def timed(self, *args, **kwargs):
        t = time.perf_counter()
        try:
            return method(self, *args, **kwargs)
        finally:
            self.own_s += time.perf_counter() - t

    return timed


class Session:
    """One checked forward of one :class:`SelfCheck`: hooks in, references taken, the fc compared, hooks out."""

    def __init__(self, check: SelfCheck, *, verify_output: bool = True) -> None:
        self.check, self.verify_output = check, verify_output  # False: the caller hands verify() the fc input (vLLM)
        # layer id -> Ref; hook handles; (norm, method name) shadowed; (chunk, layer id, max |diff|, route) compared
        self.refs, self.handles, self.shadowed, self.lines = {}, [], [], []
        self.passed, self.tokens, self.elapsed_ms, self.t0 = False, 0, 0.0, time.perf_counter()
        self.own_s = 0.0  # hooks installed and removed, references taken, comparison
        if (stack := check.stack_ref()) is not None:
            self._install(stack)

    @_own_time
    def _install(self, stack: Any) -> None:
        f, n = self.check.family, self.check.num_hidden_layers
        layers = getattr(stack, f.layers)
        for k in sorted({i for i in self.check.layer_ids if i != FINAL_NORM and 0 <= i <= n - 2}):
            nxt = layers[k + 1]
            norm, where = attr_path(nxt, f.input_norm), f"{f.layers}[{k + 1}].{f.input_norm}"
            if NORM_OPERANDS in self.check.routes:
                self.handles.append(norm.register_forward_pre_hook(
                    functools.partial(self._take_operands, k, f"operands of {where}"), with_kwargs=True))
            if FUSED_NORM in self.check.routes:
                for name in _FUSED_METHODS:
                    if callable(getattr(norm, name, None)):
                        self._shadow(norm, name, k, f"residual out of {where}.{name}")
            if RESIDUAL_STREAM in self.check.routes and f.attn is not None:
                self.handles.append(attr_path(nxt, f.attn).register_forward_pre_hook(
                    functools.partial(self._take_stream, k, f"residual_stream at {f.layers}[{k + 1}].{f.attn}"),
                    with_kwargs=True))
        if n - 1 in self.check.layer_ids:
            self.handles.append(getattr(stack, f.final_norm).register_forward_pre_hook(
                functools.partial(self._take_operands, n - 1, f"operands of the final {f.final_norm}"),
                with_kwargs=True))
        if FINAL_NORM in self.check.layer_ids:
            self.handles.append(getattr(stack, f.final_norm).register_forward_hook(self._take_normed))
        self.handles.append(stack.register_forward_pre_hook(self._take_inputs, with_kwargs=True))
        if self.verify_output:
            self.handles.append(stack.register_forward_hook(self._verify_output))

    def _shadow(self, norm: Any, name: str, k: int, route: str) -> None:
        method = getattr(norm, name)

        @functools.wraps(method)
        def fused(*args, **kwargs):
            out = method(*args, **kwargs)
            t = time.perf_counter()
            if k not in self.refs and isinstance(out, tuple) and len(out) >= 2 and _is_tensor(out[1]):
                self.refs[k] = Ref(out[1][:MAX_ROWS].clone(), route, out[1].shape[0], exact=True)
            self.own_s += time.perf_counter() - t
            return out

        setattr(norm, name, fused)  # an instance attribute: SGLang looks the method up at call time
        self.shadowed.append((norm, name))

    @_own_time
    def _take_operands(self, k: int, route: str, module: Any, args: tuple, kwargs: dict) -> None:
        x = args[0] if args else kwargs.get("x", kwargs.get("hidden_states"))
        residual = args[1] if len(args) > 1 else kwargs.get("residual")
        post = args[2] if len(args) > 2 else kwargs.get("post_residual_addition")
        if k in self.refs or not _is_tensor(x):
            return
        if _is_tensor(residual):  # the sum the norm is about to form (maybe in place): take it now
            self.refs[k] = Ref(_rounded_sum(module, x, residual, post, MAX_ROWS), route, x.shape[0], exact=False)
        elif k == self.check.num_hidden_layers - 1:  # a final norm handed the complete stream itself
            self.refs[k] = Ref(x[:MAX_ROWS].clone(), f"input of the final {self.check.family.final_norm}",
                               x.shape[0], exact=True)

    @_own_time
    def _take_normed(self, module: Any, args: tuple, output: Any) -> None:
        normed = output[0] if isinstance(output, tuple) else output
        if FINAL_NORM not in self.refs and _is_tensor(normed):
            self.refs[FINAL_NORM] = Ref(normed[:MAX_ROWS].clone(), f"output of the final "
                                        f"{self.check.family.final_norm}", normed.shape[0], exact=True)

    @_own_time
    def _take_stream(self, k: int, route: str, module: Any, args: tuple, kwargs: dict) -> None:
        batch = next((v for v in (*kwargs.values(), *args) if hasattr(v, "residual_stream")), None)
        residual = getattr(getattr(batch, "residual_stream", None), "residual", None)
        if k not in self.refs and _is_tensor(residual):
            self.refs[k] = Ref(residual[:MAX_ROWS].clone(), route, residual.shape[0], exact=True)

    def take_inputs(self, stack: Any, **inputs: Any) -> None:
        """The stack's forward inputs, for a stack called past ``nn.Module.__call__`` (vLLM's: no hook fires)."""
        self._take_inputs(stack, (), inputs)

    @_own_time
    def _take_inputs(self, module: Any, args: tuple, kwargs: dict) -> None:
        import torch.nn.functional as F
        if -1 not in self.check.layer_ids:
            return
        given = {**kwargs, **dict(zip(self.check.family.forward_params[1:], args))}  # the forward's arguments by name
        embeds = given.get(self.check.family.embeds_param)
        if _is_tensor(embeds):
            self.refs[-1] = Ref(embeds[:MAX_ROWS].clone(), "input_embeds handed to the model", embeds.shape[0], True)
            return
        ids = given.get("input_ids")
        emb = getattr(module, self.check.family.embed_tokens)
        local, rows = ids[:MAX_ROWS].long(), None
        shard = getattr(emb, "shard_indices", None)
        if shard is not None and getattr(emb, "tp_size", 1) > 1:
            start, end = shard.org_vocab_start_index, shard.org_vocab_end_index
            rows = (local >= start) & (local < end)
            local = (local - start) * rows
        value, route = F.embedding(local, emb.weight), "embedding lookup of the input ids"
        scale = getattr(emb, "embed_scale", None)  # Gemma's scaled embedding: lookup * float (gemma3_causal.py:547-548)
        if isinstance(scale, float):
            value = value * scale
            route += f" times embed_scale {scale:g}"
        if rows is not None:
            route += f" ({int(rows.sum())} of {rows.shape[0]} rows in this rank's vocabulary shard)"
        self.refs[-1] = Ref(value, route, ids.shape[0], exact=True, rows=rows)

    def _verify_output(self, module: Any, args: tuple, output: Any) -> None:
        import torch
        aux = output[1] if isinstance(output, tuple) and len(output) > 1 else None
        if isinstance(aux, (list, tuple)):  # a LIST family with nothing to permute: packed as LogitsProcessor does
            aux = torch.cat(list(aux), dim=-1) if aux else None
        self.verify(aux, (output[0] if isinstance(output, tuple) else output).shape[0])

    @_own_time
    def verify(self, aux: Any, tokens: int) -> None:
        """Compare this forward's fc input ``aux`` (``[T, K*H]`` or None) with the references: raise, or pass."""
        self.tokens = tokens
        problems = self.compare(aux)
        self.elapsed_ms = (time.perf_counter() - self.t0) * 1e3
        if problems:
            raise self.failure(problems)
        self.passed = True

    @_own_time
    def close(self) -> None:  # on pass and on failure
        while self.handles:
            self.handles.pop().remove()
        while self.shadowed:
            norm, name = self.shadowed.pop()
            vars(norm).pop(name, None)

    def compare(self, aux: Any) -> list[str]:
        """One problem line per chunk that is not its layer id's hidden state (empty: passed)."""
        ids = self.check.layer_ids
        if aux is None:
            return [f"{self.check.stack_name}.forward handed the draft no aux hidden states at all"]
        width = aux.shape[-1] // len(ids)
        if aux.shape[-1] % len(ids):
            return [f"the fc input is {aux.shape[-1]} wide, not a multiple of {len(ids)} chunks"]
        problems = []
        for j, (lid, chunk) in enumerate(zip(ids, aux.split(width, dim=-1))):
            what = ("the embedding output" if lid == EMBEDDING_LAYER_ID else "the final norm's output"
                    if lid == FINAL_NORM else f"the output of decoder layer {lid}")
            ref = self.refs.get(lid)
            if ref is None:
                problems.append(f"fc chunk {j} (layer id {lid}): no reference for {what} was taken in this "
                                f"forward: none of the routes {list(self.check.routes)} fired at "
                                f"{self._site(lid)} (this SGLang's kernels bypass the modules the check hooks)")
                continue
            got, want = align_rows(chunk, ref, self.check.attn_tp())
            if got is None:
                problems.append(f"fc chunk {j} (layer id {lid}): {chunk.shape[0]} rows, but {ref.route} has "
                                f"{ref.source_rows} and its rows are not among the chunk's (a partial capture)")
                continue
            diff, ulps = difference(got, want.to(got.dtype))
            self.lines.append((j, lid, diff, ref.route))
            if not (diff == 0 or (not ref.exact and ulps <= ULP_BOUND)):
                problems.append(f"fc chunk {j} (layer id {lid}) is not {what}: max |diff| {diff:.4g} "
                                f"({ulps:.3g} ulp; allowed {'none' if ref.exact else f'{ULP_BOUND} ulp'}) against "
                                f"{ref.route}{self._matches(chunk, lid)}")
        return problems

    def _site(self, lid: Any) -> str:
        """The module whose hook takes layer id ``lid``'s reference."""
        f = self.check.family
        if lid == EMBEDDING_LAYER_ID:
            return f.embed_tokens
        if lid in (self.check.num_hidden_layers - 1, FINAL_NORM):
            return f"the final {f.final_norm}"
        return f"{f.layers}[{lid + 1}]"

    def _matches(self, chunk: Any, lid: int) -> str:
        for other, ref in self.refs.items():
            g, w = (None, None) if other == lid else align_rows(chunk, ref, self.check.attn_tp())
            if g is not None and g.shape == w.shape and difference(g, w.to(g.dtype))[1] <= ULP_BOUND:
                return f"; it is layer id {other}'s hidden state instead (a permuted or shifted capture)"
        return ""

    def failure(self, problems: list[str]) -> DeploymentError:
        c = self.check
        fix = c.fix()
        return DeploymentError(c.where, None, f"eagle3-capture self-check FAILED on the first extend batch "
                               f"({c.context()}; {self.tokens} tokens; layer ids {list(c.layer_ids)}): "
                               + "; ".join(problems) + ". The draft's fc would be fed other hidden states than it "
                               f"declares ({ENV}=0 skips the check; the wiring is then unverified)", fix)


def difference(got: Any, want: Any) -> tuple[float, float]:
    """``(max |got - want|, the same in ulps of want's dtype)``; (0, 0) when bit-equal."""
    import torch
    if got.numel() == 0 or torch.equal(got, want):
        return 0.0, 0.0
    diff = (got.float() - want.float()).abs()
    return float(diff.max()), float((diff / _ulp(want)).max())


def _ulp(want: Any) -> Any:
    """One unit in the last place of each element of ``want``, in its dtype, as an fp32 tensor."""
    import torch
    fi = torch.finfo(want.dtype)
    return torch.exp2(torch.floor(torch.log2(want.float().abs().clamp_min(fi.tiny)))) * fi.eps


def align_rows(chunk: Any, ref: Ref, attn_tp: tuple[int, int] = (0, 1)) -> tuple[Any, Any]:
    """``(chunk rows, reference rows)`` of the same tokens, or (None, None) (docs/self-check.md, "What is compared")."""
    want, k, (rank, size) = ref.value, ref.value.shape[0], attn_tp
    part = chunk.tensor_split(size)[rank] if size > 1 and chunk.shape[0] != ref.source_rows else None
    if chunk.shape[0] == ref.source_rows:
        got = chunk[:k]
    elif part is not None and part.shape[0] == ref.source_rows:
        got = part[:k]
    elif (got := _rows_by_value(chunk, want, exact=ref.exact)) is None:
        return None, None
    return (got, want) if ref.rows is None else (got[ref.rows], want[ref.rows])


def _rows_by_value(chunk: Any, want: Any, *, exact: bool) -> Any:
    """One chunk row per row of ``want`` that equals it as :meth:`Session.compare` judges, or None."""
    import torch
    if want.shape[0] == 0 or chunk.shape[0] < want.shape[0] or not chunk.is_floating_point():
        return None
    want = want.to(device=chunk.device, dtype=chunk.dtype)
    index = {bytes(r.contiguous().view(torch.uint8).cpu().numpy()): i for i, r in enumerate(chunk)}
    picks = [index.get(bytes(r.contiguous().view(torch.uint8).cpu().numpy())) for r in want]
    if not exact:
        wide, ulps = chunk.float(), _ulp(want)
        for j, p in enumerate(picks):
            if p is None:  # not bit-equal: the first row within the bound, as the comparison allows
                close = ((wide - want[j].float()).abs() <= ULP_BOUND * ulps[j]).all(dim=-1).nonzero()
                picks[j] = int(close[0]) if close.numel() else None
    return None if any(p is None for p in picks) else chunk[torch.tensor(picks, device=chunk.device)]
