"""Command-line option types: every value is checked where argparse parses it.

Each function is an argparse `type=`; a bad value becomes argparse's usual
`error: argument --flag: ...` line under the subcommand's usage. Numbers must
be finite; integers are written as integers ("16", not "16.5" or "1e3").
"""

from __future__ import annotations

import argparse
import math


def _number(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number, got {text!r}") from None
    if not math.isfinite(value):
        raise argparse.ArgumentTypeError(f"expected a finite number, got {text!r}")
    return value + 0.0  # "-0" is 0, not -0.0 in summary.json and messages


def _integer(text: str) -> int:
    try:
        return int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number such as 16, got {text!r}") from None


def _checked(parse, ok, expected: str, name: str, doc: str | None = None):
    """An argparse `type=`: `parse(text)`, then `ok(value)` or "expected {expected}, got '...'"."""

    def option_type(text: str):
        value = parse(text)
        if not ok(value):
            raise argparse.ArgumentTypeError(f"expected {expected}, got {text!r}")
        return value

    option_type.__name__ = option_type.__qualname__ = name  # argparse names the type in some messages
    option_type.__doc__ = doc
    return option_type


positive_int = _checked(_integer, lambda v: v >= 1, "a positive integer", "positive_int")
non_negative_int = _checked(_integer, lambda v: v >= 0, "a non-negative integer", "non_negative_int")
positive_float = _checked(_number, lambda v: v > 0, "a positive number", "positive_float")
non_negative_float = _checked(_number, lambda v: v >= 0, "a non-negative number", "non_negative_float")
fraction = _checked(_number, lambda v: 0 < v <= 1, "a fraction in (0, 1]", "fraction", "In (0, 1]: gpu_memory_utilization.")
fraction_below_one = _checked(_number, lambda v: 0 <= v < 1, "a fraction in [0, 1)", "fraction_below_one",
                              "In [0, 1): watermark.")
name_text = _checked(str, lambda v: bool(v.strip()), "a non-empty name", "name_text")


def bounded_int(most: int, why: str, name: str = "bounded_int", doc: str | None = None):
    """A positive integer of at most `most`; the error says `why` there is a most."""
    return _checked(_integer, lambda v: 1 <= v <= most, f"a positive integer of at most {most:,} ({why})", name, doc)


MAX_REPLICAS = 1_000  # each replica is a whole simulated engine: ~240 KB before its blocks (24 GB at 100,000)
replica_count = bounded_int(MAX_REPLICAS, "each replica is a whole simulated engine", "replica_count",
                            "--replicas: 1 to MAX_REPLICAS.")


def plural(count: int, noun: str, nouns: str | None = None) -> str:
    """A count for people with its noun agreeing: "1 row", "2 rows", "0 rows" (`nouns`: an irregular plural)."""
    return f"{count} {noun if count == 1 else nouns or noun + 's'}"


def readable(value) -> str:
    """A number for people: 1,170 not 1.17e+03; 0.0123; 1.5e-07 or 1e+300 only when tiny or huge; '-' for None or NaN."""
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "-"
    if isinstance(value, bool) or not isinstance(value, (int, float)) and not hasattr(value, "__float__"):
        return str(value)
    try:
        v = float(value)
    except OverflowError:  # an integer beyond a double: its leading digits
        digits = str(abs(int(value)))
        return f"{'-' if value < 0 else ''}{digits[0]}.{digits[1:3]}e+{len(digits) - 1}"
    if math.isinf(v) or (v != 0 and abs(v) < 1e-3) or abs(v) >= 1e15:  # tiny or huge: 1.5e-07, 1e+300
        return f"{v:.3g}"
    if float(v).is_integer() and abs(v) < 1e15:
        return f"{int(v):,}"
    if abs(v) >= 100:
        return f"{v:,.0f}"
    return f"{v:.3g}"
