"""Which format a trace file is in, from its content (never its file name).

JSON: a list -> sharegpt; JSON lines whose first object has "pagesim_trace" -> pagesim,
"conversations" -> sharegpt, timestamp/input_length/output_length -> mooncake.
Otherwise CSV, by the header's column names (csv_formats.HEADERS).
"""

from __future__ import annotations

import csv

from pagesim.traces.csv_formats import HEADERS
from pagesim.traces.errors import Described, TraceError
from pagesim.traces.schema import REQUIRED
from pagesim.traces.text import json_lines

MOONCAKE_KEYS = {"timestamp", "input_length", "output_length"}
KNOWN = (
    "a known trace format: a CSV header with "
    + "; ".join(f"{', '.join(cols)} ({name})" for name, cols in HEADERS.items())
    + "; JSON lines of mooncake or pagesim records; or a ShareGPT JSON list"
)


def detect(text: str, file: str) -> str:
    head = text.lstrip()
    if head.startswith("["):
        return "sharegpt"
    line = text.count("\n", 0, len(text) - len(head)) + 1
    if head.startswith("{"):
        _, first = next(json_lines(text, file))
        keys = first.keys() if isinstance(first, dict) else set()
        if "pagesim_trace" in keys:
            return "pagesim"
        if "conversations" in keys:
            return "sharegpt"
        if MOONCAKE_KEYS <= keys:
            return "mooncake"
        if len(MOONCAKE_KEYS - keys) == 1:  # all but one of mooncake's keys: name the one missing
            (missing,) = MOONCAKE_KEYS - keys
            raise TraceError(file, line, missing, f"the keys {', '.join(sorted(MOONCAKE_KEYS))} (mooncake format); "
                             f"the first record has no {missing}", f"JSON keys {sorted(keys)}")
        if set(REQUIRED) <= keys:  # pagesim records without the header line that names the format
            raise TraceError(file, line, None, 'a first line {"pagesim_trace": 1, "name": NAME, "hash_block_size": '
                             'null or B} before pagesim-format records', Described("a record"))
        raise TraceError(file, line, None, KNOWN, f"JSON keys {sorted(keys)}")
    try:
        header = {name.strip() for name in next(csv.reader([head.split("\n", 1)[0]]), [])}
    except csv.Error:
        header = set()
    for name, columns in HEADERS.items():
        if set(columns) <= header:
            return name
    for name, columns in HEADERS.items():  # all but one column of a format: name the one missing
        missing = [c for c in columns if c not in header]
        if len(missing) == 1 and len(columns) > 1:
            raise TraceError(file, line, missing[0], f"a CSV header with {', '.join(columns)} ({name} format); the "
                             f"header has no {missing[0]}", head.split("\n", 1)[0][:60])
    raise TraceError(file, line, None, KNOWN, head.split("\n", 1)[0][:60])
