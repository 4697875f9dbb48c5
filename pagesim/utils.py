"""Small helpers every layer shares (one owner per rule): block arithmetic, pausing the garbage collector."""

from __future__ import annotations

import gc
from contextlib import contextmanager


def cdiv(a: int, b: int) -> int:
    """Ceiling division of integers: the blocks of size b that hold a tokens."""
    return -(-a // b)


class GCCount:
    """Collections that ran while the collector was paused (explicit gc.collect() calls: none expected)."""

    def __init__(self):
        self.collections = 0

    def __call__(self, phase, info):
        if phase == "start":
            self.collections += 1


@contextmanager
def paused_gc():
    """The cyclic garbage collector paused for a block of work and restored after it: a replay, and the
    requests made for it, make no reference cycles to speak of (after the full Azure conv replay a collection
    frees nothing), so collections would only rescan the growing request and step tables (~10% of a run).
    A live run pauses it too: a full collection of a process holding torch stops the host for a step's time
    or more. Yields a GCCount of the collections made anyway (explicit gc.collect() calls)."""
    was_enabled = gc.isenabled()
    count = GCCount()
    gc.disable()
    gc.callbacks.append(count)
    try:
        yield count
    finally:
        gc.callbacks.remove(count)
        if was_enabled:
            gc.enable()


@contextmanager
def frozen_heap():
    """Everything alive now collected once and then kept out of collections until the block ends (gc.freeze), so
    that a collection inside it scans only what the block made: in a process holding torch and a model a full
    collection takes ~0.1 s, one after the freeze well under a millisecond (calibration collects between its
    workloads). Objects frozen here that become garbage inside the block are collected after it."""
    gc.collect()
    gc.freeze()
    try:
        yield
    finally:
        gc.unfreeze()
