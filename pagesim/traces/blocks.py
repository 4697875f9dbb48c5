"""Prefix hash ids for prompts built from known pieces of content.

A prompt is a sequence of segments (content key, n_tokens): token t of a
segment is identified by (key, t). Block j covers tokens [j*B, (j+1)*B) and is
keyed by (id of block j-1, the segment pieces it covers), chained as vLLM
chains block hashes, so two prompts share block j's id exactly when they share
their first (j+1)*B tokens. Ids are small integers in first-seen order, like
Mooncake's hash_ids; only full blocks get one.
"""

from __future__ import annotations

from collections.abc import Hashable


class BlockIds:
    """The id table shared by all prompts of one trace."""

    def __init__(self, block_size: int):
        self.block_size = block_size
        self.table: dict[tuple, int] = {}

    def prompt(self) -> Prompt:
        return Prompt(self)


class Prompt:
    """A prompt that grows segment by segment; `hash_ids` always covers its full blocks."""

    def __init__(self, blocks: BlockIds):
        self.blocks = blocks
        self.n_tokens = 0
        self.hash_ids: list[int] = []
        self._pieces: list[tuple] = []  # pieces of the current, partial block

    def extend(self, key: Hashable, n_tokens: int) -> Prompt:
        size, table, ids, pieces = self.blocks.block_size, self.blocks.table, self.hash_ids, self._pieces
        n, start = self.n_tokens, 0
        while start < n_tokens:
            take = min(size - n % size, n_tokens - start)
            pieces.append((key, start, start + take))
            start, n = start + take, n + take
            if n % size == 0:
                ids.append(table.setdefault((ids[-1] if ids else -1, tuple(pieces)), len(table)))
                pieces.clear()
        self.n_tokens = n
        return self
