"""Mooncake traces (Qin et al., FAST 2025): JSON lines of
`{"timestamp": ms, "input_length": n, "output_length": m, "hash_ids": [...]}`.

`hash_ids` hold one id per 512-token block, the last, partial block included
(ceil(input_length / 512) ids); the schema keeps full blocks only, so the
partial block's id is cut.
"""

from __future__ import annotations

import numpy as np

from pagesim.traces.schema import Parsed, Rows, json_numbers, offsets
from pagesim.traces.text import columns_of, json_objects

MOONCAKE_BLOCK = 512
KEYS = {"arrival_time_s": "timestamp", "prompt_len": "input_length", "output_len": "output_length", "prefix_hash_ids": "hash_ids"}


def read_mooncake(text: str, file: str) -> Parsed:
    lines, objects = json_objects(text, file)
    columns = columns_of(objects, KEYS, required=("arrival_time_s", "prompt_len", "output_len"), lines=lines, file=file)
    rows = Rows(file, np.array(lines))
    json_numbers(columns, rows, KEYS)
    offsets(columns["arrival_time_s"], rows, KEYS["arrival_time_s"], "milliseconds")
    return Parsed(
        columns, rows, len(objects), fields=KEYS, time_unit_s=1e-3,
        hash_block_size=MOONCAKE_BLOCK, partial_last_hash=True,
    )
