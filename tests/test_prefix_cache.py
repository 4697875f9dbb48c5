"""Prefix caching: content-addressed keys that never collide, and a hit rate with one meaning.

Keys (pagesim/block_hash.py): two blocks share a key exactly when the whole
content of the prompt up to the end of the block is equal, whatever the process
or PYTHONHASHSEED. Hit rate (pagesim/kv_manager.py PrefixCacheStats): prompt
tokens served from the cache at first admission / prompt tokens, so it is
monotone in memory and equals the trace's ideal when memory is unlimited.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from pagesim.block_hash import ROOT_HASH, hash_block_tokens, ideal_prefix_cache_hit_rate, request_block_hashes
from pagesim.config import Config
from pagesim.request import Request, requests_from_trace
from pagesim.scheduler import Scheduler
from pagesim.simulator import simulate
from pagesim.traces.schema import trace_from_frame
from pagesim.traces.synth import synthesize
from tests.helpers import assert_all_done, drive, make_requests, prefix_hits_from_scratch


# ---- keys ----------------------------------------------------------------------------------------------
def test_requests_without_token_or_hash_ids_never_share_blocks():
    """The reported bug: 3 requests of 1,000 tokens, no hash ids, prefix caching on -> 992 hit tokens (hash(-1) == hash(-2))."""
    s = Scheduler(Config(model="toy", block_size=16, num_gpu_blocks=400, enable_prefix_caching=True,
                         max_model_len=2048, max_num_batched_tokens=2048))
    reqs = make_requests([(1000, 4)] * 3)
    drive(s, reqs, arrivals=[0, 100, 200])  # each one's blocks are cached before the next arrives
    assert_all_done(s, reqs)
    assert [r.num_prefix_hit_tokens for r in reqs] == [0, 0, 0], "requests with no content shared cached blocks"
    assert s.kv.prefix_cache_stats.hits == 0 and s.kv.prefix_cache_stats.queries == 3000


def test_trace_hash_ids_minus_one_and_minus_two_differ():
    a, b = make_requests([dict(prompt_len=32, output_len=1, prefix_hash_ids=(-1, 5), hash_block_size=16),
                          dict(prompt_len=32, output_len=1, prefix_hash_ids=(-2, 5), hash_block_size=16)])
    ha, hb = request_block_hashes(a, 2, 16), request_block_hashes(b, 2, 16)
    assert ha[0] != hb[0] and ha[1] != hb[1]


def _content(r: Request, end: int):
    """What the first `end` prompt tokens are known to be: token ids, else hash ids, else the request itself."""
    if r.prompt_token_ids is not None:
        return ("tokens", r.prompt_token_ids[:end])
    h = r.hash_block_size
    return ("hashes", r.prefix_hash_ids[: (end - 1) // h + 1]) if r.prefix_hash_ids is not None else ("request", r.seq_no)


request_specs = st.lists(
    st.one_of(
        st.lists(st.integers(0, 1), min_size=1, max_size=24).map(lambda t: ("tokens", tuple(t))),
        st.lists(st.integers(-3, 1), min_size=1, max_size=6).map(lambda h: ("hashes", tuple(h))),
        st.integers(1, 24).map(lambda n: ("none", n)),
    ),
    min_size=2,
    max_size=8,
)


def _build(specs, hash_block_size=4) -> list[Request]:
    out = []
    for i, (kind, v) in enumerate(specs):
        if kind == "tokens":
            out.append(Request(f"r{i}", float(i), len(v), 2, seq_no=i, prompt_token_ids=v))
        elif kind == "hashes":
            out.append(Request(f"r{i}", float(i), len(v) * hash_block_size, 2, seq_no=i, prefix_hash_ids=v,
                               hash_block_size=hash_block_size))
        else:
            out.append(Request(f"r{i}", float(i), v, 2, seq_no=i))
    return out


@settings(max_examples=300, deadline=None, suppress_health_check=list(HealthCheck))
@given(specs=request_specs, block_size=st.sampled_from([1, 2, 4, 8]))
def test_two_blocks_share_a_key_exactly_when_their_prefixes_are_equal(specs, block_size):
    reqs = _build(specs)
    for a in reqs:
        for b in reqs:
            if a is b:
                continue
            n = min(a.prompt_len, b.prompt_len) // block_size
            ha, hb = request_block_hashes(a, n, block_size), request_block_hashes(b, n, block_size)
            for i in range(n):
                end = (i + 1) * block_size
                same = _content(a, end) == _content(b, end) and _content(a, end)[0] != "request"
                assert (ha[i] == hb[i]) == same, (
                    f"block {i} (block_size {block_size}) of {a.request_id} and {b.request_id}: keys "
                    f"{'equal' if ha[i] == hb[i] else 'differ'} but contents {_content(a, end)} / {_content(b, end)}"
                )


_ids = st.one_of(st.integers(-3, 3), st.sampled_from([-2**63, 2**63 - 1, 2**64, -2**70]))


@settings(max_examples=300, deadline=None, suppress_health_check=list(HealthCheck))
@given(prompt_len=st.integers(1, 70), block_size=st.sampled_from([1, 2, 3, 4, 8, 16]),
       tokens=st.none() | st.lists(_ids, max_size=70).map(tuple), hashes=st.none() | st.lists(_ids, max_size=30).map(tuple),
       hash_block_size=st.sampled_from([1, 2, 3, 4, 5, 16, 32]), asks=st.lists(st.integers(0, 80), min_size=1, max_size=4))
def test_keys_packed_by_runs_equal_the_block_by_block_chain(prompt_len, block_size, tokens, hashes, hash_block_size, asks):
    """request_block_hashes packs a run of token or hash ids once (block_hash._extend_by_content_ids); asked in any
    order of sizes, its keys are the chain of hash_block_tokens over block_content_key, block by block (token ids
    shorter than the prompt, hash ids running out, ids beyond int64, generated-token blocks included)."""
    r = Request("a", 0.0, prompt_len, 3, seq_no=7, prompt_token_ids=tokens, prefix_hash_ids=hashes,
                hash_block_size=hash_block_size)
    for n in asks:
        got = list(request_block_hashes(r, n, block_size))
    n = max(asks)
    want, parent = [], ROOT_HASH
    for i in range(n):
        parent = hash_block_tokens(parent, *r.block_content_key(i, block_size))
        want.append(parent)
    assert got[:n] == want


@settings(max_examples=60, deadline=None, suppress_health_check=list(HealthCheck))
@given(specs=request_specs, block_size=st.sampled_from([1, 2, 4]), blocks=st.integers(3, 40))
def test_a_request_hits_only_blocks_of_an_earlier_request_with_the_same_prefix(specs, block_size, blocks):
    """Through the scheduler, under memory pressure: every first-admission hit is backed by an equal prefix."""
    reqs = _build(specs)
    s = Scheduler(Config(model="toy", block_size=block_size, num_gpu_blocks=blocks, enable_prefix_caching=True,
                         max_model_len=64, max_num_batched_tokens=64, watermark=0.0))
    drive(s, reqs, arrivals=[2 * i for i in range(len(reqs))])
    admitted = sorted((r for r in reqs if r.first_scheduled_time is not None), key=lambda r: r.first_scheduled_time)
    for i, r in enumerate(admitted):
        h = r.num_prefix_hit_tokens
        if h:
            assert _content(r, h)[0] != "request", f"{r.request_id} has no content but hit {h} tokens"
            assert any(_content(q, h) == _content(r, h) and q.prompt_len >= h for q in admitted[:i]), (
                f"{r.request_id} hit {h} tokens that no earlier request's prompt holds"
            )


def test_keys_are_the_same_in_every_process_whatever_pythonhashseed():
    code = (
        "from pagesim.request import Request; from pagesim.block_hash import request_block_hashes as h\n"
        "rs = [Request('a', 0, 40, 1, seq_no=3), Request('b', 0, 40, 1, prompt_token_ids=tuple(range(40))),\n"
        "      Request('c', 0, 40, 1, prefix_hash_ids=(-1, 7, 2**70), hash_block_size=16)]\n"
        "print([k.hex() for r in rs for k in h(r, 2, 16)])\n"
    )
    outs = set()
    for seed in ("0", "1", "12345"):
        env = dict(os.environ, PYTHONHASHSEED=seed)
        outs.add(subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True).stdout)
    assert len(outs) == 1, f"keys differ across PYTHONHASHSEED: {outs}"


# ---- hit rate ----------------------------------------------------------------------------------------------
def _multiturn(num_requests=120, rate=4.0):
    return synthesize("multiturn", num_requests=num_requests, rate=rate, seed=3, hash_block_size=16)


def _spread_out(trace, gap_s=1000.0):
    """The same requests, each arriving long after the previous one finished."""
    df = trace.df.copy()
    df["arrival_time_s"] = [gap_s * i for i in range(len(df))]
    return trace_from_frame(df, trace.name + "-spread", trace.hash_block_size)


def test_unlimited_memory_reaches_the_traces_ideal_hit_rate_exactly():
    trace = _spread_out(_multiturn())
    cfg = Config(num_gpu_blocks=200_000, enable_prefix_caching=True)
    ideal = ideal_prefix_cache_hit_rate(requests_from_trace(trace), cfg.block_size)
    assert ideal is not None and ideal > 0.3, f"the trace was meant to share prefixes (ideal {ideal})"
    result = simulate(trace, cfg)
    assert result.prefix_cache.hit_rate == pytest.approx(ideal, abs=1e-12)
    assert result.prefix_cache.queries == int(trace.df["prompt_len"].sum())


@pytest.mark.parametrize("preset,rate", [("multiturn", 5.0), ("kshot", 20.0)])
def test_first_admission_hit_rate_is_non_decreasing_in_memory(preset, rate):
    """More memory keeps more prefixes cached. (Not a theorem: more memory also admits more requests at once,
    and a request admitted before an earlier one's prompt is computed misses it: see the next test.)"""
    trace = synthesize(preset, num_requests=120, rate=rate, seed=3, hash_block_size=16)
    ideal = ideal_prefix_cache_hit_rate(requests_from_trace(trace), 16)
    rates = []
    for blocks in (300, 600, 1200, 2400, 200_000):
        result = simulate(trace, Config(num_gpu_blocks=blocks, enable_prefix_caching=True, max_model_len=8192))
        assert (result.requests["state"] == "finished").all()
        rates.append(result.prefix_cache.hit_rate)
    assert rates == sorted(rates), f"hit rate fell as memory grew: {rates}"
    assert rates[0] < rates[-1] <= ideal + 1e-12, f"rates {rates}, ideal {ideal}"


def test_readme_example_where_more_memory_lowers_the_hit_rate():
    """README (Prefix-cache keys and hit rates): synthetic multiturn, 120 requests at 20 req/s, seed 2: 0.0037 at 300
    blocks, 0.0035 at 600. (Its example was seed 3, 0.0627 at 1,200 and 0.0597 at 2,400, which the simulator no
    longer gives: 0.0587 and 0.0597, a rise.)"""
    trace = synthesize("multiturn", num_requests=120, rate=20.0, seed=2, hash_block_size=16)
    rates = [simulate(trace, Config(num_gpu_blocks=b, enable_prefix_caching=True, max_model_len=8192)).prefix_cache.hit_rate
             for b in (300, 600)]
    assert [round(r, 4) for r in rates] == [0.0037, 0.0035]


def test_re_admissions_count_separately_and_do_not_repeat_first_admission_hits():
    trace = _multiturn(rate=20.0)
    result = simulate(trace, Config(num_gpu_blocks=300, enable_prefix_caching=True, max_model_len=8192))
    stats = result.prefix_cache
    assert (result.requests["num_preemptions"] > 0).any(), "the run was meant to preempt"
    assert stats.recompute_queries > 0 and 0 <= stats.recompute_hits <= stats.recompute_queries
    assert stats.queries == int(trace.df["prompt_len"].sum())
    assert int(result.requests["prefix_hit_tokens"].sum()) == stats.hits
    assert stats.hit_rate <= ideal_prefix_cache_hit_rate(requests_from_trace(trace), 16) + 1e-12


def test_trace_info_prints_the_ideal_hit_rate(capsys):
    from pagesim.cli import main
    from pagesim.traces.load import load_trace

    path = str(Path(__file__).resolve().parents[1] / "traces" / "kshot-shared-prefix-500.jsonl")
    ideal = ideal_prefix_cache_hit_rate(requests_from_trace(load_trace(path)), Config().block_size)
    assert main(["trace", "info", path]) == 0
    out = capsys.readouterr().out
    assert f"ideal prefix_cache_hit_rate (unlimited memory, block_size 16): {ideal:.1%}" in out, out


def test_without_hash_ids_only_a_preempted_requests_recomputation_hits_the_cache():
    """What replay's warning for prefix caching on a trace without hash ids says: no request hits another's blocks
    (first-admission rate 0), while a recomputed request finds its own freed blocks still cached (as in vLLM)."""
    from pagesim.metrics import summarize_run
    from pagesim.simulator import simulate
    from pagesim.traces import load_trace

    trace = load_trace(Path(__file__).resolve().parent.parent / "traces" / "sharegpt-bursty-1k.jsonl", limit=150)
    assert "prefix_hash_ids" not in trace.df
    s = summarize_run(simulate(trace, Config(num_gpu_blocks=200, enable_prefix_caching=True)))
    assert s["num_preemptions"] > 0
    assert s["prefix_cache_hit_rate"] == 0.0 and s["prefix_cache_recompute_hit_rate"] > 0


def test_ideal_hit_rate_by_hand():
    """Block size 4, token ids T = 0, 1, 2, ...: each request hits the leading blocks an earlier prompt held, at most
    prompt_len - 1 tokens, whole blocks; its own full blocks are then held too."""
    t = tuple(range(100))
    specs = [  # (arrival, prompt tokens): hit tokens
        (0.0, t[:16]),  # 0: nothing before it; holds blocks 0-3
        (1.0, t[:20]),  # 16: blocks 0-3 (cap (20 - 1) // 4 = 4 blocks); holds block 4 too
        (2.0, t[:13]),  # 12: blocks 0-2 (cap 3 blocks)
        (3.0, (999,) * 4 + t[4:16]),  # 0: its first block differs, so do the keys of the rest of its chain
        (4.0, t[:12]),  # 8: its 3 blocks are held, but the cap of 11 tokens leaves 2 blocks
    ]
    reqs = [Request(f"r{i}", a, len(p), 1, seq_no=i, prompt_token_ids=p) for i, (a, p) in enumerate(specs)]
    assert ideal_prefix_cache_hit_rate(reqs, 4) == pytest.approx((16 + 12 + 8) / (16 + 20 + 13 + 16 + 12))
    assert ideal_prefix_cache_hit_rate([], 4) is None


def test_ideal_hit_rate_takes_requests_in_arrival_order_not_list_order():
    t = tuple(range(100))
    short, long = Request("a", 0.0, 16, 1, seq_no=1, prompt_token_ids=t[:16]), \
        Request("b", 1.0, 20, 1, seq_no=0, prompt_token_ids=t[:20])
    # a (16 tokens) first: b hits its 4 blocks. (b first, a would hit only 3: its cap is 15 tokens.)
    assert ideal_prefix_cache_hit_rate([long, short], 4) == pytest.approx(16 / 36)


# ---- the blocked head's lookup, asked again ------------------------------------------------------
def test_a_lookup_asked_again_follows_the_evictions_and_the_blocks_cached_in_between():
    """The waiting head is looked up again every step it stays blocked: a hit whose hash was evicted since ends the
    run there, and a first miss cached since extends it. Each answer equals a lookup from scratch (round 50 tried
    bringing the last lookup up to date instead of scanning again: not kept, docs/speed-history.md)."""
    from pagesim.kv_paged import PagedKVCacheManager

    kv = PagedKVCacheManager(Config(model="toy", block_size=4, num_gpu_blocks=9, enable_prefix_caching=True,
                                    max_model_len=64, max_num_batched_tokens=64, watermark=0.0))

    def compute(r: Request, free: bool = True) -> None:  # admitted with its hits found from scratch, all computed
        hits = [kv.pool.blocks[i] for i in prefix_hits_from_scratch(kv, r)]
        num_hit = len(hits) * kv.block_size
        assert kv.allocate_slots(r, r.prompt_len - num_hit, hits, num_hit, admission=True, num_running=0)
        r.num_computed_tokens = r.prompt_len
        if free:
            kv.free(r)

    def head_hits() -> list[int]:
        hits, num_hit = kv.get_computed_blocks(head)
        assert num_hit == len(hits) * kv.block_size
        assert [b.block_id for b in hits] == prefix_hits_from_scratch(kv, head)
        return [b.block_id for b in hits]

    tokens = tuple(range(25))
    compute(Request("a", 0.0, 21, 2, prompt_token_ids=tokens[:21]))  # 5 full blocks cached, then free (LRU)
    head = Request("head", 1.0, 25, 2, prompt_token_ids=tokens)  # its first 5 blocks are a's
    assert len(head_hits()) == 5
    other = Request("other", 2.0, 16, 2, prompt_token_ids=tuple(range(100, 116)))
    compute(other, free=False)  # 4 blocks: the 3 never cached, then the least recently used cached one (a's last)
    assert len(head_hits()) == 4  # cut at the evicted block
    kv.free(other)
    compute(Request("again", 3.0, 21, 2, prompt_token_ids=tokens[:21]))  # a's last block computed and cached again
    assert len(head_hits()) == 5  # the first miss is cached since: the run scanned on from it
    compute(Request("more", 4.0, 16, 2, prompt_token_ids=tuple(range(200, 216))), free=False)
    assert len(head_hits()) == 4
