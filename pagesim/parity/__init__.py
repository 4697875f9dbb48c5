"""Step-by-step parity of pagesim's scheduler and paged KV manager against vLLM v1's own.

    oracle.py    vLLM's v1 Scheduler + KVCacheManager driven with fake runner outputs (no model)
    compare.py   both sides in lock step on step-released arrivals, and the per-step comparison
    cli.py       `python -m pagesim parity TRACE [replay options] --out DIR`

vLLM is optional (requirements-vllm.txt); only oracle.py imports it.
"""
