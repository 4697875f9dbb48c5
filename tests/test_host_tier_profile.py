"""The profile cost model takes the host tier's measured bandwidth (bench/host_tier_bw.py) when the profile carries it."""

from __future__ import annotations

import json

import pytest

from pagesim.cost.profile import ProfileCostModel
from pagesim.errors import UserError

PROFILE = "results/profiles/h200-llama-3-8b-2026-11-30.json"


def test_host_tier_coefficients_replace_the_swap_link_figure(tmp_path):
    base = ProfileCostModel.from_json(PROFILE)
    assert base.load_s_per_block == base.store_s_per_block == base.swap_s_per_block
    d = json.loads(open(PROFILE).read())
    d["coefficients"].update(host_store_s_per_byte=1e-10, host_load_s_per_byte=4e-10)
    p = tmp_path / "p.json"
    p.write_text(json.dumps(d))
    m = ProfileCostModel.from_json(p)
    assert m.store_s_per_block == pytest.approx(1e-10 * 2 * 2**20)  # Llama-3-8B bf16 block: 2 MiB
    assert m.load_s_per_block == pytest.approx(4e-10 * 2 * 2**20)
    assert m.swap_s_per_block == base.swap_s_per_block
    m.to_json(tmp_path / "again.json")
    assert ProfileCostModel.from_json(tmp_path / "again.json").load_s_per_block == m.load_s_per_block


def test_a_bad_host_tier_coefficient_is_named(tmp_path):
    d = json.loads(open(PROFILE).read())
    d["coefficients"]["host_load_s_per_byte"] = "fast"
    p = tmp_path / "p.json"
    p.write_text(json.dumps(d))
    with pytest.raises(UserError, match="host_load_s_per_byte"):
        ProfileCostModel.from_json(p)


def test_live_warm_up_and_calibration_configs_drop_the_host_tier_with_prefix_caching():
    """live's warm-up and calibration run without prefix caching; a run with a host tier must still make that
    config (the H200 live offload run failed here: --kv-offloading-size needs --enable-prefix-caching)."""
    from engine.live import without_prefix_caching
    from pagesim.config import Config

    cfg = Config(enable_prefix_caching=True, kv_offloading_size=4.7)
    off = without_prefix_caching(cfg).replace(preemption_mode="recompute")
    assert not off.enable_prefix_caching and off.kv_offloading_size == 0 and off.num_offload_blocks == 0
