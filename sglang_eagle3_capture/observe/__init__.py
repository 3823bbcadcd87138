"""Observability, imported only where it is switched on: the settings report, acceptance metrics, the capture dump."""
