"""The ``compcoll`` command line: the subcommands of ``compcoll_bench.commands`` behind one parser.

A subcommand is a function ``run(args) -> exit code`` registered under its words, in a module
that ``registry.CATALOG`` names together with the command's one-line help and an example::

    @command("bench allreduce", arguments=add_arguments)
    def run(args: argparse.Namespace) -> int: ...

Only the module of the command being run is imported (``compcoll --version`` and
``compcoll -h`` import none); ``python -m compcoll_bench`` is the same program.

Every argument that cannot work is refused before any work starts, as one line
``compcoll: error: ...`` naming the problem and what would work, with exit code 2 (argparse's
convention): the parser's own errors (argument types check values and output paths) and the
commands' :class:`UsageError`.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from typing import NoReturn

from .commands import load
from .registry import CATALOG, COMMANDS, UsageError, command  # noqa: F401  (commands' API)

DESCRIPTION = """\
Benchmark, tune and check compcoll's compressed collectives on this machine: time allreduce
algorithms and gradient compressors against the MPI library's MPI_Allreduce, measure the
crossover table that algorithm "auto" uses, forecast a cluster with the cost model, and train
small models with PyTorch's DDP hooks and compcoll's."""


class Parser(argparse.ArgumentParser):
    """An argument parser whose errors are one line and exit code 2."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"compcoll: error: {message} (see '{self.prog} -h')\n")


def version() -> str:
    """The installed distribution's version, read from its metadata (imports nothing else)."""
    from importlib import metadata

    try:
        return metadata.version("compcoll")
    except metadata.PackageNotFoundError:  # a source tree that was never installed
        return "0+unknown"


def epilog() -> str:
    """Every command on one line with what it does, then an example of each."""
    width = max(len(name) for name in CATALOG) + len("compcoll ")
    lines = ["every command ('compcoll COMMAND -h' lists its options):"]
    lines += [f"  {'compcoll ' + name:<{width}}  {entry.help}" for name, entry in CATALOG.items()]
    lines += ["", "examples:"]
    lines += [f"  {entry.example}" for entry in CATALOG.values()]
    lines += ["", "Output files go where --json, --txt, --csv, --plot or --out say; "
              "'bench compressors' writes", "under ./compcoll-results/ unless told."]
    return "\n".join(lines)


def build_parser(only: str | None = None) -> argparse.ArgumentParser:
    """The argument parser: one nested subparser per word of each command in the catalog,
    with the options of every command (``only``: of that command alone, "" for none; the
    others' modules are not imported)."""
    root = Parser(prog="compcoll", description=DESCRIPTION, epilog=epilog(),
                  formatter_class=argparse.RawDescriptionHelpFormatter)
    root.add_argument("--version", action="version", version=f"compcoll {version()}",
                      help="print compcoll's version and exit")
    groups: dict[tuple[str, ...], argparse._SubParsersAction] = {
        (): root.add_subparsers(title="commands", metavar="COMMAND", required=True,
                                help="one of those listed below"),
    }
    for name in sorted(CATALOG):
        words = tuple(name.split())
        for depth in range(1, len(words)):
            prefix = words[:depth]
            if prefix not in groups:
                below = sorted(n.split()[depth] for n in CATALOG if tuple(n.split())[:depth]
                               == prefix)
                parent = groups[prefix[:-1]]
                what = f"compcoll {' '.join(prefix)} commands: {', '.join(below)}"
                group = parent.add_parser(prefix[-1], description=f"{what}.",
                                          **_listed(depth - 1, what))
                groups[prefix] = group.add_subparsers(metavar="COMMAND", required=True)
        entry = CATALOG[name]
        parser = groups[words[:-1]].add_parser(
            words[-1], description=f"{entry.help[0].upper()}{entry.help[1:]}.",
            epilog=f"example: {entry.example}", **_listed(len(words) - 1, entry.help))
        if only is None or only == name:
            load(name)
            COMMANDS[name].arguments(parser)
            parser.set_defaults(_command=COMMANDS[name])
    return root


def _listed(depth: int, text: str) -> dict[str, str]:
    """A subparser's line in its parent's help: below the top level only (the top level's
    help lists every command in its epilog)."""
    return {"help": text} if depth else {}


def named(argv: Sequence[str]) -> str:
    """The catalog's command that ``argv`` names by its leading words ("" if none)."""
    prefixes = {" ".join(n.split()[:i]) for n in CATALOG for i in range(1, len(n.split()) + 1)}
    words: list[str] = []
    for arg in argv:
        if " ".join([*words, arg]) not in prefixes:
            break
        words.append(arg)
    name = " ".join(words)
    return name if name in CATALOG else ""


def main(argv: Sequence[str] | None = None) -> int:
    """Run the subcommand named in ``argv`` (default ``sys.argv[1:]``); return its exit code."""
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["--version"]:  # before any command is imported
        print(f"compcoll {version()}")
        raise SystemExit(0)
    parser = build_parser(named(argv))
    args, rest = parser.parse_known_args(argv)
    if rest:
        parser.exit(2, f"compcoll: error: unrecognized arguments: {' '.join(rest)} "
                       f"(see 'compcoll {args._command.name} -h')\n")
    args.argv = argv
    try:
        return int(args._command.run(args))
    except UsageError as exc:  # exits as the parser's own errors do
        print(f"compcoll: error: {exc}", file=sys.stderr)
        raise SystemExit(2) from None


if __name__ == "__main__":
    raise SystemExit(main())
