#!/usr/bin/env bash
# Call 2 as it ran (one command line, here split): the two GEMM dispatch kernels' kb verify with their new
# H100 tables, no budget deferral (call 1's verify had deferred them behind rms_norm_backward's kernels),
# then the cuBLAS peer against the fresh dispatch verdict. The peer half did not run: T0 is set inside the
# subshell only, so `$(( 290 - (T1 - T0) ))` failed ("T0: unbound variable"); call3.sh ran it instead.
set -u; . scripts/device_lib.sh; mkdir -p $OUT/a; O=$OUT
( OUT=$O/a; call_begin 200; trap - EXIT; kb_copy /tmp/kbv; touch /tmp/kbv/stamp
  KBV_BUDGET=0 kbv 175 2 --op gemm_bf16,fp8_block_scaled_gemm --first gemm_bf16,fp8_block_scaled_gemm
  (cd /tmp/kbv/results/kb && find kernels -newer /tmp/kbv/stamp -type f | tar czf $OUT/kbv.tgz -T -)
  grep -v '━' $OUT/kbverify.log | tail -12; cp -r /tmp/kbv/results/kb/kernels/. results/kb/kernels/; pack_out )
T1=$(date +%s); AKA_PEER_OPS=gemm_bf16 AKA_PEER_JOBS=1 AKA_DEADLINE_S=$(( 290 - (T1 - T0) )) OUT=$O bash scripts/gpu_peers.sh 2>&1 | tail -8
echo "wall $(( $(date +%s) - T0 ))"
