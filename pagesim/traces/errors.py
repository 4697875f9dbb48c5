"""The one exception trace loading raises for bad input."""

from __future__ import annotations

from pagesim.errors import UserError

_NOTHING = object()


class Described(str):
    """A description of what was found, shown as is: `got an empty value`, `got 12 ids`."""

    def __repr__(self) -> str:
        return str(self)


EMPTY = Described("an empty value")  # an empty cell, a JSON null or a missing key


class TraceError(UserError):
    """A trace file (or frame) that cannot be used, and where and why.

    `row` is the 1-based line number in the file (None when the problem is the
    whole file), `field` the column or key name (None when not about one),
    `expected` what a valid input has there, `got` the offending value if any.
    str() reads: `conv.csv, line 17, field 'ContextTokens': expected a
    non-negative integer, got 'abc'`.
    """

    def __init__(self, file: str, row: int | None, field: str | None, expected: str, got: object = _NOTHING):
        self.file, self.row, self.field, self.expected = str(file), row, field, expected
        self.got = None if got is _NOTHING else got
        where = [self.file]
        if row is not None:
            where.append(f"line {row}")
        if field is not None:
            where.append(f"field {field!r}")
        message = f"{', '.join(where)}: expected {expected}"
        if got is not _NOTHING:
            message += f", got {_show(got)}"
        super().__init__(message)


def _show(value: object) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."
