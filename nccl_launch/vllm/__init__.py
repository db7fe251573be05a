"""vLLM 0.33.0: its own parser, run in the server's interpreter."""
