"""The user records the core reads, one module per family (engine: :mod:`sglang_eagle3_capture.core.records`); the
property tests cover every declared record (``tests/support/schemas.py`` lists them all)."""
