"""Tensor-parallel ranks must serve one wiring: each rank reads the draft's files on its own, so the adapter gathers
every rank's :func:`statement` over its TP CPU group and :func:`check` refuses on every rank unless all are equal."""

from __future__ import annotations

import hashlib
import json
from typing import Any, Mapping, Sequence

from .errors import DeploymentError, brief


def manifest_digest(manifest: Any) -> str | None:
    """A digest of everything a manifest states (layer ids, target, provenance, expected figures); None for none."""
    if manifest is None:
        return None
    doc = {"layer_ids": list(manifest.layer_ids),
           "target": [manifest.target_architecture, manifest.target_num_hidden_layers, manifest.target_hidden_size],
           "provenance": manifest.provenance, "expected": manifest.expected}
    text = json.dumps(doc, sort_keys=True, default=repr, ensure_ascii=True)
    return "sha256:" + hashlib.sha256(text.encode()).hexdigest()[:16]


def statement(layer_ids: Sequence[Any] | None, file: Any = None, field: str | None = None, manifest: Any = None,
              stock: Sequence[Any] | None = None) -> dict:
    """What one rank serves (picklable; ``layer_ids`` None: stock wiring of the loop indices ``stock``)."""
    return {"layer_ids": None if layer_ids is None else list(layer_ids), "file": None if file is None else str(file),
            "field": field, "manifest": manifest_digest(manifest), "stock": None if stock is None else list(stock)}


def _described(s: Mapping) -> str:
    if s.get("layer_ids") is None:
        ids = f"stock wiring of loop indices {brief(s.get('stock'), 80)}"
    else:
        ids = f"layer ids {brief(s['layer_ids'], 80)} from {brief(s.get('file'), 160)}"
    return f"{ids}, {'manifest ' + s['manifest'] if s.get('manifest') else 'no manifest'}"


def check(statements: Sequence[Mapping]) -> None:
    """Raise the same DeploymentError on every rank (index = TP rank) unless all statements are equal."""
    groups: dict[str, list[int]] = {}
    for rank, s in enumerate(statements):
        groups.setdefault(json.dumps(s, sort_keys=True, default=repr), []).append(rank)
    if len(groups) <= 1:
        return
    said = "; ".join(f"rank{'s' if len(r) > 1 else ''} {', '.join(map(str, r))}: {_described(json.loads(k))}"
                     for k, r in groups.items())
    where = next((s for s in statements if s.get("file")), {})
    raise DeploymentError(where.get("file"), where.get("field"), f"the {len(statements)} tensor-parallel ranks do not "
                          f"serve the same draft wiring ({said}): the draft's files changed between the ranks' reads, "
                          "or the ranks see different files", "restart the server once the draft directory no longer "
                          "changes (`sglang-eagle3-capture manifest write` replaces a manifest atomically), with the "
                          "same draft directory on every node")
