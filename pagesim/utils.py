"""Small arithmetic every layer shares (one owner per rule)."""

from __future__ import annotations


def cdiv(a: int, b: int) -> int:
    """Ceiling division of integers: the blocks of size b that hold a tokens."""
    return -(-a // b)
