"""Offline draft files and math, no SGLang import: the draft ``config.json`` as SGLang reads it (``config``),
checkpoint files and tensor names (``checkpoint``), checks against a manifest (``checks``), the PyTorch
replica of SGLang's EAGLE-3 draft (``model``, imports torch), and ``convert``."""
