"""Long payload fuzz: many mutations of every compressor's payloads, each chunk in a subprocess.

Every mutated payload must decode to its original output or raise PayloadError; a mutation
whose checksum was recomputed may also decode to a different, well-formed output. Another
exception is a bug, and so is a crash: each chunk runs in its own process, so a crash is
counted (as one, for the chunk it ended) instead of ending the run. The mutations are those of
tests/compressors/fuzzing.py (bit flips, byte sets, truncations, extensions, header field
edits, splices), reproducible from --seed.

Run: ``python scripts/fuzz_payloads.py --mutations 100000`` (per compressor); writes
bench/results/reliability/fuzz_payloads.txt with its command line inside, and exits 1 if any
mutation gave another exception, a crash, or new output from bytes whose checksum was not
recomputed.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
OUTCOMES = ("same", "payload_error", "different", "other")


def worker(name: str, count: int, seed: int, chunk: int) -> None:
    """One chunk in this process: print its counts and bad outcomes as one JSON line."""
    sys.path.insert(0, str(ROOT))
    from tests.compressors.fuzzing import tally

    counts, bad = tally(name, count, seed, chunk)
    print(json.dumps({"counts": {f"{int(s)}:{o}": n for (s, o), n in counts.items()},
                      "bad": bad[:20]}))


def run_chunk(name: str, count: int, seed: int, chunk: int) -> tuple[Counter, list[str], int]:
    """(counts, bad outcomes, crashes) of one chunk run in a subprocess."""
    cmd = [sys.executable, __file__, "--worker", name, "--mutations", str(count), "--seed",
           str(seed), "--chunk", str(chunk)]
    res = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT)
    last = res.stdout.strip().splitlines()[-1:] if res.stdout.strip() else []
    if res.returncode != 0 or not last:
        why = f"{name} chunk {chunk}: exit status {res.returncode}: {res.stderr.strip()[-300:]}"
        return Counter(), [why], 1
    data = json.loads(last[0])
    counts = Counter({(k.split(":")[0] == "1", k.split(":")[1]): v
                      for k, v in data["counts"].items()})
    return counts, data["bad"], 0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--mutations", type=int, default=100_000, help="per compressor")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--chunk-size", type=int, default=10_000, help="mutations per subprocess")
    ap.add_argument("--compressors", default="", help="comma-separated (default: all)")
    ap.add_argument("--out", default=str(ROOT / "bench" / "results" / "reliability"
                                         / "fuzz_payloads.txt"))
    ap.add_argument("--worker", help=argparse.SUPPRESS)
    ap.add_argument("--chunk", type=int, default=0, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.worker:
        worker(args.worker, args.mutations, args.seed, args.chunk)
        return 0
    sys.path.insert(0, str(ROOT))
    import compressors

    names = [n for n in args.compressors.split(",") if n] or compressors.available()
    rows, problems, t0 = [], [], time.perf_counter()
    for name in names:
        total, crashes, left, chunk = Counter(), 0, args.mutations, 0
        while left > 0:
            count = min(args.chunk_size, left)
            counts, bad, crashed = run_chunk(name, count, args.seed, chunk)
            total.update(counts)
            crashes += crashed
            problems += bad
            left, chunk = left - count, chunk + 1
        row = {"compressor": name, "mutations": args.mutations, "crashes": crashes}
        for sealed in (False, True):
            for outcome in OUTCOMES:
                row[f"{'resealed' if sealed else 'as-is'} {outcome}"] = total[(sealed, outcome)]
        rows.append(row)
        print(f"{name}: {dict(row)}", flush=True)
    write(args.out, rows, problems, time.perf_counter() - t0)
    return 1 if problems else 0


def write(path: str, rows: list[dict], problems: list[str], seconds: float) -> None:
    cols = ["mutations", "as-is same", "as-is payload_error", "as-is different",
            "resealed same", "resealed payload_error", "resealed different", "other", "crashes"]
    lines = [f"# {' '.join([Path(sys.executable).name, *sys.argv])}",
             f"# {time.strftime('%Y-%m-%d %H:%M:%S %Z')}, {seconds:.0f} s",
             "# as-is: mutated bytes, checksum untouched (must decode to the original output or",
             "#   raise PayloadError: 'as-is different' must be 0);",
             "# resealed: checksum recomputed after the mutation, so the field checks behind it",
             "#   are reached ('different' is allowed there: a well-formed edit).",
             "# other: any exception but PayloadError (must be 0); crashes: dead subprocesses.",
             "", f"{'compressor':<11}" + "".join(f"{c:>{len(c) + 2}}" for c in cols)]
    for r in rows:
        other = r["as-is other"] + r["resealed other"]
        vals = [r[c] if c in r else other for c in cols]
        lines.append(f"{r['compressor']:<11}" +
                     "".join(f"{v:>{len(c) + 2}}" for c, v in zip(cols, vals, strict=True)))
    lines += ["", f"problems: {len(problems)}", *problems[:50]]
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    Path(path).write_text("\n".join(lines) + "\n")


if __name__ == "__main__":
    sys.exit(main())
