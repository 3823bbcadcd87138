"""The capture dump (:mod:`sglang_eagle3_capture.observe.dump`), as ``compare`` reads it back: each batch's
``.safetensors`` tensors and its ``.json`` metadata.

The tensors are what the fc received, so they are typed strictly (:class:`~.sample_schema.Tensor`); the row counts that
tie them together are checked by the reader. The metadata is the writer's own description of the run: every key
is kept (a later version may add some) and only ``layer_ids``, which ``compare`` reports per served chunk and uses
to tell one server run from another, is judged.
"""

from __future__ import annotations

from typing import Literal

from ..core.layer_ids import FINAL_NORM
from ..core.records import Record, fix, list_of, record
from .sample_schema import tensor

FIX = "point --dump at a directory written with SGLANG_EAGLE3_CAPTURE_DUMP, as the server wrote it"
MAX_LAYER_IDS = 100_000


@record(FIX, name="capture dump batch")
class BATCH(Record):
    aux_hidden_states: fix(tensor("[T, K*H]", (2,), "float"), FIX)
    positions: fix(tensor("[T]", (1,), "int"), FIX)
    input_ids: fix(tensor("[T]", (1,), "int"), FIX) = None  # absent when embeddings were served


# Written beside each batch: layer_ids, loop_indices, last_layer_at_final_norm, final_norm_output, chunk_order,
# source, model_class, tp_rank, pid, ppid, process_title, sglang_version, package_version, batch, run, forward_mode,
# shapes, dtypes (kept, never judged).
@record(FIX, name="capture dump metadata")
class METADATA(Record):
    layer_ids: fix(list_of(int | Literal[FINAL_NORM], max_len=MAX_LAYER_IDS) | None, FIX) = None


RECORDS = (BATCH, METADATA)
