"""``eagle3_manifest.json``: strict where the value changes what the fc receives, metadata (kept, shown escaped,
never refused) where it does not (docs/manifest.md)."""

from __future__ import annotations

from typing import Any, Literal

import msgspec

from ..layer_ids import FINAL_NORM
from ..records import Record, fix, integer, list_of, map_of, number, record, text

FILENAME = "eagle3_manifest.json"
FORMAT = "sglang-eagle3-capture.manifest"
VERSION = 1  # what a manifest of integer layer ids is written as (every release of this package reads it)
FINAL_NORM_VERSION = 2  # the version that added the "final_norm" token; a manifest listing it is written as this
EXPECTED_VERSION = 3  # added "expected", which the release before refuses: a manifest carrying it is written as this
VERSIONS = (VERSION, FINAL_NORM_VERSION, EXPECTED_VERSION)
WRITE_HINT = "sglang-eagle3-capture manifest write DRAFT_DIR --layer-ids=-1,2,30 --target TARGET"
REWRITE = f"rewrite it with `{WRITE_HINT}`"

# Bounds no real target reaches: a manifest beyond them is a corrupt or hostile file (and every check stays cheap).
MAX_LAYERS = 100_000
MAX_HIDDEN_SIZE = 1 << 20
# Bounds of the "expected" block (docs/metrics.md, "The alarm"), so it and the gauges exported from it stay small.
MAX_EXPECTED_STEPS = 64
MAX_EXPECTED_SETTINGS = 256
WRITE_EXPECTED = "rewrite it with `sglang-eagle3-capture verify DRAFT --data SAMPLES --write-expected`"
STEPS, TOPK, DRAFT_TOKENS = integer(1, MAX_EXPECTED_STEPS), integer(1, 1024), integer(1, 1 << 16)

Format = fix(Literal[FORMAT], f"this is not an sglang-eagle3-capture manifest; {REWRITE}")
Version = fix(Literal[VERSIONS], f"upgrade sglang-eagle3-capture (this one reads versions "
              f"{', '.join(map(str, VERSIONS))}), or {REWRITE}")
LAYER_ID = integer(-1, MAX_LAYERS) | Literal[FINAL_NORM]


# Read first, alone: a manifest of another format or version is named as such before its other fields are judged.
@record(REWRITE, name="manifest header")
class HEAD(Record):
    format: Format
    version: Version


@record("remove it; target has only architecture, num_hidden_layers, hidden_size",
        name="manifest target")
class TARGET(Record, forbid_unknown_fields=True):
    architecture: fix(text(200, nonempty=True),
                      "set it to the target's config.json architectures[0], e.g. \"DeepseekV3ForCausalLM\"")
    num_hidden_layers: fix(integer(1, MAX_LAYERS), "copy num_hidden_layers from the target's config.json")
    hidden_size: fix(integer(1, MAX_HIDDEN_SIZE), "copy hidden_size from the target's config.json")


# Metadata: where the ids came from. Never refused (a later version may add keys, a note may hold a tab).
@record(metadata=True, name="manifest provenance")
class PROVENANCE(Record):
    source: fix(text(nonempty=True), 'say where the ids came from, e.g. "manual" or "speculators-config"')
    file: fix(text(), "name the file the ids were read from") = None
    field: fix(text(), "name the field the ids were read from") = None
    original_ids: fix(list_of(int), "copy the ids exactly as the source file had them") = None
    convention: fix(text(), "name the convention the source ids follow") = None
    inferred: fix(bool, "true when the ids were inferred rather than read") = None
    note: fix(text(), "free text") = None
    deepstack: fix(text(), 'on a deepstack target (Qwen3-VL): "before-add" when the training data took HF '
                   'hidden_states or layer hooks, "after-add" when it was captured through an SGLang that adds it '
                   'first') = None


@record(metadata=True, name="manifest expected acceptance")
class ACCEPTANCE(Record):
    steps: fix(STEPS, "the --speculative-num-steps these figures are for")
    topk: fix(TOPK, "the --speculative-eagle-topk these figures are for")
    draft_tokens: fix(DRAFT_TOKENS, "the --speculative-num-draft-tokens these figures are for")
    per_position: fix(list_of(number(0.0, 1.0), min_len=1, max_len=MAX_EXPECTED_STEPS),
                      "per draft position k < steps: the fraction of verify steps that accept at least k+1 draft "
                      "tokens")
    accept_length: fix(number(1.0), "tokens per verify step, bonus token included") = None


@record(metadata=True, name="manifest expected accept length")
class ACCEPT_LENGTH(Record):  # written by 0.2.0 before EXPECTED_VERSION; read only
    steps: fix(STEPS, "the --speculative-num-steps")
    topk: fix(TOPK, "the --speculative-eagle-topk")
    draft_tokens: fix(DRAFT_TOKENS, "the --speculative-num-draft-tokens")
    accept_length: fix(number(1.0), "tokens per verify step, bonus token included")


@record(metadata=True, name="manifest expected provenance")
class EXPECTED_PROVENANCE(Record):
    layer_ids: fix(list_of(LAYER_ID, min_len=1), f"the manifest's layer_ids the figures were measured with; "
                   f"{WRITE_EXPECTED}")


@record(metadata=True, name="manifest expected")
class EXPECTED(Record):
    acceptance: fix(list_of(ACCEPTANCE, max_len=MAX_EXPECTED_SETTINGS), WRITE_EXPECTED)
    provenance: fix(EXPECTED_PROVENANCE, "say what measured these figures (tool, version, data files, positions, "
                    f"and the layer_ids: the wiring they hold for); {WRITE_EXPECTED}")
    accept_length: fix(list_of(ACCEPT_LENGTH, max_len=MAX_EXPECTED_SETTINGS), WRITE_EXPECTED) = []


@record("remove it; a manifest has format, version, layer_ids, target, provenance and expected",
        name="manifest")
class MANIFEST(Record, forbid_unknown_fields=True):
    format: Format
    version: Version
    layer_ids: fix(list_of(LAYER_ID, min_len=1), "list each layer the fc consumes once, in fc order, e.g. "
                   f"[-1, 2, 30] (-1 = embedding output, k = output of decoder layer k, \"{FINAL_NORM}\" = the final "
                   f"norm's output); or {REWRITE}")
    target: fix(TARGET, "write {\"architecture\": ..., \"num_hidden_layers\": ..., \"hidden_size\": ...}")
    # an object whose contents are metadata (PROVENANCE: kept as they are, see records.problems)
    provenance: fix(map_of(Any), 'write it as an object, e.g. {"source": "manual"}') = msgspec.field(
        default_factory=lambda: {"source": "manual"})
    # metadata (EXPECTED), whatever it holds: a malformed block disables the alarm (said once), never the server
    expected: fix(Any, WRITE_EXPECTED) = None


RECORDS = (HEAD, TARGET, PROVENANCE, ACCEPTANCE, ACCEPT_LENGTH, EXPECTED_PROVENANCE, EXPECTED, MANIFEST)
