"""Time one bench command (``compcoll bench compressed`` or ``bench tta``) on two revisions of
the code, interleaved, in one invocation: before (a git revision, checked out in a temporary
worktree) and after (this tree), ``--rounds`` times each, alternating. Writes a table of each
row's median time before and after and their ratio, with this command line inside; for
``bench tta`` the time is the median step, and a column says whether the run's losses were
the same bits before and after (the same training, step for step).

    python scripts/ab.py --before HEAD~3 --rounds 3 --txt bench/results/ab/x.txt -- \\
        bench compressed -np 4 --link 1gbit -s 16M

Both runs use this tree's compiled extension (``_compcoll``): only revisions whose C++ core is
the same compare (checked: ``csrc/`` must not differ between them).
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
#: Put on PYTHONPATH before the worktree: drops the editable install's finder, so that the
#: packages import from the worktree (and so do the ranks the bench launches).
SHIM = "import sys\nsys.meta_path[:] = [f for f in sys.meta_path\n" \
       "                   if 'editable' not in type(f).__module__]\n"


def _git(*args: str) -> str:
    return subprocess.run(["git", "-C", str(REPO), *args], check=True, capture_output=True,
                          text=True).stdout.strip()


def _run(argv: list[str], env: dict[str, str], cwd: Path, out: Path) -> list[dict]:
    """One run of the bench in ``cwd`` (``python -m`` imports from there first)."""
    cmd = [sys.executable, "-m", "compcoll_bench", *argv, "--json", str(out)]
    subprocess.run(cmd, check=True, env=env, cwd=cwd, stdout=subprocess.DEVNULL)
    return json.loads(out.read_text())["rows"]


def _row(row: dict) -> tuple[str, float]:
    """A result row's name and seconds: ``bench compressed``'s time, ``bench tta``'s median
    step."""
    if "median_ms" in row:
        return f"{row['model']} {row['run']}", row["median_ms"] / 1e3
    return row["name"], row["time_s"]


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--before", required=True, help="git revision of the 'before' code")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--txt", required=True, help="where to write the table")
    p.add_argument("bench", nargs=argparse.REMAINDER, help="-- and the compcoll arguments")
    args = p.parse_args()
    argv = args.bench[1:] if args.bench[:1] == ["--"] else args.bench
    if _git("diff", "--stat", args.before, "--", "csrc"):
        raise SystemExit(f"csrc/ differs between {args.before} and this tree: the compiled "
                         "extension serves only one of them")
    rev = _git("rev-parse", "--short", args.before)
    head = _git("rev-parse", "--short", "HEAD")
    # the code only: a result file written by an earlier run is no change to what runs
    dirty = " (+ uncommitted changes)" if _git("status", "--porcelain", "--", "collectives",
                                               "compressors", "compcoll",
                                               "bench/compcoll_bench") else ""
    times: dict[str, dict[str, list[float]]] = {}
    losses: dict[str, dict[str, list]] = {}  # (bench tta) each run's losses, first round
    with tempfile.TemporaryDirectory() as tmp:
        tree, shim = Path(tmp) / "before", Path(tmp) / "shim"
        _git("worktree", "add", "--detach", str(tree), rev)
        try:
            shim.mkdir()
            (shim / "sitecustomize.py").write_text(SHIM)
            paths = os.pathsep.join(map(str, (shim, tree, tree / "bench")))
            envs = {"before": ({**os.environ, "PYTHONPATH": paths}, tree),
                    "after": (dict(os.environ), REPO)}
            for r in range(args.rounds):
                for side in ("before", "after") if r % 2 == 0 else ("after", "before"):
                    for row in _run(argv, *envs[side], Path(tmp) / f"{side}{r}.json"):
                        name, seconds = _row(row)
                        times.setdefault(name, {"before": [], "after": []})[side] \
                            .append(seconds)
                        if "losses" in row and r < 2:
                            losses.setdefault(name, {})[side] = row["losses"]
                    print(f"round {r + 1}/{args.rounds}: {side} done", flush=True)
        finally:
            _git("worktree", "remove", "--force", str(tree))
    lines = [f"# command: python scripts/ab.py {shlex.join(sys.argv[1:])}",
             f"# date: {time.strftime('%Y-%m-%d %H:%M')}; before: {rev}; after: {head}{dirty}; "
             f"{args.rounds} runs each, interleaved; medians",
             f"{'run':40s} {'before(ms)':>11s} {'after(ms)':>10s} {'after/before':>13s}"
             + (f" {'same losses':>12s}" if losses else "")]
    for name, t in times.items():
        b, a = statistics.median(t["before"]), statistics.median(t["after"])
        same = losses.get(name, {})
        lines.append(f"{name:40s} {b * 1e3:11.1f} {a * 1e3:10.1f} {a / b:13.3f}"
                     + (f" {str(same.get('before') == same.get('after')).lower():>12s}"
                        if losses else ""))
    Path(args.txt).parent.mkdir(parents=True, exist_ok=True)
    Path(args.txt).write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
