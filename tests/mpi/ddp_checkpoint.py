"""CompressionState.state_dict round trip: resuming gives the same steps as not stopping.

Run: mpiexec -n P python tests/mpi/ddp_checkpoint.py
"""

from __future__ import annotations

import copy
import io

import torch
import torch.distributed as dist
from ddp_common import init_gloo, make, train

import collectives.ddp as cddp
from collectives.costmodel import CostParams
from collectives.policy import AutoPolicy, Rules

from common import WORLD, Checker

SLOW = CostParams(alpha=5e-5, beta=8e-9, gamma=1e-10)
POLICIES = {
    "uniform8": lambda: "uniform:bits=8",
    "rules": lambda: Rules([("numel<100", "none"), ("kind=embedding", "topk:ratio=0.1"),
                            ("kind=conv", "powersgd:rank=2"), ("*", "uniform:bits=4")]),
    # (the models here train with SGD; no timed trial: a resumed run must decide alike)
    "auto": lambda: AutoPolicy(first=1, probe_steps=1, every=1000, cost=SLOW, min_numel=0,
                               optimizer="sgd", trial_steps=0),
    # a sparsifier's span group (1-D layers are its holes): its residual saved by parameter
    "span": lambda: Rules([("kind=1d", "none"), ("*", "topk:ratio=0.3")]),
    # compressors that see each parameter alone or elementwise: independent of the bucketing
    "per-layer": lambda: Rules([("kind=conv", "powersgd:rank=2"),
                                ("kind=linear", "powersgd:rank=1"), ("*", "fp16")]),
}


def setup(policy, cap: float = 25.0, **kw):
    model = make(cap)
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    state = cddp.CompressionState(policy=policy(), start_step=1, **kw).bind(model)
    model.register_comm_hook(state, cddp.compression_hook)
    return model, opt, state


def roundtrip(obj):
    buf = io.BytesIO()
    torch.save(obj, buf)
    buf.seek(0)
    return torch.load(buf, weights_only=False)


def resume(chk: Checker, key: str, cap: float) -> None:
    # auto's "auto" allreduces pick an algorithm from this machine's timings, which can differ
    # between the two runs (another order of additions): pinned to the ring
    kw = {"plain": "ring", "algorithm": "ring"} if key == "auto" else {}
    model, opt, state = setup(POLICIES[key], cap, **kw)
    train(model, opt, range(4))
    saved = roundtrip({"model": copy.deepcopy(model.module.state_dict()),
                       "opt": copy.deepcopy(opt.state_dict()), "hook": state.state_dict()})
    train(model, opt, range(4, 7))  # not stopping
    fresh, opt2, state2 = setup(POLICIES[key], cap, **kw)
    fresh.module.load_state_dict(saved["model"])
    opt2.load_state_dict(saved["opt"])
    state2.load_state_dict(saved["hook"])
    chk.check(state2.step == 4 and state2.residuals_restored, f"{key}: counters restored")
    train(fresh, opt2, range(4, 7))  # resumed
    for (name, a), b in zip(model.module.named_parameters(), fresh.module.parameters(),
                            strict=True):
        gap = float((a - b).detach().abs().max())
        # auto's compressed groups take their scheme from timings of this machine (the fit,
        # the codec's speed), which may order the sums otherwise in the resumed run: bounded
        same = gap <= 1e-4 if key == "auto" else torch.equal(a, b)
        chk.check(same, f"{key} cap={cap}: {name} differs after resuming by {gap}")
    if key == "auto":
        chk.check(state2.policy.decisions == state.policy.decisions, "auto: decisions kept")
        chk.check(state2.policy.measured == state.policy.measured is not None,
                  "auto: measured latencies kept")
    if key == "uniform8":  # DDP's rebuilt order, which the resumed first iteration lays out by
        names = {n for n, _ in model.module.named_parameters()}
        chk.check(set(saved["hook"]["layout"]) == names and state2.layout == state.layout,
                  f"layout saved and restored: {saved['hook']['layout']}")
    if key == "rules":
        q = saved["hook"]["powersgd_q"]
        chk.check(any("conv.weight" in w for w in q.values()), f"powersgd Q saved: {q.keys()}")


#: A link so slow (1 Mbit/s) that bytes outweigh any codec time this machine measures.
CRAWL = CostParams(alpha=5e-5, beta=8e-6, gamma=1e-10)


def _auto_free() -> AutoPolicy:
    """Collectives priced free, on a link where bytes outweigh the codec's time on any
    machine (and no cached codec speeds): this policy compresses (residuals to save)."""
    return AutoPolicy(first=1, probe_steps=1, every=1000, cost=CRAWL, latency=0.0,
                      min_numel=0, optimizer="sgd", trial_steps=0, cache=False)


def other_world_size(chk: Checker) -> None:
    model, opt, state = setup(_auto_free)
    train(model, opt, range(4))
    sd = state.state_dict()
    chk.check(bool(sd["residuals"]), "residuals saved")
    sd["world_size"] = WORLD.size + 1
    _, _, state2 = setup(_auto_free)
    state2.load_state_dict(sd)
    chk.check(not state2.residuals_restored and not state2._pool, "residuals reset")
    chk.check(state2.step == 4 and state2.policy.decisions == state.policy.decisions,
              "step and decisions kept at another world size")
    everyone = WORLD.allgather(state.state_dict())
    _, _, state3 = setup(_auto_free)
    state3.load_state_dict(everyone)  # one list of every rank's dicts: each takes its own
    chk.check(state3.residuals_restored and set(state3._pool) == set(sd["residuals"]),
              "a list of every rank's dicts")


def other_segmenting(chk: Checker) -> None:
    """Owner-side residuals saved under other segment settings are not restored in the wrong
    order: they start from zero; everything else is restored."""
    from collectives.config import defaults

    rsag = {"scheme": "reduce_scatter_allgather"}  # the scheme with owner-side residuals
    model, opt, state = setup(POLICIES["uniform8"], 25.0, **rsag)
    train(model, opt, range(3))
    sd = state.state_dict()
    chk.check(bool(sd["owner_residuals"]), "owner residuals saved")
    saved = defaults.compressed_segment_bytes
    defaults.compressed_segment_bytes = saved * 2
    try:
        _, _, state2 = setup(POLICIES["uniform8"], 25.0, **rsag)
        state2.load_state_dict(sd)
        owners = [k for _, _, fb in state2.session.feedbacks() for k in fb.residuals
                  if "@owner" in k]
        chk.check(not owners and state2.residuals_restored and state2.step == 3,
                  f"other segmenting: owner residuals dropped ({owners}), the rest restored")
    finally:
        defaults.compressed_segment_bytes = saved


def device_residuals(chk: Checker) -> None:
    """Residuals a device codec keeps in device memory (here the fake device's host memory)
    are what ``state_dict`` saves, and what follows a tensor when a policy change moves it:
    the device copy, not the stale host one it was seeded from."""
    from compressors import device_feedback

    from fake_cuda import HostCodec, host_view

    model, opt, state = setup(POLICIES["uniform8"])
    train(model, opt, range(3))
    group = next(g for _, gs in state._groups.values() for g in gs)
    fb = state.feedback(group.spec)
    name, host = group.name, fb.residuals[group.name]
    codec = HostCodec(fb.compressor)
    dev, fresh = device_feedback.device_residual(codec, fb, name, host.size)
    chk.check(not fresh and bool((host_view(dev) == host).all()), "device residual seeded")
    host_view(dev)[:] = 0.5 + WORLD.rank  # what device steps would have left there
    saved = state.state_dict()["residuals"]
    pieces = group.pieces(host_view(dev))
    chk.check(all(bool((saved[k] == v).all()) for k, v in pieces.items()),
              "state_dict saved the host residual, not the device one")
    state._release([group])  # as a policy change does: the residual goes back to the pool
    chk.check(all(bool((state._pool[k] == v).all()) for k, v in pieces.items()),
              "a released group's device residual did not reach the pool")
    chk.check(name not in device_feedback._residuals.get(fb, {}),
              "a released group's device residual is still held")
    state.close()


def main() -> None:
    chk = Checker("ddp checkpoint")
    init_gloo()
    for key in POLICIES:
        chk.run(f"resume {key}", resume, chk, key, 25.0)
    # DDP's first iteration after a resume uses its initial buckets; fused blockwise
    # quantizers then see other buffers, so only bucketing-independent policies resume
    # exactly across several buckets (see collectives/ddp/checkpoint.py)
    chk.run("resume with several buckets", resume, chk, "per-layer", 0.004)
    chk.run("other world size", other_world_size, chk)
    chk.run("other segmenting", other_segmenting, chk)
    chk.run("device residuals", device_residuals, chk)
    try:
        cddp.CompressionState(policy="uniform8").load_state_dict({"version": 0})
        chk.check(False, "a foreign dict was accepted")
    except ValueError as exc:
        chk.check("uniform8" in str(exc) or "version" in str(exc), str(exc))
    dist.barrier()
    dist.destroy_process_group()
    chk.finish()


if __name__ == "__main__":
    main()
