"""Liger-Kernel's Triton kernels for norms and gated activations (the optional `peer` extra).

Called through Liger's public autograd Functions (liger_kernel.ops.*), under no_grad, with the
casting mode that rounds where our references round: "gemma" does the whole row in fp32 and
rounds once (the references' fp32 statistics and weight multiply); "llama" would round x*rstd to
bf16 before the weight, one ulp away.
"""
from __future__ import annotations

from aka.peers.base import LibraryPeer


class _LigerPeer(LibraryPeer):
    module = "liger_kernel.ops.rms_norm"  # the Liger module the forward calls into
    cpu_reason = "Liger's Triton kernels run on a GPU only (the judge runs no Triton interpreter for peers)"


class RMSNormPeer(_LigerPeer):
    def forward(self, x, weight):
        from liger_kernel.ops.rms_norm import LigerRMSNormFunction
        return LigerRMSNormFunction.apply(x, weight, self.eps, 0.0, "gemma", False)


class FusedAddRMSNormPeer(_LigerPeer):
    """Liger's fused residual add + RMSNorm: returns (y, x + residual), both fresh tensors."""
    module = "liger_kernel.ops.fused_add_rms_norm"

    def forward(self, x, residual, weight):
        from liger_kernel.ops.fused_add_rms_norm import LigerFusedAddRMSNormFunction
        y, r = LigerFusedAddRMSNormFunction.apply(x, residual, weight, self.eps, 0.0, "gemma", False)
        return y, r


class LayerNormPeer(_LigerPeer):
    module = "liger_kernel.ops.layer_norm"
    default_eps = 1e-5

    def forward(self, x, weight, bias):
        from liger_kernel.ops.layer_norm import LigerLayerNormFunction
        return LigerLayerNormFunction.apply(x, weight, bias, self.eps)


class SiluMulPeer(_LigerPeer):
    """SwiGLU on the fused [T, 2I] gate-up tensor (Liger's fused-gate-up kernel: no split copies)."""
    module = "liger_kernel.ops.swiglu"

    def forward(self, x):
        from liger_kernel.ops.swiglu import LigerFusedGateUpSiLUMulFunction
        return LigerFusedGateUpSiLUMulFunction.apply(x)


class GeluMulPeer(_LigerPeer):
    """GeGLU with tanh GELU. Liger's kernel takes gate and up as two tensors and makes them
    contiguous, so the halves of the fused input are copied first: the cost of calling it on
    vLLM's layout, included in its time."""
    module = "liger_kernel.ops.geglu"

    def forward(self, x):
        from liger_kernel.ops.geglu import LigerGELUMulFunction
        d = x.shape[-1] // 2
        return LigerGELUMulFunction.apply(x[..., :d], x[..., d:])


class QKNormPeer(_LigerPeer):
    """Qwen3's per-head q/k RMSNorm as two Liger RMSNorm calls over [T*H, D] rows (how Liger's
    Qwen3 patch applies its RMSNorm to q_norm and k_norm)."""

    def forward(self, q, k, q_weight, k_weight):
        from liger_kernel.ops.rms_norm import LigerRMSNormFunction
        qo = LigerRMSNormFunction.apply(q, q_weight, self.eps, 0.0, "gemma", False)
        ko = LigerRMSNormFunction.apply(k, k_weight, self.eps, 0.0, "gemma", False)
        return qo, ko
