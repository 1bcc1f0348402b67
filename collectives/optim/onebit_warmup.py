"""OneBitAdam's full-precision steps: the warm-up before the freeze and the refreshes of v
after it. Adam on the averaged gradient (fp16 on the wire, or float32 with "none"), with the
step's flags (refusals, fp16 overflow, the "auto" vote, which parameters had a gradient on
some rank) riding at the end of the same collective."""

from __future__ import annotations

from typing import Any

import torch
from torch.optim.adam import adam

from . import onebit_grads as og


class FullPrecisionSteps:
    """Mixed into :class:`OneBitAdam` (its attributes: comm, t, warmup_compressor, state,
    param_groups, vnorms, schedule, frozen_at, _state, _collective, _wait)."""

    _wire: torch.Tensor | None
    _avg: torch.Tensor | None
    _fused: bool

    def _full_step(self: Any, grads: og.Grads, vote: bool, refresh: bool) -> float:
        """Adam on the averaged gradient (``warmup_compressor``: fp16 or none), weight decay
        added after the average, as torch.optim.Adam on DDP's averaged gradient: torch's own
        Adam arithmetic, its fused kernel where this torch has one for the parameters (one
        pass over them; the per-tensor loop cost about ten times as much on gpt). A parameter
        no rank had a gradient for does not move (torch skips a parameter without one).
        ``refresh``: v, frozen since it was last updated, first stands in for every step
        since then (scaled so that its bias-corrected value is unchanged), then takes this
        step's gradient as Adam's v would at this step. Returns how many ranks ``vote``."""
        avg, votes, counts = self._average(grads, vote)
        if refresh:
            at = self.schedule.v_at(self.t - 1, self.frozen_at)
            for g, p, _ in grads.items:
                b2 = g["betas"][1]
                self._state(p)["exp_avg_sq"].mul_((1 - b2 ** (self.t - 1)) / (1 - b2 ** at))
        for g in self.param_groups:
            chosen = [i for i, (gi, _, _) in enumerate(grads.items)
                      if gi is g and counts[i] > 0.5]
            if not chosen:
                continue
            params = [grads.items[i][1] for i in chosen]
            states = [self._state(p) for p in params]
            # a step count per parameter, one below this step (torch's Adam adds one first)
            steps = [torch.tensor(float(self.t - 1)) for _ in params]
            b1, b2 = g["betas"]
            kwargs = {"amsgrad": False, "beta1": b1, "beta2": b2, "lr": g["lr"],
                      "weight_decay": g["weight_decay"], "eps": g["eps"], "maximize": False}
            lists = (params, [avg[i] for i in chosen], [st["exp_avg"] for st in states],
                     [st["exp_avg_sq"] for st in states], [], steps)
            if self._fused:
                try:
                    adam(*lists, fused=True, **kwargs)
                except RuntimeError:  # no fused kernel for these parameters: the loop
                    self._fused = False
                    for x in steps:
                        x.fill_(float(self.t - 1))
            if not self._fused:
                adam(*lists, foreach=False, **kwargs)
        if not refresh:
            vs = [self.state[p]["exp_avg_sq"].float() for _, p, _ in grads.items
                  if p in self.state]
            norm = float(torch.linalg.vector_norm(torch.stack(torch._foreach_norm(vs)))) \
                if vs else 0.0
            self.vnorms.append(norm / (1 - self.param_groups[0]["betas"][1] ** self.t))
        return votes

    def _average(self: Any, grads: og.Grads, vote: bool
                 ) -> tuple[list[torch.Tensor], float, list[float]]:
        """The ranks' average of the gradients, how many ranks ``vote``, and per parameter how
        many ranks had a gradient, in one collective over kept flat buffers (the flags after
        the gradients, summed, not averaged): with fp16, each gradient divided by the ranks and
        rounded in one pass (the sum cannot overflow), summed, and widened back in one more.
        Where a finite gradient on some rank is too large for that (``og.FP16_SAFE``), every
        rank reads it in the flags and the step's gradients are averaged again in float32."""
        xs = [gr for _, _, gr in grads.items]
        k = sum(x.numel() for x in xs)
        n = k + og.FLAGS + len(xs)
        half = self.warmup_compressor == "fp16"
        if self._wire is None or self._wire.numel() != n:
            dev = xs[0].device if xs else None
            self._wire = torch.empty(n, dtype=torch.float16 if half else torch.float32,
                                     device=dev)
            self._avg = torch.empty(n, dtype=torch.float32, device=dev) if half else self._wire
        wire, flat = self._wire, self._avg
        p, at = self.comm.size, 0
        for x in xs:
            view = wire[at:at + x.numel()].view(x.shape)
            if half:
                torch.mul(x, 1.0 / p, out=view)
            else:
                view.copy_(x)
            at += x.numel()
        tail = og.flags(grads, vote, half and og.overflow(xs), wire)
        wire[k:].copy_(tail if half else tail * p)  # "avg" divides them by p
        self._wait(self._collective("warm-up", wire, op="sum" if half else "avg"))
        if half:
            flat.copy_(wire)
        head = flat[k:].tolist()
        og.refuse(grads, head[og.BAD], self.t)
        if head[og.OVERFLOW] > 0.5:  # a rank's gradient was too large for fp16: float32
            flat = torch.cat([x.reshape(-1).float() for x in xs])
            self._wait(self._collective("warm-up float32", flat, op="avg"))
        out, at = [], 0
        for x in xs:
            out.append(flat[at:at + x.numel()].view(x.shape).to(x.dtype))
            at += x.numel()
        return out, head[og.VOTE], head[og.FLAGS:]
