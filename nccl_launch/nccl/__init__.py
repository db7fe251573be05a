"""What NCCL itself does: its variable catalog, the grammar of its values, nccl.conf, its log."""
