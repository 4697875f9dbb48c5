"""bench/clock_rate.py: the prefill rate before a step, and the check on a committed live run."""

from pathlib import Path

import numpy as np
import pytest

from bench.clock_rate import RATE_EDGES, check_run, load_run, rate_before

RUN = Path(__file__).resolve().parent.parent / "results/live/azure-code-600-660-r25w"


def test_rate_before_counts_the_steps_that_ended_within_the_window_before_the_start():
    start = np.array([0.0, 1.0, 1.2, 1.4, 3.0])
    end = np.array([1.0, 1.2, 1.4, 3.0, 3.1])
    tokens = np.array([100.0, 200.0, 0.0, 50.0, 7.0])
    # step 3 starts at 1.4: steps 0 (ended 1.0), 1 (1.2) and 2 (1.4) ended in (0.9, 1.4], 300 tokens over 0.5 s;
    # step 4 (3.0) sees step 3 alone, and step 0 nothing
    assert rate_before(start, end, tokens, 0.5).tolist() == [0.0, 200.0, 600.0, 600.0, 100.0]


@pytest.mark.skipif(not RUN.exists(), reason="the committed round-25 Azure code run is not in this checkout")
def test_a_flat_clock_at_the_reference_changes_no_prediction_and_a_lower_one_raises_them():
    loaded = load_run(str(RUN), 0.5)
    assert loaded is not None
    flat = check_run(str(RUN), loaded, np.full(len(RATE_EDGES) - 1, 1980.0), 0.15, 1980.0)
    assert flat["clocked"] == flat["plain"]
    slow = check_run(str(RUN), loaded, np.full(len(RATE_EDGES) - 1, 1650.0), 0.15, 1980.0)
    ratio = slow["clocked"]["predicted_over_measured"] / slow["plain"]["predicted_over_measured"]
    assert ratio == pytest.approx(1 + 0.15 * (1980 / 1650 - 1))
