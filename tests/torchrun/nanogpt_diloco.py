"""The nanoGPT-style script of ``nanogpt.py`` trained with DiLoCo instead of DDP, under torchrun.

The same GPT (token embedding tied to the output layer), AdamW with two parameter groups, a
warm-up then cosine learning rate written into ``optimizer.param_groups``, gradient
accumulation, gradient clipping and ``torch.compile``; what changes against the DDP loop: no
DDP wrap, the optimizer wrapped in ``collectives.optim.DiLoCo`` (8-bit pseudo-gradients with
error feedback, a sync every ``SYNC_EVERY`` steps), rank 0's evaluation on the global weights
(``with optimizer.global_weights()``), and a checkpoint on every rank: each rank's DiLoCo
state is its own (its error-feedback residual), so every rank calls ``optimizer.state_dict()``
at the same step and saves it beside its local weights in ``ckpt{ITER}_rank{R}.pt``; rank 0
also saves the global weights, the model DiLoCo trains, in ``ckpt{ITER}.pt``. After the loop,
``optimizer.flush()`` (every rank) lands the sync still in flight.

Runs, on every rank: (1) DiLoCo, checkpointed at ``EVAL_EVERY`` (between two syncs, with one
in flight); (2) resumed from that checkpoint (new model, AdamW and DiLoCo; the model's and the
optimizer's state loaded); (3) plain DDP, the same loop. Checked: the loss fell; every sync
was made; the global weights are the same on every rank (a checksum gathered); the resumed run
ends on the uninterrupted run's global and local weights, bit for bit, with the embedding still
tied; rank 0's checkpoint holds the global weights; DiLoCo's loss stays near plain DDP's.

``--no-compile`` leaves ``torch.compile`` out (for a machine without a C compiler).

Run: torchrun --standalone --nproc-per-node 2 tests/torchrun/nanogpt_diloco.py CHECKPOINT_DIR
"""

from __future__ import annotations

import hashlib
import math
import sys
from dataclasses import dataclass
from pathlib import Path

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP

from collectives.optim import DiLoCo

# isort: split
# the model, data and evaluation of the DDP script beside this one
from nanogpt import ACCUM, CFG, GPT, estimate_loss, get_batch

from torchrun_checks import Checks, P, R

MAX_ITERS, EVAL_EVERY, SYNC_EVERY = 20, 10, 4  # the checkpoint falls between syncs
LR, MIN_LR, WARMUP = 6e-3, 6e-4, 4
COMPRESSOR = "uniform:bits=8"  # with error feedback, DiLoCo's default when a compressor is set
checks = Checks("torchrun nanogpt diloco")
check = checks.check


def get_lr(it: int) -> float:
    if it < WARMUP:
        return LR * (it + 1) / (WARMUP + 1)
    ratio = (it - WARMUP) / (MAX_ITERS - WARMUP)
    return MIN_LR + 0.5 * (1.0 + math.cos(math.pi * ratio)) * (LR - MIN_LR)


def flat(model: nn.Module) -> torch.Tensor:
    return torch.cat([p.detach().reshape(-1).clone() for p in model.parameters()])


@dataclass
class Run:
    losses: dict[int, float]
    val: float  # rank 0's validation loss at the end (nan on the other ranks)
    global_weights: torch.Tensor
    local_weights: torch.Tensor
    raw: GPT
    optimizer: DiLoCo | torch.optim.AdamW


def run(mode: str, ckpt_dir: Path, *, compile_: bool, resume: bool = False) -> Run:
    """nanoGPT's loop: ``mode`` "diloco" or "ddp"; ``resume`` starts from the checkpoint the
    ranks wrote at ``EVAL_EVERY``."""
    torch.manual_seed(1337 + R)  # different on every rank: DiLoCo and DDP take rank 0's
    raw = GPT(CFG)
    optimizer = raw.configure_optimizers(0.1, LR)
    model = torch.compile(raw) if compile_ else raw
    if mode == "ddp":
        model = DDP(model)
    else:  # a collective: every rank loads rank 0's weights
        optimizer = DiLoCo(optimizer, model, sync_every=SYNC_EVERY, compressor=COMPRESSOR)
    it = 0
    if resume:  # after DiLoCo, which loaded rank 0's weights: each rank its local ones
        saved = torch.load(ckpt_dir / f"ckpt{EVAL_EVERY}_rank{R}.pt", weights_only=False)
        raw.load_state_dict(saved["model"])
        optimizer.load_state_dict(saved["optimizer"])
        it = saved["iter_num"]
    losses: dict[int, float] = {}
    val = math.nan
    while True:
        for group in optimizer.param_groups:
            group["lr"] = get_lr(it)
        if it == MAX_ITERS and mode == "diloco":
            optimizer.flush()  # every rank: the last interval's progress into the global weights
        if it % EVAL_EVERY == 0 and mode == "diloco":
            state = optimizer.state_dict()  # every rank at the same step: its own part
            if not resume and it > 0:
                torch.save({"model": raw.state_dict(), "optimizer": state, "iter_num": it},
                           ckpt_dir / f"ckpt{it}_rank{R}.pt")
            if R == 0:  # the others go on and wait for rank 0 in the next sync
                with optimizer.global_weights() as m:
                    val = estimate_loss(m)
                    if not resume and it > 0:
                        torch.save({"model": raw.state_dict(), "iter_num": it,
                                    "val_loss": val}, ckpt_dir / f"ckpt{it}.pt")
        elif it % EVAL_EVERY == 0 and R == 0:
            val = estimate_loss(model)
        if it == MAX_ITERS:
            break
        for micro in range(ACCUM):
            if mode == "ddp":
                model.require_backward_grad_sync = micro == ACCUM - 1
            x, y = get_batch("train", it, micro)
            _, loss = model(x, y)
            (loss / ACCUM).backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        losses[it] = float(loss.detach())
        it += 1
    local = flat(raw)
    if isinstance(optimizer, DiLoCo):
        with optimizer.global_weights():
            global_ = flat(raw)
    else:
        global_ = local
    return Run(losses, val, global_, local, raw, optimizer)


def checksum(t: torch.Tensor) -> str:
    return hashlib.sha256(t.numpy().tobytes()).hexdigest()


def same_everywhere(t: torch.Tensor) -> bool:
    every: list[str | None] = [None] * P
    dist.all_gather_object(every, checksum(t))
    return len(set(every)) == 1


def means(losses: dict[int, float], width: int = 4) -> list[float]:
    return [sum(losses[i] for i in range(a, a + width)) / width
            for a in range(0, MAX_ITERS, width)]


def main() -> None:
    ckpt_dir = Path(sys.argv[1])
    compile_ = "--no-compile" not in sys.argv
    dist.init_process_group("gloo")
    full = run("diloco", ckpt_dir, compile_=compile_)
    opt = full.optimizer
    check(opt.steps == MAX_ITERS and opt.syncs == MAX_ITERS // SYNC_EVERY,
          f"{MAX_ITERS // SYNC_EVERY} syncs in {MAX_ITERS} steps: {opt.syncs} in {opt.steps}")
    check(opt.compressor.startswith(COMPRESSOR) and opt.feedback is not None,
          f"8 bits with error feedback: {opt.compressor}, feedback {opt.feedback}")
    if compile_:
        from torch._dynamo.utils import counters

        check(counters["stats"]["unique_graphs"] > 0, "torch.compile compiled the model")
    dist.barrier()  # every rank's checkpoint is on disk
    resumed = run("diloco", ckpt_dir, compile_=compile_, resume=True)
    check(min(resumed.losses) == EVAL_EVERY, f"resumed at {EVAL_EVERY}: {sorted(resumed.losses)}")
    for what in ("global_weights", "local_weights"):
        a, b = getattr(resumed, what), getattr(full, what)
        check(torch.equal(a, b), f"the resumed run ends on the uninterrupted run's {what}, bit "
                                 f"for bit (max diff {float((a - b).abs().max()):.3g})")
    check(resumed.raw.transformer.wte.weight is resumed.raw.lm_head.weight,
          "the embedding is still tied to the output layer after the resume")
    check(resumed.optimizer.syncs == MAX_ITERS // SYNC_EVERY,
          f"the resumed run counts every sync: {resumed.optimizer.syncs}")
    if R == 0:
        saved = torch.load(ckpt_dir / f"ckpt{EVAL_EVERY}.pt", weights_only=False)["model"]
        check(saved["transformer.wte.weight"].data_ptr() == saved["lm_head.weight"].data_ptr(),
              "rank 0's checkpoint holds the tied tensor once")
        mine = torch.load(ckpt_dir / f"ckpt{EVAL_EVERY}_rank0.pt", weights_only=False)["optimizer"]
        model = GPT(CFG)
        model.load_state_dict(saved)
        check(torch.equal(flat(model), mine["global"]),
              "rank 0's ckpt.pt holds DiLoCo's global weights")
    plain = run("ddp", ckpt_dir, compile_=compile_)
    for r in (full, resumed):
        check(same_everywhere(r.global_weights), "the same global weights on every rank")
    check(not same_everywhere(torch.tensor(list(full.losses.values()))),
          "the ranks trained on their own data (their local losses differ)")
    d, c = means(full.losses), means(plain.losses)
    check(d[-1] < d[0] - 1.0, f"the loss fell: {d[0]:.3f} -> {d[-1]:.3f}")
    # Syncs 4 steps apart average the local AdamW models: near DDP, not on its curve. The
    # bound is loose against the difference (a few percent here), and holds at any speed.
    check(abs(d[-1] - c[-1]) <= 0.15 * c[-1],
          f"DiLoCo's loss ends near plain DDP's (means of 4 steps):\n  {d}\n  {c}")
    if R == 0:
        check(abs(full.val - plain.val) <= 0.15 * plain.val,
              f"DiLoCo's global weights evaluate near DDP's: {full.val:.3f}, {plain.val:.3f}")
        print(f"nanogpt diloco loss (means of 4 steps) diloco {[round(v, 3) for v in d]} "
              f"ddp {[round(v, 3) for v in c]} val {full.val:.3f} / {plain.val:.3f} "
              f"compile={compile_}", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    checks.guarded("nanogpt diloco", main)
    checks.finish()
