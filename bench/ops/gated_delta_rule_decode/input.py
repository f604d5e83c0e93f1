import torch
import torch.nn.functional as F


def _make_inputs(batch, num_k_heads, num_v_heads, head_k_dim, head_v_dim, device="cuda"):
    """Qwen3-Next's decode inputs after its projections.

    q, k are l2-normalised per head (use_qk_l2norm_in_kernel). g = -exp(A_log) *
    softplus(a + dt_bias) with exp(A_log) ~ U(1, 16) (Mamba2's A init range) and softplus
    mostly 0.005..0.2, so the per-step decay exp(g) has median ~0.8 and spans (0.05, 1).
    beta = sigmoid(b), b ~ N(0,1). The state is what a long context leaves: about Dk
    key-value associations, entries ~N(0,1).
    """
    q = F.normalize(torch.randn(batch, num_k_heads, head_k_dim, device=device), dim=-1)
    k = F.normalize(torch.randn(batch, num_k_heads, head_k_dim, device=device), dim=-1)
    v = torch.randn(batch, num_v_heads, head_v_dim, device=device, dtype=torch.bfloat16)
    A = torch.empty(num_v_heads, device=device).uniform_(1.0, 16.0)
    dt = F.softplus(torch.randn(batch, num_v_heads, device=device) - 3.5)
    g = -A * dt
    beta = torch.sigmoid(torch.randn(batch, num_v_heads, device=device))
    state = torch.randn(batch, num_v_heads, head_k_dim, head_v_dim, device=device)
    return {"q": q.to(torch.bfloat16), "k": k.to(torch.bfloat16), "v": v,
            "g": g, "beta": beta, "initial_state": state}
