"""What an engine's plugin entry point imports: the layer-id convention, the manifest, the refusal policy, the
release and family tables of the supported releases, the patch engine and the capture (engine-neutral), and one
adapter per engine (``sglang/``). Nothing here imports torch or SGLang at module import time, nor
:mod:`sglang_eagle3_capture.doctor`; :mod:`sglang_eagle3_capture.observe` only inside the functions that switch
it on (docs/development.md).
"""
