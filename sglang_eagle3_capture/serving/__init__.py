"""Code that runs inside SGLang's processes: the plugin entry point, the one patch engine, and what it installs.

``plugin`` (entry point) -> ``target`` / ``draft`` (the wrappers, through ``seams``, the patch engine) ->
``resolution`` (which ids, read once per process), ``capture`` (the plan and the fc feed), ``audit`` (the
draft's weight load), ``dump`` (the capture dump), ``runtime`` (SGLang's runtime state), ``after_import``
(the import trigger), ``guard`` (the resolution gate's fallback: a startup refusal where the resolution seam is
not patched), ``selfcheck`` (the first-batch self-check). Only ``target``, ``draft``, ``runtime``, ``resolution``
and ``selfcheck`` import SGLang, and only inside functions; ``guard`` and ``seams`` import the SGLang modules they
patch by name (``importlib``), when those are needed.
"""
