"""A stand-in for vLLM 0.33.0's server, for nccl-launch's live-process tests (no GPU)."""

__version__ = "0.33.0"
