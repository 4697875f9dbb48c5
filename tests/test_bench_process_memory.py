"""bench/process_memory.py: a worker's peak memory is its own, not the peak of the process that started it."""

import subprocess
import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parent.parent / "bench"
CHILD = ("import resource, sys; sys.path.insert(0, sys.argv[1]); from process_memory import peak_rss_bytes; "
         "print(peak_rss_bytes(), resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024)")


@pytest.mark.skipif(not Path("/proc/self/status").exists(), reason="needs Linux's /proc")
def test_a_small_worker_of_a_large_process_reports_its_own_peak():
    held = bytearray(300 << 20)
    held[::4096] = b"\x01" * len(held[::4096])  # touch every page: 300 MB resident in this process
    done = subprocess.run([sys.executable, "-c", CHILD, str(BENCH)], capture_output=True, text=True, check=True)
    own, inherited = map(int, done.stdout.split())
    assert inherited >= 300 << 20  # what ru_maxrss says: the parent's high-water mark, kept across fork and exec
    assert 1 << 20 < own < 150 << 20  # the child's interpreter alone
    del held
