"""`vllm serve`, as `python -m vllm.entrypoints.cli.main serve`."""
