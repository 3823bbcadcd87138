"""The capture dump (:mod:`sglang_eagle3_capture.observe.dump`) as ``compare`` reads it back: each batch's tensors,
what the fc received, typed strictly (the row counts that tie them together are checked by the reader), and its
``.json`` metadata, of which only ``layer_ids`` (reported per served chunk, and telling one server run from another)
is judged; the writer's other keys are kept, never judged.
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


@record(FIX, name="capture dump metadata")
class METADATA(Record):
    layer_ids: fix(list_of(int | Literal[FINAL_NORM], max_len=MAX_LAYER_IDS) | None, FIX) = None


RECORDS = (BATCH, METADATA)
