"""The stand-in's entry points: only `vllm.entrypoints.cli.main`."""
