"""`tune`: NCCL values searched against bench's decode tok/s, one started server per trial."""
