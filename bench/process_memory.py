"""Peak resident memory of this process, and not of the one that started it.

`getrusage(RUSAGE_SELF).ru_maxrss` is the wrong figure for a worker started by a larger process: on Linux the
high-water mark is kept per thread group across fork() and exec(), so a fresh worker reports at least what its
parent held when it forked (a 13 MB child of a 613 MB parent says 613 MB). `/proc/self/status`'s VmHWM belongs to
the address space exec() made, so it is the worker's own peak; ru_maxrss is the fallback where /proc is absent.
"""

from __future__ import annotations

import resource
import sys


def peak_rss_bytes() -> int:
    """This process's peak resident set size in bytes (VmHWM; else ru_maxrss)."""
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) * 1024  # "VmHWM:   13584 kB"
    except OSError:
        pass
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return rss if sys.platform == "darwin" else rss * 1024  # bytes on macOS, KiB elsewhere
