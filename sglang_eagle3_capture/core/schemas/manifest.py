"""``eagle3_manifest.json``: strict where the value changes what the fc receives (``format``, ``version``,
``layer_ids``, ``target``), forward-compatible where it does not (``provenance`` and any block a later version adds
beside it are metadata: kept, shown escaped, never refused)."""

from __future__ import annotations

from ..errors import InputError
from ..layer_ids import FINAL_NORM
from ..records import Anything, Bool, Const, Field, Float, Int, ListOf, MapOf, Nested, OneOf, Record, Str

FILENAME = "eagle3_manifest.json"
FORMAT = "sglang-eagle3-capture.manifest"
VERSION = 1  # what a manifest of integer layer ids is written as (every release of this package reads it)
FINAL_NORM_VERSION = 2  # the version that added the "final_norm" token; a manifest listing it is written as this
# The version that added the "expected" block (the release before it refuses the key at server start): a manifest
# carrying the block is written as this. Versions 1 and 2 that carry it (written by 0.2.0 releases before this
# version) are still read: the block is metadata.
EXPECTED_VERSION = 3
VERSIONS = (VERSION, FINAL_NORM_VERSION, EXPECTED_VERSION)
WRITE_HINT = "sglang-eagle3-capture manifest write DRAFT_DIR --layer-ids=-1,2,30 --target TARGET"
REWRITE = f"rewrite it with `{WRITE_HINT}`"

# Bounds no real target reaches: a manifest beyond them is a corrupt or hostile file (and every check stays cheap).
MAX_LAYERS = 100_000
MAX_HIDDEN_SIZE = 1 << 20

# Read first, alone: a manifest of another format or version is named as such before its other fields are judged.
HEAD = Record("manifest header", (
    Field("format", Const(FORMAT), f"this is not an sglang-eagle3-capture manifest; {REWRITE}"),
    Field("version", OneOf(tuple(Const(v) for v in VERSIONS)), f"upgrade sglang-eagle3-capture (this one reads "
          f"versions {', '.join(map(str, VERSIONS))}), or {REWRITE}"),
), unknown="keep", error=InputError, fix=REWRITE)

TARGET = Record("manifest target", (
    Field("architecture", Str(nonempty=True, max_len=200),
          "set it to the target's config.json architectures[0], e.g. \"DeepseekV3ForCausalLM\""),
    Field("num_hidden_layers", Int(lo=1, hi=MAX_LAYERS), "copy num_hidden_layers from the target's config.json"),
    Field("hidden_size", Int(lo=1, hi=MAX_HIDDEN_SIZE), "copy hidden_size from the target's config.json"),
), unknown="refuse", error=InputError, fix="remove it; target has only architecture, num_hidden_layers, hidden_size")

# Metadata: where the ids came from. Never refused (a later version may add keys, a note may hold a tab).
PROVENANCE = Record("manifest provenance", (
    Field("source", Str(nonempty=True), 'say where the ids came from, e.g. "manual" or "speculators-config"'),
    Field("file", Str(), "name the file the ids were read from", required=False),
    Field("field", Str(), "name the field the ids were read from", required=False),
    Field("original_ids", ListOf(Int()), "copy the ids exactly as the source file had them", required=False),
    Field("convention", Str(), "name the convention the source ids follow", required=False),
    Field("inferred", Bool(), "true when the ids were inferred rather than read", required=False),
    Field("note", Str(), "free text", required=False),
    Field("deepstack", Str(), 'on a deepstack target (Qwen3-VL): "before-add" when the training data took HF '
          'hidden_states or layer hooks, "after-add" when it was captured through an SGLang that adds it first',
          required=False),
), unknown="keep", error=InputError, metadata=True)

# Metadata: what the draft should accept when served, as ``verify`` measured it offline (doc: docs/metrics.md,
# "The alarm"). Forward-compatible: kept as it is, never refused; the server's alarm uses it only when it reads
# cleanly and was measured for the manifest's layer_ids (``Manifest.expected_acceptance``), and says why once when
# not. Bounded to what means something: a draft proposes at most MAX_EXPECTED_STEPS positions per verify step, and a
# block holds figures for at most MAX_EXPECTED_SETTINGS settings (the doctor writes about 30), so reading it, and the
# gauges a server exports from it, stay small whatever the file holds.
MAX_EXPECTED_STEPS = 64
MAX_EXPECTED_SETTINGS = 256
WRITE_EXPECTED = "rewrite it with `sglang-eagle3-capture verify DRAFT --data SAMPLES --write-expected`"
_STEPS = Int(lo=1, hi=MAX_EXPECTED_STEPS)
ACCEPTANCE = Record("manifest expected acceptance", (
    Field("steps", _STEPS, "the --speculative-num-steps these figures are for"),
    Field("topk", Int(lo=1, hi=1024), "the --speculative-eagle-topk these figures are for"),
    Field("draft_tokens", Int(lo=1, hi=1 << 16), "the --speculative-num-draft-tokens these figures are for"),
    Field("per_position", ListOf(Float(lo=0.0, hi=1.0), min_len=1, max_len=MAX_EXPECTED_STEPS),
          "per draft position k < steps: the fraction of verify steps that accept at least k+1 draft tokens"),
    Field("accept_length", Float(lo=1.0), "tokens per verify step, bonus token included", required=False),
), unknown="keep", error=InputError, metadata=True)
ACCEPT_LENGTH = Record("manifest expected accept length", (  # written by 0.2.0 before EXPECTED_VERSION; read only
    Field("steps", _STEPS, "the --speculative-num-steps"),
    Field("topk", Int(lo=1, hi=1024), "the --speculative-eagle-topk"),
    Field("draft_tokens", Int(lo=1, hi=1 << 16), "the --speculative-num-draft-tokens"),
    Field("accept_length", Float(lo=1.0), "tokens per verify step, bonus token included"),
), unknown="keep", error=InputError, metadata=True)
EXPECTED_PROVENANCE = Record("manifest expected provenance", (
    Field("layer_ids", ListOf(OneOf((Int(lo=-1, hi=MAX_LAYERS), Const(FINAL_NORM))), min_len=1),
          f"the manifest's layer_ids the figures were measured with; {WRITE_EXPECTED}"),
), unknown="keep", error=InputError, metadata=True)
EXPECTED = Record("manifest expected", (
    Field("acceptance", ListOf(Nested(ACCEPTANCE), max_len=MAX_EXPECTED_SETTINGS), WRITE_EXPECTED),
    Field("accept_length", ListOf(Nested(ACCEPT_LENGTH), max_len=MAX_EXPECTED_SETTINGS), WRITE_EXPECTED,
          required=False, default=[]),
    Field("provenance", Nested(EXPECTED_PROVENANCE), "say what measured these figures (tool, version, data files, "
          f"positions, and the layer_ids: the wiring they hold for); {WRITE_EXPECTED}"),
), unknown="keep", error=InputError, metadata=True)

MANIFEST = Record("manifest", (
    Field("format", Const(FORMAT), HEAD.field("format").fix),
    Field("version", OneOf(tuple(Const(v) for v in VERSIONS)), HEAD.field("version").fix),
    Field("layer_ids", ListOf(OneOf((Int(lo=-1, hi=MAX_LAYERS), Const(FINAL_NORM))), min_len=1),
          "list each layer the fc consumes once, in fc order, e.g. [-1, 2, 30] (-1 = embedding output, k = output of "
          f"decoder layer k, \"{FINAL_NORM}\" = the final norm's output); or {REWRITE}"),
    Field("target", Nested(TARGET), "write {\"architecture\": ..., \"num_hidden_layers\": ..., \"hidden_size\": ...}"),
    # an object whose contents are metadata (PROVENANCE: kept as they are, see records.problems)
    Field("provenance", MapOf(Anything()), 'write it as an object, e.g. {"source": "manual"}', required=False,
          default={"source": "manual"}),
    # metadata (EXPECTED), whatever it holds: a malformed block disables the alarm (said once), never the server
    Field("expected", Anything(), WRITE_EXPECTED, required=False),
), unknown="refuse", error=InputError,
    fix="remove it; a manifest has format, version, layer_ids, target, provenance and expected")

RECORDS = (HEAD, TARGET, PROVENANCE, ACCEPTANCE, ACCEPT_LENGTH, EXPECTED_PROVENANCE, EXPECTED, MANIFEST)
