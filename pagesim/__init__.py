"""pagesim: see and measure how LLM-serving engines manage KV-cache memory.

The core (this package) is pure Python and imports no torch: config, request
state, the block pool, the paged and contiguous KV-cache managers, the
scheduler, trace I/O, cost models, the simpy simulator, metrics and the CLI.
"""

__version__ = "0.1.0"
