"""Every user record this package reads, declared once (engine: :mod:`sglang_eagle3_capture.records`).

One module per record family; :data:`ALL` lists every declared record, so the property tests cover each one.
"""

from __future__ import annotations

from ..records import Record
from . import checkpoint, draft, dump, manifest, samples

ALL: tuple[Record, ...] = (*manifest.RECORDS, *samples.RECORDS, *dump.RECORDS, *draft.RECORDS, *checkpoint.RECORDS)
