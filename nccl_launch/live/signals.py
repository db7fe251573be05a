"""Signals caught for a while: a signal the caller was started with ignored (`nohup`, a
background job of a script) stays ignored, and the handlers before are back afterwards."""

from __future__ import annotations

import contextlib
import signal
from collections.abc import Callable, Iterator, Sequence
from types import FrameType

Handler = Callable[[int, FrameType | None], object]


@contextlib.contextmanager
def catching(numbers: Sequence[signal.Signals], handler: Handler) -> Iterator[None]:
    """`handler` for each of `numbers` not ignored, until the block ends."""
    previous = {
        number: signal.signal(number, handler)
        for number in numbers
        if signal.getsignal(number) is not signal.SIG_IGN
    }
    try:
        yield
    finally:
        for number, before in previous.items():
            signal.signal(number, before)
