import torch
import torch.nn as nn


class Model(nn.Module):
    """One decode step of the gated delta rule (Gated DeltaNet, Yang, Kautz & Hatamizadeh 2024,
    as used by Qwen3-Next's linear-attention layers), functional form.

    Per sequence b and value head h, with state S [Dk, Dv] (keys index rows, S^T maps a key to
    a value), decay alpha = exp(g) and write strength beta:

        S_t = alpha * (I - beta k k^T) S_{t-1} + beta k v^T
            = S' + k (beta (v - S'^T k))^T,   S' = alpha S_{t-1}
        o_t = S_t^T q * scale

    Inputs: q, k [B, Hk, Dk] (already l2-normalised), v [B, Hv, Dv], g [B, Hv] fp32 (log decay,
    <= 0), beta [B, Hv] fp32 in (0, 1), initial_state [B, Hv, Dk, Dv] fp32, which is not
    modified. Grouped value heads: Hv is a multiple of Hk and value head h uses q, k head
    h // (Hv // Hk) (q and k repeat_interleave'd to Hv heads). Math in fp32.
    Returns {"out": [B, Hv, Dv] in v's dtype, "final_state": [B, Hv, Dk, Dv] in the state dtype}.
    """

    def __init__(self, scale):
        super().__init__()
        self.scale = scale

    def forward(self, q, k, v, g, beta, initial_state):
        acc = torch.promote_types(initial_state.dtype, torch.float32)
        out_dtype = v.dtype
        group = v.shape[1] // q.shape[1]
        q = q.to(acc).repeat_interleave(group, dim=1)                      # [B, Hv, Dk]
        k = k.to(acc).repeat_interleave(group, dim=1)
        v = v.to(acc)
        state = initial_state.to(acc) * torch.exp(g.to(acc))[:, :, None, None]
        recalled = (k[:, :, :, None] * state).sum(dim=2)                    # S'^T k  [B, Hv, Dv]
        delta = beta.to(acc)[:, :, None] * (v - recalled)
        state = state + k[:, :, :, None] * delta[:, :, None, :]
        out = (q[:, :, :, None] * state).sum(dim=2) * self.scale            # S^T q   [B, Hv, Dv]
        return {"out": out.to(out_dtype),
                "final_state": state.to(initial_state.dtype)}
