#!/usr/bin/env bash
# A call (either card): fused_moe/grouped_dispatch's kb verify over all shapes, with torch.compile of the
# reference compiled beside it rather than inside it. The reference unrolls its 128-way expert loop, so
# its compile takes minutes per shape (scripts/probe_reference_compile.py: 119 s for one 128-expert
# shape with Inductor on a 2-core CPU) and three H100 verifies stopped at 300 s. Here `aka bench run
# --impl reference,compile` fills the cache's baseline timings (four jobs: meta.json's bench split)
# while the verify's correctness stage runs; the verify's timing then takes each shape's eager and
# compile figures from the cache (the same key: reference, shape, GPU, torch, triton), compiling
# itself only the shapes the warm-up has not reached. pack_out brings the cache back (baselines.tgz;
# scripts/device_between.sh), so a verify cut off here finds them in the session's next call.
#   here: bash scripts/pre_device.sh; the device, carrying .gpucache and .whl:
#   OUT=$OUT bash scripts/gpu_moe_verify.sh      (AKA_DEADLINE_S: the call's seconds, default 560)
#   after: bash scripts/device_between.sh <files_at>; mkdir -p /tmp/kbvN/results/kb &&
#   tar xzf /tmp/aka-between/<call>/out/kbv.tgz -C /tmp/kbvN/results/kb; then scripts/collect_kbverify.py
set -uo pipefail
. scripts/device_lib.sh
call_begin 560
kb_copy /tmp/kbv
mkdir -p /tmp/kbv_moe && mv /tmp/kbv/knowledge_base/kernels/fused_moe/{atomic_combine,sorted_grouped}.py /tmp/kbv_moe/
ls "$AKA_CACHE_DIR"/baselines/fused_moe-* 2>/dev/null | wc -l | sed 's/^/baselines cached at the start: /'
( timeout --signal=INT --kill-after=10 $(( $(left) - 40 )) python3 -m aka.cli bench run --impl reference,compile \
    --ops fused_moe --device cuda --jobs 4 --out /tmp/warm_moe > $OUT/warm_moe.log 2>&1
  echo "[warm rc=$? $(( $(date +%s) - T0 ))s]" >> $OUT/warm_moe.log ) &
WARM=$!
# AKA_MOE_NO_BASELINES=1: the verify measures no baselines itself (kb verify --no-baselines): the kernel's
# objective fits the call whatever the warm-up reaches; shapes it has not reached get no compile figure
KBV_BUDGET=0 kbv $(( $(left) - 25 )) 1 --op fused_moe ${AKA_MOE_NO_BASELINES:+--no-baselines}
pkill -INT -f "aka.cli bench run --impl reference,compile" 2>/dev/null; wait $WARM 2>/dev/null
tail -5 $OUT/warm_moe.log
ls "$AKA_CACHE_DIR"/baselines/fused_moe-* 2>/dev/null | wc -l | sed 's/^/baselines cached at the end: /'
mv /tmp/kbv_moe/*.py /tmp/kbv/knowledge_base/kernels/fused_moe/
kbv_pack
grep -v '━' $OUT/kbverify.log | tail -8
echo "wall $(( $(date +%s) - T0 ))"
