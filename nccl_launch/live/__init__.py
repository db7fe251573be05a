"""After start: the server's process tree, its live drift, watching it, NCCL's log as proof."""
