"""nccl-launch: start an inference server with the NCCL environment it was tuned with."""

__version__ = "0.1.0"
