"""OneBitAdam's steps after the freeze: each rank folds its own gradient into the momentum it
holds, and the ranks average the momenta, compressed for the matrices, in full precision for
the 1-D parameters, then step with the frozen v.

The 1-D parameters' collective goes first and carries the step's flags (refusals, which
parameters had a gradient on some rank); it is started before the matrices' momenta are
folded, so it travels while they are computed."""

from __future__ import annotations

from typing import Any

import torch

from . import onebit_grads as og
from .onebit_settings import adam_bound, denominator


class FrozenSteps:
    """Mixed into :class:`OneBitAdam` (its attributes: comm, t, schedule, frozen_at,
    feedback, _state, _collective, _wait)."""

    _flat_frozen: tuple[torch.Tensor, ...] | None
    _vector_denoms: list[torch.Tensor] | None

    def _compressed_step(self: Any, grads: og.Grads) -> None:
        """Fold this rank's gradient into the momentum, average the momenta (compressed for
        matrices, masked where v froze at zero), and step with the frozen v. A parameter no
        rank had a gradient for does not move, and its momentum stays."""
        items = grads.items
        vec = [i for i, (_, p, _) in enumerate(items) if p.dim() < 2]
        mat = [i for i, (_, p, _) in enumerate(items) if p.dim() >= 2]
        moms = [self._state(items[i][1])["exp_avg"].lerp(items[i][2], 1 - items[i][0]["betas"][0])
                for i in vec]
        tail = og.flags(grads, False, False, items[0][1] if items else None) * self.comm.size
        flat = torch.cat([m.reshape(-1).float() for m in moms] + [tail])
        handle = self._collective("vectors", flat, op="avg")
        folded = self._fold([items[i] for i in mat]) if mat else None
        self._wait(handle)
        nv = flat.numel() - tail.numel()
        head = flat[nv:].tolist()
        og.refuse(grads, head[og.BAD], self.t)
        counts = head[og.FLAGS:]
        if folded is not None:
            self._matrices([items[i] for i in mat], [counts[i] > 0.5 for i in mat], folded)
        if vec:
            self._vectors([items[i] for i in vec], [counts[i] > 0.5 for i in vec], moms,
                          flat[:nv])

    def _fold(self: Any, grads: list[tuple[dict, torch.Tensor, torch.Tensor]]
              ) -> tuple[torch.Tensor, list[tuple[torch.Tensor, ...]], float]:
        """The matrices' momenta, folded straight into one flat buffer in Adam's units
        m / (sqrt(v_hat) + eps) (a multiply by the frozen reciprocal, zero where v is zero):
        the buffer, each parameter's (units, denominator, mask) views, and the clip bound."""
        buf, scale, keep, denom, bound = self._frozen([(g, p) for g, p, _ in grads])
        views, at = [], 0
        for g, p, grad in grads:
            view = buf[at:at + p.numel()].view(p.shape)
            torch.lerp(self._state(p)["exp_avg"].float(), grad.float(), 1 - g["betas"][0],
                       out=view)
            views.append((view, denom[at:at + p.numel()].view(p.shape),
                          keep[at:at + p.numel()].view(p.shape)))
            at += p.numel()
        buf.mul_(scale)
        return buf, views, bound

    def _matrices(self: Any, grads: list[tuple[dict, torch.Tensor, torch.Tensor]],
                  moving: list[bool], folded: tuple) -> None:
        """Clip the folded units (:meth:`_fold`), average them compressed; then each
        parameter moves by its averaged units times the step size (Adam's m / denominator,
        without dividing again) and keeps units times the denominator as its momentum. Five
        passes over the momenta besides the collective, and no allocation: the frozen arrays
        and the buffer are kept."""
        buf, views, bound = folded
        for (units, _, _), moves in zip(views, moving, strict=True):
            if not moves:  # no rank had a gradient: nothing of it is sent (its residual is)
                units.zero_()
        # Adam's bound clips what a tiny frozen v makes of a finite gradient; a non-finite
        # one on this rank is sent as it is, never clipped to a finite value: the weights turn
        # non-finite as Adam's would. A finite sum (one fast pass) says there is none.
        if bool(buf.sum().isfinite()):
            buf.clamp_(-bound, bound)
        else:
            torch.where(buf.isfinite(), buf.clamp(-bound, bound), buf, out=buf)
        self._wait(self._collective("momenta", buf, op="avg",
                                    compressor=self.feedback.compressor, feedback=self.feedback,
                                    name="onebit", step=self.t))
        # masked by ``keep`` (a masked coordinate's average may hold the others' rounding),
        # and the momentum by the denominator zeroed there: one pass each
        for (g, p, _), (units, d, k), moves in zip(grads, views, moving, strict=True):
            if not moves:
                continue
            step_size = -g["lr"] / (1 - g["betas"][0] ** self.t)
            m = self._state(p)["exp_avg"]
            if p.dtype == units.dtype and m.dtype == units.dtype and m.is_contiguous():
                p.addcmul_(units, k, value=step_size)
                torch.mul(units, d, out=m)
            else:
                p.add_((units * k).to(p.dtype), alpha=step_size)
                m.copy_(units * d)

    def _vectors(self: Any, grads: list[tuple[dict, torch.Tensor, torch.Tensor]],
                 moving: list[bool], moms: list[torch.Tensor], flat: torch.Tensor) -> None:
        """Adam's step of the 1-D parameters with their averaged momenta (``flat``) and the
        frozen denominators (computed at the first step after the freeze or a refresh)."""
        if self._vector_denoms is None:
            self._vector_denoms = [
                denominator(self._state(p)["exp_avg_sq"], self._corr2(g), g["eps"])
                for g, p, _ in grads]
        at = 0
        for (g, p, _), m, d, moves in zip(grads, moms, self._vector_denoms, moving, strict=True):
            if moves:
                st = self._state(p)
                st["exp_avg"].copy_(flat[at:at + m.numel()].view_as(m))
                p.addcdiv_(st["exp_avg"], d, value=-g["lr"] / (1 - g["betas"][0] ** self.t))
            at += m.numel()

    def _corr2(self: Any, g: dict) -> float:
        """v's bias correction: 1 - beta2 ** (the step v was last updated at)."""
        return 1 - g["betas"][1] ** self.schedule.v_at(self.t, self.frozen_at)

    def _frozen(self: Any, params: list[tuple[dict, torch.Tensor]]
                ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor, float]:
        """Over ``params`` ((group, parameter) pairs, flat in their order), from the frozen
        v, kept from the freeze (or the last refresh) on: the flat buffer the momenta are
        averaged in, the reciprocal of Adam's denominator sqrt(v_hat) + eps and the
        denominator (both zero where v is zero), where v is above zero (1.0, else 0.0); and
        the largest |m| / sqrt(v) Adam itself can reach."""
        n = sum(p.numel() for _, p in params)
        if self._flat_frozen is None or self._flat_frozen[0].numel() != n:
            vs = [(g, self._state(p)["exp_avg_sq"]) for g, p in params]
            mask = torch.cat([v.reshape(-1) > 0 for _, v in vs])
            denom = torch.cat([denominator(v, self._corr2(g), g["eps"]).reshape(-1)
                               for g, v in vs]).float().clamp_(min=1e-30)
            zero = torch.zeros_like(denom)
            scale = torch.where(mask, denom.reciprocal(), zero)
            self._flat_frozen = (torch.empty_like(denom), scale, mask.float(),
                                 torch.where(mask, denom, zero))
        bound = max(adam_bound(*g["betas"]) for g, _ in params)
        return (*self._flat_frozen, bound)
