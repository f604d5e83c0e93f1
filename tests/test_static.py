"""Static rules (aka/evaluate/static.py): each fires on a minimal snippet; honest kernels pass all."""
from __future__ import annotations

from pathlib import Path

import pytest

from aka.evaluate.static import ALLOWED_IMPORTS, RULES, check_source

CANDS = Path(__file__).resolve().parent / "fixtures" / "candidates"

# A complete, clean candidate; each case appends one offending line inside forward or at module level.
BASE = '''import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def add_kernel(a_ptr, b_ptr, c_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(c_ptr + offs, tl.load(a_ptr + offs, mask=mask) + tl.load(b_ptr + offs, mask=mask), mask=mask)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()
        self.scale = 1.0

    def forward(self, a, b):
        c = torch.empty_like(a)
        add_kernel[(triton.cdiv(a.numel(), 1024),)](a, b, c, a.numel(), BLOCK=1024)
        return c
'''
BASE_LINES = BASE.count("\n")


def with_line(snippet: str) -> str:
    return BASE + snippet + "\n"


def rules_of(src: str) -> dict[str, list[int]]:
    out: dict[str, list[int]] = {}
    for v in check_source(src).violations:
        out.setdefault(v.rule, []).append(v.line)
    return out


# (rule, snippet appended at module level after BASE)
CASES = [
    ("module-table", "mods = torch.sys.modules"),
    ("module-table", "o = triton.runtime.jit.os"),
    ("module-table", "b = torch.sys.modules['builtins']"),
    ("import", "import os"),
    ("import", "import numpy as np"),
    ("import", "from pathlib import Path"),
    ("import", "from . import sibling"),
    ("import", "import aka.evaluate.compare"),
    ("import", "import reference"),
    ("import", "import threading"),
    ("import", "import ctypes"),
    ("builtin", "eval('1 + 1')"),
    ("builtin", "exec('x = 1')"),
    ("builtin", "compile('1', 'f', 'eval')"),
    ("builtin", "open('reference.py')"),
    ("builtin", "getattr(torch, 'add')"),
    ("builtin", "setattr(torch, 'add', None)"),
    ("builtin", "G = globals()"),
    ("builtin", "V = vars(torch)"),
    ("builtin", "breakpoint()"),
    ("builtin", "__import__('os')"),
    ("dunder", "C = torch.Tensor.__dict__"),
    ("dunder", "K = add_kernel.__class__"),
    ("dunder", "B = __builtins__"),
    ("dunder", "F = add_kernel.__globals__"),
    ("monkeypatch", "torch.add = lambda *a: a[0]"),
    ("monkeypatch", "torch.Tensor.sum = lambda self: self"),
    ("monkeypatch", "triton.jit = None"),
    ("monkeypatch", "del torch.add"),
    ("monkeypatch", "add_kernel.fn = None"),
    ("monkeypatch", "torch.x: int = 1"),
    ("monkeypatch", "torch.y += 1"),
    ("torch-compile", "f = torch.compile(lambda x: x)"),
    ("torch-compile", "d = torch._dynamo"),
    ("torch-compile", "i = torch._inductor"),
    ("stream", "s = torch.cuda.Stream()"),
    ("stream", "ctx = torch.cuda.stream(None)"),
    ("stream", "torch.cuda.set_stream(None)"),
    ("stream", "e = torch.cuda.ExternalStream(0)"),
    ("rng", "torch.manual_seed(0)"),
    ("rng", "torch.cuda.manual_seed_all(0)"),
    ("rng", "g = torch.Generator()"),
    ("rng", "st = torch.get_rng_state()"),
    ("rng", "torch.random.set_rng_state(None)"),
    ("rng", "s = torch.initial_seed()"),
    ("rng", "torch.seed()"),
    ("global-state", "torch.set_default_dtype(torch.float64)"),
    ("global-state", "b = torch.backends.cudnn.benchmark"),
    ("global-state", "torch.use_deterministic_algorithms(True)"),
    ("global-state", "torch.set_float32_matmul_precision('high')"),
    ("global-state", "k = triton.knobs"),
    ("host-compute", "v = torch.ones(3).numpy()"),
    ("host-compute", "v = torch.ones(3).tolist()"),
    ("host-compute", "t = torch.from_numpy(None)"),
    ("io", "torch.save({}, 'x.pt')"),
    ("io", "w = torch.load('x.pt')"),
    ("io", "t = torch.from_file('x', size=3)"),
    ("io", "m = torch.utils.cpp_extension.load_inline('m', '')"),
    ("io", "c = torch._C"),
    ("io", "op = torch.ops.aten.add"),
    ("io", "lib = torch.library"),
    ("io", "h = torch.hub"),
    ("profiler", "p = torch.profiler.profile()"),
    ("profiler", "ms = triton.testing.do_bench(lambda: None)"),
    ("profiler", "e = torch.cuda.Event(enable_timing=True)"),
    ("launch-hook", "add_kernel.add_pre_run_hook(print)"),
    ("launch-hook", "c = triton.Config({}, pre_hook=print)"),
    ("string-dunder", "k = '__globals__'"),
]


@pytest.mark.parametrize("rule,snippet", CASES, ids=[f"{r}:{s[:30]}" for r, s in CASES])
def test_rule_fires_on_the_offending_line(rule, snippet):
    found = rules_of(with_line(snippet))
    assert rule in found, (snippet, found)
    assert BASE_LINES + 1 in found[rule]
    report = check_source(with_line(snippet))
    assert not report.ok and f"[{rule}]" in report.summary()


def test_every_rule_has_a_case():
    # kernel-call is covered by test_non_jit_call_inside_a_kernel_is_flagged
    covered = {r for r, _ in CASES} | {"syntax", "no-model", "no-kernel", "kernel-call"}
    assert covered == set(RULES)


def test_syntax_error_is_reported_with_its_line():
    report = check_source(BASE + "def broken(:\n")
    assert not report.ok and report.syntax_error
    assert f"line {BASE_LINES + 1}" in report.syntax_error
    assert [v.rule for v in report.violations] == ["syntax"]


def test_no_model_and_no_kernel():
    no_model = BASE.replace("class ModelNew", "class Helper")
    assert "no-model" in rules_of(no_model) and check_source(no_model).model_class is None
    no_kernel = "import torch\nimport torch.nn as nn\n\n\nclass ModelNew(nn.Module):\n" \
                "    def forward(self, x):\n        return x * 2\n"
    assert set(rules_of(no_kernel)) == {"no-kernel"}


def test_model_class_and_kernels_are_reported():
    report = check_source(BASE)
    assert report.ok and report.model_class == "ModelNew" and report.kernels == ["add_kernel"]
    as_model = check_source(BASE.replace("class ModelNew", "class Model"))
    assert as_model.ok and as_model.model_class == "Model"
    autotuned = BASE.replace("@triton.jit", "@triton.autotune(configs=[triton.Config({})], key=['n'])\n@triton.jit")
    assert check_source(autotuned).ok


def test_what_glue_needs_is_allowed():
    ok_lines = [
        "import math", "from functools import lru_cache", "import triton.language.extra.libdevice",
        "x = torch.empty(3).view(-1).contiguous()", "y = tl.load", "z = self_like = 1",
        "class Glue(nn.Module):\n    def f(self):\n        self.cache = {}\n        self.cache['k'] = 1\n        self.w[0] = 2",
        "n = torch.ones(2).numel()", "d = torch.device('cpu')",
    ]
    for line in ok_lines:
        assert check_source(with_line(line)).ok, (line, check_source(with_line(line)).summary())
    assert {"torch", "triton", "triton.language", "math"} <= ALLOWED_IMPORTS


def test_honest_fixture_candidates_pass_every_rule():
    files = sorted((CANDS / "honest").glob("*.py"))
    assert len(files) >= 7
    for p in files:
        report = check_source(p.read_text(), p.name)
        assert report.ok, (p.name, report.summary())
        assert report.model_class == "ModelNew" and report.kernels


def test_summary_is_capped():
    src = BASE + "".join(f"import os{i}\n" for i in range(9))
    report = check_source(src)
    assert len(report.violations) == 9 and "and 4 more" in report.summary(limit=5)


# Closed gaps: each was a way past the rules that the adversarial suite turned into a passing cheat.
@pytest.mark.parametrize("snippet", [
    "class P(nn.Module):\n    def __init__(self):\n        super().__init__()\n        self.T = torch.Tensor\n"
    "        self.T.detach = lambda t: t",
    "def patch(self, f):\n    self.detach = f\npatch(torch.Tensor, None)",
])
def test_monkeypatch_through_self_alias_is_flagged(snippet):
    assert "monkeypatch" in rules_of(with_line(snippet))


@pytest.mark.parametrize("snippet", [
    "import operator\nG = operator.attrgetter('__globals__')(add_kernel)",
    "import operator\nS = operator.methodcaller('__setattr__', 'x', 1)",
    "import typing\ndef f(x: \"__import__('os')\"): pass\ntyping.get_type_hints(f)",
])
def test_string_smuggled_dunders_are_flagged(snippet):
    assert not check_source(with_line(snippet)).ok


@pytest.mark.parametrize("snippet", [
    "add_kernel.add_pre_run_hook(lambda *a, **k: None)",
    "add_kernel.pre_run_hooks.append(lambda *a, **k: None)",
])
def test_launch_hooks_are_flagged(snippet):
    assert not check_source(with_line(snippet)).ok


def test_non_jit_call_inside_a_kernel_is_flagged():
    src = BASE.replace("    mask = offs < n\n", "    mask = offs < n\n    helper()\n", 1) + "\n\ndef helper():\n    pass\n"
    assert not check_source(src).ok


# A parameter or local named like a banned builtin is the candidate's value, not the builtin:
# KernelBench-X references name their first parameter `input` in 116 of 184 tasks.
SHADOWED = [
    "def relu(input, inplace=False):\n    out = torch.empty_like(input)\n    return out if input is None else input",
    "def f(x):\n    input = x * 2\n    return input(3) if callable(input) else input",
    "def f(x):\n    for open in (x, x):\n        open(1)",
    "def outer(input):\n    def inner():\n        return input(1)\n    return inner",
    "g = lambda input: input(1)",
    "def f(xs):\n    return [input(1) for input in xs]",
    "def f(x):\n    try:\n        return x\n    except ValueError as input:\n        return input",
]


@pytest.mark.parametrize("snippet", SHADOWED, ids=range(len(SHADOWED)))
def test_a_parameter_or_local_named_like_a_builtin_is_not_the_builtin(snippet):
    assert "builtin" not in rules_of(with_line(snippet))


# ... while every way of reaching the builtin itself still fires, on the line that reaches it.
REACHED = [
    ("def f(x):\n    return input('?')", 2),
    ("def f(x, input=input):\n    return input(x)", 1),          # a default is the enclosing scope's
    ("eval = eval\ndef f(x):\n    return eval(x)", 1),             # module-level rebinding
    ("class A:\n    open = open", 2),                               # class-level rebinding
    ("def f(xs):\n    return [o(1) for o in (open,)]", 2),          # the first iterable is outside
    ("def f(x):\n    global input\n    return input(x)", 3),
    ("def outer():\n    input = 1\n    class C:\n        def m(self):\n            return eval('1')\n    return C", 5),
]


@pytest.mark.parametrize("snippet,line", REACHED, ids=range(len(REACHED)))
def test_the_builtin_itself_is_still_flagged(snippet, line):
    assert BASE_LINES + line in rules_of(with_line(snippet)).get("builtin", []), snippet


KBX_CAND = '''import torch
import triton
import triton.language as tl


@triton.jit
def k(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(y_ptr + offs, tl.load(x_ptr + offs, mask=offs < n), mask=offs < n)


def copy_impl(input):
    y = torch.empty_like(input)
    k[(triton.cdiv(input.numel(), 128),)](input, y, input.numel(), BLOCK=128)
    return y
'''


@pytest.mark.parametrize("tail,entry", [("\nkernel_function = copy_impl\n", "kernel_function"),
                                        ("\ndef relu(input):\n    return copy_impl(input)\n", "relu"),
                                        ("\nclass ModelNew(torch.nn.Module):\n    pass\n", "ModelNew")])
def test_a_kbx_candidate_may_define_kernel_function_or_the_task_function(tail, entry):
    r = check_source(KBX_CAND + tail, functions=["relu", "kernel_function", "relu_task"])
    assert r.ok and r.model_class == entry
    if entry != "ModelNew":  # an operator problem still wants the class
        bare = check_source(KBX_CAND + tail)
        assert bare.model_class is None and [v.rule for v in bare.violations] == ["no-model"]


def test_a_kbx_candidate_with_no_entry_names_what_it_needs():
    r = check_source(KBX_CAND, functions=["relu", "kernel_function"])
    assert not r.ok and "no class ModelNew or Model nor function relu / kernel_function" in r.summary()
