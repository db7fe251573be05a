"""The child's environment: a profile merged into the inherited one; drift by NCCL's meaning."""
