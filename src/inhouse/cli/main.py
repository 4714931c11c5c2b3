"""Entry point: discovers subcommands (modules of this package that define `COMMAND`)."""

from __future__ import annotations

import argparse
import importlib
import os
import pkgutil
import sys
from collections.abc import Sequence
from types import ModuleType

import inhouse
from inhouse.errors import InhouseError

EXIT_BROKEN_PIPE = 141  # 128 + SIGPIPE, what a shell reports for a tool its reader left


def _command_modules() -> list[ModuleType]:
    package = importlib.import_module("inhouse.cli")
    modules = []
    for info in sorted(pkgutil.iter_modules(package.__path__), key=lambda i: i.name):
        if info.name.startswith("_") or info.name == "main":
            continue
        try:
            module = importlib.import_module(f"inhouse.cli.{info.name}")
        except ImportError as exc:
            # NOTE: one broken command must not take every other command down with it.
            print(f"inhouse: skipping command module {info.name!r}: {exc}", file=sys.stderr)
            continue
        if hasattr(module, "COMMAND"):
            modules.append(module)
    return modules


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="inhouse",
        description="Plan, run, measure and drill an on-prem LLM inference stack.",
    )
    parser.add_argument("--version", action="version", version=f"inhouse {inhouse.__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for module in _command_modules():
        command = sub.add_parser(module.COMMAND, help=module.HELP, description=module.__doc__)
        module.add_arguments(command)
        command.set_defaults(handler=module.run)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if not getattr(args, "handler", None):
        parser.print_help()
        return 2
    try:
        return int(args.handler(args) or 0)
    except InhouseError as exc:
        print(f"inhouse {args.command}: error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:
        return _closed_stdout()


def _closed_stdout() -> int:
    """The reader of our output went away (`inhouse up --dry-run | head`): stop quietly, as
    command-line tools do, instead of a traceback; later writes (Python's own flush at exit)
    go to /dev/null."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())
    os.close(devnull)
    return EXIT_BROKEN_PIPE


if __name__ == "__main__":
    sys.exit(main())
