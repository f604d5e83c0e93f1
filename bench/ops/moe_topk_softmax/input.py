import torch


def _make_inputs(num_tokens, num_experts, dtype, device="cuda"):
    # Router logits come out of a bf16 gate GEMM; the fp32 shapes are that output
    # upcast, so distinct logits differ by at least one bf16 ulp and no fp32
    # rounding of exp() can reorder them. Exact ties (frequent on the bf16 grid)
    # are resolved by the reference's lower-id rule.
    logits = torch.randn(num_tokens, num_experts, device=device).to(torch.bfloat16)
    return {"gating_output": logits.to(getattr(torch, dtype))}
