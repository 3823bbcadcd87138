"""What an engine's plugin entry point imports (docs/development.md): no torch or SGLang at import time, never
:mod:`sglang_eagle3_capture.doctor`, :mod:`sglang_eagle3_capture.observe` only where it is switched on.
"""
