"""The capture dump (:mod:`sglang_eagle3_capture.observe.dump`), as ``compare`` reads it back: each batch's
``.safetensors`` tensors and its ``.json`` metadata.

The tensors are what the fc received, so they are typed strictly (:class:`~.sample_schema.Tensor`); the row counts that
tie them together are checked by the reader. The metadata is the writer's own description of the run: every key
is kept (a later version may add some) and only ``layer_ids``, which ``compare`` reports per served chunk and uses
to tell one server run from another, is judged.
"""

from __future__ import annotations

from ..core.errors import InputError
from ..core.layer_ids import FINAL_NORM
from ..core.records import Const, Field, Int, ListOf, OneOf, Optional, Record
from .sample_schema import Tensor

FIX = "point --dump at a directory written with SGLANG_EAGLE3_CAPTURE_DUMP, as the server wrote it"
MAX_LAYER_IDS = 100_000

BATCH = Record("capture dump batch", (
    Field("aux_hidden_states", Tensor("[T, K*H]", (2,), "float"), FIX),
    Field("positions", Tensor("[T]", (1,), "int"), FIX),
    Field("input_ids", Tensor("[T]", (1,), "int"), FIX, required=False),  # absent when embeddings were served
), unknown="keep", error=InputError, fix=FIX)

# Written beside each batch: layer_ids, loop_indices, last_layer_at_final_norm, final_norm_output, chunk_order,
# source, model_class, tp_rank, pid, ppid, process_title, sglang_version, package_version, batch, run, forward_mode,
# shapes, dtypes (kept, never judged).
METADATA = Record("capture dump metadata", (
    Field("layer_ids", Optional(ListOf(OneOf((Int(), Const(FINAL_NORM))), max_len=MAX_LAYER_IDS)), FIX,
          required=False),
), unknown="keep", error=InputError, fix=FIX)

RECORDS = (BATCH, METADATA)
