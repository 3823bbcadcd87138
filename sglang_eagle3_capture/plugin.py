"""SGLang plugin entry point (group ``sglang.srt.plugins``); filled in by the target-side work."""


def register() -> None:
    """Entry point called by SGLang's ``load_plugins()`` in every process it starts."""
    raise NotImplementedError("target-side capture patch not implemented yet")
