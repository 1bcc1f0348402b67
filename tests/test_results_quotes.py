"""The README and the results page quote only what the committed result files hold.

A claim is a paragraph (with the tables right after it). Its result files are those it links
under ``bench/results/`` (a .txt, .json or .md; a .txt or .json brings its same-named twin),
or, where it links none, those of its section's closing ``Files:`` paragraph (the results
page's convention). Every measured number of a claim must be in one of them: a number with a
decimal point, a ratio (``1.50x``) or one with a unit (%, s, ms, MB, MiB). A file may hold
it with more decimals (7.57 for a quoted 7.6) and a size in bytes (67108864 for 64 MB).
Counts of hosts, ranks, bits or steps are setup, and model sizes (``3.7M``) describe the
model; neither is checked. Code spans and fenced blocks are left out.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
DOCS = [ROOT / "README.md", ROOT / "docs" / "results.md"]
LINK = re.compile(r"\]\((?:path:)?([^)\s]*?bench/results/[^)\s#]+)\)")
QUOTE = re.compile(r"(?<![\w.])(\d+(?:\.\d+)?)(x|%| ?ms\b| ?s\b| ?MB\b| ?MiB\b|M\b)?(?![\w.]*\d)")
HELD = re.compile(r"(?<![\d.])\d+(?:\.\d+)?")
TWINS = (".txt", ".json")


def claims(text: str) -> list[tuple[str, list[str]]]:
    """Each paragraph (tables joined to the paragraph before them) of ``text``, with the
    links of its section's ``Files:`` paragraph."""
    text = re.sub(r"```.*?```", "", text, flags=re.S)
    out: list[tuple[str, list[str]]] = []
    for section in re.split(r"^#+ .*$", text, flags=re.M):
        paragraphs: list[str] = []
        for p in (p for p in re.split(r"\n\s*\n", section) if p.strip()):
            if p.lstrip().startswith("|") and paragraphs:
                paragraphs[-1] += "\n" + p
            else:
                paragraphs.append(p)
        listed = [link for p in paragraphs if p.startswith("Files:") for link in LINK.findall(p)]
        out += [(p, listed) for p in paragraphs]
    return out


def result_files(doc: Path, links: list[str]) -> list[Path]:
    """The result files ``links`` (relative to ``doc``) name, with their .txt/.json twins."""
    files: list[Path] = []
    for link in links:
        path = (doc.parent / link).resolve()
        if path.suffix in (".txt", ".json", ".md"):
            files.append(path)
            files += [path.with_suffix(s) for s in TWINS
                      if path.suffix in TWINS and path.with_suffix(s).exists()]
    return files


def quoted(claim: str) -> list[str]:
    """The measured numbers of ``claim``, as written (with their unit)."""
    text = re.sub(r"\]\([^)]*\)", "]", re.sub(r"`[^`]*`", "", claim))
    out = []
    for m in QUOTE.finditer(text):
        number, unit = m.group(1), (m.group(2) or "").strip()
        if unit != "M" and ("." in number or unit):
            out.append(number + unit)
    return out


def held(quote: str, text: str) -> bool:
    """Whether ``text`` holds the number of ``quote``, to its decimals or more."""
    number = re.match(r"\d+(?:\.\d+)?", quote).group(0)
    decimals = len(number.partition(".")[2])
    if quote.endswith(("MB", "MiB")) and decimals == 0:
        sizes = {str(int(number) << 20), str(int(number) * 10**6)}
        if any(re.search(rf"(?<!\d){s}(?!\d)", text) for s in sizes):
            return True
    for m in HELD.finditer(text):
        found = m.group(0)
        if len(found.partition(".")[2]) >= decimals and f"{float(found):.{decimals}f}" == number:
            return True
    return False


def unheld(doc: Path) -> list[str]:
    """What ``doc`` quotes next to a result file that the file does not hold."""
    problems = []
    for claim, listed in claims(doc.read_text()):
        files = result_files(doc, LINK.findall(claim) or listed)
        gone = [f.name for f in files if not f.exists()]
        text = "\n".join(f.read_text() for f in files if f.exists())
        missing = [q for q in quoted(claim) if not held(q, text)] if files else []
        if gone or missing:
            problems.append(f"{claim[:100]!r}...: files {sorted({f.name for f in files})}, "
                            f"gone {gone}, numbers they do not hold {missing}")
    return problems


@pytest.mark.parametrize("doc", DOCS, ids=[d.name for d in DOCS])
def test_every_number_quoted_next_to_a_result_file_is_in_it(doc: Path) -> None:
    problems = unheld(doc)
    assert not problems, "\n".join(problems)


def test_the_check_finds_a_number_its_file_does_not_hold(tmp_path: Path) -> None:
    result = tmp_path / "bench" / "results" / "r.txt"
    result.parent.mkdir(parents=True)
    result.write_text("run  time(s)  vs fp16\nauto   7.57   1.50x\nsize 67108864\n")
    doc = tmp_path / "README.md"
    doc.write_text("On 4 hosts auto took 7.6 s (1.50x) on 64 MB "
                   "([r](bench/results/r.txt)).\n\nUnlinked: 9.99 s.\n")
    assert unheld(doc) == []
    doc.write_text("auto took 7.6 s, 2.46x the hook ([r](bench/results/r.txt)).\n")
    assert "numbers they do not hold ['2.46x']" in unheld(doc)[0]
    doc.write_text("## Section\n\nauto took 3.1 s.\n\nFiles: [r](bench/results/gone.txt).\n")
    assert "gone ['gone.txt']" in unheld(doc)[0]
