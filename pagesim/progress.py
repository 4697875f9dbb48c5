"""The replay progress bar: simulated seconds of the trace, redrawn at most every 0.5 s.

tqdm decides when to redraw (`mininterval`; `miniters=1` so a slow simulation
still redraws on time). To a non-terminal (a log file, a pipe) it redraws at
most every `NON_TTY_INTERVAL_S`, so even a long run writes a few hundred lines, and
leaves its last state there (a terminal's bar is cleared when it closes).
`TQDM_DISABLE=1` turns it off (tqdm's own switch).
"""

from __future__ import annotations

import sys
from contextlib import contextmanager

TTY_INTERVAL_S = 0.5
NON_TTY_INTERVAL_S = 5.0


@contextmanager
def sim_progress(span_s: float, desc: str, file=None):
    """Yields `progress(now)` for `Simulation(progress=...)`; the bar closes on exit."""
    from tqdm import tqdm

    file = sys.stderr if file is None else file
    total = round(span_s, 1)
    with tqdm(total=total, desc=desc, unit="sim s", leave=not _is_terminal(file), file=file, miniters=1,
              mininterval=redraw_interval(file)) as bar:
        shown = 0.0

        def progress(now: float) -> None:
            nonlocal shown
            n = round(min(now, span_s), 1)
            if n > shown:
                bar.update(n - shown)
                shown = n

        yield progress


def counted(iterable, total: int, desc: str, unit: str, file=None, initial: int = 0, enabled: bool = True):
    """`iterable` (None: call the bar's update yourself) behind a bar of `total` items, `initial` done already,
    redrawn as sim_progress's is. TQDM_DISABLE=1 turns it off, and so does `enabled=False`: tqdm reads the variable
    as its `disable` default, so the bar passes `disable` only to turn it off."""
    from tqdm import tqdm

    file = sys.stderr if file is None else file
    return tqdm(iterable, total=total, initial=initial, desc=desc, unit=unit, leave=not _is_terminal(file), file=file,
                mininterval=redraw_interval(file), **({} if enabled else {"disable": True}))


def redraw_interval(file) -> float:
    """Seconds between redraws: TTY_INTERVAL_S to a terminal, NON_TTY_INTERVAL_S to anything else."""
    return TTY_INTERVAL_S if _is_terminal(file) else NON_TTY_INTERVAL_S


def _is_terminal(file) -> bool:
    return getattr(file, "isatty", lambda: False)()
