"""bench/makespan_item_overhead.py: the prefill kernel's makespan with a fixed cost per non-empty work item."""

from bench.makespan_item_overhead import makespan_with_overhead
from pagesim.cost.features import prefill_makespan


def test_no_overhead_is_the_makespan_itself():
    for chunks in ([(100, 300)], [(17472, 545)], [(4133, 1511), (17472, 111)]):
        for persistent in (0, 2048):
            assert makespan_with_overhead(chunks, 32, 132, persistent, 0) == prefill_makespan(chunks, 32, 132, persistent)


def test_each_non_empty_item_costs_the_overhead_more():
    # one round: 3 query tiles x 2 heads on 132 SMs, the longest walk cdiv(400, 128) = 4, plus the overhead
    for persistent in (0, 2048):
        assert makespan_with_overhead([(100, 300)], 2, 132, persistent, 5) == 4 + 5
    # every item on one SM (persistent grid of 1): chunk A's 3 tiles walk 2, 3, 4; chunk B (50 tokens) has one
    # non-empty tile (walk 2) and two empty ones, which stay free; 2 heads each
    base = prefill_makespan([(100, 300), (200, 50)], 2, 1, 2048)
    assert base == 2 * (2 + 3 + 4 + 2)
    assert makespan_with_overhead([(100, 300), (200, 50)], 2, 1, 2048, 7) == base + 2 * 4 * 7
