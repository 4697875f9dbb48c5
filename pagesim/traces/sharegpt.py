"""ShareGPT conversations as a trace: one request per human turn answered by a gpt turn.

File: a JSON list (or JSON lines) of
`{"id": ..., "conversations": [{"from": "human", "value": "..."}, {"from": "gpt", "value": "..."}, ...]}`.

- The prompt of a request is every earlier message (system, human and gpt) plus its human turn; the output
  is the gpt turn that answers it. Human turns without a gpt answer, empty prompts and empty answers are
  dropped and counted.
- Lengths: a turn's `num_tokens` when given, else ceil(len(value) / 4): about 4 characters per token,
  the usual rule of thumb for English with GPT-style tokenizers (no tokenizer is loaded).
- prefix_hash_ids at SHAREGPT_BLOCK tokens, keyed by content (see blocks.py): a later turn repeats its
  conversation's earlier blocks, and identical openings across conversations share blocks too.
- Arrivals (ShareGPT has none): requests are ordered as if conversations started evenly in file order and
  each next turn came THINK_TIME_S later, then given Poisson arrival times at `rate` in that order.
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd

from pagesim.traces.blocks import BlockIds
from pagesim.traces.errors import EMPTY, Described, TraceError
from pagesim.traces.schema import MAX_INT, Parsed, Rows
from pagesim.traces.synth import THINK_TIME_S, arrival_times
from pagesim.traces.text import json_lines, json_list

SHAREGPT_BLOCK = 16
SHAREGPT_RATE = 10.0  # req/s when no rate is given
ROLES = {"human": "human", "user": "human", "gpt": "gpt", "assistant": "gpt", "chatgpt": "gpt", "bard": "gpt", "bing": "gpt", "system": "system"}


def read_sharegpt(text: str, file: str, rate: float, seed: int) -> Parsed:
    listed = text.lstrip().startswith("[")
    items = json_list(text, file) if listed else json_lines(text, file)
    minified = listed and "\n" not in text.strip()  # every item on line 1: name items by index and id
    blocks = BlockIds(SHAREGPT_BLOCK)
    requests: list[tuple] = []  # (conversation, turn, line, prompt_len, output_len, hash_ids)
    dropped: dict[str, int] = {}
    conversations = 0
    for c, (line, item) in enumerate(items):
        conversations += 1
        turns = _turns(item, file, line, _item_name(item, c) if minified else "")
        history, human = blocks.prompt(), -1
        if not any(role == "human" for role, _, _ in turns):  # nothing to ask: counted, as the turns below are
            reason = "conversation without a human turn"
            dropped[reason] = dropped.get(reason, 0) + 1
        for j, (role, text_, n_tokens) in enumerate(turns):
            history.extend(("text", text_), n_tokens)
            if role != "human":
                continue
            human += 1
            if j + 1 == len(turns) or turns[j + 1][0] != "gpt":
                reason = "human turn without a gpt answer"
            elif history.n_tokens == 0:
                reason = "empty prompt"
            elif turns[j + 1][2] == 0:
                reason = "empty gpt answer"
            else:
                requests.append((c, human, line, history.n_tokens, turns[j + 1][2], list(history.hash_ids)))
                continue
            dropped[reason] = dropped.get(reason, 0) + 1
    n = len(requests)
    spacing = (n / max(conversations, 1)) / rate  # seconds between conversation starts
    order = sorted(range(n), key=lambda i: requests[i][0] * spacing + requests[i][1] * THINK_TIME_S)
    requests = [requests[i] for i in order]
    column = lambda k: pd.Series([r[k] for r in requests], dtype=object)  # noqa: E731
    columns = {
        "request_id": pd.Series([f"{r[0]}.{r[1]}" for r in requests], dtype=object),
        "arrival_time_s": pd.Series(arrival_times(np.random.default_rng(seed), n, rate) if n else [], dtype=float),
        "prompt_len": column(3),
        "output_len": column(4),
        "prefix_hash_ids": column(5),
    }
    rows = Rows(file, np.array([r[2] for r in requests], dtype=int))
    return Parsed(columns, rows, conversations, hash_block_size=SHAREGPT_BLOCK, rate_applied=True, dropped=dropped)


def _item_name(item: object, index: int) -> str:
    """`[12] (id 'x7f') ` : which list item, for files whose items share a line (minified JSON)."""
    ident = item.get("id") if isinstance(item, dict) else None
    return f"[{index}]" + (f" (id {ident!r})" if isinstance(ident, (str, int)) else "") + " "


_JSON_KIND = {int: "a number", float: "a number", str: "a string", list: "a list", bool: "true or false",
              type(None): "null"}


def _turns(item: object, file: str, line: int, name: str = "") -> list[tuple[str, str, int]]:
    """(role, text, n_tokens) for each turn of one conversation; `name` prefixes field names (list items)."""
    turns = item.get("conversations", EMPTY) if isinstance(item, dict) else Described(f"{_JSON_KIND.get(type(item), 'a value')}, not an object")
    if not isinstance(turns, list):
        raise TraceError(file, line, f"{name}conversations", "a conversation object with a list 'conversations'", turns)
    out = []
    for j, turn in enumerate(turns):
        where = f"{name}conversations[{j}]"
        if not isinstance(turn, dict):
            raise TraceError(file, line, where, "an object with 'from' and 'value'", turn)
        role, value, n_tokens = turn.get("from", EMPTY), turn.get("value", EMPTY), turn.get("num_tokens")
        if not isinstance(role, str) or role.lower() not in ROLES:
            raise TraceError(file, line, f"{where}.from", f"one of {', '.join(ROLES)}", role)
        if not isinstance(value, str):
            raise TraceError(file, line, f"{where}.value", "a string", value)
        n_tokens = math.ceil(len(value) / 4) if n_tokens is None else _num_tokens(n_tokens, file, line, f"{where}.num_tokens")
        out.append((ROLES[role.lower()], value, n_tokens))
    return out


def _num_tokens(value: object, file: str, line: int, field: str) -> int:
    """A turn's num_tokens in the words of the other readers' counts (schema.ints, json_numbers): a JSON number, whole
    (12.0 is 12, as Mooncake's lengths), from 0; "up to MAX_INT" said only of a whole number beyond it."""
    kind = "a non-negative integer"
    if isinstance(value, str):
        raise TraceError(file, line, field, f"{kind} as a JSON number, not a string", value)
    whole = isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value) and value == int(value)
    if whole and 0 <= value <= MAX_INT:
        return int(value)
    raise TraceError(file, line, field, kind + (f" up to {MAX_INT:,}" if whole and value > MAX_INT else ""), value)
