"""pagesim's scheduler and paged KV manager against vLLM v1's own, step by step (issue 12).

Needs the oracle (requirements-vllm.txt); skipped with the reason where vLLM is not importable.
"""

from __future__ import annotations

import json
import os

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from pagesim.config import Config
from pagesim.errors import UserError
from pagesim.parity.compare import check_parity_config
from pagesim.request import Request
from tests.conftest import REPO


def _vllm_missing() -> str | None:
    try:
        import vllm  # noqa: F401
    except Exception as exc:  # noqa: BLE001 - any import failure means no oracle
        return f"vLLM oracle not installed ({type(exc).__name__}: {exc}); pip install --no-deps -r requirements-vllm.txt"
    return None


needs_vllm = pytest.mark.skipif(_vllm_missing() is not None, reason=str(_vllm_missing()))
# Offline runs: PARITY_EXAMPLES=500 for more examples; PARITY_STATS=FILE appends one JSON line per example.
EXAMPLES = int(os.environ.get("PARITY_EXAMPLES", 100))


def test_parity_refuses_configs_vllm_would_not_start_with():
    with pytest.raises(UserError, match="null block"):
        check_parity_config(Config(block_size=16, num_gpu_blocks=8, max_model_len=128))
    with pytest.raises(UserError, match="swap"):
        check_parity_config(Config(num_gpu_blocks=400, max_model_len=1024, preemption_mode="swap"))
    with pytest.raises(UserError, match="kv-offloading-size 0"):  # the oracle has no host tier: its hits differ
        check_parity_config(Config(num_gpu_blocks=600, max_model_len=1024, enable_prefix_caching=True,
                                   kv_offloading_size=2.0))


@st.composite
def workloads(draw, chunked=None, policy=None):
    """Small traces and configs: shared prefixes, chunked prefill on/off, memory pressure, policy fcfs or
    priority (random priorities 0-3, many ties in priority and arrival: the request id breaks them)."""
    bs = draw(st.sampled_from([2, 4, 8, 16]))
    max_model_len = draw(st.integers(4, 12)) * bs
    num_blocks = draw(st.integers(max_model_len // bs + 1, 3 * max_model_len // bs + 2))
    chunked = draw(st.booleans()) if chunked is None else chunked
    max_num_seqs = draw(st.integers(1, 8))
    lo = max_num_seqs if chunked else max(max_num_seqs, max_model_len)  # vLLM's SchedulerConfig checks both
    mnbt = draw(st.integers(lo, max(lo, 3 * max_model_len)))
    config = Config(block_size=bs, num_gpu_blocks=num_blocks, max_model_len=max_model_len,
                    max_num_seqs=max_num_seqs, max_num_batched_tokens=mnbt,
                    enable_chunked_prefill=chunked, enable_prefix_caching=draw(st.booleans()),
                    watermark=draw(st.sampled_from([0.0, 0.0, 0.1])),
                    policy=draw(st.sampled_from(["fcfs", "priority"])) if policy is None else policy)
    n = draw(st.integers(1, 12))
    prefixes = draw(st.lists(st.lists(st.integers(0, 3), min_size=1, max_size=6), min_size=1, max_size=3))
    specs = []
    for i in range(n):
        prefix = draw(st.sampled_from(prefixes))
        tail = draw(st.lists(st.integers(4, 6), max_size=4))
        ids = tuple(prefix + tail)
        prompt_len = draw(st.integers(1, len(ids) * bs + bs - 1))
        specs.append((draw(st.integers(0, 6)), prompt_len, draw(st.integers(1, 3 * max_model_len // 2)), ids,
                      draw(st.integers(0, 3))))
    specs.sort(key=lambda s: s[0])

    return config, Requests(specs, bs), [s[0] for s in specs]


class Requests:
    """Fresh requests from (release step, prompt_len, output_len, prefix hash ids, priority) specs; shows them when
    a test fails."""

    def __init__(self, specs, block_size):
        self.specs, self.block_size = specs, block_size

    def __call__(self) -> list[Request]:
        return [Request(f"r{i}", float(step), p, o, seq_no=i, prefix_hash_ids=ids, hash_block_size=self.block_size,
                        priority=prio) for i, (step, p, o, ids, prio) in enumerate(self.specs)]

    def __repr__(self) -> str:
        return f"Requests({self.specs!r}, {self.block_size})"


def _assert_parity(workload):
    from pagesim.parity.compare import run_parity

    config, make, steps = workload
    result = run_parity(config, make, steps)
    if os.environ.get("PARITY_STATS"):
        with open(os.environ["PARITY_STATS"], "a") as out:
            out.write(json.dumps({"policy": config.policy, "chunked": config.enable_chunked_prefill,
                                  "examples": 1, "steps": result.n_steps_compared,
                                  "differing": result.n_steps_differing, "preemptions": result.num_preemptions,
                                  "hit_rate": result.prefix_hit_rate}) + "\n")
    assert result.stuck is None, result.stuck
    assert result.n_steps_differing == 0, (
        f"{result.n_steps_differing} of {result.n_steps_compared} steps differ from vLLM; first: "
        f"{json.dumps(result.first_difference)}"
    )


@needs_vllm
@settings(max_examples=EXAMPLES, deadline=None, suppress_health_check=list(HealthCheck))
@given(workloads())
def test_every_step_matches_vllm_on_small_workloads(workload):
    """Chunked prefill on/off, prefix caching on/off with shared prefixes, memory pressure forcing preemption,
    policy fcfs or priority."""
    _assert_parity(workload)


@needs_vllm
@settings(max_examples=50, deadline=None, suppress_health_check=list(HealthCheck))
@given(workloads(policy="priority"))
def test_every_step_matches_vllm_under_priority(workload):
    """vLLM's priority policy: waiting queue by (priority, arrival, id); victim max (priority, arrival), even one
    already scheduled this step; a request that preempted itself does not end the pass."""
    _assert_parity(workload)


BUNDLED = [
    ("sharegpt-poisson-1k.jsonl", ["--limit", "60", "--num-gpu-blocks", "300", "--max-model-len", "2048"]),
    ("kshot-shared-prefix-500.jsonl", ["--limit", "60", "--num-gpu-blocks", "400", "--max-model-len", "4096",
                                       "--enable-prefix-caching"]),
    ("multiturn-300.jsonl", ["--limit", "60", "--num-gpu-blocks", "200", "--max-model-len", "2048",
                             "--enable-prefix-caching", "--max-num-batched-tokens", "512"]),
    ("sharegpt-bursty-1k.jsonl", ["--limit", "60", "--num-gpu-blocks", "200", "--max-model-len", "2048",
                                  "--no-enable-chunked-prefill", "--max-num-batched-tokens", "2048"]),
]


@needs_vllm
@pytest.mark.parametrize("trace,options", BUNDLED, ids=[b[0] for b in BUNDLED])
def test_bundled_trace_matches_vllm_step_by_step(trace, options, tmp_path):
    from pagesim.cli import main

    rc = main(["parity", str(REPO / "traces" / trace), *options, "--out", str(tmp_path)])
    report = json.loads((tmp_path / "parity.json").read_text())
    assert rc == 0 and report["n_steps_differing"] == 0, f"differs from vLLM: {report['first_difference']}"
    assert report["n_steps_compared"] > 0 and (tmp_path / "steps.csv").exists()


@needs_vllm
def test_a_difference_is_reported_and_exits_non_zero(tmp_path, monkeypatch, capsys):
    from pagesim.cli import main
    from pagesim.parity import compare

    real_step = compare.PagesimSide.step

    def off_by_one(self, step):
        rec = real_step(self, step)
        rec.num_free_blocks += step == 3
        return rec

    monkeypatch.setattr(compare.PagesimSide, "step", off_by_one)
    rc = main(["parity", str(REPO / "traces" / "sharegpt-poisson-1k.jsonl"), "--limit", "5",
               "--num-gpu-blocks", "300", "--max-model-len", "2048", "--out", str(tmp_path)])
    report = json.loads((tmp_path / "parity.json").read_text())
    assert rc == 1
    assert report["n_steps_differing"] == 1 and report["first_difference"]["step"] == 3
    assert report["first_difference"]["fields"] == ["num_free_blocks"]
    assert "prefix hit rate n/a: prefix caching off" in capsys.readouterr().out


@needs_vllm
def test_options_the_trace_makes_pointless_are_warned_and_recorded(tmp_path, capsys):
    """Was: parity said '0 of N steps differ' for --policy priority on a trace without priorities (an fcfs
    comparison) and for prefix caching on a trace without content, without replay's warnings, and none when most
    requests were rejected on arrival."""
    from pagesim.cli import main

    rc = main(["parity", str(REPO / "traces" / "sharegpt-poisson-1k.jsonl"), "--limit", "10", "--num-gpu-blocks", "300",
               "--max-model-len", "64", "--policy", "priority", "--enable-prefix-caching", "--out", str(tmp_path)])
    assert rc == 0
    warnings = json.loads((tmp_path / "parity.json").read_text())["warnings"]
    assert any(w.startswith("--policy priority, but the trace has no priority field") for w in warnings), warnings
    assert any(w.startswith("--enable-prefix-caching is on, but the trace has neither") for w in warnings), warnings
    assert any("were rejected on arrival" in w for w in warnings), warnings
    assert not any("requests.parquet" in w for w in warnings), "parity writes no requests.parquet"
    err = capsys.readouterr().err
    assert all(f"warning: {w}" in err for w in warnings)


def test_options_vllm_lacks_are_refused_before_the_trace_is_read(tmp_path):
    """Was: parity read (and summarised) the whole trace, and made --out, before saying --preemption-mode swap or a
    cache vLLM would not start with cannot be compared."""
    from tests.test_cli_hygiene import one_error, pagesim

    broken = tmp_path / "broken.csv"  # never read: the options are refused first
    broken.write_text("arrived_at,num_prefill_tokens,num_decode_tokens\n0,x,1\n")
    for options, message in ((["--preemption-mode", "swap"], "parity needs --preemption-mode recompute"),
                             (["--num-gpu-blocks", "1"], "max_model_len 8192 needs 512 blocks")):
        line = one_error(pagesim("parity", broken, *options, "--out", tmp_path / "out"))
        assert line.startswith(f"error: {message}"), line
    assert not (tmp_path / "out").exists()
