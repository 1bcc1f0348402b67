"""A nanoGPT-style training script under torchrun, with the DDP hook added as the README says.

The loop is written the way nanoGPT's ``train.py`` is: a GPT whose token embedding is its
output layer (``transformer.wte.weight = lm_head.weight``), AdamW with two parameter groups
(weight decay on tensors of two or more dimensions, none on the rest), a warm-up then cosine
learning rate, gradient accumulation through ``model.require_backward_grad_sync``, gradient
clipping, ``torch.compile`` before the DistributedDataParallel wrap, and every
``EVAL_EVERY`` steps an evaluation and a checkpoint (model, optimizer and hook state) on rank 0
alone while the other ranks go on into the next step and wait in its hook. Data: bytes of the
standard library's source (nothing is downloaded), a 256-token vocabulary.

Runs, on every rank: (1) compressed, a policy by names and kinds (the embeddings uncompressed,
the rest 8-bit), checkpointed at ``EVAL_EVERY``; (2) resumed from that checkpoint in a fresh
process state (new model, optimizer, CompressionState); (3) plain DDP, the same loop. Checked:
the tied parameter is one layer, ``transformer.wte.weight``, of kind embedding, and it was sent
uncompressed while other groups were compressed; the loss fell and tracks plain DDP's; the
resumed run ends on the uninterrupted run's weights, bit for bit; every rank holds the same
weights.

``--no-compile`` leaves ``torch.compile`` out (for a machine without a C compiler).

Run: torchrun --standalone --nproc-per-node 2 tests/torchrun/nanogpt.py CHECKPOINT_DIR
"""

from __future__ import annotations

import math
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP

import collectives.ddp as cddp
from compcoll_bench.commands.train_models import stdlib_text

from torchrun_checks import Checks, P, R

BATCH, ACCUM = 8, 2  # sequences per micro-step and rank; micro-steps per optimizer step
MAX_ITERS, EVAL_EVERY, EVAL_ITERS = 40, 20, 4
LR, MIN_LR, WARMUP = 6e-3, 6e-4, 5
POLICY = [("kind=embedding", "none"), ("*", "uniform:bits=8")]
checks = Checks("torchrun nanogpt")
check = checks.check


@dataclass(frozen=True)
class GPTConfig:
    block_size: int = 32
    vocab_size: int = 256
    n_layer: int = 2
    n_head: int = 2
    n_embd: int = 32


class SelfAttention(nn.Module):
    def __init__(self, cfg: GPTConfig) -> None:
        super().__init__()
        self.n_head = cfg.n_head
        self.c_attn = nn.Linear(cfg.n_embd, 3 * cfg.n_embd)
        self.c_proj = nn.Linear(cfg.n_embd, cfg.n_embd)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, t, c = x.shape
        q, k, v = (z.view(b, t, self.n_head, c // self.n_head).transpose(1, 2)
                   for z in self.c_attn(x).split(c, dim=2))
        # No mask buffer: a module with buffers makes DDP broadcast them in every forward,
        # and rank 0's evaluation forward would then wait for the other ranks.
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return self.c_proj(y.transpose(1, 2).contiguous().view(b, t, c))


class Block(nn.Module):
    def __init__(self, cfg: GPTConfig) -> None:
        super().__init__()
        self.ln_1, self.ln_2 = nn.LayerNorm(cfg.n_embd), nn.LayerNorm(cfg.n_embd)
        self.attn = SelfAttention(cfg)
        self.mlp = nn.Sequential(nn.Linear(cfg.n_embd, 4 * cfg.n_embd), nn.GELU(),
                                 nn.Linear(4 * cfg.n_embd, cfg.n_embd))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.attn(self.ln_1(x))
        return x + self.mlp(self.ln_2(x))


class GPT(nn.Module):
    def __init__(self, cfg: GPTConfig) -> None:
        super().__init__()
        self.cfg = cfg
        self.transformer = nn.ModuleDict(dict(
            wte=nn.Embedding(cfg.vocab_size, cfg.n_embd),
            wpe=nn.Embedding(cfg.block_size, cfg.n_embd),
            h=nn.ModuleList(Block(cfg) for _ in range(cfg.n_layer)),
            ln_f=nn.LayerNorm(cfg.n_embd)))
        self.lm_head = nn.Linear(cfg.n_embd, cfg.vocab_size, bias=False)
        self.transformer.wte.weight = self.lm_head.weight  # weight tying, as nanoGPT
        for m in self.modules():
            if isinstance(m, nn.Linear | nn.Embedding):
                nn.init.normal_(m.weight, 0.0, 0.02)

    def forward(self, idx: torch.Tensor, targets: torch.Tensor
                ) -> tuple[torch.Tensor, torch.Tensor]:
        tr = self.transformer
        x = tr.wte(idx) + tr.wpe(torch.arange(idx.shape[1]))
        for block in tr.h:
            x = block(x)
        logits = self.lm_head(tr.ln_f(x))
        return logits, F.cross_entropy(logits.view(-1, logits.shape[-1]), targets.view(-1))

    def configure_optimizers(self, weight_decay: float, lr: float) -> torch.optim.AdamW:
        params = [p for p in self.parameters() if p.requires_grad]  # a tied tensor once
        groups = [{"params": [p for p in params if p.dim() >= 2], "weight_decay": weight_decay},
                  {"params": [p for p in params if p.dim() < 2], "weight_decay": 0.0}]
        return torch.optim.AdamW(groups, lr=lr, betas=(0.9, 0.95))


CFG = GPTConfig()
TEXT = torch.from_numpy(stdlib_text(1 << 18).astype("int64"))
DATA = {"train": TEXT[:int(len(TEXT) * 0.9)], "val": TEXT[int(len(TEXT) * 0.9):]}


def get_batch(split: str, it: int, micro: int) -> tuple[torch.Tensor, torch.Tensor]:
    """This rank's batch of step ``it``, micro-step ``micro``: a draw seeded from all four
    (the same in every run, different on every rank); the global RNG is not touched."""
    data = DATA[split]
    g = torch.Generator().manual_seed(((it * 8 + micro) * 64 + R) * 2 + (split == "val"))
    ix = torch.randint(len(data) - CFG.block_size - 1, (BATCH,), generator=g)
    x = torch.stack([data[i:i + CFG.block_size] for i in ix])
    y = torch.stack([data[i + 1:i + 1 + CFG.block_size] for i in ix])
    return x, y


def get_lr(it: int) -> float:
    if it < WARMUP:
        return LR * (it + 1) / (WARMUP + 1)
    ratio = (it - WARMUP) / (MAX_ITERS - WARMUP)
    return MIN_LR + 0.5 * (1.0 + math.cos(math.pi * ratio)) * (LR - MIN_LR)


@torch.no_grad()
def estimate_loss(model: nn.Module) -> float:
    """Validation loss through the DDP model, on this rank alone (a forward communicates
    nothing: no buffers to broadcast, no gradients)."""
    model.eval()
    loss = sum(float(model(*get_batch("val", 10_000 + k, 0))[1]) for k in range(EVAL_ITERS))
    model.train()
    return loss / EVAL_ITERS


@dataclass
class Run:
    losses: dict[int, float]
    weights: torch.Tensor
    state: Any
    model: Any


def run(mode: str, ckpt_dir: Path, *, compile_: bool, resume: bool = False) -> Run:
    """nanoGPT's loop: ``mode`` "compressed" (the README's lines after the DDP wrap) or
    "ddp"; ``resume`` starts from the checkpoint rank 0 wrote at ``EVAL_EVERY``."""
    torch.manual_seed(1337 + R)  # as nanoGPT: DDP broadcasts rank 0's initial weights
    model = GPT(CFG)
    it = 0
    if resume:
        saved = torch.load(ckpt_dir / f"ckpt{EVAL_EVERY}.pt", weights_only=False)
        prefix = "_orig_mod."  # the compiled model's state_dict keys, stripped as nanoGPT does
        model.load_state_dict({k.removeprefix(prefix): v for k, v in saved["model"].items()})
        it = saved["iter_num"]
    optimizer = model.configure_optimizers(0.1, LR)
    if resume:
        optimizer.load_state_dict(saved["optimizer"])
    if compile_:
        model = torch.compile(model)
    model = DDP(model)
    state = None
    if mode == "compressed":
        state = cddp.CompressionState(policy=POLICY).bind(model)
        model.register_comm_hook(state, cddp.compression_hook)
        if resume:
            state.load_state_dict(saved["compression"])
    raw_model = model.module
    losses: dict[int, float] = {}
    while True:
        for group in optimizer.param_groups:
            group["lr"] = get_lr(it)
        if it % EVAL_EVERY == 0:
            # Every rank: the hook's state of every rank, gathered (a collective).
            hook_state = state.gather_state_dict() if state is not None else None
            if R == 0:  # the others go on into the next step and wait in its hook
                val = estimate_loss(model)
                if it > 0 and mode == "compressed" and not resume:
                    torch.save({"model": raw_model.state_dict(),
                                "optimizer": optimizer.state_dict(),
                                "compression": hook_state, "iter_num": it, "val_loss": val},
                               ckpt_dir / f"ckpt{it}.pt")
        if it == MAX_ITERS:
            break
        for micro in range(ACCUM):
            model.require_backward_grad_sync = micro == ACCUM - 1  # sync on the last only
            x, y = get_batch("train", it, micro)
            _, loss = model(x, y)
            (loss / ACCUM).backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        losses[it] = float(loss.detach())
        it += 1
    if state is not None:
        state.close()
    weights = torch.cat([p.detach().reshape(-1) for p in model.parameters()])
    return Run(losses, weights, state, model)


def same_everywhere(t: torch.Tensor) -> bool:
    every = [torch.empty_like(t) for _ in range(P)]
    dist.all_gather(every, t)
    return all(torch.equal(e, every[0]) for e in every)


def check_names(state: Any) -> None:
    """The tied parameter is one layer under its first name, and went uncompressed."""
    layers = {lay.name: lay for lay in state.policy.layers}
    wte = layers.get("transformer.wte.weight")
    check(wte is not None and wte.kind == "embedding",
          f"transformer.wte.weight is a layer of kind embedding: {wte}")
    check("lm_head.weight" not in layers and not any(n.startswith(("module.", "_orig_mod."))
                                                     for n in layers),
          f"one layer per tensor, under the model's own names: {sorted(layers)}")
    groups = [g for rec in state.timeline for g in rec.get("groups", ())]
    specs: dict[str, set[str]] = {}
    for _, spec, members in groups:
        for m in members:
            specs.setdefault(m, set()).add(spec)
    check(specs.get("transformer.wte.weight") == {"none"},
          f"the tied embedding went uncompressed: {specs.get('transformer.wte.weight')}")
    check("lm_head.weight" not in specs, f"no group names lm_head.weight: {sorted(specs)}")
    compressed = {m for m, s in specs.items() if s - {"none"}}
    others = {lay.name for lay in state.policy.layers if lay.kind != "embedding"}
    check(compressed == others, f"the other layers went 8-bit: {sorted(compressed)}")
    check("transformer.wte.weight" in state.policy.table(), state.policy.table())


def main() -> None:
    ckpt_dir = Path(sys.argv[1])
    compile_ = "--no-compile" not in sys.argv
    dist.init_process_group("gloo")
    full = run("compressed", ckpt_dir, compile_=compile_)
    check_names(full.state)
    if compile_:
        from torch._dynamo.utils import counters

        check(counters["stats"]["unique_graphs"] > 0, "torch.compile compiled the model")
    check(full.state.step == MAX_ITERS, f"the hook ran once per optimizer step "
                                        f"({full.state.step} of {MAX_ITERS})")
    dist.barrier()  # rank 0's checkpoint is on disk
    resumed = run("compressed", ckpt_dir, compile_=compile_, resume=True)
    check(min(resumed.losses) == EVAL_EVERY, f"resumed at {EVAL_EVERY}: {sorted(resumed.losses)}")
    check(torch.equal(resumed.weights, full.weights),
          "the resumed run ends on the uninterrupted run's weights, bit for bit (max diff "
          f"{float((resumed.weights - full.weights).abs().max()):.3g})")
    plain = run("ddp", ckpt_dir, compile_=compile_)
    for r in (full, resumed, plain):
        check(same_everywhere(r.weights), "the same weights on every rank")
    c, d = ([sum(x.losses[i] for i in range(a, a + 5)) / 5 for a in range(0, MAX_ITERS, 5)]
            for x in (full, plain))
    check(c[-1] < c[0] - 1.0, f"the loss fell: {c[0]:.3f} -> {c[-1]:.3f}")
    check(all(abs(a - b) <= 0.05 * b + 0.02 for a, b in zip(c, d, strict=True)),
          f"the compressed loss tracks plain DDP's (means of 5 steps):\n  {c}\n  {d}")
    if R == 0:
        print(f"nanogpt loss (means of 5 steps) compressed {[round(v, 3) for v in c]} "
              f"ddp {[round(v, 3) for v in d]} compile={compile_}", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    checks.guarded("nanogpt", main)
    checks.finish()
