"""The routers' rules on hand-made replica states, and what a cluster run adds up over its replicas.

A router sees each replica's outstanding tokens (prompt + generated tokens of its waiting, running and swapped
requests) and, for prefix-aware, the tokens its KV cache would serve from its prefix cache.
"""

from __future__ import annotations

from types import SimpleNamespace

import pandas as pd
import pytest

from pagesim.cluster import (ClusterSimulation, outstanding_tokens, route_least_outstanding_tokens,
                             route_prefix_aware, route_round_robin)
from pagesim.config import Config
from pagesim.cost import make_cost_model
from pagesim.kv_manager import PrefixCacheStats
from pagesim.metrics import summarize_run
from pagesim.request import Request


def req(prompt, generated=0):
    return SimpleNamespace(prompt_len=prompt, num_output_tokens=generated)


def replica(waiting=(), running=(), swapped=(), hits=0):
    kv = SimpleNamespace(get_computed_blocks=lambda request: ([], hits))
    return SimpleNamespace(waiting=list(waiting), running=list(running), swapped=list(swapped), kv=kv)


def test_outstanding_tokens_are_prompts_and_generated_tokens_of_waiting_running_and_swapped_requests():
    s = replica(waiting=[req(100)], running=[req(50, 7), req(20, 3)], swapped=[req(30, 12)])
    assert outstanding_tokens(s) == 100 + (50 + 7) + (20 + 3) + (30 + 12)


def test_least_outstanding_tokens_picks_the_idlest_replica_and_the_first_of_a_tie():
    new = req(10)
    busy, idle = replica(running=[req(100, 50)]), replica(running=[req(100, 10)])
    assert route_least_outstanding_tokens(new, [busy, idle], 0) == 1
    # generated tokens count: equal prompts, the one that generated fewer is the idler
    assert route_least_outstanding_tokens(new, [replica(running=[req(100, 5)]), replica(running=[req(100, 4)])], 0) == 1
    # swapped requests will come back: they count
    assert route_least_outstanding_tokens(new, [replica(swapped=[req(500)]), replica(running=[req(100)])], 0) == 1
    tie = [replica(running=[req(60)]), replica(waiting=[req(40)]), replica(waiting=[req(40)])]
    assert route_least_outstanding_tokens(new, tie, 0) == 1
    assert route_least_outstanding_tokens(new, [replica(), replica(), replica()], 7) == 0


def test_prefix_aware_picks_the_longest_hit_then_the_least_load_then_the_first():
    new = req(10)
    assert route_prefix_aware(new, [replica(hits=16), replica(hits=48), replica(hits=32)], 0) == 1
    # longest hit wins over load
    assert route_prefix_aware(new, [replica(hits=16), replica(running=[req(900)], hits=32)], 0) == 1
    # equal hits: the least outstanding tokens
    assert route_prefix_aware(new, [replica(running=[req(90)], hits=16), replica(running=[req(30)], hits=16),
                                    replica(running=[req(60)], hits=16)], 0) == 1
    # no hits anywhere: as least-outstanding-tokens, ties to the first
    assert route_prefix_aware(new, [replica(running=[req(5)]), replica(), replica()], 0) == 1


def test_round_robin_deals_from_replica_zero():
    assert [route_round_robin(None, [replica()] * 3, i) for i in range(7)] == [0, 1, 2, 0, 1, 2, 0]


# ---- a cluster run -------------------------------------------------------------------------------------------
def cluster_requests():
    # two conversations' worth of shared prompts (prefix hits) and one request asking for 3 samples
    shared = list(range(1, 33))
    out = [Request(f"r{i}", 0.05 * i, 40, 6, seq_no=i, prompt_token_ids=tuple(shared + [100 + i] * 8)) for i in range(8)]
    out.append(Request("fan", 0.5, 20, 5, seq_no=8, n=3, prompt_token_ids=(7,) * 20))
    return out


@pytest.fixture(scope="module")
def cluster_run():
    config = Config(model="toy", block_size=4, num_gpu_blocks=64, max_model_len=128, enable_prefix_caching=True)
    sim = ClusterSimulation(cluster_requests(), config, make_cost_model("roofline", config), num_replicas=2,
                            router="round-robin")
    return sim, sim.run()


def test_a_cluster_runs_prefix_cache_stats_are_the_sum_over_its_replicas(cluster_run):
    sim, result = cluster_run
    per = [rep.scheduler.kv.prefix_cache_stats for rep in sim.replicas]
    assert all(p.queries > 0 for p in per), "both replicas should look up prefixes"
    for name in ("queries", "hits", "recompute_queries", "recompute_hits", "host_hits"):
        assert getattr(result.prefix_cache, name) == sum(getattr(p, name) for p in per), name
    assert isinstance(result.prefix_cache, PrefixCacheStats)
    assert summarize_run(result)["prefix_cache_queries"] == sum(p.queries for p in per)


def test_a_cluster_runs_requests_frame_holds_the_forked_samples_with_their_replica(cluster_run):
    sim, result = cluster_run
    reqs = result.requests
    samples = reqs[reqs["parent_id"] == "fan"]
    assert len(samples) == 2, "n=3: the request's own row and two forked samples"
    home = next(k for k, routed in enumerate(sim.routed) if any(r.request_id == "fan" for r in routed))
    assert set(samples["replica"]) == {home}
    s = summarize_run(result)
    assert s["num_requests"] == 9 and s["num_samples"] == 9 + 2
    assert s["output_token_throughput"] == pytest.approx((8 * 6 + 3 * 5) / s["makespan_s"])
    assert sum(r["num_samples"] for r in result.extra["replicas"]) == 11
    assert isinstance(reqs, pd.DataFrame) and result.leaked_blocks == 0
