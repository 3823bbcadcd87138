"""Observability, imported only where it is switched on: the startup settings report and strict mode (``report``,
``sglang_report``), the acceptance metrics (``acceptance``, ``metrics``) and the capture dump (``dump``). Imports
:mod:`sglang_eagle3_capture.core` only."""
