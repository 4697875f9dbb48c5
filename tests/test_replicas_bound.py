"""--replicas is bounded: a replica count the simulator cannot hold (each replica a whole engine, their blocks together
within the one-engine limit) is refused with one line naming the flag and what is expected; it was
`replay --replicas 100000` growing to 24 GB and being killed without a message."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest

from pagesim.cluster import ClusterSimulation, check_replicas
from pagesim.config import MAX_SIMULATED_BLOCKS, Config
from pagesim.cost import make_cost_model
from pagesim.errors import UserError
from pagesim.options import MAX_REPLICAS
from tests.test_cli_hygiene import one_error, pagesim

REPO = Path(__file__).resolve().parent.parent
TRACE = REPO / "traces" / "sharegpt-poisson-1k.jsonl"


def test_the_blocks_of_all_replicas_share_the_one_engine_limit():
    config = Config()  # llama-3-8b on h200 at 0.9
    blocks = config.resolved_num_gpu_blocks
    most = MAX_SIMULATED_BLOCKS // blocks
    check_replicas(config, most)
    with pytest.raises(UserError, match=rf"^--replicas {most + 1}: {most + 1} replicas of {blocks:,} blocks each .* "
                                        rf"expected at most {most} replicas of this configuration"):
        check_replicas(config, most + 1)
    check_replicas(Config(num_gpu_blocks=1), MAX_REPLICAS)
    with pytest.raises(UserError, match=f"expected at most {MAX_REPLICAS:,} replicas"):
        check_replicas(Config(num_gpu_blocks=1), MAX_REPLICAS + 1)
    # Swap mode: a replica's host blocks count too, as in one engine's check.
    swap = Config(num_gpu_blocks=100, preemption_mode="swap", swap_space=100.0)
    most = MAX_SIMULATED_BLOCKS // swap.num_cpu_blocks
    check_replicas(swap, most)
    with pytest.raises(UserError, match=f"{swap.num_cpu_blocks:,} blocks each"):
        check_replicas(swap, most + 1)


def test_a_cluster_too_large_is_refused_before_its_replicas_are_built():
    config = Config(num_gpu_blocks=1)
    with pytest.raises(UserError, match="expected at most"):
        ClusterSimulation([], config, make_cost_model("roofline", config), num_replicas=100_000)


def test_replay_refuses_the_flag_as_it_is_parsed_and_the_blocks_before_any_work(tmp_path):
    line = one_error(pagesim("replay", TRACE, "--limit", "20", "--replicas", "100000", "--out", tmp_path / "a"))
    assert line.endswith(f"argument --replicas: expected a positive integer of at most {MAX_REPLICAS:,} (each replica "
                         "is a whole simulated engine), got '100000'")
    line = one_error(pagesim("replay", TRACE, "--limit", "5", "--replicas", "100", "--out", tmp_path / "b"))
    most = MAX_SIMULATED_BLOCKS // Config().resolved_num_gpu_blocks
    assert line.startswith("error: --replicas 100: 100 replicas of ") and f"expected at most {most} replicas" in line
    assert not (tmp_path / "a").exists() and not (tmp_path / "b").exists(), "refused before --out was made"


def test_a_sweep_configuration_too_large_to_simulate_is_an_error_row(tmp_path):
    done = pagesim("sweep", TRACE, "--limit", "5", "--grid", "replicas=1,100", "--backend", "local",
                   "--out", tmp_path / "s")
    assert done.returncode == 0, done.stderr
    rows = pd.read_parquet(tmp_path / "s" / "results.parquet").set_index("replicas")
    assert rows.at[1, "status"] == "ok"
    assert rows.at[100, "status"] != "ok" and "expected at most" in rows.at[100, "error"]


def test_the_host_tiers_blocks_count_in_the_replicas_limit_too():
    tier = Config(num_gpu_blocks=100, enable_prefix_caching=True, kv_offloading_size=100.0)  # 51,200 host blocks
    most = MAX_SIMULATED_BLOCKS // tier.num_offload_blocks
    check_replicas(tier, most)
    with pytest.raises(UserError, match=f"{tier.num_offload_blocks:,} blocks each"):
        check_replicas(tier, most + 1)  # each replica builds its host tier's free list: 79 of them would be 4M ids
