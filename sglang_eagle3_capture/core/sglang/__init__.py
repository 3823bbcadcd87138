"""The SGLang adapter: the plugin entry point and what it installs in SGLang's processes.

``plugin`` (entry point) -> ``target`` / ``draft`` (the wrappers, through ``..seams``, the patch engine) ->
``resolution`` (which ids, read once per process), ``..capture`` (the plan and the fc feed), ``audit`` (the
draft's weight load), ``runtime`` (SGLang's runtime state), ``..after_import`` (the import trigger), ``guard``
(the resolution gate's fallback: a startup refusal where the resolution seam is not patched), ``selfcheck`` (the
first-batch self-check). The capture dump, the settings report and the metrics live in
:mod:`sglang_eagle3_capture.observe`, imported inside the functions that use them. Only ``target``, ``draft``,
``runtime``, ``resolution`` and ``selfcheck`` import SGLang, and only inside functions; ``guard`` and ``..seams``
import the SGLang modules they patch by name (``importlib``), when those are needed.
"""
