"""Errors pagesim reports to users without a traceback."""

from __future__ import annotations


class UserError(Exception):
    """An error caused by the user's input or configuration.

    The CLI and the dashboard print its message and never a traceback, so the
    message must say what was wrong and what was expected.
    """
