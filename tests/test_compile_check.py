"""Offline sm_90a compiles read for their memory instructions (aka/kb/compile_check.memory_ops), and the
three knowledge-base findings they back, pinned at bench shape 0 (full-size inputs built on the
CPU; no kernel runs): a change of Triton, or of a kernel, that brings the narrow accesses back fails
here before it costs device time."""
import pytest

from aka.kb.compile_check import compile_check, memory_ops

PTX = """
	ld.global.b32 { %r74 }, [ %rd31 + 0 ];
	@%p2 ld.global.v4.b32 { %r76, %r77, %r78, %r79 }, [ %rd33 + 0 ];
	@!%p3 ld.global.L1::evict_last.b16 { %rs1 }, [ %rd34 + 0 ];
	cp.async.cg.shared.global [ %r9 + 0 ], [ %rd5 + 0 ], 0x10, %r10;
	ld.shared.b8 	%rs65, [%r31];
	ld.shared::cta.b16 	%rs66, [%r31+2048];
	ld.shared.v4.b16 	{%rs1, %rs2, %rs3, %rs4}, [%r31];
	st.shared.b16 	[%r12], %rs7;
	st.shared.v4.b32 	[%r12], {%r1, %r2, %r3, %r4};
	ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%r1, %r2, %r3, %r4}, [%r5];
	// ld.global.b16 in a comment does not count
"""


def test_memory_ops_counts_scalar_vector_and_narrow_accesses():
    assert memory_ops(PTX) == {"ld_global_scalar": 2, "ld_global_vector": 1, "cp_async": 1,
                               "ld_shared_narrow": 2, "st_shared_narrow": 1}


def _mem(op: str, kernel: str, launch: str) -> dict:
    from aka.problem import REPO_ROOT
    r = compile_check(op, str(REPO_ROOT / "knowledge_base" / "kernels" / op / f"{kernel}.py"), ["0"])
    assert r.ok, r.error
    return next(lr.mem for lr in r.launches if lr.kernel == launch)


@pytest.mark.parametrize("case", ["conv_taps", "fp8_v", "awq_unpack"])
def test_knowledge_base_findings_hold_in_the_offline_compile(case):
    if case == "conv_taps":      # shifted taps: 2-byte scalar loads, unless built in registers
        old = _mem("causal_conv1d", "time_loop", "_conv1d_silu_span")
        new = _mem("causal_conv1d", "vector_shift", "_conv1d_silu_vec")
        assert old["ld_global_scalar"] > 20 and new["ld_global_scalar"] <= 5    # bias and 4 taps
        assert new["ld_global_vector"] >= 4 and new["ld_shared_narrow"] == new["st_shared_narrow"] == 0
    elif case == "fp8_v":        # 8-bit V for a transposed MMA operand: read byte by byte
        old = _mem("fp8_kv_decode_attention", "split_kv_fp8", "_fp8_split")
        new = _mem("fp8_kv_decode_attention", "v_words", "_fp8_split")
        assert old["ld_shared_narrow"] >= 32 and new["ld_shared_narrow"] == 0
    else:                        # the dequantised AWQ tile reaches shared memory in 16-byte stores
        new = _mem("awq_w4a16_gemm", "word_tiles", "_fused")
        assert new["st_shared_narrow"] <= 1


def test_cli_refuses_an_unknown_op():
    from aka.cli import main
    assert main(["kb", "compile-check", "--op", "no_such_op"]) == 2


def test_ctas_per_sm_takes_the_tightest_of_registers_shared_memory_and_slots():
    from aka.kb.compile_check import ctas_per_sm
    assert ctas_per_sm(236, 8, 147456) == 1      # MLA split_dispatch on sm_90a: one 8-warp program per SM
    assert ctas_per_sm(207, 4, 110 * 1024) == 2   # column_split: two (the MLA playbook's diagnosis)
    assert ctas_per_sm(32, 8, 0) == 8             # warp slots: 64 / 8
    assert ctas_per_sm(40, 1, 0) == 32            # block slots
    assert ctas_per_sm(128, 4, 100 * 1024, capability=89) == 0   # an sm_90 tile over the L40S's 100 KB
    assert ctas_per_sm(None, 4, 0) is None and ctas_per_sm(64, 4, 0, capability=75) is None


SASS = """
_k:
        /*0000*/                   LDC R1, c[0x0][0x28] ;
        /*0010*/               @P0 BRA `(.L_x_0) ;
.L_x_1:
        /*0020*/                   VOTE.ANY R4, PT, P1 ;
        /*0030*/                   POPC R5, R4 ;
        /*0040*/              @!P0 BRA `(.L_x_1) ;
.L_x_0:
        /*0050*/                   ATOMS.ADD RZ, [R2], R5 ;
        /*0060*/                   EXIT ;
.L_x_2:
        /*0070*/                   BRA `(.L_x_2);
"""


def test_parse_sass_counts_opcodes_and_finds_loop_bodies():
    from aka.kb.compile_check import parse_sass
    p = parse_sass(SASS)
    assert p["instructions"] == 8
    assert p["ops"]["BRA"] == 3 and p["ops"]["VOTE"] == 1 and p["ops"]["POPC"] == 1 and p["ops"]["ATOMS"] == 1
    assert p["loops"] == [3]          # VOTE, POPC and the branch back; the forward jump and BRA-to-self are no loops


def _loops(kernel: str, launch: str, **params) -> int:
    from aka.kb.compile_check import compile_check
    from aka.problem import REPO_ROOT
    op = "top_k_top_p_filter"
    r = compile_check(op, str(REPO_ROOT / "knowledge_base" / "kernels" / op / f"{kernel}.py"), params=params or None,
                      sass=True)
    assert r.ok, r.error
    lr = next(lr for lr in r.launches if lr.kernel == launch)
    assert lr.sass, "nvdisasm gave nothing"
    return max(lr.sass["loops"])


def test_tail_scatter_findings_hold_in_the_offline_compile():
    """tail_scatter's docstring: tl.histogram's loop grows with its bins (a popcount per bin a lane
    owns), and per-element atomics compact for less than a block-wide count and prefix sum."""
    assert _loops("tail_compact", "_hist", BINS=1024) > 2.5 * _loops("tail_compact", "_hist", BINS=128)
    assert _loops("tail_scatter", "_compact") < 0.6 * _loops("tail_compact", "_compact")


def test_compile_check_refuses_a_parameter_the_kernel_does_not_have():
    from aka.cli import main
    assert main(["kb", "compile-check", "--op", "top_k_top_p_filter", "--kernel", "tail_scatter",
                 "--set", "NO_SUCH=1"]) == 2
    assert main(["kb", "compile-check", "--op", "top_k_top_p_filter", "--kernel", "tail_scatter",
                 "--set", "BINS"]) == 2


def test_kv_words_stay_values_after_set():
    from aka.cli import kv_to_flags
    assert kv_to_flags(["compile-check", "--set", "BINS=128", "shape=4096x4096"]) == \
        ["compile-check", "--set", "BINS=128", "--shape", "4096x4096"]


def test_fp8_fresh_dot_waits_hold_in_the_offline_compile():
    """The fp8 block-scaled GEMM playbook's finding (scripts/probe_fp8_wgmma_waits.py): in Triton 3.6
    every group of fresh-dot QGMMAs is waited to zero before the scaling, in each of the three loop
    forms, so at most a few of the scaling's multiplies run under an MMA."""
    import importlib.util

    from aka.kb.compile_check import _triton_tool
    from aka.problem import REPO_ROOT
    if not _triton_tool("nvdisasm"):
        pytest.skip("no nvdisasm in this Triton wheel")
    spec = importlib.util.spec_from_file_location("probe_fp8", REPO_ROOT / "scripts" / "probe_fp8_wgmma_waits.py")
    probe = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(probe)
    for form in range(3):
        r = probe.probe(form, 128, 128, 8, 3)
        assert r["spill"] == 0 and r["waits"], r
        assert all(w == "0x0" and f <= 4 for w, _, f in r["waits"]), (form, r["waits"])


TTGIR = """
#mma = #ttg.nvidia_mma<{versionMajor = 3, versionMinor = 0, warpsPerCTA = [8, 1], instrShape = [16, 32, 16]}>
#mma1 = #ttg.nvidia_mma<{versionMajor = 3, versionMinor = 0, warpsPerCTA = [4, 2], instrShape = [16, 64, 16]}>
#mma2 = #ttg.nvidia_mma<{versionMajor = 2, versionMinor = 0, warpsPerCTA = [1, 8], instrShape = [16, 8]}>
    %s = ttng.warp_group_dot %q, %k, %z {inputPrecision = 0 : i32} : !ttg.memdesc<64x128xbf16, #shared, #smem> * !ttg.memdesc<128x64xbf16, #shared1, #smem> -> tensor<64x64xf32, #mma>
    %o = ttng.warp_group_dot %p, %v, %acc {inputPrecision = 0 : i32} : tensor<64x64xbf16, #ttg.dot_op<{opIdx = 0, parent = #mma1, kWidth = 2}>> * !ttg.memdesc<64x128xbf16, #shared, #smem> -> tensor<64x128xf32, #mma1>
    %t = tt.dot %a, %b, %c, inputPrecision = tf32 : tensor<32x16xbf16, #ttg.dot_op<{opIdx = 0, parent = #mma2, kWidth = 4}>> * tensor<16x32xbf16, #ttg.dot_op<{opIdx = 1, parent = #mma2, kWidth = 4}>> -> tensor<32x32xf32, #mma2>
"""


def test_mma_dots_reads_each_dots_warps_and_how_often_it_is_computed():
    from aka.kb.compile_check import dot_notes, mma_dots
    dots = mma_dots(TTGIR)
    assert [(d["m"], d["n"], d["version"], d["warps"], d["dup"]) for d in dots] == [
        (64, 64, 3, [8, 1], 2),    # two warpgroups of 64 rows on a 64-row dot
        (64, 128, 3, [4, 2], 1),   # 64 rows x 2 x 64 columns: each element once
        (32, 32, 2, [1, 8], 2)]    # mma.sync: 8 warps x 8 columns on 32 columns
    notes = dot_notes(dots)
    assert len(notes) == 2 and "every warp on M" in notes[0] and "more warps on N" in notes[1]
    assert dot_notes(dots + dots) == notes      # one line per distinct dot


def test_the_agents_compile_report_says_which_dot_is_computed_twice():
    from aka.evaluate.compile_report import _clean, summary_lines
    from aka.kb.compile_check import mma_dots
    raw = {"available": True, "ok": True, "launches": [
        {"kernel": "_attn", "num_warps": 8, "registers": 168, "spill_bytes": 0, "shared_bytes": 98304,
         "dots": mma_dots(TTGIR) + [{"m": "junk"}]}]}
    lines = summary_lines(_clean(raw))
    assert lines[0].startswith("_attn (8 warps): 168 registers")
    assert lines[1].startswith("_attn: dot 64x64 computed 2x: warps 8x1 span 128 rows")
    assert len(lines) == 3                      # the 32x32 dot's line; the unreadable entry says nothing


@pytest.fixture(scope="module")
def chained():
    import triton
    import triton.language as tl

    @triton.jit
    def _qk_pv(q_ptr, k_ptr, v_ptr, o_ptr, M: tl.constexpr, N: tl.constexpr, D: tl.constexpr):
        rm = tl.arange(0, M)
        rn = tl.arange(0, N)
        rd = tl.arange(0, D)
        s = tl.dot(tl.load(q_ptr + rm[:, None] * D + rd[None, :]), tl.trans(tl.load(k_ptr + rn[:, None] * D + rd[None, :])))
        p = tl.exp(s - tl.max(s, 1)[:, None]).to(tl.bfloat16)
        o = tl.dot(p, tl.load(v_ptr + rn[:, None] * D + rd[None, :]))
        tl.store(o_ptr + rm[:, None] * D + rd[None, :], o)
    return _qk_pv


@pytest.mark.parametrize("rows,warps,dup", [(64, 8, 2), (64, 4, 1), (128, 8, 1)])
def test_a_dot_feeding_another_gets_every_warp_on_m_in_the_offline_compile(chained, rows, warps, dup):
    """Triton 3.6 on sm_90a (AccelerateMatmul): attention's QK dot, whose result reaches the PV dot, gets
    warpsPerCTA [num_warps, 1], so at 64 rows and 8 warps both warpgroups compute the whole score
    (knowledge_base/triton/tl-dot.md, "How the warps split a dot"). A Triton that changes this fails here."""
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    from aka.kb.compile_check import mma_dots
    sig = {"q_ptr": "*bf16", "k_ptr": "*bf16", "v_ptr": "*bf16", "o_ptr": "*fp32",
           "M": "constexpr", "N": "constexpr", "D": "constexpr"}
    k = triton.compile(ASTSource(fn=chained, signature=sig, constexprs={"M": rows, "N": 64, "D": 128}),
                       target=GPUTarget("cuda", 90, 32), options={"num_warps": warps})
    qk, pv = mma_dots(k.asm["ttgir"])
    assert (qk["m"], qk["n"], qk["version"]) == (rows, 64, 3)
    assert qk["warps"] == [warps, 1] and qk["dup"] == dup
    assert pv["dup"] == 1                       # the last dot splits its columns over the warpgroups
    if rows == 64:                              # QK wgmma per warpgroup: the whole 64x64x128 score either way
        shape = "m64n32k16" if warps == 8 else "m64n64k16"
        assert k.asm["ptx"].count(f"wgmma.mma_async.sync.aligned.{shape}") == (16 if warps == 8 else 8)


PTX_WAITS = """
\twgmma.fence.sync.aligned;
\twgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16 {...};
\twgmma.commit_group.sync.aligned;
\twgmma.wait_group.sync.aligned 1;
\t@%p7 wgmma.wait_group.sync.aligned 0;
"""


def test_wgmma_waits_reads_commits_and_each_waits_depth():
    from aka.evaluate.compile_report import _clean, summary_lines
    from aka.kb.compile_check import wait_notes, wgmma_waits
    w = wgmma_waits(PTX_WAITS)
    assert w == {"commits": 1, "waits": [1, 0]} and wait_notes(w) == []
    serial = wgmma_waits(PTX_WAITS.replace("aligned 1;", "aligned 0;"))
    assert serial["waits"] == [0, 0] and "serialized" in wait_notes(serial)[0]
    assert wgmma_waits("\tmma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {...};") == {}
    raw = {"available": True, "ok": True, "launches": [
        {"kernel": "_mm", "num_warps": 8, "registers": 160, "spill_bytes": 0, "shared_bytes": 147456,
         "wgmma": serial},
        {"kernel": "_junk", "num_warps": 4, "wgmma": {"commits": 2, "waits": ["x"]}}]}
    rep = _clean(raw)
    assert rep["launches"][1]["wgmma"] == {}    # unreadable: nothing said
    lines = summary_lines(rep)
    assert lines[1].startswith("_mm: wgmma serialized: all 1 group(s)") and len(lines) == 3


@pytest.fixture(scope="module")
def k_loops():
    import triton
    import triton.language as tl

    @triton.jit
    def _k_loop(a_ptr, b_ptr, s_ptr, c_ptr, K, BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr,
                FRESH: tl.constexpr, TMA: tl.constexpr):
        rm, rn, rk = tl.arange(0, BM), tl.arange(0, BN), tl.arange(0, BK)
        a_d = tl.make_tensor_descriptor(a_ptr, [BM, K], [K, 1], [BM, BK])
        b_d = tl.make_tensor_descriptor(b_ptr, [BN, K], [K, 1], [BN, BK])
        acc = tl.zeros((BM, BN), dtype=tl.float32)
        for k in range(0, K, BK):
            if TMA:
                a = a_d.load([0, k])
                b = b_d.load([0, k]).T
            else:
                a = tl.load(a_ptr + rm[:, None] * K + (k + rk)[None, :])
                b = tl.load(b_ptr + rn[:, None] * K + (k + rk)[None, :]).T
            if FRESH == 1:    # a per-K-step scale (fp8 block scaling): the dot starts from zero each step
                acc += tl.dot(a, b) * tl.load(s_ptr + k // BK)
            elif FRESH == 2:  # folded into the carried form
                acc += tl.dot(a, b)
            else:             # the accumulator carried through the dot
                acc = tl.dot(a, b, acc)
        tl.store(c_ptr + rm[:, None] * BN + rn[None, :], acc)
    return _k_loop


@pytest.mark.parametrize("fresh,tma,aligned,in_flight", [(0, True, True, True), (0, False, True, True),
                                                         (2, True, True, True), (0, False, False, False),
                                                         (1, True, True, False), (1, False, True, False)])
def test_a_wgmma_group_stays_in_flight_only_for_a_carried_accumulator_fed_asynchronously(
        k_loops, fresh, tma, aligned, in_flight):
    """Triton 3.6 on sm_90a, a pipelined K loop at 128x128 on 8 warps: `acc = tl.dot(a, b, acc)` with its
    operands brought to shared memory asynchronously (tensor descriptors, or pointer loads Triton can
    issue as 16-byte cp.async) waits with wait_group 1, the next group issued while one runs. Pointer
    loads it cannot prove 16-byte aligned are not pipelined and a fresh dot the loop scales at once
    waits with 0 after every group (knowledge_base/triton/tl-dot.md, "When the tensor cores wait").
    A Triton that changes this fails here."""
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    from aka.kb.compile_check import wait_notes, wgmma_waits
    sig = {"a_ptr": "*bf16", "b_ptr": "*bf16", "s_ptr": "*fp32", "c_ptr": "*fp32", "K": "i32",
           "BM": "constexpr", "BN": "constexpr", "BK": "constexpr", "FRESH": "constexpr", "TMA": "constexpr"}
    # what the launcher marks for a 16-byte-aligned pointer or an int divisible by 16; K alone otherwise
    attrs = {(i,): [["tt.divisibility", 16]] for i in ((0, 1, 2, 3, 4) if aligned else (4,))}
    k = triton.compile(ASTSource(fn=k_loops, signature=sig, constexprs={"BM": 128, "BN": 128, "BK": 64,
                                                                       "FRESH": fresh, "TMA": tma}, attrs=attrs),
                       target=GPUTarget("cuda", 90, 32), options={"num_warps": 8, "num_stages": 3})
    ptx = k.asm["ptx"]
    w = wgmma_waits(ptx)
    assert w["commits"] >= 1
    assert (max(w["waits"]) >= 1) == in_flight and bool(wait_notes(w)) != in_flight, w
    if not tma:
        assert ("cp.async" in ptx) == aligned   # unaligned pointer loads go through registers, unpipelined


def test_cli_lists_the_launches_that_wait_for_every_wgmma_group(capsys):
    """fp8 block scaling promotes a fresh dot every K step, so every one of its tile launches waits with 0."""
    from aka.cli import main
    assert main(["kb", "compile-check", "--op", "fp8_block_scaled_gemm", "--kernel", "dispatch", "--shapes", "12"]) == 0
    out = capsys.readouterr().out
    assert "wait for every wgmma group at once" in out and "fp8_block_scaled_gemm/dispatch _fp8_mm_tma (8 warps" in out
