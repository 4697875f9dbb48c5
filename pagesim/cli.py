"""Command line: `python -m pagesim <command> ...`.

Each subsystem registers its own subcommands through a `register(subparsers)`
function, so this module stays a table of contents. Here, for every command:
help shows defaults; an unknown flag is reported under the command's own usage;
a UserError prints one `error: ...` line and exits 2, never a traceback; a command that fails leaves no
empty output directory it made behind (outputs.removed_if_left_empty).
"""

from __future__ import annotations

import argparse
import os
import sys

from pagesim.errors import OptionError, UserError


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m pagesim", description="pagesim: see and measure how LLM-serving engines manage KV-cache memory."
    )
    sub = parser.add_subparsers(dest="command", required=True)
    from engine import calibration, live
    from pagesim import plan, replay, sweep, validate
    from pagesim.parity import cli as parity_cli
    from pagesim.traces import cli as trace_cli

    replay.register(sub)
    trace_cli.register(sub)
    live.register(sub)
    calibration.register(sub)
    validate.register(sub)
    sweep.register(sub)
    plan.register(sub)
    parity_cli.register(sub)
    for command in _commands(parser):
        command.formatter_class = HelpWithDefaults
        command.set_defaults(command_parser=command)
    return parser


def command_parser(name: str) -> argparse.ArgumentParser:
    """The parser of one command (`sweep`, `plan`, ...), for its defaults and its option list."""
    return next(a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction)).choices[name]


class HelpWithDefaults(argparse.ArgumentDefaultsHelpFormatter):
    """Adds `(default: X)` to an option's help unless the help already says it or there is none to show."""

    def _get_help_string(self, action):
        if action.default in (None, False, [], argparse.SUPPRESS) or "default" in (action.help or ""):
            return action.help
        return super()._get_help_string(action)


def _commands(parser: argparse.ArgumentParser):
    """Every (sub)command parser below `parser`, parents before their subcommands."""
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for command in dict.fromkeys(action.choices.values()):  # aliases map to the same parser
                yield command
                yield from _commands(command)


def typed_dests(argv: list[str]) -> list[str]:
    """The options (their dests) given on the command line, whatever their value: argv parsed again by a parser whose
    every default is suppressed, so argparse itself tells a typed flag from a default (`--swap-space 4` is typed though
    4 is its default; `--swap` abbreviates it). Sorted, for sweep.json and the workers."""
    parser = build_parser()
    for command in (parser, *_commands(parser)):
        command._defaults.clear()  # set_defaults: func, command_parser
        for action in command._actions:
            action.default = argparse.SUPPRESS
    args, _ = parser.parse_known_args(argv)
    return sorted(k for k in vars(args) if k != "command")


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args, unknown = parser.parse_known_args(argv)
    if unknown:  # under the command's usage, not the top level's
        getattr(args, "command_parser", parser).error(f"unrecognized arguments: {' '.join(unknown)}")
    args.argv = list(sys.argv[1:] if argv is None else argv)
    args.typed = typed_dests(args.argv)
    from pagesim.outputs import removed_if_left_empty

    try:
        with removed_if_left_empty():  # a command that fails leaves no empty --out behind
            return int(args.func(args) or 0)
    except OptionError as exc:
        print(f"error: {exc.as_flags()}", file=sys.stderr)
        return 2
    except UserError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print(f"interrupted: {args.command} stopped before it finished", file=sys.stderr)
        return 130  # 128 + SIGINT, as a shell reports it
    except BrokenPipeError:  # the reader of stdout went away (`... | head`): stop quietly, as a shell tool does
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())  # no second error when Python flushes stdout at exit
        return 141  # 128 + SIGPIPE
