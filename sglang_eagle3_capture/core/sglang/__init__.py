"""The SGLang adapter: ``plugin`` (the entry point) installs ``target`` and ``draft`` through ``..seams``.
Only ``target``, ``draft``, ``runtime``, ``resolution`` and ``selfcheck`` import SGLang, and only inside functions;
``guard`` and ``..seams`` import the SGLang modules they patch by name (``importlib``).
"""
