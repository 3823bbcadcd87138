"""The shape of a release's facts: plain frozen records, standard library only (docs/releases.md)."""

from __future__ import annotations

from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Mapping

# How stock SGLang's ``set_eagle3_layers_to_capture`` turns explicit ids into loop indices.
ALWAYS_SHIFT = "always-shift"  # loop index = id + 1 (the id is "output of layer id")
SHIFT_IF_FIRST_IS_1 = "shift-if-first-is-1"  # +1 only when ids[0] == 1, else the ids are loop indices
KEEP_IF_MAX_IS_N = "keep-if-max-is-N"  # GPT-OSS: kept as loop indices when max(ids) == N, else +1
STOCK_RULES = (ALWAYS_SHIFT, SHIFT_IF_FIRST_IS_1, KEEP_IF_MAX_IS_N)

# Where the first-batch self-check (core/selfcheck.py) can read the residual stream decoder layer k hands layer
# k+1, in the order it tries them (the first that fires at layer k+1 is the reference).
NORM_OPERANDS = "norm-operands"  # pre-hook on layers[k+1]'s input norm module: fp32 sum of (x, residual) rounded once
FUSED_NORM = "fused-norm"  # that norm's forward_with_allreduce_fusion (TP > 1, no module hook): its residual out
RESIDUAL_STREAM = "residual-stream"  # forward_batch.residual_stream.residual when layers[k+1]'s attention starts
SELFCHECK_ROUTES = (NORM_OPERANDS, FUSED_NORM, RESIDUAL_STREAM)

# What is proven for a release (the README support matrix is checked against these).
PROVEN_CPU_ENGINE = "CPU engine + HF equality"
PROVEN_SEAM_PROBE = "seam probe only"
PROVEN_REFUSED = "refused"


@dataclass(frozen=True)
class Seam:
    """One attribute a patch replaces, ``module.owner.attr`` (``owner`` None: a module attribute); ``params``: the
    parameter names the original must have (None: an attribute the patch adds, which must not exist yet); ``role``: what
    the package puts there."""

    role: str
    module: str
    owner: str | None
    attr: str
    params: tuple[str, ...] | None

    @property
    def name(self) -> str:
        """``Owner.attr`` or ``module.attr``, for logs and errors."""
        return f"{self.owner or self.module.rsplit('.', 1)[-1]}.{self.attr}"


@dataclass(frozen=True)
class EngineReader:
    """How another serving engine picks an EAGLE-3 draft's target layers (the doctor's rows): ``keys`` are dotted config
    paths, the first non-empty wins (none: the low/mid/high default); every id an HF index."""

    name: str
    keys: tuple[str, ...]
    embedding_crashes: tuple[str, ...] = ()
    note: str = ""
    # families whose model assigns the ids as given (no ``sorted(set(...))``): a list mixing an integer and a string
    # (the vLLM fail-closed value) passes there and fails at the first forward instead of at startup
    unsorted: tuple[str, ...] = ()


@dataclass(frozen=True)
class VllmRelease:
    """What the vLLM plugin relies on in one vLLM release: the seams of the model runner it serves (``seams``:
    resolution, feed, the worker-level gate), the module whose import arms the patch, and the readers of stock vLLM
    (what each of its model runners feeds a draft config, for the doctor). ``runner``: the runner the seams belong to
    (the V1 ``GPUModelRunner``); on Model Runner V2 (the ``vllm.v2`` seam's class) the gate verifies vLLM's own
    capture instead."""

    version: str
    built: str
    supported: bool
    proven: str
    readers: tuple[EngineReader, ...]
    refused_because: str = ""
    trigger_module: str = ""
    seams: tuple[Seam, ...] = ()
    runner: str = ""
    embedding_crashes: tuple[str, ...] = ()  # families vLLM captures inline, where index 0 (the embedding) fails
    # the decoder stack's module names the first-batch self-check hooks (vLLM's, for every family it serves here)
    stack: Mapping[str, object] = field(default_factory=dict)

    def __post_init__(self) -> None:
        object.__setattr__(self, "stack", _frozen(self.stack))

    def seam(self, role: str) -> Seam:
        """The seam with ``role`` (KeyError naming the release when it has none)."""
        for s in self.seams:
            if s.role == role:
                return s
        raise KeyError(f"vLLM {self.version} has no seam for {role!r}")

    def has(self, role: str) -> bool:
        return any(s.role == role for s in self.seams)


@dataclass(frozen=True)
class DraftFlag:
    """How SGLang's draft class reads one math flag: ``keys`` in the order it looks, ``combine`` ``first-present`` or
    ``any``; ``native``: SGLang's Llama draft implements it (else the plugin's draft loader does)."""

    keys: tuple[str, ...]
    combine: str = "first-present"
    native: bool = True


def _frozen(mapping: Mapping) -> Mapping:
    return MappingProxyType(dict(mapping))


@dataclass(frozen=True)
class Release:
    """Everything release-specific about one SGLang release."""

    version: str
    built: str  # wheel build date, for the support matrix
    supported: bool
    proven: str  # PROVEN_*: what this repository has shown for the release
    refused_because: str = ""  # for unsupported releases: why, in one sentence
    trigger_module: str = ""  # importing this module arms the patch (it runs in every ModelRunner process)
    seams: tuple[Seam, ...] = ()  # resolution and draft-side seams; target model seams live in core/families/
    draft_path_from: str = "runtime_context"  # "runtime_context" (get_spec()) or "server_args"
    has_draft_model_config: bool = True  # SpecAuxHiddenStateConfig.draft_model_config exists
    stock_rules: Mapping[str, str] = field(default_factory=dict)  # family name -> rule, where not the default
    embedding_crashes: tuple[str, ...] = ()  # families whose stock loop crashes at loop index 0 in this release
    final_norm_captures: tuple[str, ...] = ()  # families whose stock forward captures loop index N at the final norm
    # families whose stock loop appends a decoder layer's branch output (the hidden half of the unsummed (hidden,
    # residual) pair it returns) where the residual stream is meant: every layer id >= 0 is fed another tensor
    branch_captures: tuple[str, ...] = ()
    # families whose model files this release does not have (added in a later release): never patched here, and
    # the static seam probe checks that their causal LMs are really absent from the wheel
    absent_families: tuple[str, ...] = ()
    # causal LMs (class names) of a family the release has whose set_eagle3_layers_to_capture it lacks (added in a
    # later release; SGLang itself refuses EAGLE-3 on them): the family is patched without them, a draft declaring ids
    # on one is refused by name, and the static seam probe checks that the wheel really lacks their hook
    absent_hooks: tuple[str, ...] = ()
    # deepstack families (Family.deepstack) whose loop in this release captures layer k's output BEFORE the deepstack
    # add (HF's hidden_states[k+1]); every other release captures it after the add on its inference path
    deepstack_before_add: tuple[str, ...] = ()
    draft_flags: Mapping[str, DraftFlag] = field(default_factory=dict)
    legacy_weight_names: Mapping[str, str] = field(default_factory=dict)  # checkpoint prefix -> module prefix
    install_excludes: tuple[str, ...] = ()  # pins to drop when installing it here (tools/install_sglang.py)
    selfcheck_routes: tuple[str, ...] = ()  # SELFCHECK_ROUTES this release's capture loops offer, in that order
    # SGLang declares its speculative argument rewrites as (source, {field: value}) in server_args._resolved_overrides
    # (arg_groups/overrides.py::declare_resolution), raw inputs kept; False: it assigns those fields in place.
    resolution_record: bool = False

    def __post_init__(self) -> None:
        object.__setattr__(self, "stock_rules", _frozen(self.stock_rules))
        object.__setattr__(self, "draft_flags", _frozen(self.draft_flags))
        object.__setattr__(self, "legacy_weight_names", _frozen(self.legacy_weight_names))
        bad = [r for r in self.stock_rules.values() if r not in STOCK_RULES]
        if bad:
            raise ValueError(f"release {self.version}: unknown stock rules {bad}; known: {STOCK_RULES}")
        if not set(self.selfcheck_routes) <= set(SELFCHECK_ROUTES):
            raise ValueError(f"release {self.version}: self-check routes {self.selfcheck_routes} not in "
                             f"{SELFCHECK_ROUTES}")

    def seam(self, role: str) -> Seam:
        """The seam with ``role`` (KeyError naming the release when it has none)."""
        for s in self.seams:
            if s.role == role:
                return s
        raise KeyError(f"SGLang {self.version} has no seam for {role!r}")

    def with_seams(self, *replacing: Seam) -> tuple[Seam, ...]:
        """This release's seams with each of ``replacing`` in place of the seam of the same role."""
        new = {s.role: s for s in replacing}
        return tuple(new.get(s.role, s) for s in self.seams)

    def seams_with(self, prefix: str) -> tuple[Seam, ...]:
        """The seams whose role starts with ``prefix`` (e.g. ``"draft."``)."""
        return tuple(s for s in self.seams if s.role.startswith(prefix))
