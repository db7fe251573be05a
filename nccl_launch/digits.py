"""Numbers written in text: ASCII digits only, whatever else Unicode calls a digit."""

from __future__ import annotations


def is_ascii_digits(text: str) -> bool:
    """Whether `text` is one or more of 0-9. str.isdigit() also takes '٣' (which int() reads
    as 3, where NCCL, CUDA or a shell would not) and '³' (which int() refuses)."""
    return text.isascii() and text.isdigit()
