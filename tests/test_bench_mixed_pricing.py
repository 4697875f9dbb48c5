"""bench/mixed_pricing.py: the prefill kernel's programs and their wave-quantised length."""

import pandas as pd

from bench.mixed_pricing import candidate_columns, lpt_makespan, program_walks, tile_walks
from pagesim.cost.features import prefill_walks


def test_program_walks_match_the_profile_feature_per_head():
    for c, q in [(0, 1), (0, 128), (0, 129), (1296, 41), (17472, 1061), (5, 300)]:
        walks = program_walks([(c, q)], heads=1)
        assert (sum(walks), max(walks)) == prefill_walks(c, q)
    assert tile_walks([(1296, 41), (3488, 41)]) == (11 + 28, 28)


def test_one_wave_is_the_longest_walk_and_more_programs_queue_behind_it():
    # 32 heads x 1 query tile after 3488 cached: 32 programs of 28 tiles, one wave
    assert lpt_makespan([(3488, 41)], heads=32, slots=132) == 28
    # 4 chunks: 128 programs still fit 132 SMs
    assert lpt_makespan([(3488, 41)] * 4, heads=32, slots=132) == 28
    # 5 chunks: 160 programs; 28 SMs take a second program of 28 tiles
    assert lpt_makespan([(3488, 41)] * 5, heads=32, slots=132) == 56
    # 5 query tiles after 17472 cached: walks 138, 139, 140, 141, 141 (32 programs each); the mean would say 32 x 699 / 132 = 169
    assert program_walks([(17472, 545)], heads=1) == [138, 139, 140, 141, 141]
    # 132 programs of 141 (64), 140 (32), 139 (32) and 138 (4) first; the other 28 of 138 queue behind 138s and 139s
    assert lpt_makespan([(17472, 545)], heads=32, slots=132) == 139 + 138
    assert lpt_makespan([], heads=32, slots=132) == 0


def test_candidate_columns_carry_the_makespan_in_the_longest_walk():
    frame = pd.DataFrame({"prefill_tile_walks": [39, 0], "prefill_longest_walk": [28, 0],
                          "prefill_context_tokens": [4866, 0], "prefill_shared_tokens": [0, 0]})
    chunks = [((1296, 41), (3488, 41)), ()]
    assert candidate_columns(frame, chunks, "current", 32, 132) is frame
    out = candidate_columns(frame, chunks, "lpt", 32, 132)
    assert out["prefill_tile_walks"].tolist() == [0, 0] and out["prefill_longest_walk"].tolist() == [28, 0]
    assert out["prefill_context_tokens"].tolist() == [4866, 0]
    assert candidate_columns(frame, chunks, "lpt-noctx", 32, 132)["prefill_context_tokens"].tolist() == [0, 0]


def test_mixed_makespan_adds_the_kernels_schedule_by_the_profiles_prefill_kernel():
    """bench/mixed_makespan.py: the rows' prefill_makespan follows the profile's kernel (the Gluon kernels' persistent
    grid for chunks of at most 2048 tokens, else one program per item) on its GPU's SMs and model's heads."""
    from bench.mixed_makespan import with_makespan
    from pagesim.cost.features import prefill_makespan

    rows = pd.DataFrame({"num_prefill_tokens": [1622, 0]})
    chunks = [((4133, 1511), (17472, 111)), ()]
    gluon = with_makespan(rows, chunks, {"model": "llama-3-8b", "gpu": "h100", "prefill_kernel": "_gluon_prefill_kernel"})
    triton = with_makespan(rows, chunks, {"model": "llama-3-8b", "gpu": "h200"})
    assert gluon["prefill_makespan"].tolist() == [338, 0] and triton["prefill_makespan"].tolist() == [255, 0]
    assert triton["prefill_makespan"][0] == prefill_makespan(chunks[0], 32, 132, 0)
    assert "prefill_makespan" not in rows
