"""pagesim's own trace format: JSON lines, a header then one request per line.

    {"pagesim_trace": 1, "name": "sharegpt-poisson-1k", "hash_block_size": 16}
    {"request_id": "0", "arrival_time_s": 0.0, "prompt_len": 161, "output_len": 338, "prefix_hash_ids": [0, 1]}

Request keys are the schema's column names; optional keys appear on every
line or on none. Writing then reading gives an equal DataFrame (floats are
written with repr precision).
"""

from __future__ import annotations

import gzip
import io
import json
from pathlib import Path

import numpy as np

from pagesim.traces.errors import EMPTY, TraceError
from pagesim.traces.schema import COLUMNS, MAX_INT, REQUIRED, Parsed, Rows, Trace, json_numbers, offsets
from pagesim.traces.text import columns_of, json_objects

VERSION = 1


def read_pagesim(text: str, file: str) -> Parsed:
    lines, objects = json_objects(text, file)
    header = objects[0]
    if header.get("pagesim_trace") != VERSION:
        raise TraceError(file, lines[0], "pagesim_trace", f"a header line with \"pagesim_trace\": {VERSION}", header.get("pagesim_trace", EMPTY))
    name, block = header.get("name"), header.get("hash_block_size")
    if name is not None and not isinstance(name, str):
        raise TraceError(file, lines[0], "name", "a string or null", name)
    if block is not None and (not isinstance(block, int) or isinstance(block, bool) or not 1 <= block <= MAX_INT):
        raise TraceError(file, lines[0], "hash_block_size", "a positive integer or null", block)
    lines, objects = lines[1:], objects[1:]
    for line, obj in zip(lines, objects):
        for key in obj:
            if key not in COLUMNS:
                raise TraceError(file, line, key, f"only the keys {', '.join(COLUMNS)}")
    columns = columns_of(objects, {k: k for k in COLUMNS}, required=REQUIRED, lines=lines, file=file)
    rows = Rows(file, np.array(lines, dtype=int))
    json_numbers(columns, rows)
    offsets(columns["arrival_time_s"], rows, "arrival_time_s")
    return Parsed(columns, rows, len(objects), hash_block_size=block, name=name)


def write_trace(trace: Trace, path: str | Path) -> None:
    """Write `trace` in the own format (JSON lines, compact); gzip-compressed when the name ends in `.gz` (with no
    timestamp in the gzip header: the same trace gives the same bytes)."""
    header = {"pagesim_trace": VERSION, "name": trace.name, "hash_block_size": trace.hash_block_size}
    with open(path, "wb") as raw:
        packed = gzip.GzipFile(filename="", mode="wb", fileobj=raw, mtime=0) if str(path).lower().endswith(".gz") else raw
        with io.TextIOWrapper(packed, encoding="utf-8", newline="\n") as out:  # closing it ends the gzip stream
            out.write(json.dumps(header) + "\n")
            for record in trace.df.to_dict("records"):
                out.write(json.dumps(record, separators=(",", ":")) + "\n")
