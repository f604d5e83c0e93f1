"""
---
id: kernels/silu_and_mul_fp8_quant/persistent
op: silu_and_mul_fp8_quant
category: Fusion
dtypes: [bfloat16]
techniques: [epilogue-quantization, kernel-fusion, elementwise-fusion, fp8-quantization, per-group-scaling, amax, saturation, persistent-kernel, grid-stride-loop, multi-row-per-program, 2d-tiling, int64-indexing]
params:
  PROGS_PER_SM: [2, 4, 8]
  GROUPS_PER_TRIP: [1, 2, 4, 8]
  max_warps: [2, 4, 8]
summary: min(blocks, PROGS_PER_SM x SMs) programs stride over blocks of GROUPS_PER_TRIP consecutive output groups (numbered flat across rows); per trip a [GROUPS, 128] tile of gate and of up, fp32 silu(g) * u, per-group floored scale, fp8 store, contiguous scale store.
---
What it does: SwiGLU + per-128-column-group fp8 quantisation with a fixed, machine-sized grid.
Output group k is (row k // (I/128), group k % (I/128)); block b covers groups
[b*GB, (b+1)*GB); program p takes blocks p, p + P, ... For each block, gate and up are gathered
as [GB, 128] tiles from the two halves of their rows, y = silu(gate) * up stays fp32, and
scale = max(amax / 448, min_scale) per group; q and the scales are stored contiguously (group k's
scale at k, its values at k * 128).

When to use it: `flat_groups` launches one program per block: the
MoE shapes here reach 131072 rows x 2-6 groups, i.e. up to ~10^5 programs of one small tile
each. The persistent grid pays the prologue and the scheduling of a program a few hundred
times instead; at decode (1 row x 18 groups) the grid shrinks to the block count and this is
`flat_groups`. `group_tile` keeps one row per program. Which wins is for the H200 verify to
say (CPU timing under the interpreter is meaningless). On the CPU interpreter the machine has
2 "SMs", so the small shapes run several trips per program.

Parameters: PROGS_PER_SM: programs per SM; GROUPS_PER_TRIP: groups per block (a power of two);
max_warps caps num_warps = GB * 128 / 512.
"""
import torch
import torch.nn as nn
import triton
import triton.language as tl

AKA_PARAMS = {"PROGS_PER_SM": 4, "GROUPS_PER_TRIP": 4, "max_warps": 4}


def _num_sms(device):
    if device.type == "cuda":
        return torch.cuda.get_device_properties(device).multi_processor_count
    return 2


@triton.jit
def _silu_mul_quant_persistent(x_ptr, q_ptr, s_ptr, d, n_groups, n_groups_row, n_blocks, stride_x, min_scale,
                               GB: tl.constexpr, G: tl.constexpr, GS: tl.constexpr):
    FP8_MAX: tl.constexpr = 448.0
    cols = tl.arange(0, G)
    cmask = cols < GS
    for b in range(tl.program_id(0), n_blocks, tl.num_programs(0)):
        k = tl.cast(b, tl.int64) * GB + tl.arange(0, GB)
        kmask = k < n_groups
        mask = kmask[:, None] & cmask[None, :]
        row = k // n_groups_row
        src = (row * stride_x + (k - row * n_groups_row) * GS)[:, None] + cols[None, :]
        gate = tl.load(x_ptr + src, mask=mask, other=0.0).to(tl.float32)
        up = tl.load(x_ptr + src + d, mask=mask, other=0.0).to(tl.float32)
        y = gate / (1.0 + tl.exp(-gate)) * up
        scale = tl.maximum(tl.max(tl.abs(y), axis=1) / FP8_MAX, min_scale)
        q = tl.clamp(y / scale[:, None], -FP8_MAX, FP8_MAX)
        tl.store(q_ptr + k[:, None] * GS + cols[None, :], q.to(q_ptr.dtype.element_ty), mask=mask)
        tl.store(s_ptr + k, scale, mask=kmask)


class ModelNew(nn.Module):
    def __init__(self, group_size=128, min_scale=1.0 / (448.0 * 512.0)):
        super().__init__()
        self.group_size = group_size
        self.min_scale = min_scale

    def forward(self, x):
        d = x.shape[-1] // 2
        gs = self.group_size
        x2 = x.reshape(-1, x.shape[-1])
        n_rows = x2.shape[0]
        ng = d // gs
        q = torch.empty((n_rows, d), dtype=torch.float8_e4m3fn, device=x.device)
        scale = torch.empty((n_rows, ng), dtype=torch.float32, device=x.device)
        gb = AKA_PARAMS["GROUPS_PER_TRIP"]
        g_block = triton.next_power_of_2(gs)
        n_blocks = triton.cdiv(n_rows * ng, gb)
        grid = (max(1, min(n_blocks, AKA_PARAMS["PROGS_PER_SM"] * _num_sms(x.device))),)
        warps = min(AKA_PARAMS["max_warps"], max(1, gb * g_block // 512))
        _silu_mul_quant_persistent[grid](x2, q, scale, d, n_rows * ng, ng, n_blocks, x2.stride(0),
                                         float(self.min_scale), GB=gb, G=g_block, GS=gs, num_warps=warps)
        return q.view(*x.shape[:-1], d), scale.view(*x.shape[:-1], ng)
