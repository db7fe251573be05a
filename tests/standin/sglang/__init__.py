"""A stand-in for SGLang 0.5.23's server, for nccl-launch's live-process tests (no GPU)."""

__version__ = "0.5.23"
