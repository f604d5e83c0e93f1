#!/usr/bin/env bash
# One device call: re-tune gemm_bf16's dispatch table on the full (extended) grid, bake it into the
# device's copy of the kernel, then time the dispatching kernels against their production peers
# through the harness (`aka bench run --impl peer,...`, judge and runner) on each op's large shapes.
# Everything lands in $OUT/tp.tgz (the device returns at most 8 files). Then, here:
#   tar xzf <files_at>/tp.tgz -C /tmp/tp && python scripts/bake_dispatch.py /tmp/tp/gemm/tune.json
#   (the same bake on the same JSON gives the file the harness measured: tp/baked.sha256 says so)
#
#   device: AKA_CACHE_DIR=$PWD/.gpucache OUT=$OUT bash scripts/gpu_tune_peers.sh
#   env: AKA_DEADLINE_S (default 560), AKA_TP_OPS (default below), AKA_TP_JOBS (default 4)
set -uo pipefail
: "${OUT:?set OUT to a results folder}"
cd "$(dirname "$0")/.."
T0=$(date +%s)
DEADLINE=${AKA_DEADLINE_S:-560}
OPS=${AKA_TP_OPS:-gemm_bf16 fused_moe fp8_block_scaled_gemm rms_norm}
JOBS=${AKA_TP_JOBS:-4}
. scripts/device_lib.sh
device_env
W=$OUT/tp; mkdir -p "$W/runs"
pack() {
  echo "total wall seconds: $(( $(date +%s) - T0 ))" | tee -a "$W/steps.txt"
  python3 -m aka.cli bench peers "$W"/runs/*/ --out "$W/PEERS.md" > "$W/peers_table.log" 2>&1
  tar czf "$OUT/tp.tgz" -C "$OUT" tp && rm -rf "$W"
  ls -la "$OUT"
}
trap pack EXIT
device_provenance > "$W/provenance.txt" 2>&1
liger_install "$W/provenance.txt" "$W/install.log"

# 1. the GEMM table: every shape on the whole grid (about 60 s), baked into this copy of the kernel
if [[ " $OPS " == *" gemm_bf16 "* ]]; then
  s=$(date +%s)
  timeout 150 python3 scripts/gpu_tune_gemm.py "$W/gemm" --ops gemm_bf16 --deadline 110 > "$W/gemm.log" 2>&1
  echo "[tune gemm_bf16 rc=$? wall=$(( $(date +%s) - s ))s]" | tee -a "$W/steps.txt"
  python3 scripts/bake_dispatch.py "$W/gemm/tune.json" --ops gemm_bf16 >> "$W/steps.txt" 2>&1 \
    && sha256sum knowledge_base/kernels/gemm_bf16/dispatch.py > "$W/baked.sha256"
fi

# 2. the candidates: one impl folder per kernel (aka bench run takes one candidate per op per folder)
K=knowledge_base/kernels
declare -A CANDS=([gemm_bf16]="dispatch" [fused_moe]="grouped_dispatch" [fp8_block_scaled_gemm]="dispatch"
                  [rms_norm]="rowwise persistent" [paged_decode_attention]="split_dispatch")
# large shapes (roofline time >= LARGE_SOL_US on the H200 datasheet), as scripts/peer_plan.py computed them
declare -A SHAPES=([gemm_bf16]="0,1,2,3,4,5,7,8,9,10,11,12,13,14,15" [fused_moe]="0,1,2,3,4,5,6,7,8,9,10,11,12,13,14,15"
                   [fp8_block_scaled_gemm]="2,3,4,7,8,9,10,11,12,13,15" [rms_norm]="9,10,11,12,13,14")
one() {
  local op=$1 impls="peer" k t
  for k in ${CANDS[$op]}; do mkdir -p "$W/c_$k/$op"; cp "$K/$op/$k.py" "$W/c_$k/$op/"; impls="$impls,$W/c_$k"; done
  t=$(( $(left) - 25 ))
  if (( t < 20 )); then echo "skipped (deadline): $op" | tee -a "$W/steps.txt"; return 0; fi
  local s=$(date +%s)
  timeout --signal=INT --kill-after=10 "$t" python3 -m aka.cli bench run --impl "$impls" --ops "$op" \
    --shapes "${SHAPES[$op]}" --no-beside --timeout "$t" --out "$W/runs/$op" > "$W/runs/$op.log" 2>&1
  echo "[$op rc=$? wall=$(( $(date +%s) - s ))s shapes ${SHAPES[$op]}]" | tee -a "$W/steps.txt"
}
for op in $OPS; do
  while (( $(jobs -rp | wc -l) >= JOBS )); do wait -n; done
  one "$op" &
done
wait
