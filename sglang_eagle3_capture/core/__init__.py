"""What an engine's entry point imports (issue 26's layout): the engine adapters live in subpackages."""
