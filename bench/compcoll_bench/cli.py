"""The ``compcoll`` command line: a registry of subcommands, each in ``bench.commands``.

A subcommand is a function ``run(args) -> exit code`` registered under its words::

    @command("bench allreduce", help="...", arguments=add_arguments)
    def run(args: argparse.Namespace) -> int: ...

``compcoll bench allreduce -h`` lists its options; ``python -m bench`` is the same program.

Every argument that cannot work is refused before any work starts, as one line
``compcoll: error: ...`` naming the problem and what would work, with exit code 2 (argparse's
convention): the parser's own errors and the commands' :class:`UsageError`.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import NoReturn

Runner = Callable[[argparse.Namespace], int]


@dataclass(frozen=True)
class Command:
    """A subcommand: its words, one-line help, its options and the function that runs it."""

    name: str
    help: str
    arguments: Callable[[argparse.ArgumentParser], None]
    run: Runner
    passthrough: bool = False  # unknown arguments go to ``args.rest`` (wrapped programs)


COMMANDS: dict[str, Command] = {}


class UsageError(Exception):
    """An argument (or combination) the command cannot run with; the message names the
    problem and what would work. ``main`` prints it as one line and exits with status 2."""


class Parser(argparse.ArgumentParser):
    """An argument parser whose errors are one line and exit code 2."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"compcoll: error: {message} (see '{self.prog} -h')\n")


def command(name: str, *, help: str,
            arguments: Callable[[argparse.ArgumentParser], None] | None = None,
            passthrough: bool = False) -> Callable[[Runner], Runner]:
    """Register the decorated function as the subcommand ``name`` (words separated by spaces).

    With ``passthrough`` the arguments the parser does not know are handed to the command as
    ``args.rest`` instead of being refused (for commands wrapping another program's options).
    """
    def register(run: Runner) -> Runner:
        if name in COMMANDS:
            raise ValueError(f"command {name!r} is already registered")
        COMMANDS[name] = Command(name, help, arguments or (lambda parser: None), run,
                                 passthrough)
        return run
    return register


def build_parser() -> argparse.ArgumentParser:
    """The argument parser: one nested subparser per word of each registered command."""
    from collectives.version import __version__

    from . import commands  # noqa: F401  (importing the modules registers the commands)

    root = Parser(prog="compcoll", description=__doc__.splitlines()[0])
    root.add_argument("--version", action="version", version=f"compcoll {__version__}")
    groups: dict[tuple[str, ...], argparse._SubParsersAction] = {
        (): root.add_subparsers(title="commands", metavar="COMMAND", required=True),
    }
    for cmd in sorted(COMMANDS.values(), key=lambda c: c.name):
        words = tuple(cmd.name.split())
        for depth in range(1, len(words)):
            prefix = words[:depth]
            if prefix not in groups:
                parent = groups[prefix[:-1]]
                group = parent.add_parser(prefix[-1], help=f"{' '.join(prefix)} commands")
                groups[prefix] = group.add_subparsers(metavar="COMMAND", required=True)
        parser = groups[words[:-1]].add_parser(words[-1], help=cmd.help, description=cmd.help)
        cmd.arguments(parser)
        parser.set_defaults(_command=cmd)
    return root


def main(argv: Sequence[str] | None = None) -> int:
    """Run the subcommand named in ``argv`` (default ``sys.argv[1:]``); return its exit code."""
    argv = list(sys.argv[1:] if argv is None else argv)
    parser = build_parser()
    args, rest = parser.parse_known_args(argv)
    if rest and not args._command.passthrough:
        parser.exit(2, f"compcoll: error: unrecognized arguments: {' '.join(rest)} "
                       f"(see 'compcoll {args._command.name} -h')\n")
    args.rest = rest[1:] if rest[:1] == ["--"] else rest
    args.argv = argv
    try:
        return int(args._command.run(args))
    except UsageError as exc:  # exits as the parser's own errors do
        print(f"compcoll: error: {exc}", file=sys.stderr)
        raise SystemExit(2) from None


if __name__ == "__main__":
    raise SystemExit(main())
