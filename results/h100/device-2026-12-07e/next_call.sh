#!/usr/bin/env bash
# The next session's first call, either card.
# On an H200: 07d's call2.sh (its H200 branch: the GEMM dispatch verify, fused_moe grouped_dispatch over all
# shapes, then what has no H200 verdict; chunked_lse's LANE 8 verdict comes with the last).
# On an H100: why fused_moe/grouped_dispatch took 5.7x (shape 3) and 2.1x (shape 11) its own kb verify time in
# call 2 here, with the peer in its rounds. Shapes 3 and 11, one evaluation at a time, nothing else on the GPU:
#   (a) as call 2 (peer and kernel in the same rounds), compiles under the lock;
#   (b) the kernel alone (AKA_PEER_KERNEL_ONLY=1);
#   (c) (a) again, a repeat, only where (a) was slow at shape 3.
# (a) slow and (b) at the verdict's times: the peer's presence is what slows it (then look at memory: the peer's
# cached fp32 buffers, expandable segments); all three at the verdict's times: call 2's run was disturbed.
# Then the peer beside the kernel on the four shapes no call has compared (6, 7, 14, 15).
# Before (a)-(c), scripts/host_launch_probe.py: whether the kernel's host path outruns the head start.
#   AKA_CALL_S=540 OUT=$OUT bash results/h100/device-2026-12-07e/next_call.sh   (carry .gpucache and .whl)
# an H200: its branch of 07d's call2.sh, the whole call
nvidia-smi --query-gpu=name --format=csv,noheader | grep -q H200 \
  && exec env AKA_CALL_S="${AKA_CALL_S:-540}" bash results/h100/device-2026-12-07d/call2.sh
set -uo pipefail
T0=$(date +%s)
CALL_S=${AKA_CALL_S:-540}
run() {  # run NAME SHAPES SECONDS [VAR=VALUE ...]: one gpu_peers.sh over fused_moe, its own cache (no resume)
  local name=$1 shapes=$2 secs=$3; shift 3
  mkdir -p "$OUT/$name"
  env "$@" AKA_CACHE_DIR=/tmp/cache_$name AKA_PEER_OPS=fused_moe AKA_PEER_SHAPES="fused_moe=$shapes" \
    AKA_PEER_JOBS=1 AKA_DEADLINE_S=$secs OUT=$OUT/$name bash scripts/gpu_peers.sh > "$OUT/$name.log" 2>&1
  echo "[$name rc=$? $(( $(date +%s) - T0 ))s]"
}
# First, outside the harness: each call's host time against its GPU time (idle CPU, then beside 8 spinning
# processes). The harness times these one-set shapes with events after a ~200 us GPU head start, so a
# host path longer than that plus the GPU time is timed at the host's pace.
mkdir -p "$OUT/probe"
timeout 150 python3 scripts/host_launch_probe.py fused_moe 2,3,10,11 --load 8 --out "$OUT/probe/probe.jsonl" \
  --impl peer,knowledge_base/kernels/fused_moe/grouped_dispatch.py > "$OUT/probe/probe.md" 2>&1
echo "[probe rc=$? $(( $(date +%s) - T0 ))s]"
# the harness's own host-bound note (aka/evaluate/timing.py host_bound_note), its GPU test
AKA_GPU_RESULTS=$OUT/probe/gpu_host_bound.jsonl PYTHONPATH=$PWD timeout 90 python3 -m pytest -q -m gpu -p no:cacheprovider \
  tests/gpu/test_measurement_gpu.py -k host_bound > "$OUT/probe/gpu_host_bound.log" 2>&1
echo "[host-bound gpu test rc=$? $(( $(date +%s) - T0 ))s]"
run a 3,11 130
run b 3,11 100 AKA_PEER_KERNEL_ONLY=1
# (c), the repeat of (a), only where (a) reproduced the slow shape 3 (kernel over 1000 us; its verdict 448)
slow=$(python3 -c "
import json, sys
for l in open(sys.argv[1]):
    r = json.loads(l)
    if r.get('impl') != 'peer' and str(r.get('shape')) == '3' and (r.get('time_us') or 0) > 1000: print(1)
" "$OUT/a/work/runs/fused_moe/records.jsonl" 2>/dev/null)
[[ -n $slow ]] && run c 3,11 130
L=$(( CALL_S - ($(date +%s) - T0) - 10 ))
(( L > 60 )) && run d 6,7,14,15 $L AKA_PEER_UNLOCK=1
echo "call wall $(( $(date +%s) - T0 ))"
