"""SGLang 0.5.23: its flags as facts, the argv of a [server] table, its rules, its own parser."""
