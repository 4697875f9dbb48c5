"""The shape of a JSON file the dashboard opens (a kernel benchmark result, a plan.json), checked by JSON Schema.

A schema here is a plain JSON Schema (draft 2020-12, validated by the `jsonschema` library) whose subschemas may carry
an `expected` text, which no validator reads: `shape_problem` names the first field that fails, in the path form a
reader can find in the file (`candidates[1].num_gpus`), with that text and the value found there:

    candidates[1].num_gpus: expected a whole number, got 'one'
"""

from __future__ import annotations

from jsonschema import Draft202012Validator


def number(expected: str = "a number", *, whole: bool = False, null: bool = False) -> dict:
    """A subschema for a number (a whole one: an integer, 2.0 included), or null too; booleans are not numbers."""
    kind = "integer" if whole else "number"
    return {"type": [kind, "null"] if null else kind, "expected": expected}


def shape_problem(instance, schema: dict) -> str | None:
    """'FIELD: expected WHAT, got VALUE' for the first place where `instance` breaks `schema` (the shallowest, then the
    first in the file; an anyOf is named as a whole, not by one of its branches; a missing required field is named
    with its own `expected` and got None), or None when it fits."""
    errors = list(Draft202012Validator(schema).iter_errors(instance))  # in the file's order
    if not errors:
        return None
    error = min(errors, key=lambda e: len(e.absolute_path))  # (jsonschema's best_match would rank by kind of check)
    path, value, where = list(error.absolute_path), error.instance, error.schema
    if error.validator == "required":  # the missing field itself, as if it were there and null
        missing = next(k for k in error.validator_value if k not in error.instance)
        path, value = path + [missing], None
        where = error.schema.get("properties", {}).get(missing, {"expected": "a value"})
    field = "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in path).lstrip(".")
    expected = where.get("expected") if isinstance(where, dict) else None
    if expected is None:  # a subschema without its own words: the library's
        return f"{field or 'the file'}: {error.message}"
    shown = "an empty list" if value == [] else f"{value!r:.60}"
    return f"{field or 'the file'}: expected {expected}, got {shown}"
