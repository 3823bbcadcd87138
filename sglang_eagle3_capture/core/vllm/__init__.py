"""The vLLM adapter: ``plugin`` (the ``vllm.general_plugins`` entry point) and ``wiring`` (what it patches in vLLM's
V1 model runner and worker). Imports vLLM only inside the functions that run in vLLM's processes (docs/vllm.md)."""
