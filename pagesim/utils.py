"""Small helpers every layer shares (one owner per rule): block arithmetic, pausing the garbage collector."""

from __future__ import annotations

import gc
from contextlib import contextmanager


def cdiv(a: int, b: int) -> int:
    """Ceiling division of integers: the blocks of size b that hold a tokens."""
    return -(-a // b)


@contextmanager
def paused_gc():
    """The cyclic garbage collector paused for a block of work and restored after it: a replay, and the
    requests made for it, make no reference cycles to speak of (after the full Azure conv replay a collection
    frees nothing), so collections would only rescan the growing request and step tables (~10% of a run)."""
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()
