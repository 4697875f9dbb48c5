"""Reading a trace file's text, and JSON with line numbers: the failure paths all end in TraceError.

A gzip-compressed file (magic bytes 1f 8b, whatever its name) reads as its decompressed content: the size
ceiling applies to the decompressed bytes, counted while decompressing (`open_trace`).
"""

from __future__ import annotations

import gzip
import io
import json
import os
import stat
import zlib
from collections.abc import Iterator
from pathlib import Path

import pandas as pd

from pagesim.errors import given_path
from pagesim.traces.errors import Described, TraceError


class _DuplicateKey(Exception):
    def __init__(self, key: str):
        self.key = key


def _unique_keys(pairs: list[tuple[str, object]]) -> dict:
    """json's object_pairs_hook: the object, or _DuplicateKey naming a key it holds twice (json keeps the last one
    silently, so a row's field would change without a word)."""
    obj = dict(pairs)
    if len(obj) < len(pairs):  # some key twice: name the first one repeated
        seen: set[str] = set()
        for key, _ in pairs:
            if key in seen:
                raise _DuplicateKey(key)
            seen.add(key)
    return obj


_DUPLICATE_KEY = "each key once in a JSON object (JSON would keep the last one silently)"
_DECODER = json.JSONDecoder(object_pairs_hook=_unique_keys)  # json_list's: every object's keys checked
_WHITESPACE = " \t\r\n"


MAX_TRACE_MB_VAR = "PAGESIM_MAX_TRACE_MB"
DEFAULT_MAX_TRACE_MB = 2048
HEAD_BYTES = 1 << 20  # enough to tell the format: a CSV header, or the first JSON line
GZIP_MAGIC = b"\x1f\x8b"
READ_CHUNK = 16 << 20  # decompressed bytes per read of a gzip file


def max_trace_bytes() -> int:
    """The size ceiling on trace files: $PAGESIM_MAX_TRACE_MB megabytes (default 2048)."""
    value = os.environ.get(MAX_TRACE_MB_VAR, "")
    try:
        mb = float(value) if value.strip() else DEFAULT_MAX_TRACE_MB
    except ValueError:
        mb = -1.0
    if not (mb > 0 and mb < 1e9):
        from pagesim.errors import UserError

        raise UserError(f"{MAX_TRACE_MB_VAR}={value!r}: expected a positive number of megabytes")
    return int(mb * 1e6)


def check_trace_file(path: str | Path) -> int:
    """Size in bytes of a readable regular file within the ceiling; an empty path, devices, pipes and oversize files
    are refused."""
    given_path(path, "trace path")
    file = str(path)
    try:
        info = os.stat(path)
    except OSError as exc:
        raise TraceError(file, None, None, "a readable file", exc.strerror or str(exc)) from None
    if stat.S_ISDIR(info.st_mode):
        raise TraceError(file, None, None, "a readable file", "Is a directory")
    if not stat.S_ISREG(info.st_mode):
        raise TraceError(file, None, None, "a regular file (save a device's or a pipe's output to a file first)", Described("a device or pipe"))
    limit = max_trace_bytes()
    if info.st_size > limit:  # a gzip file's content is larger still; its decompressed bytes are counted as read
        raise _too_large(file, limit, info.st_size)
    return info.st_size


def is_gzip(path: str | Path) -> bool:
    """Whether the file starts with gzip's magic bytes (its content decides, never its name)."""
    try:
        with open(path, "rb") as f:
            return f.read(2) == GZIP_MAGIC
    except OSError:
        return False


class TooLarge(TraceError):
    """A file, or a gzip file's content, past the size ceiling (max_trace_bytes): a reader of other files (the
    dashboard's plan.json upload) names what it expected by this type."""


def _too_large(file: str, limit: int, size: int | None) -> TraceError:
    """The ceiling's error, for a file of `size` bytes, or (None) a gzip file's content found past it."""
    from pagesim.options import readable

    found = f"{readable(size / 1e6)} MB" if size is not None else f"more than {readable(limit / 1e6)} MB once decompressed"
    return TooLarge(file, None, None, f"a trace file of at most {readable(limit / 1e6)} MB (set {MAX_TRACE_MB_VAR} to raise the limit)",
                    Described(found))


class _Gunzip(io.RawIOBase):
    """A gzip file's decompressed bytes, read in pieces: past the ceiling, or where the data is corrupt or cut
    short, a read raises TraceError (and keeps it in `error`, for readers that swallow exceptions)."""

    def __init__(self, path: str | Path, limit: int):
        self.file, self.limit, self.count, self.error = str(path), limit, 0, None
        self._gz = gzip.GzipFile(path, "rb")

    def readable(self) -> bool:
        return True

    def readinto(self, buffer) -> int:
        view = memoryview(buffer).cast("B")
        try:
            n = self._gz.readinto(view[: self.limit + 1 - self.count])
        except (OSError, EOFError, zlib.error) as exc:  # BadGzipFile is an OSError; a cut file ends in EOFError
            problem = "the data ends early (a truncated file?)" if isinstance(exc, EOFError) else str(exc)
            self.error = TraceError(self.file, None, None, "a complete gzip file", Described(problem[:80]))
            raise self.error from None
        self.count += n
        if self.count > self.limit:
            self.error = _too_large(self.file, self.limit, None)
            raise self.error
        return n

    def close(self) -> None:
        self._gz.close()
        super().close()


def open_trace(path: str | Path) -> io.RawIOBase:
    """The file's bytes, decompressed when it is gzip; the caller closes it. TraceError when it cannot be opened."""
    try:
        if is_gzip(path):
            return _Gunzip(path, max_trace_bytes())
        return open(path, "rb", buffering=0)
    except OSError as exc:
        raise TraceError(str(path), None, None, "a readable file", exc.strerror or str(exc)) from None


def read_bytes(path: str | Path, size: int = -1) -> bytes:
    """The first `size` bytes of the file's content (all when -1), decompressed when it is gzip."""
    file = str(path)
    chunks, left = [], size
    try:
        with open_trace(path) as f:
            if size < 0 and not isinstance(f, _Gunzip):
                return f.readall()
            while left:
                chunk = f.read(READ_CHUNK if left < 0 else min(left, READ_CHUNK))
                if not chunk:
                    break
                chunks.append(chunk)
                left -= len(chunk) if left > 0 else 0
    except OSError as exc:
        raise TraceError(file, None, None, "a readable file", exc.strerror or str(exc)) from None
    return chunks[0] if len(chunks) == 1 else b"".join(chunks)


def read_head(path: str | Path) -> str | None:
    """The file's first whole lines (about HEAD_BYTES) as text, or None when they are not plain UTF-8 text."""
    check_trace_file(path)
    data = read_bytes(path, HEAD_BYTES + 1)
    if len(data) > HEAD_BYTES:
        data = data[:HEAD_BYTES]
        if b"\n" in data:
            data = data[: data.rindex(b"\n") + 1]
    try:
        text = _lf(data.decode("utf-8-sig"))
    except UnicodeDecodeError:
        return None
    return text if text.strip() and "\x00" not in text else None


def _lf(text: str) -> str:
    """Text whose lines end in a lone CR (classic Mac OS, Excel's "CSV (Macintosh)") with LF endings instead, one
    for one, so lines are counted as in any other file; text with an LF anywhere is left as it is."""
    return text.replace("\r", "\n") if "\r" in text and "\n" not in text else text


def read_text(path: str | Path) -> str:
    """The file as text; rejects unreadable, oversize, empty, non-UTF-8 and binary files (NUL bytes)."""
    file = str(path)
    check_trace_file(path)
    data = read_bytes(path)
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        line = data.count(b"\n" if b"\n" in data else b"\r", 0, exc.start) + 1  # lone-CR lines count as _lf reads them
        raise TraceError(file, line, None, "UTF-8 text (is this a binary or compressed file?)", data[exc.start : exc.start + 4]) from None
    text = _lf(text)
    if not text.strip():
        raise TraceError(file, None, None, "a non-empty trace file")
    if "\x00" in text:
        raise TraceError(file, text.count("\n", 0, text.index("\x00")) + 1, None, "text without NUL bytes (is this a binary file?)")
    return text


def _json_problem(exc: json.JSONDecodeError) -> str:
    """`Unterminated string starting at column 5`, not `... starting at at column 5`."""
    return f"{exc.msg.removesuffix(' at')} at column {exc.colno}"


def _check_keys(value: object, text: str, file: str, line: int) -> object:
    """`value` (parsed from `text`) back, or a TraceError naming a key that an object of the text holds twice. Each
    key is followed by a colon, so a text without colons has no keys and a flat object with as many keys as the
    text has colons has none twice (the check costs ~0.1 us a line where a hook on every object cost ~1.4); any
    other text (nesting, colons in strings) is parsed again with every object's keys checked."""
    if ":" not in text or (isinstance(value, dict) and text.count(":") == len(value)):
        return value
    try:
        json.loads(text, object_pairs_hook=_unique_keys)
    except _DuplicateKey as dup:
        raise TraceError(file, line, dup.key, _DUPLICATE_KEY) from None
    return value


def _loads(text: str, file: str, line: int) -> object:
    try:
        value = json.loads(text)
    except json.JSONDecodeError as exc:
        raise TraceError(file, line, None, f"valid JSON ({_json_problem(exc)})") from None
    except (ValueError, RecursionError) as exc:  # over-long integers, over-deep nesting
        raise TraceError(file, line, None, "valid JSON within Python's limits", str(exc)[:60]) from None
    return _check_keys(value, text, file, line)


def json_lines(text: str, file: str) -> Iterator[tuple[int, object]]:
    """(line number, value) for each non-blank line of a JSON-lines text."""
    for number, line in enumerate(text.split("\n"), 1):
        if line.strip():
            yield number, _loads(line, file, number)


def json_list(text: str, file: str) -> Iterator[tuple[int, object]]:
    """(line where the item starts, item) for each item of a text holding one JSON list."""
    line, counted = 1, 0

    def skip(i: int) -> int:
        while i < len(text) and text[i] in _WHITESPACE:
            i += 1
        return i

    def line_at(i: int) -> int:
        nonlocal line, counted
        line += text.count("\n", counted, i)
        counted = i
        return line

    i = skip(0)
    if text[i : i + 1] != "[":
        raise TraceError(file, line_at(i), None, "a JSON list ('[')")
    i = skip(i + 1)
    if text[i : i + 1] == "]":
        i = skip(i + 1)
    else:
        while True:
            try:
                item, end = _DECODER.raw_decode(text, i)
            except _DuplicateKey as dup:
                raise TraceError(file, line_at(i), dup.key, _DUPLICATE_KEY) from None
            except json.JSONDecodeError as exc:
                raise TraceError(file, exc.lineno, None, f"valid JSON ({_json_problem(exc)})") from None
            except (ValueError, RecursionError) as exc:
                raise TraceError(file, line_at(i), None, "valid JSON within Python's limits", str(exc)[:60]) from None
            yield line_at(i), item
            i = skip(end)
            if text[i : i + 1] == ",":
                i = skip(i + 1)
            elif text[i : i + 1] == "]":
                i = skip(i + 1)
                break
            else:
                raise TraceError(file, line_at(i), None, "',' or ']' after a list item")
    if i < len(text):
        raise TraceError(file, line_at(i), None, "nothing after the JSON list")


def json_objects(text: str, file: str) -> tuple[list[int], list[dict]]:
    """Line numbers and objects of a JSON-lines text whose every value is an object."""
    lines, objects = [], []
    for line, obj in json_lines(text, file):
        if not isinstance(obj, dict):
            raise TraceError(file, line, None, "a JSON object on every line", type(obj).__name__)
        lines.append(line)
        objects.append(obj)
    return lines, objects


def columns_of(objects: list[dict], keys: dict[str, str], required: tuple[str, ...], lines: list[int] | None = None,
               file: str = "") -> dict[str, pd.Series]:
    """Schema name -> raw values, for the `required` names and each key some object has. With `lines` (each
    object's line number) a line that lacks a required key, or an optional key other lines have, is a TraceError
    naming the key (optional keys appear on every line or on none); without, such values are None."""
    present = {k for obj in objects for k in obj}
    if lines is not None:
        for name, key in keys.items():
            if key in present or name in required:
                missing = next((i for i, obj in enumerate(objects) if key not in obj), None)
                if missing is not None:
                    has = next((i for i, obj in enumerate(objects) if key in obj), None)
                    expected = ("the key on every line (it is required)" if name in required or has is None else
                                f"the key on every line, as on line {lines[has]} (an optional key appears on every "
                                "line or on none)")
                    raise TraceError(file, lines[missing], key, expected, Described("a line without it"))
    return {
        name: pd.Series([obj.get(key) for obj in objects], dtype=object)
        for name, key in keys.items()
        if key in present or name in required
    }
