"""``compcoll bench tta``: time to accuracy, PyTorch's DDP hooks against ours.

Every run trains the same model from the same weights on the same batches for ``--steps``
steps (or, with ``--stop-at-target``, until it reaches the target) and measures the test
quality every ``--eval-every`` steps. The clock is training wall-clock time: the sum of each
step's time on the slowest rank, evaluation excluded (ranks meet at a barrier before each
step, so evaluating pauses the clock). Each curve is smoothed by a trailing moving average
over ``--smooth`` evaluations (``tta_target``), so one lucky or unlucky evaluation neither
sets nor meets the target. DDP without a hook runs first: its best smoothed quality less
``--tolerance`` (points of accuracy, or percent of a loss) is the target of every run, and a
run reaches it at the first evaluation whose smoothed quality meets it.
Reported per run: time and step at which the target was first reached (or "not reached"),
its ratio to the fp16 hook's, final and best smoothed quality, the payload each rank
contributes per step, mean step (all steps: first steps and any re-planning included),
median step (after warm-up), the worst stretch of 5 steps after the first against that
median, time of the first 10 steps (in the JSON), the curves of quality against time (raw
and smoothed), and a second table, the step split: forward, backward, optimizer, time in our
hook, and the wait that synchronising gradients adds to backward (``tta_steps`` defines each).
The run
``compute`` trains the same ranks under ``no_sync`` (no gradient communication): its step is
the floor no scheme can beat; it has no quality and no target.
"""

from __future__ import annotations

import argparse
import zlib
from typing import Any

import numpy as np

from ..registry import UsageError, command
from . import checks, tta_repeat
from . import emulate as emulated
from . import train_common as common
from . import tta_report as report
from . import tta_steps as steps
from .benchlib import comment
from .train_models import MODELS, task
from .train_optims import OPTIMIZERS, payload
from .train_runs import ONE_BUCKET, RUNS, payload_bytes
from .tta_target import Target, best, first_reached, reference_target, smooth

COMPUTE = "compute"
TTA_RUNS = ["ddp", "fp16", "bf16", "powersgd1", "powersgd", "auto", "int8+ef", "int4+ef",
            "topk+ef", "powersgd+ef", COMPUTE]


def _arguments(p: argparse.ArgumentParser) -> None:
    common.add_arguments(p, models="cnn,mlp-wide,lm,embed", steps=300, runs=TTA_RUNS,
                         known=[*RUNS, *OPTIMIZERS, COMPUTE], bucket_mb=25.0,
                         bucket_help="DDP's own "
                         "default, as a user who tunes nothing has it",
                         model_help=f"comma-separated of "
                         f"{', '.join(MODELS)} (mlp-wide: 6.4M parameters in three matrices; "
                         "embed: an embedding table of 4.2M)")
    p.add_argument("--eval-every", type=checks.positive_int, default=10, metavar="N",
                   help="measure the test quality every N steps (10)")
    p.add_argument("--tolerance", type=checks.nonneg_float, default=1.0,
                   help="target = DDP's best smoothed quality less this many points of "
                   "accuracy, or plus this many percent of a loss (1)")
    p.add_argument("--smooth", type=checks.positive_int, default=3, metavar="K",
                   help="smooth every quality curve by the mean of its last K evaluations "
                   "before deriving the target and deciding when a run reaches it (3; 1: "
                   "raw evaluations)")
    p.add_argument("--repeat-auto", type=checks.count_int, default=0, metavar="N",
                   help="then run auto N more times from an empty measurement cache for "
                   "--repeat-steps steps each and report whether it decided alike (0)")
    p.add_argument("--repeat-steps", type=checks.positive_int, default=20, metavar="S",
                   help="steps of each --repeat-auto run: past its first decision (20)")
    p.add_argument("--budget", type=_budget, default=1.0, metavar="X",
                   help="steps of the runs that change the optimizer (local steps, 1-bit "
                   "Adam, post-local SGD) against --steps, e.g. 2x: they trade convergence per "
                   "step for time per step; the target stays DDP's quality at --steps (1x)")
    p.add_argument("--stop-at-target", action="store_true",
                   help="end a run (but DDP's) once it reaches the target")


def _budget(text: str) -> float:
    """``--budget``: a multiple of --steps, "2x" or "2", at least 1."""
    try:
        value = float(text.strip().removesuffix("x"))
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r}: a multiple of --steps such as 2x") from None
    if not value >= 1.0:
        raise argparse.ArgumentTypeError(f"{text!r}: at least 1x (DDP's own steps)")
    return value


def _check(args: argparse.Namespace) -> tuple[list[str], list[str]]:
    models, runs = common.check(args, MODELS, [*RUNS, *OPTIMIZERS, COMPUTE])
    emulated.check_arguments(args)
    if "ddp" not in runs:
        raise UsageError(f"--runs {args.runs}: add ddp (its best quality defines the target)")
    if args.eval_every > args.steps:
        raise UsageError(f"--eval-every {args.eval_every} is more than --steps {args.steps}")
    return models, ["ddp", *(r for r in dict.fromkeys(runs) if r != "ddp")]


def _quality(t: Any, model: Any, mpi: Any, opt: Any = None) -> float:
    """The test quality, measured on rank 0 (every rank has the same weights); for DiLoCo
    (``opt`` has ``global_weights``) the model it trains, the last outer step's weights,
    not rank 0's local ones between syncs."""
    if mpi.rank != 0:
        return mpi.bcast(None, root=0)
    if hasattr(opt, "global_weights"):
        with opt.global_weights():
            return mpi.bcast(t.evaluate(model.module), root=0)
    return mpi.bcast(t.evaluate(model.module), root=0)


def _train(name: str, t: Any, args: argparse.Namespace, mpi: Any,
           goal: Target | None) -> dict[str, Any]:
    import torch
    from torch.nn.parallel import DistributedDataParallel as DDP

    compute = name == COMPUTE
    bucket_mb = ONE_BUCKET.get(name, args.bucket_mb)
    state = None
    if name in OPTIMIZERS:  # the optimizer changes, not DDP's gradients
        model, opt = OPTIMIZERS[name](t.make(), args, bucket_mb)
    else:
        model = DDP(t.make(), bucket_cap_mb=bucket_mb)
        state = None if compute else RUNS[name](model, args)
        opt = common.adam(model.parameters(), args.lr)
    times: list[float] = []
    losses: list[float] = []
    parts: list[tuple[float, ...]] = []  # per step: forward, backward, optimizer, hook
    evals = [] if compute else [(0, _quality(t, model, mpi, opt))]
    budget = round(args.steps * args.budget) if name in OPTIMIZERS else args.steps
    for step in range(budget):  # the clock runs in the steps only, not in evaluations
        st = common.split_step(model, t, opt, step, args, mpi, compute_only=compute)
        times.append(st.seconds)
        losses.append(st.loss)
        if state is not None:
            state.observe_loss(st.loss)  # the quality signal the automatic policy checks
        hook = getattr(opt, "comm_s", 0.0) if state is None \
            else steps.hook_seconds(state, step)
        parts.append((st.forward, st.backward, st.optimizer, hook))
        done = step + 1
        if not compute and (done % args.eval_every == 0 or done == budget):
            evals.append((done, _quality(t, model, mpi, opt)))
            if (goal is not None and args.stop_at_target
                    and goal.reached_last([q for _, q in evals])):
                break
    per_step = np.empty(len(times))
    mpi.Allreduce(np.asarray(times), per_step, op=common.mpi_max())  # the slowest rank's
    clock = np.concatenate([[0.0], np.cumsum(per_step)])
    warm = min(len(times) - 1, max(5, args.start_step + 3))
    flat = torch.cat([p.detach().reshape(-1) for p in model.module.parameters()]).numpy()
    agree = len(set(mpi.allgather(zlib.crc32(flat.tobytes())))) == 1  # not hash(): salted
    curve = [(s, float(clock[s]), q) for s, q in evals]
    smoothed = smooth(curve, args.smooth)
    mean_loss = np.asarray(mpi.allreduce(np.asarray(losses))) / mpi.size  # training loss
    row: dict[str, Any] = {
        "model": t.name, "run": name, "metric_name": t.metric,
        "higher_is_better": t.higher_is_better, "steps": len(times), "bucket_mb": bucket_mb,
        "parameters": int(flat.size), "curve": curve, "smoothed": smoothed,
        "final": curve[-1][2] if curve else None,
        "best": best(curve, t.higher_is_better) if curve else None,
        "smoothed_final": smoothed[-1][2] if curve else None,
        "smoothed_best": best(smoothed, t.higher_is_better) if curve else None,
        "bytes_per_step": 0 if compute else payload(name, opt, int(flat.size))
        if name in OPTIMIZERS else payload_bytes(name, model.module, state),
        "mean_ms": float(per_step.mean()) * 1e3,
        "median_ms": float(np.median(per_step[warm:])) * 1e3,
        "split_ms": steps.split_ms(parts, warm, mpi, with_hook=state is not None
                                  or hasattr(opt, "comm_s")),
        "first10_s": float(per_step[:10].sum()), "train_s": float(clock[-1]),
        "final_loss": float(mean_loss[-10:].mean()), "losses": mean_loss.tolist(),
        # (local steps: the ranks' weights differ between syncs by design)
        "ranks_agree": None if compute or name in OPTIMIZERS and name != "onebit" else agree,
        "step_times_ms": (per_step * 1e3).tolist()}
    row["mb_per_step"] = row["bytes_per_step"] / 1e6
    if name == "onebit":
        row["frozen_at"] = opt.frozen_at
    elif name.startswith("diloco"):
        row["sync_every"], row["compressor"] = opt.sync_every, opt.compressor
        row["outer"] = list(opt.outer_settings)  # the outer step's (lr, momentum)
        row["stall_s"] = opt.stall_s  # waits for background exchanges
    row["worst5_x"] = steps.worst_stretch(row["step_times_ms"], row["median_ms"])
    if state is not None:
        if getattr(state.policy, "adaptive", False):
            row["decisions"] = state.policy.table()
            row["decision_log"] = state.policy.log
        state.close()
    return row


def _score(row: dict[str, Any], goal: Target | None) -> None:
    """Time and step at which the run first reached the target (None: not reached)."""
    row["target"] = None if goal is None else goal.value
    hit = first_reached(row["curve"], goal) if goal is not None else None
    row["target_step"], row["target_s"] = (hit[0], hit[1]) if hit else (None, None)


@command("bench tta", arguments=_arguments)
def run(args: argparse.Namespace) -> int:
    models, runs = _check(args)
    code = common.launch(args)
    if code is not None:
        return code
    mpi = common.start(args)
    where = emulated.label(args, mpi.size)
    title = (f"# compcoll bench tta: {mpi.size} ranks{', ' + where if where else ''}, "
             f"torch.distributed gloo, up to {args.steps} steps"
             f"{f' ({args.budget:g}x for optimizer runs)' if args.budget != 1 else ''}, "
             f"batch {args.batch}/rank, "
             f"quality every {args.eval_every} steps, our hooks over {args.comm}")
    _say(mpi, title)
    rows: list[dict[str, Any]] = []
    targets: dict[str, str] = {}  # model: how its target was derived
    repeats: list[dict[str, Any]] = []  # --repeat-auto, per model
    for name in models:
        t = task(name, args.seed)
        goal = None
        for run_name in runs:
            common.watchdog(args)
            row = _train(run_name, t, args, mpi, goal)
            if run_name == "ddp":
                goal = reference_target(row["curve"], t.higher_is_better, args.tolerance,
                                        args.smooth)
                targets[name] = goal.describe("ddp", t.metric)
                _say(mpi, f"# {name}: {targets[name]}\n{report.header()}")
            _score(row, None if run_name == COMPUTE else goal)
            rows.append(row)
            report.add_ratios(rows)
            _say(mpi, report.format_row(row))
        if args.repeat_auto:
            repeats.append(tta_repeat.repeat_auto(t, args, mpi))
            _say(mpi, tta_repeat.describe(repeats[-1]))
    steps.add_exposed(rows, COMPUTE)
    table = [*(f"# {m}: {how}" for m, how in targets.items()), report.header(),
             *(report.format_row(r) for r in rows), *steps.split_table(rows),
             *(f"# auto policy decisions, {r['model']}:\n{r['decisions']}"
               for r in rows if "decisions" in r),
             *(tta_repeat.describe(r) for r in repeats)]
    _say(mpi, "\n".join([*comment("all runs (vs fp16, vs torch: the fp16 hook's, the "
                                   "soonest PyTorch option's (DDP, its hooks, post-local "
                                   "SGD) time to target over the run's; "
                                   "final, best: of the curve smoothed over "
                                   f"{args.smooth} evaluation(s); worst5/med: the slowest 5 "
                                   "steps in a row after the first over the median)"),
                         *table]))
    if mpi.rank == 0:
        _write(args, mpi, rows, [title, *table], targets, repeats)
    common.finish()
    return 0 if all(r["ranks_agree"] is not False for r in rows) else 1


def _say(mpi: Any, text: str) -> None:
    if mpi.rank == 0:
        print(text, flush=True)


def _write(args: argparse.Namespace, mpi: Any, rows: list[dict], lines: list[str],
           targets: dict[str, str], repeats: list[dict[str, Any]]) -> None:
    meta = common.meta(args, mpi)
    meta.update(tolerance=args.tolerance, eval_every=args.eval_every, smooth=args.smooth,
                targets=targets, repeat_auto=repeats)
    if args.json:
        report.write_json(args.json, meta, rows)
    if args.txt:
        command = "# command: " + " ".join(meta["command"])
        with open(args.txt, "w") as f:
            f.write("\n".join([lines[0], command, *lines[1:]]) + "\n")
    if args.plot:
        where = emulated.label(args, mpi.size) or "shared memory"
        report.plot(args.plot, rows, f"compcoll bench tta, {mpi.size} ranks, {where}")
