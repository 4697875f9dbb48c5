"""Errors pagesim reports to users without a traceback."""

from __future__ import annotations

import string
from pathlib import Path


class UserError(Exception):
    """An error caused by the user's input or configuration.

    The CLI and the dashboard print its message and never a traceback, so the
    message must say what was wrong and what was expected.
    """


class OptionError(UserError):
    """A bad option value. `template` names options as `{block_size}`: str() reads them as Python names
    (`block_size must be ...`), `as_flags()` as the command-line flags users typed (`--block-size must be ...`), and
    `in_words(name_of)` as another front end names them (the dashboard: its controls' labels).

    `advice`, a template too, says what to change in the CLI's terms and follows the template as given, its separator
    first (": raise it or pass {num_gpu_blocks}"). A front end whose controls are not the CLI's puts its own
    (`in_words(..., advice=)`, after a colon).
    `option` is the option whose value was refused: the first the template names, unless given."""

    def __init__(self, template: str, prefix: str = "", *, advice: str = "", option: str | None = None):
        self.template, self.prefix, self.advice = template, prefix, advice
        self.option = option or next((name for _, name, _, _ in string.Formatter().parse(template) if name), None)
        super().__init__(prefix + self.in_words(lambda name: name))

    def as_flags(self) -> str:
        return self.in_words(lambda name: "--" + name.replace("_", "-"))

    def in_words(self, name_of, advice: str | None = None) -> str:
        """The message without its prefix, each option as `name_of(option)`, and `advice` (a template) in place of the
        CLI's when given ("" for none)."""
        tail = self.advice if advice is None else ": " + advice if advice else ""
        return (self.template + tail).format_map(_Names(name_of))


class FlagError(UserError):
    """An OptionError in the command line's words (str(): `--block-size must be ...`) that keeps the OptionError
    itself (`option_error`), for a front end that names the options its own way (the dashboard's Plan page)."""

    def __init__(self, option_error: OptionError):
        super().__init__(option_error.as_flags())
        self.option_error = option_error


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


def given_path(path: str | Path, name: str) -> Path:
    """`path` as a Path; an empty (or blank) one is a UserError naming it, `NAME is empty; expected a path`: Path("")
    would be the working directory."""
    if not str(path).strip():
        raise UserError(f"{name} is empty; expected a path")
    return Path(path)
