"""vLLM 0.33.0: its flags as facts, the argv of a [server] table, its rules, its own parser."""
