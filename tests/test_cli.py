"""The ``compcoll`` command line: bench allreduce (checked sweep, corruption caught) and doctor."""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from collectives.algorithms import REGISTRY, modeled
from compcoll_bench.commands import noise
from compcoll_bench.commands.benchlib import TABLE_WIDTH, WIDTH
from tests.mpirun import LAUNCHES, Script, passed

COLUMNS = {"size", "count", "type", "algo", "time_us", "p50_us", "p90_us", "p99_us",
           "algbw_GBps", "busbw_GBps", "ratio_vs_mpi", "model_us", "wrong", "ranks_agree",
           "iters", "p25_us", "p75_us", "spread", "noisy"}
ALGOS = ["MPI_Allreduce", *(a.name for a in REGISTRY.values() if a.ours), "auto", "mpi"]
SMALL = ["-n", "2", "-w", "1"]


def refused(*argv: str, capsys: pytest.CaptureFixture[str]) -> str:
    """Run ``compcoll argv`` in this process; it must refuse with exit code 2 and one line
    ``compcoll: error: ...`` (returned), no traceback."""
    from compcoll_bench.cli import main

    capsys.readouterr()
    try:
        code = main(list(argv))
    except SystemExit as exc:  # argparse's own errors exit from the parser
        code = exc.code
    err = capsys.readouterr().err
    lines = err.strip().splitlines()
    assert code == 2, f"exit code {code}, stderr: {err}"
    assert len(lines) == 1 and lines[0].startswith("compcoll: error: "), err
    return lines[0]


def compcoll(*args: str, env: dict[str, str] | None = None, timeout: float = 40,
             cwd: Path | None = None) -> subprocess.CompletedProcess:
    """Run ``python -m compcoll_bench args`` in its own process group, killed whole on timeout."""
    environ = {k: v for k, v in os.environ.items()
               if not k.startswith(("PMI_", "PMIX_", "HYDRA_", "COMPCOLL_BENCH_"))}
    environ.update(env or {})
    proc = subprocess.Popen([sys.executable, "-m", "compcoll_bench", *args], env=environ,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            start_new_session=True, cwd=cwd)
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)  # mpiexec and its ranks are in the group too
        proc.communicate()
        pytest.fail(f"compcoll {' '.join(args)} ran past {timeout} s")
    return subprocess.CompletedProcess(proc.args, proc.returncode, out, err)


@pytest.mark.mpi
def test_bench_allreduce_sweep_writes_checked_rows(tmp_path: Path) -> None:
    out = tmp_path / "out.json"
    res = compcoll("bench", "allreduce", "-np", "2", "-b", "1K", "-e", "16K", "-f", "4", *SMALL,
                   "--json", str(out), "--csv", str(tmp_path / "out.csv"),
                   "--txt", str(tmp_path / "out.txt"))
    assert res.returncode == 0, res.stdout + res.stderr
    doc = json.loads(out.read_text())
    assert doc["ranks"] == 2
    assert doc["command"][:5] == ["compcoll", "bench", "allreduce", "-np", "2"]
    assert {"command", "mpi_library", "hostname", "date", "cost_params"} <= doc.keys()
    assert doc["iters"] == 2 and "p75 - p25" in doc["spread"] and "spread" in doc["noisy"]
    rows = doc["rows"]
    assert [(r["size"], r["inplace"], r["algo"]) for r in rows] == [  # both placements
        (size, inplace, algo) for size in (1024, 4096, 16384) for inplace in (False, True)
        for algo in ALGOS]
    for row in rows:
        assert COLUMNS <= row.keys()
        assert row["wrong"] == 0 and row["ranks_agree"]
        assert row["busbw_GBps"] == pytest.approx(row["algbw_GBps"])  # 2(p-1)/p = 1 at p = 2
        assert row["iters"] == 2 and row["p25_us"] <= row["time_us"] <= row["p75_us"]
    for size, inplace in {(r["size"], r["inplace"]) for r in rows}:  # the rule, row by row
        group = [r for r in rows if (r["size"], r["inplace"]) == (size, inplace)]
        assert [r["noisy"] for r in group] == noise.flags([r["time_us"] for r in group],
                                                          [r["spread"] for r in group])
    priced = {a.name for a in modeled()}  # the engines' own and two_level have no formula
    assert all(r["model_us"] is not None for r in rows if r["algo"] in priced)
    assert "recursive_doubling" in res.stdout
    assert (tmp_path / "out.csv").read_text().startswith("size,count,type")
    lines = res.stdout.splitlines()  # nccl-tests' shape: both placements on one line
    head = next(i for i, line in enumerate(lines) if "out-of-place" in line)
    assert "in-place" in lines[head] and "redop" in lines[head + 1]
    assert lines[head + 1].count("busbw") == 2 and lines[head + 1].count("#wrong") == 2
    assert lines[head + 1].count("time(us) iqr%") == 2  # each placement's median and spread
    legend = " ".join(line.lstrip("# ") for line in lines[:head])
    assert "the median of the 2 timed calls of each row; iqr%: their interquartile range" in legend
    flagged = sum(1 for r in rows if r["noisy"] and not r["inplace"])  # the printed ratios
    assert f"# ~ within the noise: {flagged} of {3 * (len(ALGOS) - 1)} 'vs MPI' ratios" in lines
    assert sum(line.split()[-2].endswith("~") for line in lines[head + 2:]
               if not line.startswith("#")) == flagged
    table = [line for line in lines[head + 2:] if not line.startswith("#")]
    assert len(table) == 3 * len(ALGOS) and all(" sum " in line for line in table)
    assert any(line.startswith("# cost model fitted on this communicator: alpha") for line in lines)
    assert "# Out of bounds values : 0 OK" in lines
    text = (tmp_path / "out.txt").read_text().splitlines()  # the table, with its command line
    assert text[1].startswith("# command: compcoll bench allreduce -np 2 -b 1K")
    assert text[0] == lines[0] and text[2:] == [line for line in lines[1:] if line]
    avg = [line for line in lines if line.startswith("# Avg bus bandwidth")]
    assert [line.split()[-1] for line in avg] == [a.split(":")[0] for a in ALGOS]


@pytest.mark.mpi
def test_bench_allreduce_check_catches_a_corrupted_result(tmp_path: Path) -> None:
    out = tmp_path / "out.json"
    res = compcoll("bench", "allreduce", "-np", "3", "-b", "4K", "-e", "4K", *SMALL,
                   "--algo", "ring,tree", "--dtype", "int32", "--json", str(out),
                   env={"COMPCOLL_BENCH_CORRUPT": "ring"})
    assert res.returncode != 0
    rows = {r["algo"]: r for r in json.loads(out.read_text())["rows"]}
    assert rows["ring"]["wrong"] >= 1 and not rows["ring"]["ranks_agree"]
    assert rows["tree"]["wrong"] == 0 and rows["MPI_Allreduce"]["wrong"] == 0
    assert "FAILED ring" in res.stderr


@pytest.mark.mpi
@pytest.mark.parametrize("dtype,op,place", [("bfloat16", "sum", "--inplace"),
                                            ("float16", "avg", "--outofplace"),
                                            ("uint8", "max", "--inplace")])
def test_bench_allreduce_dtypes_ops_and_placement(dtype: str, op: str, place: str) -> None:
    res = compcoll("bench", "allreduce", "-np", "3", "-b", "2K", "-e", "2K", *SMALL,
                   "--algo", "ring,rabenseifner,mpi", "--dtype", dtype, "--op", op, place)
    assert res.returncode == 0, res.stdout + res.stderr


def test_doctor_reports_mpich() -> None:
    res = compcoll("doctor", timeout=30)
    assert res.returncode == 0, res.stdout + res.stderr
    assert "MPICH" in res.stdout
    assert "C++ extension" in res.stdout


def test_doctor_reports_a_missing_extension_with_the_fix() -> None:
    code = ("import sys; sys.modules['_compcoll'] = None\n"  # as if the build had failed
            "from compcoll_bench.cli import main; sys.exit(main(['doctor']))")
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=60)
    assert res.returncode != 0
    assert "MISSING  C++ extension" in res.stdout and "pip install" in res.stdout


def test_doctor_marks_absent_optional_parts_as_optional_and_says_what_they_give() -> None:
    """On a CPU machine without torch and CuPy the report succeeds, and each absent part is
    marked optional with what it would add and how to get it (not "missing")."""
    code = ("import sys; sys.modules['torch'] = sys.modules['cupy'] = None\n"
            "from compcoll_bench.cli import main; sys.exit(main(['doctor']))")
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=60)
    assert res.returncode == 0, res.stdout + res.stderr
    lines = {line[9:24].strip(): line for line in res.stdout.splitlines()}
    for part, gives in (("torch", "would add the DDP hook"), ("cupy", "would compress CUDA"),
                        ("CUDA-aware MPI", "would hand GPU buffers to MPI directly")):
        assert lines[part].startswith("optional "), lines[part]
        assert gives in lines[part] and "to get it:" in lines[part], lines[part]
    assert "download.pytorch.org/whl/cpu" in lines["torch"]
    assert not any(line.startswith(("missing", "MISSING")) for line in lines.values())


def test_size_parsing_and_sweep() -> None:
    from compcoll_bench.commands.benchlib import bus_bandwidth, parse_size, size_sweep

    assert [parse_size(s) for s in ("1024", "1K", "64M", "1G", "8kb")] == [
        1024, 1 << 10, 64 << 20, 1 << 30, 8 << 10]
    assert size_sweep(1024, 16384, 4) == [1024, 4096, 16384]
    assert size_sweep(1024, 5000, 2) == [1024, 2048, 4096]
    assert bus_bandwidth(3.0, 4) == pytest.approx(4.5)
    with pytest.raises(ValueError, match="factor"):
        size_sweep(1, 8, 1)


LAUNCHES.add(*[Script("bench_table.py", n, timeout=200) for n in (1, 2, 3)])


@pytest.mark.mpi
@pytest.mark.parametrize("np_", [1, 2, 3])
def test_every_benchmarked_collective_runs_and_its_check_holds(np_: int) -> None:
    passed(LAUNCHES.result("bench_table.py", np_), "bench table")


def test_unknown_algorithm_is_refused() -> None:
    res = compcoll("bench", "allreduce", "--algo", "ring,bogus", "-b", "1K", "-e", "1K",
                   timeout=30)
    assert res.returncode != 0
    assert "unknown algorithm 'bogus'" in res.stderr
    assert "Traceback" not in res.stderr


def test_model_json_picks_latency_algorithms_small_and_bandwidth_ones_large() -> None:
    common = ["model", "--nodes", "16,256", "--link", "100gbit", "--latency", "2us",
              "--gamma", "1e-10", "--compress-gbps", "10", "--json", "-"]
    small = json.loads(compcoll(*common, "--size", "1K", timeout=30).stdout)
    large = json.loads(compcoll(*common, "--size", "256M", timeout=30).stdout)
    assert small["beta_s_per_byte"] == pytest.approx(8e-11)
    assert [b["nodes"] for b in small["nodes"]] == [16, 256]
    for block in small["nodes"]:
        assert block["auto"] == "recursive_doubling"  # log2(p) latencies, data size irrelevant
        assert {"ring", "tree", "recursive_doubling", "rabenseifner",
                "two_level"} == block["algorithms"].keys()  # one host: two_level is the ring
        sizes = [x["size"] for x in block["crossovers"]]
        assert sizes == sorted(sizes) and block["crossovers"][0]["from"] == "recursive_doubling"
    for block in large["nodes"]:
        assert block["auto"] in ("ring", "rabenseifner")  # 2(p-1)/p n beta: bandwidth optimal
        priced = {r["compressor"]: r for r in block["compressors"]}
        assert priced["none"]["time_s"] == pytest.approx(
            block["algorithms"][block["auto"]]["time_s"])
        # sparse, not summable: a sparse allreduce or an allgather of payloads
        assert priced["topk:ratio=0.01"]["scheme"] in ("allgather", "sparse")
        assert priced["fp16"]["payload"] == 128 << 20


def test_model_text_and_bad_arguments(capsys) -> None:
    res = compcoll("model", "--nodes", "8", "--params", "25.6M", "--dtype", "fp16",
                   "--compressor", "sign", "--compress-gbps", "5", timeout=30)
    assert res.returncode == 0, res.stderr
    assert "## 8 nodes: auto picks" in res.stdout and "51200000 B" in res.stdout
    assert "sign" in res.stdout and "crossovers:" in res.stdout
    assert "--nodes needs counts >= 2" in refused("model", "--nodes", "1", "--gamma", "0",
                                                  capsys=capsys)
    assert "not a link rate" in refused("model", "--link", "fast", capsys=capsys)


def test_bench_compressors_runs_at_a_tiny_size(tmp_path: Path) -> None:
    out = tmp_path / "c.json"
    res = compcoll("bench", "compressors", "--out", str(out), "--sizes", "4096", "--threads",
                   "1", "--repeats", "4", "--specs", "none", "sign", timeout=60)
    assert res.returncode == 0, res.stdout + res.stderr
    doc = json.loads(out.read_text())
    assert {r["compressor"] for r in doc["compressors"]} == {"none", "sign"}
    side, = doc["side_by_side"]
    assert doc["repeats"] == 4 and side["exact_speedup_noisy"] == noise.within_noise(
        side["exact_speedup"], side["torch_topk_spread"], side["exact_topk_spread"])
    ratio, spread = side["sign vs_copy"], side["sign vs_copy_spread"]
    assert side["sign vs_copy_noisy"] == (spread > abs(ratio - 1))
    assert "Each time is the median of 4 timed calls" in out.with_suffix(".md").read_text()


def test_model_compare_sets_predictions_beside_a_bench_run(tmp_path: Path) -> None:
    bench = tmp_path / "bench.json"
    bench.write_text(json.dumps({"ranks": 4, "command": ["compcoll", "bench", "allreduce"],
                                 "rows": [{"size": 1 << 20, "algo": "ring", "time_us": 1000.0},
                                          {"size": 1 << 20, "algo": "auto", "time_us": 900.0,
                                           "auto_choice": "rabenseifner"},
                                          {"size": 1 << 20, "algo": "mpi", "time_us": 800.0}]}))
    res = compcoll("model", "--nodes", "4", "--link", "10gbit", "--latency", "10us", "--gamma",
                   "0", "--compressor", "none", "--compare", str(bench), "--json", "-",
                   timeout=30)
    assert res.returncode == 0, res.stderr
    rows = json.loads(res.stdout)["compare"]
    assert [(r["algo"], r["modeled"]) for r in rows] == [("ring", "ring"),
                                                         ("auto", "rabenseifner")]
    ring = 6 * 10e-6 + 1.5 * (1 << 20) * 8e-10  # 2(p-1) alpha + 2(p-1)/p n beta
    assert rows[0]["model_us"] == pytest.approx(ring * 1e6)
    assert rows[0]["error_pct"] == pytest.approx((ring * 1e6 - 1000) / 10)
    res = compcoll("model", "--nodes", "8", "--compressor", "none", "--compare", str(bench),
                   timeout=30)
    assert res.returncode != 0 and "--nodes 4" in res.stderr


def test_bench_train_refuses_bad_arguments_before_launching(capsys) -> None:
    assert "--timeout must be > 0 seconds, got 0.0" in refused(
        "bench", "train", "-np", "2", "--timeout", "0", capsys=capsys)
    assert "need --steps >= 10" in refused("bench", "train", "-np", "2", "--steps", "3",
                                           capsys=capsys)


#: (arguments, words the one-line error must hold): every argument error of every subcommand
#: is refused before any probe, timing or launch (small sizes keep a regression short).
REFUSED = [
    (["model", "--fitted"], "add -np N with N >= 2"),
    (["model", "--fitted", "-np", "1"], "add -np N with N >= 2"),
    (["model", "-np", "3"], "-np only applies with --fitted"),
    (["model", "--compressor", "bogus"], "--compressor bogus: unknown compressor 'bogus'"),
    (["model", "--compressor", "uniform:bits=99"], "bits must be one of"),
    (["model", "--gamma", "-1"], "argument --gamma: must be >= 0, got -1"),
    (["model", "--compress-gbps", "0"], "argument --compress-gbps: must be > 0"),
    (["model", "--gamma", "0", "--json", "{missing}/x.json"], "does not exist"),
    (["model", "--size", "0"], "--size must be at least 1"),
    (["model", "--sweep", "1K,0"], "--sweep sizes must be at least 1 byte"),
    (["model", "--compare", "{missing}/bench.json"], "not a bench allreduce JSON"),
    (["bench", "allreduce", "-b", "1K", "-e", "1K", "--json", "{missing}/x.json"],
     "does not exist"),
    (["bench", "allreduce", "-b", "1K", "-e", "1K", "--csv", "{missing}/x.csv"], "--csv"),
    (["bench", "allreduce", "-b", "1K", "-e", "1K", "--algo", ""], "names no algorithm"),
    (["bench", "allreduce", "-b", "1K", "-e", "1K", "--algo", "torch"],
     "needs a torch communicator"),
    (["bench", "allreduce", "-b", "0"], "need 1 <= min bytes"),
    (["bench", "allreduce", "-f", "1"], "-f must be >= 2"),
    (["bench", "allreduce", "-n", "0"], "argument -n/--iters: must be >= 1"),
    (["bench", "allreduce", "-np", "0"], "argument -np: must be >= 1"),
    (["bench", "allreduce", "--scheme", "bogus"], "'bogus' is not a scheme"),
    (["bench", "allreduce", "--compressor", "topk:ratio=5"], "ratio must be"),
    (["bench", "allreduce", "-b", "1", "-e", "4", "--dtype", "float64"], "raise -e"),
    (["bench", "allreduce", "--delay", "1ms"], "add --link RATE"),
    (["bench", "allreduce", "--link", "1gbit"], "--link needs -np N with N >= 2"),
    (["bench", "allreduce", "--link", "fast", "-np", "2"], "not a link rate"),
    (["bench", "allreduce", "--bogus"], "unrecognized arguments: --bogus"),
    (["bench", "compressed", "-s", "0"], "give at least 4 bytes"),
    (["bench", "compressed", "-s", "1K", "--compressor", "bogus"], "unknown compressor"),
    (["bench", "compressed", "-s", "1K", "--scheme", "dense", "--compressor", "topk:ratio=0.1"],
     "scheme 'dense' cannot carry topk"),
    (["bench", "compressed", "-s", "1K", "--json", "{missing}/x.json"], "does not exist"),
    (["bench", "compressed", "-s", "1K", "-w", "-1"], "argument -w/--warmup: must be >= 0"),
    (["bench", "train", "--model", "xyz"], "--model: unknown 'xyz'; choose from cnn"),
    (["bench", "train", "--runs", ""], "--runs '' names nothing"),
    (["bench", "train", "--runs", "ddp,zip"], "--runs: unknown 'zip'"),
    (["bench", "train", "--batch", "0"], "argument --batch: must be >= 1"),
    (["bench", "train", "--lr", "0"], "argument --lr: must be > 0"),
    (["bench", "train", "--plan-link", "fast"], "--plan-link: 'fast' is not a link rate"),
    (["bench", "train", "--scheme", "zip"], "'zip' is not a scheme"),
    (["bench", "train", "--txt", "{missing}/x.txt"], "x.txt: directory"),
    (["bench", "bogus"], "invalid choice: 'bogus'"),
    # tune: sizes and output paths refused before mpiexec starts any rank
    (["tune", "-np", "2", "-f", "1"], "-f must be >= 2"),
    (["tune", "-np", "2", "-b", "0"], "need 1 <= min bytes"),
    (["tune", "-np", "2", "-b", "4M", "-e", "1M"], "need 1 <= min bytes"),
    (["tune", "-np", "2", "-b", "1K", "-e", "1K", "-n", "1", "--no-save",
      "--json", "{missing}/t.json"], "does not exist"),
    (["tune", "-np", "2", "-b", "1K", "-e", "1K", "-n", "1", "--no-save",
      "--txt", "{missing}/t.txt"], "does not exist"),
    # every other command's output paths: refused before reading, measuring or launching
    (["bench", "regret", "{missing}/a.json", "--md", "{missing}/r.md"], "r.md: directory"),
    (["bench", "regret", "{missing}/a.json", "--json", "{missing}/r.json"], "r.json: directory"),
    (["bench", "compressors", "--sizes", "4096", "--threads", "1", "--repeats", "1",
      "--specs", "none", "--out", "{missing}/c.json"], "does not exist"),
    (["bench", "compressors", "--sizes", "0"], "integers >= 1"),
    (["bench", "tta", "--json", "{missing}/x.json"], "does not exist"),
]


@pytest.mark.parametrize("argv,words", REFUSED, ids=[" ".join(a) for a, _ in REFUSED])
def test_argument_errors_are_one_line_and_exit_2(argv: list[str], words: str, capsys,
                                                 tmp_path: Path) -> None:
    missing = str(tmp_path / "no-such-dir")
    assert words in refused(*(a.replace("{missing}", missing) for a in argv), capsys=capsys)


def test_output_paths_are_checked_before_the_run(tmp_path: Path, capsys) -> None:
    from compcoll_bench.cli import UsageError
    from compcoll_bench.commands.checks import output_path

    output_path(str(tmp_path / "new.json"), "--json")  # a new file in a writable directory
    output_path("-", "--json", stdout=True)
    assert "is a directory" in refused("model", "--gamma", "0", "--json", str(tmp_path),
                                       capsys=capsys)
    locked = tmp_path / "locked"
    locked.mkdir(mode=0o500)
    if os.access(locked, os.W_OK):  # root writes anywhere: nothing to refuse
        pytest.skip("running as root: every directory is writable")
    with pytest.raises(UsageError, match="not writable"):
        output_path(str(locked / "x.json"), "--json")


def test_bench_compressors_refuses_bad_arguments() -> None:
    res = compcoll("bench", "compressors", "--sizes", "0", "--specs", "none", timeout=60)
    assert res.returncode == 2 and "integers >= 1" in res.stderr, res.stderr
    res = compcoll("bench", "compressors", "--specs", "bogus", "--sizes", "4096", timeout=60)
    assert res.returncode == 2 and "unknown compressor 'bogus'" in res.stderr, res.stderr
    assert "Traceback" not in res.stderr


def test_model_compare_checks_the_rank_count_before_fitting(tmp_path: Path, capsys) -> None:
    bench = tmp_path / "bench.json"
    bench.write_text(json.dumps({"ranks": 4, "rows": [{"size": 1024, "algo": "ring",
                                                      "time_us": 10.0}]}))
    for nodes in (["--nodes", "8"], ["--fitted", "-np", "2"]):
        line = refused("model", *nodes, "--compare", str(bench), capsys=capsys)
        assert "the bench ran on 4 ranks" in line and "--fitted -np 4" in line


def test_version_names_the_installed_distribution(capsys: pytest.CaptureFixture[str]) -> None:
    from importlib import metadata

    import collectives
    from compcoll_bench.cli import main

    with pytest.raises(SystemExit) as exc:
        main(["--version"])
    assert exc.value.code == 0
    want = metadata.version("compcoll")
    assert capsys.readouterr().out.strip() == f"compcoll {want}"
    assert collectives.__version__ == want


def test_tune_saves_the_table_that_bench_allreduce_then_uses(tmp_path) -> None:
    env = {"COMPCOLL_CACHE_DIR": str(tmp_path)}
    res = compcoll("tune", "-np", "2", "-b", "64K", "-e", "256K", "-f", "4", "-n", "1",
                   "--json", str(tmp_path / "t.json"), env=env, timeout=120)
    assert res.returncode == 0, res.stdout + res.stderr
    data = json.loads((tmp_path / "t.json").read_text())
    assert data["command"][:4] == ["compcoll", "tune", "-np", "2"]
    assert data["sizes"] == [65536, 262144] and len(data["best"]) == 2
    assert "measured best" in res.stdout and "saved to" in res.stdout
    assert len(list((tmp_path / "tuning").glob("*.json"))) == 1
    out = tmp_path / "a.json"
    res = compcoll("bench", "allreduce", "-np", "2", "-b", "64K", "-e", "256K", "-f", "4",
                   "-n", "1", "-w", "0", "--algo", "ring,auto", "--json", str(out),
                   env=env, timeout=120)
    assert res.returncode == 0, res.stdout + res.stderr
    assert "# auto: the measured crossover table (compcoll tune) from 65536 B" in res.stdout
    ran = json.loads(out.read_text())
    assert ran["crossovers"]["sizes"] == data["sizes"]
    # which algorithm runs also depends on this run's model fit (near-ties stay with it)
    picks = [r["auto_choice"] for r in ran["rows"] if r["algo"] == "auto"]
    assert len(picks) == 4 and set(picks) <= set(ran["modeled"])


def _subparser(root: argparse.ArgumentParser, words: list[str]) -> argparse.ArgumentParser:
    parser = root
    for word in words:
        sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
        parser = sub.choices[word]
    return parser


def test_every_option_of_every_command_says_what_it_does() -> None:
    from compcoll_bench.cli import COMMANDS, build_parser
    from compcoll_bench.commands import CATALOG

    root = build_parser()
    assert set(COMMANDS) == set(CATALOG)  # every listed command's module registers it
    for name in COMMANDS:
        parser = _subparser(root, name.split())
        for action in parser._actions:
            assert action.help and action.help != argparse.SUPPRESS, \
                (name, action.option_strings or action.dest)
    options = {o for a in _subparser(root, ["bench", "compressors"])._actions
               for o in a.option_strings}
    assert {"--out", "--sizes", "--threads", "--repeats", "--specs"} <= options


def test_bench_compressors_help_lists_its_options(capsys: pytest.CaptureFixture[str]) -> None:
    from compcoll_bench.cli import main

    with pytest.raises(SystemExit) as exc:
        main(["bench", "compressors", "-h"])
    assert exc.value.code == 0
    text = capsys.readouterr().out
    assert "-- -h" not in text
    for option in ("--out", "--sizes", "--threads", "--repeats", "--specs"):
        assert option in text


def test_help_describes_each_command_with_an_example(capsys: pytest.CaptureFixture[str]
                                                      ) -> None:
    from compcoll_bench.cli import main
    from compcoll_bench.commands import CATALOG

    with pytest.raises(SystemExit) as exc:
        main(["--help"])
    assert exc.value.code == 0
    text = capsys.readouterr().out
    assert "registry" not in text and "bench.commands" not in text
    assert len(CATALOG) >= 10
    for name in CATALOG:  # the epilog: one line per command
        assert f"compcoll {name} " in text, name
    assert "compcoll bench allreduce -np 4" in text  # an example to copy


def test_version_answers_without_loading_the_commands() -> None:
    code = ("import sys\n"
            "from compcoll_bench.cli import main\n"
            "try:\n"
            "    main(['--version'])\n"
            "except SystemExit as exc:\n"
            "    assert exc.code == 0\n"
            "print(sorted(m for m in sys.modules if m in ('torch', 'numpy', 'mpi4py', "
            "'collectives') or m.startswith('compcoll_bench.commands.')), file=sys.stderr)\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=60, cwd="/")
    assert out.returncode == 0, out.stderr
    assert out.stdout.startswith("compcoll ") and out.stderr.strip() == "[]", out.stderr


def test_bench_allreduce_lines_fit_in_132_columns() -> None:
    """Both placements side by side, each with its spread, every algorithm (auto's pick
    shown), a compressor: no line of the table is wider than 132 columns, no comment wider
    than 120."""
    for extra in ([], ["--compressor", "none,topk:ratio=0.01"]):
        res = compcoll("bench", "allreduce", "-b", "1K", "-e", "4K", "-n", "1", "-w", "0",
                       *extra, timeout=120)
        assert res.returncode == 0, res.stdout + res.stderr
        lines = res.stdout.splitlines()
        head = next(i for i, line in enumerate(lines) if "out-of-place" in line)
        comments = [line for i, line in enumerate(lines)
                    if line.startswith("#") and i not in (head, head + 1)]
        wide = [line for line in lines if len(line) > TABLE_WIDTH]
        wide += [line for line in comments if len(line) > WIDTH]
        assert not wide, "\n".join(wide)


def test_compressed_rows_explain_their_error() -> None:
    res = compcoll("bench", "allreduce", "-b", "1K", "-e", "1K", "-n", "1", "-w", "0",
                   "--algo", "ring", "--compressor", "topk:ratio=0.01", timeout=120)
    assert res.returncode == 0, res.stdout + res.stderr
    lines = res.stdout.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("# rel.err"))
    note = " ".join([lines[start], *(line for line in lines[start + 1:]
                                     if line.startswith("#   "))])
    assert "error feedback" in note and "residual" in note and "--no-feedback" in note


def _hint(stdout: str) -> str:
    """The comment that says where compression pays, joined ("" when absent)."""
    lines = stdout.splitlines()
    start = next((i for i, line in enumerate(lines) if line.startswith("# compressed rows ran")),
                 None)
    if start is None:
        return ""
    rest = [line for line in lines[start + 1:] if line.startswith("#   ")]
    return " ".join([lines[start], *rest])


def test_compressed_rows_on_shared_memory_point_to_an_emulated_link() -> None:
    """Compression seldom pays on shared memory: compressed rows timed without --link say to
    try --link 1gbit; dense-only rows do not."""
    res = compcoll("bench", "allreduce", "-b", "1K", "-e", "1K", "-n", "1", "-w", "0",
                   "--algo", "ring", "--compressor", "uniform:bits=8", timeout=120)
    assert res.returncode == 0, res.stdout + res.stderr
    assert "--link 1gbit" in _hint(res.stdout) and "shared memory" in _hint(res.stdout)
    res = compcoll("bench", "allreduce", "-b", "1K", "-e", "1K", "-n", "1", "-w", "0",
                   "--algo", "ring", timeout=120)
    assert res.returncode == 0 and not _hint(res.stdout), res.stdout + res.stderr
    res = compcoll("bench", "compressed", "-s", "4K", "-n", "1", "-w", "0", "--compressor",
                   "uniform:bits=8", timeout=120)
    assert res.returncode == 0, res.stdout + res.stderr
    assert "--link 1gbit" in _hint(res.stdout)


@pytest.mark.mpi
def test_bench_compressed_shows_each_rows_spread_and_flags_ratios_within_it(
        tmp_path: Path) -> None:
    res = compcoll("bench", "compressed", "-np", "2", "-s", "4K", "-n", "3", "-w", "0",
                   "--compressor", "uniform:bits=8", "--without-out", "--json",
                   str(tmp_path / "c.json"), "--txt", str(tmp_path / "c.txt"), timeout=120)
    assert res.returncode == 0, res.stdout + res.stderr
    doc = json.loads((tmp_path / "c.json").read_text())
    assert doc["iters"] == 3 and "p25" in doc["spread"]
    rows = doc["rows"]
    assert all(r["iters"] == 3 and r["spread"] is not None for r in rows)
    assert [r["noisy"] for r in rows] == noise.flags([r["time_s"] for r in rows],
                                                     [r["spread"] for r in rows])
    text = (tmp_path / "c.txt").read_text()
    assert "the median of the 3 timed calls of each row; iqr%" in text.replace("\n#   ", " ")
    head = next(line for line in text.splitlines() if line.startswith("# run") and "iqr%" in line)
    assert head.split().index("iqr%") == head.split().index("time(ms)") + 1
    flagged = sum(1 for r in rows if r["noisy"])
    assert f"# ~ within the noise: {flagged} of {len(rows) - 1} 'vs MPI' ratios" in text


def test_bench_compressors_writes_to_its_own_folder_and_says_where(tmp_path: Path) -> None:
    res = compcoll("bench", "compressors", "--sizes", "4096", "--threads", "1", "--repeats",
                   "1", "--specs", "none", timeout=60, cwd=tmp_path)
    assert res.returncode == 0, res.stdout + res.stderr
    assert (tmp_path / "compcoll-results" / "compressors.json").is_file()
    assert (tmp_path / "compcoll-results" / "compressors.md").is_file()
    assert not (tmp_path / "bench").exists()
    assert not any(line.lstrip().startswith("{") for line in res.stdout.splitlines())
    last = res.stdout.strip().splitlines()[-1]
    assert "compcoll-results/compressors.json" in last and "compressors.md" in last


def test_tune_refuses_a_cache_folder_it_could_not_save_to(tmp_path: Path, capsys,
                                                          monkeypatch: pytest.MonkeyPatch
                                                          ) -> None:
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    monkeypatch.setenv("COMPCOLL_CACHE_DIR", str(blocker / "cache"))
    line = refused("tune", "-np", "2", "-b", "1K", "-e", "1K", "-n", "1", capsys=capsys)
    assert "a-file" in line and "--no-save" in line


def test_bench_compressed_times_calls_without_out_beside_the_same_with_out(tmp_path: Path
                                                                           ) -> None:
    txt, js = tmp_path / "c.txt", tmp_path / "c.json"
    res = compcoll("bench", "compressed", "-np", "2", "-s", "2M", "-n", "2", "-w", "1",
                   "--compressor", "topk:ratio=0.01", "--without-out", "--txt", str(txt),
                   "--json", str(js), timeout=300)
    assert res.returncode == 0, res.stdout + res.stderr
    text = txt.read_text()
    assert text.startswith("# command: compcoll bench compressed -np 2")
    assert "topk:ratio=0.01 +EF no out=: " in text and "x the time of the same call" in text
    rows = {r["name"]: r for r in json.loads(js.read_text())["rows"]}
    row = rows["topk:ratio=0.01 +EF no out="]
    assert row["vs_out"] == pytest.approx(row["time_s"] / row["with_out_s"])
