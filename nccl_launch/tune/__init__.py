"""`tune`: NCCL values searched against the served model's decode speed, trial by trial."""
