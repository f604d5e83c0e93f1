#!/usr/bin/env bash
# Call 3 as it ran: gemm_bf16/dispatch (its H100 table) against its cuBLAS peer (F.linear) on the op's 15
# large shapes, in one `aka bench run` (the kernel named directly: call 1's plan had taken grouped_tiles,
# the best H100 kernel whose verdict was current before call 2).
. scripts/device_lib.sh; device_env; mkdir -p /tmp/c/gemm_bf16 $OUT/runs; cp knowledge_base/kernels/gemm_bf16/dispatch.py /tmp/c/gemm_bf16/
timeout --signal=INT --kill-after=10 200 python3 -m aka.cli bench run --impl peer,/tmp/c --ops gemm_bf16 \
  --shapes 0,1,2,3,4,5,7,8,9,10,11,12,13,14,15 --no-beside --timeout 195 --out $OUT/runs/gemm_bf16 > $OUT/gemm_peer.log 2>&1
echo rc=$?; tail -5 $OUT/gemm_peer.log; cd $OUT && tar czf peers_gemm.tgz runs gemm_peer.log && rm -rf runs gemm_peer.log; ls -la $OUT
