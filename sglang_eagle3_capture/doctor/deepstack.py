"""What a layer id names on a deepstack target (Qwen3-VL), for ``inspect``: SGLang adds ``deepstack[k]`` to layer
``k``'s output on image/video tokens; whether id ``k`` names the state before or after the add depends on who captured
it (docs/families.md ``qwen3_vl``); unless stated (``provenance.deepstack``, ``--trained-with``) it is ambiguous."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ..core.families import Family
from ..core.families.schema import DEEPSTACK_AFTER, DEEPSTACK_BEFORE, DEEPSTACK_ORDERS
from ..core.releases import Release
from ..core.target_config import deepstack_layer_count
from .formats import HF_HIDDEN_STATES, LAYER_OUTPUT, Reading
from .readings import releases_label
from .release_table import all_releases, get

BEFORE_WHO = ("HF output_hidden_states or a layer hook (SpecForge's HF backend, Model Optimizer); SGLang {before}; "
              "SGLang {after} with rl_on_policy_target")
AFTER_WHO = "data captured through SGLang {after} (its inference path adds deepstack before the next capture)"
FIX = ("state how the training data was captured: `sglang-eagle3-capture manifest write DRAFT --layer-ids=... --target "
       "TARGET --deepstack before-add` (HF hidden_states, layer hooks) or `--deepstack after-add` (extracted through "
       "SGLang {after}); or train the draft on layer ids from {count} up, which no deepstack add touches")
WORD = {DEEPSTACK_BEFORE: "BEFORE", DEEPSTACK_AFTER: "AFTER"}


@dataclass(frozen=True)
class DeepstackVerdict:
    affected: tuple[int, ...]
    served: str  # before-add or after-add
    trained: str | None  # None: unknown
    verdict: str  # ambiguous, mis-wired or consistent
    summary: str
    readings: tuple[Reading, ...] = ()


def served_order(family: Family, release: Release) -> str:
    return DEEPSTACK_BEFORE if family.name in release.deepstack_before_add else DEEPSTACK_AFTER


def _releases(family: Family, order: str) -> str:
    versions = [r.version for r in all_releases() if r.supported and served_order(family, r) == order]
    return releases_label(versions).removeprefix("stock SGLang ") if versions else "no supported release"


def trained_order(family: Family, provenance: dict, trained_with: str | None) -> str | None:
    """The manifest's ``provenance.deepstack``, else what ``--trained-with`` implies."""
    if provenance.get("deepstack") in DEEPSTACK_ORDERS:
        return provenance["deepstack"]
    if trained_with in (HF_HIDDEN_STATES, LAYER_OUTPUT):
        return DEEPSTACK_BEFORE
    if trained_with is not None and trained_with.startswith("sglang=="):
        try:
            return served_order(family, get(trained_with.removeprefix("sglang==")))
        except KeyError:
            return None
    return None


def check(family: Family | None, target_cfg: Any, layer_ids: tuple, provenance: dict, trained_with: str | None,
          release: Release) -> DeepstackVerdict | None:
    """None without a deepstack family, a target config, or a layer id on a deepstack layer."""
    if family is None or family.deepstack is None or target_cfg is None:
        return None
    count = deepstack_layer_count(target_cfg, family) or 0
    affected = tuple(i for i in layer_ids if isinstance(i, int) and 0 <= i < count)
    if not affected:
        return None
    served, trained = served_order(family, release), trained_order(family, provenance, trained_with)
    labels = {"before": _releases(family, DEEPSTACK_BEFORE), "after": _releases(family, DEEPSTACK_AFTER)}
    feeds = (f"SGLang {release.version} feeds layer ids {list(affected)} (deepstack layers 0-{count - 1}) "
             f"{WORD[served]} the deepstack add on image and video tokens")
    readings = tuple(Reading(tuple(layer_ids), (f"{order} for {list(affected)}: " + who.format(**labels),))
                     for order, who in ((DEEPSTACK_BEFORE, BEFORE_WHO), (DEEPSTACK_AFTER, AFTER_WHO)))
    if trained is None:
        other = WORD[DEEPSTACK_AFTER if served == DEEPSTACK_BEFORE else DEEPSTACK_BEFORE]
        return DeepstackVerdict(affected, served, None, "ambiguous",
                                f"{feeds}; whether the draft was trained on that state or on the one {other} it "
                                "(they differ by the deepstack embedding on image and video tokens, agree on text) "
                                f"is not recorded. Fix: {FIX.format(count=count, **labels)}", readings)
    if trained != served:
        serve = (f"serve it on SGLang {labels['before']} or with rl_on_policy_target set" if trained == DEEPSTACK_BEFORE
                 else f"serve it on SGLang {labels['after']}, without rl_on_policy_target")
        return DeepstackVerdict(affected, served, trained, "mis-wired",
                                f"{feeds}, but the draft was trained on the state {WORD[trained]} it: on image and "
                                "video tokens its fc receives a tensor that differs by the deepstack embedding "
                                f"(text-only requests are fed exactly). Fix: {serve}, or train it on layer ids from "
                                f"{count} up")
    return DeepstackVerdict(affected, served, trained, "consistent", f"{feeds}, as the draft was trained ({trained})")
