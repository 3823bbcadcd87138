"""Reading the user's files: JSON objects read strictly, with errors that name the file, the field and the fix.

Every reader of a user's JSON file (the manifest, a target or draft ``config.json``, a shard index, a
data config) goes through :func:`read_json_object`, which takes the caller's error class so the
message lands in the caller's vocabulary.
"""

from __future__ import annotations

import json
from pathlib import Path

from .errors import InputError, ManifestError


def read_json_object(path: Path, *, fix: str, missing: str = "not found",
                     error: type[InputError] = ManifestError) -> dict:
    """The JSON object in the file ``path``. A missing file, invalid JSON or another JSON type raises ``error``
    (the caller's error class) naming the file and ``fix``; ``missing`` says what was not found."""
    if not path.is_file():
        raise error(f"{path}: field '<file>': {missing}; fix: {fix}")
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise error(f"{path}: field '<document>': not valid JSON ({e}); fix: {fix}") from e
    if not isinstance(data, dict):
        raise error(f"{path}: field '<document>': expected a JSON object, got {type(data).__name__}; fix: {fix}")
    return data
