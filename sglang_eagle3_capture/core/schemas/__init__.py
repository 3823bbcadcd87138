"""The user records the core reads, declared once (engine: :mod:`sglang_eagle3_capture.core.records`).

One module per record family; the property tests cover every declared record, these and the doctor's and the
dump's (``tests/support/schemas.py`` lists them all).
"""
