"""PagedAttention Fig. 2, qualitatively: paging keeps ~all allocated KV memory for token states; reserve-ahead does not.

Workload: 500 ShareGPT-like requests (lognormal lengths, input mean ~161 and
output mean ~338 tokens, numpy seed 0), all arriving at t=0, so KV memory is
the constraint; llama-3-8b, block_size 16, 2000 GPU blocks, max_model_len 2048.
The figure is the token-state fraction (used / allocated slots: used +
reserved + internal fragmentation) at the end of every step, averaged with
every step weighted equally (a unit step time).

Measured (this file, seed 0): paged 0.987, contiguous max 0.252, pow2 0.474,
oracle 0.626. The paper reports 96.3% for vLLM and 20.4%-38.2% for the
reserve-ahead systems it replaced.
"""

from __future__ import annotations

import numpy as np
import pytest

from pagesim.config import Config
from pagesim.request import Request
from pagesim.scheduler import Scheduler
from tests.helpers import assert_all_done

NUM_REQUESTS = 500
MAX_MODEL_LEN = 2048


def sharegpt_like(n: int, seed: int = 0) -> list[Request]:
    rng = np.random.default_rng(seed)
    sigma_in, sigma_out = 1.0, 0.9
    prompt = rng.lognormal(np.log(161) - sigma_in**2 / 2, sigma_in, n)  # mean 161
    output = rng.lognormal(np.log(338) - sigma_out**2 / 2, sigma_out, n)  # mean 338
    prompt = np.clip(np.round(prompt), 1, MAX_MODEL_LEN - 1).astype(int)
    output = np.minimum(np.clip(np.round(output), 1, None).astype(int), MAX_MODEL_LEN - prompt)
    return [Request(f"r{i}", 0.0, int(p), int(o), seq_no=i) for i, (p, o) in enumerate(zip(prompt, output))]


def token_state_fraction(layout: str, policy: str) -> dict:
    cfg = Config(model="llama-3-8b", block_size=16, num_gpu_blocks=2000, max_model_len=MAX_MODEL_LEN,
                 kv_layout=layout, reserve_policy=policy, max_num_batched_tokens=2048)
    s = Scheduler(cfg)
    reqs = sharegpt_like(NUM_REQUESTS)
    for r in reqs:
        assert s.add_request(r), r.reject_reason
    fractions, usage, queued = [], [], 0
    now = 0.0
    while s.has_work():
        plan = s.schedule(now)
        now += 1.0
        s.finish_step(plan, now)
        acc = s.kv.accounting(s.running, s.waiting[0] if s.waiting else None)
        fractions.append(acc.token_state_fraction)
        usage.append(acc.allocated / acc.total)
        queued += bool(s.waiting)
    assert_all_done(s, reqs)
    return dict(fraction=float(np.mean(fractions)), steps=len(fractions), peak_usage=max(usage),
                queued_steps=queued, preemptions=s.num_preemptions)


@pytest.fixture(scope="module")
def figures() -> dict:
    out = {
        "paged": token_state_fraction("paged", "max"),
        "max": token_state_fraction("contiguous", "max"),
        "pow2": token_state_fraction("contiguous", "pow2"),
        "oracle": token_state_fraction("contiguous", "oracle"),
    }
    print("\ntoken-state fraction (time-averaged):",
          ", ".join(f"{k} {v['fraction']:.3f}" for k, v in out.items()))
    return out


def test_workload_is_sharegpt_like():
    reqs = sharegpt_like(NUM_REQUESTS)
    assert 140 <= np.mean([r.prompt_len for r in reqs]) <= 180
    assert 300 <= np.mean([r.output_len for r in reqs]) <= 380


def test_memory_is_the_constraint(figures):
    """Requests queue behind memory for most of the run in every layout (not behind max_num_seqs)."""
    for name, f in figures.items():
        assert f["queued_steps"] >= f["steps"] // 3, f"{name}: the queue emptied early, memory was not the constraint"
    assert figures["paged"]["peak_usage"] >= 0.95


def test_paged_keeps_at_least_96_percent_for_token_states(figures):
    f = figures["paged"]["fraction"]
    assert f >= 0.96, f"paged token-state fraction {f:.3f} < 0.96 (measured 0.987 when written)"


def test_contiguous_max_keeps_under_40_percent_for_token_states(figures):
    f = figures["max"]["fraction"]
    assert f < 0.40, f"contiguous max token-state fraction {f:.3f} >= 0.40 (measured 0.252 when written)"


def test_reserve_policies_order_as_expected(figures):
    """The less a policy over-reserves, the more of its memory holds tokens; none comes near paging."""
    fr = {k: v["fraction"] for k, v in figures.items()}
    assert fr["max"] < fr["pow2"] < fr["oracle"] < fr["paged"], (
        f"measured when written: paged 0.987, max 0.252, pow2 0.474, oracle 0.626; now {fr}"
    )
    assert fr["oracle"] < 0.80, "even the oracle reservation holds future tokens' slots empty for long"
