"""flash-linear-attention's Triton kernels (the `fla-core` distribution, import name `fla`) for the
ops of the linear-attention blocks (Qwen3-Next's gated DeltaNet, Mamba2): per-head L2 norm, the
gated RMSNorm on the block's output, the gated delta rule's decode step and the short causal conv.

Called through fla's forward functions, under no_grad, on the reference's inputs as the bench
passes them:
- l2_norm: `l2norm_fwd` (sum of squares in fp32, eps added to the sum, one rounding: the reference's
  definition, which names FLA's l2norm as its model).
- gated_rms_norm: `layer_norm_gated_fwd(..., is_rms_norm=True)` with the swish gate, which computes
  rms_norm(x) * w * silu(z), the reference's norm_before_gate=True form (Qwen3-Next). fla has no
  form that gates before the norm (Mamba2's): those shapes raise, and their peer verdict says so.
- gated_delta_rule_decode: `fused_recurrent_gated_delta_rule` over one token ([B, 1, H, K] views of
  the [B, H, K] inputs; grouped value heads are fla's GVA), log-space decay g, beta after the
  sigmoid, the initial state read and the final state returned (fp32), as the reference's
  functional form.
- causal_conv1d: `causal_conv1d(backend="triton", activation="silu")`, which takes [B, T, D] with any
  strides: the op's channels-first x [B, C, L] goes in as its transposed view (no copy; time is
  then the contiguous axis, which Triton specialises on), and fla's channels-last output comes back
  as the [B, C, L] view of it. A caller that needs that output contiguous pays one more pass.
- rope_neox / rope_interleaved: `rotary_embedding` (half-split or `interleaved=True`), which takes
  x [B, T, H, D] and cos/sin tables [TR, D/2] indexed by position offset, in x's dtype (it asserts
  that). The op's tokens carry arbitrary positions, so the rows they use are gathered first, cast
  to bf16 (one small pass over T x D table entries, about 1/(H_q + H_kv) of the q/k traffic), and
  the tokens go in as one sequence of T positions 0..T-1 over those rows; q and k are two calls.
  fla rotates with bf16 cos/sin where the reference rotates in fp32: within the bf16 tolerance.
  fla zero-fills its output before the kernel writes it (0.6.0, for rows a left-padded batch skips):
  one more write pass, which the peer's time includes as a caller's would.

fla imports a Triton GPU driver when it loads, so on a machine without a GPU these peers say so
and are not run (as Liger's).
"""
from __future__ import annotations

from aka.peers.base import LibraryPeer


class _FlaPeer(LibraryPeer):
    module = "fla.modules.norm.l2norm"  # the fla module the forward calls into
    cpu_reason = "fla's Triton kernels run on a GPU only (it loads a GPU driver on import)"


class L2NormPeer(_FlaPeer):
    """fla's l2norm forward (the one Qwen3-Next's gated DeltaNet applies to q and k heads)."""

    def forward(self, x):
        from fla.modules.norm.l2norm import l2norm_fwd
        return l2norm_fwd(x, eps=self.eps)[0]


class GatedRMSNormPeer(_FlaPeer):
    """fla's fused gated RMSNorm, y = rms_norm(x) * w * silu(z) (FusedRMSNormGated's forward)."""
    module = "fla.modules.norm.fused_norm_gate"

    def __init__(self, ref=None):
        super().__init__(ref)
        self.norm_before_gate = bool(getattr(ref, "norm_before_gate", True))

    def forward(self, x, z, weight):
        if not self.norm_before_gate:
            raise NotImplementedError("fla's gated RMSNorm normalises before the gate only; the shapes that gate "
                                      "first (Mamba2's norm_before_gate=False) have no fla form")
        from fla.modules.norm.fused_norm_gate import layer_norm_gated_fwd
        d = x.shape[-1]
        y = layer_norm_gated_fwd(x.reshape(-1, d), z.reshape(-1, d), weight, None, activation="swish",
                                 eps=self.eps, is_rms_norm=True)[0]
        return y.view(x.shape)


class GatedDeltaRuleDecodePeer(_FlaPeer):
    """One decode step through fla's fused recurrent gated delta rule (T = 1)."""
    module = "fla.ops.gated_delta_rule"

    def __init__(self, ref=None):
        super().__init__(ref)
        scale = getattr(ref, "scale", None)
        self.scale = None if scale is None else float(scale)

    def forward(self, q, k, v, g, beta, initial_state):
        from fla.ops.gated_delta_rule import fused_recurrent_gated_delta_rule
        one = lambda t: t.unsqueeze(1)  # noqa: E731 - [B, H, ...] -> [B, T=1, H, ...], a view
        o, state = fused_recurrent_gated_delta_rule(one(q), one(k), one(v), g=one(g), beta=one(beta),
                                                    scale=self.scale, initial_state=initial_state,
                                                    output_final_state=True)
        return {"out": o.squeeze(1).to(v.dtype), "final_state": state.to(initial_state.dtype)}


class CausalConv1dPeer(_FlaPeer):
    """fla's Triton short convolution (depthwise, causal, fused bias and SiLU, no carried state)."""
    module = "fla.modules.causal_conv1d"

    def forward(self, x, weight, bias):
        from fla.modules.causal_conv1d import causal_conv1d
        y, _ = causal_conv1d(x.transpose(1, 2), weight, bias, activation="silu", backend="triton")
        return y.transpose(1, 2)


class RotaryPeer(_FlaPeer):
    """fla's Triton rotary embedding on query and key, half-split (NeoX) pairs."""
    module = "fla.modules.rotary"
    interleaved = False

    def forward(self, positions, query, key, cos_sin_cache):
        from fla.modules.rotary import rotary_embedding
        half = cos_sin_cache.shape[-1] // 2
        rows = cos_sin_cache.index_select(0, positions).to(query.dtype)   # [T, D]: the rows these tokens use
        cos, sin = rows[:, :half].contiguous(), rows[:, half:].contiguous()
        rot = lambda x: rotary_embedding(x.contiguous().unsqueeze(0), cos, sin, interleaved=self.interleaved)[0]  # noqa: E731
        return rot(query), rot(key)


class RotaryInterleavedPeer(RotaryPeer):
    """fla's Triton rotary embedding on query and key, adjacent (GPT-J) pairs."""
    interleaved = True
