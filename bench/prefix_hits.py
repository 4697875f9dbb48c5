"""Prefix-cache hit tokens on the bundled traces (first 600 requests, paged, prefix caching, 600 blocks).

Prints, per trace, the requests table's summed prefix_hit_tokens, the step table's summed
prefix_cache_queries / prefix_cache_hits, the number of steps and a digest of the per-request finish
times (equal digests: identical decisions and timings). Uses only what every version records, so
`git stash; git checkout 9708ab1; python bench/prefix_hits.py` gives the figures before issue #10.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

from pagesim.config import Config
from pagesim.simulator import simulate
from pagesim.traces import load_trace

TRACES = ("azure-conv-like-2k", "kshot-shared-prefix-500", "multiturn-300", "sharegpt-bursty-1k")


def main() -> None:
    root = Path(__file__).resolve().parent.parent / "traces"
    for name in TRACES:
        trace = load_trace(root / f"{name}.jsonl", limit=600)
        r = simulate(trace, Config(max_model_len=8192, num_gpu_blocks=600, enable_prefix_caching=True))
        digest = hashlib.sha256(r.requests["finish_s"].to_numpy().tobytes()).hexdigest()[:12]
        print(f"{name:<26} hit tokens {int(r.requests['prefix_hit_tokens'].sum()):>9}  step queries "
              f"{int(r.steps['prefix_cache_queries'].sum()):>9} hits {int(r.steps['prefix_cache_hits'].sum()):>9}  "
              f"steps {len(r.steps):>6}  finish digest {digest}")


if __name__ == "__main__":
    main()
