"""pagesim.accounting: the six categories, the guard that they tile the cache, and the per-request slot counts."""

from __future__ import annotations

import pytest

from pagesim.accounting import CATEGORIES, MemoryAccounting, internal_slots, num_computed, request_slots
from pagesim.request import Request


def acc(**kw) -> MemoryAccounting:
    values = {"used": 10, "reserved": 4, "internal_fragmentation": 2, "external_fragmentation": 8, "free": 70,
              "cached": 6, "total": 100}
    return MemoryAccounting(**{**values, **kw})


def test_allocated_is_used_reserved_and_internal_and_token_states_are_a_share_of_it():
    a = acc()
    assert a.allocated == 16 and a.token_state_fraction == pytest.approx(10 / 16)
    assert a.as_dict() == {"used": 10, "reserved": 4, "internal_fragmentation": 2, "external_fragmentation": 8,
                           "free": 70, "cached": 6, "total": 100}
    empty = acc(used=0, reserved=0, internal_fragmentation=0, free=86)
    assert empty.allocated == 0 and empty.token_state_fraction == 1.0, "nothing allocated wastes nothing"


@pytest.mark.parametrize("category", CATEGORIES)
def test_a_negative_category_is_refused(category):
    values = acc().as_dict()
    values[category] -= 200  # keep the sum: only the sign is wrong
    values["free"] += 200 if category != "free" else 0
    values["total"] -= 200 if category == "free" else 0
    with pytest.raises(AssertionError, match="memory accounting broken"):
        MemoryAccounting(**values)


@pytest.mark.parametrize("total", [99, 101])
def test_categories_that_do_not_sum_to_the_cache_are_refused(total):
    with pytest.raises(AssertionError, match="memory accounting broken"):
        acc(total=total)


def request(prompt, output, blocks, computed):
    r = Request("r", 0.0, prompt, output)
    r.block_ids, r.num_computed_tokens = list(range(blocks)), computed
    return r


def test_internal_slots_are_those_past_the_final_kv_length():
    # final_kv_len = prompt + output - 1 (the last token sampled is never stored): 5 + 3 - 1 = 7 of 12 slots
    assert internal_slots(request(5, 3, 3, 5), 4) == 12 - 7
    assert internal_slots(request(5, 3, 2, 5), 4) == 1  # 8 slots for 7
    assert internal_slots(request(5, 4, 2, 5), 4) == 0  # 8 slots for exactly 8
    assert internal_slots(request(5, 3, 1, 4), 4) == 0  # fewer slots than the final length: none yet
    reqs = [request(5, 3, 3, 5), request(5, 3, 2, 6), request(5, 3, 1, 4)]
    assert request_slots(reqs, 4) == (5 + 6 + 4, 5 + 1 + 0)
    assert num_computed(reqs) == 15
