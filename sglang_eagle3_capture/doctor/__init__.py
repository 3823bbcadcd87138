"""The command line (``cli``: argparse and printing) and the wiring doctor: ``inspect``, ``verify`` (with the
candidate wirings of ``candidates`` and the sample readers of ``samples``) and ``compare``."""
