"""What keeps a CPU evaluation cheap without changing what it computes: the interpreter patches
triton.language once per launch (not once per helper call per program), and neither a CPU judge
counting FLOPs nor a runner's ATen log imports torch._dynamo (1.3 s of CPU each per evaluation)."""
import json
import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]

_CHECK = r'''
import json, sys
import torch
import triton
import triton.language as tl
import triton.runtime.interpreter as interp

real = []
_orig = interp._patch_lang
interp._patch_lang = lambda fn: (real.append(fn.__name__), _orig(fn))[1]
from aka.evaluate.interp_fix import install
install()


@triton.jit
def _scaled(x, s):
    return x * s


@triton.jit
def _shifted(x, s):
    return _scaled(x, s) + 1.0


@triton.jit
def kernel(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask)
    tl.store(y_ptr + offs, _shifted(x, 2.0) + _scaled(x, 3.0), mask=mask)


before = (tl.core.add, tl.tensor.__add__, getattr(tl.core.tensor, "__index__", None))
x = torch.randn(1000)
y = torch.empty_like(x)
kernel[(8,)](x, y, x.numel(), BLOCK=128)
kernel[(8,)](x, y, x.numel(), BLOCK=128)
after = (tl.core.add, tl.tensor.__add__, getattr(tl.core.tensor, "__index__", None))

from aka.evaluate.guards import AtenLog
from aka.evaluate.judge import _flop_counter
with _flop_counter("cpu")(display=False) as fc:
    torch.randn(8, 16) @ torch.randn(16, 4)
print(json.dumps({"ok": bool(torch.equal(y, x * 2.0 + 1.0 + x * 3.0)), "real": real,
                  "restored": all(a is b for a, b in zip(before, after)),
                  "flops": fc.get_total_flops(), "dynamo": "torch._dynamo" in sys.modules,
                  "atenlog_wrapped": hasattr(AtenLog.__torch_dispatch__, "__wrapped__")}))
'''


def test_cpu_evaluation_patches_once_per_launch_and_never_imports_dynamo():
    env = dict(os.environ, TRITON_INTERPRET="1", PYTHONPATH=str(REPO), CUDA_VISIBLE_DEVICES="")
    p = subprocess.run([sys.executable, "-c", _CHECK], capture_output=True, text=True, env=env, timeout=300,
                       cwd=REPO)
    assert p.returncode == 0, p.stderr[-2000:]
    r = json.loads(p.stdout.splitlines()[-1])
    assert r["ok"]  # helpers called from the body (one from another) compute what they did before
    # one real patching per launch: 8 programs x 3 helper calls each would have been 48 more
    assert r["real"] == ["kernel", "kernel"], r["real"]
    assert r["restored"]  # the launch's own scope still puts triton.language back when it ends
    assert r["flops"] == 2 * 8 * 16 * 4  # the CPU judge's counter still counts
    assert not r["dynamo"] and not r["atenlog_wrapped"]


_PDL = r'''
import json
import torch
import triton
import triton.language as tl
from aka.evaluate.interp_fix import install
install()
from triton.language.extra.cuda import gdc_launch_dependents, gdc_wait


@triton.jit
def producer(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    gdc_launch_dependents()
    tl.store(y_ptr + offs, tl.load(x_ptr + offs, mask=offs < n) * 2.0, mask=offs < n)


@triton.jit
def consumer(y_ptr, z_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    gdc_wait()
    tl.store(z_ptr + offs, tl.load(y_ptr + offs, mask=offs < n) + 1.0, mask=offs < n)


x = torch.randn(300)
y, z = torch.empty_like(x), torch.empty_like(x)
producer[(3,)](x, y, x.numel(), BLOCK=128)
consumer[(3,)](y, z, x.numel(), BLOCK=128, launch_pdl=True)
print(json.dumps({"ok": bool(torch.equal(z, x * 2.0 + 1.0))}))
'''


def test_programmatic_dependent_launch_runs_under_the_interpreter():
    """gdc_wait / gdc_launch_dependents raise under Triton 3.6's interpreter; with the harness's
    fixes a PDL producer-consumer pair (launch_pdl=True) runs and computes what it would on a GPU."""
    env = dict(os.environ, TRITON_INTERPRET="1", PYTHONPATH=str(REPO))
    out = subprocess.run([sys.executable, "-c", _PDL], cwd=REPO, env=env, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    assert json.loads(out.stdout.strip().splitlines()[-1]) == {"ok": True}
    bare = subprocess.run([sys.executable, "-c", _PDL.replace("install()\n", "")], cwd=REPO, env=env,
                          capture_output=True, text=True, timeout=300)
    assert bare.returncode != 0 and "_semantic" in bare.stderr     # what the fix is for
