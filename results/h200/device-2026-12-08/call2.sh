#!/usr/bin/env bash
# The session's second call (twenty-sixth session), either card.
# On an H200: gemm_bf16's mid-M shapes re-tuned on this card. Its table was tuned on the H200 on 2026-12-03 and
# 2026-12-05, before DEEP_NARROW joined the grid (scripts/gpu_tune_gemm.py: 64x128x64 with 8 stages won M 96 and
# M 256 on the H100, 0.86x -> 0.97x of cuBLAS). Then the winners baked into this copy of the tree (bake_dispatch.py
# --merge: the other rows kept), the dispatch kernel's kb verify on every shape, and cuBLAS beside it through the
# harness (scripts/gpu_peers.sh); then mla_decode_attention/page_tile's first H200 verdict (1.31x split_dispatch
# on the H100; MLA is issue 21's 0.28 of the measured ceiling).
# On an H100: results/h100/device-2026-12-07f/next_call.sh (fused_moe beside its peer, then call_rest).
#   OUT=$OUT bash results/h200/device-2026-12-08/call2.sh   (carry .gpucache and .whl)
#   after: untar out.tgz; bake tune/tune.json here the same way (the same bytes: the kb verdict's source hash
#   then matches the committed kernel); kbv.tgz as in call_rest.sh
set -uo pipefail
T0=$(date +%s)
CALL_S=${AKA_CALL_S:-570}
if ! nvidia-smi --query-gpu=name --format=csv,noheader | grep -q H200; then
  AKA_CALL_S=$CALL_S OUT=$OUT bash results/h100/device-2026-12-07f/next_call.sh
  exit
fi
. scripts/device_lib.sh
call_begin "$CALL_S"
# the shapes under 0.9x of cuBLAS on 2026-12-05 (7: M 96 0.79x, 4: M 256 0.84x, 6: M 8 0.87x, 15: M 512 0.90x)
# and M 128 beside them
python3 scripts/gpu_tune_gemm.py "$OUT/tune" --ops gemm_bf16 --shapes 7,4,6,15,2 --deadline 110 > "$OUT/tune.log" 2>&1
echo "[tune rc=$? $(( $(date +%s) - T0 ))s]"; tail -12 "$OUT/tune.log"
python3 scripts/bake_dispatch.py "$OUT/tune/tune.json" --ops gemm_bf16 --merge > "$OUT/bake.log" 2>&1
echo "[bake rc=$? $(( $(date +%s) - T0 ))s]"; tail -5 "$OUT/bake.log"
sha256sum knowledge_base/kernels/gemm_bf16/dispatch.py > "$OUT/dispatch.sha256"
kb_copy /tmp/kbv
KBV_BUDGET=0 kbv 110 2 --op gemm_bf16
cp -r /tmp/kbv/results/kb/kernels/. results/kb/kernels/
# cuBLAS beside the fresh verdict, through the harness
mkdir -p "$OUT/peers"; AKA_PEER_OPS=gemm_bf16 AKA_PEER_JOBS=1 AKA_DEADLINE_S=$(( $(left) > 300 ? 130 : $(left) / 3 )) OUT=$OUT/peers \
  bash scripts/gpu_peers.sh > "$OUT/peers.log" 2>&1
echo "[peers rc=$? $(( $(date +%s) - T0 ))s]"; tail -8 "$OUT/peers.log"
(( $(left) > 60 )) && kbv $(( $(left) - 20 )) 2 --op mla_decode_attention --first mla_decode_attention --missing-first
kbv_pack
grep -v ': deferred\|━' "$OUT/kbverify.log" | tail -20
echo "call wall $(( $(date +%s) - T0 ))"
