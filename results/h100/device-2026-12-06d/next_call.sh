#!/usr/bin/env bash
# PREPARED, not yet run: the next session's first device call. It replaces ../device-2026-12-06c/next_call.sh
# (its H100 branch ran on 2026-12-06 as call 1 here).
# Either card: scripts/gpu_tune_gemm.py over the fp8 block-scaled GEMM's prefill shapes (110 s), each launch of fused_moe's and
# paged decode's weakest shapes timed apart (scripts/probe_kernel_launches.py, about a minute), then `aka kb verify --budget`
# with fp8_kv_decode_attention first, so f16_mma (fp16 MMAs, a third
# fewer instructions per cached token than split_kv_fp8 in the offline sm_90a compile, never timed) gets its
# first GPU verdict beside split_kv_fp8 and v_words on the same card; then the ops by suite weight, kernels
# with no verdict on this card first (on an H200: the 32 without a current H200 verdict; on an H100, most).
# --budget defers a kernel whose last recorded evaluation would not finish, instead of killing it.
#   here: bash scripts/pre_device.sh; the device, carrying .gpucache and .whl:
#   OUT=$OUT bash results/h100/device-2026-12-06d/next_call.sh
#   after: mkdir -p <folder>/kbv/results/kb && tar xzf <files_at>/out.tgz -C <folder> && tar xzf <folder>/kbv.tgz -C <folder>/kbv/results/kb
#   python scripts/collect_kbverify.py call1=<folder>/kbv --since <the call's date> --out <folder>/kbverify.tsv --merge
#   python scripts/kernels_side_by_side.py fp8_kv_decode_attention f16_mma,split_kv_fp8,v_words --base split_kv_fp8 --gpu <H100 or H200>
set -uo pipefail
T0=$(date +%s); DEADLINE=${AKA_DEADLINE_S:-560}
export AKA_CACHE_DIR=$PWD/.gpucache
. scripts/device_lib.sh
trap pack_out EXIT
device_open
# the fp8 GEMM's tune grid first (about 2 minutes): its FP8_OVERLAP configs (two or three programs per SM,
# so one program's MMAs run while another scales its fresh dot; ops/fp8_block_scaled_gemm.md) have never
# been timed; they sit third to sixth in the prefill list, beside the table's configs and torch's scaled_mm
timeout 150 python3 scripts/gpu_tune_gemm.py $OUT/tune_fp8 --deadline 110 --ops fp8_block_scaled_gemm --shapes 7,9,10,11,12,13,14,15 > $OUT/tune_fp8.log 2>&1
echo "[tune fp8 rc=$? $(( $(date +%s) - T0 ))s]"; tail -20 $OUT/tune_fp8.log
# where the suite's heaviest op loses at prefill (fused_moe 0.30-0.61 of the datasheet at shapes 8-15 on the
# H200 suite run, while the dense GEMM reaches 0.9 of the measured ceiling at like sizes) and where paged decode
# stays under 0.8 (shapes 0, 6, 5): each launch of one forward timed on its own (about a minute)
timeout 90 python3 scripts/probe_kernel_launches.py fused_moe grouped_dispatch --shapes 13,15,10,8 --reps 10 \
  --out $OUT/moe_launches.json > $OUT/moe_launches.log 2>&1
echo "[moe launches rc=$? $(( $(date +%s) - T0 ))s]"; tail -5 $OUT/moe_launches.log
timeout 45 python3 scripts/probe_kernel_launches.py paged_decode_attention split_dispatch --shapes 0,6,5 --reps 10 \
  --out $OUT/paged_launches.json > $OUT/paged_launches.log 2>&1
echo "[paged launches rc=$? $(( $(date +%s) - T0 ))s]"; tail -4 $OUT/paged_launches.log
FIRST=fp8_kv_decode_attention,$KBV_ORDER   # device_lib.sh: the ops by suite weight
kb_copy /tmp/kbv; touch /tmp/kbv/stamp
t=$(( $(left) - 25 ))
timeout --signal=INT --kill-after=10 $(( t + 10 )) python3 -m aka.cli kb verify --kb /tmp/kbv/knowledge_base --device cuda \
  --shapes all --jobs 4 --unlock-compiles --first "$FIRST" --missing-first --timeout "$t" --budget "$t" > $OUT/kbverify.log 2>&1
echo "[kb verify rc=$? $(( $(date +%s) - T0 ))s]"
( cd /tmp/kbv/results/kb && find kernels -newer /tmp/kbv/stamp -type f | tar czf $OUT/kbv.tgz -T - )
tar tzf $OUT/kbv.tgz | wc -l; echo "deferred: $(grep -c ': deferred' $OUT/kbverify.log)"
grep -v ': deferred\|━' $OUT/kbverify.log | tail -16
echo "wall $(( $(date +%s) - T0 ))"
