"""Compile a candidate's kernels for a GPU without one: Hopper (sm_90a) by default.

The CPU interpreter runs kernel bodies as Python, so it never sees what only the GPU compiler
refuses (found this way, 2026-11-30: `.to(tl.int64)` on an int argument that equals 1 — Triton
turns such an argument into a compile-time constant — and register spills at E = 512 experts).
Here every launch the candidate's forward makes is intercepted, specialised the way Triton's
launcher does (ints equal to 1 become constants; pointers and ints divisible by 16 get the
divisibility hint), compiled with `triton.compile` for the target, and the PTX run through the
`ptxas` that ships with Triton to read registers and spill bytes. No kernel runs: outputs are
garbage and ignored; only compile errors, shared memory, registers and spills are reported.
"""
from __future__ import annotations

import contextlib
import os
import re
import subprocess
import tempfile
from dataclasses import dataclass, field


@dataclass
class LaunchReport:
    kernel: str
    num_warps: int
    constants: dict
    shared_bytes: int | None = None
    registers: int | None = None
    spill_bytes: int | None = None
    error: str | None = None
    mem: dict = field(default_factory=dict)   # memory_ops() of its PTX
    sass: dict = field(default_factory=dict)  # sass_profile() of its cubin
    ctas_per_sm: int | None = None            # resident programs per SM by registers, shared memory, warps
    dots: list = field(default_factory=list)  # mma_dots() of its TTGIR
    wgmma: dict = field(default_factory=dict)  # wgmma_waits() of its PTX


# Per SM, by compute capability (CUDA C++ Programming Guide, "Features and Technical Specifications"):
# shared memory, resident warps and blocks; 64K 32-bit registers on every one of them. The runtime
# reserves 1 KB of shared memory per block, and registers are allocated per warp in units of 256.
SM_LIMITS = {80: (167936, 64, 32), 86: (102400, 48, 16), 89: (102400, 48, 24), 90: (233472, 64, 32),
             100: (233472, 64, 32)}
REGS_PER_SM, REG_UNIT, SMEM_RESERVED = 65536, 256, 1024


def ctas_per_sm(registers: int | None, num_warps: int, shared_bytes: int | None, capability: int = 90) -> int | None:
    """How many programs of this launch fit on one SM at once: the least of what the registers, the
    shared memory, the warp slots and the block slots allow. What an occupancy diagnosis needs
    without a GPU (knowledge_base/kernels/mla_decode_attention: 236 registers x 8 warps and 147 KB
    of shared memory hold one program per SM)."""
    if registers is None or shared_bytes is None or capability not in SM_LIMITS:
        return None
    smem, warps, blocks = SM_LIMITS[capability]
    per_warp = -(-registers * 32 // REG_UNIT) * REG_UNIT
    by_regs = (REGS_PER_SM // per_warp) // num_warps if per_warp else blocks
    by_smem = smem // (shared_bytes + SMEM_RESERVED)
    return max(0, min(by_regs, by_smem, warps // num_warps, blocks))


# A memory instruction in PTX: its op, state space and the rest of its type suffixes.
_MEM = re.compile(r"^\s*(?:@!?%p\d+\s+)?(ld|st|cp\.async)(?:\.[a-z]+)*?\.(global|shared)(?:::[a-z]+)?((?:\.[A-Za-z0-9:_]+)*)", re.M)
_NARROW = re.compile(r"\.(?:b8|u8|s8|b16|u16|s16|f16|bf16)\b")
_VECTOR = re.compile(r"\.v[248]\b")


def memory_ops(ptx: str) -> dict:
    """Static counts of a kernel's memory instructions in its PTX (each instruction once, however
    often a loop runs it): global loads as scalar or vector (`.v2`/`.v4`), `cp.async` copies, and
    shared loads and stores narrower than 4 bytes. What they show without a GPU, seen here: the
    shifted taps of a conv issued as 2-byte scalar loads (causal_conv1d/time_loop: 58
    `ld.global.b16`), fp8 read byte by byte from shared memory for a transposed MMA operand
    (fp8_kv_decode_attention/split_kv_fp8: 64 `ld.shared.b8`), a dequantised tile stored to shared
    memory two bytes at a time (awq word_tiles before its tl.join unpack: 128 `st.shared.b16`)."""
    out = {"ld_global_scalar": 0, "ld_global_vector": 0, "cp_async": 0,
           "ld_shared_narrow": 0, "st_shared_narrow": 0}
    for op, space, suffix in _MEM.findall(ptx):
        vector = bool(_VECTOR.search(suffix))
        if op == "cp.async":
            out["cp_async"] += 1
        elif space == "global" and op == "ld":
            out["ld_global_vector" if vector else "ld_global_scalar"] += 1
        elif space == "shared" and not vector and _NARROW.search(suffix):
            out[f"{op}_shared_narrow"] += 1
    return out


# One SASS instruction of `nvdisasm -c`: "/*0150*/  @!P0 LDG.E R4, desc[UR12][R2.64] ;"; a label line
# ".L_x_1:"; a branch "BRA `(.L_x_1)".
_SASS_INS = re.compile(r"^\s*/\*([0-9a-f]{4,})\*/\s+(?:@!?U?P[T0-9]+\s+)?([A-Z][A-Z0-9_]*)((?:\.[A-Za-z0-9_]+)*)")
_SASS_LABEL = re.compile(r"^\s*(\.L_x_\d+):")
_SASS_BRANCH = re.compile(r"\bBRA\b[^`]*`\((\.L_x_\d+)\)")


def parse_sass(text: str) -> dict:
    """Static shape of a kernel's SASS (the text of `nvdisasm -c`): instructions in all, counts by
    opcode (the mnemonic before its first '.', e.g. VOTE, POPC, ATOMS, MUFU, HGMMA, LDG, BAR), and
    the loops: each backward branch's body, as the number of instructions from its target label to
    the branch, in program order. A loop body's count over the elements one trip handles is the
    per-element instruction cost a GPU run would pay, readable without one: tail_compact's histogram
    loop grows from 458 to 1363 instructions per 2048-element trip between 128 and 1024 bins
    (`aka kb compile-check --op top_k_top_p_filter --kernel tail_compact --shapes 2 --set BINS=128`),
    because Triton 3.6's tl.histogram counts every bin a lane owns by popcount of ballots."""
    ops: dict[str, int] = {}
    labels: dict[str, int] = {}              # label -> index of the instruction after it
    branches: list[tuple[int, str]] = []     # (index of the branch, its target label)
    n = 0
    for line in text.splitlines():
        lab = _SASS_LABEL.match(line)
        if lab:
            labels[lab.group(1)] = n
            continue
        m = _SASS_INS.match(line)
        if not m:
            continue
        ops[m.group(2)] = ops.get(m.group(2), 0) + 1
        b = _SASS_BRANCH.search(line)
        if b:
            branches.append((n, b.group(1)))
        n += 1
    # backward branches only; "BRA to itself" after EXIT is no loop
    loops = [at - labels[t] + 1 for at, t in branches if t in labels and labels[t] < at]
    return {"instructions": n, "ops": dict(sorted(ops.items(), key=lambda kv: (-kv[1], kv[0]))), "loops": loops}


def sass_profile(cubin: bytes | None) -> dict:
    """parse_sass() of a compiled kernel, disassembled by the nvdisasm that ships with Triton; {} when
    there is no cubin or no nvdisasm (the other columns of the report do not need it)."""
    tool = _triton_tool("nvdisasm")
    if not cubin or not os.path.exists(tool):
        return {}
    with tempfile.NamedTemporaryFile("wb", suffix=".cubin", delete=False) as f:
        f.write(cubin)
    try:
        r = subprocess.run([tool, "-c", f.name], capture_output=True, text=True, timeout=120)
    finally:
        os.unlink(f.name)
    return parse_sass(r.stdout) if r.returncode == 0 else {}


@dataclass
class CompileReport:
    ok: bool
    launches: list[LaunchReport] = field(default_factory=list)
    error: str | None = None


# Tensor-core layouts in TTGIR (`#mma1 = #ttg.nvidia_mma<{versionMajor = 3, versionMinor = 0, warpsPerCTA =
# [8, 1], instrShape = [16, 32, 16]}>`) and the dots that produce them (`ttng.warp_group_dot` on Hopper,
# `tt.dot` before it: `... -> tensor<64x32xf32, #mma1>`).
_MMA_ENC = re.compile(r"^(#mma\d*) = #ttg\.nvidia_mma<\{versionMajor = (\d+), versionMinor = \d+, "
                      r"warpsPerCTA = \[(\d+), (\d+)\], instrShape = \[(\d+), (\d+)(?:, (\d+))?\]", re.M)
_MMA_DOT = re.compile(r"(?:ttng\.warp_group_dot|tt\.dot) .*-> tensor<(\d+)x(\d+)x\w+, (#mma\d*)>")


def mma_dots(ttgir: str) -> list[dict]:
    """Each tensor-core dot of a compiled kernel: its output [M, N], MMA version, instruction shape and
    how the warps split it, and `dup`, how many times each output element is computed. A warp's MMA
    instruction covers 16 rows (a Hopper warpgroup's four warps, 64), so warps [wm, wn] with
    instruction N n cover 16 wm rows by n wn columns; a dot smaller than that is computed once per
    copy. Triton 3.6 (AccelerateMatmul, warpsPerTileV3) puts every warp on M when the dot's result
    reaches another dot (attention's QK feeding PV), so a 64-row chained dot at 8 warps is computed by
    both warpgroups (knowledge_base/triton/tl-dot.md, "How the warps split a dot")."""
    encs = {m.group(1): (int(m.group(2)), int(m.group(3)), int(m.group(4)),
                         [int(x) for x in m.groups()[4:] if x is not None])
            for m in _MMA_ENC.finditer(ttgir)}
    out = []
    for m in _MMA_DOT.finditer(ttgir):
        M, N, enc = int(m.group(1)), int(m.group(2)), m.group(3)
        if enc not in encs:
            continue
        version, wm, wn, instr = encs[enc]
        rows, cols = instr[0] * wm, instr[1] * wn
        out.append({"m": M, "n": N, "version": version, "warps": [wm, wn], "instr": instr,
                    "dup": max(1, rows // M) * max(1, cols // N)})
    return out


def dot_notes(dots: list[dict]) -> list[str]:
    """The dots computed more than once, as the agent's compile report and the CLI say them (one line
    per distinct dot and layout)."""
    out = []
    for d in dots:
        if d.get("dup", 1) <= 1:
            continue
        rows, cols = d["instr"][0] * d["warps"][0], d["instr"][1] * d["warps"][1]
        why = ("a dot whose result feeds another dot gets every warp on M: give it >= 16 x num_warps rows, "
               "or fewer warps" if rows > d["m"] else "more warps on N than the dot has columns: fewer warps "
               "or a wider tile")
        line = (f"dot {d['m']}x{d['n']} computed {d['dup']}x: warps {d['warps'][0]}x{d['warps'][1]} span "
                f"{rows} rows x {cols} columns ({why})")
        if line not in out:
            out.append(line)
    return out


# Hopper's asynchronous MMA in PTX: a warpgroup issues `wgmma.mma_async`, closes a group with
# `wgmma.commit_group.sync.aligned;` and blocks on `wgmma.wait_group.sync.aligned N;` until at most N
# groups are still in flight (PTX ISA, "Asynchronous Warpgroup Level Matrix Multiply-Accumulate").
_WGMMA_COMMIT = re.compile(r"^\s*(?:@!?%p\d+\s+)?wgmma\.commit_group\.sync\.aligned\s*;", re.M)
_WGMMA_WAIT = re.compile(r"^\s*(?:@!?%p\d+\s+)?wgmma\.wait_group\.sync\.aligned\s+(\d+)\s*;", re.M)


def wgmma_waits(ptx: str) -> dict:
    """A kernel's wgmma groups in its PTX: `commits`, and `waits`, the N of each `wgmma.wait_group N`
    in program order ({} without wgmma). Static: each instruction once, however often a loop runs it.
    A wait of 0 blocks until the warpgroup's tensor-core work is done; a wait of 1 lets one group run
    on while the warps go on. Triton 3.6 keeps one in flight (a wait of 1 in the K loop) only for a dot
    that accumulates into its loop-carried accumulator (`acc = tl.dot(a, b, acc)`) and whose operands
    reach shared memory asynchronously: tensor descriptors (TMA), or pointer loads it can issue as
    16-byte cp.async. A fresh dot the loop uses at once (fp8 block scaling's `acc += tl.dot(a, b) *
    scale`, attention's QK and PV) and operands loaded through registers (pointers it cannot prove
    16-byte aligned are not pipelined) wait with 0 after every group (offline sm_90a,
    tests/test_compile_check.py; knowledge_base/triton/tl-dot.md, "When the tensor cores wait")."""
    commits = len(_WGMMA_COMMIT.findall(ptx))
    if not commits:
        return {}
    return {"commits": commits, "waits": [int(n) for n in _WGMMA_WAIT.findall(ptx)]}


def wait_notes(wgmma: dict) -> list[str]:
    """One line when every wgmma group is waited for at once, as the agent's compile report and the
    CLI say it; none otherwise."""
    commits, waits = wgmma.get("commits") or 0, wgmma.get("waits") or []
    if not commits or not waits or max(waits) > 0:
        return []
    return [f"wgmma serialized: all {commits} group(s) waited for with wait_group 0, so a warpgroup's "
            "tensor cores idle while it waits; only acc = tl.dot(a, b, acc) with operands loaded asynchronously "
            "(TMA, or 16-byte-aligned pointer loads pipelined as cp.async) keeps one in flight; otherwise other "
            "warpgroups or programs on the SM fill the gap"]


def _triton_tool(name: str) -> str:
    """A CUDA tool that ships in Triton's wheel (ptxas, nvdisasm), by path."""
    import triton
    return os.path.join(os.path.dirname(triton.__file__), "backends", "nvidia", "bin", name)


def _ptxas_info(ptx: str, arch: str) -> tuple[int | None, int | None]:
    ptxas = _triton_tool("ptxas")
    with tempfile.NamedTemporaryFile("w", suffix=".ptx", delete=False) as f:
        f.write(ptx)
    try:
        r = subprocess.run([ptxas, f"-arch={arch}", "-v", f.name, "-o", os.devnull], capture_output=True,
                           text=True, timeout=120)
    finally:
        os.unlink(f.name)
    regs = re.search(r"Used (\d+) registers", r.stderr)
    spill = re.search(r"(\d+) bytes spill stores", r.stderr)
    return (int(regs.group(1)) if regs else None, int(spill.group(1)) if spill else None)


def _ty(torch, dtype) -> str:
    return {torch.float32: "fp32", torch.bfloat16: "bf16", torch.float16: "fp16",
            torch.int32: "i32", torch.int64: "i64", torch.int16: "i16", torch.uint8: "u8",
            torch.int8: "i8", torch.bool: "i1", torch.float8_e4m3fn: "fp8e4nv",
            torch.float8_e5m2: "fp8e5", torch.float64: "fp64"}[dtype]


def _signature(fn, args, kwargs):
    import torch
    from triton.runtime.jit import mangle_type
    from triton.tools.tensor_descriptor import TensorDescriptor
    names = fn.arg_names
    vals = dict(zip(names, args))
    vals.update({k: v for k, v in kwargs.items() if k in names})
    sig, const, attrs = {}, {}, {}
    for i, p in enumerate(fn.params):
        v = vals.get(p.name, p.default if hasattr(p, "default") else None)
        if p.is_constexpr:
            sig[p.name], const[p.name] = "constexpr", v
        elif isinstance(v, torch.Tensor):
            sig[p.name] = "*" + _ty(torch, v.dtype)
            attrs[(i,)] = [["tt.divisibility", 16]]  # fresh allocations are 16-byte aligned
        elif isinstance(v, TensorDescriptor):
            sig[p.name] = mangle_type(v)  # tensordesc<bf16[BM, BK]>: a host-side TMA descriptor
        elif isinstance(v, bool):
            sig[p.name] = "i1"
        elif isinstance(v, int) and getattr(p, "do_not_specialize", False):
            sig[p.name] = "i32" if -2**31 <= v < 2**31 else "i64"  # no == 1 constant, no % 16 hint
        elif isinstance(v, int) and v == 1:
            sig[p.name], const[p.name] = "constexpr", 1  # what Triton's launcher does with a 1
        elif isinstance(v, int):
            sig[p.name] = "i32" if -2**31 <= v < 2**31 else "i64"
            if v % 16 == 0:
                attrs[(i,)] = [["tt.divisibility", 16]]
        elif isinstance(v, float):
            sig[p.name] = "fp32"
        elif v is None:
            sig[p.name], const[p.name] = "constexpr", None
        else:
            raise TypeError(f"argument {p.name}: cannot specialise a {type(v).__name__}")
    return sig, const, attrs


@contextlib.contextmanager
def compiling_launches(report: CompileReport, capability: int = 90, sass: bool = False):
    """While active, every @triton.jit launch is compiled for `capability` instead of run, once per
    distinct specialisation, into `report.launches` (scripts/check_gemm_grid.py uses it directly);
    with `sass`, also disassembled for its sass_profile() (about 0.4 s a launch: the CLI and the
    agent's compile report want it, the knowledge base's compile tests do not)."""
    import triton
    import triton.runtime.jit as jit
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    arch = f"sm_{capability}a" if capability >= 90 else f"sm_{capability}"
    seen: dict = {}

    def fake_run(self, *args, grid, warmup=False, **kwargs):
        nw = int(kwargs.get("num_warps", 4))
        ns = kwargs.get("num_stages")
        sig, const, attrs = _signature(self, args, kwargs)
        key = (self.fn.__name__, repr(sorted(sig.items())), repr(sorted((k, repr(v)) for k, v in const.items())),
               repr(sorted(attrs)), nw, ns)
        if key in seen:
            return None
        lr = LaunchReport(self.fn.__name__, nw, {k: v for k, v in const.items() if not callable(v)})
        try:
            opts = {"num_warps": nw} | ({"num_stages": int(ns)} if ns is not None else {})
            k = triton.compile(ASTSource(fn=self, signature=sig, constexprs=const, attrs=attrs),
                               target=GPUTarget("cuda", capability, 32), options=opts)
            lr.shared_bytes = k.metadata.shared
            lr.registers, lr.spill_bytes = _ptxas_info(k.asm["ptx"], arch)
            lr.mem = memory_ops(k.asm["ptx"])
            lr.sass = sass_profile(k.asm.get("cubin")) if sass else {}
            lr.ctas_per_sm = ctas_per_sm(lr.registers, nw, lr.shared_bytes, capability)
            lr.dots = mma_dots(k.asm.get("ttgir", ""))
            lr.wgmma = wgmma_waits(k.asm["ptx"])
        except Exception as e:  # noqa: BLE001 - the compiler's refusal is the finding
            lr.error = f"{type(e).__name__}: {str(e).strip().splitlines()[-1][:300] if str(e).strip() else ''}"
            report.ok = False
        seen[key] = lr
        report.launches.append(lr)
        return None

    original = jit.JITFunction.run
    jit.JITFunction.run = fake_run
    try:
        yield report
    finally:
        jit.JITFunction.run = original


def compile_check(op: str, candidate: str, shape_ids: list[str] | None = None, capability: int = 90,
                  params: dict | None = None, sass: bool = False) -> CompileReport:
    """Compile every launch `candidate`'s forward makes on `op`'s shapes (default: its small
    shapes), with `params` over its AKA_PARAMS when given, each launch's SASS profiled with `sass`.
    Inputs are built on the CPU; kernels never run."""
    import torch

    from aka.evaluate.loader import ProblemRuntime, call, import_file
    from aka.problem import load_problem

    prob = load_problem(op)
    shapes = prob.select(",".join(shape_ids) if shape_ids else "small")
    rt = ProblemRuntime(prob.worker_spec(), "cpu")
    # The kernels are compiled, never interpreted: @triton.jit reads TRITON_INTERPRET when the file
    # is imported, and a process that turned the interpreter on (a CPU `aka convert apply` run in it)
    # would otherwise get interpreted functions that never reach the compiler.
    import os
    prev = os.environ.get("TRITON_INTERPRET")
    os.environ["TRITON_INTERPRET"] = "0"
    try:
        mod = import_file(candidate, "_aka_compile_check")
    finally:
        if prev is None:
            os.environ.pop("TRITON_INTERPRET", None)
        else:
            os.environ["TRITON_INTERPRET"] = prev
    if params:
        if not isinstance(getattr(mod, "AKA_PARAMS", None), dict):
            raise ValueError(f"{candidate} has no AKA_PARAMS dict to set {', '.join(params)} in")
        unknown = sorted(set(params) - set(mod.AKA_PARAMS))
        if unknown:
            raise ValueError(f"{candidate}: {', '.join(unknown)} not in its AKA_PARAMS "
                             f"({', '.join(mod.AKA_PARAMS)})")
        mod.AKA_PARAMS = dict(mod.AKA_PARAMS, **params)
    cls = getattr(mod, "ModelNew", None) or getattr(mod, "Model")
    report = CompileReport(ok=True)
    with compiling_launches(report, capability, sass):
        for shape in shapes:
            torch.manual_seed(0)
            model = cls(*rt.init_args(shape.to_json())[0], **rt.init_args(shape.to_json())[1])
            try:
                with torch.no_grad():
                    call(model, rt.make_inputs(shape.to_json()))
            except Exception as e:  # noqa: BLE001 - glue reading garbage outputs may fail after the launches
                if "CompilationError" in type(e).__name__:
                    report.ok, report.error = False, f"{type(e).__name__}: {e}"
    if not report.launches and report.error is None:
        report.ok, report.error = False, "the forward launched no @triton.jit kernel"
    return report
