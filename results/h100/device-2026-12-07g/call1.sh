#!/usr/bin/env bash
# 2026-12-07, twenty-fifth session: the first call, either card (moved into the GPU's results folder after it runs).
# 1. The harness's GPU acceptance for the head start sized to a call's host path (this session) and the
#    host-time note and the sandbox read (the last): the timing tests, host-bound ones included, then the
#    judge's escapes and the adversarial suite (pytest -m gpu -n 8), each under its own budget.
# 2. On an H200, with the time left: the GEMM and fp8 dispatch kernels' stale verdicts (kb verify; the H200
#    suite figure's largest item). On an H100: kb verify of kernels with no verdict there.
#   bash scripts/pre_device.sh here; on the device: OUT=$OUT bash results/device-next/call1.sh (carry .gpucache, .whl)
#   after: tar xzf judge.tgz / g/out.tgz; kbv.tgz as results/h100/device-2026-12-06g/call_rest.sh says
set -uo pipefail
T0=$(date +%s)
CALL_S=${AKA_CALL_S:-570}
AKA_T_COST=0 AKA_T_COST1=0 AKA_T_KBCOST=0 AKA_T_TIMING=${AKA_T_TIMING:-150} AKA_T_KBV=0 AKA_T_PAR=${AKA_T_PAR:-280} \
  AKA_PYTEST_N=8 OUT=$OUT bash scripts/gpu_judge_accept.sh > "$OUT/judge_accept.log" 2>&1
echo "[judge accept rc=$? $(( $(date +%s) - T0 ))s]"; grep '^\[' "$OUT/judge_accept.log"
L=$(( CALL_S - ($(date +%s) - T0) - 10 ))
if nvidia-smi --query-gpu=name --format=csv,noheader | grep -q H200; then
  (( L > 60 )) && ( . scripts/device_lib.sh; OUT=$OUT/g; call_begin "$L"; kb_copy /tmp/kbv
    KBV_BUDGET=0 kbv $(( L - 25 )) 2 --op gemm_bf16,fp8_block_scaled_gemm --first gemm_bf16,fp8_block_scaled_gemm
    kbv_pack; grep -v ': deferred\|━' $OUT/kbverify.log | tail -20 )
else
  (( L > 90 )) && AKA_DEADLINE_S=$L OUT=$OUT/g bash results/h100/device-2026-12-06g/call_rest.sh > "$OUT/rest.log" 2>&1
  tail -5 "$OUT/rest.log" 2>/dev/null
fi
echo "call wall $(( $(date +%s) - T0 ))"
