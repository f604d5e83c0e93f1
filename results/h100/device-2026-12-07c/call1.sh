#!/usr/bin/env bash
# The session's first call (twenty-first session), either card.
# On an H200: fused_moe/grouped_dispatch's all-shape kb verify (results/h100/device-2026-12-07b's call 1,
# 287 s on the H100), gemm_bf16 and fp8_block_scaled_gemm dispatch (their code changed with the per-GPU
# tables: stale H200 verdicts), then kb verify of what has no current H200 verdict (device-2026-12-06g/call_rest.sh).
# On an H100: kb verify of the two GEMM dispatch kernels with their new H100 tables, then the production
# peers on the large shapes of the ops that carry the suite's weight and of the attention ops whose flex
# peers were never timed on a GPU (scripts/gpu_peers.sh), each op's best kernel on this card, the
# fresh GEMM verdicts included.
#   OUT=$OUT bash results/h100/device-2026-12-07c/call1.sh   (carry .gpucache and .whl)
#   after: untar each out.tgz (H200: a/, g/ and b/ each hold one with a kbv.tgz; H100: a/, with peers.tgz
#   beside it); collect_kbverify.py as in call_rest.sh
#   AKA_CALL_S: the call's seconds (default 565; less when the session's device budget is short)
set -uo pipefail
T0=$(date +%s)
CALL_S=${AKA_CALL_S:-565}
if nvidia-smi --query-gpu=name --format=csv,noheader | grep -q H200; then
  AKA_MOE_NO_BASELINES=1 AKA_DEADLINE_S=$(( CALL_S < 565 ? CALL_S - 130 : 330 )) OUT=$OUT/a bash scripts/gpu_moe_verify.sh
  # the GEMM dispatch kernels next, alone and without budget deferral (72 s for both on the H100,
  # results/h100/device-2026-12-07c call 2): call_rest.sh's --missing-first would put the kernels with no
  # H200 verdict at all ahead of these two stale ones, as it put rms_norm_backward's ahead on the H100
  ( . scripts/device_lib.sh; OUT=$OUT/g; mkdir -p $OUT; call_begin 110; kb_copy /tmp/kbv
    KBV_BUDGET=0 kbv 95 2 --op gemm_bf16,fp8_block_scaled_gemm --first gemm_bf16,fp8_block_scaled_gemm
    kbv_pack
    cp -r /tmp/kbv/results/kb/kernels/. results/kb/kernels/ )   # so call_rest.sh's copy finds them current
  AKA_DEADLINE_S=$(( CALL_S - ($(date +%s) - T0) )) OUT=$OUT/b bash results/h100/device-2026-12-06g/call_rest.sh
else
  mkdir -p $OUT/a
  ( . scripts/device_lib.sh; OUT=$OUT/a; call_begin $(( CALL_S * 45 / 100 )); trap - EXIT
    kb_copy /tmp/kbv
    kbv $(( $(left) - 20 )) 4 --op gemm_bf16,fp8_block_scaled_gemm,rms_norm_backward --missing-first \
      --first gemm_bf16,fp8_block_scaled_gemm
    kbv_pack
    grep -v ': deferred\|━' $OUT/kbverify.log | tail -30
    # the fresh verdicts into this copy of the tree, so the peers' plan takes the re-verified dispatch kernels
    cp -r /tmp/kbv/results/kb/kernels/. results/kb/kernels/
    pack_out )
  AKA_PEER_OPS=${AKA_PEER_OPS:-gemm_bf16,paged_decode_attention,fused_moe,prefill_attention,mla_decode_attention,softcap_window_decode_attention,fp8_block_scaled_gemm,rms_norm,silu_and_mul} \
    AKA_PEER_JOBS=4 AKA_DEADLINE_S=$(( CALL_S - ($(date +%s) - T0) )) bash scripts/gpu_peers.sh
fi
echo "call wall $(( $(date +%s) - T0 ))"
