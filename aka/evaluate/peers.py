"""The op's peer inside the judge: checked against the reference like a candidate, then timed
beside the baselines (aka/peers/__init__.py says what a peer is).

A peer is trusted library code, so it runs here, in the judge's process, like the reference; it
never goes through the runner. It still has to earn its place: per shape, the same fresh draws
(at least 3), the same outlier draw and the same comparator (compare.compare_outputs with the
op's meta.json tolerances) a candidate meets, and it must leave its inputs as it found them. A
peer that fails is recorded (`peer_status` "incorrect" with the reason) and not timed: a library
that computes something else is not a peer. A peer that raises is "error"; one that cannot run on
this machine (library not installed, GPU-only on a CPU) is "unavailable", with the reason.
"""
from __future__ import annotations

import torch

from aka.evaluate import compare as cmp
from aka.evaluate.loader import call
from aka.evaluate.tensors import same_bits

PEER_SEED = 70_000   # the peer's draws are its own, not the candidate's


def peer_stage(judge, shapes) -> None:
    """Check the op's peer on every shape; fills judge.peer (the module factory) and
    judge.peer_ok (shape ids whose check passed), the result's env["peer"] and each shape's
    peer_status / peer_reason / peer_rel_err."""
    from aka.peers import PeerError, describe, peer_class, peer_of, unavailable
    judge.peer, judge.peer_ok = None, set()
    if not judge.cfg.peer:
        return
    try:
        info = peer_of(judge.meta)
    except PeerError as e:
        judge.res.notes.append(f"peer: {e}")
        return
    if info is None:
        return
    env = describe(info)
    judge.res.env["peer"] = env
    why = unavailable(info, judge.device)
    if why:
        env["unavailable"] = why
        for s in shapes:
            sr = judge.shape_results[s.id]
            sr.peer_status, sr.peer_reason = "unavailable", why
        return
    cls = peer_class(info)
    judge.peer = cls
    judge.progress("peer")
    for si, shape in enumerate(shapes):
        sr = judge.shape_results[shape.id]
        judge.progress("peer", shape.id)
        try:
            with judge.gpu.shared("peer"):
                worst = check_shape(judge, cls, shape, si)
        except Exception as e:  # noqa: BLE001 - a library call that raises is the peer's failure, said
            sr.peer_status, sr.peer_reason = "error", f"{type(e).__name__}: {str(e)[:300]}"
            continue
        finally:
            judge.release_memory()
        sr.peer_rel_err = worst.rel_err
        if worst.ok:
            sr.peer_status = "pass"
            judge.peer_ok.add(shape.id)
        else:
            sr.peer_status, sr.peer_reason = "incorrect", worst.reason


def check_shape(judge, cls, shape, si: int):
    """The candidate's correctness and outlier draws, for the peer. Returns the worst comparison
    (its .ok False at the first draw that fails)."""
    torch.manual_seed(judge.cfg.seed)
    ref = judge.rt.make_reference(shape.to_spec)
    peer = cls(ref).to(judge.device).eval()
    draws = max(3, int(judge.cfg.draws))
    outliers = (judge.meta.get("outliers") or {}).get("enabled", True) and judge.cfg.outliers
    plan = [(d, False) for d in range(draws)] + ([(draws, True)] if outliers else [])
    worst = None
    for d, with_outliers in plan:
        seed = int(judge.cfg.seed) + PEER_SEED + 1000 * si + d
        inputs, pristine = judge.fresh_inputs(shape, seed, with_outliers)
        with torch.no_grad():
            got = call(peer, inputs)
            want = call(ref, {k: (v.clone() if isinstance(v, torch.Tensor) else v) for k, v in pristine.items()})
            names = cmp.terms_inputs(judge.meta) if with_outliers else []
            terms = call(ref, cmp.abs_inputs(pristine, names)) if names else None
        judge.sync()
        mutated = set(judge.meta.get("mutates", []))
        for name, t in inputs.items():
            if isinstance(t, torch.Tensor) and name not in mutated and not same_bits(t, pristine[name]):
                return _Failed(f"draw {d}: the peer modified its input {name!r}")
        res, _ = cmp.compare_outputs(got, want, judge.meta, outliers=with_outliers, terms=terms)
        if worst is None or res.rel_err > worst.rel_err or not res.ok:
            worst = res
        if not res.ok:
            res.reason = f"{'outlier draw' if with_outliers else f'draw {d}'}: {res.reason}"
            return res
        del got, want, inputs, pristine, terms
        judge.gpu.breathe()
    return worst


class _Failed:
    def __init__(self, reason: str):
        self.ok, self.reason, self.rel_err = False, reason, float("nan")


def peer_impl(judge, shape, ref):
    """The timed peer of this shape (an Impl beside eager and compile), None when it has none or
    its check failed."""
    from aka.evaluate.timing import Impl
    if getattr(judge, "peer", None) is None or shape.id not in getattr(judge, "peer_ok", ()):
        return None
    try:
        return Impl("peer", judge.peer(ref).to(judge.device).eval())
    except Exception as e:  # noqa: BLE001 - it was built for its check: said, not fatal
        judge.res.notes.append(f"shape {shape.id}: peer not timed ({type(e).__name__}: {str(e)[:200]})")
        return None
