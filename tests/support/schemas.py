"""Every declared user record, for the property tests: the core's (:mod:`sglang_eagle3_capture.core.schemas`), the
doctor's sample files and the capture dump. A schema module added to the package is added here."""

from __future__ import annotations

from sglang_eagle3_capture.core.records import Record
from sglang_eagle3_capture.core.schemas import checkpoint, draft, manifest
from sglang_eagle3_capture.doctor import sample_schema as samples

ALL: tuple[type[Record], ...] = (*manifest.RECORDS, *samples.RECORDS, *draft.RECORDS, *checkpoint.RECORDS)
