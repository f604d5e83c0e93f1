#!/usr/bin/env bash
# The next session's first call, either card: what this session's one call (call1.sh) left.
# 1. The judge's escapes and the whole GPU adversarial suite (pytest -m gpu -n 8, now -v so a budget cut
#    still names each verdict), with the host-bound candidate test as mended after call 1 beside them.
# 2. With the time left: on an H200, 07d's queue (../device-2026-12-07d/call2.sh: the GEMM and fp8 dispatch
#    verify, fused_moe grouped_dispatch, kernels with no H200 verdict); on an H100, 07f's next call
#    (fused_moe beside its peer at shapes 14, 15 and 3, then ops with no H100 verdict).
#   bash scripts/pre_device.sh here; on the device: OUT=$OUT bash results/h100/device-2026-12-07g/next_call.sh
#   (carry .gpucache and .whl); results in $OUT/judge.tgz and $OUT/q/out.tgz
# Superseded on 2026-12-08 before it ran: results/h200/device-2026-12-08/call1.sh runs the same judge part (240 s)
# and, on an H200, the gemm re-tune in place of 07d's queue (on an H100 the same 07f queue as here).
exec bash results/h200/device-2026-12-08/call1.sh
