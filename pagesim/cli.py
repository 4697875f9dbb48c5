"""Command line: `python -m pagesim <command> ...`.

Each subsystem registers its own subcommands through a `register(subparsers)`
function, so this module stays a table of contents.
"""

from __future__ import annotations

import argparse
import sys

from pagesim.errors import UserError


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m pagesim", description="pagesim: see and measure how LLM-serving engines manage KV-cache memory."
    )
    sub = parser.add_subparsers(dest="command", required=True)
    from engine import live
    from pagesim import replay, validate
    from pagesim.parity import cli as parity_cli
    from pagesim.traces import cli as trace_cli

    replay.register(sub)
    trace_cli.register(sub)
    live.register(sub)
    validate.register(sub)
    parity_cli.register(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    args.argv = list(sys.argv[1:] if argv is None else argv)
    try:
        return int(args.func(args) or 0)
    except UserError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
