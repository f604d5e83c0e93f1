#!/usr/bin/env bash
# 2026-12-06 (ninth session), a short call (about 250 s of device time were left): kb verify of
# top_k_top_p_filter (tail_compact's first GPU verdict, radix_split and pivot_search beside it on the
# same card), then the peers' GPU tests (fla: l2_norm, gated_rms_norm, gated_delta_rule_decode,
# causal_conv1d, rope_neox, rope_interleaved; flex over the paged cache) in what time is left.
#   device: OUT=$OUT bash scripts/dev_call3.sh   (carry .gpucache and .whl)
set -uo pipefail
T0=$(date +%s); DEADLINE=${AKA_DEADLINE_S:-240}
export AKA_CACHE_DIR=$PWD/.gpucache
. scripts/device_lib.sh; device_env
device_provenance > $OUT/provenance.txt 2>&1; liger_install $OUT/provenance.txt $OUT/install.log; cat $OUT/provenance.txt
[[ -n ${AKA_NO_CAL:-} ]] || timeout 45 python3 -m aka.cli hw calibrate > $OUT/calibration.json 2> $OUT/calibration.log; echo "[calibrate rc=$? $(( $(date +%s) - T0 ))s]"
kb_copy /tmp/kbv; touch /tmp/kbv/stamp
timeout --signal=INT --kill-after=10 $(( $(left) - 15 )) python3 -m aka.cli kb verify --kb /tmp/kbv/knowledge_base --device cuda \
  --op top_k_top_p_filter --shapes all --jobs 3 --unlock-compiles --missing-first --first top_k_top_p_filter --timeout 100 \
  > $OUT/kbverify.log 2>&1
echo "[kb verify rc=$? $(( $(date +%s) - T0 ))s]"; tail -8 $OUT/kbverify.log
( cd /tmp/kbv/results/kb && find kernels -newer /tmp/kbv/stamp -type f | tar czf $OUT/kbv.tgz -T - )
t=$(( $(left) - 10 )); (( t > 20 )) && AKA_GPU_RESULTS=$OUT/peers_gpu.jsonl timeout $t python3 -m pytest -q -p no:cacheprovider -m gpu \
  tests/gpu/test_peers_gpu.py -rA --junitxml=$OUT/junit_peers.xml > $OUT/peers_gpu.log 2>&1
echo "[peers rc=$? $(( $(date +%s) - T0 ))s]"; tail -8 $OUT/peers_gpu.log; echo "wall $(( $(date +%s) - T0 ))"
