"""Check every declared parameter value of a knowledge-base kernel (the contract in
knowledge_base/README.md: any listed value must give a correct kernel).

    python -m aka.kb.param_check knowledge_base/kernels/<op>/<name>.py [more kernels ...]

Runs under the Triton interpreter (set TRITON_INTERPRET=1; the worker's interpreter fixes are
installed) in this one process, kernel after kernel (one process for many kernels: starting
Python with torch and triton costs ~4 s of CPU on the 2-core CI machine, more than most kernels'
checks): for each parameter and each listed value other than the
default, the `AKA_PARAMS` line is rewritten, the variant imported, and its outputs compared with
the reference on every small shape of the op, fresh inputs per shape. The default itself goes
through the full sandboxed cascade elsewhere (tests/test_kb_kernels.py); variants differ from it
only in that one line, so correctness is what is left to check. Prints one JSON line per variant
(`param`, `value`, `ok`, `reason`), then one per kernel once it is done (`variants`, `failed`,
`error`: a kernel whose problem or source cannot be loaded); a kernel without that last line was
cut short (the process died).
"""
from __future__ import annotations

import ast
import json
import sys
import tempfile
from pathlib import Path
from aka.util import parse_py


def variants(source: str) -> list[tuple[str, object, str]]:
    """(param, value, source) for each declared value that differs from the default."""
    import yaml
    meta = yaml.safe_load((ast.get_docstring(parse_py(source)) or "").split("---")[1])
    lines = source.splitlines(keepends=True)
    idx = next(i for i, ln in enumerate(lines) if ln.startswith("AKA_PARAMS = {"))
    defaults = ast.literal_eval(lines[idx].split("=", 1)[1].strip())
    out = []
    for key, values in (meta.get("params") or {}).items():
        for v in values:
            if v == defaults.get(key):
                continue
            params = dict(defaults, **{key: v})
            new = lines[:idx] + [f"AKA_PARAMS = {params!r}\n"] + lines[idx + 1:]
            out.append((key, v, "".join(new)))
    return out


def main(paths: list[str]) -> int:
    from aka.evaluate.interp_fix import install
    install()
    failed_kernels = 0
    for nth, path in enumerate(paths):
        done = {"kernel": str(path), "variants": 0, "failed": 0, "error": None}
        try:
            done["variants"], done["failed"] = _check_kernel(Path(path), nth)
        except Exception as e:  # noqa: BLE001 - the next kernel still gets checked
            done["error"] = f"{type(e).__name__}: {str(e)[:300]}"
        failed_kernels += bool(done["failed"] or done["error"])
        print(json.dumps(done), flush=True)
    return 1 if failed_kernels else 0


def _check_kernel(kernel: Path, nth: int) -> tuple[int, int]:
    """(variants checked, variants failed); prints one line per variant."""
    import torch

    from aka.evaluate import compare as cmp
    from aka.evaluate.loader import ProblemRuntime, call, import_file
    from aka.problem import load_problem
    prob = load_problem(kernel.parent.name)
    rt = ProblemRuntime(prob.worker_spec(), "cpu")
    failures = 0
    todo = variants(kernel.read_text())
    with tempfile.TemporaryDirectory() as tmp:
        for n, (key, value, src) in enumerate(todo):
            f = Path(tmp) / f"variant_{n}.py"
            f.write_text(src)
            verdict = {"kernel": str(kernel), "param": key, "value": value, "ok": True, "reason": ""}
            try:
                mod = import_file(f, f"_aka_variant_{nth}_{n}")
                for shape in prob.small_shapes.values():
                    spec = shape.to_json()
                    torch.manual_seed(n)
                    inputs = rt.make_inputs(spec)
                    args, kwargs = rt.init_args(spec)
                    with torch.no_grad():
                        got = call(mod.ModelNew(*args, **kwargs), {k: (v.clone() if isinstance(v, torch.Tensor) else v)
                                                                   for k, v in inputs.items()})
                        want = call(rt.make_reference(spec), inputs)
                    worst, _ = cmp.compare_outputs(got, want, prob.meta)
                    if not worst.ok:
                        verdict.update(ok=False, reason=f"shape {shape.id}: {worst.reason}")
                        break
            except Exception as e:  # noqa: BLE001 - a variant that raises is a failed variant
                verdict.update(ok=False, reason=f"{type(e).__name__}: {str(e)[:300]}")
            failures += not verdict["ok"]
            print(json.dumps(verdict, default=str), flush=True)
    return len(todo), failures


if __name__ == "__main__":
    if len(sys.argv) < 2:
        raise SystemExit("usage: python -m aka.kb.param_check KERNEL.py [KERNEL.py ...]")
    raise SystemExit(main(sys.argv[1:]))
