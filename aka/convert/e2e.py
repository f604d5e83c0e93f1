"""End-to-end time of a converted model: the original eagerly, torch.compile of the original, and
the model patched with a library's kernels (and that patched model under torch.compile), each
replayed from a CUDA graph, so that launch overhead is the same zero for all of them and the
figure is the GPU work a serving step with graphs would pay.

    aka convert apply examples.llama_block:factory:size=realistic --library lib/ --device cuda --time

The same timer as `aka eval` (aka/evaluate/timing.py): rotating input sets (inputs evicted from
the L2 between reuses; the weights, hundreds of MB, never fit in it), samples in rounds with the
order rotated each round, medians with 95% CIs, and every timed region under the harness's
exclusive GPU lock, so a batch sharing the GPU does not leak into it. Each variant is checked
against the original's output on the same inputs before its time is believed (a patched model
that computes something else is not faster; apply.exact_check says when a composite's rounding may
leave the ops' band, and torch.compile's original, the peer, is timed either way with its deviation
reported). The patched model is the one `apply` builds and
checks; an implementation that fails (no graph capture, a compile error) is reported with its
error instead of a time.
"""
from __future__ import annotations

import copy
import functools
import math


def _fresh_sets(inputs: dict, n: int, seed: int) -> list[dict]:
    """n input dicts shaped like `inputs`: new values for floating-point tensors (same mean and
    spread), the integer tensors (positions, ids) shared, as the benchmark's sets share them."""
    import torch
    g = torch.Generator(device="cpu").manual_seed(seed)
    sets = [inputs]
    for _ in range(1, n):
        s = {}
        for k, t in inputs.items():
            if isinstance(t, torch.Tensor) and t.is_floating_point():
                std = float(t.float().std()) if t.numel() > 1 else 1.0
                mean = float(t.float().mean())
                s[k] = (torch.randn(t.shape, generator=g) * std + mean).to(device=t.device, dtype=t.dtype)
            else:
                s[k] = t
        sets.append(s)
    return sets


def _set_count(inputs: dict, l2_bytes: int) -> int:
    from aka.evaluate.timing import MAX_SETS, _tensors_bytes
    per = max(1, _tensors_bytes(inputs))
    return max(2, min(MAX_SETS, math.ceil(3 * l2_bytes / per)))


def time_model(factory: str, library: str, device: str = "cuda", *, compile_patched: bool = True,
               lock_root: str | None = None) -> dict:
    """{"variants": {name: {median_us, ci_us, n, method} | {error}}, "speedup": {...}, "patch": PatchReport
    JSON, "sets": n}. Needs a CUDA device."""
    import torch
    from aka.convert.apply import ApplyError, apply, exact_check, float64_reference
    from aka.convert.fallbacks import call_factory
    from aka.evaluate.gpulock import GpuLock, NoLock, gpu_key
    from aka.evaluate.stats import median_ci
    from aka.evaluate.timing import Impl, ShapeTimer
    if not device.startswith("cuda") or not torch.cuda.is_available():
        raise ApplyError("end-to-end timing needs a CUDA GPU (CUDA graphs); on CPU `apply` checks outputs only")
    model, (args, kwargs), _ = call_factory(factory.removeprefix("model:"), device)
    if args:
        raise ApplyError("end-to-end timing takes a factory whose example inputs are keyword arguments")
    # serving is inference: no variant records an autograd graph (with parameters that require grad,
    # torch.compile traced a training forward and the patched block under compile failed: its
    # custom ops have no backward; H200, 2026-12-03)
    model.eval().requires_grad_(False)
    patched = copy.deepcopy(model)
    report = apply(patched, library, check_inputs=kwargs)
    if not report.patched:
        raise ApplyError(f"nothing in {library} patches this model: nothing to time")
    torch._dynamo.reset()
    impls = [Impl("eager", model), Impl("compile", torch.compile(copy.deepcopy(model))), Impl("patched", patched)]
    if compile_patched:
        impls.append(Impl("patched+compile", torch.compile(patched)))
    props = torch.cuda.get_device_properties(torch.device(device))
    l2 = int(getattr(props, "L2_cache_size", 50 << 20))
    sets = _fresh_sets(kwargs, _set_count(kwargs, l2), seed=1234)
    # every variant on a fresh input against the original's output there: what is timed computes the same
    with torch.no_grad():
        ref = model(**sets[-1])
    tol = report.tolerance or {"atol": 0.0, "rtol": 0.0, "rel_norm": 0.0}
    checks, deviates = {}, {}
    # the original in float64 on the same inputs, made once if a check needs it
    exact_ref = functools.cache(lambda: float64_reference(model, (), sets[-1]))
    for impl in impls[1:]:
        try:
            with torch.no_grad():
                res = exact_check(impl.model(**sets[-1]), ref, exact_ref, tol)
            checks[impl.name] = res
            if not res["ok"]:
                if impl.name == "compile":  # the peer a user would otherwise run: timed, its deviation said
                    deviates[impl.name] = f"torch.compile's own output is outside the ops' band: {res['reason']}"
                else:
                    impl.error = f"output differs from the original's: {res['reason']}"
        except Exception as e:  # noqa: BLE001 - reported per variant, the others are still timed
            impl.error = f"{type(e).__name__}: {str(e)[:200]}"
    gpu = NoLock()
    if lock_root:
        gpu = GpuLock(lock_root, gpu_key(device), drain=torch.cuda.synchronize)
    timer = ShapeTimer([i for i in impls if not i.error], sets, l2)
    timer.first_calls(gpu=gpu)
    with gpu.shared("warm"):
        timer.warm()
    timer.run(gpu)
    variants = {}
    for impl in impls:
        if impl.samples:
            med, lo, hi = median_ci(impl.samples)
            variants[impl.name] = {"median_us": med, "ci_us": [lo, hi], "n": len(impl.samples),
                                   "method": impl.method, "eager_call_us": impl.eager_call_us,
                                   **({"note": impl.note} if impl.note else {}),
                                   **({"deviates": deviates[impl.name]} if impl.name in deviates else {})}
        else:
            variants[impl.name] = {"error": impl.error or "not timed"}
    speed = {}
    for base in ("eager", "compile"):
        b = variants.get(base, {}).get("median_us")
        for name in ("patched", "patched+compile"):
            t = variants.get(name, {}).get("median_us")
            if b and t:
                speed[f"{name}_vs_{base}"] = b / t
    return {"factory": factory, "library": str(library), "device": torch.cuda.get_device_name(torch.device(device)),
            "sets": len(sets), "variants": variants, "speedup": speed, "checks": checks,
            "patch": report.to_json(), "torch": torch.__version__}


def table(res: dict) -> str:
    rows = [f"end-to-end, CUDA graph replay, {res['sets']} rotating input sets ({res['device']}):"]
    for name, v in res["variants"].items():
        if "median_us" in v:
            lo, hi = v["ci_us"]
            rows.append(f"  {name:<16} {v['median_us']:10.1f} us  [{lo:.1f}, {hi:.1f}]  n={v['n']} {v['method']}")
            if v.get("deviates"):
                rows.append(f"  {'':<16} deviates: {v['deviates']}")
        else:
            rows.append(f"  {name:<16} not timed: {v['error']}")
    rows += [f"  {k}: {s:.3f}x" for k, s in res["speedup"].items()]
    return "\n".join(rows)
