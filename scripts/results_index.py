"""Write a results folder's README.md: every result in it, with the command line that made it.

Usage:
    python scripts/results_index.py bench/results/allreduce --title "..." [--about "..."]
        [--note 'GLOB[,GLOB...]=TEXT' ...] [--lines N]
    python scripts/results_index.py bench/results          (the top level: one line per folder)

A topic folder's README lists each result (the files sharing a name before the suffix: .txt,
.json, .md, .png) with the command line recorded inside it (a JSON ``command`` field, a
``# command:`` line, or a first line that is a command), its recorded date, and the first
lines of its first table. Files another result's command names (the runs a summary reads) are
listed with that result instead of on their own. ``--note GLOB[,GLOB...]=TEXT`` adds TEXT to
the results whose files match a GLOB, with the commit that brought the files in and its date
(from git): how a result that cannot be regenerated with today's code says so. The top level lists
each folder holding a README.md with that README's title. The command line that wrote the
README is on its first lines: re-run it after adding or removing results.
"""

from __future__ import annotations

import argparse
import fnmatch
import json
import re
import shlex
import subprocess
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
COMMAND = re.compile(r"^#\s*(?:[\w ]+:\s*)?((?:compcoll|python3?|mpiexec|make)\s.*)$")
ISO_DATE = re.compile(r"\b(\d{4}-\d{2}-\d{2})[T ]?(\d{2}:\d{2})?")
CTIME = re.compile(r"\b\w{3} (\w{3}) +(\d{1,2}) (\d{2}:\d{2}):\d{2} \w+ (\d{4})\b")
MONTHS = "Jan Feb Mar Apr May Jun Jul Aug Sep Oct Nov Dec".split()


def invocation(argv: list[str]) -> str:
    """This script's command line, paths relative to the repository root."""
    return "python scripts/" + shlex.join([Path(__file__).name, *argv])


def origin(path: Path) -> str | None:
    """``<commit> (<date>)`` of the first commit holding this exact content, wherever it
    lived then (a move keeps it); None while the content is not committed."""
    blob = subprocess.run(["git", "hash-object", str(path)], cwd=ROOT, capture_output=True,
                          text=True).stdout.strip()
    out = subprocess.run(["git", "log", "--reverse", "--format=%h (%ad)", "--date=short",
                          f"--find-object={blob}"], cwd=ROOT, capture_output=True, text=True)
    lines = out.stdout.splitlines()
    return lines[0] if out.returncode == 0 and lines else None


def parse_notes(pairs: list[str]) -> list[tuple[str, str]]:
    """``GLOB=TEXT`` pairs, checked."""
    notes = []
    for pair in pairs:
        glob, sep, text = pair.partition("=")
        if not sep or not glob or not text:
            raise SystemExit(f"--note {pair!r}: expected GLOB=TEXT")
        notes.append((glob, text))
    return notes


def notes_for(names: list[str], notes: list[tuple[str, str]]) -> list[str]:
    """The texts of the notes whose GLOB (or one of its comma-separated GLOBs) matches."""
    return [text for globs, text in notes
            if any(fnmatch.fnmatch(n, g) for g in globs.split(",") for n in names)]


def _json(path: Path) -> dict[str, Any]:
    try:
        data = json.loads(path.read_text())
    except ValueError:
        return {}
    return data if isinstance(data, dict) else {}


def _header(path: Path, count: int = 5) -> list[str]:
    with path.open(errors="replace") as f:
        return [line.rstrip("\n") for _, line in zip(range(count), f, strict=False)]


def command_of(files: dict[str, Path]) -> str | None:
    """The command line recorded in a result's files (JSON first, then text headers)."""
    if "json" in files:
        data = _json(files["json"])
        cmd = data.get("command") or data.get("meta", {}).get("command")
        if cmd:
            return shlex.join(cmd) if isinstance(cmd, list) else str(cmd)
    heads = [_header(files[s]) for s in ("txt", "md") if s in files]
    for line in (line for head in heads for line in head):
        m = re.match(r"^(?:# command: |command: `)(.*?)`?$", line) or re.match(
            r"^<!-- written by: (.*) -->$", line)
        if m:
            return m.group(1).strip()
    for head in heads:  # else a first line that is a command, not a title ("compcoll x: ...")
        m = COMMAND.match(head[0]) if head else None
        if m and not re.match(r"^\S+( [\w-]+){0,2}:", m.group(1)):
            return re.sub(r"\s+\(.*$", "", m.group(1)).strip()
    return None


def date_of(files: dict[str, Path]) -> str | None:
    """The date recorded in a result's files, as YYYY-MM-DD HH:MM when there is a time."""
    if "json" in files:
        data = _json(files["json"])
        found = data.get("date") or data.get("meta", {}).get("date")
        if found and (m := ISO_DATE.search(str(found))):
            return " ".join(g for g in m.groups() if g)
    for suffix in ("txt", "md"):
        for line in _header(files[suffix]) if suffix in files else []:
            if not line.startswith("#"):
                continue
            if m := ISO_DATE.search(line):
                return " ".join(g for g in m.groups() if g)
            if m := CTIME.search(line):
                month, day, clock, year = m.groups()
                return f"{year}-{MONTHS.index(month) + 1:02d}-{int(day):02d} {clock}"
    return None


def first_table(files: dict[str, Path], lines: int) -> list[str]:
    """The first lines of the first table: a Markdown table, or a text table's column
    header (its last comment line) and first rows in a code block."""
    if "md" in files:
        text = files["md"].read_text().splitlines()
        start = next((i for i, t in enumerate(text) if t.startswith("|")), None)
        if start is not None:
            rows = []
            for t in text[start:start + lines + 2]:
                if not t.startswith("|"):
                    break
                rows.append(t)
            return rows
    if "txt" in files:
        text = files["txt"].read_text(errors="replace").splitlines()
        start = next((i for i, t in enumerate(text) if t.strip() and not t.startswith("#")),
                     None)
        if start is not None:
            above = text[start - 1] if start else ""
            # the comment line right above is the column header if it is laid out in columns
            columns = above.startswith("#") and len(re.findall(r"\S {2,}", above)) >= 3
            head = [above] if columns else []
            body = []
            for t in text[start:start + lines]:
                if not t.strip():
                    break
                body.append(t)
            # and how the file ends (a verdict, a total), where the lines above do not reach
            last = [t for t in text if t.strip()][-2:]
            tail = [] if last[-1] in body else ["...", *(t for t in last if t not in body)]
            return ["```text", *head, *body, *tail, "```"]
    if "json" in files and isinstance(summary := _json(files["json"]).get("summary"), dict):
        return [f"- {k}: {json.dumps(v)}" for k, v in summary.items()]
    return []


def results(folder: Path) -> dict[str, dict[str, Path]]:
    """Result name -> {suffix: path} for the files of ``folder`` (README.md aside)."""
    out: dict[str, dict[str, Path]] = {}
    for p in sorted(folder.iterdir()):
        if p.is_file() and p.name != "README.md":
            out.setdefault(p.name.split(".")[0], {})[p.name.split(".", 1)[-1]] = p
    return out


def _link(p: Path) -> str:
    return f"[{p.name}]({p.name})"


def topic(folder: Path, title: str, about: str, notes: list[tuple[str, str]], lines: int,
          argv: list[str]) -> str:
    found = results(folder)
    names = {p.name for files in found.values() for p in files.values()}
    commands = {stem: command_of(files) for stem, files in found.items()}
    reads: dict[str, list[str]] = {}  # result -> the other results its command names
    for stem, cmd in commands.items():
        named = {Path(a).name for a in shlex.split(cmd or "")} & names
        reads[stem] = sorted({n.split(".")[0] for n in named} - {stem})
    inputs = {s for named in reads.values() for s in named}
    listed: dict[tuple[str, ...], str] = {}  # a set of inputs -> the result listing it
    out = [f"# {title}", "", f"command: `{invocation(argv)}`", ""]
    if about:
        out += [about, ""]
    out += ["Each result: its files, the command line recorded in them (as it was run: output "
            "paths are those of that day), the date recorded in them and the first lines of its "
            "first table.", ""]
    for stem, files in found.items():
        if stem in inputs and not reads[stem]:
            continue
        out += [f"## {stem}", "", "files: " + ", ".join(_link(p) for p in files.values()), ""]
        cmd = commands[stem]
        out += [f"command: `{cmd}`" if cmd else "command: not recorded in the file", ""]
        out += [f"date: {date_of(files) or 'not recorded in the file'}", ""]
        for text in notes_for([p.name for p in files.values()], notes):
            where = origin(next(iter(files.values())))
            out += [f"**Note:** {text}" + (f" From commit {where}." if where else ""), ""]
        if reads[stem]:
            first = listed.setdefault(tuple(reads[stem]), stem)
            which = (", ".join(_link(p) for s in reads[stem] for p in found[s].values())
                     if first == stem else f"the same as {first}")
            plural = "s" if len(reads[stem]) > 1 else ""
            out += [f"reads {len(reads[stem])} result{plural} kept here: {which}", ""]
        table = first_table(files, lines)
        if table:
            out += [*table, ""]
    return "\n".join(out).rstrip() + "\n"


def top(folder: Path, title: str, about: str, argv: list[str]) -> str:
    out = [f"# {title}", "", f"command: `{invocation(argv)}`", ""]
    if about:
        out += [about, ""]
    for sub in sorted(p for p in folder.iterdir() if (p / "README.md").is_file()):
        heading = next((t[2:].strip() for t in (sub / "README.md").read_text().splitlines()
                        if t.startswith("# ")), sub.name)
        count = sum(1 for p in sub.iterdir() if p.is_file() and p.name != "README.md")
        out.append(f"- [{sub.name}/]({sub.name}/README.md): {heading} ({count} file"
                   f"{'s' if count != 1 else ''})")
    return "\n".join(out) + "\n"


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("folder", type=Path)
    ap.add_argument("--title", default=None, help="the README's heading")
    ap.add_argument("--about", default="", help="a paragraph under the heading")
    ap.add_argument("--note", action="append", default=[], metavar="GLOB[,GLOB...]=TEXT",
                    help="a note for the results whose files match a GLOB (repeatable)")
    ap.add_argument("--lines", type=int, default=8, help="table rows shown per result (8)")
    args = ap.parse_args(argv)
    folder = args.folder
    if not folder.is_dir():
        raise SystemExit(f"{folder}: not a folder")
    if any(p.is_dir() for p in folder.iterdir()):
        text = top(folder, args.title or "Benchmark results", args.about, argv)
    else:
        text = topic(folder, args.title or folder.name, args.about, parse_notes(args.note),
                     args.lines, argv)
    (folder / "README.md").write_text(text)
    print(f"wrote {folder / 'README.md'}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
