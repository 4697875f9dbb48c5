"""Errors pagesim reports to users without a traceback."""

from __future__ import annotations

from pathlib import Path


class UserError(Exception):
    """An error caused by the user's input or configuration.

    The CLI and the dashboard print its message and never a traceback, so the
    message must say what was wrong and what was expected.
    """


class OptionError(UserError):
    """A bad option value. `template` names options as `{block_size}`: str() reads them as Python names
    (`block_size must be ...`), `as_flags()` as the command-line flags users typed (`--block-size must be ...`)."""

    def __init__(self, template: str, prefix: str = ""):
        self.template, self.prefix = template, prefix
        super().__init__(prefix + template.format_map(_Names(lambda name: name)))

    def as_flags(self) -> str:
        return self.template.format_map(_Names(lambda name: "--" + name.replace("_", "-")))


class _Names(dict):
    def __init__(self, show):
        super().__init__()
        self.show = show

    def __missing__(self, name: str) -> str:
        return self.show(name)


def not_a_file(path: str | Path) -> str | None:
    """None for a regular file; else what is there, for a message: 'no such file', 'a directory' or 'a device or
    pipe' (which would be read forever)."""
    p = Path(path)
    if p.is_file():
        return None
    return "a directory" if p.is_dir() else "a device or pipe" if p.exists() else "no such file"
